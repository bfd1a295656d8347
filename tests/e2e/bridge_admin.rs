//! The admin listener of `netbox bridge --admin ADDR`: metrics scraped with curl and read
//! by a real Prometheus text parser (python3-prometheus-client), matched against the log;
//! readiness that turns to 503 while the bridge drains.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::upstream::HttpServer;
use crate::support::{connect_as, curl, sha256_hex, stdout, Bridge, TestDir};

const SECRET: &str = "adm-Zr8pW2qT5vK9nB3x";

/// The tenants file: team-a may reach a.test (pinned to the local server).
fn start(dir: &TestDir, port: u16, extra: &[&str]) -> Bridge {
    dir.write(
        "a.toml",
        &format!("allow_private = [\"a.test:{port}\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n"),
    );
    let file = dir.write(
        "tenants.toml",
        &format!(
            "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"sha256:{}\"]\n",
            sha256_hex(SECRET.as_bytes())
        ),
    );
    let mut args: Vec<String> = vec![
        "--tenants".into(),
        file.display().to_string(),
        "--admin".into(),
        "127.0.0.1:0".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Bridge::start_args(dir, &args)
}

/// The metrics as the Prometheus client library's own parser reads them: (name,
/// labels, value) for every sample.
fn scrape(admin: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let out = curl(&["-f", &format!("http://{admin}/metrics")]);
    assert!(out.status.success(), "scrape failed");
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let parser = "import json, sys\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        print(json.dumps([[s.name, s.labels, s.value]\n\
            for f in text_string_to_metric_families(sys.stdin.read()) for s in f.samples]))\n";
    let mut child = Command::new(python)
        .args(["-c", parser])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (with python3-prometheus-client)");
    child.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let parsed = child.wait_with_output().unwrap();
    assert!(
        parsed.status.success(),
        "the Prometheus parser refused the metrics: {}\n{}",
        String::from_utf8_lossy(&parsed.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let samples: Vec<(String, BTreeMap<String, String>, f64)> =
        serde_json::from_slice(&parsed.stdout).unwrap();
    samples
}

fn sample(
    samples: &[(String, BTreeMap<String, String>, f64)],
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

#[test]
fn metrics_parse_as_prometheus_text_and_match_the_log() {
    let dir = TestDir::new("admin-metrics");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, p, &[]);
    let admin = bridge.admin_addr();
    let user = format!("team-a:{SECRET}");
    let proxy = format!("http://{user}@{}", bridge.addr);
    let fetch = |proxy: &str, url: &str, extra: &[&str]| {
        let mut args = vec!["-o", "/dev/null", "-w", "%{http_code}", "-x", proxy];
        args.extend_from_slice(extra);
        args.push(url);
        stdout(&curl(&args))
    };
    let a = format!("http://a.test:{p}/bytes/5000");
    assert_eq!(fetch(&proxy, &a, &[]), "200");
    assert_eq!(fetch(&proxy, &a, &["-p"]), "200");
    assert_eq!(
        fetch(&proxy, &format!("http://b.test:{p}/hello"), &[]),
        "502"
    );
    assert_eq!(fetch(&bridge.proxy_url(), &a, &[]), "407");
    // A tunnel held open shows in the tenant's gauge.
    let (status, held) = connect_as(bridge.addr, &format!("a.test:{p}"), "team-a", SECRET);
    assert_eq!(status, "HTTP/1.1 200");

    let events = bridge.events(4);
    let samples = scrape(&admin);
    // Every attempt in the log is counted under its labels, and nothing else.
    let mut logged: BTreeMap<(String, String, String, String), f64> = BTreeMap::new();
    let (mut up, mut down) = (0.0, 0.0);
    for e in events.iter().filter(|e| e["type"] == "net") {
        let key = |k: &str| e[k].as_str().unwrap_or("").to_owned();
        *logged
            .entry((key("session"), key("proto"), key("decision"), key("reason")))
            .or_default() += 1.0;
        if e["session"] == "e2e/team-a" {
            up += e["bytes_up"].as_f64().unwrap();
            down += e["bytes_down"].as_f64().unwrap();
        }
    }
    let counted: BTreeMap<(String, String, String, String), f64> = samples
        .iter()
        .filter(|(n, _, _)| n == "netbox_attempts_total")
        .map(|(_, l, v)| {
            let label = |k: &str| l.get(k).cloned().unwrap_or_default();
            (
                (
                    label("session"),
                    label("proto"),
                    label("decision"),
                    label("reason"),
                ),
                *v,
            )
        })
        .collect();
    assert_eq!(counted, logged);
    assert!(logged.contains_key(&(
        "e2e".into(),
        "http_forward".into(),
        "deny".into(),
        "proxy_auth_required".into()
    )));
    assert!(down >= 10_000.0, "two downloads of 5,000 bytes: {down}");
    assert_eq!(
        sample(
            &samples,
            "netbox_bytes_total",
            &[("session", "e2e/team-a"), ("direction", "down")]
        ),
        down
    );
    assert_eq!(
        sample(
            &samples,
            "netbox_bytes_total",
            &[("session", "e2e/team-a"), ("direction", "up")]
        ),
        up
    );
    assert_eq!(
        sample(
            &samples,
            "netbox_open_connections",
            &[("session", "e2e/team-a")]
        ),
        1.0
    );
    assert_eq!(
        sample(&samples, "netbox_policy_info", &[("session", "e2e/team-a")]),
        1.0
    );
    assert_eq!(sample(&samples, "netbox_policy_reloads_total", &[]), 0.0);
    drop(held);

    // Anything but the two paths is a 404; the proxy listener does not serve them.
    let out = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{admin}/"),
    ]);
    assert_eq!(stdout(&out), "404");
    let out = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{}/__netbox/metrics", bridge.addr),
    ]);
    assert_ne!(stdout(&out), "200");
}

