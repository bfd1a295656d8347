//! One allowlist rule, parsed from its text: `HOST`, `*.SUFFIX`, `IP`, `CIDR`, each with an
//! optional `:PORTS` (`443`, `80,443`, `8000-8100`, `*`). IPv6 takes brackets to carry a
//! port: `[::1]:8443`, `[fd00::/8]:443`.

use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;

use ipnet::IpNet;

use crate::ipclass::embedded_ipv4;
use crate::target::{canonical_ip, normalise_host, split_host_port, Host, Target};

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Deny,
}

/// Which hosts a rule matches. Names are boxed, not `String`s: an allowlist of 10^6 rules
/// keeps one each, and a box carries no spare capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatcher {
    /// One normalised name.
    Exact(Box<str>),
    /// Strict subdomains of a normalised name (`*.example.test`: not the apex).
    Subdomains(Box<str>),
    /// IP literals inside a network; also opens resolved addresses inside it.
    Net(IpNet),
}

impl HostMatcher {
    /// Whether it matches addresses (an IP/CIDR rule), not names.
    pub fn is_address(&self) -> bool {
        matches!(self, HostMatcher::Net(_))
    }
}

/// Which ports a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    Any,
    List(PortList),
}

/// A rule's port ranges, in the order written. Most rules name one port or none (80 and
/// 443), so up to two ranges are kept inline: an allowlist of 10^6 rules then pays no
/// allocation for its ports. Written here rather than taken from `smallvec`, whose vector
/// has no spare value for `Ports::Any` to live in and would make every rule 8 bytes larger.
#[derive(Clone, PartialEq, Eq)]
pub struct PortList(PortRanges);

#[derive(Clone, PartialEq, Eq)]
enum PortRanges {
    /// `len` ranges; the unused one is `(0, 0)`, so that equal lists compare equal.
    Inline {
        len: u8,
        ranges: [(u16, u16); 2],
    },
    Heap(Box<[(u16, u16)]>),
}

impl PortList {
    pub fn new(ranges: &[RangeInclusive<u16>]) -> PortList {
        let pair = |r: &RangeInclusive<u16>| (*r.start(), *r.end());
        let inline = |len, ranges| PortList(PortRanges::Inline { len, ranges });
        match ranges {
            [] => inline(0, [(0, 0); 2]),
            [one] => inline(1, [pair(one), (0, 0)]),
            [one, two] => inline(2, [pair(one), pair(two)]),
            more => PortList(PortRanges::Heap(more.iter().map(pair).collect())),
        }
    }

    fn pairs(&self) -> &[(u16, u16)] {
        match &self.0 {
            PortRanges::Inline { len, ranges } => &ranges[..usize::from(*len)],
            PortRanges::Heap(ranges) => ranges,
        }
    }

    /// The ranges, in the order written.
    pub fn iter(&self) -> impl Iterator<Item = RangeInclusive<u16>> + '_ {
        self.pairs().iter().map(|&(lo, hi)| lo..=hi)
    }

    pub fn contains(&self, port: u16) -> bool {
        self.pairs()
            .iter()
            .any(|&(lo, hi)| lo <= port && port <= hi)
    }
}

// As a list of ranges, the way the policy's canonical text has always spelled ports.
impl fmt::Debug for PortList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Ports an allow rule covers when it names none: the web's two.
const DEFAULT_ALLOW_PORTS: [u16; 2] = [80, 443];

/// A parsed rule, without its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub hosts: HostMatcher,
    pub ports: Ports,
}

impl Ports {
    pub fn contains(&self, port: u16) -> bool {
        match self {
            Ports::Any => true,
            Ports::List(ranges) => ranges.contains(port),
        }
    }
}

impl HostMatcher {
    pub fn matches_host(&self, host: &Host) -> bool {
        match (self, host) {
            (HostMatcher::Exact(want), Host::Name(name)) => **want == **name,
            (HostMatcher::Subdomains(suffix), Host::Name(name)) => name
                .strip_suffix(&**suffix)
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostMatcher::Net(_), Host::Ip(ip)) => self.matches_ip(*ip),
            _ => false,
        }
    }

    /// Whether an IP/CIDR rule covers `ip`, in any of its spellings: an IPv6 address that
    /// embeds an IPv4 address (mapped, NAT64, 6to4) is also matched as that IPv4 address,
    /// so denying `93.184.216.0/24` also denies `64:ff9b::5db8:d822`.
    pub fn matches_ip(&self, ip: IpAddr) -> bool {
        let HostMatcher::Net(net) = self else {
            return false;
        };
        let ip = canonical_ip(ip);
        if net.contains(&ip) {
            return true;
        }
        match ip {
            IpAddr::V6(v6) => embedded_ipv4(v6).is_some_and(|v4| net.contains(&IpAddr::V4(v4))),
            IpAddr::V4(_) => false,
        }
    }

    /// Whether an allow rule opens `ip`, a non-public address: only when it covers the
    /// address a connection to `ip` really ends at. For a NAT64 or 6to4 address that is the
    /// IPv4 address inside, which its class comes from too; a rule for the prefix
    /// (`64:ff9b::/96`) reaches public addresses through a gateway, and must not open every
    /// private one behind it (`64:ff9b::7f00:1` is the gateway's loopback). Where a Teredo
    /// or local-use NAT64 address ends cannot be read from it: only a rule for that one
    /// address opens it, never one for a range.
    pub fn opens_ip(&self, ip: IpAddr) -> bool {
        let HostMatcher::Net(net) = self else {
            return false;
        };
        match canonical_ip(ip) {
            IpAddr::V6(v6) => match embedded_ipv4(v6) {
                Some(v4) => net.contains(&IpAddr::V4(v4)),
                None if translated_elsewhere(v6) => net.prefix_len() == 128 && net.addr() == v6,
                None => net.contains(&IpAddr::V6(v6)),
            },
            v4 => net.contains(&v4),
        }
    }
}

