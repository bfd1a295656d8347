//! Which mount a path or an open file is on, and what else one statx(2) tells of a file
//! (STATX_MNT_ID and STATX_ATTR_MOUNT_ROOT: Linux ≥ 5.8; birth times: Linux ≥ 4.11, on
//! filesystems that keep one: ext4, xfs, btrfs, tmpfs).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The id of the mount `path` itself is on (not following a final symlink).
pub fn mount_id(path: &Path) -> io::Result<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    statx_mount_id(libc::AT_FDCWD, &c_path, libc::AT_SYMLINK_NOFOLLOW)
}

/// The id of the mount an open file (an O_PATH fd too) is on.
pub fn mount_id_of_fd(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    statx_mount_id(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH)
}

fn statx_mount_id(dirfd: i32, c_path: &std::ffi::CStr, flags: i32) -> io::Result<u64> {
    let buf = statx(dirfd, c_path, flags, libc::STATX_MNT_ID)?;
    if buf.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::other("kernel reports no mount id"));
    }
    Ok(buf.stx_mnt_id)
}

/// statx(2), for what `mask` asks.
fn statx(dirfd: i32, c_path: &std::ffi::CStr, flags: i32, mask: u32) -> io::Result<libc::statx> {
    // SAFETY: statx is plain old data; all-zero is a valid value for it.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and outlives the call; `dirfd` is AT_FDCWD or a
    // descriptor the caller holds open; `buf` is a valid, writable statx the kernel fills.
    let rc = unsafe { libc::statx(dirfd, c_path.as_ptr(), flags, mask, &mut buf) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(buf)
}

/// What one statx(2) tells of an open file (an O_PATH fd too).
pub struct FdFacts {
    pub is_directory: bool,
    pub mount_id: Option<u64>,
    /// Whether the file is the root of a mount (STATX_ATTR_MOUNT_ROOT, Linux ≥ 5.8);
    /// `None` where the kernel does not say.
    pub mount_root: Option<bool>,
}

/// One statx(2) for an open file's type, mount id and whether it is a mount's root.
pub fn fd_facts(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<FdFacts> {
    use std::os::fd::AsRawFd;
    let mask = libc::STATX_TYPE | libc::STATX_MNT_ID;
    let buf = statx(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH, mask)?;
    let mount_root_bit = u64::from(libc::STATX_ATTR_MOUNT_ROOT.unsigned_abs());
    Ok(FdFacts {
        is_directory: u32::from(buf.stx_mode) & libc::S_IFMT == libc::S_IFDIR,
        mount_id: (buf.stx_mask & libc::STATX_MNT_ID != 0).then_some(buf.stx_mnt_id),
        mount_root: (buf.stx_attributes_mask & mount_root_bit != 0)
            .then_some(buf.stx_attributes & mount_root_bit != 0),
    })
}

/// A file's type, owner, change time and birth time (where its
/// filesystem keeps one), times as `(seconds, nanoseconds)` since the epoch.
pub struct Times {
    pub is_directory: bool,
    pub is_symlink: bool,
    pub birth: Option<(i64, u32)>,
    pub change: (i64, u32),
    pub uid: u32,
}

/// statx(2) of `path`, not following a final symlink.
pub fn times_of(path: &Path) -> io::Result<Times> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    times_raw(libc::AT_FDCWD, &c_path)
}

/// statx(2) of `name` in the directory open as `dir`, not following a final symlink;
/// an empty `name` means the file open as `dir` itself.
pub fn times_at(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<Times> {
    use std::os::fd::AsRawFd;
    times_raw(dir.as_raw_fd(), name)
}

fn times_raw(dirfd: i32, name: &std::ffi::CStr) -> io::Result<Times> {
    let mut flags = libc::AT_SYMLINK_NOFOLLOW;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    let mask = libc::STATX_TYPE | libc::STATX_CTIME | libc::STATX_BTIME | libc::STATX_UID;
    let buf = statx(dirfd, name, flags, mask)?;
    let time = |t: libc::statx_timestamp| (t.tv_sec, t.tv_nsec);
    Ok(Times {
        is_directory: u32::from(buf.stx_mode) & libc::S_IFMT == libc::S_IFDIR,
        is_symlink: u32::from(buf.stx_mode) & libc::S_IFMT == libc::S_IFLNK,
        birth: (buf.stx_mask & libc::STATX_BTIME != 0).then(|| time(buf.stx_btime)),
        change: time(buf.stx_ctime),
        uid: buf.stx_uid,
    })
}
