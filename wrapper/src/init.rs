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
use crate::handshake::{Channel, SyncMsg};
use crate::limits::Limits;
use crate::pins::Pins;
use crate::sys::process::{exit_child, say_from_child, spawn_sharing_memory};

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
    skip_limits_for_test: bool,
    pins: &Pins,
) -> Result<i32, Stop> {
    let argv: Vec<CString> = cmd
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| Stop::Unrunnable("the command contains a NUL byte".into()))?;
    let envp: Vec<CString> = env
        .iter()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    // pid 1 is single-threaded: nothing here ever starts a thread. exec_cmd only sets up
    // the child's own state and execs (or says why not and exits).
    let start = || exec_cmd(&argv, &envp, cwd, limits, skip_limits_for_test);
    let child = match spawn_sharing_memory(start) {
        Ok(child) => child,
        Err(e) => {
            let name = cmd.first().map(|c| c.to_string_lossy()).unwrap_or_default();
            return Err(Stop::Unrunnable(format!("cannot start {name}: {e}")));
        }
    };
    let code = supervise(child, pins)?;
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    while waitpid(None, None).is_ok() {}
    Ok(code)
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
        Stop::Broken(e) => crate::say(&format!("netbox: sandbox init failed: {e}")),
        Stop::Unrunnable(why) => crate::say(&format!("netbox: {why}")),
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
/// CMD. Messages go out with `say_from_child`.
fn exec_cmd(
    argv: &[CString],
    envp: &[CString],
    cwd: &Path,
    limits: &Limits,
    skip_limits: bool,
) -> ! {
    let name = argv[0].to_string_lossy().into_owned();
    // CMD starts as from a shell: default dispositions (Rust ignores SIGPIPE in netbox,
    // and an ignored disposition survives exec) and nothing blocked.
    crate::sys::process::reset_signal_dispositions();
    let _ = SigSet::all().thread_unblock();
    if let Err(e) = nix::unistd::setsid() {
        say_from_child(&format!(
            "netbox: cannot start a new session for {name}: {}",
            e.desc()
        ));
        exit_child(EXIT_NETBOX_FAILURE.into());
    }
    if let Err(e) = nix::unistd::chdir(cwd) {
        // The usual cause: the directory netbox was started in lies under a path the
        // sandbox replaces (its private /tmp, a --hide), outside the workspace.
        say_from_child(&format!(
            "netbox: the working directory {} cannot be entered inside the sandbox ({}); \
             start netbox in the workspace or in a directory the sandbox shows \
             (a private /tmp hides the host's: --tmp host shares it)",
            crate::printable::printable(&cwd.to_string_lossy()),
            e.desc()
        ));
        exit_child(EXIT_NETBOX_FAILURE.into());
    }
    if let Err(e) = crate::sys::fd::close_from_3() {
        say_from_child(&format!(
            "netbox: cannot close inherited file descriptors: {e}"
        ));
        exit_child(EXIT_NETBOX_FAILURE.into());
    }
    let program = match find_program(&argv[0], envp) {
        Some(program) => program,
        None => {
            say_from_child(&format!("netbox: {name}: command not found"));
            exit_child(EXIT_NOT_FOUND.into());
        }
    };
    // Last before exec, with nothing left to allocate: pid 1's address space, which this
    // child shares until exec, may already be past --memory; exec replaces it, so CMD
    // starts with all of it.
    if let Err(e) = crate::limits::apply(limits, skip_limits) {
        say_from_child(&format!("netbox: cannot set resource limits: {e}"));
        exit_child(EXIT_NETBOX_FAILURE.into());
    }
    let err = match nix::unistd::execve(&program, argv, envp) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    let code = if err == Errno::ENOENT {
        say_from_child(&format!("netbox: {name}: command not found"));
        EXIT_NOT_FOUND
    } else {
        say_from_child(&format!("netbox: cannot run {name}: {}", err.desc()));
        EXIT_NOT_EXECUTABLE
    };
    exit_child(code.into())
}

/// Finds CMD the way a shell does: a name with a slash is used as is; otherwise the first
/// executable regular file in PATH, else the first one that exists (so exec reports why it
/// cannot run), else nothing (command not found). Directories on PATH this user cannot
/// search are skipped, as a shell skips them, rather than turning "not found" into 126.
fn find_program(name: &CString, envp: &[CString]) -> Option<CString> {
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
        let is_file = std::fs::metadata(std::ffi::OsStr::from_bytes(candidate.as_bytes()))
            .is_ok_and(|m| m.is_file());
        if !is_file {
            continue;
        }
        if nix::unistd::access(candidate.as_c_str(), nix::unistd::AccessFlags::X_OK).is_ok() {
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
