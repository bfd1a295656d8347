//! The session's addresses: what the sandbox's DNS stub answers for an allowed name, one
//! address per name, kept for the session so that a captured connection to it maps back
//! to the name. IPv4 from 198.18.0.0/15 and IPv6 from 2001:2::/48 (both set aside for
//! benchmarking, RFC 2544 and RFC 5180: never a real destination). Inside the sandbox every
//! address but loopback's and the link's own is routed to capture's namespace, where every
//! address is local, so they need no route of their own.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;

/// 198.18.0.0: the first of the IPv4 range.
const V4_BASE: u32 = 0xc612_0000;
/// Addresses in 198.18.0.0/15, but for its first and last.
const V4_COUNT: u32 = (1 << 17) - 2;
/// 2001:2::
const V6_BASE: u128 = 0x2001_0002_0000_0000_0000_0000_0000_0000;

/// Whether `addr` is in the ranges session addresses come from (handed out or not).
pub fn is_session_range(addr: IpAddr) -> bool {
    match crate::target::canonical_ip(addr) {
        IpAddr::V4(v4) => u32::from(v4) >> 17 == V4_BASE >> 17,
        IpAddr::V6(v6) => u128::from(v6) >> 80 == V6_BASE >> 80,
    }
}

/// The address the live probe dials to prove capture: the first of the range, which is
/// never handed out.
pub const PROBE_ADDRESS: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// The same for IPv6: 2001:2::.
pub const PROBE_ADDRESS_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0);

/// The sandbox's own address on capture's link, its source for every captured connection:
/// the last but one of the IPv4 range (past the names a session hands out at most).
pub const LINK_ADDRESS: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 254);
/// The same for IPv6: far past the names a session hands out.
pub const LINK_ADDRESS_V6: Ipv6Addr =
    Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0xffff, 0xffff, 0xffff, 0xfffe);

/// A name the DNS stub answers with the probe's addresses whatever the policy, so the
/// live probe sees an answer come back (`.invalid`: never a real name). Whoever looks it
/// up gets an address that names nothing, which the bridge refuses.
pub const PROBE_NAME: &str = "capture.netbox-probe.invalid";

/// Names handed out, by index, and the other way round.
#[derive(Debug, Default)]
pub struct SessionAddresses {
    inner: Mutex<Handed>,
    /// The session captures (a DNS stub serves it): its ranges are its own.
    serving: std::sync::atomic::AtomicBool,
}

/// Refused names remembered at most, to log each once (past it, every refusal is logged).
const MAX_REFUSED_NAMES: usize = 10_000;

/// Names a session hands addresses out for, at most. A wildcard rule lets CMD ask for as
/// many names as it likes, and each is kept for the session (an address never comes to
/// name another host), in netbox's memory: a few hundred bytes each (the
/// whole range, 131,070, would take ~70 MB). Past it the stub answers SERVFAIL.
pub const MAX_NAMES: u32 = 16_384;

#[derive(Debug, Default)]
struct Handed {
    /// Each name once, shared by the list and the index.
    names: Vec<std::sync::Arc<str>>,
    index: HashMap<std::sync::Arc<str>, u32>,
    refused: std::collections::HashSet<String>,
}

