//! connect(2) with a socket address given as the bytes a caller passed: netbox connects a
//! sandboxed command's socket (its copy) to exactly what the command asked for, whatever
//! the family, without parsing what it does not judge.

use std::os::fd::{AsRawFd, BorrowedFd};

/// connect(2) of `socket` to the raw address `address` (at most sockaddr_storage's 128
/// bytes; empty: a NULL address of length 0, which the kernel refuses as the caller's
/// would be). The errno on failure.
pub fn connect_raw(socket: BorrowedFd<'_>, address: &[u8]) -> Result<(), i32> {
    // Aligned for any sockaddr: the kernel copies it, but the length is what it reads.
    let mut storage: libc::sockaddr_storage = unsafe_zeroed_storage();
    let len = address
        .len()
        .min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: `storage` is 128 bytes and `len` is at most that; the two do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            address.as_ptr(),
            (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
            len,
        );
    }
    let pointer = if len == 0 {
        std::ptr::null()
    } else {
        (&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr>()
    };
    let len = libc::socklen_t::try_from(len).unwrap_or(0);
    // SAFETY: `pointer` is NULL with length 0, or points at `storage`, live for the call,
    // with `len` bytes set; connect only reads them.
    let rc = unsafe { libc::connect(socket.as_raw_fd(), pointer, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

fn unsafe_zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain integers, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// A Unix socket address for `path` (which must fit sun_path with its NUL), as bytes.
pub fn unix_address(path: &[u8]) -> Option<Vec<u8>> {
    const SUN_PATH: usize = 108;
    if path.is_empty() || path.len() >= SUN_PATH || path.contains(&0) {
        return None;
    }
    let mut out = Vec::with_capacity(2 + path.len() + 1);
    out.extend_from_slice(&u16::try_from(libc::AF_UNIX).unwrap_or(1).to_ne_bytes());
    out.extend_from_slice(path);
    out.push(0);
    Some(out)
}
