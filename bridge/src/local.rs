//! Whether an address is this machine's own. A name can resolve to the public address of
//! the very host the bridge runs on, and a connection there reaches every service bound to
//! all addresses (`0.0.0.0`), as loopback would; `classify` cannot know which addresses are
//! the host's, so this asks the kernel, at each dial (addresses come and go).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::OnceLock;

use crate::ipclass::{classify, IpClass};

/// `classify`, with a public address this machine holds classed as `ThisMachine`.
pub fn classify_here(addr: IpAddr) -> IpClass {
    match classify(addr) {
        IpClass::Public if is_local(addr) => IpClass::ThisMachine,
        class => class,
    }
}

/// Whether `addr` is local: binding a socket to it succeeds only then (an address on an
/// interface, or one a `local` route covers), one syscall pair and no lookup of every
/// interface. Where the system lets any address be bound (`ip_nonlocal_bind`), the
/// interfaces' addresses are listed instead (getifaddrs), which misses local routes.
fn is_local(addr: IpAddr) -> bool {
    if nonlocal_bind_allowed(addr) {
        return on_an_interface(addr);
    }
    UdpSocket::bind(SocketAddr::new(addr, 0)).is_ok()
}

fn nonlocal_bind_allowed(addr: IpAddr) -> bool {
    static ALLOWED: OnceLock<(bool, bool)> = OnceLock::new();
    let (v4, v6) = *ALLOWED.get_or_init(|| {
        let set = |path: &str| std::fs::read_to_string(path).is_ok_and(|v| v.trim() != "0");
        (
            set("/proc/sys/net/ipv4/ip_nonlocal_bind"),
            set("/proc/sys/net/ipv6/ip_nonlocal_bind"),
        )
    });
    if addr.is_ipv4() {
        v4
    } else {
        v6
    }
}

fn on_an_interface(addr: IpAddr) -> bool {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        // Unknown: taken as this machine's, so the dial is refused and says why.
        return true;
    };
    interfaces.filter_map(|i| i.address).any(|a| {
        a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())) == Some(addr)
            || a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())) == Some(addr)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_local_and_a_documentation_address_is_not() {
        // The bind test itself (classify_here only asks it of public addresses).
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(
            !is_local("192.0.2.1".parse().unwrap())
                || nonlocal_bind_allowed("192.0.2.1".parse().unwrap())
        );
        assert_eq!(
            classify_here("127.0.0.1".parse().unwrap()),
            IpClass::Loopback
        );
    }
}
