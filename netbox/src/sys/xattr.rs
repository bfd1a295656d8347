//! Extended attributes (xattr(7)): the mark netbox leaves on the placeholder directories
//! it creates, so it never mistakes a user's own empty directory for one of its own; and
//! whether a file has an access ACL (the write judge cannot read one's verdict).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Sets `name` to `value` on `path` itself (not following a symlink).
#[cfg(test)]
pub fn set(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let path = c_path(path)?;
    let name = CString::new(name).map_err(|_| io::Error::other("xattr name contains NUL"))?;
    // SAFETY: both strings are NUL-terminated and outlive the call; `value` is a live slice
    // whose pointer and length are passed together; the kernel only reads them.
    let rc = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether what `path` leads to carries the attribute `name` (a final symlink, or a
/// `/proc/self/fd/N` link, is followed).
pub fn has_following(path: &Path, name: &str) -> bool {
    let (Ok(path), Ok(name)) = (c_path(path), CString::new(name)) else {
        return false;
    };
    // SAFETY: as in `has`: NUL-terminated strings that outlive the call, and a null buffer
    // of size 0, so the kernel writes nothing.
    let rc = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    rc >= 0
}

/// Sets `name` to `value` on the file `fd` holds (open for reading, not `O_PATH`).
pub fn set_on(fd: std::os::fd::BorrowedFd<'_>, name: &str, value: &[u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let name = CString::new(name).map_err(|_| io::Error::other("xattr name contains NUL"))?;
    // SAFETY: `name` is NUL-terminated and outlives the call; `value` is a live slice whose
    // pointer and length are passed together; `fd` is open for the call; the kernel only
    // reads them.
    let rc = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the file `fd` holds (open for reading, not `O_PATH`) carries `name`.
pub fn has_on(fd: std::os::fd::BorrowedFd<'_>, name: &str) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(name) = CString::new(name) else {
        return false;
    };
    // SAFETY: as in `has`: a NUL-terminated name that outlives the call and a null buffer
    // of size 0, so the kernel writes nothing; `fd` is open for the call.
    let rc = unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), std::ptr::null_mut(), 0) };
    rc >= 0
}

/// Removes `name` from the file `fd` holds (open for reading, not `O_PATH`).
pub fn remove_on(fd: std::os::fd::BorrowedFd<'_>, name: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let name = CString::new(name).map_err(|_| io::Error::other("xattr name contains NUL"))?;
    // SAFETY: `name` is NUL-terminated and outlives the call; `fd` is open for the call;
    // the kernel only reads the name.
    let rc = unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