/// Teredo (`2001::/32`) and local-use NAT64 (`64:ff9b:1::/48`): addresses a gateway
/// turns into IPv4 ones by a layout the address does not say.
fn translated_elsewhere(ip: std::net::Ipv6Addr) -> bool {
    let seg = ip.segments();
    (seg[0] == 0x2001 && seg[1] == 0) || (seg[0] == 0x0064 && seg[1] == 0xff9b && seg[2] == 1)
}

impl RuleSpec {
    pub fn matches(&self, target: &Target) -> bool {
        self.ports.contains(target.port) && self.hosts.matches_host(&target.host)
    }

    /// Parses a rule's text. With no port, allow rules cover 80 and 443; deny rules cover
    /// every port, so that denying a host can never leave one of its ports open.
    pub fn parse(text: &str, action: Action) -> Result<RuleSpec, String> {
        let (hosts, ports) = RuleSpec::parse_parts(text)?;
        let ports = match ports {
            Some(ports) => ports,
            None if action == Action::Deny => Ports::Any,
            None => Ports::List(PortList::new(&DEFAULT_ALLOW_PORTS.map(|p| p..=p))),
        };
        Ok(RuleSpec { hosts, ports })
    }

    /// A rule's hosts, and its ports if it names any (what a missing port means is the
    /// caller's to say).
    pub fn parse_parts(text: &str) -> Result<(HostMatcher, Option<Ports>), String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty rule".into());
        }
        let (host, ports) = split_rule(text)?;
        let ports = ports.map(parse_ports).transpose()?;
        Ok((parse_host_matcher(host)?, ports))
    }
}

fn split_rule(text: &str) -> Result<(&str, Option<&str>), String> {
    // A bare IPv6 CIDR (`fd00::/8`) has colons but no port.
    if !text.starts_with('[') && text.matches(':').count() > 1 {
        return Ok((text, None));
    }
    split_host_port(text).map_err(|e| e.to_string())
}

fn parse_host_matcher(host: &str) -> Result<HostMatcher, String> {
    if let Some((addr, prefix)) = host.split_once('/') {
        let addr = match normalise_host(addr) {
            Ok(Host::Ip(ip)) => ip,
            _ => return Err(format!("invalid network address {addr:?}")),
        };
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("invalid prefix length {prefix:?}"))?;
        if prefix == 0 {
            return Err(format!(
                "{host:?} matches every address, private ones included; list the ranges you mean"
            ));
        }
        let net = IpNet::new(addr, prefix).map_err(|_| format!("prefix /{prefix} too long"))?;
        return Ok(HostMatcher::Net(net.trunc()));
    }
    if let Some(suffix) = host.strip_prefix("*.") {
        return match normalise_host(suffix) {
            Ok(Host::Name(name)) => Ok(HostMatcher::Subdomains(name.into_boxed_str())),
            Ok(Host::Ip(_)) => Err(format!("wildcard over an IP address {host:?}")),
            Err(e) => Err(e.to_string()),
        };
    }
    if host.contains('*') {
        return Err(format!(
            "{host:?}: a wildcard may only be a leading \"*.\" (subdomains)"
        ));
    }
    match normalise_host(host).map_err(|e| e.to_string())? {
        Host::Name(name) => Ok(HostMatcher::Exact(name.into_boxed_str())),
        Host::Ip(ip) => Ok(HostMatcher::Net(IpNet::from(ip))),
    }
}

