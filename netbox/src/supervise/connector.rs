//! Connects and sends made for CMD. netbox answers every notified `connect` and every
//! send that names an address itself (a call let run could be pointed elsewhere after
//! netbox looked: writewatch.rs, sender.rs), so the call runs here, on a copy of the
//! caller's socket, and its result is the caller's. Such a call can wait (a Unix listener
//! whose backlog is full, a TCP handshake, a full receive queue), and the watcher's one
//! thread must not: it answers every other notified call of the sandbox, including the
//! writes of the very server a connect may be waiting for. So each runs on a worker: idle
//! ones are reused, and new ones are started up to a bound; past it calls queue, which
//! slows only CMD's own.
//!
//! Two things keep CMD from holding workers it no longer waits on. A call whose caller is
//! gone (killed while it waits: the kernel would have ended the call with it) is ended:
//! a reaper looks at the running calls now and then and wakes each such worker with a
//! signal, which interrupts the call. And pid 1's own calls (the live probe's, also the
//! one after `--fetch`'s cut) never queue behind CMD's: they have a worker of their own,
//! kept between calls (the probe makes several one after another, each waiting for the
//! last, and a thread started for each cost ~35 us of it), and one that finds it busy
//! gets a thread of its own.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::supervise::budget::{Amount, Budget, Held};
use crate::sys::seccomp;

/// Workers at most: a call that waits forever holds one (only a command's own servers
/// make one wait), and the queue behind them holds the rest. Many, so that calls waiting
/// on each other (a sender blocked until a reader connects) are rarely queued behind one
/// another; each is a thread with a 64 KiB stack.
const MAX_WORKERS: usize = 512;

/// Bytes read from CMD that all workers hold at most (sender.rs): memory outside CMD's
/// own limit, so a bound of its own.
const SEND_BUDGET: usize = 32 << 20;

/// Calls waiting for a worker at most: past it, a call fails at once with ENOBUFS (the
/// kernel's answer when it is out of room for a socket's buffers) rather than make netbox
/// hold what it read for it (its addresses, a copy of its socket, the files they name).
const MAX_QUEUED: usize = 1024;

/// How often the reaper looks for calls whose callers are gone.
const REAP_EVERY: Duration = Duration::from_millis(100);

/// Run once a connect has returned, with its errno if it failed.
pub type AfterConnect = Box<dyn FnOnce(Result<(), i32>) + Send>;

/// What a job does on the caller's socket.
pub enum Op {
    /// Connect to the address, as bytes (a Unix path already replaced by
    /// `/proc/self/fd/N` of a held file).
    Connect(Vec<u8>),
    /// Send the messages (sender.rs).
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
    /// Run once the call has returned (with its errno, if it failed), before the
    /// caller is answered: a record of a connection made or a datagram sent.
    pub after: Option<AfterConnect>,
}

/// A job with what it holds of the budget (its socket's copy and the files it names).
struct Queued {
    job: Job,
    _held: Option<Held>,
}

pub struct Connector {
    jobs: Sender<Queued>,
    shared: Arc<Shared>,
    /// pid 1's worker, if it could be started.
    own: Option<OwnWorker>,
}

/// pid 1's worker: a thread that makes pid 1's calls one after another. Started before
/// the sandbox's listener is known (while the sandbox sets up), so the probe's first call
/// does not wait for a thread to start either.
pub struct OwnWorker {
    jobs: Sender<(Arc<Shared>, Job)>,
    /// It waits for a call: set by it, taken by `submit_own`.
    idle: Arc<AtomicBool>,
}

impl OwnWorker {
    /// Starts the thread; `None` if it cannot be (pid 1's calls then each get one).
    pub fn start() -> Option<OwnWorker> {
        // Before the thread unblocks the wake-up signal (whose default action would end
        // netbox), as Connector::new does for the others.
        crate::sys::process::install_wakeup().ok()?;
        let (jobs, queue) = channel::<(Arc<Shared>, Job)>();
        let idle = Arc::new(AtomicBool::new(true));
        let ready = Arc::clone(&idle);
        std::thread::Builder::new()
            .name("netbox-connect1".into())
            .stack_size(64 << 10)
            .spawn(move || {
                block_signals();
                // Ends when the connector does (its sender dropped).
                while let Ok((shared, job)) = queue.recv() {
                    // Idle again just before the caller is answered, and not after:
                    // answered, pid 1 runs at once, here (seccomp's synchronous wake-up),
                    // and its next call may already be handed to this thread.
                    shared.run_then(job, None, || ready.store(true, Ordering::Release));
                }
            })
            .ok()?;
        Some(OwnWorker { jobs, idle })
    }

