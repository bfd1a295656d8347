//! Which paths stay read-only inside the writable roots: `.git` and the start-up files a
//! command could plant code in, plus `--protect` paths.
//!
//! Measured on kernel 6.18 (2026-11-29, shared/research/mechanics.md §1): a read-only bind
//! over `.git` makes writes, unlinks and chmods inside it EROFS, renaming or removing the
//! mountpoint EBUSY, hard links across it EXDEV, and writes through symlinks or
//! `/proc/self/root` EROFS. What mounts cannot do on their own, handled here:
//! - a missing protected path could be created by CMD (`git init` and a hook, a new
//!   `.envrc`): netbox creates an empty placeholder directory first, pins it read-only,
//!   and removes it after the run;
//! - `.git` may be a `gitdir:` file (worktrees, submodules): the real git dir and its
//!   common dir are protected too when they lie inside a writable root;
//! - a protected path that is a symlink cannot be pinned (mounts follow symlinks, and the
//!   link itself could be replaced), so that is refused rather than half-protected.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::WrapperError;

/// Names protected at the top of every writable root: git's metadata and the files tools
/// run or load from a project directory.
const PROJECT_NAMES: &[&str] = &[".git", ".gitmodules", ".envrc", ".vscode", ".idea"];

/// Names tools read only from the home directory: protected where they exist; where
/// missing, given a placeholder only when the writable root is the home directory
/// (elsewhere nothing would read a planted one, and each placeholder costs the host a
/// mkdir and an rmdir).
const HOME_NAMES: &[&str] = &[
    ".gitconfig",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
];

/// Every protected name.
pub fn protected_names() -> impl Iterator<Item = &'static str> {
    PROJECT_NAMES.iter().chain(HOME_NAMES).copied()
}

/// A path to pin read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    pub path: PathBuf,
    /// Netbox created it (an empty directory) and must remove it after the run.
    pub placeholder: bool,
}

/// What the protection needs to know about the run.
pub struct ProtectInput<'a> {
    pub write_roots: &'a [PathBuf],
    /// The caller's home directory (canonical), if known.
    pub home: Option<&'a Path>,
    pub extra: &'a [PathBuf],
    pub allow_git_writes: bool,
}

/// Lists every protected path inside the writable roots, reading the filesystem (to find
/// which exist and what `.git` files point at) but changing nothing.
pub fn protected_paths(input: &ProtectInput<'_>) -> Result<Vec<Protected>, WrapperError> {
    let writable = |p: &Path| input.write_roots.iter().any(|r| p.starts_with(r));
    let mut out = Vec::new();
    let mut push = |out: &mut Vec<Protected>, path: PathBuf, placeholder| {
        if writable(&path) && !out.iter().any(|p: &Protected| p.path == path) {
            out.push(Protected { path, placeholder });
        }
    };
    for root in input.write_roots.iter().filter(|r| r.is_dir()) {
        for name in protected_names() {
            let path = root.join(name);
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    // Missing: CMD must not be able to create it either, where it counts.
                    let is_home = input.home == Some(root.as_path());
                    if is_home || PROJECT_NAMES.contains(&name) {
                        push(&mut out, path, true);
                    }
                    continue;
                }
                Err(source) => {
                    return Err(WrapperError::Path {
                        path,
                        what: "protected path",
                        source,
                    })
                }
            };
            if meta.file_type().is_symlink() {
                return Err(WrapperError::ProtectedSymlink { path });
            }
            if meta.is_dir() && is_placeholder(&path) {
                push(&mut out, path, true);
            } else if name != ".git" {
                push(&mut out, path, false);
            } else if meta.is_file() {
                for dir in git_dirs_of_gitfile(&path)? {
                    push_git_dir(&mut out, &mut push, dir, input.allow_git_writes);
                }
                push(&mut out, path, false);
            } else {
                push_git_dir(&mut out, &mut push, path, input.allow_git_writes);
            }
        }
    }
    for path in input.extra {
        let missing = std::fs::symlink_metadata(path).is_err();
        push(&mut out, path.clone(), missing || is_placeholder(path));
    }
    Ok(out)
}

