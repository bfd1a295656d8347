//! Whether something in the sandbox's network namespace would take what is sent to an
//! address: the kernel's own socket lookup, asked through NETLINK_SOCK_DIAG with an
//! exact (not dump) request, which answers with the socket it finds or ENOENT
//! (sock_diag(7)). For TCP that is the lookup an arriving SYN gets (a listener, or a
//! connection with that very peer); for UDP the one a datagram gets. A dump would walk
//! the kernel's whole hash table, every namespace's sockets: ~19 µs here against ~3.5.
//! The netlink socket is made by pid 1 inside the namespace and handed to netbox: a
//! netlink socket answers for the namespace it was made in, wherever it is used from.
//! Hand-written like netdev.rs: one fixed-layout request, and only whether an answer
//! came.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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
const NLM_F_REQUEST: u16 = 0x1;
const NLMSG_HEADER: usize = 16;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, then the 48-byte sockid
/// (sport, dport, src[16], dst[16], if, cookie[2]).
const REQUEST_BODY: usize = 56;

/// Which sockets to look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// Opens a NETLINK_SOCK_DIAG socket, answering for the calling thread's network namespace:
/// connected to the kernel (so nothing else can send to it), and waiting a second at most
/// for an answer.
pub fn open() -> io::Result<OwnedFd> {
    use nix::sys::socket::{connect, setsockopt, sockopt, NetlinkAddr};
    let diag = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    connect(diag.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    setsockopt(
        &diag,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(1, 0),
    )?;
    Ok(diag)
}

/// `lo`'s interface index, in every new network namespace: where everything the sandbox
/// delivers to itself arrives, so a socket bound to `lo` (SO_BINDTODEVICE) is found too.
const LOOPBACK_INDEX: u32 = 1;

/// Whether a socket of `transport` in the namespace `diag` answers for would take what is
/// sent to `addr:port`: a TCP listener on that port at that address or the wildcard (for
/// an IPv4 address an IPv6 wildcard socket too, unless it is IPv6-only), or a UDP socket
/// bound so, not connected elsewhere. `from` is where the sender is bound, if it is: a
/// socket connected to that very sender takes its traffic too.
pub fn listening(
    diag: BorrowedFd<'_>,
    transport: Transport,
    addr: IpAddr,
    port: u16,
    from: Option<SocketAddr>,
) -> io::Result<bool> {
    let addr = canonical(addr);
    // The sender as the lookup wants it: its own address, if bound to one of the
    // destination's family; else the address the kernel would send from (loopback's; for
    // IPv4 under capture's routes, the destination's own).
    let sender_ip = from
        .map(|f| canonical(f.ip()))
        .filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == addr.is_ipv4());
    let sender_port = from.map_or(0, |f| f.port());
    let (family, sender, to) = match addr {
        IpAddr::V4(v4) => {
            let sender = match sender_ip {
                Some(IpAddr::V4(ip)) => ip,
                _ if v4.is_loopback() => Ipv4Addr::LOCALHOST,
                _ => v4,
            };
            (AF_INET, padded(sender.octets()), padded(v4.octets()))
        }
        IpAddr::V6(v6) => {
            // IPv6 sends from ::1 under capture's routes too.
            let sender = match sender_ip {
                Some(IpAddr::V6(ip)) => ip,
                _ => Ipv6Addr::LOCALHOST,
            };
            (AF_INET6, sender.octets(), v6.octets())
        }
    };
    let mut body = [0u8; REQUEST_BODY];
    body[0] = family;
    // The sockid: for TCP the socket's own end is the source and the peer the
    // destination; for UDP it is the other way round ("src and dst are swapped for
    // historical reasons", as the kernel's udp_diag.c says).
    let (protocol, (source, source_port), (destination, destination_port)) = match transport {
        Transport::Tcp => (IPPROTO_TCP, (to, port), (sender, sender_port)),
        Transport::Udp => (IPPROTO_UDP, (sender, sender_port), (to, port)),
    };
    body[1] = protocol;
    // Every state, where the kernel looks at them (a UDP lookup does not).
    body[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    body[8..10].copy_from_slice(&source_port.to_be_bytes());
    body[10..12].copy_from_slice(&destination_port.to_be_bytes());
    body[12..28].copy_from_slice(&source);
    body[28..44].copy_from_slice(&destination);
    body[44..48].copy_from_slice(&LOOPBACK_INDEX.to_ne_bytes());
    // No cookie to check (INET_DIAG_NOCOOKIE).
    body[48..56].copy_from_slice(&[0xff; 8]);
    match exchange(diag, &body) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// An IPv4 address in the sockid's 16 bytes.
fn padded(v4: [u8; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(&v4);
    out
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Sends one exact request with `body`; Ok once the kernel answers with a socket, the
/// kernel's error (ENOENT: none) otherwise.
fn exchange(diag: BorrowedFd<'_>, body: &[u8; REQUEST_BODY]) -> io::Result<()> {
    // Each request numbered, so an answer left over from one whose wait was cut short
    // is told apart and skipped.
    static SEQUENCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let sequence = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut request = Vec::with_capacity(NLMSG_HEADER + REQUEST_BODY);
    let length = u32::try_from(NLMSG_HEADER + REQUEST_BODY).unwrap_or(u32::MAX);
    request.extend_from_slice(&length.to_ne_bytes());
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    request.extend_from_slice(&sequence.to_ne_bytes());
    request.extend_from_slice(&[0; 4]); // port id: the kernel fills it in
    request.extend_from_slice(body);
    send(diag.as_raw_fd(), &request, MsgFlags::empty())?;
    // One answer: the socket (with a few attributes), or an error.
    let mut buffer = vec![0u8; 8 * 1024];
    let answer = loop {
        let n = recv(diag.as_raw_fd(), &mut buffer, MsgFlags::empty())?;
        let answer = &buffer[..n];
        if answer.len() < NLMSG_HEADER {
            return Err(io::Error::other("sock_diag: a short answer"));
        }
        if u32::from_ne_bytes([answer[8], answer[9], answer[10], answer[11]]) == sequence {
            break answer;
        }
    };
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    match kind {
        SOCK_DIAG_BY_FAMILY => Ok(()),
        NLMSG_ERROR => {
            let code = answer
                .get(NLMSG_HEADER..NLMSG_HEADER + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, i32::from_ne_bytes);
            Err(io::Error::from_raw_os_error(code.saturating_neg()))
        }
        other => Err(io::Error::other(format!(
            "sock_diag: an answer of type {other}"
        ))),
    }
}

#[cfg(test)]
// Test code: its sockets are at loopback literals (clippy.toml).
#[allow(clippy::disallowed_methods)]
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
        // A listener bound to lo (SO_BINDTODEVICE) is found too.
        let bound = nix::sys::socket::socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let lo = std::ffi::OsString::from("lo");
        if nix::sys::socket::setsockopt(&bound, nix::sys::socket::sockopt::BindToDevice, &lo)
            .is_ok()
        {
            let at = nix::sys::socket::SockaddrIn::new(127, 0, 0, 1, 0);
            nix::sys::socket::bind(bound.as_raw_fd(), &at).unwrap();
            nix::sys::socket::listen(&bound, nix::sys::socket::Backlog::new(1).unwrap()).unwrap();
            let port =
                nix::sys::socket::getsockname::<nix::sys::socket::SockaddrIn>(bound.as_raw_fd())
                    .unwrap()
                    .port();
            assert!(listening(diag.as_fd(), Transport::Tcp, here, port, None).unwrap());
        }
        // A dual-stack TCP listener takes IPv4 connections too.
        if let Ok(v6) = std::net::TcpListener::bind("[::]:0") {
            let port = v6.local_addr().unwrap().port();
            assert!(listening(diag.as_fd(), Transport::Tcp, here, port, None).unwrap());
            assert!(listening(diag.as_fd(), Transport::Tcp, elsewhere, port, None).unwrap());
        }
        // A dual-stack socket takes IPv4 datagrams too.
        if let Ok(v6) = std::net::UdpSocket::bind("[::]:0") {
            let port = v6.local_addr().unwrap().port();
            assert!(listening(diag.as_fd(), Transport::Udp, here, port, None).unwrap());
            let loopback6: IpAddr = "::1".parse().unwrap();
            assert!(listening(diag.as_fd(), Transport::Udp, loopback6, port, None).unwrap());
        }
    }
}