    /// Hands `job` over if the worker waits for one; gives it back if it is busy.
    fn take(&self, shared: &Arc<Shared>, job: Job) -> Result<(), Job> {
        // Taken here, set again by the worker once it is done with the call.
        if !self.idle.swap(false, Ordering::AcqRel) {
            return Err(job);
        }
        self.jobs
            .send((Arc::clone(shared), job))
            .map_err(|returned| returned.0 .1)
    }
}

struct Shared {
    listener: OwnedFd,
    queue: Mutex<Receiver<Queued>>,
    idle: AtomicUsize,
    workers: AtomicUsize,
    /// Jobs handed over and not yet taken by a worker.
    queued: AtomicUsize,
    budget: Arc<Budget>,
    /// The calls being made: notification id to the worker's thread id.
    running: Mutex<HashMap<u64, u32>>,
    /// The connector is gone: the reaper stops once no call runs.
    closed: AtomicBool,
}

/// The reaper's thread, started before the sandbox's listener is known (while the sandbox
/// sets up, like pid 1's worker): it waits for the connector's calls, then looks at them.
pub struct Reaper {
    calls: Sender<Arc<Shared>>,
}

impl Reaper {
    /// Starts the thread (if it cannot be, the connector tries again itself).
    pub fn start() -> std::io::Result<Reaper> {
        let (calls, given) = channel::<Arc<Shared>>();
        std::thread::Builder::new()
            .name("netbox-reaper".into())
            .stack_size(64 << 10)
            .spawn(move || {
                // Never given: the run ended before the sandbox's listener came.
                if let Ok(shared) = given.recv() {
                    shared.reap();
                }
            })?;
        Ok(Reaper { calls })
    }
}

impl Connector {
    /// A connector answering on (a copy of) `listener`, with pid 1's calls made on `own`
    /// and calls whose callers are gone ended by `reaper` (or a reaper started here).
    pub fn new(
        listener: &OwnedFd,
        own: Option<OwnWorker>,
        reaper: Option<Reaper>,
    ) -> std::io::Result<Connector> {
        crate::sys::process::install_wakeup()?;
        let (jobs, queue) = channel();
        let shared = Arc::new(Shared {
            listener: listener.try_clone()?,
            queue: Mutex::new(queue),
            idle: AtomicUsize::new(0),
            workers: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            budget: Budget::new(Amount {
                bytes: SEND_BUDGET,
                fds: fd_budget(),
            }),
            running: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        });
        let reaper = match reaper {
            Some(reaper) => reaper,
            None => Reaper::start()?,
        };
        // The thread waits for these until it is given them: only a thread already gone
        // (which would be a bug) refuses them.
        reaper
            .calls
            .send(Arc::clone(&shared))
            .map_err(|_| std::io::Error::other("the reaper's thread is gone"))?;
        Ok(Connector { jobs, shared, own })
    }

