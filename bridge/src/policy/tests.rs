// The pure rules are tested against the class table itself (clippy.toml disallows it
// elsewhere).
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;
use crate::ipclass::classify;
use crate::target::normalise_host;

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    let mut p = Policy::deny_all();
    for rule in allow {
        p.add_rule(Action::Allow, rule, "--allow").unwrap();
    }
    for rule in deny {
        p.add_rule(Action::Deny, rule, "--deny").unwrap();
    }
    p
}

fn target(s: &str) -> Target {
    Target::parse_authority(s).unwrap()
}

struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, body: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!("netbox-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        TempFile(path)
    }
}

#[test]
fn decide_table() {
    let p = policy(
        &["registry.test", "*.cdn.test", "10.1.0.0/16:5432"],
        &["bad.cdn.test"],
    );
    let cases = [
        ("registry.test:443", Verdict::Allow, Reason::AllowedByRule),
        ("registry.test:22", Verdict::Deny, Reason::NotAllowed),
        ("a.cdn.test:443", Verdict::Allow, Reason::AllowedByRule),
        ("bad.cdn.test:443", Verdict::Deny, Reason::DeniedByRule),
        ("cdn.test:443", Verdict::Deny, Reason::NotAllowed),
        ("10.1.2.3:5432", Verdict::Allow, Reason::AllowedByRule),
        ("other.test:443", Verdict::Deny, Reason::NotAllowed),
    ];
    for (t, verdict, reason) in cases {
        let d = p.decide(&target(t));
        assert_eq!((d.verdict, d.reason), (verdict, reason), "{t}");
    }
    let d = p.decide(&target("bad.cdn.test:443"));
    assert_eq!(&*d.rule.unwrap().text, "bad.cdn.test");
}

#[test]
fn flag_rules_are_numbered_per_flag() {
    let p = policy(&["a.test", "b.test"], &["c.test"]);
    let rule = |t: &str| p.decide(&target(t)).rule.unwrap();
    assert_eq!(
        (&*rule("b.test:443").file, rule("b.test:443").line),
        ("--allow", 2)
    );
    assert_eq!(
        (&*rule("c.test:443").file, rule("c.test:443").line),
        ("--deny", 1)
    );
}

#[test]
fn admit_refuses_non_public_unless_opened() {
    let p = policy(&["registry.test", "127.0.0.1:8080"], &["8.8.4.0/24"]);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let d = p.admit(ip("127.0.0.1"), 443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Deny, Reason::NonPublicAddress)
    );
    assert_eq!(d.class, Some(IpClass::Loopback));
    let d = p.admit(ip("127.0.0.1"), 8080);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::OpenedByRule)
    );
    let d = p.admit(ip("::ffff:127.0.0.1"), 8080);
    assert!(d.is_allow());
    let d = p.admit(ip("93.184.216.34"), 443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::PublicAddress)
    );
    let d = p.admit(ip("8.8.4.4"), 443);
    assert_eq!((d.verdict, d.reason), (Verdict::Deny, Reason::DeniedByRule));
    let d = p.admit(ip("169.254.169.254"), 80);
    assert_eq!(d.class, Some(IpClass::CloudMetadata));
    assert!(!d.is_allow());
}

/// A rule for the NAT64 or 6to4 prefix opens the public addresses behind the gateway, not
/// the private ones: those are opened by a rule for the IPv4 address inside (found by the
/// bypass battery, where `[64:ff9b::/96]` let `64:ff9b::7f00:1` be dialed).
#[test]
fn a_translation_prefix_rule_does_not_open_the_private_addresses_inside() {
    let p = policy(
        &["[64:ff9b::/96]:443", "[2002::/16]:443", "10.0.0.0/8:443"],
        &[],
    );
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    for refused in [
        "64:ff9b::7f00:1",
        "2002:7f00:1::1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b::c0a8:1",
    ] {
        let d = p.admit(ip(refused), 443);
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::Deny, Reason::NonPublicAddress),
            "{refused}"
        );
    }
    // Controls: the IPv4 rule opens its addresses in every spelling, and a public address
    // behind the gateway needs no opening.
    for opened in [
        "10.1.2.3",
        "64:ff9b::a01:203",
        "2002:a01:203::1",
        "::ffff:10.1.2.3",
    ] {
        let d = p.admit(ip(opened), 443);
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::Allow, Reason::OpenedByRule),
            "{opened}"
        );
    }
    let d = p.admit(ip("64:ff9b::808:808"), 443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::PublicAddress)
    );
}