/// A git directory: all of it, or with --allow-git-writes only what runs code.
fn push_git_dir(
    out: &mut Vec<Protected>,
    push: &mut impl FnMut(&mut Vec<Protected>, PathBuf, bool),
    dir: PathBuf,
    allow_git_writes: bool,
) {
    if !allow_git_writes {
        push(out, dir, false);
        return;
    }
    // hooks and config run code; a commondir (which CMD could otherwise create) would
    // redirect git to another directory's config and hooks. Missing hooks/ and commondir
    // get placeholders (a commondir of "." means what no file means: this directory; git
    // refuses an empty one); a repository without config is not one.
    for part in ["hooks", "config", "commondir"] {
        let path = dir.join(part);
        let exists = std::fs::symlink_metadata(&path).is_ok();
        if exists && !is_placeholder(&path) {
            push(out, path, false);
        } else if part != "config" {
            push(out, path, true);
        }
    }
}

/// Names whose placeholder is a file rather than an empty directory (readers expect a
/// file there), and what it holds.
const FILE_PLACEHOLDERS: &[&str] = &["commondir"];
const FILE_PLACEHOLDER_CONTENT: &[u8] = b".\n";

fn placeholder_is_file(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| FILE_PLACEHOLDERS.iter().any(|f| n == *f))
}

/// The git dir a `gitdir: PATH` file points at, and its common dir if it has one.
fn git_dirs_of_gitfile(gitfile: &Path) -> Result<Vec<PathBuf>, WrapperError> {
    let read_error = |source| WrapperError::Path {
        path: gitfile.to_owned(),
        what: "gitdir file",
        source,
    };
    let text = std::fs::read_to_string(gitfile).map_err(read_error)?;
    let Some(target) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")) else {
        return Err(read_error(std::io::Error::new(
            ErrorKind::InvalidData,
            "not a `gitdir: PATH` file",
        )));
    };
    let base = gitfile.parent().unwrap_or(Path::new("/"));
    let git_dir = std::fs::canonicalize(base.join(target.trim())).map_err(read_error)?;
    let mut dirs = vec![git_dir.clone()];
    if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
        if let Ok(common) = std::fs::canonicalize(git_dir.join(common.trim())) {
            dirs.push(common);
        }
    }
    Ok(dirs)
}

/// The extended attribute that marks a placeholder netbox made.
const PLACEHOLDER_XATTR: &str = "user.netbox.placeholder";

/// Whether `path` is a placeholder (ours, or one a killed run left): an empty directory
/// that carries netbox's mark. A user's own empty directory has no mark and is left alone.
/// Git does not track empty directories, so a placeholder never slips into a commit.
pub fn is_placeholder(path: &Path) -> bool {
    let empty = if placeholder_is_file(path) {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
            && std::fs::read(path).is_ok_and(|c| c == FILE_PLACEHOLDER_CONTENT)
    } else {
        is_empty_dir(path)
    };
    empty && crate::sys::xattr::has(path, PLACEHOLDER_XATTR)
}

fn is_empty_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
        && std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none())
}

/// The placeholders this run holds. Each is an empty directory, with a shared flock held
/// for the whole run; several runs in one workspace share it. The last
/// run out (the one that gets the lock exclusively) removes it, so one run can never pull
/// a placeholder out from under another's read-only mount. A placeholder left by a killed
/// run is adopted by the next one and removed when that one ends.
pub struct Placeholders {
    held: Vec<Held>,
    /// The removal, once started on a thread of its own.
    removal: Option<std::thread::JoinHandle<()>>,
}

/// A placeholder, its lock, and whether this run created it.
type Held = (PathBuf, nix::fcntl::Flock<std::fs::File>, bool);

