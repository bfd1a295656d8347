//! Direct attempts, on record. A program that ignores the proxy settings dials or sends
//! straight to an address; the network namespace refuses it (no route out, or with capture
//! no listener on that port), silently. The seccomp filter also hands netbox every
//! `connect`, every `sendto` with an address, and every `sendmsg` and `sendmmsg`
//! (sys/seccomp.rs); netbox reads each call's addresses once and makes the call itself
//! (writewatch.rs, sender.rs, connector.rs). Here what it read is judged, with what kind of
//! socket it is (a copy of the caller's fd): one that no listener of netbox's takes, and
//! that does not stay inside the sandbox, becomes a `direct_attempt` record and a one-line
//! notice, both capped per session. netbox's own listeners are let through unlogged: the
//! proxy's, the captured ports (the bridge logs those connections itself) and the DNS
//! stub. The namespace refuses the traffic either way: the judgment is a log line.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::plan::capture::CapturePlan;
use crate::sys::notified;
use crate::sys::seccomp::Notification;
use crate::sys::sockdiag::{self, Transport};

/// What the watcher needs to tell netbox's listeners from the rest.
pub struct NetContext {
    /// Where capture listens, when the run captures.
    pub capture: Option<CapturePlan>,
    /// A sock_diag socket made in the sandbox's network namespace, to ask whether
    /// something there listens at a loopback address (sockdiag.rs).
    pub diag: Option<OwnedFd>,
    /// Whether `diag` answered rightly for TCP and for UDP when checked (`NetContext::new`).
    diag_tcp: bool,
    diag_udp: bool,
    /// Set at `--fetch`'s cut: the bridge's listeners (the proxy's, capture's, the DNS
    /// stub's) are closed.
    cut: Arc<AtomicBool>,
}

/// Which syscalls carry an address to look at.
pub fn is_net_syscall(nr: i64) -> bool {
    notified::acts(nr, notified::Acts::Address)
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
    /// After `--fetch`'s cut: the bridge and capture are closed.
    Cut,
    /// Nothing can receive it: a multicast or broadcast address, or a socket tied to an
    /// interface or a source address that keeps it from where the address leads (it is
    /// refused, or waits for an answer that never comes).
    Unroutable,
}

impl Reason {
    /// What it means, for the notice on stderr.
    pub fn explained(self) -> String {
        let why = match self {
            Reason::NotCaptured => "only the allowlist's ports are carried",
            Reason::UdpNotCarried => "only DNS to the sandbox's stub is",
            Reason::NoListener => {
                "nothing in the sandbox listens there (the host's loopback is not reachable)"
            }
            Reason::NoRouteOut => "only the proxy is",
            Reason::Cut => "--fetch's command is done, and nothing is carried any more",
            Reason::Unroutable => {
                "nothing can receive it (a multicast or broadcast address, or a socket tied \
                 to another interface or source address)"
            }
        };
        format!("{}: {why}", self.text())
    }