fn parse_ports(text: &str) -> Result<Ports, String> {
    if text == "*" {
        return Ok(Ports::Any);
    }
    let parse_one = |p: &str| -> Result<u16, String> {
        let digits = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
        match p.parse::<u16>() {
            Ok(port) if digits && port != 0 => Ok(port),
            _ => Err(format!("invalid port {p:?}")),
        }
    };
    let mut ranges = Vec::new();
    for item in text.split(',') {
        let range = match item.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (parse_one(lo)?, parse_one(hi)?);
                if lo > hi {
                    return Err(format!("empty port range {item:?}"));
                }
                lo..=hi
            }
            None => {
                let port = parse_one(item)?;
                port..=port
            }
        };
        ranges.push(range);
    }
    Ok(Ports::List(PortList::new(&ranges)))
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> Target {
        Target::parse_authority(s).unwrap()
    }

    #[test]
    fn rules_match_as_documented() {
        // (rule, action, target, matches)
        let cases = [
            ("registry.test", Action::Allow, "registry.test:443", true),
            ("registry.test", Action::Allow, "registry.test:80", true),
            ("registry.test", Action::Allow, "registry.test:8443", false),
            ("registry.test", Action::Deny, "registry.test:8443", true),
            ("REGISTRY.test.", Action::Allow, "registry.test:443", true),
            ("registry.test", Action::Allow, "a.registry.test:443", false),
            ("*.cdn.test", Action::Allow, "a.cdn.test:443", true),
            ("*.cdn.test", Action::Allow, "a.b.cdn.test:443", true),
            ("*.cdn.test", Action::Allow, "cdn.test:443", false),
            ("*.cdn.test", Action::Allow, "xcdn.test:443", false),
            ("a.test:8080", Action::Allow, "a.test:8080", true),
            ("a.test:8080", Action::Allow, "a.test:443", false),
            ("a.test:80,8000-8100", Action::Allow, "a.test:8050", true),
            ("a.test:80,8000-8100", Action::Allow, "a.test:8101", false),
            ("a.test:*", Action::Allow, "a.test:1", true),
            ("10.0.0.0/8:5432", Action::Allow, "10.9.8.7:5432", true),
            ("10.0.0.0/8:5432", Action::Allow, "11.0.0.1:5432", false),
            ("127.0.0.1:*", Action::Allow, "127.0.0.1:9", true),
            ("127.0.0.1:*", Action::Allow, "[::ffff:127.0.0.1]:9", true),
            ("127.1", Action::Deny, "127.0.0.1:9", true),
            ("[::1]:8443", Action::Allow, "[::1]:8443", true),
            ("fd00::/8", Action::Allow, "[fd12::1]:443", true),
            ("[fd00::/8]:22", Action::Allow, "[fd12::1]:22", true),
            ("1.2.3.4", Action::Allow, "one.test:443", false),
            (
                "93.184.216.0/24",
                Action::Deny,
                "[64:ff9b::5db8:d822]:443",
                true,
            ),
            (
                "93.184.216.0/24",
                Action::Deny,
                "[2002:5db8:d822::1]:443",
                true,
            ),
            ("93.184.216.0/24", Action::Deny, "[2001:db8::1]:443", false),
            ("one.test", Action::Allow, "1.2.3.4:443", false),
        ];
        for (rule, action, t, want) in cases {
            let spec = RuleSpec::parse(rule, action).unwrap();
            assert_eq!(spec.matches(&target(t)), want, "{rule} vs {t}");
        }
    }

    #[test]
    fn port_lists_of_any_length_keep_their_ranges_in_order() {
        for text in ["443", "80,443", "80,443,8000-8100", "1-2,3,4-5,6"] {
            let Ok(RuleSpec {
                ports: Ports::List(list),
                ..
            }) = RuleSpec::parse(&format!("a.test:{text}"), Action::Allow)
            else {
                panic!("{text} did not parse to a list");
            };
            let written: Vec<String> = list
                .iter()
                .map(|r| match r.start() == r.end() {
                    true => r.start().to_string(),
                    false => format!("{}-{}", r.start(), r.end()),
                })
                .collect();
            assert_eq!(written.join(","), text);
            for port in [1u16, 3, 5, 80, 443, 8050, 8101] {
                assert_eq!(
                    list.contains(port),
                    list.iter().any(|r| r.contains(&port)),
                    "{text} {port}"
                );
            }
            // The policy's canonical text (and so its hash) spells ports as a list of
            // ranges, as it did when they were a vector.
            let as_vector: Vec<_> = list.iter().collect();
            assert_eq!(format!("{list:?}"), format!("{as_vector:?}"));
        }
        let default = RuleSpec::parse("a.test", Action::Allow).unwrap();
        assert_eq!(format!("{:?}", default.ports), "List([80..=80, 443..=443])");
    }

    #[test]
    fn refuses_bad_rules() {
        for bad in [
            "",
            "a.test:0",
            "a.test:70000",
            "a.test:9-1",
            "a.test:x",
            "a.test:+80",
            "a.test: 80",
            "a.*.test",
            "*test",
            "*.1.2.3.4",
            "0.0.0.0/0",
            "::/0",
            "10.0.0.0/33",
            "host.test/8",
            "a b",
        ] {
            assert!(
                RuleSpec::parse(bad, Action::Allow).is_err(),
                "accepted {bad:?}"
            );
        }
    }
}
