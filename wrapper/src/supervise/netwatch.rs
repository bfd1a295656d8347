//! Direct attempts, on record. A program that ignores the proxy settings dials or sends
//! straight to an address; the network namespace refuses it (no route out, or with capture
//! no listener on that port), silently. The seccomp filter also hands netbox every
//! `connect`, every `sendto` with an address, and every `sendmsg` and `sendmmsg`
//! (sys/seccomp.rs); here the watcher's thread reads where each would go, from the
//! caller's memory as the write log reads paths, and what kind of socket it is (a copy of
//! the caller's fd), then lets the syscall run. One that no listener of netbox's takes,
//! and that does not stay inside the sandbox, becomes a `direct_attempt` record and a
//! one-line notice, both capped per session.
//!
//! Like a refused write, it is only ever a log line: the caller could change its memory
//! between our read and the kernel's, which would only make the record wrong, never let
//! anything out. netbox's own listeners are let through unlogged: the proxy's, the
//! captured ports (the bridge logs those connections itself) and the DNS stub.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};

use crate::sandbox::CapturePlan;
use crate::sys::seccomp::{self, Notification};
use crate::sys::sockdiag::{self, Transport};

/// Longest socket address read (sizeof(struct sockaddr_storage)).
const SOCKADDR_MAX: usize = 128;
/// `struct msghdr` (64-bit): msg_name at 0, msg_namelen at 8; 56 bytes in all.
const MSGHDR_LEN: usize = 56;
/// `struct mmsghdr`: a msghdr, then msg_len, padded to 64 bytes.
const MMSGHDR_LEN: usize = 64;
/// Messages of one sendmmsg looked at (the kernel takes at most UIO_MAXIOV).
const MAX_MESSAGES: u64 = 1024;

/// What the watcher needs to tell netbox's listeners from the rest.
pub struct NetContext {
    /// Where capture listens, when the run captures.
    pub capture: Option<CapturePlan>,
    /// A sock_diag socket made in the sandbox's network namespace, to ask whether
    /// something there listens at a loopback address (sockdiag.rs).
    pub diag: Option<OwnedFd>,
}

/// Which syscalls carry an address to look at.
pub fn is_net_syscall(nr: i64) -> bool {
    seccomp::ALWAYS_NOTIFIED_NET.contains(&nr) || nr == libc::SYS_sendto
}

pub fn syscall_name(nr: i64) -> &'static str {
    match nr {
        libc::SYS_connect => "connect",
        libc::SYS_sendto => "sendto",
        libc::SYS_sendmsg => "sendmsg",
        libc::SYS_sendmmsg => "sendmmsg",
        _ => "unknown",
    }
}

/// The kind of socket an attempt is made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    /// Another kind (ICMP, raw), or a socket netbox could not look at.
    Other,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Other => "other",
        }
    }
}

/// Why an attempt reached none of netbox's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// With capture: TCP to a port netbox does not listen on.
    NotCaptured,
    /// With capture: UDP anywhere but the DNS stub.
    UdpNotCarried,
    /// A loopback address where nothing in the sandbox listens (the host's loopback is
    /// another namespace's).
    NoListener,
    /// Without capture: the namespace has no route but loopback.
    NoRouteOut,
}

impl Reason {
    /// What it means, for the notice on stderr.
    pub fn explained(self) -> &'static str {
        match self {
            Reason::NotCaptured => "port not captured: only the allowlist's ports are carried",
            Reason::UdpNotCarried => "udp not carried: only DNS to the sandbox's stub is",
            Reason::NoListener => "no listener: the host's loopback is not reachable",
            Reason::NoRouteOut => "no route out: only the proxy is",
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            Reason::NotCaptured => "port not captured",
            Reason::UdpNotCarried => "udp not carried",
            Reason::NoListener => "no listener",
            Reason::NoRouteOut => "no route out",
        }
    }
}

/// One destination of a notified call, judged.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    pub to: SocketAddr,
    pub protocol: Protocol,
    /// `None`: netbox's own listener, or something in the sandbox, takes it.
    pub direct: Option<Reason>,
}

/// Where a notified call would send, judged; empty for a call to no internet address
/// (a unix socket, netlink, a send with no address), which is most of them.
pub fn judge(n: &Notification, context: &NetContext) -> Vec<Attempt> {
    let mut destinations = destinations(n);
    if destinations.is_empty() {
        return Vec::new();
    }
    // A socket netbox could not look at is taken for what the call usually is on.
    let protocol = socket_protocol(n).unwrap_or(if n.nr == libc::SYS_connect {
        Protocol::Tcp
    } else {
        Protocol::Udp
    });
    // Connecting a UDP socket sends nothing: it is how glibc sorts a name's addresses
    // (RFC 6724), connecting to each to learn its source address. Only one to port 53 is
    // kept: a resolver asking a nameserver of its own, whose queries then go out with
    // send(2), which the filter does not see.
    if n.nr == libc::SYS_connect && protocol == Protocol::Udp {
        destinations.retain(|to| to.port() == 53);
    }
    destinations
        .into_iter()
        .map(|to| Attempt {
            to,
            protocol,
            direct: reason(to, protocol, context),
        })
        .collect()
}

