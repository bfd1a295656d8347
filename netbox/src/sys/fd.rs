//! File descriptors: receiving them over a Unix socket (SCM_RIGHTS, unix(7)), and closing
//! inherited ones before exec, so CMD gets stdin, stdout and stderr and nothing else netbox
//! or its caller held open (close_range(2), Linux ≥ 5.9).

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

/// Closes every fd from 3 up.
pub fn close_from_3() -> io::Result<()> {
    close_range(3, u32::MAX)
}

/// Closes every fd from 3 up except `keep`.
pub fn close_from_3_except(keep: RawFd) -> io::Result<()> {
    let keep = u32::try_from(keep).map_err(|_| io::Error::other("negative fd"))?;
    if keep > 3 {
        close_range(3, keep - 1)?;
    }
    if keep >= 3 {
        close_range(keep + 1, u32::MAX)
    } else {
        close_range(3, u32::MAX)
    }
}

/// Makes fd `onto` a copy of `fd` (dup2(2)), closing what `onto` was. Allocates
/// nothing: safe in a child that shares its parent's memory.
pub fn duplicate_onto(fd: RawFd, onto: RawFd) -> nix::Result<()> {
    // SAFETY: dup2 takes plain integers and touches no memory; the caller is the child
    // about to exec, where fds 0-2 belong to no Rust object (they are replaced on purpose).
    let rc = unsafe { libc::dup2(fd, onto) };
    nix::errno::Errno::result(rc).map(drop)
}

fn close_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range takes plain integers and only closes descriptors of this process.
    // Callers use it where no live Rust object still owns the closed fds: the sandbox's
    // init before it touches anything but its channel, and CMD's child just before exec.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one packet into `buf`, taking ownership of any fds attached to it (received
/// close-on-exec). Returns the packet length.
pub fn recv_with_fds(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    // Room for as many fds as one message can carry (SCM_MAX_FD): the sandbox's
    // listeners come in one, and a capture of many ports is many listeners.
    let mut cmsg_space = nix::cmsg_space!([RawFd; 253]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg_space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        // Some fds did not fit and were closed by the kernel: the message is not whole.
        return Err(io::Error::other(
            "a message's file descriptors were cut short",
        ));
    }
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

/// Registers an owned fd with the tokio reactor, for readability.
pub fn register_readable(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is open for as long as it lives, it moves into the AsyncFd (which
    // then owns it until drop), and its as_raw_fd always returns that same descriptor.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
