//! A destination named by a client, normalised once so that every spelling of the same
//! host compares equal before any policy sees it.
//!
//! Names: lowercased, one trailing dot dropped, IDNA mapped to punycode (UTS #46), then
//! checked against the DNS hostname shape (labels of `a-z 0-9 - _`, 1–63 bytes, 253 total).
//! IP literals are recognised in every spelling a resolver would accept: dotted quad,
//! IPv6 (bracketed or not), IPv4-mapped IPv6 (folded to IPv4), and the inet_aton(3) forms
//! (`127.1`, `0x7f.0.0.1`, `017700000001`, `2130706433`). Treating those as names would let
//! `0x7f.1` slip past an IP rule and reach a resolver that reads it as 127.0.0.1.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest name DNS can carry (RFC 1035 §2.3.4), in bytes.
const MAX_NAME_BYTES: usize = 253;
/// Longest DNS label, in bytes.
const MAX_LABEL_BYTES: usize = 63;

/// A host as the policy sees it: a normalised name or a canonical IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

/// Where a client asked to go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

/// Why a host or authority could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("empty host")]
    Empty,
    #[error("host name longer than {MAX_NAME_BYTES} bytes")]
    TooLong,
    #[error("invalid host name {0:?}")]
    BadName(String),
    #[error("invalid IP address {0:?}")]
    BadIp(String),
    #[error("missing port in {0:?}")]
    MissingPort(String),
    #[error("invalid port in {0:?}")]
    BadPort(String),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            _ => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

impl Target {
    /// Parses an RFC 9110 authority-form target (`host:port`, `[v6]:port`), port required.
    /// Nothing else is accepted: no scheme, no path, no userinfo.
    pub fn parse_authority(authority: &str) -> Result<Target, TargetError> {
        let (host, port) = split_host_port(authority)?;
        let port = port.ok_or_else(|| TargetError::MissingPort(authority.to_owned()))?;
        Ok(Target {
            host: normalise_host(host)?,
            port: parse_port(port, authority)?,
        })
    }

    /// Parses `host[:port]`, using `default_port` when no port is given (absolute-form URIs).
    pub fn parse_with_default_port(
        authority: &str,
        default_port: u16,
    ) -> Result<Target, TargetError> {
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            Some(port) => parse_port(port, authority)?,
            None => default_port,
        };
        Ok(Target {
            host: normalise_host(host)?,
            port,
        })
    }
}

/// Splits `host[:port]` / `[v6][:port]`. The host keeps its brackets off.
pub(crate) fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), TargetError> {
    if authority.is_empty() {
        return Err(TargetError::Empty);
    }
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| TargetError::BadIp(authority.to_owned()))?;
        // Brackets hold an IPv6 address and nothing else (RFC 3986 §3.2.2): `[name]` is
        // not a spelling of `name`.
        if !host.contains(':') {
            return Err(TargetError::BadIp(authority.to_owned()));
        }
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(TargetError::BadPort(authority.to_owned())),
            },
        };
    }
    match authority.matches(':').count() {
        0 => Ok((authority, None)),
        1 => {
            let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
            Ok((host, Some(port)))
        }
        // A bare IPv6 address has no room for a port.
        _ => Ok((authority, None)),
    }
}

fn parse_port(text: &str, context: &str) -> Result<u16, TargetError> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TargetError::BadPort(context.to_owned()));
    }
    match text.parse::<u16>() {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(TargetError::BadPort(context.to_owned())),
    }
}

