//! The filesystem rows: the read-only root and the writable roots, protected paths,
//! hidden paths, and netbox's cache home.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bridge::log::records::{Check, Outcome, WatchedWrite};

use super::verdict::{check, refused, succeeded};
use super::ProbeInput;

/// A file name no one can have prepared: CMD of an earlier run could have left any fixed
/// name behind (as a directory, say) to make every later probe fail.
pub(super) fn probe_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".netbox-probe-{nanos:08x}-{n}")
}

/// Creates a new file (never truncating anything) and removes it again. Nothing is written
/// to it: a read-only mount refuses the create itself (EROFS), and an empty file holds no
/// block whose removal ext4 mounted with `discard` would wait to trim (~45 µs here).
pub(super) fn create_and_remove(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    std::fs::remove_file(path)
}

/// The writable-root control: a file is created and removed inside a directory root; a
/// file root is opened for appending (nothing is written).
pub(super) fn write_control(root: &Path) -> Outcome {
    if root.is_dir() {
        let path = root.join(probe_name());
        succeeded(
            format!("create and remove {}", path.display()),
            create_and_remove(&path),
        )
    } else {
        succeeded(
            format!("open {} for writing", root.display()),
            std::fs::OpenOptions::new()
                .append(true)
                .open(root)
                .map(drop),
        )
    }
}

/// Notes a write the probe tried, and whether the mounts refused it (EROFS), for netbox
/// to compare with its denied-write log; hands the result on.
pub(super) fn watched(
    list: &mut Vec<WatchedWrite>,
    path: &Path,
    result: std::io::Result<()>,
) -> std::io::Result<()> {
    list.push(WatchedWrite {
        path: path.to_owned(),
        refused: matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EROFS)),
    });
    result
}

/// Writable roots the probe writes to.
pub(super) const MAX_WRITE_CONTROLS: usize = 4;

pub(super) fn read_only_root(input: &ProbeInput) -> Check {
    let forbidden = input
        .outside
        .iter()
        .map(|dir| {
            let path = dir.join(probe_name());
            refused(
                format!("create {}", path.display()),
                create_and_remove(&path),
                &[libc::EROFS],
            )
        })
        .collect();
    // A few roots take a write (the control that the mounts let writes through); each is
    // checked for being the directory netbox resolved. Not every root is written to: a
    // home split into its entries has hundreds, and each write changes a directory's
    // modification time.
    let control = input
        .write_roots
        .iter()
        .take(MAX_WRITE_CONTROLS)
        .chain(std::iter::once(&input.temp_dir))
        .map(|root| write_control(root))
        .chain(
            input
                .root_identities
                .iter()
                .map(|(root, expected)| same_directory(root, *expected)),
        )
        // A writable bind's DST is a writable root's other name: the very SRC, writable.
        .chain(input.binds.iter().filter(|b| b.writable).flat_map(|b| {
            [
                same_directory(&b.target, b.identity),
                write_control(&b.target),
            ]
        }))
        .collect();
    check("read-only root, writable roots", forbidden, control)
}

/// That the sandbox's path to a writable root leads, with no symlink, to the directory
/// netbox resolved at start-up: not a look-alike swapped in while the sandbox was built.
pub(super) fn same_directory(root: &Path, expected: crate::sys::resolve::FileId) -> Outcome {
    use crate::sys::resolve::{open_exact, FileId};
    let found = open_exact(root).and_then(FileId::of);
    Outcome {
        attempt: format!("{} is the directory netbox resolved", root.display()),
        ok: matches!(&found, Ok(id) if *id == expected),
        result: match found {
            Ok(id) if id == expected => "same".into(),
            Ok(id) => format!("another: {id}, not {expected}"),
            Err(e) => crate::sys::resolve::describe(&e),
        },
    }
}

/// `--ro-bind`, and what is protected under a `--bind`'s SRC: each DST is the SRC netbox
/// resolved (reached with no symlink), and refuses a create (a file one, an open for
/// writing), as each protected path under a writable SRC does where DST shows it. `None`
/// when there is nothing of that kind: a writable bind alone is proved with the writable
/// roots.
pub(super) fn bound_paths(input: &ProbeInput) -> Option<Check> {
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    for bind in &input.binds {
        let shown_protected: Vec<PathBuf> = if bind.writable {
            input
                .protected
                .iter()
                .filter_map(|p| Some(bind.target.join(p.strip_prefix(&bind.source).ok()?)))
                .collect()
        } else {
            vec![bind.target.clone()]
        };
        if shown_protected.is_empty() {
            continue;
        }
        if !bind.writable {
            control.push(same_directory(&bind.target, bind.identity));
        }
        forbidden.extend(shown_protected.iter().map(|path| refuse_a_write(path)));
    }
    (!forbidden.is_empty()).then(|| check("bound paths", forbidden, control))
}

