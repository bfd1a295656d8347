//! Each operation's rule: what a create, remove, rename, open or change of a path the
//! caller names would meet, and whether the mounts refuse it for being read-only.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::args::{int_arg, Op, PATH_MAX};
use super::caller::NamedPath;
use super::kernel_order::{
    creat_directory_is_einval, name_too_long_for_its_directory, refused_for_permission,
    truncate_checks_permission_first,
};
use super::lookup::without_final_slashes;
use super::lookup::{
    create_verdict, dangling_target, fd_path, fd_read_only, is_busy_mount_point, is_kind,
    is_procfs, is_symlink, landing, lookup, open_dir_in_sandbox, open_in_sandbox, MAX_SYMLINK_HOPS,
    RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS,
};
use super::{fd_link, Verdict};
use crate::sys::seccomp::{self, Notification};

/// `named` (a final "/" aside) as a mount point of its own: a rename onto it is EBUSY.
pub(super) fn mount_point_verdict(root: &OwnedFd, named: &Path) -> Option<Verdict> {
    use crate::sys::mountid::fd_facts;
    let target_fd = open_in_sandbox(root, &without_final_slashes(named), false)?;
    let target = fd_facts(target_fd.as_fd()).ok()?;
    (target.mount_root == Some(true)).then(|| Verdict {
        path: named.to_owned(),
        resolved: fd_path(&target_fd),
        denied: true,
        busy: true,
    })
}

/// Whether a rename of `from` onto `to` gets past the checks of the two names' kinds (then
/// a mount point at either end is EBUSY): the source exists; a name ending in "/" is a
/// directory's (for a plain rename, the source must be one if either end has the "/");
/// the target's name is not too long to look up; RENAME_NOREPLACE finds no target,
/// RENAME_EXCHANGE finds one; a target is of the source's kind (but for an exchange), and
/// it is not the source itself (a rename onto itself does nothing, and succeeds).
pub(super) fn rename_kinds_agree(
    root: &OwnedFd,
    from: &NamedPath,
    to: &NamedPath,
    flags: u32,
) -> bool {
    use crate::sys::mountid::fd_facts;
    let entry = |name: &NamedPath| {
        let fd = open_in_sandbox(root, &without_final_slashes(&name.named), false)?;
        let facts = fd_facts(fd.as_fd()).ok()?;
        let stat = nix::sys::stat::fstat(&fd).ok()?;
        Some((facts.is_directory, (stat.st_dev, stat.st_ino)))
    };
    let Some((source_is_dir, source_id)) = entry(from) else {
        return false;
    };
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    if from.trailing_slash() && !source_is_dir {
        return false;
    }
    if !exchange && to.trailing_slash() && !source_is_dir {
        return false;
    }
    if name_too_long_for_its_directory(root, &to.named) {
        return false;
    }
    match entry(to) {
        None => !exchange,
        Some(_) if flags & libc::RENAME_NOREPLACE != 0 => false,
        Some((_, target_id)) if target_id == source_id => false,
        Some((target_is_dir, _)) if to.trailing_slash() && !target_is_dir => false,
        Some((target_is_dir, _)) => exchange || target_is_dir == source_is_dir,
    }
}

/// Judges one name the call writes: a verdict, and (for the two ends of a rename) the
/// mount id of the directory that holds it. Every lookup is made only when needed: each
/// is a syscall on the notified caller's clock.
pub(super) fn judge_path(
    root: &OwnedFd,
    named: &Path,
    op: Op,
    want_mount: bool,
    pid: u32,
) -> (Verdict, Option<u64>) {
    let place = Place::new(root, named);
    let parent_mount = if want_mount {
        place
            .parent()
            .and_then(|p| crate::sys::mountid::mount_id_of_fd(p.as_fd()).ok())
    } else {
        None
    };
    let found = match op {
        Op::Create { .. } => judge_create(&place),
        Op::Remove { dir } => judge_remove(&place, dir),
        Op::RenameTo => judge_rename_to(&place),
        Op::LinkSource { .. } => Found::ALLOWED,
        Op::Change { follow } => match open_in_sandbox(root, named, follow) {
            Some(file) => Found::on_read_only(&file),
            None => Found::ALLOWED,
        },
        // truncate checks the caller's permission to write before the mount (EACCES)
        // since Linux 6.14; before, the mount first.
        Op::Truncate => match open_in_sandbox(root, named, true) {
            Some(file) if is_kind(&file, libc::S_IFREG) => {
                if truncate_checks_permission_first() && refused_for_permission(pid, &file) {
                    Found::ALLOWED
                } else {
                    Found::on_read_only(&file)
                }
            }
            _ => Found::ALLOWED,
        },
        Op::Open { flags } => judge_open(&place, flags, pid),
    };
    let verdict = Verdict {
        path: named.to_owned(),
        resolved: found.resolved,
        denied: found.denied,
        busy: found.busy,
    };
    (verdict, parent_mount)
}

