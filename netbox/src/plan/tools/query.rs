//! Asking a tool about itself: its config query or a one-line script run with its own
//! interpreter, with a deadline (a tool that hangs must not hang netbox's start).
//!
//! This runs on the host, before the sandbox, about a workspace that an earlier
//! sandboxed command may have written. So a tool is found only in absolute `PATH`
//! directories outside every writable root, runs from `/` (no project file of the
//! workspace's comes into it: netbox reads those itself), with an environment of the
//! caller's that holds only what says where things are and the tools' own settings (no
//! `NODE_OPTIONS`, `PYTHONPATH`, `LD_PRELOAD`, proxies), and a `PATH` of the trusted
//! directories only (an `#!/usr/bin/env node` finds no planted `node`); Python ignores
//! its current directory (`PYTHONSAFEPATH`; callers pass `-I` too), and go never switches
//! to another toolchain (`GOTOOLCHAIN=local`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a tool may take to answer.
const DEADLINE: Duration = Duration::from_secs(10);

/// Variables passed to a tool as they are.
const KEPT: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "APT_CONFIG",
    "GEMRC",
    "GOENV",
];

/// Prefixes of the tools' own settings, passed as they are (pyenv's version choice and
/// root only: not its hook path, which runs scripts).
const KEPT_PREFIXES: &[&str] = &[
    "PIP_",
    "PYENV_VERSION",
    "PYENV_ROOT",
    "npm_config_",
    "NPM_CONFIG_",
    "CARGO_",
    "RUSTUP_",
    "GOPROXY",
    "GOSUMDB",
    "GOPRIVATE",
    "GONOPROXY",
    "GONOSUMDB",
    "GOFLAGS",
];

/// Runs `program args` from `/` and returns its standard output, if it ran and exited 0
/// and its output ended in time (a child of it holding the output counts). `untrusted`: the writable roots, where the program (and anything on its
/// `PATH`) must not come from.
pub fn output(program: &str, args: &[&str], untrusted: &[PathBuf]) -> Option<String> {
    output_with(program, args, &[], untrusted)
}

/// [`output`], with `env` set on top of what is passed (`GOENV=off`).
pub fn output_with(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    untrusted: &[PathBuf],
) -> Option<String> {
    prepared(program, args, env, untrusted).and_then(run)
}

/// Runs a command [`prepared`] made: its standard output, as [`output`] says.
pub fn run(command: Command) -> Option<String> {
    answer(command, DEADLINE)
}

/// The command [`output_with`] runs, not yet started: what a remembered answer is keyed on
/// (remembered.rs). `None`: no trusted `program`.
pub fn prepared(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    untrusted: &[PathBuf],
) -> Option<Command> {
    let program = trusted(program, untrusted)?;
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir("/")
        .env_clear()
        .env("PATH", trusted_path(untrusted))
        .env("PYTHONSAFEPATH", "1")
        .env("GOTOOLCHAIN", "local")
        // git: only the repository's own remotes are wanted; no global or system config
        // (where trace2 targets and the like would make it write files).
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        // pip writes no log wherever a config file says.
        .env("PIP_LOG", "/dev/null")
        .env("PIP_LOG_FILE", "/dev/null")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // Run from an npm script, npm_config_* are the project's .npmrc exported: not the
    // user's settings.
    let in_npm_script = std::env::var_os("npm_lifecycle_event").is_some()
        || std::env::var_os("npm_execpath").is_some();
    for (key, value) in std::env::vars_os() {
        let name = key.to_string_lossy();
        let npm_setting = name.starts_with("npm_config_") || name.starts_with("NPM_CONFIG_");
        let kept =
            KEPT.contains(&name.as_ref()) || KEPT_PREFIXES.iter().any(|p| name.starts_with(p));
        if kept && !(npm_setting && in_npm_script) {
            command.env(&key, value);
        }
    }
    command.envs(env.iter().copied());
    // npm asks its registry for a newer npm on its own (the update notifier), from the
    // host: a query makes no request, whatever the user's settings say.
    command.env("npm_config_update_notifier", "false");
    Some(command)
}

