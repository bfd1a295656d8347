//! Whether something in the sandbox's network namespace listens at an address: a
//! NETLINK_SOCK_DIAG dump of its listening TCP sockets, or for UDP the kernel's own
//! lookup of the socket a datagram would be delivered to (sock_diag(7)): a UDP dump walks
//! every slot of the UDP hash table, ~25 µs here, where the lookup takes a few. The
//! netlink socket is made by pid 1 inside the namespace and handed to netbox: a netlink
//! socket answers for the namespace it was made in, wherever it is used from.
//! Hand-written like netdev.rs: one fixed-layout request, and the few fields of each
//! answer that say where a socket is bound.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{
    recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType,
};

/// The request's one-byte family and protocol fields (linux/socket.h, linux/in.h).
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
/// linux/sock_diag.h, linux/netlink.h, linux/inet_diag.h.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HEADER: usize = 16;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, then the 48-byte sockid.
const REQUEST_BODY: usize = 56;
/// In `struct inet_diag_msg`: where the sockid's source port and address are.
const SPORT_AT: usize = 4;
const SRC_AT: usize = 8;
/// The TCP states a socket is dumped in: LISTEN for TCP; CLOSE for UDP, which is where
/// a bound, unconnected UDP socket (a server) stays.
const TCP_LISTEN: u32 = 1 << 10;
const UDP_UNCONNECTED: u32 = 1 << 7;

/// Which sockets to look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// Opens a NETLINK_SOCK_DIAG socket, answering for the calling thread's network namespace.
pub fn open() -> io::Result<OwnedFd> {
    socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .map_err(io::Error::from)
}