/// What judging one name found.
pub(super) struct Found {
    pub(super) denied: bool,
    /// Where the name leads, for the reason (when denied).
    pub(super) resolved: Option<PathBuf>,
    /// Refused for being a mount point of its own (EBUSY).
    pub(super) busy: bool,
}

impl Found {
    const ALLOWED: Found = Found {
        denied: false,
        resolved: None,
        busy: false,
    };

    pub(super) fn denied(resolved: Option<PathBuf>) -> Found {
        Found {
            denied: true,
            resolved,
            busy: false,
        }
    }

    /// Denied if `file` is on a read-only mount.
    pub(super) fn on_read_only(file: &OwnedFd) -> Found {
        match fd_read_only(file) {
            Some(true) => Found::denied(fd_path(file)),
            _ => Found::ALLOWED,
        }
    }
}

/// A name in the sandbox, with its parent directory opened at most once, when first
/// needed.
pub(super) struct Place<'a> {
    pub(super) root: &'a OwnedFd,
    pub(super) named: &'a Path,
    pub(super) parent: std::cell::OnceCell<Option<OwnedFd>>,
}

impl<'a> Place<'a> {
    pub(super) fn new(root: &'a OwnedFd, named: &'a Path) -> Place<'a> {
        Place {
            root,
            named,
            parent: std::cell::OnceCell::new(),
        }
    }

    pub(super) fn parent(&self) -> Option<&OwnedFd> {
        self.parent
            .get_or_init(|| {
                self.named
                    .parent()
                    .and_then(|p| open_dir_in_sandbox(self.root, p))
            })
            .as_ref()
    }

    pub(super) fn parent_read_only(&self) -> bool {
        self.parent().and_then(fd_read_only) == Some(true)
    }

    /// Whether creating a name that is not there is refused for the mount: the parent is
    /// read-only and not /proc's (/proc looks every name up itself, and one it does not
    /// have is ENOENT first: `mkdir /proc/sys/kernel/x`).
    pub(super) fn parent_refuses_create(&self) -> bool {
        self.parent_read_only() && !self.parent().is_some_and(is_procfs)
    }

    /// Denied in the parent directory: where the name lands, for the reason.
    pub(super) fn denied_in_parent(&self) -> Found {
        Found::denied(self.parent().and_then(|dir| landing(dir, self.named)))
    }

    /// The name itself, looked up beneath its parent.
    pub(super) fn lookup(&self, follow: bool) -> Option<OwnedFd> {
        lookup(self.root, self.named, follow, self.parent())
    }
}

/// mkdir, mknod, symlink, link's new name: only a read-only directory refuses a create,
/// and then only a name that is not there (EEXIST first), so the name is looked up only
/// in a read-only directory.
pub(super) fn judge_create(place: &Place) -> Found {
    if !place.parent_refuses_create() || place.lookup(false).is_some() {
        return Found::ALLOWED;
    }
    place.denied_in_parent()
}

/// unlink, rmdir, rename's old name: the mount is checked before the name is looked up;
/// then a name that is a mount point of its own (a pinned .git, a placeholder) cannot be
/// removed or moved away (EBUSY), once the call is of the right kind for it (unlink of a
/// directory is EISDIR first, rmdir of a file ENOTDIR).
pub(super) fn judge_remove(place: &Place, dir: Option<bool>) -> Found {
    if place.parent_read_only() {
        return place.denied_in_parent();
    }
    // unlink of a name ending in "/" is ENOTDIR (or EISDIR) before a mount point is EBUSY.
    let trailing_slash = place.named.as_os_str().as_bytes().ends_with(b"/");
    match place.lookup(false) {
        Some(_) if trailing_slash && dir == Some(false) => Found::ALLOWED,
        Some(entry) if is_busy_mount_point(&entry, dir, place.parent()) => Found {
            denied: true,
            resolved: fd_path(&entry),
            busy: true,
        },
        _ => Found::ALLOWED,
    }
}

/// rename's new name: the mount first. Replacing a mount point is EBUSY too, but only
/// past type and flag checks on both ends: judged with both names at hand
/// (`rename_onto_mount_point`).
pub(super) fn judge_rename_to(place: &Place) -> Found {
    if place.parent_read_only() {
        return place.denied_in_parent();
    }
    Found::ALLOWED
}