    pub fn text(self) -> &'static str {
        match self {
            Reason::NotCaptured => "port not captured",
            Reason::UdpNotCarried => "udp not carried",
            Reason::NoListener => "no listener",
            Reason::NoRouteOut => "no route out",
            Reason::Cut => "network cut",
            Reason::Unroutable => "unroutable",
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

/// Where a connect would go, judged: empty for one to no internet address (a unix socket,
/// netlink), which is most, and for one the kernel refuses before anything is sent (a name
/// of the wrong family or length). For a connect whose address netbox has read (`name`) and whose socket it
/// has copied: what it judges is what it then connects.
pub fn judge_connect(
    n: &Notification,
    name: &[u8],
    socket: &OwnedFd,
    context: &NetContext,
) -> Vec<Attempt> {
    if !may_be_internet(name) {
        return Vec::new();
    }
    judge_names(n, &[name.to_vec()], look_at_socket(socket), context)
}

/// The same for a send whose messages netbox has read (`names`, one per message, empty
/// for none) and whose socket it has copied.
pub fn judge_send(
    n: &Notification,
    names: &[Vec<u8>],
    socket: &OwnedFd,
    context: &NetContext,
) -> Vec<Attempt> {
    let names: Vec<Vec<u8>> = names.iter().filter(|n| n.len() >= 2).cloned().collect();
    if !names.iter().any(|name| may_be_internet(name)) {
        return Vec::new();
    }
    judge_names(n, &names, look_at_socket(socket), context)
}

fn judge_names(
    n: &Notification,
    names: &[Vec<u8>],
    socket: Option<SocketSeen>,
    context: &NetContext,
) -> Vec<Attempt> {
    let domain = socket.as_ref().map(|s| s.domain);
    if domain.is_some_and(|d| d != libc::AF_INET && d != libc::AF_INET6) {
        // An internet name on a unix socket: EINVAL, nothing sent.
        return Vec::new();
    }
    // A socket netbox could not look at is taken for what the call usually is on.
    let protocol = socket.as_ref().map_or(
        if n.nr == libc::SYS_connect {
            Protocol::Tcp
        } else {
            Protocol::Udp
        },
        |s| s.protocol,
    );
    // A send that names an address on a stream socket is a connection only with
    // MSG_FASTOPEN; otherwise the kernel ignores the name (or refuses the send).
    if protocol == Protocol::Tcp && n.nr != libc::SYS_connect && !fast_open(n) {
        return Vec::new();
    }
    let mut destinations: Vec<SocketAddr> = Vec::new();
    for name in names {
        if let Some(to) = parse_sockaddr(name, domain, protocol, n.nr) {
            if !destinations.contains(&to) {
                destinations.push(to);
            }
        }
    }
    // Connecting a UDP socket sends nothing: it is how glibc sorts a name's addresses
    // (RFC 6724), connecting to each to learn its source address. Only one to port 53 is
    // kept: a resolver asking a nameserver of its own, whose queries then go out with
    // send(2), which the filter does not see.
    if n.nr == libc::SYS_connect && protocol == Protocol::Udp {
        destinations.retain(|to| to.port() == 53);
    }
    let (from, device) = socket.map_or((None, None), |s| (s.local, s.device));
    let sender = Sender {
        from,
        device: device.as_deref(),
    };
    destinations
        .into_iter()
        .map(|to| Attempt {
            to,
            protocol,
            direct: reason(to, protocol, &sender, context),
        })
        .collect()
}

/// MSG_FASTOPEN in a send's flags (linux/socket.h).
const MSG_FASTOPEN: u64 = 0x2000_0000;

fn fast_open(n: &Notification) -> bool {
    let flags = match n.nr {
        libc::SYS_sendmsg => n.args[2],
        _ => n.args[3],
    };
    flags & MSG_FASTOPEN != 0
}

/// What netbox saw of the caller's socket.
struct SocketSeen {
    /// AF_INET, AF_INET6, or another family.
    domain: i32,
    protocol: Protocol,
    /// Where it is bound, if it is (a reply's source, for the UDP lookup).
    local: Option<SocketAddr>,
    /// The interface it is tied to (SO_BINDTODEVICE), if any.
    device: Option<String>,
}

/// What the call's socket is: a copy of the caller's fd, asked. An internet datagram
/// socket is UDP: the other kind, ICMP's ping socket, is closed to every group in a new
/// network namespace (net.ipv4.ping_group_range starts empty).
fn look_at_socket(socket: &OwnedFd) -> Option<SocketSeen> {
    use nix::sys::socket::{
        getsockname, getsockopt, sockopt, SockType, SockaddrLike, SockaddrStorage,
    };
    let protocol = match getsockopt(socket, sockopt::SockType).ok()? {
        SockType::Stream => Protocol::Tcp,
        SockType::Datagram => Protocol::Udp,
        _ => Protocol::Other,
    };
    let local = getsockname::<SockaddrStorage>(std::os::fd::AsRawFd::as_raw_fd(socket)).ok()?;
    let domain = local.family().map_or(-1, |f| f as i32);
    let local = local
        .as_sockaddr_in()
        .map(|a| SocketAddr::from(std::net::SocketAddrV4::from(*a)))
        .or_else(|| {
            local
                .as_sockaddr_in6()
                .map(|a| SocketAddr::from(std::net::SocketAddrV6::from(*a)))
        });
    let device = getsockopt(socket, sockopt::BindToDevice)
        .ok()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty());
    Some(SocketSeen {
        domain,
        protocol,
        local,
        device,
    })
}

/// A copy of the caller's socket. Only a socket is copied: closing our copy of anything
/// else could call into its filesystem (a FUSE file's flush, which a FUSE server in the
/// sandbox could leave unanswered, and this thread with it). The link names what the fd
/// was a moment ago; another thread of the caller's could swap in such a file before the
/// copy, and then our close waits as long as the FUSE server lets it: no longer than the
/// sandbox lives, since that server is CMD's and ends with it, and only CMD's own calls
/// wait meanwhile.
/// A copy of the caller's socket, or the errno the call would have failed with for its fd: EBADF for
/// none, ENOTSOCK for a file that is not a socket, EACCES where netbox cannot copy it.
pub fn copy_socket_or_errno(n: &Notification) -> Result<OwnedFd, i32> {
    // The fd argument is an int: the kernel reads the low 32 bits.
    let fd = crate::supervise::writejudge::int_arg(n.args[0]);
    if fd < 0 {
        return Err(libc::EBADF);
    }
    let ours = format!("/proc/{}/fd/{fd}", n.pid);
    let link = match std::fs::read_link(&ours) {
        Ok(link) => link,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(libc::EBADF),
        Err(_) => return Err(libc::EACCES),
    };
    if !link.as_os_str().as_encoded_bytes().starts_with(b"socket:") {
        return Err(libc::ENOTSOCK);
    }
    copy_socket_file(n, fd, &ours).ok_or(libc::EACCES)
}

fn copy_socket_file(n: &Notification, fd: i32, ours: &str) -> Option<OwnedFd> {
    if let Ok(copy) = crate::sys::process::copy_fd_of_thread(n.pid, fd) {
        return Some(copy);
    }
    // Before Linux 6.9 only a thread group's leader has a pidfd: its fd is the caller's
    // if both name the same socket (a thread that unshared its fd table may not).
    let (leader, _) = crate::supervise::writejudge::thread_group(n.pid)?;
    let same = |a: &str, b: &str| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => {
            use std::os::unix::fs::MetadataExt;
            (a.dev(), a.ino()) == (b.dev(), b.ino())
        }
        _ => false,
    };
    let leaders = format!("/proc/{leader}/fd/{fd}");
    if leader != n.pid && !same(ours, &leaders) {
        return None;
    }
    crate::sys::process::copy_fd_of_thread(leader, fd).ok()
}