/// A create inside `path` (a directory), or an open of it for writing in append mode with
/// nothing written (a file: no side effect even if it opened): refused with EROFS, or the
/// outcome says what happened.
fn refuse_a_write(path: &Path) -> Outcome {
    if path.is_dir() {
        let inside = path.join(probe_name());
        refused(
            format!("create {}", inside.display()),
            create_and_remove(&inside),
            &[libc::EROFS],
        )
    } else {
        // Non-blocking: a FIFO (which netbox does not pin) would wait for a reader.
        refused(
            format!("open {} for writing", path.display()),
            std::fs::OpenOptions::new()
                .append(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .map(drop),
            &[libc::EROFS],
        )
    }
}

pub(super) fn protected_paths(input: &ProbeInput) -> Check {
    let mut forbidden: Vec<Outcome> = input
        .protected
        .iter()
        .map(|path| refuse_a_write(path))
        .collect();
    // Kernel knobs: as kuid 0 a capability-less process could still open these for
    // writing, so the mount itself must be read-only (EACCES alone would only show that
    // this user lacks permission).
    let sysctl_ro = nix::sys::statvfs::statvfs("/proc/sys")
        .map(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    forbidden.push(Outcome {
        attempt: "find /proc/sys mounted writable".into(),
        ok: matches!(sysctl_ro, Ok(true)),
        result: match sysctl_ro {
            Ok(true) => "read-only mount".into(),
            Ok(false) => "writable mount".into(),
            Err(e) => e.to_string(),
        },
    });
    // Each pin is a mount of its own (what pid 1 keeps checking while CMD runs).
    let pins = crate::plan::pins::Pins::new(input.protected.clone());
    forbidden.push(Outcome {
        attempt: "find a protected path that is not pinned by a mount of its own".into(),
        ok: pins.lost().is_none(),
        result: match pins.lost() {
            Some(path) => format!("{} is not pinned", path.display()),
            None => "all pinned".into(),
        },
    });
    let control = vec![succeeded(
        "read /proc/sys/kernel/hostname".into(),
        std::fs::read_to_string("/proc/sys/kernel/hostname").map(drop),
    )];
    check("protected paths", forbidden, control)
}

/// `--hide`: each path reads empty (a directory lists nothing, a file reads no byte) and
/// is a mount of its own (what pid 1 keeps checking while CMD runs); its directory can be
/// listed, so "empty" is not a directory this probe cannot read.
pub(super) fn hidden_paths(input: &ProbeInput) -> Check {
    let mut forbidden: Vec<Outcome> = input
        .hidden
        .iter()
        .map(|path| {
            let content = if path.is_dir() {
                std::fs::read_dir(path).map(|entries| entries.count())
            } else {
                std::fs::read(path).map(|bytes| bytes.len())
            };
            Outcome {
                attempt: format!("read what {} held", path.display()),
                ok: matches!(content, Ok(0)),
                result: match content {
                    Ok(0) => "empty".into(),
                    Ok(n) => format!("{n} entries or bytes"),
                    Err(e) => e.to_string(),
                },
            }
        })
        .collect();
    let pins = crate::plan::pins::Pins::new(input.hidden.clone());
    forbidden.push(Outcome {
        attempt: "find a hidden path that is not covered by a mount of its own".into(),
        ok: pins.lost().is_none(),
        result: match pins.lost() {
            Some(path) => format!("{} is not covered", path.display()),
            None => "all covered".into(),
        },
    });
    let control = input
        .hidden
        .iter()
        .filter_map(|path| path.parent())
        .map(|dir| {
            succeeded(
                format!("list {}", dir.display()),
                std::fs::read_dir(dir).map(drop),
            )
        })
        .collect();
    check("hidden paths", forbidden, control)
}

/// netbox's cache home: each covered directory shows nothing but this run's own caches,
/// and is a mount of its own (pid 1 keeps checking that too); the directory holding it
/// can be listed, so "nothing" is not a directory this probe cannot read.
pub(super) fn cache_home(input: &ProbeInput) -> Check {
    let mut forbidden: Vec<Outcome> = input
        .covered
        .iter()
        .map(|(cover, keep)| {
            let shown = shows_only(cover, keep);
            Outcome {
                attempt: format!(
                    "find what {} holds besides this run's own caches",
                    cover.display()
                ),
                ok: shown.is_ok(),
                result: match shown {
                    Ok(()) => "nothing".into(),
                    Err(found) => found,
                },
            }
        })
        .collect();
    let pins = crate::plan::pins::Pins::new(input.covered.iter().map(|(c, _)| c.clone()).collect());
    forbidden.push(Outcome {
        attempt: "find netbox's cache home not covered by a mount of its own".into(),
        ok: pins.lost().is_none(),
        result: match pins.lost() {
            Some(path) => format!("{} is not covered", path.display()),
            None => "covered".into(),
        },
    });
    let control = input
        .covered
        .iter()
        .filter_map(|(cover, _)| cover.parent())
        .map(|dir| {
            succeeded(
                format!("list {}", dir.display()),
                std::fs::read_dir(dir).map(drop),
            )
        })
        .collect();
    check("netbox's cache home", forbidden, control)
}

/// Whether `dir` holds nothing but the directories on the way to each of `keep` (each
/// below it), and those: what it found otherwise.
pub(super) fn shows_only(dir: &Path, keep: &[PathBuf]) -> Result<(), String> {
    let mut wanted: Vec<PathBuf> = Vec::new();
    for kept in keep {
        for above in kept.ancestors() {
            if above.starts_with(dir) && above != dir {
                wanted.push(above.to_owned());
            }
        }
    }
    let mut to_list = vec![dir.to_owned()];
    while let Some(here) = to_list.pop() {
        let entries = std::fs::read_dir(&here).map_err(|e| format!("{}: {e}", here.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if !wanted.contains(&path) {
                return Err(format!("{} is there", path.display()));
            }
            // A kept root's own entries are the run's.
            if !keep.contains(&path) {
                to_list.push(path);
            }
        }
    }
    Ok(())
}
