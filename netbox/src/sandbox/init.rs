//! The sandbox's pid 1: starts CMD, reaps every zombie, forwards SIGINT, SIGTERM, SIGHUP and
//! SIGQUIT to CMD's process group, and exits with CMD's status (128+n for a signal, as a
//! shell reports it).
//!
//! The forwarded signals are blocked and read from a signalfd(2) rather than caught: pid 1
//! of a pid namespace ignores signals from outside whose handler is SIG_DFL, but a blocked
//! signal is never ignored (pid_namespaces(7), kernel/signal.c `sig_ignored`). The same
//! poll(2) waits on the mount table, to notice a lost pin (pins.rs). CMD starts
//! in a new session: no controlling terminal, so it cannot push input into the caller's
//! terminal (TIOCSTI) or receive its job-control signals.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::error::{EXIT_NETBOX_FAILURE, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND};
use crate::limits::Limits;
use crate::plan::pins::Pins;
use crate::sandbox::handshake::{Channel, SyncMsg};
use crate::sys::process::{exit_child, say_from_child, spawn_sharing_memory, ExecArgs};

/// Signals passed on to CMD.
const FORWARDED: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

fn forwarded_and_child() -> SigSet {
    let mut set = SigSet::empty();
    for sig in FORWARDED {
        set.add(sig);
    }
    set.add(Signal::SIGCHLD);
    set
}

/// Blocks the signals pid 1 waits for. Called early, so none arrives unhandled.
pub fn block_signals() -> nix::Result<()> {
    forwarded_and_child().thread_block()
}

/// The exit status a shell would report for a wait status.
pub fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// Starts a command and serves as its init until it exits; then ends every other process
/// in the namespace (`kill(-1)` from pid 1 reaches only those) and reaps them, so nothing of
/// the command outlives it. Returns its exit status, or why pid 1 must stop first.
pub fn run_to_end(
    cmd: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
    limits: &Limits,
    pins: &Pins,
    tty: Option<Tty>,
) -> Result<i32, Stop> {
    // Everything the child needs, built here: it shares pid 1's memory until it execs,
    // and must not allocate (sys/process.rs, spawn_sharing_memory).
    let mut start = Start::prepare(cmd, env, cwd)?;
    start.tty = tty;
    // pid 1 is single-threaded: nothing here ever starts a thread. exec_cmd only sets up
    // the child's own state and execs (or says why not and exits).
    let child = match spawn_sharing_memory(|| exec_cmd(&start, limits)) {
        Ok(child) => child,
        Err(e) => {
            let name = cmd.first().map(|c| c.to_string_lossy()).unwrap_or_default();
            let name = crate::printable::printable(&name);
            return Err(Stop::Unrunnable(format!("cannot start {name}: {e}")));
        }
    };
    let code = supervise(child, pins)?;
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    // Until there is no child left (ECHILD): a signal that interrupts the wait (EINTR)
    // must not leave any of them unreaped.
    while let Ok(_) | Err(Errno::EINTR) = waitpid(None, None) {}
    Ok(code)
}

/// CMD's own terminal (terminal.rs): the pty's slave end, held by pid 1.
#[derive(Debug, Clone, Copy)]
pub struct Tty {
    pub fd: std::os::fd::RawFd,
    /// Standard error goes there too (netbox's own is a terminal).
    pub stderr_too: bool,
}

/// CMD, resolved and laid out before its child starts, with every message the child may
/// have to say.
struct Start {
    /// CMD's terminal, if it gets one: its controlling terminal and standard input and
    /// output.
    tty: Option<Tty>,
    /// The program found on PATH, ready to exec; `None`: not found.
    exec: Option<ExecArgs>,
    cwd: CString,
    /// `CMD`'s name (argv[0]) as messages show it.
    name: Vec<u8>,
    /// The working directory as messages show it.
    cwd_shown: Vec<u8>,
}

impl Start {
    fn prepare(cmd: &[OsString], env: &[(OsString, OsString)], cwd: &Path) -> Result<Start, Stop> {
        let unrunnable = |what: &str| Stop::Unrunnable(format!("the {what} contains a NUL byte"));
        let argv: Vec<CString> = cmd
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| unrunnable("command"))?;
        let first = argv.first().cloned().ok_or_else(|| unrunnable("command"))?;
        let envp: Vec<CString> = env
            .iter()
            .filter_map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv).ok()
            })
            .collect();
        let cwd_c = CString::new(cwd.as_os_str().as_bytes())
            .map_err(|_| unrunnable("working directory"))?;
        // Escaped now: it is written after the fork, where nothing may be allocated.
        let name = crate::printable::printable(&first.to_string_lossy()).into_bytes();
        let exec =
            find_program(&first, &envp, cwd).map(|program| ExecArgs::new(program, argv, envp));
        Ok(Start {
            tty: None,
            exec,
            cwd: cwd_c,
            cwd_shown: crate::printable::printable(&cwd.to_string_lossy()).into_bytes(),
            name,
        })
    }
}

