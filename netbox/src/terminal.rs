//! A terminal of CMD's own: when netbox runs in a terminal, CMD gets a new
//! pseudo-terminal made inside the sandbox as its controlling terminal, as `ssh -t`,
//! `docker run -t` and `script` give one. netbox puts its own terminal in raw mode, relays
//! bytes both ways and window-size changes in, and restores the terminal's modes however
//! the run ends (but for a SIGKILL of netbox itself, which nothing can catch).
//!
//! The pty is the sandbox's: opened by pid 1 from its private devpts instance, so `tty`
//! inside names `/dev/pts/N` that exists there, and TIOCSTI from inside reaches only that
//! pty's input, which CMD itself reads. netbox's own terminal never enters the sandbox as
//! CMD's standard input or output.
//!
//! After CMD, with a pty of its own or without (`--no-tty`), the caller's terminal is taken
//! back: its modes as they were, and a reset of what CMD's output left in force before
//! netbox's next line there (`reset`).

mod reset;

pub use reset::{before_writing, cmd_ended, handed_over, owed_on_stderr, reset};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

use nix::sys::termios::{self, SetArg, Termios};

use crate::sys::pty::{self, Winsize};

/// One of netbox's standard streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdin,
    Stdout,
    Stderr,
}

impl Stream {
    fn with_fd<T>(self, f: impl FnOnce(BorrowedFd<'_>) -> T) -> T {
        match self {
            Stream::Stdin => f(std::io::stdin().as_fd()),
            Stream::Stdout => f(std::io::stdout().as_fd()),
            Stream::Stderr => f(std::io::stderr().as_fd()),
        }
    }

    /// The terminal it is (its device number), if it is one.
    fn terminal(self) -> Option<u64> {
        self.with_fd(|fd| {
            if !nix::unistd::isatty(fd).unwrap_or(false) {
                return None;
            }
            nix::sys::stat::fstat(fd).ok().map(|stat| stat.st_rdev)
        })
    }
}

/// `--tty` / `--no-tty`, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// A pty when netbox's standard input and output are both terminals and netbox is in
    /// the terminal's foreground (a background job must not take the terminal over).
    Auto,
    Always,
    Never,
}

/// What the sandbox needs to make CMD's terminal.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The caller's terminal modes (as they are before raw mode), copied to the new pty so
    /// that erase, interrupt and the rest keep their keys.
    pub modes: Option<libc::termios>,
    pub size: Option<Winsize>,
    /// CMD's standard error goes to the pty too (netbox's own is a terminal); otherwise it
    /// stays what netbox's is (a file, a pipe).
    pub stderr_too: bool,
}

/// Whether CMD gets a terminal of its own, and how it is made.
pub fn plan(choice: Choice) -> Option<Plan> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let is_tty = |fd: BorrowedFd<'_>| nix::unistd::isatty(fd).unwrap_or(false);
    let wanted = match choice {
        Choice::Never => false,
        Choice::Always => true,
        Choice::Auto => {
            is_tty(stdin.as_fd()) && is_tty(stdout.as_fd()) && in_foreground(stdin.as_fd())
        }
    };
    if !wanted {
        return None;
    }
    let terminal = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()]
        .into_iter()
        .find(|fd| is_tty(*fd));
    Some(Plan {
        modes: terminal.and_then(|fd| termios::tcgetattr(fd).ok().map(libc::termios::from)),
        size: terminal.and_then(pty::window_size),
        stderr_too: is_tty(stderr.as_fd()),
    })
}

fn in_foreground(fd: BorrowedFd<'_>) -> bool {
    nix::unistd::tcgetpgrp(fd).is_ok_and(|group| group == nix::unistd::getpgrp())
}

/// The modes of each of the caller's terminals among netbox's standard streams (one entry
/// a terminal), kept to put back; also for the panic hook (netbox aborts on a panic, so
/// no destructor runs then).
static SAVED: Mutex<Vec<Saved>> = Mutex::new(Vec::new());

struct Saved {
    stream: Stream,
    terminal: u64,
    modes: Termios,
    size: Option<Winsize>,
}

