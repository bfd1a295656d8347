//! The bypass battery: every spelling of a refused target a hostile client can send the
//! bridge (IPv4 and IPv6 spellings, zone ids, NAT64 and 6to4 forms, case and dot tricks,
//! homographs, userinfo and fragments, CRLF, NUL and spaces in authorities, ports past
//! 65535, smuggling shapes, SOCKS5 address types and lengths) and a DNS server that answers
//! with loopback in every form, garbage, silence, and a name that flips between an opened
//! and a closed address on each question (rebinding).
//!
//! `bypass_battery.py` runs the bridge, its upstreams and that DNS server in a network
//! namespace of the test's own with loopback as its only interface: a regression that
//! dialed a translated address would find no route, so no packet can leave the machine,
//! and the event log still shows the dial. A tripwire on 127.0.0.1 and ::1, on the port the
//! allowed upstream (127.0.0.3) uses, and on public addresses the namespace holds as a host
//! holds its own, must see no connection; a control shows it counts. (`ip`, from iproute2,
//! adds those addresses.)

use std::process::Command;

use serde_json::Value;

use crate::support::{netbox_bin, stderr, stdout, TestDir};

const BATTERY: &str = include_str!("bypass_battery.py");

#[test]
fn no_spelling_of_a_refused_target_is_dialed() {
    let dir = TestDir::new("bypass-battery");
    let script = dir.write("bypass_battery.py", BATTERY);
    let out = Command::new("unshare")
        .args(["-rn", "python3"])
        .arg(&script)
        .arg(netbox_bin())
        .arg(&dir.path)
        .output()
        .expect("unshare and python3 are needed for the bypass battery");
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert!(
        said.ends_with("done\n"),
        "the battery stopped early:\n{said}"
    );

    let outcome = |line: &str| line.rsplit_once(" refused").is_some() || line.ends_with(" ok");
    let failed: Vec<&str> = said
        .lines()
        .filter(|l| l.contains(" ALLOWED") || l.contains(" FAILED"))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}\n{said}");
    let value = |key: &str| -> usize {
        said.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key:?} in:\n{said}"))
    };
    assert_eq!(value("tripwire "), 0, "a connection reached the tripwire");
    let attacks = value("attacks ");
    let controls = said
        .lines()
        .find_map(|l| l.split(" controls ").nth(1))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap();
    let refused = said.lines().filter(|l| l.contains(" refused")).count();
    let ok = said.lines().filter(|l| l.ends_with(" ok")).count();
    assert_eq!(refused, attacks, "{said}");
    // Every control, and the tripwire's own.
    assert_eq!(ok, controls + 1, "{said}");
    assert!(attacks >= 150, "only {attacks} attacks ran:\n{said}");
    assert!(said.lines().filter(|l| !l.is_empty()).all(|l| outcome(l)
        || [
            "tripwire ",
            "upstream-port ",
            "dns-questions ",
            "attacks ",
            "done"
        ]
        .iter()
        .any(|p| l.starts_with(p))));

    // Rebinding really happened: the flipping name was asked again for each connection,
    // and both answers were seen (some tunnels opened, some refused).
    let flip = said.lines().find(|l| l.starts_with("dns flip ")).unwrap();
    assert!(
        !flip.contains("allowed 0 ") && !flip.ends_with("refused 0"),
        "{flip}"
    );

    // The log: whatever was dialed was the allowed upstream, and nothing else.
    let port = value("upstream-port ");
    let allowed_upstream = format!("127.0.0.3:{port}");
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(events.len() >= attacks, "{} events", events.len());
    let stray: Vec<&Value> = events
        .iter()
        .filter(|e| !e["dialed"].is_null() && e["dialed"] != allowed_upstream.as_str())
        .collect();
    assert!(stray.is_empty(), "dialed past the policy: {stray:#?}");
    assert!(
        events
            .iter()
            .any(|e| e["dialed"] == allowed_upstream.as_str()),
        "no control was dialed"
    );
    // A name resolving to an address the machine holds is refused as its own, not for
    // anything else (a resolve failure would pass the tripwire too).
    for name in [
        "self.rebind.test",
        "self6.rebind.test",
        "routed.rebind.test",
        "routed6.rebind.test",
        "selfnat64.rebind.test",
    ] {
        let event = events.iter().find(|e| e["host"] == name).unwrap();
        assert_eq!(event["refused_class"], "this_machine", "{event}");
    }
}
