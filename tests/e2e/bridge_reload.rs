//! Reloading a running `netbox bridge` (SIGHUP, `--watch`): new policies take effect for
//! new connections without dropping a running tunnel; a broken file keeps the old policy;
//! every load is logged with its hash. Real curl and raw tunnels against a local server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::upstream::HttpServer;
use crate::support::{curl, sha256_hex, stdout, Bridge, TestDir};

fn allowlist(hosts: &[&str], port: u16) -> String {
    let rules: Vec<String> = hosts.iter().map(|h| format!("\"{h}:{port}\"")).collect();
    format!(
        "allow_private = [{}]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n\"b.test\" = \"127.0.0.1\"\n",
        rules.join(", ")
    )
}

fn status(bridge: &Bridge, user: Option<&str>, url: &str) -> String {
    let proxy = match user {
        Some(user) => format!("http://{user}@{}", bridge.addr),
        None => bridge.proxy_url(),
    };
    stdout(&curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-x",
        &proxy,
        url,
    ]))
}

fn hangup(bridge: &Bridge) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(bridge.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
}

/// Waits for the `n`th record of type `kind`, and returns every one so far.
fn wait_for(bridge: &Bridge, kind: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found: Vec<Value> = bridge
            .records()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect();
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no {n} {kind} records: {:?}",
            bridge.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A CONNECT tunnel to `host` through the bridge, and a GET through it.
fn open_tunnel(bridge: &Bridge, host: &str, port: u16) -> TcpStream {
    let mut s = TcpStream::connect(bridge.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "tunnel to {host}");
    let mut rest = [0u8; 1];
    let mut tail = Vec::new();
    while !tail.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut rest).unwrap();
        tail.push(rest[0]);
    }
    s
}

