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

/// sendmsg(2) on `socket` of one message: `name` as raw address bytes (empty: none),
/// `data` as one buffer, `control` as raw ancillary data (empty: none). The bytes sent,
/// or the errno.
pub fn sendmsg_raw(
    socket: BorrowedFd<'_>,
    name: &[u8],
    data: &[u8],
    control: &[u8],
    flags: i32,
) -> Result<usize, i32> {
    let mut storage: libc::sockaddr_storage = unsafe_zeroed_storage();
    let name_len = name
        .len()
        .min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: `storage` is 128 bytes and `name_len` is at most that; no overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
            name_len,
        );
    }
    // cmsg data must be aligned for its headers (size_t): copied into u64 words.
    let mut aligned = vec![0u64; control.len().div_ceil(8)];
    // SAFETY: `aligned` holds at least control.len() bytes; no overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            control.as_ptr(),
            aligned.as_mut_ptr().cast::<u8>(),
            control.len(),
        );
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain integers and pointers, for which all-zero is valid.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    if name_len > 0 {
        header.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
        header.msg_namelen = libc::socklen_t::try_from(name_len).unwrap_or(0);
    }
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    if !control.is_empty() {
        header.msg_control = aligned.as_mut_ptr().cast();
        header.msg_controllen = control.len();
    }
    // SAFETY: every pointer in `header` points at a buffer of ours that lives for the
    // call (`storage`, `iov` and the `data` it describes, `aligned`), with its length;
    // sendmsg only reads them.
    let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &header, flags) };
    if sent < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(usize::try_from(sent).unwrap_or(0))
}
