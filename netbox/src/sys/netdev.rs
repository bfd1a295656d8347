//! Brings the loopback interface up in a new network namespace (SIOCGIFFLAGS/SIOCSIFFLAGS,
//! netdevice(7)). A new netns has only `lo`, and it starts down; needs CAP_NET_ADMIN in the
//! namespace's owning user namespace, which the sandbox holds until its capability drop.

use std::io;
use std::os::fd::AsRawFd;

/// Sets IFF_UP on `lo`.
pub fn bring_loopback_up() -> io::Result<()> {
    let bind = |ip: [u8; 4]| {
        #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
        std::net::UdpSocket::bind(std::net::SocketAddr::from((ip, 0)))
    };
    let socket = bind([127, 0, 0, 1]).or_else(|_| bind([0, 0, 0, 0]))?;
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value for it.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `request` is a valid ifreq with a NUL-terminated name; the socket fd is open for
    // the whole call; SIOCGIFFLAGS writes only into `request`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // IFF_UP is 0x1: it fits the 16-bit flags field.
    let up = libc::c_short::try_from(libc::IFF_UP).unwrap_or(1);
    // SAFETY: the union member `ifru_flags` is the one SIOCGIFFLAGS just filled in.
    unsafe {
        request.ifr_ifru.ifru_flags |= up;
    }
    // SAFETY: as above; SIOCSIFFLAGS only reads `request`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether IPv6 is up in the calling thread's network namespace: ::1 can be bound.
// An address and port: nothing is looked up (clippy.toml).
#[allow(clippy::disallowed_methods)]
pub fn ipv6_up() -> bool {
    std::net::UdpSocket::bind((std::net::Ipv6Addr::LOCALHOST, 0)).is_ok()
}
