//! Placeholders: what netbox puts where a protected path is missing, so the sandbox's
//! read-only mount has something to pin and CMD cannot create the path (`git init`, a new
//! `.envrc`, a submodule's `.git`). Each is marked with an extended attribute, held with a
//! shared flock for the run (several runs in one workspace share one), and removed by the
//! last run out.

use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crate::error::WrapperError;
use crate::plan::resolved::Resolved;

use super::Protected;

/// What a placeholder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// An empty directory.
    Dir,
    /// A file holding exactly these bytes, where readers expect a file (git's `commondir`,
    /// `index`, `config.worktree`).
    File(&'static [u8]),
}

/// `commondir` placeholder: "." means what no file means (this directory); git refuses
/// an empty one.
pub const COMMONDIR: Placeholder = Placeholder::File(b".\n");

/// `config.worktree` placeholder: an empty configuration.
pub const EMPTY_CONFIG: Placeholder = Placeholder::File(b"");

/// An `index` placeholder: a valid index with no entries (version 2, the header and its
/// SHA-1; git refuses an empty file), so git inside reads an empty staging area.
pub const EMPTY_INDEX_SHA1: Placeholder = Placeholder::File(&[
    b'D', b'I', b'R', b'C', 0, 0, 0, 2, 0, 0, 0, 0, // "DIRC", version 2, no entries
    0x39, 0xd8, 0x90, 0x13, 0x9e, 0xe5, 0x35, 0x6c, 0x7e, 0xa0, // SHA-1 of the 12 bytes
    0x57, 0x21, 0x5e, 0x5e, 0xb4, 0x2c, 0xac, 0xa3, 0x4f, 0x10,
]);

/// The same for a repository with SHA-256 object names (`extensions.objectFormat`).
pub const EMPTY_INDEX_SHA256: Placeholder = Placeholder::File(&[
    b'D', b'I', b'R', b'C', 0, 0, 0, 2, 0, 0, 0, 0, // "DIRC", version 2, no entries
    0xc9, 0xba, 0xea, 0xdf, 0x90, 0x51, 0x12, 0xbf, 0x6c, 0x17, 0xae, 0xfb, 0xd7, 0xd0, 0x22, 0x67,
    0xaf, 0xd7, 0x0d, 0xed, 0x61, 0x3c, 0x30, 0xca, 0xfe, 0xd2, 0xd0, 0xf7, 0xc2, 0xb5, 0x06, 0xe1,
    0xed, // SHA-256 of the 12 bytes
]);

/// `~/.bash_profile` placeholder: a login shell reads the first of `~/.bash_profile`,
/// `~/.bash_login` and `~/.profile` that exists, so an empty one would make a login shell
/// started on the host during the run skip the user's `~/.profile`. This one reads on as
/// bash would have without it.
pub const BASH_PROFILE: Placeholder = Placeholder::File(
    b"# netbox: a placeholder for one run, read as if it were not here
if [ -r ~/.bash_login ]; then . ~/.bash_login; elif [ -r ~/.profile ]; then . ~/.profile; fi
",
);

/// `~/.bash_login` placeholder: likewise, on to `~/.profile`.
pub const BASH_LOGIN: Placeholder = Placeholder::File(
    b"# netbox: a placeholder for one run, read as if it were not here
if [ -r ~/.profile ]; then . ~/.profile; fi
",
);

/// Every file content a placeholder can have: a file holding anything else is not one.
const FILE_CONTENTS: &[Placeholder] = &[
    COMMONDIR,
    EMPTY_CONFIG,
    EMPTY_INDEX_SHA1,
    EMPTY_INDEX_SHA256,
    BASH_PROFILE,
    BASH_LOGIN,
];

/// The extended attribute that marks a placeholder netbox made.
pub(super) const PLACEHOLDER_XATTR: &str = "user.netbox.placeholder";

/// Whether `path` is a placeholder (ours, or one a killed run left): an empty directory
/// (or a file holding exactly a placeholder's content) that carries netbox's mark. A
/// user's own empty directory has no mark and is left alone. Git does not track empty
/// directories, so a placeholder never slips into a commit.
pub fn is_placeholder(path: &Path) -> bool {
    open_entry(nix::fcntl::AT_FDCWD, path).is_ok_and(|file| is_placeholder_file(&file))
}

