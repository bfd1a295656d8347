//! A terminal of CMD's own, met as a user meets it: netbox runs on a
//! real pty this test makes (its controlling terminal, in the foreground), the test types
//! into the pty's master and reads what shows. Inside, `tty`, `/dev/tty`, job control,
//! window sizes and Ctrl-C work; the caller's terminal modes are as before the run,
//! however it ends; CMD holds nothing of the caller's terminal. Controls: `--no-tty` on
//! the same pty gives today's behaviour (no terminal).

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::pty::Winsize;
use nix::sys::termios;

use crate::support::{netbox_bin, TestDir};

nix::ioctl_write_ptr_bad!(set_window_size, libc::TIOCSWINSZ, libc::winsize);
nix::ioctl_read_bad!(get_window_size, libc::TIOCGWINSZ, libc::winsize);

/// The rows and columns of the terminal `fd` is.
pub(crate) fn window_size(fd: &impl AsRawFd) -> (u16, u16) {
    let mut size = Winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`, which lives for the call.
    unsafe { get_window_size(fd.as_raw_fd(), &mut size) }.unwrap();
    (size.ws_row, size.ws_col)
}

/// netbox running on a pty of the test's: its master, and everything shown on it so far.
pub(crate) struct OnTerminal {
    master: std::fs::File,
    pub(crate) slave: OwnedFd,
    shown: Arc<Mutex<Vec<u8>>>,
    child: Child,
}

impl OnTerminal {
    /// `netbox --quiet --log … ARGS -- CMD` on a new 24x80 pty.
    pub(crate) fn start(dir: &TestDir, args: &[&str], cmd: &[&str]) -> OnTerminal {
        let log = dir.join("events.jsonl").display().to_string();
        let mut all = vec!["--quiet", "--log", log.as_str()];
        all.extend_from_slice(args);
        all.push("--");
        all.extend_from_slice(cmd);
        OnTerminal::start_program(dir, &netbox_bin(), &all)
    }

    /// `PROGRAM ARGS` on a new 24x80 pty, as its controlling terminal, in the foreground.
    fn start_program(dir: &TestDir, program: &std::path::Path, args: &[&str]) -> OnTerminal {
        let size = Winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(&size, None).unwrap();
        let workspace = dir.join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&workspace)
            .env("TERM", "xterm")
            .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .stderr(Stdio::from(pty.slave.try_clone().unwrap()));
        // SAFETY: between fork and exec only async-signal-safe calls: setsid and one ioctl,
        // no allocation.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()?;
                if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let master = std::fs::File::from(pty.master);
        let shown = Arc::new(Mutex::new(Vec::new()));
        let reader = master.try_clone().unwrap();
        let sink = Arc::clone(&shown);
        std::thread::spawn(move || {
            let mut reader = reader;
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        OnTerminal {
            master,
            slave: pty.slave,
            shown,
            child,
        }
    }

    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().unwrap()).into_owned()
    }

    /// Waits until `text` has been shown (after `from` bytes), returns where it ends.
    fn wait_for(&self, text: &str, from: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let shown = self.shown();
            if let Some(at) = shown.get(from..).and_then(|rest| rest.find(text)) {
                return from + at + text.len();
            }
            assert!(
                Instant::now() < deadline,
                "waiting for {text:?}; shown: {shown:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn type_in(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
    }

    pub(crate) fn modes(&self) -> libc::termios {
        libc::termios::from(termios::tcgetattr(self.slave.as_fd()).unwrap())
    }

    /// Whether netbox has exited within `limit` (its status then); it keeps running if not.
    pub(crate) fn exited_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn wait(self) -> (ExitStatus, String) {
        let (status, shown) = self.wait_bytes();
        (status, String::from_utf8_lossy(&shown).into_owned())
    }

    /// Waits for netbox to exit; returns its status and every byte shown, as they were.
    pub(crate) fn wait_bytes(mut self) -> (ExitStatus, Vec<u8>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "netbox did not exit: {}",
                self.shown()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(100));
        let shown = self.shown.lock().unwrap().clone();
        (status, shown)
    }
}

pub(crate) fn same_modes(a: &libc::termios, b: &libc::termios) -> bool {
    a.c_iflag == b.c_iflag
        && a.c_oflag == b.c_oflag
        && a.c_cflag == b.c_cflag
        && a.c_lflag == b.c_lflag
        && a.c_cc == b.c_cc
}

const INSIDE: &str = "tty; { echo > /dev/tty; } 2>/dev/null && echo TTY-WRITABLE; \
    python3 -c 'import os; print(\"name\", os.ttyname(0))'; stty size; echo DONE";

#[test]
fn cmd_gets_a_terminal_of_its_own_and_the_callers_modes_come_back() {
    let dir = TestDir::new("tty-basics");
    let term = OnTerminal::start(&dir, &[], &["bash", "-c", INSIDE]);
    let before = term.modes();
    let (status, shown) = term_wait_with_modes(term, &before);
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains("/dev/pts/"), "{shown}");
    assert!(!shown.contains("not a tty"), "{shown}");
    assert!(shown.contains("TTY-WRITABLE"), "{shown}");
    assert!(shown.contains("name /dev/pts/"), "{shown}");
    assert!(shown.contains("24 80"), "{shown}");

    // Control: the same pty with --no-tty is today's run, without a terminal.
    let term = OnTerminal::start(&dir, &["--no-tty"], &["bash", "-c", INSIDE]);
    let (status, shown) = term.wait();
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains("not a tty"), "{shown}");
    assert!(!shown.contains("TTY-WRITABLE"), "{shown}");
}

/// Waits for the run and checks the caller's terminal modes are `before` again.
fn term_wait_with_modes(term: OnTerminal, before: &libc::termios) -> (ExitStatus, String) {
    let slave = term.slave.try_clone().unwrap();
    let (status, shown) = term.wait();
    let after = libc::termios::from(termios::tcgetattr(slave.as_fd()).unwrap());
    assert!(
        same_modes(before, &after),
        "terminal modes changed: {shown}"
    );
    (status, shown)
}

#[test]
fn job_control_and_window_size_changes_reach_cmd() {
    let dir = TestDir::new("tty-jobs");
    let mut term = OnTerminal::start(&dir, &[], &["bash", "--norc", "--noprofile", "-i"]);
    let before = term.modes();
    term.type_in("PS1='$ '; sleep 100 &\n");
    let at = term.wait_for("$ ", 0);
    term.type_in("jobs; echo JOBS-$?\n");
    let at = term.wait_for("JOBS-0", at);
    // A new size on the caller's terminal: the kernel tells netbox (SIGWINCH), which
    // tells CMD's terminal.
    let size = libc::winsize {
        ws_row: 33,
        ws_col: 101,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a live local.
    unsafe { set_window_size(term.master.as_raw_fd(), &size) }.unwrap();
    std::thread::sleep(Duration::from_millis(300));
    term.type_in("stty size\n");
    let at = term.wait_for("33 101", at);
    term.type_in("kill %1; wait; exit 7\n");
    let _ = at;
    let (status, shown) = term_wait_with_modes(term, &before);
    assert_eq!(status.code(), Some(7), "{shown}");
    assert!(shown.contains("Running"), "{shown}");
    assert!(!shown.contains("no job control"), "{shown}");
    assert!(
        !shown.contains("cannot set terminal process group"),
        "{shown}"
    );
}

#[test]
fn ctrl_c_reaches_the_foreground_job_and_a_killed_cmd_leaves_the_terminal_as_it_was() {
    let dir = TestDir::new("tty-ctrl-c");
    let term = OnTerminal::start(&dir, &[], &["bash", "-c", "echo READY; sleep 100"]);
    let before = term.modes();
    let mut term = term;
    term.wait_for("READY", 0);
    term.type_in("\x03");
    let (status, shown) = term_wait_with_modes(term, &before);
    assert_eq!(status.code(), Some(130), "{shown}");

    let term = OnTerminal::start(&dir, &[], &["bash", "-c", "echo READY; kill -9 $$"]);
    let before = term.modes();
    let (status, shown) = term_wait_with_modes(term, &before);
    assert_eq!(status.code(), Some(137), "{shown}");
    assert!(shown.contains("READY"), "{shown}");
}

/// CMD holds no fd of the caller's terminal (so TIOCSTI, or anything else, cannot reach
/// it); TIOCSTI on its own terminal works where the kernel allows it at all.
#[test]
fn cmd_holds_nothing_of_the_callers_terminal() {
    let dir = TestDir::new("tty-tiocsti");
    let script = r#"
import fcntl, os, termios
host = os.environ["HOST_TTY"]
mine = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        st = os.fstat(int(fd))
    except OSError:
        continue
    if st.st_rdev:
        mine.add(f"{st.st_dev}:{st.st_ino}")
try:
    st = os.fstat(os.open("/dev/tty", os.O_RDWR))
    mine.add(f"{st.st_dev}:{st.st_ino}")
except OSError:
    pass
print("HOST-TTY-INSIDE" if host in mine else "HOST-TTY-ABSENT", len(mine))
try:
    for c in b"injected\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
    print("READ-BACK", input())
except OSError as e:
    print("TIOCSTI-REFUSED", e.errno)
"#;
    let term = OnTerminal::start_with_identity(&dir, &["--", "python3", "-c", script]);
    let (status, shown) = term.wait();
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains("HOST-TTY-ABSENT"), "{shown}");
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|v| v.trim() == "1")
        .unwrap_or(true);
    if legacy {
        assert!(shown.contains("READ-BACK injected"), "{shown}");
    } else {
        assert!(shown.contains("TIOCSTI-REFUSED"), "{shown}");
    }
    // Control: without a terminal of its own, CMD inherits the caller's (the check can
    // see it), though with no controlling terminal TIOCSTI on it is refused.
    let term = OnTerminal::start_with_identity(&dir, &["--no-tty", "--", "python3", "-c", script]);
    let (status, shown) = term.wait();
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains("HOST-TTY-INSIDE"), "{shown}");
    assert!(shown.contains("TIOCSTI-REFUSED"), "{shown}");
}

impl OnTerminal {
    /// Like `start`, with `HOST_TTY` set to the identity (device:inode) of the pty netbox
    /// runs on, passed through `--env`.
    fn start_with_identity(dir: &TestDir, args: &[&str]) -> OnTerminal {
        // Its identity is known only once the pty exists: a small wrapper script
        // reads it from netbox's own standard input and passes it on.
        let wrapper = dir.join("with-rdev.sh");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\ntty=$(python3 -c 'import os; st = os.fstat(0); print(f\"{{st.st_dev}}:{{st.st_ino}}\")')\nexec {} --quiet --log {} --env HOST_TTY=\"$tty\" \"$@\"\n",
                netbox_bin().display(),
                dir.join("events.jsonl").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        OnTerminal::start_program(dir, &wrapper, args)
    }
}

/// A CMD that stopped itself ends at netbox's SIGTERM (it is continued to take the
/// signal), and the caller's terminal comes back.
#[test]
fn a_stopped_cmd_ends_at_sigterm() {
    let dir = TestDir::new("tty-stopped");
    let term = OnTerminal::start(&dir, &[], &["bash", "-c", "echo READY; kill -STOP $$"]);
    let before = term.modes();
    term.wait_for("READY", 0);
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(term.child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (status, shown) = term_wait_with_modes(term, &before);
    assert_eq!(status.code(), Some(143), "{shown}");
}

/// A terminal another program left non-blocking (the flag is shared by all on it) still
/// relays both ways.
#[test]
fn a_non_blocking_terminal_still_relays() {
    let dir = TestDir::new("tty-nonblock");
    let mut term = OnTerminal::start(&dir, &[], &["sh", "-c", "echo READY; read x; echo got=$x"]);
    let flags = nix::fcntl::fcntl(term.slave.as_fd(), nix::fcntl::FcntlArg::F_GETFL).unwrap();
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(term.slave.as_fd(), nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
    let at = term.wait_for("READY", 0);
    term.type_in("hello\n");
    term.wait_for("got=hello", at);
    let (status, shown) = term.wait();
    assert_eq!(status.code(), Some(0), "{shown}");
}

/// Output nobody reads any more (`netbox --tty -- yes | head -1`): CMD is hung up, as
/// by a terminal that goes away, instead of blocking forever on a full pty.
#[test]
fn unread_output_hangs_cmd_up() {
    let dir = TestDir::new("tty-unread");
    let started = Instant::now();
    let out = Command::new("timeout")
        .arg("30")
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "{} --quiet --log {} --tty -- yes </dev/null | head -1",
            netbox_bin().display(),
            dir.join("yes.jsonl").display()
        ))
        .current_dir({
            let ws = dir.join("ws");
            std::fs::create_dir_all(&ws).unwrap();
            ws
        })
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(25), "the run hung");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "y\r\n");
}

/// A full-screen program draws over the refusals said while it ran: once CMD is gone,
/// one line says how many writes were refused. Control: without a terminal of its own,
/// each refusal stays where it was said, and no such line is added.
#[test]
fn refused_writes_are_said_again_after_a_full_screen_command() {
    let dir = TestDir::new("tty-writes-again");
    let log = dir.join("events.jsonl").display().to_string();
    let script = "echo x > /etc/nb-tty-write 2>/dev/null; printf '\\033[2J\\033[H'; echo drawn";
    let term = OnTerminal::start_program(
        &dir,
        &netbox_bin(),
        &["--log", &log, "--", "bash", "-c", script],
    );
    let (status, shown) = term.wait();
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains("drawn"), "{shown}");
    assert!(
        shown.contains("netbox: 1 write(s) refused while the command ran"),
        "{shown}"
    );
    let control = OnTerminal::start_program(
        &dir,
        &netbox_bin(),
        &["--no-tty", "--log", &log, "--", "bash", "-c", script],
    );
    let (status, shown) = control.wait();
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(shown.contains("blocked write"), "{shown}");
    assert!(!shown.contains("refused while the command ran"), "{shown}");
}