/// CMD has a pty of its own (`RelayedTerminal`): it never holds the caller's terminal, so the
/// window size there is the caller's, which a resize during the run may have changed.
static OWN_PTY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// netbox's side of CMD's terminal while it runs: the caller's terminal in raw mode, and
/// the relay threads.
pub struct RelayedTerminal {
    master: OwnedFd,
    output: Option<std::thread::JoinHandle<()>>,
}

impl RelayedTerminal {
    /// Takes the master end from the sandbox: raw mode on netbox's terminal (if standard
    /// input is one), then the relays: standard input into the pty, the pty out to
    /// standard output.
    pub fn start(master: OwnedFd, sandbox: nix::unistd::Pid) -> std::io::Result<RelayedTerminal> {
        OWN_PTY.store(true, std::sync::atomic::Ordering::SeqCst);
        enter_raw_mode();
        let input = master.try_clone()?;
        let output = master.try_clone()?;
        let _ = std::thread::Builder::new()
            .name("netbox-tty-in".into())
            .spawn(move || relay_input(input));
        let output = std::thread::Builder::new()
            .name("netbox-tty-out".into())
            .spawn(move || relay_output(output, sandbox))?;
        Ok(RelayedTerminal {
            master,
            output: Some(output),
        })
    }

    /// The caller's terminal changed size: so does CMD's (the kernel tells CMD).
    pub fn resize(&self) {
        let stdin = std::io::stdin();
        let stdout = std::io::stdout();
        let size = pty::window_size(stdin.as_fd()).or_else(|| pty::window_size(stdout.as_fd()));
        if let Some(size) = size {
            let _ = pty::set_window_size(self.master.as_fd(), &size);
        }
    }

    /// Once the sandbox is gone: waits for the last of CMD's output (the pty ends when its
    /// last holder, pid 1, has exited), then restores the caller's terminal.
    pub fn finish(mut self) {
        if let Some(output) = self.output.take() {
            let _ = output.join();
        }
        restore();
    }
}

impl Drop for RelayedTerminal {
    fn drop(&mut self) {
        restore();
    }
}

/// Raw mode on standard input, if it is a terminal: every byte (Ctrl-C and Ctrl-Z
/// included) goes to CMD's terminal, whose own line discipline acts on it. Output
/// processing is off too: CMD's terminal has done it already.
fn enter_raw_mode() {
    let stdin = std::io::stdin();
    let Ok(mut raw) = termios::tcgetattr(stdin.as_fd()) else {
        return;
    };
    save_modes();
    termios::cfmakeraw(&mut raw);
    if termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).is_ok() {
        bridge::terminal::set_raw(true);
    }
}

/// Keeps the modes of each terminal among standard input, output and error, unless they
/// are kept already.
fn save_modes() {
    let Ok(mut kept) = SAVED.lock() else {
        return;
    };
    for stream in [Stream::Stdin, Stream::Stdout, Stream::Stderr] {
        let Some(terminal) = stream.terminal() else {
            continue;
        };
        if kept.iter().any(|s| s.terminal == terminal) {
            continue;
        }
        if let Ok(modes) = stream.with_fd(|fd| termios::tcgetattr(fd)) {
            kept.push(Saved {
                stream,
                terminal,
                modes,
                size: stream.with_fd(pty::window_size),
            });
        }
    }
    drop(kept);
    install_panic_hook();
}

