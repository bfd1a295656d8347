//! Pseudo-terminals (pty(7)): the sandbox's own, opened inside it from its private devpts
//! instance, and the terminal ioctls (ioctl_tty(2)) netbox needs on both sides.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

pub use nix::pty::Winsize;
use nix::sys::termios::Termios;

nix::ioctl_read_bad!(tiocgwinsz, libc::TIOCGWINSZ, libc::winsize);
nix::ioctl_write_ptr_bad!(tiocswinsz, libc::TIOCSWINSZ, libc::winsize);
nix::ioctl_write_int_bad!(tiocsctty, libc::TIOCSCTTY);

/// A new pty pair from this mount namespace's `/dev/ptmx`, with the slave set up like
/// `termios` (the caller's own terminal modes) and `size`. Returns (master, slave).
pub fn open(termios: Option<&Termios>, size: Option<&Winsize>) -> nix::Result<(OwnedFd, OwnedFd)> {
    let pair = nix::pty::openpty(size, termios)?;
    Ok((pair.master, pair.slave))
}

/// The window size of the terminal `fd` is, if it is one.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<Winsize> {
    let mut size = Winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointer given, which points at a
    // live, properly aligned `winsize` owned by this frame; `fd` is open for the call.
    let done = unsafe { tiocgwinsz(fd.as_raw_fd(), &mut size) };
    done.ok().map(|_| size)
}

/// Sets the window size of the terminal `fd` (the kernel then sends SIGWINCH to its
/// foreground process group).
pub fn set_window_size(fd: BorrowedFd<'_>, size: &Winsize) -> nix::Result<()> {
    // SAFETY: TIOCSWINSZ only reads one `winsize` from the pointer, which points at a live
    // `winsize` borrowed for the call; `fd` is open for it.
    unsafe { tiocswinsz(fd.as_raw_fd(), size) }.map(drop)
}

/// Makes the terminal `fd` the controlling terminal of the calling session (whose leader
/// the caller must be). Allocates nothing: safe in a child that shares its parent's
/// memory.
pub fn make_controlling(fd: i32) -> nix::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal one another session
    // has) and touches no memory of ours.
    unsafe { tiocsctty(fd, 0) }.map(drop)
}