impl Placeholders {
    /// Creates (or adopts) and locks every placeholder in `paths`.
    pub fn hold(paths: &[Protected]) -> Result<Placeholders, WrapperError> {
        let mut held = Placeholders {
            held: Vec::new(),
            removal: None,
        };
        for p in paths.iter().filter(|p| p.placeholder) {
            let (lock, created) =
                hold_one(&p.path).map_err(|source| WrapperError::Placeholder {
                    path: p.path.clone(),
                    source,
                })?;
            held.held.push((p.path.clone(), lock, created));
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

fn hold_one(path: &Path) -> std::io::Result<(nix::fcntl::Flock<std::fs::File>, bool)> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    for _ in 0..8 {
        let created = match create_marked(path) {
            Ok(()) => true,
            Err(e) if e.kind() == ErrorKind::AlreadyExists && is_placeholder(path) => false,
            Err(e) => return Err(e),
        };
        let dir = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(dir) => dir,
            // Another run removed it between our look and our open: look again.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let lock = lock_shared_briefly(dir)?;
        // Another run may have removed it between our look and our lock: check that the
        // path still names the directory we hold.
        let held = lock.metadata()?;
        match std::fs::symlink_metadata(path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                return Ok((lock, created))
            }
            _ => continue,
        }
    }
    Err(std::io::Error::other("placeholder keeps changing under us"))
}

/// Creates a placeholder under a temporary name, marks it (and fills a file one), then
/// renames it into place without replacing anything: another run never sees a placeholder
/// that is not yet marked, and an existing entry is never overwritten.
fn create_marked(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(".netbox-placeholder-{}-{n}", std::process::id());
    let temp = path.with_file_name(name);
    let is_file = placeholder_is_file(path);
    let made = if is_file {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&temp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, FILE_PLACEHOLDER_CONTENT))
    } else {
        std::fs::create_dir(&temp)
    };
    let remove_temp = || {
        let _ = if is_file {
            std::fs::remove_file(&temp)
        } else {
            std::fs::remove_dir(&temp)
        };
    };
    made?;
    // Best effort: without user xattrs (some filesystems) this run still knows it made the
    // placeholder; only another run could not recognise it.
    let _ = crate::sys::xattr::set(&temp, PLACEHOLDER_XATTR, b"1");
    let placed = nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &temp,
        nix::fcntl::AT_FDCWD,
        path,
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

fn remove_all(held: Vec<Held>) {
    for (path, lock, created) in held {
        remove_if_last(&path, lock, created);
    }
}