/// 0.0.0.0 and :: reach this machine's loopback; Teredo and local-use NAT64 addresses end
/// where the address does not say. No range opens any of them (found by review).
#[test]
fn unspecified_and_opaque_translations_are_not_opened_by_a_range() {
    let p = policy(
        &[
            "0.0.0.0/1:443",
            "[::/1]:443",
            "[2001::/16]:443",
            "[64:ff9b:1::/48]:443",
            "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:443",
        ],
        &["127.0.0.0/8", "[::1]"],
    );
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    for refused in [
        "0.0.0.0",
        "::",
        "::ffff:0.0.0.0",
        "2001:0:1::1",
        "64:ff9b:1::a00:1",
    ] {
        let d = p.admit(ip(refused), 443);
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::Deny, Reason::NonPublicAddress),
            "{refused}"
        );
    }
    // Control: the one Teredo address a rule names exactly is opened.
    let d = p.admit(ip("2001:0:4136:e378:8000:63bf:3fff:fdd2"), 443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::OpenedByRule)
    );
}

/// A flag rule's "line" is its place among the rules the same flag gave, however the
/// flags interleave.
#[test]
fn flag_rules_are_numbered_by_flag() {
    let mut p = Policy::deny_all();
    for (action, rule, flag) in [
        (Action::Allow, "a.test", "--allow"),
        (Action::Deny, "b.test", "--deny"),
        (Action::Allow, "c.test", "--allow"),
        (Action::Allow, "d.test", "--allow-tool pip (its index)"),
        (Action::Deny, "e.test", "--deny"),
        (Action::Allow, "f.test", "--allow"),
    ] {
        p.add_rule(action, rule, flag).unwrap();
    }
    p.add_private_rule("g.test", "--allow").unwrap();
    let numbered = |host: &str| {
        let rule = p.decide(&target(&format!("{host}:443"))).rule.unwrap();
        (rule.file.to_string(), rule.line)
    };
    assert_eq!(numbered("a.test"), ("--allow".to_owned(), 1));
    assert_eq!(numbered("c.test"), ("--allow".to_owned(), 2));
    assert_eq!(numbered("f.test"), ("--allow".to_owned(), 3));
    assert_eq!(numbered("g.test"), ("--allow".to_owned(), 4));
    assert_eq!(numbered("e.test"), ("--deny".to_owned(), 2));
    assert_eq!(numbered("d.test").1, 1);
}

#[test]
fn loads_files_with_lines_includes_and_hosts() {
    let _base = TempFile::new("base.toml", "allow = [\n  \"base.test\",\n]\n");
    let main = TempFile::new(
        "main.toml",
        "include = [\"base.toml\"]\n# comment\nallow = [\"registry.test:8443\"]\ndeny = [\n\n  \"evil.test\"]\n[hosts]\n\"Registry.Test\" = \"127.0.0.1\"\n\"two.test\" = [\"::1\", \"127.0.0.2\"]\n",
    );
    let p = Policy::load(std::slice::from_ref(&main.0)).unwrap();
    let d = p.decide(&target("base.test:443"));
    assert_eq!(d.rule.as_ref().unwrap().line, 2);
    assert!(d.rule.unwrap().file.ends_with("base.toml"));
    let d = p.decide(&target("registry.test:8443"));
    assert_eq!(d.rule.unwrap().line, 3);
    let d = p.decide(&target("evil.test:1"));
    assert_eq!(d.rule.unwrap().line, 6);
    let pinned = p.pinned(&Host::Name("registry.test".into())).unwrap();
    assert_eq!(pinned, &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    assert_eq!(p.pinned(&Host::Name("two.test".into())).unwrap().len(), 2);
    assert_eq!(p.files().len(), 2);
}

#[test]
fn invalid_files_name_file_and_line() {
    let cases = [
        (
            "bad-rule.toml",
            "allow = [\n\"ok.test\",\n\"a.*.test\"]\n",
            3,
            "wildcard",
        ),
        (
            "bad-key.toml",
            "allow = []\nalow = [\"x.test\"]\n",
            2,
            "unknown field",
        ),
        (
            "bad-toml.toml",
            "allow = [\n\"x.test\"\n",
            2,
            "unclosed array",
        ),
        (
            "bad-host.toml",
            "[hosts]\n\"a.test\" = \"not-an-ip\"\n",
            2,
            "not an IP",
        ),
        (
            "bad-port.toml",
            "\n\ndeny = [\"a.test:0\"]",
            3,
            "invalid port",
        ),
        (
            "bad-incl.toml",
            "include = [\"missing.toml\"]",
            1,
            "missing.toml",
        ),
        ("loop.toml", "include = [\"loop.toml\"]", 1, "loops"),
        (
            "bad-bracket.toml",
            "[hosts]\n\"a.test\" = \"[::1\"\n",
            2,
            "not an IP",
        ),
        (
            "twice.toml",
            "include = [\"pin-a.toml\"]\n[hosts]\n\"a.test\" = \"::1\"\n",
            3,
            "pinned twice",
        ),
    ];
    let _pin = TempFile::new("pin-a.toml", "[hosts]\n\"a.test\" = \"127.0.0.1\"\n");
    for (name, body, line, needle) in cases {
        let f = TempFile::new(name, body);
        let err = Policy::load(std::slice::from_ref(&f.0)).unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("{name}:{line}: ")) && shown.contains(needle),
            "{name}: {shown}"
        );
    }
    let err = Policy::load(&["/nonexistent/netbox.toml".into()]).unwrap_err();
    assert!(err
        .to_string()
        .contains("/nonexistent/netbox.toml: cannot read"));
}