/// Opens an entry for reading without following a symlink at its end, and without
/// blocking on a FIFO someone left there.
fn open_entry<P: ?Sized + nix::NixPath>(
    dir: impl std::os::fd::AsFd,
    name: &P,
) -> std::io::Result<std::fs::File> {
    use nix::fcntl::OFlag;
    let fd = nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

/// [`is_placeholder`] for a file already open: what netbox locks is what it judged.
fn is_placeholder_file(file: &std::fs::File) -> bool {
    use std::os::fd::AsFd;
    let Ok(meta) = file.metadata() else {
        return false;
    };
    let empty = if meta.is_dir() {
        is_empty_dir(file)
    } else {
        meta.is_file() && holds_placeholder_content(file)
    };
    empty && crate::sys::xattr::has_on(file.as_fd(), PLACEHOLDER_XATTR)
}

/// Whether a file holds exactly what some placeholder holds (read only if it is that
/// short: a placeholder is at most a few hundred bytes).
fn holds_placeholder_content(file: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let longest = FILE_CONTENTS
        .iter()
        .map(|p| match p {
            Placeholder::File(content) => content.len(),
            Placeholder::Dir => 0,
        })
        .max()
        .unwrap_or(0);
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return false;
    };
    if len > u64::try_from(longest).unwrap_or(u64::MAX) {
        return false;
    }
    let mut held = vec![0u8; longest + 1];
    let Ok(read) = file.read_at(&mut held, 0) else {
        return false;
    };
    FILE_CONTENTS
        .iter()
        .any(|p| matches!(p, Placeholder::File(content) if *content == &held[..read]))
}

fn is_empty_dir(dir: &std::fs::File) -> bool {
    let Ok(copy) = dir.try_clone() else {
        return false;
    };
    let Ok(mut entries) = nix::dir::Dir::from_fd(copy.into()) else {
        return false;
    };
    let empty = entries
        .iter()
        .flatten()
        .all(|e| matches!(e.file_name().to_bytes(), b"." | b".."));
    empty
}

/// The placeholders this run holds, each with a shared flock held for the whole run; several runs in one workspace share it. The last
/// run out (the one that gets the lock exclusively) removes it, so one run can never pull
/// a placeholder out from under another's read-only mount. A placeholder left by a killed
/// run is adopted by the next one and removed when that one ends.
pub struct Placeholders {
    held: Vec<Held>,
    /// The removal, once started on a thread of its own.
    removal: Option<std::thread::JoinHandle<()>>,
}

/// A placeholder: the directory it is in, its name there, its lock, and whether this run
/// created it.
struct Held {
    parent: OwnedFd,
    name: OsString,
    lock: nix::fcntl::Flock<std::fs::File>,
    created: bool,
}

impl Placeholders {
    /// Creates (or adopts) and locks every placeholder in `paths`, each in the directory
    /// `resolved` opens for it (beneath its writable root, following no symlink): a
    /// directory swapped for a link meanwhile is refused, not followed.
    pub fn hold(paths: &[Protected], resolved: &Resolved) -> Result<Placeholders, WrapperError> {
        let mut held = Placeholders {
            held: Vec::new(),
            removal: None,
        };
        for p in paths {
            let Some(shape) = p.placeholder else {
                continue;
            };
            let failed = |source| WrapperError::Placeholder {
                path: p.path.clone(),
                source,
            };
            let (parent, name) = resolved.parent_of(&p.path).map_err(failed)?;
            let (lock, created) = hold_one(&parent, &name, shape).map_err(failed)?;
            held.held.push(Held {
                parent,
                name,
                lock,
                created,
            });
        }
        Ok(held)
    }