/// The most a tool's answer may hold, in bytes.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Runs `command` (its stdout piped) in a process group of its own and returns its
/// standard output, if it exited 0 and its output ended within `deadline`.
///
/// The output is read on this thread, a non-blocking pipe polled beside the wait: netbox
/// forks the sandbox after asking the tools (STYLE.md rule 13), and a reader thread left
/// blocked on a pipe that a child of the tool still holds would be alive at that fork.
/// Whatever the outcome, the group is killed once the tool is done or out of time, before
/// the tool is reaped (so its group id is still its own): nothing it started in its group
/// outlives the query (one that left the group with `setsid` is its own affair; its pipe is
/// closed here all the same).
fn answer(mut command: Command, deadline: Duration) -> Option<String> {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    let started = Instant::now();
    let mut child = command.spawn().ok()?;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).ok()?);
    let collected = child.stdout.take().and_then(|stdout| {
        let stdout = std::os::fd::OwnedFd::from(stdout);
        nix::fcntl::fcntl(
            &stdout,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .ok()?;
        collect(pid, std::fs::File::from(stdout), started, deadline)
    });
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    // The tool itself too, should it have moved to another group.
    let _ = child.kill();
    let status = child.wait().ok()?;
    let text = collected?;
    status
        .success()
        .then(|| String::from_utf8_lossy(&text).into_owned())
}

/// What the tool `pid` writes to `stdout` (non-blocking), until it has exited and the
/// output ended: `None` past `deadline` (counted from `started`) or past
/// [`MAX_ANSWER_BYTES`]. The tool is not reaped here.
fn collect(
    pid: nix::unistd::Pid,
    mut stdout: std::fs::File,
    started: Instant,
    deadline: Duration,
) -> Option<Vec<u8>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    use std::os::fd::AsFd;
    let mut text = Vec::new();
    let mut buffer = vec![0u8; 64 << 10];
    let (mut open, mut exited) = (true, false);
    loop {
        if !exited {
            // WNOWAIT: seen, not reaped.
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
            exited = !matches!(waitid(Id::Pid(pid), flags), Ok(WaitStatus::StillAlive));
        }
        if exited && !open {
            return Some(text);
        }
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return None;
        }
        // A short wait: the tool's exit is looked for between reads.
        let wait = PollTimeout::from(u16::try_from(left.as_millis().min(10)).unwrap_or(10));
        if !open {
            std::thread::sleep(left.min(Duration::from_millis(10)));
            continue;
        }
        let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLIN)];
        let _ = nix::poll::poll(&mut fds, wait);
        loop {
            match stdout.read(&mut buffer) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) => {
                    text.extend_from_slice(&buffer[..n]);
                    if text.len() > MAX_ANSWER_BYTES {
                        return None;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    open = false;
                    break;
                }
            }
        }
    }
}

/// The caller's `PATH` directories that are absolute, lie in no writable root, and hold
/// no interpreter a tool's `#!/usr/bin/env` would run that is a link into one.
fn trusted_dirs(untrusted: &[PathBuf]) -> Vec<PathBuf> {
    let Some(path) = std::env::var_os("PATH") else {
        return Vec::new();
    };
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .filter(|d| !is_untrusted(d, untrusted))
        .filter(|d| {
            ["node", "python3", "python", "sh", "bash", "env"]
                .iter()
                .all(|i| !d.join(i).exists() || !is_untrusted(&d.join(i), untrusted))
        })
        .collect()
}

fn trusted_path(untrusted: &[PathBuf]) -> std::ffi::OsString {
    std::env::join_paths(trusted_dirs(untrusted)).unwrap_or_default()
}

/// `program` as found in a trusted `PATH` directory (or as given, if it is a path
/// itself, which callers take from such a program).
pub fn trusted(program: &str, untrusted: &[PathBuf]) -> Option<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        let real = std::fs::canonicalize(&path).ok()?;
        return (!untrusted.iter().any(|u| real.starts_with(u))).then_some(path);
    }
    // The file itself too: a link in a trusted directory may lead into a root (`npm
    // link`).
    trusted_dirs(untrusted)
        .into_iter()
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
        .filter(|p| !is_untrusted(p, untrusted))
}