/// Hostname-shaped strings, with the odd capital and trailing dot.
fn host_strategy() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9]([a-zA-Z0-9-]{0,8}[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,6}[a-zA-Z0-9])?){0,3}\\.?"
}

/// Spellings a client might use for `name`.
fn respell(name: &str, upper: &[bool], trailing_dot: bool) -> String {
    let mut s: String = name
        .chars()
        .zip(upper.iter().cycle())
        .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
        .collect();
    if trailing_dot {
        s.push('.');
    }
    s
}

/// Spellings a client might use for an IPv4 address.
fn ipv4_spellings(ip: Ipv4Addr) -> Vec<String> {
    let [a, b, c, d] = ip.octets();
    let n = u32::from(ip);
    vec![
        ip.to_string(),
        format!("{n}"),
        format!("0x{n:x}"),
        format!("0{n:o}"),
        format!("0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}"),
        format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
        format!("{a}.{}", n & 0x00ff_ffff),
        format!("{a}.{b}.{}", n & 0xffff),
        format!("::ffff:{ip}"),
        format!("{ip}."),
    ]
}

proptest! {
    #[test]
    fn normalisation_is_idempotent(raw in host_strategy()) {
        if let Ok(once) = normalise_host(&raw) {
            let again = normalise_host(&once.to_string());
            prop_assert_eq!(again, Ok(once));
        }
    }

    #[test]
    fn deny_beats_allow(host in host_strategy(), port in 1u16..) {
        if let Ok(Host::Name(name)) = normalise_host(&host) {
            let exact = format!("{name}:{port}");
            let p = policy(&[&exact, "*.test:*"], &[&name]);
            let d = p.decide(&Target { host: Host::Name(name.clone()), port });
            prop_assert_eq!(d.verdict, Verdict::Deny);
            prop_assert_eq!(d.reason, Reason::DeniedByRule);
        }
    }

    #[test]
    fn no_spelling_of_a_denied_name_is_allowed(
        host in host_strategy(),
        upper in proptest::collection::vec(any::<bool>(), 1..8),
        dot in any::<bool>(),
        port in 1u16..,
    ) {
        if let Ok(Host::Name(name)) = normalise_host(&host) {
            let suffix_rule = format!("*.{}:*", name.rsplit('.').next().unwrap_or(&name));
            let p = policy(&[&format!("{name}:*"), &suffix_rule], &[&name]);
            let spelled = respell(&name, &upper, dot);
            let t = Target::parse_with_default_port(&format!("{spelled}:{port}"), 443);
            if let Ok(t) = t {
                prop_assert_eq!(p.decide(&t).verdict, Verdict::Deny, "{}", spelled);
            }
        }
    }

    #[test]
    fn no_spelling_of_a_denied_ip_is_allowed(raw in any::<u32>(), port in 1u16..) {
        let ip = Ipv4Addr::from(raw);
        let p = policy(&["0.0.0.0/1:*", "128.0.0.0/1:*"], &[&ip.to_string()]);
        for spelled in ipv4_spellings(ip) {
            let host = normalise_host(&spelled);
            prop_assert_eq!(&host, &Ok(Host::Ip(IpAddr::V4(ip))), "{}", spelled);
            let t = Target { host: host.unwrap(), port };
            prop_assert_eq!(p.decide(&t).verdict, Verdict::Deny, "{}", spelled);
            prop_assert_eq!(p.admit(IpAddr::V4(ip), port).verdict, Verdict::Deny);
        }
    }
}

