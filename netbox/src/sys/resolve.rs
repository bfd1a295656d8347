//! Resolving a path without following any symlink (openat2(2), Linux ≥ 5.6), and the
//! identity of what was found. netbox resolves each path a run mounts on once, at
//! start-up; the sandbox resolves it again where it mounts, the same way, and compares the
//! two: a directory swapped for a symlink (or for another directory) in between is caught,
//! not followed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use serde::{Deserialize, Serialize};

/// Which file a path led to: its device and inode. Sound as long as someone holds the file
/// open (netbox does, for the run), so the inode number cannot be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub fn of(fd: impl AsFd) -> io::Result<FileId> {
        let stat = nix::sys::stat::fstat(fd)?;
        Ok(FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        })
    }
}

impl std::fmt::Display for FileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device {:#x} inode {}", self.dev, self.ino)
    }
}

/// Whether the file held by `fd` is a directory.
pub fn is_dir(fd: impl AsFd) -> io::Result<bool> {
    let stat = nix::sys::stat::fstat(fd)?;
    Ok(stat.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// Tries of an openat2 the kernel asks to retry (EAGAIN) before it is given up.
const OPENAT2_TRIES: usize = 64;

/// openat2(2), tried again while it fails with EAGAIN: with RESOLVE_IN_ROOT or
/// RESOLVE_BENEATH, a ".." walked while a mount or a rename happens anywhere on the
/// machine fails so (the kernel cannot tell the walk stayed inside), and the man page
/// leaves the retry to the caller. Bounded, so a process renaming in a loop cannot hold
/// the caller forever: past that, EAGAIN like any other failure to open.
pub fn openat2<P: ?Sized + nix::NixPath, Fd: AsFd>(
    dir: Fd,
    path: &P,
    how: OpenHow,
) -> nix::Result<OwnedFd> {
    let mut tries = 1;
    loop {
        match nix::fcntl::openat2(dir.as_fd(), path, how) {
            Err(nix::errno::Errno::EAGAIN) if tries < OPENAT2_TRIES => tries += 1,
            done => return done,
        }
    }
}

/// `O_PATH` without `O_NOFOLLOW`: with `O_NOFOLLOW`, openat2 hands back a final symlink
/// itself (an fd to the link, which a mount would then land on) instead of refusing it;
/// without, `RESOLVE_NO_SYMLINKS` refuses it with ELOOP like any other component.
fn how(resolve: ResolveFlag) -> OpenHow {
    OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(resolve)
}

/// Opens the absolute `path` as an `O_PATH` fd, following no symlink on the way or at its
/// end (ELOOP if there is one).
pub fn open_exact(path: &Path) -> io::Result<OwnedFd> {
    openat2(
        nix::fcntl::AT_FDCWD,
        path,
        how(ResolveFlag::RESOLVE_NO_SYMLINKS),
    )
    .map_err(io::Error::from)
}

/// Opens `relative` below `dir` as an `O_PATH` fd, following no symlink and never leaving
/// `dir` (an empty path is `dir` itself).
pub fn open_beneath(dir: BorrowedFd<'_>, relative: &Path) -> io::Result<OwnedFd> {
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    openat2(
        dir,
        relative,
        how(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS),
    )
    .map_err(io::Error::from)
}

/// Opens `relative` below `root` as if `root` were `/`: symlinks are followed, but never
/// out of it (an absolute one, or `..`, stays inside; RESOLVE_IN_ROOT), and magic links
/// are refused. For the sandbox's trust stores, which distributions make symlinks of.
/// `O_PATH` when `read` is false, else open for reading.
pub fn open_in_root(root: BorrowedFd<'_>, relative: &Path, read: bool) -> io::Result<OwnedFd> {
    // O_PATH takes no other flag but O_CLOEXEC (openat2 refuses the rest); a read does not
    // wait on a FIFO planted there.
    let flags = if read {
        OFlag::O_RDONLY | OFlag::O_NONBLOCK
    } else {
        OFlag::O_PATH
    };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(root, relative, how).map_err(io::Error::from)
}

/// A message for a resolution that failed, saying what it means here.
pub fn describe(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ELOOP) => "a symlink now stands in its path".into(),
        Some(libc::ENOENT) => "it is gone".into(),
        Some(libc::EXDEV) => "it now leads outside the directory it was in".into(),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_anywhere_on_the_path_is_refused_and_identity_follows_the_file() {
        let dir = std::env::temp_dir().join(format!("netbox-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real/sub")).unwrap();
        std::os::unix::fs::symlink("real", dir.join("link")).unwrap();
        let real = open_exact(&dir.join("real/sub")).unwrap();
        assert!(is_dir(&real).unwrap());
        let err = open_exact(&dir.join("link/sub")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        // A link as the last component too.
        let err = open_exact(&dir.join("link")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        let top = open_exact(&dir).unwrap();
        let again = open_beneath(top.as_fd(), Path::new("real/sub")).unwrap();
        assert_eq!(FileId::of(&real).unwrap(), FileId::of(&again).unwrap());
        assert!(open_beneath(top.as_fd(), Path::new("link/sub")).is_err());
        assert!(open_beneath(top.as_fd(), Path::new("link")).is_err());
        assert!(open_beneath(top.as_fd(), Path::new("../x")).is_err());
        // A FIFO opens at once (an ordinary open would wait for a writer).
        nix::unistd::mkfifo(
            &dir.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert!(!is_dir(open_exact(&dir.join("fifo")).unwrap()).unwrap());
        std::fs::rename(dir.join("real"), dir.join("moved")).unwrap();
        // The fd follows the directory, not the name.
        let moved = open_exact(&dir.join("moved/sub")).unwrap();
        assert_eq!(FileId::of(&real).unwrap(), FileId::of(&moved).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A ".." walked in a root while renames happen elsewhere: the kernel may refuse the
    /// walk with EAGAIN, and the retry makes it go through (control: the same walk, once
    /// per try, does see EAGAIN, so the renames did race it).
    #[test]
    fn a_dotdot_walk_raced_by_renames_is_tried_again() {
        let dir = std::env::temp_dir().join(format!("netbox-resolve-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
        let root = open_exact(&dir).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let renamer = {
            let (dir, stop) = (dir.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::fs::rename(dir.join("x"), dir.join("y"));
                    let _ = std::fs::rename(dir.join("y"), dir.join("x"));
                    let _ = std::fs::write(dir.join("x"), "");
                }
            })
        };
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT);
        let walk = Path::new("a/b/c/../../../a/b/c/../../../a/b/c/../..");
        let (mut raw_eagain, mut failed, mut walks) = (0, 0, 0);
        // Until the race has been seen often enough (a loaded machine may leave the
        // renaming thread waiting for a CPU a while), or ten seconds.
        let started = std::time::Instant::now();
        while (raw_eagain < 50 || walks < 20_000) && started.elapsed().as_secs() < 10 {
            walks += 1;
            if matches!(
                nix::fcntl::openat2(&root, walk, how),
                Err(nix::errno::Errno::EAGAIN)
            ) {
                raw_eagain += 1;
            }
            if openat2(&root, walk, how).is_err() {
                failed += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        renamer.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        eprintln!("{walks} walks: raw EAGAIN {raw_eagain}, failed with retries {failed}");
        assert!(
            raw_eagain > 0,
            "the renames never raced a walk: the test proves nothing"
        );
        assert_eq!(failed, 0);
    }
}