fn get_through(tunnel: &mut TcpStream, host: &str) -> String {
    write!(tunnel, "GET /hello HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"hello from upstream\n") {
        let mut chunk = [0u8; 1024];
        let n = tunnel.read(&mut chunk).unwrap();
        assert!(n > 0, "tunnel closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_reload_takes_effect_for_new_connections_and_keeps_a_running_tunnel() {
    let dir = TestDir::new("reload-sighup");
    let http = HttpServer::start();
    let p = http.port();
    let file = dir.write("allow.toml", &allowlist(&["a.test"], p));
    let bridge = Bridge::start_args(&dir, &["--allowlist".into(), file.display().to_string()]);
    let (a, b) = (
        format!("http://a.test:{p}/hello"),
        format!("http://b.test:{p}/hello"),
    );
    // Positive control, and the refusal the reload will lift.
    assert_eq!(status(&bridge, None, &a), "200");
    assert_eq!(status(&bridge, None, &b), "502");
    let first = wait_for(&bridge, "policy_loaded", 1);
    assert_eq!(first[0]["cause"], "start");
    assert_eq!(first[0]["session"], "e2e");
    let mut tunnel = open_tunnel(&bridge, "a.test", p);
    assert!(get_through(&mut tunnel, "a.test").starts_with("HTTP/1.1 200"));

    dir.write("allow.toml", &allowlist(&["b.test"], p));
    hangup(&bridge);
    let loaded = wait_for(&bridge, "policy_loaded", 2);
    assert_eq!(loaded[1]["cause"], "signal");
    assert_ne!(loaded[0]["policy_sha256"], loaded[1]["policy_sha256"]);
    assert_eq!(status(&bridge, None, &b), "200");
    assert_eq!(
        status(&bridge, None, &a),
        "502",
        "a.test is gone from the policy"
    );
    // The tunnel opened before the reload keeps the decision it got.
    assert!(get_through(&mut tunnel, "a.test").starts_with("HTTP/1.1 200"));

    // A file that does not load: refused, logged, and the policy before it stays.
    dir.write("allow.toml", "allow = [\"unterminated\n");
    hangup(&bridge);
    let failed = wait_for(&bridge, "policy_reload_failed", 1);
    assert_eq!(failed[0]["cause"], "signal");
    assert!(
        failed[0]["error"].as_str().unwrap().contains("allow.toml"),
        "{failed:?}"
    );
    assert_eq!(status(&bridge, None, &b), "200");
    assert_eq!(status(&bridge, None, &a), "502");
    assert!(bridge.stderr().iter().any(|l| l.contains("reload refused")));
    assert_eq!(wait_for(&bridge, "policy_loaded", 2).len(), 2);
}

#[test]
fn watch_reloads_when_a_policy_file_changes() {
    let dir = TestDir::new("reload-watch");
    let http = HttpServer::start();
    let p = http.port();
    let base = dir.write("base.toml", &allowlist(&["a.test"], p));
    let file = dir.write("allow.toml", "include = [\"base.toml\"]\n");
    let bridge = Bridge::start_args(
        &dir,
        &[
            "--allowlist".into(),
            file.display().to_string(),
            "--watch".into(),
        ],
    );
    let b = format!("http://b.test:{p}/hello");
    assert_eq!(status(&bridge, None, &b), "502");
    // An included file counts too.
    std::fs::write(&base, allowlist(&["a.test", "b.test"], p)).unwrap();
    let loaded = wait_for(&bridge, "policy_loaded", 2);
    assert_eq!(loaded[1]["cause"], "watch");
    assert_eq!(loaded[1]["allow_rules"], 2);
    assert_eq!(status(&bridge, None, &b), "200");
}

#[test]
fn tenants_reload_their_policies_and_secrets_and_not_what_needs_a_restart() {
    let dir = TestDir::new("reload-tenants");
    let http = HttpServer::start();
    let p = http.port();
    dir.write("a.toml", &allowlist(&["a.test"], p));
    let digest = |s: &str| format!("sha256:{}", sha256_hex(s.as_bytes()));
    let tenants = |a_secret: &str, a_file: &str, more: &str| {
        format!(
            "[tenants.team-a]\nallowlist = [\"{a_file}\"]\nsecrets = [\"{}\"]\n{more}",
            digest(a_secret)
        )
    };
    let file = dir.write("tenants.toml", &tenants("old-secret-1", "a.toml", ""));
    let bridge = Bridge::start_args(&dir, &["--tenants".into(), file.display().to_string()]);
    let (a, b) = (
        format!("http://a.test:{p}/hello"),
        format!("http://b.test:{p}/hello"),
    );
    assert_eq!(status(&bridge, Some("team-a:old-secret-1"), &a), "200");
    assert_eq!(status(&bridge, Some("team-a:old-secret-1"), &b), "502");
    assert_eq!(status(&bridge, Some("team-c:c-secret-3"), &a), "407");
    let first = wait_for(&bridge, "policy_loaded", 1);
    assert_eq!(first[0]["tenant"], "team-a");
    assert_eq!(first[0]["session"], "e2e/team-a");

    // team-a's token rotates and its policy grows; team-c arrives.
    dir.write("ab.toml", &allowlist(&["a.test", "b.test"], p));
    let more = format!(
        "[tenants.team-c]\nallowlist = [\"a.toml\"]\nsecrets = [\"{}\"]\n",
        digest("c-secret-3")
    );
    dir.write("tenants.toml", &tenants("new-secret-2", "ab.toml", &more));
    hangup(&bridge);
    wait_for(&bridge, "policy_loaded", 3);
    assert_eq!(status(&bridge, Some("team-a:new-secret-2"), &b), "200");
    assert_eq!(status(&bridge, Some("team-a:old-secret-1"), &a), "407");
    assert_eq!(status(&bridge, Some("team-c:c-secret-3"), &a), "200");
    assert_eq!(status(&bridge, Some("team-c:c-secret-3"), &b), "502");

    // A listener of its own for team-a needs a restart: refused whole, nothing changes.
    let listen = "listen = [\"127.0.0.1:0\"]\n";
    let changed = tenants("new-secret-2", "a.toml", listen) + &more;
    dir.write("tenants.toml", &changed);
    hangup(&bridge);
    let failed = wait_for(&bridge, "policy_reload_failed", 1);
    assert!(
        failed[0]["error"].as_str().unwrap().contains("restart"),
        "{failed:?}"
    );
    assert_eq!(status(&bridge, Some("team-a:new-secret-2"), &b), "200");
}