#[test]
fn learning_allows_unnamed_hosts_but_not_denied_ones_or_private_addresses() {
    let mut p = policy(&["known.test:443"], &["evil.test"]);
    p.set_learning();
    let d = p.decide(&target("new.test:8443"));
    assert_eq!((d.verdict, d.reason), (Verdict::Allow, Reason::Learning));
    assert_eq!(
        p.decide(&target("known.test:443")).reason,
        Reason::AllowedByRule
    );
    assert_eq!(p.decide(&target("evil.test:443")).verdict, Verdict::Deny);
    assert_eq!(
        p.decide(&target("netbox-probe-canary.invalid:443")).verdict,
        Verdict::Deny
    );
    // Addresses are still checked: learning opens names, not private ranges.
    let d = p.admit("10.1.2.3".parse().unwrap(), 443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Deny, Reason::NonPublicAddress)
    );
    assert_ne!(
        p.canonical_text(),
        policy(&["known.test:443"], &["evil.test"]).canonical_text()
    );
}

#[test]
fn allow_private_opens_a_non_public_address_for_its_names_only() {
    let mut p = policy(&["other.test:443"], &["10.9.0.0/16"]);
    p.add_private_rule("mirror.test:443", "--allow-private")
        .unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mirror = p.decide(&target("mirror.test:443"));
    let other = p.decide(&target("other.test:443"));
    assert!(mirror.reach_private && !other.reach_private);
    for addr in [
        "10.1.2.3",
        "127.0.0.1",
        "192.0.2.7",
        "100.64.0.1",
        "fd00::1",
    ] {
        let d = p.admit_for(&mirror, ip(addr), classify(ip(addr)), 443);
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::Allow, Reason::OpenedByRule),
            "{addr}"
        );
        assert_eq!(&*d.rule.as_ref().unwrap().text, "mirror.test:443");
        // The same address for another name stays closed.
        let d = p.admit_for(&other, ip(addr), classify(ip(addr)), 443);
        assert_eq!(d.reason, Reason::NonPublicAddress, "{addr}");
    }
    // Never where only the machine or its cloud lives; deny rules still win.
    for addr in [
        "169.254.169.254",
        "169.254.1.1",
        "fe80::1",
        "0.0.0.0",
        "224.0.0.1",
    ] {
        let d = p.admit_for(&mirror, ip(addr), classify(ip(addr)), 443);
        assert_eq!(d.verdict, Verdict::Deny, "{addr}");
    }
    let d = p.admit_for(&mirror, ip("10.9.1.1"), classify(ip("10.9.1.1")), 443);
    assert_eq!(d.reason, Reason::DeniedByRule);
    // Reserved space is routed to the gateway: never.
    for addr in ["0.0.0.1", "240.0.0.1"] {
        assert_eq!(
            p.admit_for(&mirror, ip(addr), classify(ip(addr)), 443)
                .verdict,
            Verdict::Deny,
            "{addr}"
        );
    }
    // A wildcard rule reaches private addresses, but not this machine's own loopback.
    p.add_private_rule("*.corp.test:443", "--allow-private")
        .unwrap();
    let any = p.decide(&target("localhost.corp.test:443"));
    assert!(any.reach_private);
    assert_eq!(
        p.admit_for(&any, ip("127.0.0.1"), classify(ip("127.0.0.1")), 443)
            .verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.admit_for(&any, ip("10.1.2.3"), classify(ip("10.1.2.3")), 443)
            .verdict,
        Verdict::Allow
    );
    // Names only: an address is opened with an IP/CIDR rule.
    assert!(p.add_private_rule("10.0.0.0/8", "--allow-private").is_err());
}