#[test]
fn ready_until_the_bridge_drains() {
    let dir = TestDir::new("admin-ready");
    let http = HttpServer::start();
    let p = http.port();
    let mut bridge = start(&dir, p, &["--drain-timeout", "30s"]);
    let admin = bridge.admin_addr();
    let status_of = |path: &str| {
        stdout(&curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://{admin}{path}"),
        ]))
    };
    let ready = || status_of("/ready");
    assert_eq!(ready(), "200");
    // The conventional paths and the earlier ones alike; an unknown one is not found.
    for path in [
        "/readyz",
        "/__netbox/ready",
        "/healthz",
        "/livez",
        "/__netbox/metrics",
    ] {
        assert_eq!(status_of(path), "200", "{path}");
    }
    assert_eq!(status_of("/nothing"), "404");
    // A tunnel open keeps the bridge draining after SIGTERM.
    let (status, mut held) = connect_as(bridge.addr, &format!("a.test:{p}"), "team-a", SECRET);
    assert_eq!(status, "HTTP/1.1 200");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(bridge.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready() != "503" {
        assert!(Instant::now() < deadline, "still ready after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Not ready, but alive: a liveness probe does not restart a draining bridge.
    assert_eq!(status_of("/readyz"), "503");
    assert_eq!(status_of("/healthz"), "200");
    // Draining: the open tunnel still carries bytes, new clients are not taken.
    write!(held, "GET /hello HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"hello from upstream\n") {
        let mut chunk = [0u8; 512];
        let n = held.read(&mut chunk).unwrap();
        assert!(n > 0, "the tunnel was cut while draining");
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(
        TcpStream::connect(bridge.addr).is_err(),
        "still accepting while draining"
    );
    drop(held);
    bridge.stop();
    let events: Vec<Value> = bridge.events(1);
    assert!(events
        .iter()
        .any(|e| e["session"] == "e2e/team-a" && e["decision"] == "allow"));
}

/// A bridge process that is killed and waited for when dropped.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `netbox bridge` with `--log TARGET` and its standard output piped; returns the
/// process and its listening address.
fn bridge_logging_to(dir: &TestDir, port: u16, target: &str) -> (Reaped, String) {
    let allow = dir.write(
        "allow.toml",
        &format!("allow_private = [\"a.test:{port}\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n"),
    );
    let spawned = Command::new(crate::support::netbox_bin())
        .args([
            "bridge",
            "--listen",
            "127.0.0.1:0",
            "--session",
            "e2e",
            "--allowlist",
        ])
        .arg(&allow)
        .args(["--log", target])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = Reaped(spawned.unwrap());
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        use std::io::BufRead;
        assert!(
            stderr.read_line(&mut line).unwrap_or(0) > 0,
            "bridge did not start"
        );
        if let Some(rest) = line.split("listening on ").nth(1) {
            let addr = rest.split(' ').next().unwrap().to_owned();
            // Keep reading its stderr so that it never blocks on a full pipe.
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            return (child, addr);
        }
    }
}

#[test]
fn the_log_goes_to_standard_output_or_a_collectors_datagram_socket() {
    let dir = TestDir::new("log-targets");
    let http = HttpServer::start();
    let p = http.port();
    let url = format!("http://a.test:{p}/hello");

    // Standard output: one JSON record per line.
    let (mut child, addr) = bridge_logging_to(&dir, p, "-");
    let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", "-x", &addr, &url]);
    assert_eq!(stdout(&out), "200");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.0.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut text = String::new();
    let mut out = child.0.stdout.take().unwrap();
    out.read_to_string(&mut text).unwrap();
    drop(child);
    let records: Vec<Value> = text
        .lines()
        .map(crate::support::read_typed_record)
        .collect();
    assert!(
        records.iter().any(|r| r["type"] == "policy_loaded"),
        "{text}"
    );
    assert!(
        records
            .iter()
            .any(|r| r["host"] == "a.test" && r["decision"] == "allow"),
        "{text}"
    );

    // A Unix datagram socket: one record per datagram.
    let socket_path = dir.join("collector.sock");
    let collector = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    collector
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let target = format!("unix:{}", socket_path.display());
    let (child, addr) = bridge_logging_to(&dir, p, &target);
    let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", "-x", &addr, &url]);
    assert_eq!(stdout(&out), "200");
    let mut seen = Vec::new();
    while !seen.iter().any(|r: &Value| r["type"] == "net") {
        let mut datagram = vec![0u8; 65536];
        let n = collector
            .recv(&mut datagram)
            .expect("a record from the bridge");
        let text = std::str::from_utf8(&datagram[..n]).unwrap();
        assert_eq!(
            text.matches('\n').count(),
            1,
            "one record a datagram: {text:?}"
        );
        seen.push(crate::support::read_typed_record(text.trim_end()));
    }
    assert_eq!(seen[0]["type"], "policy_loaded");
    assert_eq!(seen.last().unwrap()["host"], "a.test");
    drop(child);

    // No collector there: the bridge does not start, and says why.
    drop(collector);
    let _ = std::fs::remove_file(&socket_path);
    let out = Command::new(crate::support::netbox_bin())
        .args([
            "bridge",
            "--listen",
            "127.0.0.1:0",
            "--allow",
            "a.test",
            "--log",
            &target,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("collector.sock"), "{said}");
    assert!(!said.contains("panicked"), "{said}");
}

/// What a stuck peer cannot hold: a log reader that takes nothing, an admin client that
/// never reads, a socket path another bridge listens on.
mod stuck_peers_and_taken_paths {
    use super::*;

    #[test]
    fn a_log_reader_that_takes_nothing_stops_the_bridge() {
        let dir = TestDir::new("r38-stall");
        let http = HttpServer::start();
        let p = http.port();
        // A collector that binds its socket and never reads: the queue fills.
        let socket_path = dir.join("stalled.sock");
        let _collector = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
        let target = format!("unix:{}", socket_path.display());
        let (mut child, addr) = bridge_logging_to(&dir, p, &target);
        let url = format!("http://a.test:{p}/hello");
        // Positive control: the first requests are served (and logged into the queue).
        let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", "-x", &addr, &url]);
        assert_eq!(stdout(&out), "200");
        let started = Instant::now();
        let status = loop {
            let _ = curl(&["-o", "/dev/null", "--max-time", "2", "-x", &addr, &url]);
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "the bridge kept going with a log nobody takes"
            );
        };
        assert_eq!(status.code(), Some(125));
    }

    #[test]
    fn an_admin_client_that_never_reads_holds_no_place_for_long() {
        let dir = TestDir::new("r38-admin-hold");
        let http = HttpServer::start();
        let p = http.port();
        let bridge = start(&dir, p, &[]);
        let admin = bridge.admin_addr();
        // Every place taken by a client that asks and never reads.
        let _holders: Vec<TcpStream> = (0..16)
            .map(|_| {
                let mut s = TcpStream::connect(&admin).unwrap();
                let ask = "GET /__netbox/metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000);
                let _ = s.write_all(ask.as_bytes());
                s
            })
            .collect();
        // Within the per-connection deadline the places come back for a real scrape.
        let started = Instant::now();
        loop {
            let out = curl(&[
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "3",
                &format!("http://{admin}/__netbox/ready"),
            ]);
            if stdout(&out) == "200" {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "readiness never answered"
            );
        }
    }

    #[test]
    fn a_socket_path_another_bridge_listens_on_is_not_taken() {
        let dir = TestDir::new("r38-socket");
        let path = dir.join("proxy.sock");
        let listen = format!("unix:{}", path.display());
        let mut first = Reaped(
            Command::new(crate::support::netbox_bin())
                .args([
                    "bridge", "--listen", &listen, "--allow", "a.test", "--quiet",
                ])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&path).is_err() {
            assert!(Instant::now() < deadline, "the first bridge did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let second = Command::new(crate::support::netbox_bin())
            .args(["bridge", "--listen", &listen, "--allow", "a.test"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(second.status.code(), Some(125));
        assert!(String::from_utf8_lossy(&second.stderr).contains("another process listens"));
        // The first still listens there.
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        assert!(first.0.try_wait().unwrap().is_none());
    }
}
