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

/// Stack for a cloned child, in bytes: the sandbox's setup and probe run on it, and the
/// memory is only touched (and so only allocated) as deep as it goes.
const CLONE_STACK_BYTES: usize = 8 << 20;

/// Creates a child process (no shared memory, like fork) with `flags`, running `child` on
/// a stack of its own and exiting with its return value.
///
/// Callers must be single-threaded, as for [`fork`].
pub fn clone_process(
    flags: nix::sched::CloneFlags,
    mut child: impl FnMut() -> i32,
) -> io::Result<nix::unistd::Pid> {
    let mut stack = GuardedStack::new(CLONE_STACK_BYTES)?;
    let callback: nix::sched::CloneCb<'_> = Box::new(move || exit_child(child()));
    // SAFETY: without CLONE_VM the child gets a copy of this address space (as after
    // fork), so the callback, its captures and `stack` are the child's own; the callers are
    // single-threaded, so no lock is held by a thread that does not exist in the child; the
    // stack is 8 MiB, far more than the setup's call depth, above a guard page that turns
    // an overflow into a fault; and the callback never returns (exit_child), so the child
    // never unwinds into frames that belong to the parent.
    let pid = unsafe { nix::sched::clone(callback, stack.usable(), flags, Some(libc::SIGCHLD)) }?;
    Ok(pid)
}

/// Stack for a child that shares pid 1's memory until it execs (`spawn_sharing_memory`):
/// CMD's last steps before exec (signals, session, directory, fds, PATH, limits) go a few
/// calls deep; only what they touch is ever allocated.
const SPAWN_STACK_BYTES: usize = 256 << 10;

/// Starts a child process that runs `child` in this process's memory, on a stack of its
/// own, while the caller waits; the caller goes on once the child has exec'd (it then has
/// memory of its own) or exited. This is how posix_spawn(3) starts a program: no copy of
/// the address space is made (a fork of pid 1 took ~0.1 ms here, with its copy-on-write
/// faults). The child has copies of everything else (fds, working directory, signal
/// dispositions and mask, limits), as after fork, so what it changes there is its own.
///
/// While the child runs, the caller is suspended and forwards no signal: a child that hangs
/// before its exec (a hung filesystem under its working directory or on PATH) is ended by
/// `--timeout` or by killing netbox, not by a forwarded Ctrl-C.
///
/// `child` must end in exec or `exit_child`, take no lock in this memory (write to stderr
/// with [`say_from_child`]) and change no memory the caller relies on (what it allocates
/// stays allocated). Callers must be single-threaded, as for [`fork`].
pub fn spawn_sharing_memory(child: impl FnMut() -> i32) -> io::Result<nix::unistd::Pid> {
    use nix::sched::CloneFlags;
    let mut child = child;
    let mut stack = GuardedStack::new(SPAWN_STACK_BYTES)?;
    let callback: nix::sched::CloneCb<'_> = Box::new(move || exit_child(child()));
    // SAFETY: with CLONE_VM | CLONE_VFORK the child runs `callback` on `stack`, in this
    // address space, while this thread is suspended until the child execs or exits; so
    // `stack`, the callback and its captures outlive their use. The caller is the only
    // thread (documented at each call site), so nothing else reads or writes memory, or
    // holds a lock (the allocator's included), while the child runs; the child takes none
    // it could leave held (the contract above). It never returns into this thread's frames
    // (exit_child, or exec), and a stack overflow faults on the guard page. It shares no fd
    // table, working directory or signal handlers (no CLONE_FILES, CLONE_FS, CLONE_SIGHAND).
    let pid = unsafe {
        nix::sched::clone(
            callback,
            stack.usable(),
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    }?;
    Ok(pid)
}

/// Writes `parts` and a newline to stderr from a child that shares pid 1's memory, with
/// write(2) itself and without allocating: std's stderr takes a lock in that memory
/// (recording pid 1's own thread as its owner), which would stay taken if the child died
/// in the write (SIGPIPE on a closed pipe, SIGXFSZ past `--fsize`), and the allocator's
/// lock likewise.
pub fn say_from_child(parts: &[&[u8]]) {
    use std::os::fd::AsFd;
    let stderr = std::io::stderr();
    for part in parts.iter().copied().chain([&b"\n"[..]]) {
        let mut rest = part;
        while !rest.is_empty() {
            match nix::unistd::write(stderr.as_fd(), rest) {
                Ok(0) => return,
                Ok(written) => rest = &rest[written.min(rest.len())..],
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return,
            }
        }
    }
}

/// A program and its argument and environment vectors, laid out for execve(2) before a
/// child that shares the caller's memory starts: the child then execs without building
/// anything (nix's execve allocates its pointer arrays).
pub struct ExecArgs {
    program: std::ffi::CString,
    /// Owned here: `argv_ptrs` and `envp_ptrs` point into them.
    _argv: Vec<std::ffi::CString>,
    _envp: Vec<std::ffi::CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
}

impl ExecArgs {
    pub fn new(
        program: std::ffi::CString,
        argv: Vec<std::ffi::CString>,
        envp: Vec<std::ffi::CString>,
    ) -> ExecArgs {
        let pointers = |strings: &[std::ffi::CString]| {
            let mut pointers: Vec<*const libc::c_char> =
                strings.iter().map(|s| s.as_ptr()).collect();
            pointers.push(std::ptr::null());
            pointers
        };
        ExecArgs {
            argv_ptrs: pointers(&argv),
            envp_ptrs: pointers(&envp),
            program,
            _argv: argv,
            _envp: envp,
        }
    }

    /// execve(2); returns only if it failed, with why.
    pub fn exec(&self) -> nix::errno::Errno {
        // SAFETY: `program` is NUL-terminated; `argv_ptrs` and `envp_ptrs` are
        // NULL-terminated arrays of pointers into the CStrings `self` owns, which outlive
        // the call (exec replaces the process on success; on failure nothing was freed).
        unsafe {
            libc::execve(
                self.program.as_ptr(),
                self.argv_ptrs.as_ptr(),
                self.envp_ptrs.as_ptr(),
            );
        }
        nix::errno::Errno::last()
    }

    /// Whether the program is a directory, which execve refuses as EACCES and a shell
    /// reports as "Is a directory". stat(2) on the CString it holds: nothing allocated.
    pub fn is_directory(&self) -> bool {
        nix::sys::stat::stat(self.program.as_c_str()).is_ok_and(|st| {
            nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
                == nix::sys::stat::SFlag::S_IFDIR
        })
    }
}

/// Puts SIGSEGV and SIGBUS back to their default action. A process cloned from netbox
/// inherits std's handlers for them (its stack-overflow report, on netbox's alternate
/// signal stack), which pid 1, running on a stack of its own, must not run.
pub fn reset_fault_handlers() -> nix::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for signal in [Signal::SIGSEGV, Signal::SIGBUS] {
        // SAFETY: installing SIG_DFL runs no handler code of ours, so nothing about the
        // program's state has to be signal-safe for it.
        unsafe { sigaction(signal, &default) }?;
    }
    Ok(())
}

