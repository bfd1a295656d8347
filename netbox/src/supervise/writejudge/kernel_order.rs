//! The kernel's own order of checks before the mount's read-only flag: permission,
//! name length, and the version-dependent answers the judge must match.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::args::Op;
use super::lookup::open_dir_in_sandbox;

/// Longest name in a path (NAME_MAX).
pub(super) const NAME_MAX: usize = 255;

/// Whether asking to write `file` fails the caller's permission check (EACCES) before
/// the mount is asked: its filesystem is not read-only as a whole (then that check itself
/// says EROFS) and the caller may not write the file.
pub(super) fn refused_for_permission(pid: u32, file: &OwnedFd) -> bool {
    !caller_may_write(pid, file) && !superblock_read_only(pid, file)
}

/// Whether the filesystem `file` lies on is read-only itself, not only the mount (its
/// super options in the caller's mountinfo). Unknown counts as read-only: the write is
/// then taken for one the mount refuses.
pub(super) fn superblock_read_only(pid: u32, file: &OwnedFd) -> bool {
    let Some(mount_id) = crate::sys::mountid::fd_facts(file.as_fd())
        .ok()
        .and_then(|f| f.mount_id)
    else {
        return true;
    };
    // Lossy: a mount point CMD made may be named in bytes that are not UTF-8; the line
    // wanted is found by its number.
    let Ok(mountinfo) = std::fs::read(format!("/proc/{pid}/mountinfo")) else {
        return true;
    };
    let mountinfo = String::from_utf8_lossy(&mountinfo);
    let id = mount_id.to_string();
    mountinfo
        .lines()
        .find(|line| line.split(' ').next() == Some(id.as_str()))
        .and_then(|line| line.split(" - ").nth(1))
        .and_then(|after| after.split(' ').nth(2))
        .is_none_or(|options| options.split(',').any(|o| o == "ro"))
}

/// Whether truncate(2) checks the caller's permission before the mount: Linux 6.14 on.
pub(super) fn truncate_checks_permission_first() -> bool {
    kernel_at_least(6, 14)
}

/// Whether the caller's credentials let it write the open file, by its mode bits (as the
/// kernel's generic_permission() decides for a caller without capabilities; ACLs aside).
/// A caller with any capability (root of a nested user namespace may override the bits
/// for files its namespace maps), or unknown credentials, counts as allowed: the write is
/// then taken for one the mount refuses.
pub(super) fn caller_may_write(pid: u32, file: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(stat) = nix::sys::stat::fstat(file) else {
        return true;
    };
    // An access ACL can grant what the mode bits do not (and its mask limit the group
    // bits): not judged here, so the write counts as one the mount refused.
    let link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    if crate::sys::xattr::has_following(&link, "system.posix_acl_access") {
        return true;
    }
    // Lossy: CMD names itself in any bytes (`Name:`); the fields read are numbers.
    let Ok(status) = std::fs::read(format!("/proc/{pid}/status")) else {
        return true;
    };
    let status = String::from_utf8_lossy(&status);
    let capable = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .is_none_or(|caps| !caps.trim().trim_start_matches('0').is_empty());
    if capable {
        return true;
    }
    // The fourth id of Uid:/Gid: is the one file access is checked with (fsuid, fsgid).
    let fs_id = |field: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .split_whitespace()
            .nth(3)?
            .parse()
            .ok()
    };
    let (Some(uid), Some(gid)) = (fs_id("Uid:"), fs_id("Gid:")) else {
        return true;
    };
    let in_group = gid == stat.st_gid
        || status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|g| g.split_whitespace().any(|g| g.parse() == Ok(stat.st_gid)));
    let bit = if uid == stat.st_uid {
        libc::S_IWUSR
    } else if in_group {
        libc::S_IWGRP
    } else {
        libc::S_IWOTH
    };
    stat.st_mode & bit != 0
}

/// Whether `named`'s final name is longer than NAME_MAX and its directory's filesystem
/// refuses such a name when it looks it up (ENAMETOOLONG).
pub(super) fn name_too_long_for_its_directory(root: &OwnedFd, named: &Path) -> bool {
    use nix::sys::statfs::{
        FsType, BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, OVERLAYFS_SUPER_MAGIC, TMPFS_MAGIC,
        XFS_SUPER_MAGIC,
    };
    if named.file_name().map_or(0, OsStr::len) <= NAME_MAX {
        return false;
    }
    let Some(dir) = named.parent().and_then(|p| open_dir_in_sandbox(root, p)) else {
        return false;
    };
    let checked: [FsType; 5] = [
        EXT4_SUPER_MAGIC,
        TMPFS_MAGIC,
        XFS_SUPER_MAGIC,
        BTRFS_SUPER_MAGIC,
        OVERLAYFS_SUPER_MAGIC,
    ];
    nix::sys::statfs::fstatfs(&dir).is_ok_and(|s| checked.contains(&s.filesystem_type()))
}

/// Whether this kernel refuses open(O_CREAT|O_DIRECTORY) with EINVAL (Linux 6.4 on;
/// before, it could create a regular file).
pub(super) fn creat_directory_is_einval() -> bool {
    kernel_at_least(6, 4)
}

/// Whether the running kernel is `major.minor` or later.
pub(super) fn kernel_at_least(major: u32, minor: u32) -> bool {
    static RELEASE: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    let running = *RELEASE.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut numbers = release.split('.').map(|part| {
            part.bytes()
                .take_while(u8::is_ascii_digit)
                .fold(0u32, |n, d| {
                    n.saturating_mul(10).saturating_add(u32::from(d - b'0'))
                })
        });
        (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
    });
    running >= (major, minor)
}

/// Whether the kernel refuses `op` on the name `raw` for its shape, before any read-only
/// check; `Path` would hide both cases (it drops a trailing "/" and a final "."):
/// - a final "." or ".." (or "/" alone): creating it is EEXIST, removing it EISDIR,
///   EINVAL, ENOTEMPTY or EBUSY, renaming to or from it EBUSY, opening it with O_CREAT
///   EISDIR;
/// - a trailing "/": creating anything but a directory is ENOENT (or EEXIST), and
///   opening with O_CREAT is EISDIR. (unlink, rmdir and rename check the mount first.)
/// - a directory on the way named longer than NAME_MAX: ENAMETOOLONG where the walk meets
///   it (a final name that long: `final_name_too_long`).
pub(super) fn refused_for_its_name(op: Op, raw: &[u8]) -> bool {
    let end = raw.iter().rposition(|b| *b != b'/').map_or(0, |i| i + 1);
    let trimmed = &raw[..end];
    let trailing_slash = trimmed.len() < raw.len();
    let last = trimmed.rsplit(|b| *b == b'/').next().unwrap_or_default();
    let dots = matches!(last, b"" | b"." | b"..");
    let too_long = |name: &[u8]| name.len() > NAME_MAX;
    let directories = &trimmed[..trimmed.len() - last.len()];
    if directories.split(|b| *b == b'/').any(too_long) {
        return true;
    }
    let creates = |flags: u64| flags & u64::from(libc::O_CREAT.unsigned_abs()) != 0;
    match op {
        Op::Create { dir } => dots || (trailing_slash && !dir),
        Op::Remove { .. } | Op::RenameTo => dots,
        Op::Open { flags } => creates(flags) && (dots || trailing_slash),
        Op::Change { .. } | Op::Truncate | Op::LinkSource { .. } => false,
    }
}
