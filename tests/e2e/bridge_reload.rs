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

/// A CONNECT tunnel to `host` through the bridge.
fn open_tunnel(bridge: &Bridge, host: &str, port: u16) -> TcpStream {
    crate::support::connect_tunnel(bridge.addr, &format!("{host}:{port}"))
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

/// What a reload reaches (kept connections, SOCKS5 requests, tokens), and what `--watch`
/// sees.
mod what_a_reload_reaches {
    use super::*;

    fn wait_loaded(bridge: &Bridge, n: usize) {
        wait_for(bridge, "policy_loaded", n);
    }

    /// One absolute-form GET on a kept-alive client connection; the status line.
    fn get(s: &mut TcpStream, host: &str, port: u16) -> String {
        write!(
            s,
            "GET http://{host}:{port}/hello HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
        )
        .unwrap();
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).unwrap();
            got.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&got).to_string();
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).unwrap();
        head.lines().next().unwrap().to_owned()
    }

    fn connected(bridge: &Bridge) -> TcpStream {
        let s = TcpStream::connect(bridge.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    #[test]
    fn a_kept_upstream_is_not_reused_after_a_reload_that_denies_its_address() {
        let dir = TestDir::new("r38-kept");
        let http = HttpServer::start();
        let p = http.port();
        let before = allowlist(&["a.test"], p);
        let file = dir.write("allow.toml", &before);
        let bridge = Bridge::start_args(&dir, &["--allowlist".into(), file.display().to_string()]);
        let mut kept = connected(&bridge);
        assert!(get(&mut kept, "a.test", p).contains(" 200 "));
        dir.write(
            "allow.toml",
            &before.replacen("[hosts]", "deny = [\"127.0.0.1\"]\n[hosts]", 1),
        );
        hangup(&bridge);
        wait_loaded(&bridge, 2);
        assert!(
            get(&mut connected(&bridge), "a.test", p).contains(" 502 "),
            "control"
        );
        let status = get(&mut kept, "a.test", p);
        assert!(
            status.contains(" 502 "),
            "on the kept connection after the reload: {status}"
        );
    }

    fn socks_connect(s: &mut TcpStream, host: &str, port: u16) -> u8 {
        let mut req = vec![5, 1, 0, 3, u8::try_from(host.len()).unwrap()];
        req.extend_from_slice(host.as_bytes());
        req.extend_from_slice(&port.to_be_bytes());
        s.write_all(&req).unwrap();
        let mut reply = [0u8; 10];
        s.read_exact(&mut reply).unwrap();
        reply[1]
    }

    #[test]
    fn a_socks5_request_after_a_reload_is_judged_under_the_new_policy() {
        let dir = TestDir::new("r38-socks");
        let http = HttpServer::start();
        let p = http.port();
        let file = dir.write("allow.toml", &allowlist(&["a.test"], p));
        let bridge = Bridge::start_args(&dir, &["--allowlist".into(), file.display().to_string()]);
        // Positive control: allowed before the reload.
        let mut first = connected(&bridge);
        first.write_all(&[5, 1, 0]).unwrap();
        let mut method = [0u8; 2];
        first.read_exact(&mut method).unwrap();
        assert_eq!(socks_connect(&mut first, "a.test", p), 0);
        let mut waiting = connected(&bridge);
        waiting.write_all(&[5, 1, 0]).unwrap();
        waiting.read_exact(&mut method).unwrap();
        dir.write("allow.toml", &allowlist(&["b.test"], p));
        hangup(&bridge);
        wait_loaded(&bridge, 2);
        assert_ne!(
            socks_connect(&mut waiting, "a.test", p),
            0,
            "passed after the reload"
        );
    }

    #[test]
    fn a_revoked_token_does_not_name_a_tenant_on_a_socks5_connection_opened_before() {
        let dir = TestDir::new("r38-token");
        let http = HttpServer::start();
        let p = http.port();
        dir.write("a.toml", &allowlist(&["a.test"], p));
        let tenants = |token: &str| {
            format!(
                "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"sha256:{}\"]\n",
                sha256_hex(token.as_bytes())
            )
        };
        let file = dir.write("tenants.toml", &tenants("old-token"));
        let bridge = Bridge::start_args(&dir, &["--tenants".into(), file.display().to_string()]);
        let mut s = connected(&bridge);
        s.write_all(&[5, 1, 2]).unwrap();
        let mut reply = [0u8; 2];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply, [5, 2]);
        dir.write("tenants.toml", &tenants("new-token"));
        hangup(&bridge);
        wait_loaded(&bridge, 2);
        let auth = |user: &[u8], pass: &[u8]| {
            let mut auth = vec![1, u8::try_from(user.len()).unwrap()];
            auth.extend_from_slice(user);
            auth.push(u8::try_from(pass.len()).unwrap());
            auth.extend_from_slice(pass);
            auth
        };
        s.write_all(&auth(b"team-a", b"old-token")).unwrap();
        s.read_exact(&mut reply).unwrap();
        assert_ne!(reply[1], 0, "old token accepted after the reload");
        // Positive control: the new token names team-a.
        let mut fresh = connected(&bridge);
        fresh.write_all(&[5, 1, 2]).unwrap();
        fresh.read_exact(&mut reply).unwrap();
        fresh.write_all(&auth(b"team-a", b"new-token")).unwrap();
        fresh.read_exact(&mut reply).unwrap();
        assert_eq!(reply, [1, 0]);
    }

    #[test]
    fn watch_sees_a_change_made_during_a_reload() {
        let dir = TestDir::new("r38-watch");
        let http = HttpServer::start();
        let p = http.port();
        // Only widens the reload's window (as --allow-tool or many tenants do).
        dir.write(
            "big.toml",
            &"# padding padding padding padding padding padding\n".repeat(250_000),
        );
        let main = |rule: &str| {
            format!("include = [\"big.toml\"]\n{rule}\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n")
        };
        let file = dir.write(
            "allow.toml",
            &main(&format!("allow_private = [\"a.test:{p}\"]")),
        );
        let bridge = Bridge::start_args(
            &dir,
            &[
                "--allowlist".into(),
                file.display().to_string(),
                "--watch".into(),
            ],
        );
        hangup(&bridge);
        std::thread::sleep(Duration::from_millis(300));
        dir.write("allow.toml", &main("deny = [\"a.test\"]"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = get(&mut connected(&bridge), "a.test", p);
            if status.contains(" 502 ") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the file on disk denies a.test: {status}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    #[test]
    fn watch_sees_the_missing_include_that_refused_a_reload_appear() {
        let dir = TestDir::new("r38-include");
        let http = HttpServer::start();
        let p = http.port();
        let file = dir.write("allow.toml", &allowlist(&["a.test"], p));
        let bridge = Bridge::start_args(
            &dir,
            &[
                "--allowlist".into(),
                file.display().to_string(),
                "--watch".into(),
            ],
        );
        std::thread::sleep(Duration::from_millis(1500));
        let with_include = format!("include = [\"new.toml\"]\n{}", allowlist(&["a.test"], p));
        dir.write("allow.toml", &with_include);
        wait_for(&bridge, "policy_reload_failed", 1);
        dir.write("new.toml", &format!("allow_private = [\"b.test:{p}\"]\n"));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let status = get(&mut connected(&bridge), "b.test", p);
            if status.contains(" 200 ") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "new.toml allows b.test: {status}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    #[test]
    fn a_fifo_in_a_policy_files_place_is_refused_not_waited_on() {
        let dir = TestDir::new("r38-fifo");
        let http = HttpServer::start();
        let p = http.port();
        let file = dir.write("allow.toml", &allowlist(&["a.test"], p));
        let mut bridge =
            Bridge::start_args(&dir, &["--allowlist".into(), file.display().to_string()]);
        std::fs::remove_file(&file).unwrap();
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        hangup(&bridge);
        let failed = wait_for(&bridge, "policy_reload_failed", 1);
        assert!(
            failed[0]["error"]
                .as_str()
                .unwrap()
                .contains("regular file"),
            "{failed:?}"
        );
        // The reload is not stuck: a good file loads at the next one, and the bridge ends.
        std::fs::remove_file(&file).unwrap();
        dir.write("allow.toml", &allowlist(&["b.test"], p));
        hangup(&bridge);
        wait_for(&bridge, "policy_loaded", 2);
        let started = Instant::now();
        bridge.stop();
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
