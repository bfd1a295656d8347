//! The record a run keeps while its audit is owed: written before the sandbox starts,
//! locked (flock) for as long as netbox lives, removed once the audit is done. A record
//! that nobody holds belongs to a run that ended without its audit (netbox was killed):
//! the next run finds it and audits in its place.
//!
//! Records live in `.netbox-pending-UID/` beside the event log, a directory of the user's
//! own (created 0700, and used only if it is still the user's and writable by no one
//! else): the log's directory is never inside a writable root, so CMD cannot plant or
//! remove records there.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Scope;

/// A record larger than this is not read (one holds a scope: a few paths).
const MAX_RECORD_BYTES: u64 = 4 << 20;

/// Roots in one record at most (a run has its workspace, its `--write` paths and /tmp;
/// a home made writable, one for each of its entries); a record with more is not one
/// netbox wrote.
const MAX_RECORD_ROOTS: usize = 65536;

/// Placeholders in one record at most (a run's gitlinks are bounded at 4096).
const MAX_RECORD_PLACEHOLDERS: usize = 16384;

/// What a record holds.
#[derive(Serialize, Deserialize)]
pub struct Record {
    pub session: String,
    pub scope: Scope,
    /// The placeholders the run held: a killed run's are removed by the next run that
    /// finds its record (if no other run holds them, and they are still placeholders).
    #[serde(default, with = "bridge::log::path_json::exact::list")]
    pub placeholders: Vec<PathBuf>,
}

/// This run's record, held until its audit is done.
pub struct Pending {
    held: Option<(PathBuf, nix::fcntl::Flock<std::fs::File>)>,
}

/// The directory of records beside `log` (in its directory, resolved: the same
/// directory is the same place however the log was named).
pub fn dir_beside(log: &Path) -> PathBuf {
    let absolute = std::path::absolute(log).unwrap_or_else(|_| log.to_owned());
    dir_in(absolute.parent().unwrap_or(Path::new("/")))
}

/// The directory of records in the directory `logs` (resolved).
pub fn dir_in(logs: &Path) -> PathBuf {
    let logs = std::fs::canonicalize(logs).unwrap_or_else(|_| logs.to_owned());
    logs.join(format!(".netbox-pending-{}", nix::unistd::geteuid()))
}

/// Whether `dir` is ours alone: a directory (not a symlink) this user owns, which no one
/// else may write to.
fn ours_alone(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| {
        m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o022 == 0
    })
}

impl Pending {
    /// Writes and locks this run's record in `dir`. If it cannot, says so once: the run
    /// goes on, audited at its end as usual, but not if netbox is killed first.
    pub fn begin(dir: &Path, record: &Record) -> Pending {
        match write_locked(dir, record) {
            Ok(held) => Pending { held: Some(held) },
            Err(e) => {
                crate::output::say(&format!(
                    "netbox: warning: cannot keep a record for this run's git metadata check in {} ({e}); \
                     if netbox is killed, no later run checks what it left",
                    crate::printable::printable(&dir.to_string_lossy())
                ));
                Pending { held: None }
            }
        }
    }

    /// The audit is done: the record goes.
    pub fn finish(self) {
        if let Some((path, lock)) = self.held {
            let _ = std::fs::remove_file(&path);
            drop(lock);
        }
    }

    /// The audit was cancelled: the record stays, unlocked once netbox exits, for the
    /// next run to finish.
    pub fn keep(self) {}
}

fn write_locked(
    dir: &Path,
    record: &Record,
) -> std::io::Result<(PathBuf, nix::fcntl::Flock<std::fs::File>)> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if !ours_alone(dir) {
        return Err(std::io::Error::other(
            "the directory is not this user's alone",
        ));
    }
    // A record no run would read (past the bound below) is said, here, not written.
    let text = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    if text.len() as u64 > MAX_RECORD_BYTES {
        return Err(std::io::Error::other(format!(
            "the record would be {} bytes, more than the {MAX_RECORD_BYTES} one may hold",
            text.len()
        )));
    }
    // Written and locked under a name no reader takes, then renamed into place: a record
    // is never seen unlocked or half written while its run lives.
    let path = dir.join(format!("{}.json", record.session));
    let temp = dir.join(format!(".{}.tmp", record.session));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)?;
    let placed = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| std::io::Error::from(errno))
        .and_then(|mut lock| {
            lock.write_all(&text)?;
            std::fs::rename(&temp, &path)?;
            Ok(lock)
        });
    match placed {
        Ok(lock) => Ok((path, lock)),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// A record nobody holds any more, locked by us while we audit in its place.
pub struct Orphan {
    pub record: Record,
    path: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl Orphan {
    /// Audited: the record goes.
    pub fn finish(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Every record in `dirs` whose run is gone (nobody holds its lock). A record that cannot
/// be read is removed (it holds nothing to audit); one held by a live run is left alone.
pub fn orphans(dirs: &[PathBuf]) -> Vec<Orphan> {
    let mut found = Vec::new();
    for dir in dirs {
        if !ours_alone(dir) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            // Never blocks (a fifo planted there), never follows a link.
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
            else {
                continue;
            };
            if !file.metadata().is_ok_and(|m| m.is_file()) {
                continue;
            }
            let Ok(mut lock) =
                nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            else {
                continue;
            };
            // The run that wrote it may have finished and removed it meanwhile.
            let same = match (lock.metadata(), std::fs::symlink_metadata(&path)) {
                (Ok(held), Ok(now)) => held.ino() == now.ino() && held.dev() == now.dev(),
                _ => false,
            };
            if !same {
                continue;
            }
            let mut text = Vec::new();
            let read = (&mut *lock)
                .take(MAX_RECORD_BYTES)
                .read_to_end(&mut text)
                .ok()
                .and_then(|_| serde_json::from_slice::<Record>(&text).ok())
                .filter(|r| {
                    r.scope.roots.len() <= MAX_RECORD_ROOTS
                        && r.placeholders.len() <= MAX_RECORD_PLACEHOLDERS
                });
            match read {
                Some(record) => found.push(Orphan {
                    record,
                    path,
                    _lock: lock,
                }),
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
    found
}
