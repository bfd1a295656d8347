//! The caller's terminal taken back from CMD. Whatever CMD's output ended with stays in
//! force on the terminal after it, whether it came through CMD's own pty or went straight
//! to netbox's standard output and error (`--no-tty`): conceal (SGR 8), a line-drawing
//! character set, the alternate screen, a one-line scroll region, an OSC or DCS string
//! left open (which swallows the text after it up to its end), or half an escape sequence
//! (whose final byte would be the first of netbox's). Any of these would hide the lines
//! netbox prints after the run: the git metadata check's warnings, errors, the timeout.
//! So before netbox's first write to a terminal after CMD, it writes `RESET` there, as
//! tmux does to a terminal it leaves; never to a pipe or a file, and nothing at all after
//! a run netbox has nothing to say about. With `--no-tty` CMD holds the caller's terminal
//! itself and can change its modes too (no echo, raw: tcsetattr needs no controlling
//! terminal): they are put back as they were when CMD started, unless another job has
//! the terminal's foreground by then.
//!
//! What netbox prints while CMD runs (each blocked attempt) is CMD's terminal's to show
//! as it likes, as a remote session's output is under ssh: the event log has it.
//!
//! The sequences are xterm's (ctlseqs), which VTE, kitty, iTerm2, Windows Terminal, tmux
//! and screen follow; one a terminal does not know is parsed and dropped. xterm's
//! charproc.c (2024): 1049's reset restores the saved cursor and pen (DECRC) even on the
//! main screen; the VT100 manual: DECSTBM homes the cursor. Measured with tmux 3.3a as
//! the terminal (the tests in sandbox_tty_reset.rs): the warning shows where CMD's
//! output ended, on the main screen, in plain text.

use std::sync::atomic::{AtomicU8, Ordering};

use super::Stream;

/// What netbox writes to a terminal before its first line after CMD, in order.
pub const RESET: &str = concat!(
    // CAN abandons an escape sequence or string left unfinished (the DEC parser's
    // "anywhere" rule, which xterm, VTE and tmux follow); ST ends a string where CAN
    // does not.
    "\x18\x1b\\",
    // The main screen. DECSC first, so that where no alternate screen is on, the DECRC
    // that 1049 does restores where the cursor is, not an older position.
    "\x1b7\x1b[?1049l",
    // The whole screen scrolls; DECSTBM homes the cursor, so it is saved and put back.
    "\x1b7\x1b[r\x1b8",
    // Plain text: SGR 0, and ASCII in G0 to G3 with G0 shifted in (after the DECRCs
    // above, which bring a saved pen and character sets back), default colours.
    "\x1b[0m\x1b(B\x1b)B\x1b*B\x1b+B\x0f\x1b]110\x1b\\\x1b]111\x1b\\",
    // No hyperlink open, autowrap on, replace mode, the cursor shown, the keyboard
    // unlocked (KAM).
    "\x1b]8;;\x1b\\\x1b[?7h\x1b[4l\x1b[?25h\x1b[2l",
    // What keys and the mouse send, as tmux leaves it: no mouse reports, focus events or
    // bracketed paste; cursor keys and keypad in normal mode.
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?1004l\x1b[?2004l",
    "\x1b[?1l\x1b>",
);

/// The bit that says a reset is owed on `stream`.
fn due(stream: Stream) -> u8 {
    match stream {
        Stream::Stdin => 0,
        Stream::Stdout => STDOUT_DUE,
        Stream::Stderr => STDERR_DUE,
    }
}

/// CMD (or `--fetch`'s CMD1) has been started: it may write to the terminal.
const HANDED_OVER: u8 = 1;
const STDOUT_DUE: u8 = 2;
const STDERR_DUE: u8 = 4;

/// Where the run stands, as the bits above.
static STATE: AtomicU8 = AtomicU8::new(0);

/// CMD is about to start (netbox tells pid 1 to run it): the modes of the caller's
/// terminal are kept to put back, as they are now (the first time: the second command
/// after `--fetch` must not take what the first left as the caller's).
pub fn handed_over() {
    super::save_modes();
    STATE.fetch_or(HANDED_OVER, Ordering::SeqCst);
}

/// Nothing of CMD's runs any more, and the last of its output has been relayed: the
/// caller's modes go back now, and a reset is owed to each of standard output and error
/// that is a terminal, before netbox's next write there.
pub fn cmd_ended() {
    if STATE.fetch_and(!HANDED_OVER, Ordering::SeqCst) & HANDED_OVER == 0 {
        return;
    }
    super::restore();
    for stream in [Stream::Stdout, Stream::Stderr] {
        if stream.terminal().is_some() {
            STATE.fetch_or(due(stream), Ordering::SeqCst);
        }
    }
}

/// Before netbox writes to `stream`: the reset, if one is owed there. Standard output
/// and error on one terminal owe it once.
pub fn before_writing(stream: Stream) {
    let owed = due(stream);
    if STATE.load(Ordering::SeqCst) & owed == 0 {
        return;
    }
    let mut settled = owed;
    let terminal = stream.terminal();
    for other in [Stream::Stdout, Stream::Stderr] {
        if terminal.is_some() && other.terminal() == terminal {
            settled |= due(other);
        }
    }
    if STATE.fetch_and(!settled, Ordering::SeqCst) & owed == 0 {
        return;
    }
    stream.with_fd(|fd| {
        let _ = super::write_all_blocking(fd, RESET.as_bytes());
    });
}

/// For a line written in a hurry (netbox's panic): whether it needs `RESET` before it,
/// CMD having had the terminal (it may be running still: the sandbox is killed first).
pub fn owed_on_stderr() -> bool {
    let state = STATE.load(Ordering::SeqCst);
    state & (HANDED_OVER | STDERR_DUE) != 0 && Stream::Stderr.terminal().is_some()
}
