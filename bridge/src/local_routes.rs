//! Whether an address is this machine's own. A name can resolve to the public address of
//! the very host the bridge runs on, and a connection there reaches every service bound to
//! all addresses (`0.0.0.0`), as loopback would; `classify` cannot know which addresses are
//! the host's, so this asks the kernel, at each dial (addresses come and go).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use crate::ipclass::{classify, embedded_ipv4, IpClass};

/// `classify`, with a public address this machine holds classed as `ThisMachine` (a NAT64
/// or 6to4 address too, when the IPv4 address inside is the machine's).
// The one place the bare class table is consulted (clippy.toml): everything else asks this.
#[allow(clippy::disallowed_methods)]
pub fn classify_here(addr: IpAddr) -> IpClass {
    let addr = crate::target::canonical_ip(addr);
    match classify(addr) {
        IpClass::Public if is_local(addr) => IpClass::ThisMachine,
        IpClass::Public => match addr {
            IpAddr::V6(v6) if embedded_ipv4(v6).is_some_and(|v4| is_local(IpAddr::V4(v4))) => {
                IpClass::ThisMachine
            }
            _ => IpClass::Public,
        },
        class => class,
    }
}

/// Whether the kernel delivers `addr` to this machine itself: what its routing table says
/// (a `local` route: one for each address on an interface, and any `ip route add local`),
/// or, if that cannot be asked, whether a socket can be bound to it (which misses local
/// routes of IPv6, and holds for any address where `ip_nonlocal_bind` is set).
// Binds a SocketAddr (an IP address and port 0): nothing is looked up.
#[allow(clippy::disallowed_methods)]
pub(crate) fn is_local(addr: IpAddr) -> bool {
    routed_locally(addr).unwrap_or_else(|| UdpSocket::bind(SocketAddr::new(addr, 0)).is_ok())
}

// rtnetlink's numbers (linux/rtnetlink.h, linux/netlink.h).
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const RTA_DST: u16 = 1;
const RTN_LOCAL: u8 = 2;
/// nlmsghdr, then rtmsg, whose 8th byte is the route's type.
const NLMSG_HEADER_BYTES: usize = 16;
const RTM_TYPE_OFFSET: usize = NLMSG_HEADER_BYTES + 7;

/// Asks the routing table how it would deliver `addr` (what `ip route get ADDR` does):
/// `Some(true)` for a `local` route. Hand-written: one request and one answer of fixed
/// layout, where a netlink crate would bring a whole route library. `None` if it cannot
/// be asked.
fn routed_locally(addr: IpAddr) -> Option<bool> {
    use nix::sys::socket::{
        recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType,
    };
    let (family, octets) = match addr {
        IpAddr::V4(v4) => (nix::libc::AF_INET, v4.octets().to_vec()),
        IpAddr::V6(v6) => (nix::libc::AF_INET6, v6.octets().to_vec()),
    };
    let attribute_len = 4 + octets.len();
    let total = NLMSG_HEADER_BYTES + 12 + attribute_len;
    let mut request = Vec::with_capacity(total);
    request.extend(u32::try_from(total).ok()?.to_ne_bytes());
    request.extend(RTM_GETROUTE.to_ne_bytes());
    request.extend(NLM_F_REQUEST.to_ne_bytes());
    request.extend(1u32.to_ne_bytes()); // sequence
    request.extend(0u32.to_ne_bytes()); // port id: the kernel's
    let prefix_bits = u8::try_from(octets.len() * 8).ok()?;
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type; flags.
    request.extend([u8::try_from(family).ok()?, prefix_bits, 0, 0, 0, 0, 0, 0]);
    request.extend(0u32.to_ne_bytes());
    request.extend(u16::try_from(attribute_len).ok()?.to_ne_bytes());
    request.extend(RTA_DST.to_ne_bytes());
    request.extend(&octets);

    let netlink = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .ok()?;
    send(netlink.as_raw_fd(), &request, MsgFlags::empty()).ok()?;
    // rtnetlink answers within the send: the answer is there, or never comes.
    let mut answer = [0u8; 1024];
    let n = recv(netlink.as_raw_fd(), &mut answer, MsgFlags::MSG_DONTWAIT).ok()?;
    let answer = &answer[..n];
    let kind = u16::from_ne_bytes(answer.get(4..6)?.try_into().ok()?);
    match kind {
        RTM_NEWROUTE => Some(*answer.get(RTM_TYPE_OFFSET)? == RTN_LOCAL),
        // No route (unreachable, a blackhole, a prohibit route): not delivered here. Any
        // other error says nothing: the bind test decides.
        NLMSG_ERROR => {
            let error = i32::from_ne_bytes(answer.get(16..20)?.try_into().ok()?);
            let no_route = [
                nix::libc::ENETUNREACH,
                nix::libc::EHOSTUNREACH,
                nix::libc::EINVAL,
                nix::libc::EACCES,
            ];
            no_route.contains(&-error).then_some(false)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_routed_here_and_a_documentation_address_is_not() {
        assert_eq!(routed_locally("127.0.0.1".parse().unwrap()), Some(true));
        assert_eq!(routed_locally("127.5.6.7".parse().unwrap()), Some(true));
        assert_eq!(routed_locally("::1".parse().unwrap()), Some(true));
        assert_ne!(routed_locally("192.0.2.1".parse().unwrap()), Some(true));
        assert_eq!(
            classify_here("127.0.0.1".parse().unwrap()),
            IpClass::Loopback
        );
    }
}