    /// Starts removing them on a thread of its own, once nothing in the sandbox can use
    /// them any more; dropping `self` waits for it. Each removal takes tens of µs here
    /// (detaching the sandbox's read-only mount of it, if the sandbox's mount namespace
    /// still exists), which netbox's own teardown need not wait behind.
    pub fn start_removal(&mut self) {
        if self.removal.is_some() || self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        // If no thread can be started, the work comes back to be done here (by drop).
        let (give_back, returned) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("netbox-placeholders".into())
            .spawn(move || {
                // Signals are the main thread's (see run.rs, audit_interruptible).
                let _ = nix::sys::signal::SigSet::all().thread_block();
                if let Ok(held) = returned.recv() {
                    remove_all(held);
                }
            });
        match spawned {
            Ok(thread) => {
                let _ = give_back.send(held);
                self.removal = Some(thread);
            }
            Err(_) => self.held = held,
        }
    }
}

fn hold_one(
    parent: &OwnedFd,
    name: &OsStr,
    shape: Placeholder,
) -> std::io::Result<(nix::fcntl::Flock<std::fs::File>, bool)> {
    for _ in 0..8 {
        let created = match create_marked(parent, name, shape) {
            Ok(()) => true,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e),
        };
        let file = match open_entry(parent, name) {
            Ok(file) => file,
            // Another run removed it between our look and our open: look again.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !created && !is_placeholder_file(&file) {
            return Err(std::io::Error::new(
                ErrorKind::AlreadyExists,
                "something netbox did not make stands there now (was it just created?)",
            ));
        }
        let lock = lock_shared_briefly(file)?;
        // Another run may have removed it between our look and our lock: check that the
        // name still holds the file we hold.
        if names_held(parent, name, &lock) {
            return Ok((lock, created));
        }
    }
    Err(std::io::Error::other("placeholder keeps changing under us"))
}

/// Whether `name` in `parent` is (still) the very file `held` has open.
fn names_held(parent: &OwnedFd, name: &OsStr, held: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let now = nix::sys::stat::fstatat(parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW);
    match (held.metadata(), now) {
        (Ok(held), Ok(now)) => held.ino() == now.st_ino && held.dev() == now.st_dev,
        _ => false,
    }
}

/// Creates a placeholder under a temporary name, marks it (and fills a file one), then
/// renames it into place without replacing anything: another run never sees a placeholder
/// that is not yet marked, and an existing entry is never overwritten. All in `parent`.
fn create_marked(parent: &OwnedFd, name: &OsStr, shape: Placeholder) -> std::io::Result<()> {
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = format!(".netbox-placeholder-{}-{n}", std::process::id());
    let temp = temp.as_str();
    let made: std::io::Result<std::fs::File> = match shape {
        Placeholder::File(content) => nix::fcntl::openat(
            parent,
            temp,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map(std::fs::File::from)
        .map_err(std::io::Error::from)
        .and_then(|mut f| std::io::Write::write_all(&mut f, content).map(|()| f)),
        // 0700: an empty directory no one else needs (and `~/.ssh` or `~/.gnupg` must not
        // be group-writable under a lax umask).
        Placeholder::Dir => nix::sys::stat::mkdirat(parent, temp, Mode::from_bits_truncate(0o700))
            .map_err(std::io::Error::from)
            .and_then(|()| open_entry(parent, temp)),
    };
    let unlink = if matches!(shape, Placeholder::File(_)) {
        nix::unistd::UnlinkatFlags::NoRemoveDir
    } else {
        nix::unistd::UnlinkatFlags::RemoveDir
    };
    let remove_temp = || {
        let _ = nix::unistd::unlinkat(parent, temp, unlink);
    };
    let made = match made {
        Ok(made) => made,
        Err(e) => {
            remove_temp();
            return Err(e);
        }
    };
    // Best effort: without user xattrs (some filesystems) this run still knows it made the
    // placeholder; only another run could not recognise it.
    let _ = crate::sys::xattr::set_on(made.as_fd(), PLACEHOLDER_XATTR, b"1");
    let placed = nix::fcntl::renameat2(
        parent,
        temp,
        parent,
        name,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    );
    if placed.is_err() {
        remove_temp();
    }
    placed.map_err(std::io::Error::from)
}

/// How long a run waits for another process's exclusive lock on a placeholder (a run
/// removing it, which takes microseconds) before giving up.
const PLACEHOLDER_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A shared lock, waited for at most `PLACEHOLDER_LOCK_WAIT`: anyone who can open the
/// directory could hold an exclusive lock forever, and netbox must not hang on it.
fn lock_shared_briefly(dir: std::fs::File) -> std::io::Result<nix::fcntl::Flock<std::fs::File>> {
    let deadline = std::time::Instant::now() + PLACEHOLDER_LOCK_WAIT;
    let mut dir = dir;
    loop {
        match nix::fcntl::Flock::lock(dir, nix::fcntl::FlockArg::LockSharedNonblock) {
            Ok(lock) => return Ok(lock),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) if std::time::Instant::now() < deadline => {
                dir = back;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(std::io::Error::other(
                    "another process holds an exclusive lock on it",
                ))
            }
            Err((_, errno)) => return Err(std::io::Error::from(errno)),
        }
    }
}

