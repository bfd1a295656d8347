//! Lines netbox writes to its standard error while its terminal is in raw mode (CMD has a
//! terminal of its own: netbox's terminal.rs). Raw mode turns off the terminal's
//! own newline handling, so each line then ends in CR LF, or the next would start where
//! this one ended.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static RAW: AtomicBool = AtomicBool::new(false);

/// Says whether the terminal is in raw mode from now on.
pub fn set_raw(raw: bool) {
    RAW.store(raw, Ordering::Relaxed);
}

/// Writes one line to standard error, as one write. A closed stderr is not a reason to
/// fail (eprintln! would panic).
pub fn say(line: &str) {
    let end = if RAW.load(Ordering::Relaxed) {
        "\r\n"
    } else {
        "\n"
    };
    let _ = std::io::stderr().write_all(format!("{line}{end}").as_bytes());
}
