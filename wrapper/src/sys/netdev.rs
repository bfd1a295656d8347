//! Brings the loopback interface up in a new network namespace (SIOCGIFFLAGS/SIOCSIFFLAGS,
//! netdevice(7)). A new netns has only `lo`, and it starts down; needs CAP_NET_ADMIN in the
//! namespace's owning user namespace, which the sandbox holds until its capability drop.

use std::io;
use std::os::fd::AsRawFd;

/// Sets IFF_UP on `lo`.
pub fn bring_loopback_up() -> io::Result<()> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("0.0.0.0:0"))?;
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

// rtnetlink's numbers (linux/rtnetlink.h, linux/netlink.h).
const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RT_TABLE_LOCAL: u8 = 255;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_HOST: u8 = 254;
const RTN_LOCAL: u8 = 2;
const RTA_OIF: u16 = 4;

/// Makes every address local in this network namespace: `ip route add local 0.0.0.0/0
/// dev lo` and `ip -6 route add local ::/0 dev lo` (rtnetlink(7)), so that a connection
/// to any address reaches a listener on the wildcard address, whose accepted socket's
/// local address is the one dialled. Hand-written as `local.rs` in the bridge is: two
/// fixed-layout requests. Needs CAP_NET_ADMIN in the namespace's owning user namespace.
/// Returns whether IPv6 took its route too (a host without IPv6 has none to add).
pub fn route_every_address_here() -> io::Result<bool> {
    add_local_default_route(libc::AF_INET)?;
    Ok(add_local_default_route(libc::AF_INET6).is_ok())
}

fn add_local_default_route(family: libc::c_int) -> io::Result<()> {
    use nix::sys::socket::{
        recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType,
    };
    let lo = nix::net::if_::if_nametoindex("lo").map_err(io::Error::from)?;
    let family = u8::try_from(family).map_err(|_| io::Error::other("address family"))?;
    let mut request = Vec::with_capacity(36);
    request.extend(36u32.to_ne_bytes());
    request.extend(RTM_NEWROUTE.to_ne_bytes());
    request.extend((NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL).to_ne_bytes());
    request.extend(1u32.to_ne_bytes()); // sequence
    request.extend(0u32.to_ne_bytes()); // port id: the kernel's
                                        // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type; flags.
    request.extend([
        family,
        0,
        0,
        0,
        RT_TABLE_LOCAL,
        RTPROT_BOOT,
        RT_SCOPE_HOST,
        RTN_LOCAL,
    ]);
    request.extend(0u32.to_ne_bytes());
    request.extend(8u16.to_ne_bytes());
    request.extend(RTA_OIF.to_ne_bytes());
    request.extend(lo.to_ne_bytes());
    let netlink = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    send(netlink.as_raw_fd(), &request, MsgFlags::empty())?;
    let mut answer = [0u8; 256];
    let n = recv(netlink.as_raw_fd(), &mut answer, MsgFlags::empty())?;
    let field = |at: usize| answer.get(at..at + 4).and_then(|b| b.try_into().ok());
    let kind = answer
        .get(4..6)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_ne_bytes);
    match (kind, field(16).map(i32::from_ne_bytes)) {
        (Some(NLMSG_ERROR), Some(0)) if n >= 20 => Ok(()),
        (Some(NLMSG_ERROR), Some(error)) if n >= 20 => Err(io::Error::from_raw_os_error(-error)),
        _ => Err(io::Error::other("rtnetlink answered something else")),
    }
}