/// A stack mapped for one child, above an inaccessible page: a child that overflowed it
/// would fault there instead of writing over the memory below.
struct GuardedStack {
    base: *mut libc::c_void,
    len: usize,
    guard: usize,
}

impl GuardedStack {
    fn new(usable: usize) -> io::Result<GuardedStack> {
        // SAFETY: sysconf reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = usable + page;
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses (no
        // MAP_FIXED) cannot overlap or alias any existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = GuardedStack {
            base,
            len,
            guard: page,
        };
        // SAFETY: the lowest page of the mapping just made, which nothing refers to yet.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The stack itself: the mapping above the guard page.
    fn usable(&mut self) -> &mut [u8] {
        // SAFETY: `base + guard .. base + len` is readable and writable memory this value
        // mapped and owns until drop; the borrow of `self` keeps it alive and unaliased.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.base.cast::<u8>().add(self.guard),
                self.len - self.guard,
            )
        }
    }
}

impl Drop for GuardedStack {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, which nothing uses any more (the
        // child has exec'd or exited before the caller goes on).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Ends a forked child with `code` at once, without unwinding or running atexit handlers
/// that belong to the parent's copy of the process state.
pub fn exit_child(code: i32) -> ! {
    exit_at_once(code)
}

/// SIGKILLs the process a pidfd refers to, given the pidfd's number only (from a panic
/// hook, which holds no fd). A number that is not a pidfd any more fails (EBADF, EINVAL)
/// and signals nothing.
pub fn kill_through_raw_pidfd(pidfd: i32) {
    // SAFETY: pidfd_send_signal takes an int and a NULL siginfo; the kernel checks the fd
    // and touches no memory of this process.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// Ends the whole process (every thread) with `code` at once: no unwinding, no atexit
/// handler, no flush of a buffer another thread may hold locked.
pub fn exit_at_once(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust-managed state.
    unsafe { libc::_exit(code) }
}

/// A pidfd for a child (pidfd_open(2), Linux ≥ 5.3): readable once the child has exited, so
/// an async runtime can wait for it without a thread blocked in waitpid.
pub fn pidfd_open(pid: nix::unistd::Pid) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("pidfd_open returned a bad fd"))?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// A copy of another task's file descriptor `fd` (pidfd_getfd(2), Linux ≥ 5.6), to look
/// at what it is. `tid` may name any thread: with PIDFD_THREAD (6.9+) its own pidfd is
/// opened; before that only a thread-group leader's can be (a fine answer for the
/// single-threaded callers most are). Needs ptrace access to the task.
pub fn copy_fd_of_thread(tid: u32, fd: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    /// linux/pidfd.h: PIDFD_THREAD is O_EXCL.
    const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
    let open = |flags: libc::c_uint| {
        // SAFETY: pidfd_open takes a pid and flags by value and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = i32::try_from(fd).map_err(|_| io::Error::other("pidfd_open returned a bad fd"))?;
        // SAFETY: the kernel just returned this fd to us; nothing else owns it.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    };
    let pidfd = open(PIDFD_THREAD).or_else(|_| open(0))?;
    copy_fd(std::os::fd::AsFd::as_fd(&pidfd), fd)
}

/// A copy of file descriptor `fd` of the process `pidfd` refers to (pidfd_getfd(2)).
pub fn copy_fd(pidfd: std::os::fd::BorrowedFd<'_>, fd: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: pidfd_getfd takes an fd, a number and flags by value and returns a new fd
    // (close-on-exec) or -1; `pidfd` is open for the call.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    let copy =
        i32::try_from(copy).map_err(|_| io::Error::other("pidfd_getfd returned a bad fd"))?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(copy) })
}

/// Sets every catchable signal, real-time ones included, back to its default action, as a
/// fresh process has it (an ignored disposition survives exec). Uses the raw syscall:
/// glibc's wrappers refuse the two real-time signals it reserves for itself, and those can
/// be inherited as ignored too.
pub fn reset_signal_dispositions() {
    /// The kernel's `struct sigaction` on x86_64 and aarch64 (handler, flags, restorer, mask).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for signum in 1..=64 {
        if signum == libc::SIGKILL || signum == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `default` is a valid kernel sigaction that outlives the call, its size
        // (8 bytes of mask) is what the kernel expects, and no old action is read back.
        // Installing SIG_DFL runs no handler code; an invalid number only gets EINVAL.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signum,
                &default as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
    }
}