/// open, openat, openat2, creat: what the flags make of the name.
pub(super) fn judge_open(place: &Place, flags: u64, pid: u32) -> Found {
    let has = |flag: i32| flags & u64::from(flag.unsigned_abs()) != 0;
    // O_PATH opens nothing for writing. O_CREAT with O_DIRECTORY (O_TMPFILE has it) is
    // EINVAL since Linux 6.4.
    if has(libc::O_PATH)
        || (has(libc::O_CREAT) && has(libc::O_DIRECTORY) && creat_directory_is_einval())
    {
        return Found::ALLOWED;
    }
    let writes = flags & u64::from(libc::O_ACCMODE.unsigned_abs()) != 0 || has(libc::O_TRUNC);
    // O_CREAT|O_EXCL does not follow a final symlink, nor does O_NOFOLLOW.
    let exclusive = has(libc::O_CREAT) && has(libc::O_EXCL);
    // An exclusive create is a create: refused only in a read-only directory.
    if exclusive && !place.parent_refuses_create() {
        return Found::ALLOWED;
    }
    let follow = !(has(libc::O_NOFOLLOW) || exclusive);
    // O_TMPFILE names a directory and creates an unnamed file in it: refused when that
    // directory's mount is read-only.
    let tmpfile = flags & u64::from(libc::O_TMPFILE.unsigned_abs())
        == u64::from(libc::O_TMPFILE.unsigned_abs());
    if tmpfile {
        // A trailing "/" or "/." follows a final symlink even with O_NOFOLLOW.
        let bytes = place.named.as_os_str().as_bytes();
        let follow = follow || bytes.ends_with(b"/") || bytes.ends_with(b"/.");
        // A name that is not a directory is ENOTDIR first.
        return match open_in_sandbox(place.root, place.named, follow) {
            Some(dir) if is_kind(&dir, libc::S_IFDIR) => Found::on_read_only(&dir),
            _ => Found::ALLOWED,
        };
    }
    // A final "/" wants a directory: anything else is ENOTDIR (`open(".envrc/")`), and a
    // directory opened for writing EISDIR.
    let wants_directory = place.named.as_os_str().as_bytes().ends_with(b"/");
    match place.lookup(follow) {
        Some(_) if exclusive || !writes => Found::ALLOWED,
        Some(_) if wants_directory => Found::ALLOWED,
        Some(file) => match Found::on_read_only(&file) {
            // Only a regular file is changed by it: opening anything else for writing is
            // refused for another reason first (a directory: EISDIR; a symlink with
            // O_NOFOLLOW: ELOOP) or is I/O, not a change to the filesystem (a device,
            // fifo or socket).
            found if found.denied && !is_kind(&file, libc::S_IFREG) => Found::ALLOWED,
            // Without O_TRUNC, the kernel checks the caller's permission to write the
            // file before the mount (may_open before the write access that says EROFS):
            // a file it may not write is EACCES, not a refused write.
            found if found.denied && !has(libc::O_TRUNC) && refused_for_permission(pid, &file) => {
                Found::ALLOWED
            }
            found => found,
        },
        // Following a final symlink to nothing, O_CREAT creates its target: where that
        // lands decides.
        None if has(libc::O_CREAT) && follow && is_symlink(place.root, place.named) => {
            match dangling_target(place.root, place.named) {
                Some(target) => {
                    let (denied, resolved) = create_verdict(place.root, &target);
                    Found {
                        denied,
                        resolved,
                        busy: false,
                    }
                }
                // A link to a name ending in "/" (EISDIR), or a chain too long to follow.
                None => Found::ALLOWED,
            }
        }
        None if has(libc::O_CREAT) && place.parent_refuses_create() => place.denied_in_parent(),
        None => Found::ALLOWED,
    }
}