/// Puts the caller's terminal back (once; later calls do nothing), except on a terminal
/// where another job has the foreground by now: it is that job's then. With `--no-tty` CMD
/// held it and could have stopped its output (`tcflow(TCOOFF)`: netbox's next write would
/// wait forever), changed its modes, or set its window size (TIOCSWINSZ): output is
/// started again (TCOON), then the modes and the size are put back as they were when CMD
/// started. A window resized during such a run is put back to its size at the start too:
/// nothing tells that resize from CMD's. With a pty of CMD's own, the caller's size is
/// left as it is.
pub fn restore() {
    let saved = SAVED
        .lock()
        .map(|mut kept| std::mem::take(&mut *kept))
        .unwrap_or_default();
    let own_pty = OWN_PTY.load(std::sync::atomic::Ordering::SeqCst);
    for Saved {
        stream,
        modes,
        size,
        ..
    } in saved
    {
        stream.with_fd(|fd| {
            let another_job =
                nix::unistd::tcgetpgrp(fd).is_ok_and(|group| group != nix::unistd::getpgrp());
            if another_job {
                return;
            }
            let _ = termios::tcflow(fd, termios::FlowArg::TCOON);
            if termios::tcgetattr(fd).ok().as_ref() != Some(&modes) {
                // TCSANOW: TCSADRAIN would wait for output to drain, which a terminal
                // whose output is stopped never does. Nothing written is lost or changed
                // by it: the line discipline processes output as it is written (n_tty),
                // so what netbox or CMD wrote has been processed under the modes then.
                let _ = termios::tcsetattr(fd, SetArg::TCSANOW, &modes);
            }
            if let Some(size) = size.filter(|_| !own_pty) {
                let now = pty::window_size(fd);
                let same = now.is_some_and(|n| {
                    (n.ws_row, n.ws_col, n.ws_xpixel, n.ws_ypixel)
                        == (size.ws_row, size.ws_col, size.ws_xpixel, size.ws_ypixel)
                });
                if !same {
                    let _ = pty::set_window_size(fd, &size);
                }
            }
        });
    }
    bridge::terminal::set_raw(false);
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// Standard input into the pty until it ends; then the terminal's end-of-file character
/// (twice after an unfinished line, as a terminal user would type it), read from the
/// pty's modes. Signals are the main thread's.
fn relay_input(master: OwnedFd) {
    let _ = nix::sys::signal::SigSet::all().thread_block();
    let stdin = std::io::stdin();
    let mut buf = [0u8; 4096];
    let mut last = b'\n';
    loop {
        match read_blocking(stdin.as_fd(), &mut buf) {
            Ok(0) => {
                let modes = termios::tcgetattr(master.as_fd()).ok();
                let canonical = modes
                    .as_ref()
                    .is_some_and(|m| m.local_flags.contains(termios::LocalFlags::ICANON));
                let eof = modes
                    .map(|m| m.control_chars[termios::SpecialCharacterIndices::VEOF as usize])
                    .filter(|c| *c != 0)
                    .unwrap_or(4);
                let times = if canonical && last != b'\n' { 2 } else { 1 };
                for _ in 0..times {
                    let _ = write_all_blocking(master.as_fd(), &[eof]);
                }
                return;
            }
            Ok(n) => {
                last = buf[n - 1];
                if write_all_blocking(master.as_fd(), &buf[..n]).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

/// Reads, waiting out EINTR and EAGAIN (a terminal others left non-blocking: the flag is
/// shared by every process on it, and netbox does not change it).
fn read_blocking(fd: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match nix::unistd::read(fd, buf) {
            Ok(n) => return Ok(n),
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => wait_for(fd, nix::poll::PollFlags::POLLIN),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes all of `data`, waiting out EINTR and EAGAIN likewise.
fn write_all_blocking(fd: BorrowedFd<'_>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => wait_for(fd, nix::poll::PollFlags::POLLOUT),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn wait_for(fd: BorrowedFd<'_>, events: nix::poll::PollFlags) {
    let mut fds = [nix::poll::PollFd::new(fd, events)];
    let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE);
}

/// The pty out to standard output until it ends (EIO once nothing holds its other end).
/// If standard output stops taking it (a closed pipe, a terminal gone), CMD is hung up
/// (SIGHUP through the sandbox's pid 1, which passes it on as netbox's own SIGHUP is; a
/// pty master can only send SIGINT, SIGQUIT and SIGTSTP itself) and the rest is read and
/// dropped, so CMD never blocks on a full pty.
fn relay_output(master: OwnedFd, sandbox: nix::unistd::Pid) {
    let _ = nix::sys::signal::SigSet::all().thread_block();
    let stdout = std::io::stdout();
    let mut buf = [0u8; 16384];
    let mut discarding = false;
    loop {
        match read_blocking(master.as_fd(), &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if discarding {
                    continue;
                }
                if write_all_blocking(stdout.as_fd(), &buf[..n]).is_err() {
                    discarding = true;
                    // pid 1 is netbox's child, unreaped until netbox has joined this
                    // thread: the pid names it still.
                    let _ = nix::sys::signal::kill(sandbox, nix::sys::signal::Signal::SIGHUP);
                }
            }
        }
    }
}