/// Sends a signal through a pidfd (pidfd_send_signal(2), Linux ≥ 5.1): unlike kill(2) it
/// can never reach another process that reused the pid.
pub fn pidfd_send_signal(
    pidfd: std::os::fd::BorrowedFd<'_>,
    signal: nix::sys::signal::Signal,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: all arguments are plain values (the fd is borrowed for the call; no siginfo
    // is passed), and the syscall touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `signal` to one thread, `tid` of the thread group `tgid` (tgkill(2)): a signal
/// the kernel would have raised in that thread itself (SIGPIPE for a send netbox made for
/// it). The pair fails (ESRCH) rather than reach another process that reused the tid.
pub fn tgkill(tgid: u32, tid: u32, signal: nix::sys::signal::Signal) -> io::Result<()> {
    // SAFETY: all arguments are plain values; the syscall touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, signal as libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The signal that wakes one of netbox's own threads out of a call that should end (a
/// connect or send made for a caller that is gone): a real-time one nothing else uses.
fn wakeup_signal() -> libc::c_int {
    libc::SIGRTMIN() + 1
}

extern "C" fn on_wakeup(_: libc::c_int) {}

/// Installs the wake-up signal's handler, which does nothing: its point is that it is
/// installed without SA_RESTART, so the call the signal lands in fails with EINTR. Call
/// before any thread unblocks the signal (its default action ends the process).
pub fn install_wakeup() -> io::Result<()> {
    // SAFETY: sigaction is zeroed (a valid empty mask, no flags) before its handler is
    // set; the handler runs no code at all, so it is async-signal-safe; the kernel copies
    // the struct during the call.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_wakeup as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(wakeup_signal(), &action, std::ptr::null_mut())
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Blocks every signal in the calling thread but the wake-up signal.
pub fn block_all_but_wakeup() -> io::Result<()> {
    // SAFETY: `mask` is a sigset_t filled and edited by libc's own functions before use;
    // pthread_sigmask reads it and writes no old mask (null).
    let rc = unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut mask);
        libc::sigdelset(&mut mask, wakeup_signal());
        libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// The calling thread's id.
pub fn thread_id() -> u32 {
    // SAFETY: gettid takes nothing and cannot fail.
    let tid = unsafe { libc::gettid() };
    u32::try_from(tid).unwrap_or(0)
}

/// Sends the wake-up signal to thread `tid` of netbox itself.
pub fn wake_thread(tid: u32) -> io::Result<()> {
    // SAFETY: all arguments are plain values; the syscall touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, std::process::id(), tid, wakeup_signal()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
