//! Looking names up inside the sandbox's root from outside it (openat2 with
//! RESOLVE_IN_ROOT), without following what the caller would not.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// openat2's resolve flags (linux/openat2.h).
pub(super) const RESOLVE_NO_SYMLINKS: u64 = 0x04;

pub(super) const RESOLVE_BENEATH: u64 = 0x08;

/// Symlinks the kernel follows in one lookup (MAXSYMLINKS).
pub(super) const MAX_SYMLINK_HOPS: usize = 40;

pub(super) const RESOLVE_IN_ROOT: u64 = 0x10;

/// Opens a process's root (O_PATH): the sandbox's `/`, from outside.
pub fn open_root(pid: u32) -> Option<OwnedFd> {
    nix::fcntl::open(
        format!("/proc/{pid}/root").as_str(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// Symlinks followed to find where an O_CREAT open through a chain of them lands: each
/// hop is a lookup from the root on the notified caller's clock (and netbox's CPU), so a
/// long chain is not followed to its end (the kernel follows 40) and its write, refused
/// or not, goes unlogged; a command opening one in a loop cannot make the watcher do
/// quadratic work.
pub(super) const MAX_LINK_HOPS: usize = 8;

/// Where an O_CREAT open of `named` creates its file when `named` is a symlink (or a chain
/// of them, up to `MAX_LINK_HOPS`) that leads to nothing: the final target, as the
/// sandbox names it. `None` if `named` is not a symlink, or leads to something.
pub(super) fn dangling_target(root: &OwnedFd, named: &Path) -> Option<PathBuf> {
    let mut path = named.to_owned();
    for _ in 0..MAX_LINK_HOPS {
        let entry = open_in_sandbox(root, &path, false)?;
        if !is_kind(&entry, libc::S_IFLNK) {
            return None;
        }
        // A relative target is read from the link's own directory.
        let target = PathBuf::from(nix::fcntl::readlinkat(&entry, "").ok()?);
        // One ending in "/" names a directory, which O_CREAT does not make (EISDIR).
        if target.as_os_str().as_bytes().ends_with(b"/") {
            return None;
        }
        path = if target.is_absolute() {
            target
        } else {
            path.parent()?.join(target)
        };
        if open_in_sandbox(root, &path, false).is_none() {
            return Some(path);
        }
    }
    None
}

/// The verdict on creating `path`: refused if its directory is on a read-only mount, and
/// then where it lands.
pub(super) fn create_verdict(root: &OwnedFd, path: &Path) -> (bool, Option<PathBuf>) {
    let dir = path.parent().and_then(|p| open_dir_in_sandbox(root, p));
    match dir {
        Some(dir) if fd_read_only(&dir) == Some(true) => (true, landing(&dir, path)),
        _ => (false, None),
    }
}

/// Opens (O_PATH) an absolute sandbox path inside the sandbox's root, following a final
/// symlink or not; RESOLVE_IN_ROOT keeps every symlink inside that root.
pub(super) fn open_in_sandbox(root: &OwnedFd, path: &Path, follow: bool) -> Option<OwnedFd> {
    resolve_in_sandbox(root, path, follow).ok()
}

/// Opens (O_PATH) a directory of the sandbox, following symlinks: `None` for anything
/// else (a name under a file is ENOTDIR to the kernel, not a place to write).
pub(super) fn open_dir_in_sandbox(root: &OwnedFd, path: &Path) -> Option<OwnedFd> {
    open_in_sandbox(root, path, true).filter(|dir| is_kind(dir, libc::S_IFDIR))
}

/// [`open_in_sandbox`], with the reason it failed.
pub(super) fn resolve_in_sandbox(
    root: &OwnedFd,
    path: &Path,
    follow: bool,
) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    // By bytes: Path::strip_prefix would drop a final "/", which makes the kernel want a
    // directory there (ENOTDIR for a file).
    let bytes = path.as_os_str().as_bytes();
    let start = bytes.iter().position(|b| *b != b'/').unwrap_or(bytes.len());
    let inside = if start == bytes.len() {
        Path::new(".")
    } else {
        Path::new(OsStr::from_bytes(&bytes[start..]))
    };
    let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if !follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    crate::sys::resolve::openat2(root, inside, how)
}

/// Opens (O_PATH) a name whose directory is open already: one step from there instead of
/// a walk from `/`, which is most of what a create in a deep directory costs. A final
/// symlink to follow is resolved from the root, as anything absolute in it must be.
pub(super) fn lookup(
    root: &OwnedFd,
    named: &Path,
    follow: bool,
    parent: Option<&OwnedFd>,
) -> Option<OwnedFd> {
    use nix::fcntl::OFlag;
    // No file name (a path ending in ".."): resolve it whole.
    let (Some(parent), Some(name)) = (parent, named.file_name()) else {
        return open_in_sandbox(root, named, follow);
    };
    use nix::fcntl::{OpenHow, ResolveFlag};
    // A symlink to follow stops this one step (ELOOP) and is resolved from the root.
    let (flags, resolve) = if follow {
        (
            OFlag::O_PATH | OFlag::O_CLOEXEC,
            ResolveFlag::RESOLVE_NO_SYMLINKS,
        )
    } else {
        (
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
    };
    let how = OpenHow::new().flags(flags).resolve(resolve);
    match crate::sys::resolve::openat2(parent, name, how) {
        Ok(entry) => Some(entry),
        Err(nix::errno::Errno::ELOOP) => open_in_sandbox(root, named, true),
        Err(_) => None,
    }
}

/// Where `named` lands in the directory open as `dir`, in the sandbox's view.
pub(super) fn landing(dir: &OwnedFd, named: &Path) -> Option<PathBuf> {
    Some(fd_path(dir)?.join(named.file_name()?))
}

/// Where an fd opened inside the sandbox leads, in the sandbox's view.
pub(super) fn fd_path(fd: &OwnedFd) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// Whether removing or moving away `entry` fails with EBUSY: it is the root of a mount
/// other than its parent directory's, and the call is of the right kind for it
/// (`removes_dir`: rmdir or unlink; `None` for rename, which takes either).
pub(super) fn is_busy_mount_point(
    entry: &OwnedFd,
    removes_dir: Option<bool>,
    parent: Option<&OwnedFd>,
) -> bool {
    use crate::sys::mountid::{fd_facts, mount_id_of_fd};
    let (Some(parent), Ok(facts)) = (parent, fd_facts(entry.as_fd())) else {
        return false;
    };
    if removes_dir.is_some_and(|dir| dir != facts.is_directory) {
        return false;
    }
    // A named entry that is a mount's root is on another mount than its directory;
    // kernels before 5.8 do not say so, and then the two mount ids are compared.
    match facts.mount_root {
        Some(root) => root,
        None => matches!(
            (facts.mount_id, mount_id_of_fd(parent.as_fd())),
            (Some(a), Ok(b)) if a != b
        ),
    }
}

/// Whether `named` itself (its final name not followed) is a symlink.
pub(super) fn is_symlink(root: &OwnedFd, named: &Path) -> bool {
    open_in_sandbox(root, &without_final_slashes(named), false)
        .is_some_and(|entry| is_kind(&entry, libc::S_IFLNK))
}

/// Whether an open file lies on a proc filesystem.
pub(super) fn is_procfs(fd: &OwnedFd) -> bool {
    nix::sys::statfs::fstatfs(fd)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

/// Whether an open file is of `kind` (an `S_IF*` file type).
pub(super) fn is_kind(fd: &OwnedFd, kind: libc::mode_t) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == kind)
}

/// Whether the mount an open file lies on is read-only.
pub(super) fn fd_read_only(fd: &OwnedFd) -> Option<bool> {
    nix::sys::statvfs::fstatvfs(fd)
        .ok()
        .map(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// `path` without the "/"s that end it (but `/` itself).
pub(super) fn without_final_slashes(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    let end = bytes.iter().rposition(|b| *b != b'/').map_or(1, |i| i + 1);
    PathBuf::from(OsStr::from_bytes(&bytes[..end.min(bytes.len())]))
}
