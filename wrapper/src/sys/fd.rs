//! File descriptors: receiving them over a Unix socket (SCM_RIGHTS, unix(7)), and closing
//! inherited ones before exec, so CMD gets stdin, stdout and stderr and nothing else netbox
//! or its caller held open (close_range(2), Linux ≥ 5.9).

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

/// Closes every fd from 3 up.
pub fn close_from_3() -> io::Result<()> {
    // SAFETY: close_range takes plain integers and only closes descriptors of this process;
    // it runs just before exec, when nothing in this process uses fds above 2 any more.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one packet into `buf`, taking ownership of any fds attached to it (received
/// close-on-exec). Returns the packet length.
pub fn recv_with_fds(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut cmsg_space = nix::cmsg_space!([RawFd; 8]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg_space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            for fd in received {
                // SAFETY: the kernel installed this fd in our table for this very message;
                // nothing else in the process refers to it yet, so we may own it.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok((msg.bytes, fds))
}