#[test]
fn allow_private_is_read_from_files() {
    let file = TempFile::new(
        "private.toml",
        "allow_private = [\"mirror.test:443\"]\nallow = [\"plain.test\"]\n",
    );
    let p = Policy::load(std::slice::from_ref(&file.0)).unwrap();
    assert!(p.decide(&target("mirror.test:443")).reach_private);
    assert!(!p.decide(&target("plain.test:443")).reach_private);
    let bad = TempFile::new("private-bad.toml", "allow_private = [\"10.0.0.1\"]\n");
    let err = Policy::load(std::slice::from_ref(&bad.0)).unwrap_err();
    assert!(err.to_string().contains("IP/CIDR"), "{err}");
}

/// A public address this machine holds is refused as loopback is: opened by an IP rule
/// for it, or for an exact name by `allow_private`, never by a wildcard.
#[test]
fn this_machines_own_public_address_is_refused_unless_opened() {
    let mut p = policy(&["*.corp.test:443", "203.0.113.0/24:8443"], &[]);
    p.add_private_rule("mirror.test:443", "--allow-private")
        .unwrap();
    p.add_private_rule("*.corp.test:443", "--allow-private")
        .unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let here = ip("100.128.0.1");
    let d = p.admit_classified(here, IpClass::ThisMachine, 443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Deny, Reason::NonPublicAddress)
    );
    assert_eq!(d.class, Some(IpClass::ThisMachine));
    let wildcard = p.decide(&target("a.corp.test:443"));
    let d = p.admit_for(&wildcard, here, IpClass::ThisMachine, 443);
    assert_eq!(d.verdict, Verdict::Deny);
    // Controls: an exact allow_private name, and an IP rule for the address.
    let mirror = p.decide(&target("mirror.test:443"));
    let d = p.admit_for(&mirror, here, IpClass::ThisMachine, 443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::OpenedByRule)
    );
    let d = p.admit_classified(ip("203.0.113.9"), IpClass::ThisMachine, 8443);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::OpenedByRule)
    );
}