/// Normalises a host (without brackets or port) into its one canonical form.
pub fn normalise_host(raw: &str) -> Result<Host, TargetError> {
    if raw.is_empty() {
        return Err(TargetError::Empty);
    }
    if raw.len() > 4 * MAX_NAME_BYTES {
        return Err(TargetError::TooLong);
    }
    if raw.contains(':') {
        let ip: Ipv6Addr = raw
            .parse()
            .map_err(|_| TargetError::BadIp(raw.to_owned()))?;
        return Ok(Host::Ip(canonical_ip(IpAddr::V6(ip))));
    }
    let lowered = raw.to_ascii_lowercase();
    let without_dot = lowered.strip_suffix('.').unwrap_or(&lowered);
    if let Some(ip) = parse_ipv4_any_spelling(without_dot)? {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    let ascii = idna::domain_to_ascii(without_dot).map_err(|_| TargetError::BadName(raw.into()))?;
    // IDNA mapping can itself produce a dotted-quad spelling (full-width digits).
    if let Some(ip) = parse_ipv4_any_spelling(&ascii)? {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    validate_name(&ascii, raw)?;
    Ok(Host::Name(ascii))
}

/// Folds IPv4-mapped IPv6 (`::ffff:a.b.c.d`) to IPv4, so one address has one spelling.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn validate_name(name: &str, raw: &str) -> Result<(), TargetError> {
    if name.is_empty() {
        return Err(TargetError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(TargetError::TooLong);
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= MAX_LABEL_BYTES
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    };
    if name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(TargetError::BadName(raw.to_owned()))
    }
}

/// Reads a host the way inet_aton(3) and the WHATWG URL parser do: if the last label is a
/// number, the whole host is an IPv4 address in one of the legacy spellings, and an
/// unparseable one is an error rather than a name. Returns `None` for ordinary names.
fn parse_ipv4_any_spelling(host: &str) -> Result<Option<Ipv4Addr>, TargetError> {
    let last = host.rsplit('.').next().unwrap_or(host);
    if last.is_empty() || parse_ipv4_part(last).is_none() {
        return Ok(None);
    }
    let bad = || TargetError::BadIp(host.to_owned());
    let parts: Vec<u64> = host
        .split('.')
        .map(parse_ipv4_part)
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    if parts.len() > 4 {
        return Err(bad());
    }
    let (init, tail) = parts.split_at(parts.len() - 1);
    if init.iter().any(|&p| p > 255) {
        return Err(bad());
    }
    let tail_bits = 8 * (5 - parts.len());
    let tail = tail[0];
    if tail >= 1u64 << tail_bits {
        return Err(bad());
    }
    let mut value = tail;
    for (i, &part) in init.iter().enumerate() {
        value |= part << (24 - 8 * i);
    }
    let value = u32::try_from(value).map_err(|_| bad())?;
    Ok(Some(Ipv4Addr::from(value)))
}

/// One inet_aton part: decimal, `0x` hex or leading-zero octal.
fn parse_ipv4_part(part: &str) -> Option<u64> {
    if part.is_empty() || part.len() > 12 {
        return None;
    }
    // from_str_radix would also take a leading '+'; no resolver does, so check digits.
    if let Some(hex) = part.strip_prefix("0x") {
        if hex.is_empty() {
            return Some(0);
        }
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        return u64::from_str_radix(hex, 16).ok();
    }
    if part.len() > 1 && part.starts_with('0') {
        if !part.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return None;
        }
        return u64::from_str_radix(&part[1..], 8).ok();
    }
    if part.bytes().all(|b| b.is_ascii_digit()) {
        return part.parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Host {
        Host::Name(s.to_owned())
    }
    fn ip(s: &str) -> Host {
        Host::Ip(s.parse().unwrap())
    }

    #[test]
    fn normalises_names_and_ips() {
        let cases = [
            ("registry.test", name("registry.test")),
            ("Registry.TEST.", name("registry.test")),
            ("bücher.test", name("xn--bcher-kva.test")),
            ("XN--BCHER-KVA.test", name("xn--bcher-kva.test")),
            ("_srv.host-1.test", name("_srv.host-1.test")),
            ("127.0.0.1", ip("127.0.0.1")),
            ("127.1", ip("127.0.0.1")),
            ("0x7f.0.0.1", ip("127.0.0.1")),
            ("0177.0.0.1", ip("127.0.0.1")),
            ("2130706433", ip("127.0.0.1")),
            ("127.0.0.1.", ip("127.0.0.1")),
            ("::1", ip("::1")),
            ("::ffff:127.0.0.1", ip("127.0.0.1")),
            ("::FFFF:7f00:1", ip("127.0.0.1")),
            ("FD00::1", ip("fd00::1")),
        ];
        for (input, want) in cases {
            assert_eq!(normalise_host(input), Ok(want), "input {input:?}");
        }
    }

    #[test]
    fn refuses_junk_hosts() {
        for bad in [
            "",
            "a..b",
            "-a.test",
            "a b.test",
            "a/b",
            "*.test",
            "256.0.0.1",
            "1.2.3.4.5",
            "1.2.3.0x100",
            "0x+7f.1",
            "127.0.0.+1",
            "::1::2",
            "a@b.test",
            ".",
        ] {
            assert!(normalise_host(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn parses_authority_form_only_with_port() {
        let t = Target::parse_authority("Registry.Test:443").unwrap();
        assert_eq!(t.host, name("registry.test"));
        assert_eq!(t.port, 443);
        let t = Target::parse_authority("[::1]:8443").unwrap();
        assert_eq!(t.to_string(), "[::1]:8443");
        for bad in [
            "registry.test",
            "registry.test:",
            "registry.test:0",
            "registry.test:65536",
            "registry.test:+80",
            "[::1]",
            "[::1]x:80",
            "::1",
            "http://x.test:80",
            "[registry.test]:80",
            "[127.0.0.1]:80",
            "[]:80",
        ] {
            assert!(Target::parse_authority(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn default_port_applies_only_when_absent() {
        let t = Target::parse_with_default_port("a.test", 80).unwrap();
        assert_eq!(t.port, 80);
        let t = Target::parse_with_default_port("a.test:8080", 80).unwrap();
        assert_eq!(t.port, 8080);
    }
}