/// A forwarded signal that arrived while no command was running (between `--fetch`'s
/// two), taken off the pending set: it was meant for the run, not for the next command.
pub fn take_forwarded_signal() -> Option<Signal> {
    let mut set = SigSet::empty();
    for sig in FORWARDED {
        set.add(sig);
    }
    let signals =
        SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).ok()?;
    let info = signals.read_signal().ok()??;
    Signal::try_from(i32::try_from(info.ssi_signo).ok()?).ok()
}

/// Says why pid 1 stopped (on `channel` or stderr) and returns its exit status.
pub fn report_stop(stop: Stop, channel: &Channel) -> i32 {
    match stop {
        Stop::PinLost(path) => {
            let _ = channel.send(&SyncMsg::PinLost { path }, &[]);
        }
        Stop::Broken(e) => crate::output::say(&format!("netbox: sandbox init failed: {e}")),
        Stop::Unrunnable(why) => crate::output::say(&format!("netbox: {why}")),
    }
    EXIT_NETBOX_FAILURE.into()
}

/// Why pid 1 stops before CMD has exited.
pub enum Stop {
    PinLost(std::path::PathBuf),
    Broken(nix::Error),
    /// CMD could not be started at all.
    Unrunnable(String),
}

/// In the child, which shares pid 1's memory until exec (`spawn_sharing_memory`): becomes
/// CMD. It allocates nothing: everything it uses was built before it started (`Start`),
/// and it says what went wrong with `say_from_child`, from parts.
fn exec_cmd(start: &Start, limits: &Limits) -> ! {
    let fail = |parts: &[&[u8]], code: u8| -> ! {
        say_from_child(parts);
        exit_child(code.into())
    };
    let name = start.name.as_slice();
    // CMD starts as from a shell: default dispositions (Rust ignores SIGPIPE in netbox,
    // and an ignored disposition survives exec) and nothing blocked.
    crate::sys::process::reset_signal_dispositions();
    let _ = SigSet::all().thread_unblock();
    if let Err(e) = nix::unistd::setsid() {
        fail(
            &[
                b"netbox: cannot start a new session for ",
                name,
                b": ",
                e.desc().as_bytes(),
            ],
            EXIT_NETBOX_FAILURE,
        );
    }
    if let Some(tty) = start.tty {
        // The new session's controlling terminal, then CMD's standard input and output.
        let onto: &[i32] = if tty.stderr_too { &[0, 1, 2] } else { &[0, 1] };
        let attached = crate::sys::pty::make_controlling(tty.fd).and_then(|()| {
            onto.iter()
                .try_for_each(|&n| crate::sys::fd::duplicate_onto(tty.fd, n))
        });
        if let Err(e) = attached {
            fail(
                &[
                    b"netbox: cannot give ",
                    name,
                    b" its terminal: ",
                    e.desc().as_bytes(),
                ],
                EXIT_NETBOX_FAILURE,
            );
        }
    }
    if let Err(e) = nix::unistd::chdir(start.cwd.as_c_str()) {
        // The usual cause: the directory netbox was started in lies under a path the
        // sandbox replaces (its private /tmp, a --hide), outside the workspace.
        fail(
            &[
                b"netbox: the working directory ",
                &start.cwd_shown,
                b" cannot be entered inside the sandbox (",
                e.desc().as_bytes(),
                b"); start netbox in the workspace or in a directory the sandbox shows \
                  (a private /tmp hides the host's: --tmp host shares it)",
            ],
            EXIT_NETBOX_FAILURE,
        );
    }
    if let Err(e) = crate::sys::fd::close_from_3() {
        let errno = e
            .raw_os_error()
            .map_or("unknown error", |n| Errno::from_raw(n).desc());
        fail(
            &[
                b"netbox: cannot close inherited file descriptors: ",
                errno.as_bytes(),
            ],
            EXIT_NETBOX_FAILURE,
        );
    }
    let Some(exec) = &start.exec else {
        fail(&[b"netbox: ", name, b": command not found"], EXIT_NOT_FOUND);
    };
    // Last before exec: pid 1's address space, which this child shares until exec, may
    // already be past --memory; exec replaces it, so CMD starts with all of it.
    if let Err(e) = crate::limits::apply(limits) {
        fail(
            &[b"netbox: cannot set resource limits: ", e.desc().as_bytes()],
            EXIT_NETBOX_FAILURE,
        );
    }
    match exec.exec() {
        Errno::ENOENT => fail(&[b"netbox: ", name, b": command not found"], EXIT_NOT_FOUND),
        Errno::EACCES if exec.is_directory() => fail(
            &[b"netbox: cannot run ", name, b": Is a directory"],
            EXIT_NOT_EXECUTABLE,
        ),
        err => fail(
            &[b"netbox: cannot run ", name, b": ", err.desc().as_bytes()],
            EXIT_NOT_EXECUTABLE,
        ),
    }
}