impl SessionAddresses {
    /// Marks the session as one whose DNS stub serves (capture).
    pub fn serve(&self) {
        self.serving
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the session's DNS stub serves: then an address of its ranges that names
    /// nothing is never dialled.
    pub fn serving(&self) -> bool {
        self.serving.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `name` is refused for the first time (to be logged).
    pub fn first_refusal(&self, name: &str) -> bool {
        let Ok(mut handed) = self.inner.lock() else {
            return true;
        };
        if handed.refused.contains(name) {
            return false;
        }
        if handed.refused.len() < MAX_REFUSED_NAMES {
            handed.refused.insert(name.to_owned());
        }
        true
    }

    /// The address for `name` (normalised), handed out now if it has none yet; `None` once
    /// the range is used up (the stub then answers with an error).
    pub fn address_for(&self, name: &str, v6: bool) -> Option<IpAddr> {
        let mut handed = self.inner.lock().ok()?;
        let index = match handed.index.get(name) {
            Some(index) => *index,
            None => {
                let index = u32::try_from(handed.names.len()).ok()?;
                if index >= V4_COUNT.min(MAX_NAMES) {
                    return None;
                }
                let name: std::sync::Arc<str> = name.into();
                handed.names.push(std::sync::Arc::clone(&name));
                handed.index.insert(name, index);
                index
            }
        };
        Some(if v6 {
            IpAddr::V6(Ipv6Addr::from(V6_BASE + 1 + u128::from(index)))
        } else {
            IpAddr::V4(Ipv4Addr::from(V4_BASE + 1 + index))
        })
    }

    /// The name an address was handed out for, if it was.
    pub fn name_for(&self, addr: IpAddr) -> Option<String> {
        let index = match crate::target::canonical_ip(addr) {
            IpAddr::V4(v4) => u32::from(v4).checked_sub(V4_BASE + 1)?,
            IpAddr::V6(v6) => u32::try_from(u128::from(v6).checked_sub(V6_BASE + 1)?).ok()?,
        };
        let handed = self.inner.lock().ok()?;
        handed
            .names
            .get(usize::try_from(index).ok()?)
            .map(|name| name.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_stops_at_its_cap_and_keeps_what_it_handed_out() {
        let addresses = SessionAddresses::default();
        for i in 0..MAX_NAMES {
            assert!(addresses
                .address_for(&format!("n{i}.test"), false)
                .is_some());
        }
        assert_eq!(addresses.address_for("one-more.test", false), None);
        // The last handed out is short of the link's own addresses.
        let last = format!("n{}.test", MAX_NAMES - 1);
        assert!(addresses.address_for(&last, false) < Some(IpAddr::V4(LINK_ADDRESS)));
        assert!(addresses.address_for(&last, true) < Some(IpAddr::V6(LINK_ADDRESS_V6)));
        assert!(is_session_range(LINK_ADDRESS.into()) && is_session_range(LINK_ADDRESS_V6.into()));
        // Names already handed out keep their addresses, both families.
        let first = addresses.address_for("n0.test", true).unwrap();
        assert_eq!(addresses.name_for(first).as_deref(), Some("n0.test"));
    }

    #[test]
    fn a_name_keeps_its_address_and_maps_back() {
        let addresses = SessionAddresses::default();
        let a = addresses.address_for("a.test", false).unwrap();
        let b = addresses.address_for("b.test", false).unwrap();
        assert_eq!(a, "198.18.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(b, "198.18.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(addresses.address_for("a.test", false), Some(a));
        let a6 = addresses.address_for("a.test", true).unwrap();
        assert_eq!(a6, "2001:2::1".parse::<IpAddr>().unwrap());
        assert_eq!(addresses.name_for(a).as_deref(), Some("a.test"));
        assert_eq!(addresses.name_for(a6).as_deref(), Some("a.test"));
        // v4-mapped, as a dual-stack listener sees an IPv4 connection.
        let mapped: IpAddr = "::ffff:198.18.0.2".parse().unwrap();
        assert_eq!(addresses.name_for(mapped).as_deref(), Some("b.test"));
        for other in ["198.18.0.3", "198.18.0.0", "127.0.0.1", "2001:2::", "::1"] {
            assert_eq!(addresses.name_for(other.parse().unwrap()), None, "{other}");
        }
        for inside in [
            "198.18.0.0",
            "198.19.255.255",
            "2001:2::",
            "2001:2:0:ffff::1",
        ] {
            assert!(is_session_range(inside.parse().unwrap()), "{inside}");
        }
        for outside in ["198.17.255.255", "198.20.0.0", "2001:3::", "2001:1::1"] {
            assert!(!is_session_range(outside.parse().unwrap()), "{outside}");
        }
    }
}
