//! Connects and sends made for CMD. netbox answers every notified `connect` and every
//! send that names an address itself (a call let run could be pointed elsewhere after
//! netbox looked: writewatch.rs, sender.rs), so the call runs here, on a copy of the
//! caller's socket, and its result is the caller's. Such a call can wait (a Unix listener
//! whose backlog is full, a TCP handshake, a full receive queue), and the watcher's one
//! thread must not: it answers every other notified call of the sandbox, including the
//! writes of the very server a connect may be waiting for. So each runs on a worker: idle
//! ones are reused, and new ones are started up to a bound; past it calls queue, which
//! slows only CMD's own.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use crate::sys::seccomp;

/// Workers at most: a call that waits forever holds one (only a command's own servers
/// make one wait), and the queue behind them holds the rest. Many, so that calls waiting
/// on each other (a sender blocked until a reader connects) are rarely queued behind one
/// another; each is a thread with a 64 KiB stack.
const MAX_WORKERS: usize = 512;

/// Run once a connect has returned, with its errno if it failed.
pub type AfterConnect = Box<dyn FnOnce(Result<(), i32>) + Send>;

/// What a job does on the caller's socket.
pub enum Op {
    /// Connect to the address, as bytes (a Unix path already replaced by
    /// `/proc/self/fd/N` of a held file).
    Connect(Vec<u8>),
    /// Send the messages read (sender.rs).
    Send(crate::supervise::sender::Send),
}

/// One call to make and answer.
pub struct Job {
    /// The notification it answers.
    pub id: u64,
    /// A copy of the caller's socket.
    pub socket: OwnedFd,
    pub op: Op,
    /// What the call's addresses name, which must stay open until it is done.
    pub hold: Vec<OwnedFd>,
    /// Run once the connect has returned (with its errno, if it failed), before the
    /// caller is answered: a record of a connection made.
    pub after: Option<AfterConnect>,
}

pub struct Connector {
    jobs: Sender<Job>,
    shared: Arc<Shared>,
}

struct Shared {
    listener: OwnedFd,
    queue: Mutex<Receiver<Job>>,
    idle: AtomicUsize,
    workers: AtomicUsize,
}

impl Connector {
    /// A connector answering on (a copy of) `listener`.
    pub fn new(listener: &OwnedFd) -> std::io::Result<Connector> {
        let (jobs, queue) = channel();
        Ok(Connector {
            jobs,
            shared: Arc::new(Shared {
                listener: listener.try_clone()?,
                queue: Mutex::new(queue),
                idle: AtomicUsize::new(0),
                workers: AtomicUsize::new(0),
            }),
        })
    }

    /// Queues `job`, starting a worker if none is idle (and the bound allows). If no
    /// worker can run at all, the connect is made here rather than never.
    pub fn submit(&self, job: Job) {
        let shared = &self.shared;
        let idle = shared.idle.load(Ordering::Acquire);
        let workers = shared.workers.load(Ordering::Acquire);
        let mut started = workers > 0;
        if idle == 0 && workers < MAX_WORKERS {
            shared.workers.fetch_add(1, Ordering::AcqRel);
            let worker = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name("netbox-connect".into())
                .stack_size(64 << 10)
                .spawn(move || worker.work());
            if spawned.is_ok() {
                started = true;
            } else {
                shared.workers.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if !started {
            run(&shared.listener, job);
            return;
        }
        if let Err(returned) = self.jobs.send(job) {
            run(&shared.listener, returned.0);
        }
    }
}

impl Shared {
    fn work(&self) {
        // Signals are netbox's signal thread's: none interrupts a connect made here.
        let _ = nix::sys::signal::pthread_sigmask(
            nix::sys::signal::SigmaskHow::SIG_BLOCK,
            Some(&nix::sys::signal::SigSet::all()),
            None,
        );
        loop {
            self.idle.fetch_add(1, Ordering::AcqRel);
            let job = {
                let Ok(queue) = self.queue.lock() else {
                    return;
                };
                queue.recv()
            };
            self.idle.fetch_sub(1, Ordering::AcqRel);
            match job {
                Ok(job) => run(&self.listener, job),
                // The connector is gone: the run is over.
                Err(_) => return,
            }
        }
    }
}

/// Makes the call and answers the caller with its result.
fn run(listener: &OwnedFd, job: Job) {
    let result = match &job.op {
        Op::Connect(address) => {
            crate::sys::socket::connect_raw(job.socket.as_fd(), address).map(|()| 0)
        }
        Op::Send(send) => crate::supervise::sender::send(&job.socket, send),
    };
    drop(job.hold);
    if let Some(after) = job.after {
        after(result.map(|_| ()));
    }
    // A caller killed meanwhile is answered with ENOENT: nothing to do.
    let _ = seccomp::answer(listener.as_fd(), job.id, result);
}
