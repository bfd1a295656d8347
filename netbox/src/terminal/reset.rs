//! The caller's terminal taken back from CMD. Whatever CMD's output ended with stays in
//! force on the terminal after it, whether it came through CMD's own pty or went straight
//! to netbox's standard output and error (`--no-tty`): conceal (SGR 8), a line-drawing
//! character set, the alternate screen, a one-line scroll region, left and right margins,
//! an OSC or DCS string left open (which swallows the text after it up to its end), or
//! half an escape sequence (whose final byte would be the first of netbox's). Any of these
//! would hide the lines netbox prints after the run: the git metadata check's warnings,
//! errors, the timeout. So before netbox's first write to a terminal after CMD, it writes
//! [`reset`] there, as tmux does to a terminal it leaves (and, inside GNU screen, through
//! screen to the terminal beyond it); never to a pipe or a file, and nothing at all after
//! a run netbox has nothing to say about. With `--no-tty` CMD holds the caller's terminal
//! itself and can change its modes too (no echo, raw: tcsetattr needs no controlling
//! terminal), stop its output and set its window size: see `terminal::restore`.
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

/// The margins: none left and right (DECLRMM off, which xterm resets them with; while it
/// is on, `CSI s` sets them instead of saving the cursor), and the whole screen scrolls
/// (DECSTBM homes the cursor, so it is saved and put back).
macro_rules! reset_margins {
    () => {
        "\x1b[?69l\x1b7\x1b[r\x1b8"
    };
}

/// Plain text, with `$st` ending each OSC string (ST for the terminal netbox writes to,
/// BEL inside GNU screen's passthrough, whose DCS an ST would end): SGR 0, and ASCII in
/// G0 to G3 with G0 shifted in (after any DECRC, which brings a saved pen and character
/// sets back), default colours, no hyperlink open, autowrap on, replace mode, the cursor
/// shown, the keyboard unlocked (KAM).
macro_rules! reset_text {
    ($st:literal) => {
        concat!(
            "\x1b[0m\x1b(B\x1b)B\x1b*B\x1b+B\x0f\x1b]110",
            $st,
            "\x1b]111",
            $st,
            "\x1b]8;;",
            $st,
            "\x1b[?7h\x1b[4l\x1b[?25h\x1b[2l",
        )
    };
}

/// What netbox writes to a terminal before its first line after CMD, in order.
pub const RESET: &str = concat!(
    // CAN abandons an escape sequence or string left unfinished (the DEC parser's
    // "anywhere" rule, which xterm, VTE and tmux follow); ST ends a string where CAN
    // does not.
    "\x18\x1b\\",
    // The main screen. DECSC first, so that where no alternate screen is on, the DECRC
    // that 1049 does restores where the cursor is, not an older position.
    "\x1b7\x1b[?1049l",
    reset_margins!(),
    reset_text!("\x1b\\"),
    // What keys and the mouse send, as tmux leaves it: no mouse reports, focus events or
    // bracketed paste; cursor keys and keypad in normal mode.
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?1004l\x1b[?2004l",
    "\x1b[?1l\x1b>",
);

/// The reset again, for the terminal GNU screen runs in: screen hands the content of a DCS
/// string to its own terminal as it is (CMD's `ESC P ESC [8m ESC \` conceals what follows
/// there, past screen's own state, which `RESET` resets). So inside screen what hides
/// text is reset that way too: CAN first (screen keeps it in the string), the margins,
/// plain text with OSC strings ended by BEL. Not the alternate screen, nor the keys and
/// the mouse: screen itself runs on its terminal's alternate screen and sets those there.
/// Measured with screen 4.09 in tmux 3.3a (sandbox_tty_reset.rs).
pub const SCREEN_PASSTHROUGH: &str =
    concat!("\x1bP\x18", reset_margins!(), reset_text!("\x07"), "\x1b\\");

/// What to write before netbox's first line after CMD on a terminal: `RESET`, and inside
/// GNU screen (`STY` set, or a `TERM` of screen's) the same passed through to screen's
/// terminal. tmux sets such a `TERM` too, and drops a DCS it does not know.
pub fn reset() -> String {
    let in_screen = std::env::var_os("STY").is_some()
        || std::env::var("TERM").is_ok_and(|term| term.starts_with("screen"));
    if in_screen {
        format!("{RESET}{SCREEN_PASSTHROUGH}")
    } else {
        RESET.to_owned()
    }
}

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
        let _ = super::write_all_blocking(fd, reset().as_bytes());
    });
}

/// For a line written in a hurry (netbox's panic): whether it needs `RESET` before it,
/// CMD having had the terminal (it may be running still: the sandbox is killed first).
pub fn owed_on_stderr() -> bool {
    let state = STATE.load(Ordering::SeqCst);
    state & (HANDED_OVER | STDERR_DUE) != 0 && Stream::Stderr.terminal().is_some()
}