    /// Queues `job`, starting a worker if none is idle (and the bound allows). If no
    /// worker can run at all, the call is made here rather than never. A call that would
    /// pass the queue's bound, or the budget's descriptors, fails at once (ENOBUFS).
    pub fn submit(&self, job: Job) {
        let shared = &self.shared;
        let fds = 1 + job.hold.len();
        let held = shared.budget.try_take(Amount { bytes: 0, fds });
        if held.is_none() || shared.queued.load(Ordering::Acquire) >= MAX_QUEUED {
            let _ = seccomp::answer(shared.listener.as_fd(), job.id, Err(libc::ENOBUFS));
            return;
        }
        let queued = Queued { job, _held: held };
        // Counted as queued before the idle workers are: a worker leaving idle lowers idle
        // first, then queued, so a job is never left to a worker that took another.
        let waiting = shared.queued.fetch_add(1, Ordering::AcqRel) + 1;
        let idle = shared.idle.load(Ordering::Acquire);
        let workers = shared.workers.load(Ordering::Acquire);
        if idle < waiting && workers < MAX_WORKERS {
            shared.workers.fetch_add(1, Ordering::AcqRel);
            let worker = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name("netbox-connect".into())
                .stack_size(64 << 10)
                .spawn(move || worker.work());
            if spawned.is_err() {
                shared.workers.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if shared.workers.load(Ordering::Acquire) == 0 {
            // No worker could be started at all: made here rather than never.
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            shared.run(queued.job, Some(&shared.budget));
            return;
        }
        if let Err(returned) = self.jobs.send(queued) {
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            shared.run(returned.0.job, Some(&shared.budget));
        }
    }

    /// Makes pid 1's call on its own worker (or, if that is busy, a thread of its own),
    /// outside the bound and the budget: it is netbox's own code, and what it proves must
    /// not wait on CMD's calls.
    pub fn submit_own(&self, job: Job) {
        let job = match &self.own {
            Some(own) => match own.take(&self.shared, job) {
                Ok(()) => return,
                Err(job) => job,
            },
            None => job,
        };
        let shared = Arc::clone(&self.shared);
        // The job waits in a slot the thread empties, so a thread that cannot be started
        // leaves it here to be made on this one.
        let slot = Arc::new(Mutex::new(Some(job)));
        let its = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("netbox-connect1".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let job = its.lock().ok().and_then(|mut slot| slot.take());
                if let Some(job) = job {
                    block_signals();
                    shared.run(job, None);
                }
            });
        if spawned.is_err() {
            let job = slot.lock().ok().and_then(|mut slot| slot.take());
            if let Some(job) = job {
                self.shared.run(job, None);
            }
        }
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

/// The descriptors the calls netbox makes for CMD may hold at once: half of what netbox
/// may open, the rest being the proxy's and the log's.
fn fd_budget() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    usize::try_from(soft / 2).unwrap_or(512).max(256)
}

/// Blocks every signal but the wake-up one: the others are netbox's signal thread's.
fn block_signals() {
    let _ = crate::sys::process::block_all_but_wakeup();
}

impl Shared {
    fn work(&self) {
        block_signals();
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
                Ok(queued) => {
                    // After idle (submit's order).
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    // What the job holds goes back to the budget once it is done.
                    let Queued { job, _held } = queued;
                    self.run(job, Some(&self.budget));
                }
                // The connector is gone: the run is over.
                Err(_) => return,
            }
        }
    }

    /// Makes the call and answers the caller with its result. Nothing read from the
    /// caller is acted on unless the caller still waits once it is read: a caller killed
    /// meanwhile could have had its pid given to another process, whose memory and fds
    /// the same pid would then name.
    fn run(&self, job: Job, budget: Option<&Arc<Budget>>) {
        self.run_then(job, budget, || {});
    }

    /// [`Shared::run`], calling `before_answer` once the call is done: just before the
    /// caller is answered, or as the call is dropped (its caller gone).
    fn run_then(&self, job: Job, budget: Option<&Arc<Budget>>, before_answer: impl FnOnce()) {
        let listener = self.listener.as_fd();
        let caller_waits = || seccomp::still_valid(listener, job.id);
        self.started_call(job.id);
        let result = match &job.op {
            // Gone before its connect was made: nothing was, nothing to record.
            Op::Connect(_) if !caller_waits() => {
                self.ended_call(job.id);
                before_answer();
                return;
            }
            Op::Connect(address) => {
                crate::sys::socket::connect_raw(job.socket.as_fd(), address).map(|()| 0)
            }
            Op::Send(send) => {
                crate::supervise::sender::send(&job.socket, send, budget, &caller_waits)
            }
        };
        self.ended_call(job.id);
        drop(job.hold);
        if let Some(after) = job.after {
            after(result.map(|_| ()));
        }
        before_answer();
        // A caller killed meanwhile is answered with ENOENT: nothing to do.
        let _ = seccomp::answer(listener, job.id, result);
    }

    fn started_call(&self, id: u64) {
        if let Ok(mut running) = self.running.lock() {
            running.insert(id, crate::sys::process::thread_id());
        }
    }

    fn ended_call(&self, id: u64) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(&id);
        }
    }

    /// Wakes, now and then, each worker whose caller is gone, until that call ends: a
    /// signal that lands just before the call starts is missed, and the next one is not.
    /// The lock is held while a worker is woken, so the worker is still on that call (it
    /// takes the lock to leave it) and the signal cannot land in its next one. A timer
    /// rather than a wake-up per call: calls start thousands of times a second.
    fn reap(&self) {
        loop {
            std::thread::sleep(REAP_EVERY);
            let Ok(running) = self.running.lock() else {
                return;
            };
            if running.is_empty() && self.closed.load(Ordering::Acquire) {
                return;
            }
            for (&id, &tid) in running.iter() {
                if !seccomp::still_valid(self.listener.as_fd(), id) {
                    let _ = crate::sys::process::wake_thread(tid);
                }
            }
        }
    }
}
