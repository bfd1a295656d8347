//! Classifies an IP address as public or as one of the ranges a sandboxed command must
//! not reach by accident (loopback, private, link-local, CGNAT, cloud metadata…).
//!
//! The bridge runs outside the sandbox, so `127.0.0.1` here is the host's own loopback and
//! `10.0.0.0/8` is the user's LAN: a name that resolves there is refused unless a CIDR rule
//! opens it on purpose. IPv6 forms that embed an IPv4 address (IPv4-mapped, NAT64 and 6to4)
//! are classified by the address they embed, so `64:ff9b::7f00:1` is loopback. Teredo and
//! the deprecated IPv4-compatible form are refused outright. Ranges follow the IANA
//! special-purpose registries (RFC 6890 and its updates), as smokescreen's classifier does.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

/// What kind of address this is. Everything but `Public` is refused unless opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IpClass {
    Public,
    Unspecified,
    Loopback,
    Private,
    LinkLocal,
    CloudMetadata,
    Cgnat,
    Multicast,
    Broadcast,
    Documentation,
    Benchmarking,
    Reserved,
    /// `2001::/32`: the client address inside is obfuscated and unverifiable.
    Teredo,
    /// A public address this machine holds itself (an interface's, or a local route's):
    /// a connection there reaches the host's own services, as loopback does. Not decided
    /// by `classify`, which is pure, but by `local::classify_here`.
    ThisMachine,
}

impl IpClass {
    pub fn is_public(self) -> bool {
        self == IpClass::Public
    }

    /// The words used in refusals and on stderr.
    pub fn describe(self) -> &'static str {
        match self {
            IpClass::Public => "public",
            IpClass::Unspecified => "unspecified",
            IpClass::Loopback => "loopback",
            IpClass::Private => "private",
            IpClass::LinkLocal => "link-local",
            IpClass::CloudMetadata => "cloud metadata",
            IpClass::Cgnat => "carrier-grade NAT",
            IpClass::Multicast => "multicast",
            IpClass::Broadcast => "broadcast",
            IpClass::Documentation => "documentation",
            IpClass::Benchmarking => "benchmarking",
            IpClass::Reserved => "reserved",
            IpClass::Teredo => "Teredo",
            IpClass::ThisMachine => "this machine's own",
        }
    }
}

/// Classifies one address by the special-purpose tables alone. Pure; no I/O: it cannot
/// know which public addresses are this machine's own, so it is not a check on its own.
/// Everything that judges an address to connect to asks [`crate::local_routes::classify_here`],
/// through the upstream pipeline; hence crate-private, and a disallowed method (clippy.toml)
/// anywhere else in the crate.
pub(crate) fn classify(ip: IpAddr) -> IpClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn classify_v4(ip: Ipv4Addr) -> IpClass {
    // Cloud instance metadata (AWS, GCP, Azure, OpenStack) sits inside link-local; name it.
    const METADATA: [u8; 4] = [169, 254, 169, 254];
    // Azure's WireServer: not link-local, but the same kind of SSRF target.
    const AZURE_WIRESERVER: [u8; 4] = [168, 63, 129, 16];
    let table: &[([u8; 4], u32, IpClass)] = &[
        (METADATA, 32, IpClass::CloudMetadata),
        (AZURE_WIRESERVER, 32, IpClass::CloudMetadata),
        ([0, 0, 0, 0], 32, IpClass::Unspecified),
        ([0, 0, 0, 0], 8, IpClass::Reserved),
        ([10, 0, 0, 0], 8, IpClass::Private),
        ([100, 64, 0, 0], 10, IpClass::Cgnat),
        ([127, 0, 0, 0], 8, IpClass::Loopback),
        ([169, 254, 0, 0], 16, IpClass::LinkLocal),
        ([172, 16, 0, 0], 12, IpClass::Private),
        ([192, 0, 0, 0], 24, IpClass::Reserved),
        ([192, 0, 2, 0], 24, IpClass::Documentation),
        ([192, 88, 99, 0], 24, IpClass::Reserved),
        ([192, 168, 0, 0], 16, IpClass::Private),
        ([198, 18, 0, 0], 15, IpClass::Benchmarking),
        ([198, 51, 100, 0], 24, IpClass::Documentation),
        ([203, 0, 113, 0], 24, IpClass::Documentation),
        ([224, 0, 0, 0], 4, IpClass::Multicast),
        ([255, 255, 255, 255], 32, IpClass::Broadcast),
        ([240, 0, 0, 0], 4, IpClass::Reserved),
    ];
    table
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map_or(IpClass::Public, |(_, _, class)| *class)
}