/// What kind of socket the call is on: a copy of the caller's fd, asked.
/// (A send on a stream socket that names an address is a connection too: TCP Fast Open.)
/// An internet datagram socket is UDP: the other kind, ICMP's ping socket, is closed to
/// every group in a new network namespace (net.ipv4.ping_group_range starts empty).
fn socket_protocol(n: &Notification) -> Option<Protocol> {
    use nix::sys::socket::{getsockopt, sockopt, SockType};
    let fd = i32::try_from(n.args[0]).ok()?;
    // Only a socket is copied: closing our copy of anything else could call into its
    // filesystem (a FUSE file's flush, which a FUSE server in the sandbox could leave
    // unanswered, and this thread with it). The link names what the fd was a moment ago;
    // another thread of the caller's could swap in such a file before the copy, and then
    // our close waits as long as the FUSE server lets it: no longer than the sandbox
    // lives, since that server is CMD's and ends with it, and only CMD's own calls wait
    // meanwhile.
    let link = std::fs::read_link(format!("/proc/{}/fd/{fd}", n.pid)).ok()?;
    if !link.as_os_str().as_encoded_bytes().starts_with(b"socket:") {
        return None;
    }
    let socket = crate::sys::process::copy_fd_of(n.pid, fd).ok()?;
    Some(match getsockopt(&socket, sockopt::SockType).ok()? {
        SockType::Stream => Protocol::Tcp,
        SockType::Datagram => Protocol::Udp,
        _ => Protocol::Other,
    })
}

/// Why `to` is a direct attempt, or `None` if a listener of netbox's or of the sandbox's
/// own takes it.
fn reason(to: SocketAddr, protocol: Protocol, context: &NetContext) -> Option<Reason> {
    let ip = bridge::target::canonical_ip(to.ip());
    let port = to.port();
    if netbox_listens(ip, port, protocol, context.capture.as_ref()) {
        return None;
    }
    if ip.is_loopback() {
        let transport = match protocol {
            Protocol::Tcp => Transport::Tcp,
            Protocol::Udp => Transport::Udp,
            // Ping and raw sockets need a capability CMD does not have.
            Protocol::Other => return None,
        };
        let listening = context
            .diag
            .as_ref()
            .map(|diag| sockdiag::listening(diag.as_fd(), transport, ip, port));
        // Unknown (no diag socket, or it failed): not logged, rather than flooding the
        // log with a test suite's own local traffic.
        return match listening {
            Some(Ok(false)) => Some(Reason::NoListener),
            _ => None,
        };
    }
    Some(match (&context.capture, protocol) {
        (None, _) => Reason::NoRouteOut,
        (Some(_), Protocol::Tcp) => Reason::NotCaptured,
        (Some(_), _) => Reason::UdpNotCarried,
    })
}

