//! The host's `/tmp`, which CMD does not see with a private `/tmp` (the default): a path
//! under it that no writable root carries in is simply not there inside. A `--ro` or
//! `--protect` of such a path does nothing, and a CMD found there would be "not found":
//! each is said with the fix (`--tmp host`, or move it).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::cli::TmpMode;

/// The host's `/tmp`, as its paths are canonicalised.
fn host_tmp() -> PathBuf {
    std::fs::canonicalize("/tmp").unwrap_or_else(|_| PathBuf::from("/tmp"))
}

/// Whether CMD cannot see `path` (canonical): under the host's `/tmp` with a private one,
/// and in no writable root, which the sandbox carries in at its own path.
fn unseen(path: &Path, tmp: TmpMode, write_roots: &[PathBuf]) -> bool {
    tmp == TmpMode::Private
        && path.starts_with(host_tmp())
        && !write_roots.iter().any(|root| path.starts_with(root))
}

/// A line for a `--ro` or `--protect` path CMD would not see at all: the run goes on (the
/// path is out of CMD's reach anyway), but the option does nothing, which is said.
pub(super) fn note_for_unseen(
    flag: &str,
    paths: &[PathBuf],
    tmp: TmpMode,
    write_roots: &[PathBuf],
) -> Option<String> {
    let path = paths.iter().find(|p| unseen(p, tmp, write_roots))?;
    Some(format!(
        "netbox: {flag} {}: under the host's /tmp, which CMD does not see (its /tmp is \
         private to the run), so it does nothing; give --tmp host to share the host's /tmp, \
         or move it out of /tmp",
        crate::printable::printable(&path.display().to_string())
    ))
}

/// A line for CMD's program, when the host finds it under its `/tmp` (named with a
/// slash, or on `path`) where CMD will not: it would be "command not found" inside.
pub(super) fn note_for_program(
    program: &OsStr,
    cwd: &Path,
    path: Option<&OsStr>,
    tmp: TmpMode,
    write_roots: &[PathBuf],
) -> Option<String> {
    let name = Path::new(program);
    let found = if program.as_encoded_bytes().contains(&b'/') {
        Some(cwd.join(name))
    } else {
        std::env::split_paths(path?)
            .map(|dir| cwd.join(dir).join(name))
            .find(|candidate| candidate.is_file())
    }?;
    let found = std::fs::canonicalize(found).ok()?;
    unseen(&found, tmp, write_roots).then(|| {
        let shown = crate::printable::printable(&found.display().to_string());
        let what = if program.as_encoded_bytes().contains(&b'/') {
            shown
        } else {
            format!(
                "{} (found at {shown})",
                crate::printable::printable(&program.to_string_lossy())
            )
        };
        format!(
            "netbox: {what} is under the host's /tmp, which CMD does not see (its /tmp is \
             private to the run): give --tmp host, or move it out of /tmp"
        )
    })
}
