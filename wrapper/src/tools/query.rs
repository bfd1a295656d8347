//! Asking a tool about itself: its config query or a one-line script run with its own
//! interpreter, with a deadline (a tool that hangs must not hang netbox's start).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a tool may take to answer.
const DEADLINE: Duration = Duration::from_secs(10);

/// Runs `program args` in `cwd` and returns its standard output, if it ran and exited 0
/// in time. Its standard error is dropped; nothing is read from the terminal.
pub fn output(program: &str, args: &[&str], cwd: &Path) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = (&mut stdout).take(4 << 20).read_to_end(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < DEADLINE => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let text = reader.join().ok()?;
    status
        .success()
        .then(|| String::from_utf8_lossy(&text).into_owned())
}
