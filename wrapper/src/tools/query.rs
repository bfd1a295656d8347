//! Asking a tool about itself: its config query or a one-line script run with its own
//! interpreter, with a deadline (a tool that hangs must not hang netbox's start).
//!
//! This runs on the host, before the sandbox, in or about a workspace that an earlier
//! sandboxed command may have written: the program is found only in absolute `PATH`
//! directories outside that workspace (a planted `./node_modules/.bin/npm` is never
//! run), Python ignores the current directory and its environment (`-I`, and
//! `PYTHONSAFEPATH`), and go never switches to a toolchain a `go.mod` asks for
//! (`GOTOOLCHAIN=local`).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a tool may take to answer.
const DEADLINE: Duration = Duration::from_secs(10);

/// Runs `program args` in `cwd` and returns its standard output, if it ran and exited 0
/// in time. `workspace`: where the program must not come from. Its standard error is
/// dropped; nothing is read from the terminal.
pub fn output(program: &str, args: &[&str], cwd: &Path, workspace: &Path) -> Option<String> {
    let program = trusted(program, workspace)?;
    let mut child = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .env("PYTHONSAFEPATH", "1")
        .env("GOTOOLCHAIN", "local")
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

/// `program` as found in an absolute `PATH` directory that does not lie in `workspace`
/// (or as given, if it is a path itself, which callers take from such a program).
pub fn trusted(program: &str, workspace: &Path) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        return Some(std::path::PathBuf::from(program));
    }
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .filter(|d| {
            let real = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
            !real.starts_with(&workspace)
        })
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
}