/// Whether a socket of `transport` in the namespace `diag` answers for would take what is
/// sent to `addr:port`: a TCP listener, or a bound UDP socket not connected elsewhere,
/// on that port and on that address or the wildcard (for an IPv4 address, an IPv6
/// wildcard socket too, which takes both families unless it is IPv6-only, as most are not).
/// For UDP, `from` is where the sender is bound, if it is: a socket connected to that
/// sender takes its datagrams too.
pub fn listening(
    diag: BorrowedFd<'_>,
    transport: Transport,
    addr: IpAddr,
    port: u16,
    from: Option<SocketAddr>,
) -> io::Result<bool> {
    let addr = canonical(addr);
    if transport == Transport::Udp {
        return udp_delivers(diag, addr, port, from);
    }
    let families: &[u8] = match addr {
        IpAddr::V4(_) => &[AF_INET, AF_INET6],
        IpAddr::V6(_) => &[AF_INET6],
    };
    for &family in families {
        let mut found = false;
        dump(diag, family, transport, |bound, bound_port| {
            found |= bound_port == port && takes(bound, addr);
        })?;
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether a datagram to `addr:port` from the sandbox's loopback would be delivered to a
/// socket: the kernel's UDP lookup, asked through an exact (not dump) request, which
/// answers with the socket or ENOENT. (For UDP the request's source is the datagram's
/// sender and its destination the socket's address: "swapped for historical reasons",
/// as the kernel's udp_diag.c says.)
fn udp_delivers(
    diag: BorrowedFd<'_>,
    addr: IpAddr,
    port: u16,
    from: Option<SocketAddr>,
) -> io::Result<bool> {
    // The sender's address as the lookup wants it: its own, if bound to one of the
    // destination's family; else the address the kernel would send from (loopback's,
    // or under capture's routes the destination's own).
    let sender_ip = from
        .map(|f| canonical(f.ip()))
        .filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == addr.is_ipv4());
    let sender_port = from.map_or(0, |f| f.port());
    let (family, sender, to) = match addr {
        IpAddr::V4(v4) => {
            let sender = match sender_ip {
                Some(IpAddr::V4(ip)) => ip,
                _ if v4.is_loopback() => std::net::Ipv4Addr::LOCALHOST,
                _ => v4,
            };
            let mut to = [0u8; 16];
            to[..4].copy_from_slice(&v4.octets());
            let mut from = [0u8; 16];
            from[..4].copy_from_slice(&sender.octets());
            (AF_INET, from, to)
        }
        IpAddr::V6(v6) => {
            let sender = match sender_ip {
                Some(IpAddr::V6(ip)) => ip,
                _ if v6.is_loopback() => Ipv6Addr::LOCALHOST,
                _ => v6,
            };
            (AF_INET6, sender.octets(), v6.octets())
        }
    };
    let mut body = [0u8; REQUEST_BODY];
    body[0] = family;
    body[1] = IPPROTO_UDP;
    // sockid: sport, dport, src[16], dst[16], if (0), cookie: none to check.
    body[8..10].copy_from_slice(&sender_port.to_be_bytes());
    body[10..12].copy_from_slice(&port.to_be_bytes());
    body[12..28].copy_from_slice(&sender);
    body[28..44].copy_from_slice(&to);
    body[48..56].copy_from_slice(&[0xff; 8]);
    let mut found = false;
    match exchange(diag, NLM_F_REQUEST, &body, |_| found = true) {
        Ok(()) => Ok(found),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Whether a socket bound to `bound` takes what is sent to `addr`.
fn takes(bound: IpAddr, addr: IpAddr) -> bool {
    match bound {
        IpAddr::V4(b) => (b.is_unspecified() && addr.is_ipv4()) || bound == addr,
        IpAddr::V6(b) if b.is_unspecified() => true,
        IpAddr::V6(b) => match (b.to_ipv4_mapped(), addr) {
            (Some(mapped), IpAddr::V4(a)) => mapped == a,
            _ => bound == addr,
        },
    }
}

/// Dumps the sockets of one family and transport, calling `each` with every one's bound
/// address and port.
fn dump(
    diag: BorrowedFd<'_>,
    family: u8,
    transport: Transport,
    mut each: impl FnMut(IpAddr, u16),
) -> io::Result<()> {
    let (protocol, states) = match transport {
        Transport::Tcp => (IPPROTO_TCP, TCP_LISTEN),
        Transport::Udp => (IPPROTO_UDP, UDP_UNCONNECTED),
    };
    let mut body = [0u8; REQUEST_BODY];
    body[..4].copy_from_slice(&[family, protocol, 0, 0]);
    body[4..8].copy_from_slice(&states.to_ne_bytes());
    exchange(diag, NLM_F_REQUEST | NLM_F_DUMP, &body, |message| {
        if let Some((bound, port)) = bound_at(family, message) {
            each(bound, port);
        }
    })
}

/// Sends one request with `body` and calls `each` with every socket message of the
/// answer, until it ends (NLMSG_DONE for a dump; an exact request's one answer).
fn exchange(
    diag: BorrowedFd<'_>,
    flags: u16,
    body: &[u8; REQUEST_BODY],
    mut each: impl FnMut(&[u8]),
) -> io::Result<()> {
    let mut request = Vec::with_capacity(NLMSG_HEADER + REQUEST_BODY);
    let length = u32::try_from(NLMSG_HEADER + REQUEST_BODY).unwrap_or(u32::MAX);
    request.extend_from_slice(&length.to_ne_bytes());
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request.extend_from_slice(&flags.to_ne_bytes());
    request.extend_from_slice(&[0; 8]); // sequence number and port id: the kernel's own
    request.extend_from_slice(body);
    send(diag.as_raw_fd(), &request, MsgFlags::empty())?;
    let dump = flags & NLM_F_DUMP != 0;
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        let n = recv(diag.as_raw_fd(), &mut buffer, MsgFlags::empty())?;
        let mut rest = &buffer[..n];
        if rest.is_empty() {
            return Err(io::Error::other("sock_diag: empty answer"));
        }
        while rest.len() >= NLMSG_HEADER {
            let length = u32::from_ne_bytes(rest[0..4].try_into().unwrap_or_default()) as usize;
            let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap_or_default());
            if length < NLMSG_HEADER || length > rest.len() {
                return Err(io::Error::other("sock_diag: a malformed answer"));
            }
            let body = &rest[NLMSG_HEADER..length];
            match kind {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let code = body
                        .get(0..4)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, i32::from_ne_bytes);
                    return Err(io::Error::from_raw_os_error(-code));
                }
                SOCK_DIAG_BY_FAMILY => {
                    each(body);
                    if !dump {
                        return Ok(());
                    }
                }
                _ => {}
            }
            // Messages are aligned to 4 bytes.
            let next = (length + 3) & !3;
            rest = rest.get(next..).unwrap_or_default();
        }
    }
}

