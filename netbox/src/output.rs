//! What netbox itself prints: one line to stderr at a time (notices, errors), and a
//! command's whole output to stdout. Every module prints through these two, and so after
//! CMD has had the terminal, the first write to it is preceded by a reset of what CMD
//! left there (terminal/reset.rs).

use crate::error::WrapperError;

/// Writes one line to stderr. A closed stderr is not a reason to fail a run (eprintln!
/// would panic on it).
pub fn say(line: &str) {
    crate::terminal::before_writing(crate::terminal::Stream::Stderr);
    bridge::terminal::say(line);
}

/// Writes a command's output (a report, an allowlist) to stdout, whole, and flushes it.
pub fn print_stdout(text: &str) -> Result<(), WrapperError> {
    use std::io::Write;
    crate::terminal::before_writing(crate::terminal::Stream::Stdout);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(WrapperError::Output)
}
