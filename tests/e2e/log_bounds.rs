//! The event log is bounded and never silently lost: a command
//! flooding the bridge with refused requests cannot grow the log or netbox's memory
//! without bound, and a log that cannot be written stops the run. Each with its control.

use std::process::Command;

use serde_json::Value;

use crate::support::upstream::HttpServer;
use crate::support::{
    curl, netbox_bin, raw_exchange, stderr, stdout, wait_for_path_within, Bridge, Run, TestDir,
};

/// CMD's flood: N connections to the bridge, each a forwarded GET for a new name whose
/// Host header disagrees with it (refused as a bad request, detail quoting the header),
/// BIG bytes of header, or a plain short one when BIG is 0. Then it marks the end and
/// waits a moment, so the test can read netbox's memory before it exits.
const FLOOD: &str = r#"
import socket, sys, time
n, big = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    s = socket.create_connection(("127.0.0.1", 3128))
    host = ("h%d-" % i) + "x" * big if big else "h%d.test" % i
    s.sendall(("GET http://d%d.test/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (i, host)).encode())
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    s.close()
open("flooded", "w").close()
time.sleep(1.5)
"#;

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

#[test]
fn a_flood_of_refusals_is_counted_past_the_cap() {
    let dir = TestDir::new("log-cap");
    let server = crate::support::upstream::HttpServer::start();
    let allowed = format!("127.0.0.1:{}", server.port());
    let run = Run::new(&dir).args_from(&["--allow", &allowed]);
    std::fs::write(run.workspace.join("flood.py"), FLOOD).unwrap();
    // After the refusals, a connection that goes through: it must be on record.
    let out = run.sh(&format!(
        "python3 flood.py 10500 0 && curl -sS -o /dev/null -x $HTTP_PROXY http://{allowed}/ && echo through"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("through"));
    let events = run.events();
    // 10,000 refused records (the probe's among them), the rest counted, the probe's
    // refused lookup in the sandbox's DNS (lookups have a cap of their own), and the
    // allowed one.
    assert_eq!(count(&events, "net"), 10_002);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "net" && e["decision"] == "allow" && e["port"] == server.port()),
        "the allowed connection is not on record"
    );
    let capped = events.iter().find(|e| e["type"] == "net_capped").unwrap();
    assert_eq!(capped["decision"], "deny");
    let suppressed = events
        .iter()
        .find(|e| e["type"] == "net_suppressed")
        .unwrap();
    // The probe's three refusals (its canary, and the two addresses its capture row
    // dials) took three of the 10,000 records: 9,997 of the flood's are written.
    assert_eq!(suppressed["count"], 503);
    let end = events.iter().find(|e| e["type"] == "session_end").unwrap();
    assert_eq!(end["net_denied"], 10_500, "{end}");
    // Each distinct refusal is announced once, up to 1,000, then one line says so.
    let said = stderr(&out);
    let announced = said
        .lines()
        .filter(|l| l.starts_with("netbox: blocked"))
        .count();
    assert_eq!(announced, 1_000, "{}", said.lines().last().unwrap_or(""));
    assert!(said
        .contains("netbox: 1000 different refusals announced; the rest are only in the event log"));
    // Control: below the cap, every attempt is a record and nothing is counted aside.
    let control = TestDir::new("log-cap-control");
    let run = Run::new(&control);
    std::fs::write(run.workspace.join("flood.py"), FLOOD).unwrap();
    let out = run.sh("python3 flood.py 50 0");
    assert!(out.status.success(), "{}", stderr(&out));
    let events = run.events();
    let flood = events
        .iter()
        .filter(|e| e["type"] == "net" && !crate::support::is_probe_attempt(e))
        .count();
    assert_eq!(flood, 50);
    assert_eq!(count(&events, "net_suppressed"), 0);
}

#[test]
fn huge_request_heads_do_not_grow_the_log_or_netbox() {
    let dir = TestDir::new("log-huge");
    let run = Run::new(&dir);
    std::fs::write(run.workspace.join("flood.py"), FLOOD).unwrap();
    let mut child = run
        .command("python3 flood.py 1500 60000")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_path_within(
        &run.workspace.join("flooded"),
        "the flood never ended",
        std::time::Duration::from_secs(60),
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(child.wait().unwrap().success());
    // 1,500 requests quoting 60 KB each: 90 MB of log and ~100 MB of netbox before.
    let size = std::fs::metadata(&run.log).unwrap().len();
    assert!(size < 3 << 20, "log grew to {size} bytes");
    assert!(peak_kib < 48 << 10, "netbox peaked at {peak_kib} KiB");
    let events = run.events();
    // The flood's 1,500 and the probe's own.
    let flood = events
        .iter()
        .filter(|e| e["type"] == "net" && !crate::support::is_probe_attempt(e))
        .count();
    assert_eq!(flood, 1_500);
    let details: Vec<&str> = events.iter().filter_map(|e| e["detail"].as_str()).collect();
    // Control: the refusals are there, each with its (shortened) reason.
    assert!(details.iter().all(|d| d.len() <= 512), "a detail is longer");
    assert!(
        details
            .iter()
            .any(|d| d.starts_with("Host header \"h1499-xxx") && d.ends_with('…')),
        "{:?}",
        details.last()
    );
}

#[test]
fn an_event_log_that_cannot_be_written_stops_the_run() {
    let dir = TestDir::new("log-full");
    let run = Run::new(&dir).arg("--quiet");
    // A log that fails from its first line: CMD never starts.
    let out = Command::new(netbox_bin())
        .args(["--log", "/dev/full", "--", "touch", "ran"])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot write the event log /dev/full: No space left on device"),
        "{}",
        stderr(&out)
    );
    assert!(!run.workspace.join("ran").exists());
    // A log whose disk fills while CMD runs: a 16 KiB tmpfs in a mount namespace of the
    // test's own (a user namespace makes that possible without root).
    std::fs::write(run.workspace.join("flood.py"), FLOOD).unwrap();
    let small = dir.join("small");
    std::fs::create_dir_all(&small).unwrap();
    let script = |log_dir: &str| {
        format!(
            "{mount}exec {netbox} --log {log_dir}/events.jsonl --quiet -- sh -c 'python3 flood.py 400 0; echo FINISHED'",
            mount = if log_dir == small.to_str().unwrap() {
                format!("mount -t tmpfs -o size=16k tmpfs {} && ", small.display())
            } else {
                String::new()
            },
            netbox = netbox_bin().display(),
        )
    };
    let full = Command::new("unshare")
        .args(["-Urm", "sh", "-c"])
        .arg(script(small.to_str().unwrap()))
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(full.status.code(), Some(125), "{}", stderr(&full));
    assert!(
        stderr(&full).contains("No space left on device (os error 28); the run was stopped"),
        "{}",
        stderr(&full)
    );
    assert!(!stdout(&full).contains("FINISHED"), "{}", stdout(&full));
    // Control: the same run with room for its log finishes.
    let roomy = dir.join("roomy");
    std::fs::create_dir_all(&roomy).unwrap();
    let fine = Command::new("unshare")
        .args(["-Urm", "sh", "-c"])
        .arg(script(roomy.to_str().unwrap()))
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(fine.status.code(), Some(0), "{}", stderr(&fine));
    assert!(stdout(&fine).contains("FINISHED"));
}

/// A standalone bridge runs for as long as it is left running, with no end of run to cap
/// its log at: its refusals are bounded per minute, the rest counted in a `net_suppressed`
/// record (the soak harness saw 459,160 refusal records, 170 MB, in 25 s of a flood past
/// the connection limit). Control: allowed attempts are all logged.
#[test]
fn a_standalone_bridge_logs_a_bounded_number_of_refusals_a_minute() {
    let dir = TestDir::new("bridge-refusal-budget");
    let http = HttpServer::start();
    let p = http.port();
    let mut bridge = Bridge::start(
        &dir,
        &format!(
            "allow = [\"up.test:{p}\", \"127.0.0.1:{p}\"]\n[hosts]\n\"up.test\" = \"127.0.0.1\"\n"
        ),
        &["--log-refusals-per-minute", "50"],
    );
    for i in 0..300 {
        let (answer, _) = raw_exchange(
            bridge.addr,
            format!("CONNECT d{i}.test:{p} HTTP/1.1\r\nHost: d{i}.test:{p}\r\n\r\n").as_bytes(),
        );
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    }
    for _ in 0..5 {
        let out = curl(&[
            "-x",
            &bridge.proxy_url(),
            &format!("http://up.test:{p}/hello"),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    bridge.stop();
    let events: Vec<Value> = std::fs::read_to_string(&bridge.log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let net = |decision: &str| {
        events
            .iter()
            .filter(|e| e["type"] == "net" && e["decision"] == decision)
            .count()
    };
    assert_eq!(net("deny"), 50);
    assert_eq!(net("allow"), 5);
    let suppressed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "net_suppressed")
        .collect();
    assert_eq!(suppressed.len(), 1, "{suppressed:?}");
    assert_eq!(suppressed[0]["count"], 250);
}