/// openat2 with RESOLVE_IN_ROOT or RESOLVE_BENEATH: the path is resolved with the
/// caller's directory fd as its root or its limit (absolute symlinks, `..`, an absolute
/// path: each means something else than from `/`), so it is resolved again the same way,
/// beneath the same directory as netbox opens it, with the same resolve flags: the kernel
/// applies the rules, not an imitation of them.
// Whole: the open's checks in the kernel's order, each refusing before the next.
pub(super) fn judge_confined_open(
    n: &Notification,
    root: &OwnedFd,
    flags: u64,
    resolve: u64,
) -> Option<Verdict> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let has = |flag: i32| flags & u64::from(flag.unsigned_abs()) != 0;
    let tmpfile = flags & u64::from(libc::O_TMPFILE.unsigned_abs())
        == u64::from(libc::O_TMPFILE.unsigned_abs());
    let writes = flags & u64::from(libc::O_ACCMODE.unsigned_abs()) != 0 || has(libc::O_TRUNC);
    if has(libc::O_PATH)
        || !(writes || has(libc::O_CREAT) || tmpfile)
        || (has(libc::O_CREAT) && has(libc::O_DIRECTORY) && creat_directory_is_einval())
    {
        return None;
    }
    let raw = seccomp::read_c_string(n.pid, n.args[1], PATH_MAX).ok()?;
    // An empty path is ENOENT (openat2 has no AT_EMPTY_PATH).
    if raw.is_empty() {
        return None;
    }
    let dirfd = int_arg(n.args[0]);
    let dir_path = if dirfd == libc::AT_FDCWD {
        std::fs::read_link(format!("/proc/{}/cwd", n.pid)).ok()?
    } else {
        std::fs::read_link(fd_link(n.pid, dirfd)).ok()?
    };
    let dir = open_dir_in_sandbox(root, &dir_path)?;
    let resolve_flags =
        ResolveFlag::from_bits_truncate(resolve) | ResolveFlag::RESOLVE_NO_MAGICLINKS;
    let exclusive = has(libc::O_CREAT) && has(libc::O_EXCL);
    let lookup = |path: &[u8], extra: OFlag| {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | extra)
            .resolve(resolve_flags);
        crate::sys::resolve::openat2(&dir, OsStr::from_bytes(path), how)
    };
    let named = dir_path.join(OsStr::from_bytes(&raw));
    let denied = |file: &OwnedFd| Verdict {
        path: named.clone(),
        resolved: fd_path(file),
        denied: true,
        busy: false,
    };
    if tmpfile {
        let target = lookup(&raw, OFlag::O_DIRECTORY).ok()?;
        return (fd_read_only(&target) == Some(true)).then(|| denied(&target));
    }
    let follow = if has(libc::O_NOFOLLOW) || exclusive {
        OFlag::O_NOFOLLOW
    } else {
        OFlag::empty()
    };
    match lookup(&raw, follow) {
        Ok(file) => {
            let changes = writes && !exclusive && is_kind(&file, libc::S_IFREG);
            let refused = changes
                && fd_read_only(&file) == Some(true)
                && (has(libc::O_TRUNC) || !refused_for_permission(n.pid, &file));
            refused.then(|| denied(&file))
        }
        Err(nix::errno::Errno::ENOENT) if has(libc::O_CREAT) => {
            // A dangling symlink as the final name: O_CREAT creates its target, so its
            // body is followed (beneath the same directory, by the same rules) to the
            // name that would be created.
            let mut raw = raw.clone();
            for hop in 0.. {
                match lookup(&raw, OFlag::O_NOFOLLOW) {
                    Ok(link) if is_kind(&link, libc::S_IFLNK) => {
                        if hop >= MAX_SYMLINK_HOPS || resolve & RESOLVE_NO_SYMLINKS != 0 {
                            return None; // ELOOP
                        }
                        let body = nix::fcntl::readlinkat(&link, "").ok()?;
                        let body = body.as_bytes().to_vec();
                        if body.is_empty() || body.ends_with(b"/") {
                            return None; // ENOENT, EISDIR
                        }
                        raw = if body.starts_with(b"/") {
                            if resolve & RESOLVE_BENEATH != 0 {
                                return None; // EXDEV
                            }
                            body
                        } else {
                            match raw.iter().rposition(|b| *b == b'/') {
                                Some(i) => [&raw[..=i], &body[..]].concat(),
                                None => body,
                            }
                        };
                    }
                    Ok(_) => return None,
                    Err(nix::errno::Errno::ENOENT) => break,
                    Err(_) => return None,
                }
            }
            let end = raw.iter().rposition(|b| *b == b'/');
            let parent: &[u8] = match end {
                Some(0) => b"/",
                Some(i) => &raw[..i],
                None => b".",
            };
            let parent = lookup(parent, OFlag::O_DIRECTORY).ok()?;
            let refused = fd_read_only(&parent) == Some(true) && !is_procfs(&parent);
            refused.then(|| denied(&parent))
        }
        Err(_) => None,
    }
}

/// The file open on a /proc/PID/fd link: its path and whether its mount is read-only.
pub(super) fn judge_open_file(link: &Path) -> Option<Verdict> {
    let path = std::fs::read_link(link).ok()?;
    let denied = nix::sys::statvfs::statvfs(link)
        .is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    Some(Verdict {
        resolved: Some(path.clone()),
        path,
        denied,
        busy: false,
    })
}