/// Whether `path` lies in a writable root (a file an earlier command may have written).
pub fn is_untrusted(path: &Path, untrusted: &[PathBuf]) -> bool {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    untrusted
        .iter()
        .any(|u| real.starts_with(u) || path.starts_with(u))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system's temporary one, with `tool` in it: a
    /// shell script given `body`.
    fn script(name: &str, body: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("netbox-query-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("tool");
        std::fs::write(&tool, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, tool)
    }

    fn command(tool: &Path) -> Command {
        let mut command = Command::new(tool);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        command
    }

    /// Whether process `pid` still runs (a zombie, dead and not yet reaped, does not).
    fn runs(pid: &str) -> bool {
        // Lossy: the name in parentheses is the process's own, in any bytes.
        std::fs::read(format!("/proc/{pid}/stat"))
            .ok()
            .map(|stat| String::from_utf8_lossy(&stat).into_owned())
            .and_then(|stat| {
                let state = stat.rsplit_once(") ")?.1.chars().next()?;
                Some(state != 'Z' && state != 'X')
            })
            .unwrap_or(false)
    }

    /// Each pid written to `file` stops running within 2 s.
    fn all_stopped(file: &Path) -> Vec<String> {
        let pids = std::fs::read_to_string(file).unwrap();
        let pids: Vec<&str> = pids.split_whitespace().collect();
        assert!(!pids.is_empty());
        let until = Instant::now() + Duration::from_secs(2);
        while pids.iter().any(|p| runs(p)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        pids.iter()
            .filter(|p| runs(p))
            .map(|p| p.to_string())
            .collect()
    }

    fn threads() -> usize {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    }

    /// A tool that hangs while a child of its holds its output: at the deadline both are
    /// killed, and the query leaves no thread behind (netbox forks next, STYLE.md rule 13).
    /// Counted in a process of its own (this test binary again, this test alone).
    #[test]
    fn a_tool_out_of_time_leaves_no_thread_and_no_child_behind() {
        const ALONE: &str = "NETBOX_TEST_QUERY_ALONE";
        let name =
            "plan::tools::query::tests::a_tool_out_of_time_leaves_no_thread_and_no_child_behind";
        if std::env::var_os(ALONE).is_none() {
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--test-threads=1", "--nocapture"])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        let (dir, tool) = script(
            "hung",
            "sleep 30 & echo $! >> \"$(dirname \"$0\")/pids\"\n\
             echo $$ >> \"$(dirname \"$0\")/pids\"\n\
             echo partial\n\
             exec sleep 30",
        );
        let before = threads();
        let started = Instant::now();
        assert_eq!(answer(command(&tool), Duration::from_secs(1)), None);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "took {took:?}");
        assert_eq!(threads(), before, "a thread outlived the query");
        assert_eq!(all_stopped(&dir.join("pids")), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A tool that exits at once, leaving a child that holds its output open past the
    /// deadline: not waited for beyond it, and the child is killed with the tool's group.
    #[test]
    fn an_answer_a_child_keeps_open_is_not_waited_for_past_the_deadline() {
        let (dir, tool) = script(
            "held",
            "sleep 30 & echo $! >> \"$(dirname \"$0\")/pids\"\necho early",
        );
        let started = Instant::now();
        assert_eq!(answer(command(&tool), Duration::from_secs(1)), None);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "took {took:?}");
        assert_eq!(all_stopped(&dir.join("pids")), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Control: a tool that answers is read, whole, and what it left running in its group
    /// (not holding its output) is stopped; one that fails gives nothing.
    #[test]
    fn a_tool_that_answers_is_read_and_nothing_of_it_stays() {
        let (dir, tool) = script(
            "answers",
            "sleep 30 > /dev/null & echo $! >> \"$(dirname \"$0\")/pids\"\n\
             i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done",
        );
        let text = answer(command(&tool), Duration::from_secs(5)).unwrap();
        assert_eq!(text.lines().count(), 2000);
        assert_eq!(text.lines().last(), Some("line 1999"));
        assert_eq!(all_stopped(&dir.join("pids")), Vec::<String>::new());
        let (failing_dir, failing) = script("fails", "echo no; exit 3");
        assert_eq!(answer(command(&failing), Duration::from_secs(5)), None);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&failing_dir);
    }
}