fn classify_v6(ip: Ipv6Addr) -> IpClass {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let seg = ip.segments();
    let bits = u128::from(ip);
    let in_v6 = |net: u128, prefix: u32| {
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        };
        bits & mask == net & mask
    };
    if ip.is_unspecified() {
        IpClass::Unspecified
    } else if ip.is_loopback() {
        IpClass::Loopback
    } else if in_v6(0, 96) {
        // Deprecated IPv4-compatible form (::a.b.c.d).
        IpClass::Reserved
    } else if let Some(v4) = embedded_ipv4(ip) {
        // NAT64 and 6to4: the gateway would dial the IPv4 address inside.
        classify_v4(v4)
    } else if in_v6(0x0064_ff9b_0001_u128 << 80, 48) {
        // Local-use NAT64 (RFC 8215): operator-defined layouts, so the IPv4 address inside
        // cannot be located reliably; never public.
        IpClass::Reserved
    } else if seg[0] == 0x2001 && seg[1] == 0 {
        IpClass::Teredo
    } else if seg[0] == 0x2001 && seg[1] == 0x0db8 || seg[0] == 0x3fff && seg[1] < 0x1000 {
        IpClass::Documentation
    } else if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254) {
        // AWS's IPv6 instance metadata endpoint fd00:ec2::254.
        IpClass::CloudMetadata
    } else if seg[0] & 0xfe00 == 0xfc00 {
        IpClass::Private
    } else if seg[0] & 0xffc0 == 0xfe80 {
        IpClass::LinkLocal
    } else if seg[0] & 0xffc0 == 0xfec0 {
        // Deprecated site-local: private in practice.
        IpClass::Private
    } else if seg[0] & 0xff00 == 0xff00 {
        IpClass::Multicast
    } else if in_v6(0x0100_u128 << 112, 64) || in_v6(0x2001_0002_u128 << 96, 48) {
        // Discard-only and benchmarking blocks.
        IpClass::Reserved
    } else if seg[0] & 0xe000 == 0x2000 {
        IpClass::Public
    } else {
        // Outside 2000::/3, nothing is allocated for global unicast.
        IpClass::Reserved
    }
}

/// The IPv4 address a NAT64 well-known-prefix (`64:ff9b::/96`) or 6to4 (`2002::/16`)
/// address stands for; IPv4-mapped addresses are folded earlier by `canonical_ip`.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let bits = u128::from(ip);
    if bits >> 32 == 0x0064_ff9b_u128 << 64 {
        return Some(Ipv4Addr::from(u32::try_from(bits & 0xffff_ffff).ok()?));
    }
    if seg[0] == 0x2002 {
        return Some(Ipv4Addr::from(u32::from(seg[1]) << 16 | u32::from(seg[2])));
    }
    None
}

#[cfg(test)]
// The table's own tests.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn classifies_table() {
        let cases = [
            ("93.184.216.34", IpClass::Public),
            ("1.1.1.1", IpClass::Public),
            ("0.0.0.0", IpClass::Unspecified),
            ("0.1.2.3", IpClass::Reserved),
            ("127.0.0.1", IpClass::Loopback),
            ("127.255.255.254", IpClass::Loopback),
            ("10.1.2.3", IpClass::Private),
            ("172.16.0.1", IpClass::Private),
            ("172.31.255.255", IpClass::Private),
            ("172.32.0.1", IpClass::Public),
            ("192.168.1.1", IpClass::Private),
            ("100.64.0.1", IpClass::Cgnat),
            ("100.127.255.255", IpClass::Cgnat),
            ("100.128.0.1", IpClass::Public),
            ("169.254.1.1", IpClass::LinkLocal),
            ("169.254.169.254", IpClass::CloudMetadata),
            ("192.0.2.1", IpClass::Documentation),
            ("198.51.100.1", IpClass::Documentation),
            ("203.0.113.9", IpClass::Documentation),
            ("198.18.0.1", IpClass::Benchmarking),
            ("224.0.0.1", IpClass::Multicast),
            ("239.1.1.1", IpClass::Multicast),
            ("240.0.0.1", IpClass::Reserved),
            ("255.255.255.255", IpClass::Broadcast),
            ("::", IpClass::Unspecified),
            ("::1", IpClass::Loopback),
            ("::ffff:127.0.0.1", IpClass::Loopback),
            ("::ffff:8.8.8.8", IpClass::Public),
            ("::127.0.0.1", IpClass::Reserved),
            ("64:ff9b::7f00:1", IpClass::Loopback),
            ("64:ff9b::a9fe:a9fe", IpClass::CloudMetadata),
            ("64:ff9b::808:808", IpClass::Public),
            ("64:ff9b:1::a00:1", IpClass::Reserved),
            ("64:ff9b:1::a:0:100:0", IpClass::Reserved),
            ("168.63.129.16", IpClass::CloudMetadata),
            ("2002:c0a8:0101::1", IpClass::Private),
            ("2002:0808:0808::1", IpClass::Public),
            ("2001::1", IpClass::Teredo),
            ("2001:db8::1", IpClass::Documentation),
            ("fd00:ec2::254", IpClass::CloudMetadata),
            ("fd12:3456::1", IpClass::Private),
            ("fc00::1", IpClass::Private),
            ("fe80::1", IpClass::LinkLocal),
            ("fec0::1", IpClass::Private),
            ("ff02::1", IpClass::Multicast),
            ("100::1", IpClass::Reserved),
            ("2606:4700::1111", IpClass::Public),
            ("4000::1", IpClass::Reserved),
        ];
        for (addr, want) in cases {
            assert_eq!(classify(addr.parse().unwrap()), want, "{addr}");
        }
    }
}