impl Drop for Placeholders {
    /// Removes them (waiting for the removal if it was started in the background).
    fn drop(&mut self) {
        match self.removal.take() {
            Some(removal) => {
                // A removal that panicked has nothing left to clean up that could be
                // retried here: its placeholders are adopted by the next run.
                let _ = removal.join();
            }
            None => remove_all(std::mem::take(&mut self.held)),
        }
    }
}

/// Removes placeholders a killed run left (named in its record), each only if it is still
/// a placeholder (marked, empty), reached without a symlink, and no run holds it.
pub fn remove_orphaned_placeholders(paths: &[std::path::PathBuf]) {
    for path in paths {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            continue;
        };
        let Ok(parent) = crate::sys::resolve::open_exact(parent) else {
            continue;
        };
        let Ok(file) = open_entry(&parent, name) else {
            continue;
        };
        if !is_placeholder_file(&file) {
            continue;
        }
        let Ok(lock) = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock)
        else {
            continue;
        };
        remove_if_last(Held {
            parent,
            name: name.to_owned(),
            lock,
            created: false,
        });
    }
}

fn remove_all(held: Vec<Held>) {
    for placeholder in held {
        remove_if_last(placeholder);
    }
}

/// Removes one placeholder, if no other run still holds it, its name still holds the very
/// directory (or file) held, and it is ours (rmdir itself refuses a directory that is no
/// longer empty). By name in the directory it was made in, never by path.
fn remove_if_last(held: Held) {
    let Held {
        parent,
        name,
        lock,
        created,
    } = held;
    // Exclusive only if no other run still holds it.
    if lock
        .relock(nix::fcntl::FlockArg::LockExclusiveNonblock)
        .is_err()
    {
        return;
    }
    let ours = created || crate::sys::xattr::has_on(lock.as_fd(), PLACEHOLDER_XATTR);
    if names_held(&parent, &name, &lock) && ours {
        let removed = if lock.metadata().is_ok_and(|m| m.is_dir()) {
            nix::unistd::unlinkat(
                &parent,
                name.as_os_str(),
                nix::unistd::UnlinkatFlags::RemoveDir,
            )
            .is_ok()
        } else {
            // Only if unchanged: a file placeholder cannot refuse like rmdir.
            holds_placeholder_content(&lock)
                && nix::unistd::unlinkat(
                    &parent,
                    name.as_os_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                )
                .is_ok()
        };
        // One the run filled (a `FETCH_HEAD` or `logs/` left writable, which git wrote
        // to) is the user's now: it stays, without netbox's mark.
        if !removed {
            let _ = crate::sys::xattr::remove_on(lock.as_fd(), PLACEHOLDER_XATTR);
        }
    }
    // The lock's file closes here, after the removal. Unless the sandbox's pid 1 still
    // holds the directory open (it often does: it exits meanwhile, see sandbox/mod.rs), that is
    // a removed directory's last reference, so this close is where the disk is waited
    // for: ext4 mounted with `discard` trims the freed block then (measured: rmdir 1.7 µs,
    // the close 50 µs).
}