/// The sending socket, as far as where its packets go depends on it.
#[derive(Default)]
struct Sender<'a> {
    /// Where it is bound, if it is.
    from: Option<SocketAddr>,
    /// The interface it is tied to, if any.
    device: Option<&'a str>,
}

/// Why `to` is a direct attempt, or `None` if a listener of netbox's or of the sandbox's
/// own takes it.
fn reason(
    to: SocketAddr,
    protocol: Protocol,
    sender: &Sender,
    context: &NetContext,
) -> Option<Reason> {
    let from = sender.from;
    // The unspecified address, dialled, is the loopback address of its family.
    let ip = match bridge::target::canonical_ip(to.ip()) {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let port = to.port();
    // Where the address is the sandbox's own (loopback; with capture, the link's), a
    // socket of the sandbox's may take it: asked of its network namespace. Every other
    // address is routed to capture's namespace, where only netbox listens (and with no
    // capture, nowhere).
    let local = ip.is_loopback() || (context.capture.is_some() && is_link_address(ip));
    if context.capture.is_some() && !arrives(to, ip, local, sender) {
        return Some(Reason::Unroutable);
    }
    let cut = context.cut.load(Ordering::Relaxed);
    let netbox_takes = netbox_listens(ip, port, protocol, context.capture.as_ref());
    if netbox_takes && !cut {
        return None;
    }
    let listening = match protocol {
        _ if !local => None,
        Protocol::Tcp => context.listening(Transport::Tcp, ip, port, None),
        Protocol::Udp => context.listening(Transport::Udp, ip, port, from),
        // Ping and raw sockets need a capability CMD does not have.
        Protocol::Other => return None,
    };
    if listening == Some(true) {
        return None;
    }
    if local {
        // After the cut, the proxy's and the stub's ports are closed: refused for that.
        if netbox_takes {
            return Some(Reason::Cut);
        }
        // Unknown (no diag socket, or it failed): not logged, rather than flooding the
        // log with a test suite's own local traffic.
        return (listening == Some(false)).then_some(Reason::NoListener);
    }
    if cut {
        return Some(Reason::Cut);
    }
    Some(match (&context.capture, protocol) {
        (None, _) => Reason::NoRouteOut,
        (Some(_), Protocol::Tcp) => Reason::NotCaptured,
        (Some(_), _) => Reason::UdpNotCarried,
    })
}

impl NetContext {
    /// Whether something in the sandbox listens at `ip:port`; `None` when that cannot be
    /// asked (no diag socket, or its check at the start failed for this transport).
    fn listening(
        &self,
        transport: Transport,
        ip: IpAddr,
        port: u16,
        from: Option<SocketAddr>,
    ) -> Option<bool> {
        let usable = match transport {
            Transport::Tcp => self.diag_tcp,
            Transport::Udp => self.diag_udp,
        };
        let diag = self.diag.as_ref().filter(|_| usable)?;
        sockdiag::listening(diag.as_fd(), transport, ip, port, from).ok()
    }

    /// The context, with the diag socket checked against listeners known to be there
    /// (the proxy's; for UDP the witness pid 1 bound, on `udp_witness`), so a kernel whose
    /// diag answers wrongly for a transport (its module missing: every lookup ENOENT) is
    /// not believed for it.
    pub fn new(
        capture: Option<CapturePlan>,
        diag: Option<OwnedFd>,
        udp_witness: Option<u16>,
        cut: Arc<AtomicBool>,
    ) -> NetContext {
        let answers = |transport, port| {
            let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
            diag.as_ref().is_some_and(|diag| {
                sockdiag::listening(diag.as_fd(), transport, loopback, port, None).ok()
                    == Some(true)
            })
        };
        let diag_tcp = answers(Transport::Tcp, crate::sandbox::PROXY_PORT);
        let diag_udp = udp_witness.is_some_and(|port| answers(Transport::Udp, port));
        NetContext {
            capture,
            diag,
            diag_tcp,
            diag_udp,
            cut,
        }
    }
}

/// Whether what is sent to `to` (`ip`, canonical; `local`: the sandbox's own) arrives
/// where the address leads under capture: for an address of the sandbox's own, on its
/// loopback; for any other unicast address, in capture's namespace, which answers it. Not
/// a multicast or broadcast address; not an IPv6 link-local address scoped to `lo`
/// (index 1, the only other interface); not from a socket tied to the other interface, or
/// bound to a source address that is not the sandbox's (IPV6_FREEBIND lets one be: the
/// answer would go to that address, which capture's namespace takes for its own).
fn arrives(to: SocketAddr, ip: IpAddr, local: bool, sender: &Sender) -> bool {
    let unicast = match ip {
        IpAddr::V4(v4) => !v4.is_multicast() && !v4.is_broadcast(),
        IpAddr::V6(v6) => !v6.is_multicast(),
    };
    if !unicast {
        return false;
    }
    if local {
        return sender.device != Some(crate::sandbox::capture::LINK_NAME);
    }
    // Not an address class: an fe80:: address scoped to lo (index 1) is a way to reach lo.
    #[allow(clippy::disallowed_methods)]
    let scoped_to_lo =
        matches!(to, SocketAddr::V6(v6) if v6.ip().is_unicast_link_local() && v6.scope_id() == 1);
    let own_source = sender.from.is_none_or(|from| {
        let from = bridge::target::canonical_ip(from.ip());
        from.is_unspecified() || is_link_address(from)
    });
    !scoped_to_lo
        && sender
            .device
            .is_none_or(|d| d == crate::sandbox::capture::LINK_NAME)
        && own_source
}

/// Whether `ip` is the sandbox's own address on capture's link.
fn is_link_address(ip: IpAddr) -> bool {
    use bridge::session::addresses::{LINK_ADDRESS, LINK_ADDRESS_V6};
    ip == IpAddr::V4(LINK_ADDRESS) || ip == IpAddr::V6(LINK_ADDRESS_V6)
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
    let routed_to_capture = !ip.is_loopback() && !is_link_address(ip);
    proxy
        || stub
        || (protocol == Protocol::Tcp
            && routed_to_capture
            && capture.listens_at(SocketAddr::new(ip, port)))
}

fn name_family(name: &[u8]) -> Option<i32> {
    Some(i32::from(u16::from_ne_bytes(
        name.get(0..2)?.try_into().ok()?,
    )))
}

/// Whether a name could reach an internet address: AF_INET, AF_INET6, or AF_UNSPEC,
/// which an IPv4 UDP socket's send takes as AF_INET.
fn may_be_internet(name: &[u8]) -> bool {
    matches!(
        name_family(name),
        Some(libc::AF_INET | libc::AF_INET6 | libc::AF_UNSPEC)
    )
}

/// The internet address a name gives, as the kernel reads it for a socket of `domain`
/// (unknown: `None`) and `protocol`: an IPv4 name on an IPv6 socket is taken (as a mapped
/// address), an IPv6 name on an IPv4 socket is refused, and an AF_UNSPEC name on an IPv4
/// UDP socket's send is taken as IPv4 (connect with AF_UNSPEC dissolves an association).
fn parse_sockaddr(
    name: &[u8],
    domain: Option<i32>,
    protocol: Protocol,
    nr: i64,
) -> Option<SocketAddr> {
    let family = name_family(name)?;
    let port = || Some(u16::from_be_bytes(name.get(2..4)?.try_into().ok()?));
    let v4 = |name: &[u8]| {
        let ip: [u8; 4] = name.get(4..8)?.try_into().ok()?;
        Some(SocketAddr::from((ip, port()?)))
    };
    match family {
        libc::AF_INET if name.len() >= 16 => v4(name),
        libc::AF_INET6 if name.len() >= 24 && domain != Some(libc::AF_INET) => {
            let ip: [u8; 16] = name.get(8..24)?.try_into().ok()?;
            // The scope id, where the name is long enough to carry one (the kernel reads
            // it only then).
            let scope = name
                .get(24..28)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_ne_bytes);
            let ip = std::net::Ipv6Addr::from(ip);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                port()?,
                0,
                scope,
            )))
        }
        libc::AF_UNSPEC
            if name.len() >= 16
                && domain == Some(libc::AF_INET)
                && protocol == Protocol::Udp
                && nr != libc::SYS_connect =>
        {
            v4(name)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(ports: Option<Vec<u16>>) -> NetContext {
        let capture = ports.map(|ports| CapturePlan { ports });
        NetContext::new(capture, None, None, Arc::default())
    }

    fn reason(to: SocketAddr, protocol: Protocol, context: &NetContext) -> Option<Reason> {
        super::reason(to, protocol, &Sender::default(), context)
    }

    #[test]
    fn netbox_listeners_are_not_direct_attempts() {
        let with = context(Some(vec![80, 443, 8443]));
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(reason(at("10.1.2.3:443"), Protocol::Tcp, &with), None);
        assert_eq!(reason(at("[2001:db8::1]:80"), Protocol::Tcp, &with), None);
        assert_eq!(reason(at("127.0.0.53:53"), Protocol::Udp, &with), None);
        assert_eq!(reason(at("127.0.0.1:3128"), Protocol::Tcp, &with), None);
        assert_eq!(
            reason(at("[::ffff:127.0.0.1]:3128"), Protocol::Tcp, &with),
            None
        );
        assert_eq!(reason(at("10.1.2.3:8443"), Protocol::Tcp, &with), None);
        assert_eq!(
            reason(at("10.1.2.3:8444"), Protocol::Tcp, &with),
            Some(Reason::NotCaptured)
        );
        assert_eq!(
            reason(at("10.1.2.3:3128"), Protocol::Tcp, &with),
            Some(Reason::NotCaptured)
        );
        // Capture listens at every address routed to it, on its ports.
        assert_eq!(reason(at("198.18.0.1:8443"), Protocol::Tcp, &with), None);
        assert_eq!(
            reason(at("[::ffff:198.18.0.1]:8443"), Protocol::Tcp, &with),
            None
        );
        assert_eq!(
            reason(at("198.18.0.2:8444"), Protocol::Tcp, &with),
            Some(Reason::NotCaptured)
        );
        // The link's own address is the sandbox's: capture takes nothing there, and with
        // no diag socket to ask, it is not logged (as loopback is not).
        assert_eq!(reason(at("198.19.255.254:443"), Protocol::Tcp, &with), None);
        assert_eq!(
            reason(at("10.1.2.3:443"), Protocol::Udp, &with),
            Some(Reason::UdpNotCarried)
        );
        // The unspecified address is loopback: the proxy's, or nothing there.
        assert_eq!(reason(at("0.0.0.0:3128"), Protocol::Tcp, &with), None);
        assert_eq!(
            reason(at("[::]:443"), Protocol::Tcp, &with),
            None,
            "no diag: unknown"
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
    fn what_cannot_arrive_where_its_address_leads_is_unroutable() {
        let with = context(Some(vec![443]));
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let judge = |to: &str, from: Option<&str>, device: Option<&str>| {
            let sender = Sender {
                from: from.map(|f| f.parse().unwrap()),
                device,
            };
            super::reason(at(to), Protocol::Tcp, &sender, &with)
        };
        // Controls: an ordinary socket, one tied to the link, one bound to the link's
        // address or to every address, reach capture.
        assert_eq!(judge("192.0.2.1:443", None, None), None);
        assert_eq!(judge("192.0.2.1:443", None, Some("nb-capture")), None);
        assert_eq!(judge("192.0.2.1:443", Some("198.19.255.254:0"), None), None);
        assert_eq!(judge("[2001:db8::1]:443", Some("[::]:5000"), None), None);
        let scoped = std::net::SocketAddrV6::new("fe80::1".parse().unwrap(), 443, 0, 2);
        assert_eq!(
            super::reason(scoped.into(), Protocol::Tcp, &Sender::default(), &with),
            None
        );
        for (to, from, device) in [
            ("224.0.0.1:443", None, None),
            ("255.255.255.255:443", None, None),
            ("[ff02::1]:443", None, None),
            ("192.0.2.1:443", None, Some("lo")),
            ("[2001:db8::1]:443", Some("[2001:db8::5]:0"), None),
            ("192.0.2.1:443", Some("127.0.0.1:0"), None),
            ("127.0.0.1:3128", None, Some("nb-capture")),
        ] {
            assert_eq!(
                judge(to, from, device),
                Some(Reason::Unroutable),
                "{to} from {from:?} on {device:?}"
            );
        }
        let on_lo = std::net::SocketAddrV6::new("fe80::1".parse().unwrap(), 443, 0, 1);
        assert_eq!(
            super::reason(on_lo.into(), Protocol::Tcp, &Sender::default(), &with),
            Some(Reason::Unroutable)
        );
        // Without capture nothing but loopback exists: no route out, as before.
        assert_eq!(
            super::reason(
                at("224.0.0.1:443"),
                Protocol::Tcp,
                &Sender::default(),
                &context(None)
            ),
            Some(Reason::NoRouteOut)
        );
    }

    #[test]
    fn after_the_cut_netboxs_ports_are_closed_and_the_rest_is_as_before() {
        let with = context(Some(vec![443]));
        with.cut.store(true, Ordering::Relaxed);
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            reason(at("10.1.2.3:443"), Protocol::Tcp, &with),
            Some(Reason::Cut)
        );
        assert_eq!(
            reason(at("127.0.0.1:3128"), Protocol::Tcp, &with),
            Some(Reason::Cut)
        );
        assert_eq!(
            reason(at("127.0.0.53:53"), Protocol::Udp, &with),
            Some(Reason::Cut)
        );
        // A loopback port nothing of netbox's had: unknown here (no diag), not "cut".
        assert_eq!(reason(at("127.0.0.1:5432"), Protocol::Tcp, &with), None);
    }

    #[test]
    fn socket_addresses_parse_as_the_kernel_reads_them_for_the_socket() {
        let name = |family: i32, port: u16, ip: &[u8], len: usize| {
            let mut bytes = vec![0u8; len];
            bytes[0..2].copy_from_slice(&u16::try_from(family).unwrap().to_ne_bytes());
            bytes[2..4].copy_from_slice(&port.to_be_bytes());
            let at = if family == libc::AF_INET6 { 8 } else { 4 };
            bytes[at..at + ip.len()].copy_from_slice(ip);
            bytes
        };
        let v4 = name(libc::AF_INET, 8443, &[10, 0, 0, 5], 16);
        let connect = libc::SYS_connect;
        let sendto = libc::SYS_sendto;
        let inet = Some(libc::AF_INET);
        let inet6 = Some(libc::AF_INET6);
        let want: SocketAddr = "10.0.0.5:8443".parse().unwrap();
        assert_eq!(
            parse_sockaddr(&v4, inet, Protocol::Tcp, connect),
            Some(want)
        );
        assert_eq!(
            parse_sockaddr(&v4, inet6, Protocol::Tcp, connect),
            Some(want),
            "mapped"
        );
        assert_eq!(
            parse_sockaddr(&v4[..8], inet, Protocol::Tcp, connect),
            None,
            "too short"
        );
        let ip6 = "2001:db8::5"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        let v6 = name(libc::AF_INET6, 53, &ip6, 28);
        let want6: SocketAddr = "[2001:db8::5]:53".parse().unwrap();
        assert_eq!(
            parse_sockaddr(&v6, inet6, Protocol::Udp, sendto),
            Some(want6)
        );
        assert_eq!(
            parse_sockaddr(&v6, None, Protocol::Udp, sendto),
            Some(want6)
        );
        assert_eq!(
            parse_sockaddr(&v6, inet, Protocol::Udp, sendto),
            None,
            "EAFNOSUPPORT"
        );
        // AF_UNSPEC: an IPv4 UDP socket's send takes it as IPv4; nothing else does.
        let unspec = name(libc::AF_UNSPEC, 53, &[192, 0, 2, 1], 16);
        let want: SocketAddr = "192.0.2.1:53".parse().unwrap();
        assert_eq!(
            parse_sockaddr(&unspec, inet, Protocol::Udp, sendto),
            Some(want)
        );
        assert_eq!(parse_sockaddr(&unspec, inet, Protocol::Udp, connect), None);
        assert_eq!(parse_sockaddr(&unspec, inet6, Protocol::Udp, sendto), None);
        assert_eq!(parse_sockaddr(&unspec, None, Protocol::Udp, sendto), None);
        let unix = name(libc::AF_UNIX, 0, &[], 20);
        assert!(!may_be_internet(&unix));
        assert_eq!(parse_sockaddr(&unix, None, Protocol::Udp, sendto), None);
    }
}
