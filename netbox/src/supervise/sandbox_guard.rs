//! The sandbox's pid 1 as netbox holds it: by a pidfd, signalled through it, reaped once,
//! and never left running when netbox lets go of it.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::error::WrapperError;
use crate::sandbox::init;

/// The sandbox's pid 1, held by a pidfd; killed and reaped on drop unless already reaped
/// (or let exit on its own once it said it was done).
pub struct SandboxGuard {
    pub(super) pid: Pid,
    pub(super) pidfd: OwnedFd,
    reaped: bool,
    /// Left to exit on its own ([`SandboxGuard::let_exit`]).
    exiting: bool,
}

/// The pidfd of the sandbox's pid 1 while a guard holds it (-1 when none), for
/// [`kill_sandbox_now`]. A number, not the fd: if it was closed and the number reused, a
/// kill through it fails on a file that is not a pidfd and reaches nothing.
static PID1_PIDFD: AtomicI32 = AtomicI32::new(-1);

/// SIGKILLs the sandbox's pid 1 (and with it everything in the sandbox), if there is one:
/// the panic hook's first step, before anything that could block.
pub fn kill_sandbox_now() {
    let pidfd = PID1_PIDFD.load(Ordering::Acquire);
    if pidfd >= 0 {
        crate::sys::process::kill_through_raw_pidfd(pidfd);
    }
}

impl SandboxGuard {
    pub fn new(pid: Pid) -> Result<SandboxGuard, WrapperError> {
        match crate::sys::process::pidfd_open(pid) {
            Ok(pidfd) => {
                PID1_PIDFD.store(pidfd.as_raw_fd(), Ordering::Release);
                Ok(SandboxGuard {
                    pid,
                    pidfd,
                    reaped: false,
                    exiting: false,
                })
            }
            Err(e) => {
                // Not yet reaped, so the pid cannot have been reused.
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
                Err(WrapperError::Spawn(e))
            }
        }
    }

    /// pid 1 said it is done (everything else in the sandbox is gone) and only exits now,
    /// which takes ~0.7 ms here (unmounting its namespace): netbox goes on without waiting.
    /// SIGKILL makes sure of the exit. It is reaped on drop if it has exited by then;
    /// otherwise its zombie goes, with netbox's exit, to the process that reaps orphans.
    pub(super) fn let_exit(&mut self) {
        self.signal(Signal::SIGKILL);
        self.exiting = true;
    }

    pub(super) fn signal(&self, sig: Signal) {
        let _ = crate::sys::process::pidfd_send_signal(self.pidfd.as_fd(), sig);
    }

    /// Waits for the exit (after the pidfd said so) and returns the shell-style status.
    pub(super) fn reap(&mut self) -> i32 {
        loop {
            match waitpid(self.pid, None) {
                Ok(status) => {
                    if let Some(code) = init::exit_code(status) {
                        self.reaped = true;
                        return code;
                    }
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    self.reaped = true;
                    return i32::from(crate::error::EXIT_NETBOX_FAILURE);
                }
            }
        }
    }
}

impl Drop for SandboxGuard {
    fn drop(&mut self) {
        PID1_PIDFD.store(-1, Ordering::Release);
        if self.reaped {
            return;
        }
        if self.exiting {
            let alive = waitpid(self.pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
            if let Ok(nix::sys::wait::WaitStatus::StillAlive) = alive {
                // Still tearing its namespaces down: reaped as netbox exits
                // (`reap_left_behind`), after its own last work, so that no zombie goes
                // to an orphan reaper that may never reap it (a container's init).
                if let (Ok(mut left), Ok(pidfd)) = (LEFT_BEHIND.lock(), self.pidfd.try_clone()) {
                    *left = Some((self.pid, pidfd));
                }
            }
            return;
        }
        self.signal(Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

/// The sandbox's pid 1, left to exit on its own and not reaped yet.
static LEFT_BEHIND: std::sync::Mutex<Option<(Pid, OwnedFd)>> = std::sync::Mutex::new(None);

/// Reaps pid 1 if it was left to exit on its own: called as netbox exits. Its exit was
/// SIGKILL's, so it comes; waited for a second at most (a process stuck in the kernel
/// cannot be helped, and netbox must not hang on it).
pub fn reap_left_behind() {
    let left = LEFT_BEHIND.lock().ok().and_then(|mut l| l.take());
    let Some((pid, pidfd)) = left else {
        return;
    };
    let mut fds = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16));
    let _ = waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
}
