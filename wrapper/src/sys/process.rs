//! fork(2), and leaving a forked child without running any destructor of the parent's state.

use std::io;

/// Which side of a fork this is.
pub enum Forked {
    Parent { child: nix::unistd::Pid },
    Child,
}

/// Forks the calling process.
///
/// Callers must be single-threaded (netbox forks before any runtime or thread exists), so
/// the child cannot inherit a lock held by another thread.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: netbox calls this only while it has a single thread (documented at each call
    // site), which is the condition under which the child may run arbitrary code.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { child }) => Ok(Forked::Parent { child }),
        Ok(nix::unistd::ForkResult::Child) => Ok(Forked::Child),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Ends a forked child with `code` at once, without unwinding or running atexit handlers
/// that belong to the parent's copy of the process state.
pub fn exit_child(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust-managed state.
    unsafe { libc::_exit(code) }
}