/// Tunnels to 443 must carry TLS naming their host with no setting at all; `tls_ports`
/// adds ports, `tls = "allow-plain"` lets what is not TLS (or names nothing) through.
#[test]
fn tls_ports_and_plain_settings() {
    let p = policy(&["a.test"], &[]);
    assert!(p.checks_tls(443) && !p.checks_tls(8443) && !p.tls_plain_ok());
    let dir = std::env::temp_dir().join(format!("netbox-tls-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tls.toml");
    std::fs::write(
        &file,
        "allow = [\"a.test\"]\ntls_ports = [8443]\ntls = \"allow-plain\"\n",
    )
    .unwrap();
    let loaded = Policy::load(std::slice::from_ref(&file)).unwrap();
    assert!(loaded.checks_tls(443) && loaded.checks_tls(8443) && loaded.tls_plain_ok());
    assert_ne!(loaded.canonical_text(), p.canonical_text());
    std::fs::write(&file, "tls_ports = [0]\n").unwrap();
    assert!(Policy::load(std::slice::from_ref(&file)).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The decision as it was made before the index: every rule tried in order.
fn decide_by_scan(p: &Policy, target: &Target) -> Decision {
    let first = |action| {
        p.rules
            .iter()
            .find(|r| r.action == action && r.spec.matches(target))
    };
    if let Some(rule) = first(Action::Deny) {
        return Decision::deny(Reason::DeniedByRule, Some(rule));
    }
    let private = p
        .rules
        .iter()
        .find(|r| r.action == Action::Allow && r.reach_private && r.spec.matches(target));
    match private.or_else(|| first(Action::Allow)) {
        Some(rule) => Decision::allowed_by(rule),
        None => Decision::deny(Reason::NotAllowed, None),
    }
}

fn rule_strategy() -> impl Strategy<Value = String> {
    let label = prop::sample::select(vec!["a", "b", "c", "test", "x", "B"]);
    let name = prop::collection::vec(label, 1..4).prop_map(|l| l.join("."));
    let host = prop_oneof![
        name.clone(),
        name.clone().prop_map(|n| format!("{n}.")),
        name.prop_map(|n| format!("*.{n}")),
        net_strategy(),
    ];
    let ports = prop::sample::select(vec!["", ":443", ":80", ":*", ":80,443", ":8000-8100"]);
    (host, ports).prop_map(|(h, p)| format!("{h}{p}"))
}

/// Address rules, bracketed so a port may follow: networks that nest, repeat, and hold
/// the addresses of `ADDRESSES` in their IPv4 and IPv6 spellings (mapped, NAT64, 6to4,
/// and the Teredo and local-use NAT64 prefixes whose IPv4 address cannot be read).
fn net_strategy() -> impl Strategy<Value = String> {
    // Besides the list: a network around one of the addresses, at any prefix length.
    let around = (prop::sample::select(ADDRESSES), 1u8..=128).prop_map(|(addr, len)| {
        match addr.parse::<IpAddr>().unwrap() {
            IpAddr::V4(v4) => format!("{v4}/{}", len.min(32)),
            IpAddr::V6(v6) => format!("[{v6}/{len}]"),
        }
    });
    let listed = prop::sample::select(vec![
        "127.0.0.0/8",
        "127.0.0.1",
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.1.2.0/24",
        "10.1.2.3",
        "10.1.2.3/32",
        "10.1.2.4/31",
        "192.0.2.0/24",
        "[::1]",
        "[fd00::/8]",
        "[fd00::/64]",
        "[fd00::1]",
        "[64:ff9b::/96]",
        "[64:ff9b::a01:203]",
        "[64:ff9b::a00:0/104]",
        "[2002::/16]",
        "[2002:a01:203::/48]",
        "[2001::/32]",
        "[2001::1]",
        "[64:ff9b:1::/48]",
        "[64:ff9b:1::a01:203]",
        "[::ffff:10.1.2.3]",
        "[2000::/3]",
    ])
    .prop_map(str::to_owned);
    prop_oneof![listed, around]
}

/// Addresses for the address rules above to hold or miss.
const ADDRESSES: &[&str] = &[
    "127.0.0.1",
    "10.1.2.3",
    "10.1.2.5",
    "10.9.9.9",
    "192.0.2.1",
    "93.184.216.34",
    "::1",
    "fd00::1",
    "fd00:1::1",
    "::ffff:10.1.2.3",
    "64:ff9b::a01:203",
    "64:ff9b::7f00:1",
    "2002:a01:203::1",
    "2002:7f00:1::1",
    "2001::1",
    "64:ff9b:1::a01:203",
    "2606:4700::1",
];

fn add_rules(p: &mut Policy, rules: &[(String, u8)]) {
    for (rule, kind) in rules {
        let _ = match kind {
            0 => p.add_rule(Action::Allow, rule, "--allow"),
            1 => p.add_rule(Action::Deny, rule, "--deny"),
            _ => p.add_private_rule(rule, "--allow-private"),
        };
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// The index finds what trying every rule in order finds: the same decision (verdict,
    /// reason, the rule by file and line, its reach and wildcard) for names in any case,
    /// their parents and subdomains, and addresses; names repeat often, so a name's
    /// repeats are chained; and a policy that gains rules after a decision decides by
    /// them too (its index is built again).
    #[test]
    fn the_index_decides_as_a_scan_of_every_rule_does(
        rules in prop::collection::vec((rule_strategy(), 0u8..3), 0..24),
        more in prop::collection::vec((rule_strategy(), 0u8..3), 0..6),
        host in prop::sample::select(vec![
            "a", "b.a", "a.b", "x.a.b", "test", "c.test", "a.c.test", "b.b.b", "x", "A.B",
            "x.A.b.",
        ].into_iter().chain(ADDRESSES.iter().copied()).collect::<Vec<_>>()),
        port in prop::sample::select(vec![80u16, 443, 8080, 8001, 22]),
    ) {
        let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
        let target = Target::parse_authority(&format!("{host}:{port}")).unwrap();
        let mut p = Policy::deny_all();
        add_rules(&mut p, &rules);
        prop_assert_eq!(p.decide(&target), decide_by_scan(&p, &target));
        add_rules(&mut p, &more);
        prop_assert_eq!(p.decide(&target), decide_by_scan(&p, &target));
        p.prepare();
        prop_assert_eq!(p.clone().decide(&target), decide_by_scan(&p, &target));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// A resolved address is admitted or refused as trying every rule in order would: the
    /// deny rule that covers it in any spelling, the allow rule that opens it, the same
    /// rule by file and line, for addresses whose rules nest, repeat, and embed IPv4.
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn the_index_admits_addresses_as_a_scan_of_every_rule_does(
        rules in prop::collection::vec((rule_strategy(), 0u8..3), 0..24),
        addr in prop::sample::select(ADDRESSES),
        port in prop::sample::select(vec![80u16, 443, 8080, 8001, 22]),
    ) {
        let mut p = Policy::deny_all();
        add_rules(&mut p, &rules);
        p.prepare();
        // As given (a mapped address unfolded): the index must fold it as the scan does.
        let given: IpAddr = addr.parse().unwrap();
        let addr = crate::target::canonical_ip(given);
        let class = crate::ipclass::classify(addr);
        let scan = |wanted: &dyn Fn(&Rule) -> bool| p.rules.iter().find(|r| wanted(r));
        let by_scan = p.admit_among(&scan, addr, class, port);
        prop_assert_eq!(p.admit_classified(given, class, port), by_scan);
        // And as the host of a target, built as given, not parsed (parsing folds it).
        let target = Target { host: Host::Ip(given), port };
        prop_assert_eq!(p.decide(&target), decide_by_scan(&p, &target));
    }
}

/// A name written many times (once per port, lists concatenated) is indexed in linear
/// time: each repeat is chained to the first, not probed past every earlier one.
#[test]
fn a_name_repeated_many_times_is_indexed_once() {
    let mut p = Policy::deny_all();
    for port in 1..=20_000u16 {
        p.add_rule(Action::Allow, &format!("a.test:{port}"), "--allow")
            .unwrap();
    }
    p.add_rule(Action::Deny, "a.test:20000", "--deny").unwrap();
    p.prepare();
    let at = |port| Target::parse_authority(&format!("a.test:{port}")).unwrap();
    let allowed = p.decide(&at(7));
    assert_eq!(allowed.rule.map(|r| r.line), Some(7));
    assert_eq!(p.decide(&at(20_000)).reason, Reason::DeniedByRule);
    assert_eq!(
        p.index()
            .candidates(&p.rules, &at(1).host)
            .positions()
            .len(),
        20_001
    );
    assert_eq!(p.index().exact_names(), 1);
}

/// The line of the `--allow` rule that decides `host` under a prepared policy of `rules`.
fn line_deciding(rules: &[&str], host: &str) -> Option<u32> {
    let mut p = Policy::deny_all();
    for rule in rules {
        p.add_rule(Action::Allow, rule, "--allow").unwrap();
    }
    p.prepare();
    let decided = p.decide(&Target::parse_authority(host).unwrap());
    decided.rule.map(|r| r.line)
}

/// A name's repeats are tried in the policy's order, for exact names and wildcards alike:
/// the first that matches decides (line 2 here, not the later `*`).
#[test]
fn a_repeated_name_is_decided_by_its_first_matching_rule() {
    for (rules, host) in [
        (["a.b:22", "a.b", "a.b:*"], "a.b:80"),
        (["*.c.test:22", "*.c.test", "*.c.test:*"], "x.c.test:80"),
    ] {
        assert_eq!(line_deciding(&rules, host), Some(2), "{host}");
    }
}

/// Keys repeated many times over, interleaved (more repeats than a sort keeps in order by
/// chance): each key's rules are still tried in the policy's order, so the rule that
/// decides is the first that matches, for a name and for a network.
#[test]
fn interleaved_repeats_are_tried_in_the_policys_order() {
    let mut p = Policy::deny_all();
    let mut allow = |rule: &str| p.add_rule(Action::Allow, rule, "--allow").unwrap();
    allow("10.0.0.0/8:80");
    allow("a.test:80");
    for i in 0..300 {
        allow("a.test:443");
        allow("10.0.0.0/8:443");
        allow(&format!("k{}.test:443", i % 7));
    }
    p.prepare();
    let line_for = |host: &str| {
        let target = Target::parse_authority(host).unwrap();
        p.decide(&target).rule.map(|r| r.line)
    };
    assert_eq!(line_for("a.test:443"), Some(3));
    assert_eq!(line_for("10.1.2.3:443"), Some(4));
    #[allow(clippy::disallowed_methods)]
    let admitted = p.admit(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 443);
    assert_eq!(admitted.rule.map(|r| r.line), Some(4));
}

/// Candidates found in several lists (the exact name's, each parent domain's wildcards)
/// are tried in the policy's order: the first rule written decides, wherever its list is.
#[test]
fn candidates_from_several_lists_are_tried_in_the_policys_order() {
    for (rules, host) in [
        (["*.b:*", "*.b.b:*"], "x.b.b:80"),
        (["*.b:*", "x.b:*"], "x.b:80"),
    ] {
        assert_eq!(line_deciding(&rules, host), Some(1), "{host}");
    }
}

/// A rule pushed as a file's (and an `[[http]]` table's) after a decision is decided by:
/// the index is built again. And `prepare` builds it before any decision.
#[test]
fn rules_pushed_after_a_decision_are_decided_by() {
    let target = Target::parse_authority("late.test:443").unwrap();
    let mut p = Policy::deny_all();
    p.add_rule(Action::Allow, "late.test", "--allow").unwrap();
    p.prepare();
    assert!(p.index.get().is_some(), "prepare builds the index");
    assert!(p.decide(&target).is_allow());
    let origin = RuleRef {
        file: Arc::from("late.toml"),
        line: 1,
        text: "late.test".into(),
    };
    p.push_rule(Rule {
        action: Action::Deny,
        spec: RuleSpec::parse("late.test", Action::Deny).unwrap(),
        origin: origin.clone(),
        reach_private: false,
    })
    .unwrap();
    assert_eq!(p.decide(&target).reason, Reason::DeniedByRule);

    let other = Target::parse_authority("inspected.test:443").unwrap();
    assert!(!p.decide(&other).is_allow());
    let http = HttpRule::parse("inspected.test", None, None, origin).unwrap();
    p.push_http_rule(http).unwrap();
    assert!(p.decide(&other).is_allow());
}

/// An allowlist of many names (a blocklist, a generated list) loads and decides right:
/// exact names, a wildcard, a deny wildcard, a port it does not name. (Its speed is
/// measured in benches/allowlist_load.sh.)
#[test]
fn a_large_allowlist_loads_and_decides() {
    let n = 200_000;
    let mut text = String::from("deny = [\"*.blocked.test\"]\nallow = [\n");
    for i in 0..n {
        text.push_str(&format!("  \"h{i}.example.test:443\",\n"));
    }
    text.push_str("  \"*.wild.test\",\n]\n");
    let file = TempFile::new("large.toml", &text);
    let p = Policy::load(std::slice::from_ref(&file.0)).unwrap();
    for i in (0..n).step_by(97) {
        let d = p.decide(&target(&format!("h{i}.example.test:443")));
        assert_eq!(d.verdict, Verdict::Allow);
    }
    assert_eq!(
        p.decide(&target("a.b.wild.test:443")).verdict,
        Verdict::Allow
    );
    assert_eq!(
        p.decide(&target("x.blocked.test:443")).verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.decide(&target("h1.example.test:80")).verdict,
        Verdict::Deny
    );
    assert_eq!(p.decide(&target("example.test:443")).verdict, Verdict::Deny);
}

/// A secret's host is read where its value could go (its TLS ports, ports it names) and on
/// port 80, where what it answers is cleaned too; not on another port (SSH's).
#[test]
fn a_secret_host_is_read_on_its_tls_ports_its_named_ports_and_80() {
    let file = TempFile::new(
        "secret-ports.toml",
        "allow = [\"git.test:*\", \"api.test:*\"]\ntls_ports = [8443]\n\
         [[secret]]\nname = \"T\"\nfrom = \"env:T\"\nhosts = [\"git.test\", \"api.test:8080\"]\n",
    );
    let p = Policy::load(std::slice::from_ref(&file.0)).unwrap();
    let read = |t: &str| p.http_check(&target(t)).is_some();
    assert!(read("git.test:443"));
    assert!(read("git.test:8443"));
    assert!(read("git.test:80"));
    assert!(!read("git.test:22"));
    assert!(read("api.test:8080"));
    assert!(read("api.test:80"));
    assert!(!read("api.test:22"));
    assert!(!read("other.test:80"));
}
