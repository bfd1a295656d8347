//! Which mount a path is on: statx(2) with STATX_MNT_ID (Linux ≥ 5.8).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The id of the mount `path` itself is on (not following a final symlink).
pub fn mount_id(path: &Path) -> io::Result<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: statx is plain old data; all-zero is a valid value for it.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and outlives the call; `buf` is a valid, writable
    // statx the kernel fills in.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            &mut buf,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if buf.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::other("kernel reports no mount id"));
    }
    Ok(buf.stx_mnt_id)
}