/// Removes one placeholder, if no other run still holds it, the path still names the very
/// directory (or file) held, and it is ours (rmdir itself refuses a directory that is no
/// longer empty).
fn remove_if_last(path: &Path, lock: nix::fcntl::Flock<std::fs::File>, created: bool) {
    use std::os::unix::fs::MetadataExt;
    // Exclusive only if no other run still holds it.
    if lock
        .relock(nix::fcntl::FlockArg::LockExclusiveNonblock)
        .is_err()
    {
        return;
    }
    let same = match (lock.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(held), Ok(now)) => held.ino() == now.ino() && held.dev() == now.dev(),
        _ => false,
    };
    if same && (created || crate::sys::xattr::has(path, PLACEHOLDER_XATTR)) {
        if placeholder_is_file(path) {
            // Only if unchanged: a file placeholder cannot refuse like rmdir.
            if std::fs::read(path).is_ok_and(|c| c == FILE_PLACEHOLDER_CONTENT) {
                let _ = std::fs::remove_file(path);
            }
        } else {
            let _ = std::fs::remove_dir(path);
        }
    }
    // The lock's file closes here, after the removal. Unless the sandbox's pid 1 still
    // holds the directory open (it often does: it exits meanwhile, see sandbox.rs), that is
    // a removed directory's last reference, so this close is where the disk is waited
    // for: ext4 mounted with `discard` trims the freed block then (measured: rmdir 1.7 µs,
    // the close 50 µs).
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protected paths of `roots`, with no home directory, no extras and .git locked.
    fn protected_in(roots: &[PathBuf]) -> Result<Vec<Protected>, WrapperError> {
        protected_paths(&ProtectInput {
            write_roots: roots,
            home: None,
            extra: &[],
            allow_git_writes: false,
        })
    }

    fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("netbox-protect-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn missing_git_gets_a_placeholder_and_existing_files_are_listed() {
        let ws = tempdir("plain");
        std::fs::write(ws.join(".bashrc"), "").unwrap();
        std::fs::create_dir(ws.join(".vscode")).unwrap();
        std::fs::write(ws.join(".vscode/settings.json"), "{}").unwrap();
        std::fs::create_dir(ws.join(".idea")).unwrap();
        let roots = [ws.clone()];
        let got = protected_in(&roots).unwrap();
        assert!(got.contains(&Protected {
            path: ws.join(".git"),
            placeholder: true
        }));
        assert!(got.contains(&Protected {
            path: ws.join(".bashrc"),
            placeholder: false
        }));
        assert!(got.contains(&Protected {
            path: ws.join(".vscode"),
            placeholder: false
        }));
        // A user's own empty directory is protected, not taken for a placeholder...
        assert!(got.contains(&Protected {
            path: ws.join(".idea"),
            placeholder: false
        }));
        // ...while one carrying netbox's mark (a killed run's) is adopted as one.
        std::fs::create_dir(ws.join(".envrc")).unwrap();
        crate::sys::xattr::set(&ws.join(".envrc"), PLACEHOLDER_XATTR, b"1").unwrap();
        let marked = protected_in(&roots).unwrap();
        assert!(marked.contains(&Protected {
            path: ws.join(".envrc"),
            placeholder: true
        }));
        std::fs::remove_dir(ws.join(".envrc")).unwrap();
        // Missing home-only files get no placeholder outside the home directory...
        assert!(!got.iter().any(|p| p.path.ends_with(".zshrc")));
        // ...and do in it.
        let got = protected_paths(&ProtectInput {
            write_roots: &roots,
            home: Some(&ws),
            extra: &[],
            allow_git_writes: false,
        })
        .unwrap();
        assert_eq!(got.len(), protected_names().count());
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn gitdir_file_protects_the_real_git_dir() {
        let ws = tempdir("gitfile");
        let real = ws.join("elsewhere/repo.git");
        std::fs::create_dir_all(real.join("worktrees/wt")).unwrap();
        std::fs::write(real.join("worktrees/wt/commondir"), "../..\n").unwrap();
        let wt = ws.join("wt");
        std::fs::create_dir(&wt).unwrap();
        std::fs::write(
            wt.join(".git"),
            "gitdir: ../elsewhere/repo.git/worktrees/wt\n",
        )
        .unwrap();
        let roots = [ws.clone()];
        let got = protected_in(&roots).unwrap();
        // The workspace root's own .git is missing, so it gets a placeholder.
        assert!(got
            .iter()
            .any(|p| p.path == ws.join(".git") && p.placeholder));
        let roots = [wt.clone(), ws.join("elsewhere")];
        let got = protected_in(&roots).unwrap();
        let paths: Vec<_> = got.iter().map(|p| p.path.clone()).collect();
        assert!(paths.contains(&wt.join(".git")), "{paths:?}");
        assert!(paths.contains(&real.join("worktrees/wt")), "{paths:?}");
        assert!(paths.contains(&real), "{paths:?}");
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn symlinked_start_up_file_is_refused() {
        let ws = tempdir("symlink");
        std::os::unix::fs::symlink("/etc/hostname", ws.join(".profile")).unwrap();
        let roots = [ws.clone()];
        let err = protected_in(&roots).unwrap_err();
        assert!(matches!(err, WrapperError::ProtectedSymlink { .. }));
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn allow_git_writes_keeps_hooks_and_config_protected() {
        let ws = tempdir("gitwrites");
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), "").unwrap();
        let roots = [ws.clone()];
        let got = protected_paths(&ProtectInput {
            write_roots: &roots,
            home: None,
            extra: &[],
            allow_git_writes: true,
        })
        .unwrap();
        let paths: Vec<_> = got.iter().map(|p| p.path.clone()).collect();
        assert!(paths.contains(&ws.join(".git/hooks")));
        assert!(paths.contains(&ws.join(".git/config")));
        assert!(!paths.contains(&ws.join(".git")));
        // A missing commondir gets a (file) placeholder: CMD must not create one.
        assert!(got.contains(&Protected {
            path: ws.join(".git/commondir"),
            placeholder: true
        }));
        std::fs::remove_dir_all(&ws).unwrap();
    }
}