/// The bound address and port in one `inet_diag_msg`.
fn bound_at(family: u8, body: &[u8]) -> Option<(IpAddr, u16)> {
    let port = u16::from_be_bytes(body.get(SPORT_AT..SPORT_AT + 2)?.try_into().ok()?);
    let src: [u8; 16] = body.get(SRC_AT..SRC_AT + 16)?.try_into().ok()?;
    let bound = if family == AF_INET {
        IpAddr::from([src[0], src[1], src[2], src[3]])
    } else {
        IpAddr::V6(Ipv6Addr::from(src))
    };
    Some((bound, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn finds_listeners_by_address_and_port() {
        let diag = open().unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        let here: IpAddr = "127.0.0.1".parse().unwrap();
        let elsewhere: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(listening(diag.as_fd(), Transport::Tcp, here, port, None).unwrap());
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(listening(diag.as_fd(), Transport::Tcp, mapped, port, None).unwrap());
        assert!(!listening(diag.as_fd(), Transport::Tcp, elsewhere, port, None).unwrap());
        assert!(!listening(diag.as_fd(), Transport::Udp, here, port, None).unwrap());
        drop(tcp);
        assert!(!listening(diag.as_fd(), Transport::Tcp, here, port, None).unwrap());
        let udp = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        assert!(listening(diag.as_fd(), Transport::Udp, elsewhere, port, None).unwrap());
        assert!(!listening(diag.as_fd(), Transport::Tcp, elsewhere, port, None).unwrap());
        drop(udp);
        assert!(!listening(diag.as_fd(), Transport::Udp, elsewhere, port, None).unwrap());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        assert!(listening(diag.as_fd(), Transport::Udp, here, port, None).unwrap());
        assert!(!listening(diag.as_fd(), Transport::Udp, elsewhere, port, None).unwrap());
        assert!(!listening(
            diag.as_fd(),
            Transport::Udp,
            here,
            port.wrapping_add(1),
            None
        )
        .unwrap());
        // A socket connected to one sender takes that sender's datagrams only.
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.connect(sender.local_addr().unwrap()).unwrap();
        let to = receiver.local_addr().unwrap();
        let from = Some(sender.local_addr().unwrap());
        assert!(listening(diag.as_fd(), Transport::Udp, here, to.port(), from).unwrap());
        assert!(!listening(diag.as_fd(), Transport::Udp, here, to.port(), None).unwrap());
        // A dual-stack socket takes IPv4 datagrams too.
        if let Ok(v6) = std::net::UdpSocket::bind("[::]:0") {
            let port = v6.local_addr().unwrap().port();
            assert!(listening(diag.as_fd(), Transport::Udp, here, port, None).unwrap());
            let loopback6: IpAddr = "::1".parse().unwrap();
            assert!(listening(diag.as_fd(), Transport::Udp, loopback6, port, None).unwrap());
        }
    }

    #[test]
    fn wildcards_take_their_family() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert!(takes("0.0.0.0".parse().unwrap(), v4));
        assert!(!takes("0.0.0.0".parse().unwrap(), v6));
        assert!(takes("::".parse().unwrap(), v4));
        assert!(takes("::".parse().unwrap(), v6));
        assert!(takes("::ffff:10.1.2.3".parse().unwrap(), v4));
        assert!(!takes("::ffff:10.1.2.4".parse().unwrap(), v4));
        assert!(!takes("10.1.2.4".parse().unwrap(), v4));
    }
}