/// Whether one of netbox's listeners in the sandbox takes `ip:port`.
fn netbox_listens(
    ip: IpAddr,
    port: u16,
    protocol: Protocol,
    capture: Option<&CapturePlan>,
) -> bool {
    let proxy = protocol == Protocol::Tcp
        && port == crate::sandbox::PROXY_PORT
        && (ip == IpAddr::V4(Ipv4Addr::LOCALHOST)
            || ip == IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
    let Some(capture) = capture else {
        return proxy;
    };
    let stub = ip == IpAddr::V4(crate::sandbox::DNS_STUB) && port == 53;
    proxy || stub || (protocol == Protocol::Tcp && capture.listens_at(SocketAddr::new(ip, port)))
}

/// The internet addresses a notified call names.
fn destinations(n: &Notification) -> Vec<SocketAddr> {
    let [_, a1, a2, _, a4, a5] = n.args;
    let addresses = match n.nr {
        libc::SYS_connect => vec![(a1, a2)],
        libc::SYS_sendto => vec![(a4, a5)],
        libc::SYS_sendmsg => message_names(n.pid, a1, 1, MSGHDR_LEN),
        libc::SYS_sendmmsg => message_names(n.pid, a1, a2.min(MAX_MESSAGES), MMSGHDR_LEN),
        _ => Vec::new(),
    };
    let mut out: Vec<SocketAddr> = Vec::new();
    for (address, len) in addresses {
        if let Some(to) = read_sockaddr(n.pid, address, len) {
            if !out.contains(&to) {
                out.push(to);
            }
        }
    }
    out
}

/// The (msg_name, msg_namelen) of `count` message headers `stride` bytes apart.
fn message_names(pid: u32, headers: u64, count: u64, stride: usize) -> Vec<(u64, u64)> {
    let Ok(count) = usize::try_from(count) else {
        return Vec::new();
    };
    let Ok(bytes) = seccomp::read_memory(pid, headers, stride * count) else {
        return Vec::new();
    };
    bytes
        .chunks_exact(stride)
        .filter_map(|header| {
            let name = u64::from_ne_bytes(header.get(0..8)?.try_into().ok()?);
            let len = u32::from_ne_bytes(header.get(8..12)?.try_into().ok()?);
            (name != 0).then_some((name, u64::from(len)))
        })
        .collect()
}

/// An AF_INET or AF_INET6 socket address read from the caller; `None` for another family.
fn read_sockaddr(pid: u32, address: u64, len: u64) -> Option<SocketAddr> {
    let len = usize::try_from(len).ok()?.min(SOCKADDR_MAX);
    if address == 0 || len < 2 {
        return None;
    }
    parse_sockaddr(&seccomp::read_memory(pid, address, len).ok()?)
}

fn parse_sockaddr(bytes: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(u16::from_ne_bytes(bytes.get(0..2)?.try_into().ok()?));
    let port = || Some(u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?));
    if family == libc::AF_INET && bytes.len() >= 16 {
        let ip: [u8; 4] = bytes.get(4..8)?.try_into().ok()?;
        Some(SocketAddr::from((ip, port()?)))
    } else if family == libc::AF_INET6 && bytes.len() >= 24 {
        let ip: [u8; 16] = bytes.get(8..24)?.try_into().ok()?;
        Some(SocketAddr::from((std::net::Ipv6Addr::from(ip), port()?)))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(ports: Option<Vec<u16>>) -> NetContext {
        NetContext {
            capture: ports.map(|ports| CapturePlan {
                ports,
                names: vec!["a.test".into()],
                pinned: vec!["198.18.0.1:8443".parse().unwrap()],
            }),
            diag: None,
        }
    }

    #[test]
    fn netbox_listeners_are_not_direct_attempts() {
        let with = context(Some(vec![80, 443]));
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(reason(at("10.1.2.3:443"), Protocol::Tcp, &with), None);
        assert_eq!(reason(at("[2001:db8::1]:80"), Protocol::Tcp, &with), None);
        assert_eq!(reason(at("127.0.0.53:53"), Protocol::Udp, &with), None);
        assert_eq!(reason(at("127.0.0.1:3128"), Protocol::Tcp, &with), None);
        assert_eq!(
            reason(at("[::ffff:127.0.0.1]:3128"), Protocol::Tcp, &with),
            None
        );
        assert_eq!(
            reason(at("10.1.2.3:8443"), Protocol::Tcp, &with),
            Some(Reason::NotCaptured)
        );
        assert_eq!(
            reason(at("10.1.2.3:3128"), Protocol::Tcp, &with),
            Some(Reason::NotCaptured)
        );
        // A pinned listener takes its own address and port, no other.
        assert_eq!(reason(at("198.18.0.1:8443"), Protocol::Tcp, &with), None);
        assert_eq!(
            reason(at("[::ffff:198.18.0.1]:8443"), Protocol::Tcp, &with),
            None
        );
        assert_eq!(
            reason(at("198.18.0.2:8443"), Protocol::Tcp, &with),
            Some(Reason::NotCaptured)
        );
        assert_eq!(
            reason(at("10.1.2.3:443"), Protocol::Udp, &with),
            Some(Reason::UdpNotCarried)
        );
        let without = context(None);
        assert_eq!(
            reason(at("10.1.2.3:443"), Protocol::Tcp, &without),
            Some(Reason::NoRouteOut)
        );
        assert_eq!(
            reason(at("127.0.0.53:53"), Protocol::Udp, &without),
            None,
            "loopback, and nothing to ask: not logged"
        );
    }

    #[test]
    fn socket_addresses_parse_by_family() {
        let mut v4 = vec![0u8; 16];
        v4[0..2].copy_from_slice(&u16::try_from(libc::AF_INET).unwrap().to_ne_bytes());
        v4[2..4].copy_from_slice(&8443u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 0, 0, 5]);
        assert_eq!(parse_sockaddr(&v4), Some("10.0.0.5:8443".parse().unwrap()));
        assert_eq!(parse_sockaddr(&v4[..8]), None, "too short");
        let mut v6 = vec![0u8; 28];
        v6[0..2].copy_from_slice(&u16::try_from(libc::AF_INET6).unwrap().to_ne_bytes());
        v6[2..4].copy_from_slice(&53u16.to_be_bytes());
        v6[8..24].copy_from_slice(
            &"2001:db8::5"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        assert_eq!(
            parse_sockaddr(&v6),
            Some("[2001:db8::5]:53".parse().unwrap())
        );
        let mut unix = vec![0u8; 20];
        unix[0..2].copy_from_slice(&u16::try_from(libc::AF_UNIX).unwrap().to_ne_bytes());
        assert_eq!(parse_sockaddr(&unix), None);
    }
}