/// Finds CMD the way a shell does, from CMD's working directory `cwd`: a name with a slash
/// is used as is; otherwise the first executable regular file in PATH, else the first one
/// that exists (so exec reports why it cannot run), else nothing (command not found).
/// Directories on PATH this user cannot search are skipped, as a shell skips them, rather
/// than turning "not found" into 126. What is returned is exec'd from `cwd`, so a relative
/// PATH entry is looked at there.
fn find_program(name: &CString, envp: &[CString], cwd: &Path) -> Option<CString> {
    let bytes = name.as_bytes();
    if bytes.contains(&b'/') {
        return Some(name.clone());
    }
    let path = envp
        .iter()
        .find_map(|kv| kv.as_bytes().strip_prefix(b"PATH="))
        .unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
    let mut existing = None;
    for dir in path.split(|&b| b == b':') {
        let dir = if dir.is_empty() { &b"."[..] } else { dir };
        let mut candidate = dir.to_vec();
        candidate.push(b'/');
        candidate.extend_from_slice(bytes);
        let Ok(candidate) = CString::new(candidate) else {
            continue;
        };
        let seen_from_cwd = cwd.join(std::ffi::OsStr::from_bytes(candidate.as_bytes()));
        let is_file = std::fs::metadata(&seen_from_cwd).is_ok_and(|m| m.is_file());
        if !is_file {
            continue;
        }
        if nix::unistd::access(&seen_from_cwd, nix::unistd::AccessFlags::X_OK).is_ok() {
            return Some(candidate);
        }
        existing.get_or_insert(candidate);
    }
    existing
}

/// Waits for signals and mount-table changes: reaps children, forwards signals, checks
/// the pins on every mount change, returns CMD's status when it exits.
fn supervise(cmd: Pid, pins: &Pins) -> Result<i32, Stop> {
    // Non-blocking: the loop must come back to poll (and the mount table) after draining
    // the signals, whatever CMD does to provoke signals.
    let signals = SignalFd::with_flags(
        &forwarded_and_child(),
        SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
    )
    .map_err(Stop::Broken)?;
    let mountinfo = std::fs::File::open("/proc/self/mountinfo")
        .map_err(|e| Stop::Broken(nix::Error::try_from(e).unwrap_or(Errno::EIO)))?;
    // Changes from here on raise POLLPRI; one that happened earlier (during the probe, or
    // before CMD was forked) is caught by looking once now.
    if let Some(path) = pins.lost() {
        return Err(Stop::PinLost(path.to_owned()));
    }
    loop {
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(mountinfo.as_fd(), PollFlags::POLLPRI),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(Stop::Broken(e)),
            Ok(_) => {}
        }
        let mount_event = fds[1]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR));
        if mount_event {
            if let Some(path) = pins.lost() {
                return Err(Stop::PinLost(path.to_owned()));
            }
        }
        let signalled = fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN));
        if !signalled {
            continue;
        }
        while let Ok(Some(info)) = signals.read_signal() {
            let Ok(sig) = Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0)) else {
                continue;
            };
            if sig != Signal::SIGCHLD {
                // CMD leads its own process group (setsid, before its exec, which pid 1
                // waits for); the whole group gets the signal. A session leader cannot
                // leave its group: sending to CMD alone is only a safeguard.
                if kill(Pid::from_raw(-cmd.as_raw()), sig) == Err(Errno::ESRCH) {
                    let _ = kill(cmd, sig);
                }
                // A stopped CMD would keep the signal pending forever: CMD leads a
                // session of its own, so no shell above it will continue it (as a
                // shell's `kill` does, it is continued to take the signal).
                let _ = kill(Pid::from_raw(-cmd.as_raw()), Signal::SIGCONT);
                continue;
            }
            loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(status) if status.pid() == Some(cmd) => {
                        if let Some(code) = exit_code(status) {
                            return Ok(code);
                        }
                    }
                    Ok(_) => {}
                }
            }
        }
    }
}
