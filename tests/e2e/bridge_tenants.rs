//! A shared bridge (`netbox bridge --tenants FILE`): each tenant named by its clients'
//! credentials (Basic, Bearer, SOCKS5 user/password) or by a listener of its own, held to
//! its own allowlist, logged under its own session; a client that names no tenant gets 407
//! and never any policy. Real curl and raw sockets against a real local server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::upstream::HttpServer;
use crate::support::{connect_as, curl, netbox_bin, sha256_hex, stderr, stdout, Bridge, TestDir};

const SECRET_A: &str = "a-7Jq2vXb9pL4wZ0rT6yNc";
const SECRET_B: &str = "b-Qm3kH8sD1fG5jU2eW9xR";

fn digest(secret: &str) -> String {
    format!("sha256:{}", sha256_hex(secret.as_bytes()))
}

/// team-a may reach a.test, team-b b.test (both pinned to the local server); team-b also
/// has a listener of its own.
fn tenants(dir: &TestDir, port: u16) -> std::path::PathBuf {
    for (file, host) in [("a.toml", "a.test"), ("b.toml", "b.test")] {
        dir.write(
            file,
            &format!(
                "allow_private = [\"{host}:{port}\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n\
                 \"b.test\" = \"127.0.0.1\"\n"
            ),
        );
    }
    dir.write(
        "tenants.toml",
        &format!(
            "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"{}\"]\n\n\
             [tenants.team-b]\nallowlist = [\"b.toml\"]\nsecrets = [\"{}\"]\n\
             listen = [\"127.0.0.1:0\"]\n",
            digest(SECRET_A),
            digest(SECRET_B)
        ),
    )
}

fn start(dir: &TestDir, port: u16) -> Bridge {
    let file = tenants(dir, port);
    Bridge::start_args(dir, &["--tenants".into(), file.display().to_string()])
}

/// curl through the bridge's shared listener as `user` (None: no credentials); the
/// status curl printed and curl's exit code.
fn fetch(bridge: &Bridge, user: Option<&str>, url: &str, extra: &[&str]) -> (String, i32) {
    let proxy = match user {
        Some(user) => format!("http://{user}@{}", bridge.addr),
        None => bridge.proxy_url(),
    };
    let mut args = vec!["-o", "/dev/null", "-w", "%{http_code}", "-x", &proxy];
    args.extend_from_slice(extra);
    args.push(url);
    let out = curl(&args);
    (stdout(&out), out.status.code().unwrap_or(-1))
}

fn sessions_for(bridge: &Bridge, host: &str, at_least: usize) -> Vec<(String, String)> {
    bridge
        .events(at_least)
        .into_iter()
        .filter(|e| e["type"] == "net" && e["host"] == host)
        .map(|e| {
            (
                e["session"].as_str().unwrap_or("").to_owned(),
                e["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn each_tenant_reaches_only_its_own_hosts_and_is_logged_as_itself() {
    let dir = TestDir::new("tenants-policy");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, p);
    let a_user = format!("team-a:{SECRET_A}");
    let (a_url, b_url) = (
        format!("http://a.test:{p}/hello"),
        format!("http://b.test:{p}/hello"),
    );

    // Positive controls: each tenant reaches its own host, forwarded and tunnelled.
    assert_eq!(fetch(&bridge, Some(&a_user), &a_url, &[]).0, "200");
    assert_eq!(fetch(&bridge, Some(&a_user), &a_url, &["-p"]).0, "200");
    let bearer = format!("Proxy-Authorization: Bearer {SECRET_B}");
    assert_eq!(
        fetch(&bridge, None, &b_url, &["-p", "--proxy-header", &bearer]).0,
        "200"
    );
    assert_eq!(
        fetch(&bridge, None, &b_url, &["--proxy-header", &bearer]).0,
        "200"
    );
    // Neither reaches the other's.
    assert_eq!(fetch(&bridge, Some(&a_user), &b_url, &[]).0, "502");
    let (_, code) = fetch(&bridge, None, &a_url, &["-p", "--proxy-header", &bearer]);
    assert_eq!(code, 56, "a refused CONNECT fails curl's tunnel");

    let a = sessions_for(&bridge, "a.test", 3);
    let b = sessions_for(&bridge, "b.test", 3);
    assert!(
        a.contains(&("e2e/team-a".into(), "allowed_by_rule".into())),
        "{a:?}"
    );
    assert!(
        a.contains(&("e2e/team-b".into(), "not_allowed".into())),
        "{a:?}"
    );
    assert!(
        b.contains(&("e2e/team-b".into(), "allowed_by_rule".into())),
        "{b:?}"
    );
    assert!(
        b.contains(&("e2e/team-a".into(), "not_allowed".into())),
        "{b:?}"
    );
    assert!(bridge
        .stderr()
        .iter()
        .any(|l| l.contains("tenant team-a: session e2e/team-a, 1 allow rules")));

    // A tenant's own listener needs no credentials: its clients are that tenant's.
    let own = bridge.own_listener("team-b");
    let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", "-x", &own, &b_url]);
    assert_eq!(stdout(&out), "200");
    let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", "-x", &own, &a_url]);
    assert_eq!(stdout(&out), "502");
}

#[test]
fn a_client_that_names_no_tenant_gets_407_and_no_policy() {
    let dir = TestDir::new("tenants-407");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, p);
    let url = format!("http://a.test:{p}/hello");
    // Positive control: the right credentials pass.
    assert_eq!(
        fetch(&bridge, Some(&format!("team-a:{SECRET_A}")), &url, &[]).0,
        "200"
    );
    let refused = [
        None,
        Some("team-a:wrong-token".to_owned()),
        // A tenant's name with another tenant's token.
        Some(format!("team-a:{SECRET_B}")),
        Some(format!("nobody:{SECRET_A}")),
    ];
    for user in &refused {
        let (status, _) = fetch(&bridge, user.as_deref(), &url, &[]);
        assert_eq!(status, "407", "{user:?}");
        let (_, code) = fetch(&bridge, user.as_deref(), &url, &["-p"]);
        assert_eq!(code, 56, "{user:?}: a CONNECT without a tenant fails");
    }
    let wrong = format!("Proxy-Authorization: Bearer {SECRET_A}x");
    assert_eq!(
        fetch(&bridge, None, &url, &["--proxy-header", &wrong]).0,
        "407"
    );

    // The challenge says how to answer it.
    let out = curl(&[
        "-s",
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-x",
        &bridge.proxy_url(),
        &url,
    ]);
    let head = stdout(&out).to_ascii_lowercase();
    assert!(
        head.contains("proxy-authenticate: basic realm=\"netbox\""),
        "{head}"
    );
    assert!(
        head.contains("proxy-authenticate: bearer realm=\"netbox\""),
        "{head}"
    );

    let events = bridge.events(1 + 2 * refused.len() + 2);
    let refusals: Vec<_> = events
        .iter()
        .filter(|e| e["reason"] == "proxy_auth_required")
        .collect();
    assert_eq!(refusals.len(), 2 * refused.len() + 2, "{events:?}");
    for e in &refusals {
        assert_eq!(e["session"], "e2e", "logged under the shared listener: {e}");
        assert_eq!(e["decision"], "deny");
        assert_eq!(e["status"], 407);
    }
    // The log never holds a secret, right or wrong.
    let log = std::fs::read_to_string(&bridge.log).unwrap();
    for secret in [SECRET_A, SECRET_B, "wrong-token"] {
        assert!(!log.contains(secret), "{secret} in the log");
    }
    // Nothing was let through but the positive control.
    let allowed = events.iter().filter(|e| e["decision"] == "allow").count();
    assert_eq!(allowed, 1, "{events:?}");
}

#[test]
fn socks5_clients_name_their_tenant_with_user_and_password() {
    let dir = TestDir::new("tenants-socks");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, p);
    let socks = |user: &str| format!("socks5h://{user}{}", bridge.addr);
    let url = format!("http://a.test:{p}/hello");
    let out = curl(&["-x", &socks(&format!("team-a:{SECRET_A}@")), &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");
    for user in ["", "team-a:nope@", &format!("team-b:{SECRET_B}@")] {
        let out = curl(&["-x", &socks(user), &url]);
        assert!(!out.status.success(), "{user:?} got through");
    }
    let events = bridge.events(4);
    let sessions: Vec<_> = events
        .iter()
        .map(|e| (e["session"].clone(), e["reason"].clone()))
        .collect();
    assert!(sessions.contains(&("e2e/team-a".into(), "allowed_by_rule".into())));
    assert!(sessions.contains(&("e2e".into(), "proxy_auth_required".into())));
    // team-b is named, but its policy refuses a.test.
    assert!(sessions.contains(&("e2e/team-b".into(), "not_allowed".into())));
}

#[test]
fn one_connection_serves_one_tenant() {
    let dir = TestDir::new("tenants-switch");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, p);
    let mut stream = TcpStream::connect(bridge.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = |host: &str, user: &str, secret: &str| {
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"));
        format!(
            "GET http://{host}:{p}/hello HTTP/1.1\r\nHost: {host}:{p}\r\n\
             Proxy-Authorization: Basic {basic}\r\n\r\n"
        )
    };
    // Positive control: team-a's request on the connection is served.
    stream
        .write_all(request("a.test", "team-a", SECRET_A).as_bytes())
        .unwrap();
    let mut first = Vec::new();
    while !first.ends_with(b"hello from upstream\n") {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&first));
        first.extend_from_slice(&chunk[..n]);
    }
    assert!(
        first.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&first)
    );
    // team-b on the same connection is refused, though its credentials are good.
    stream
        .write_all(request("b.test", "team-b", SECRET_B).as_bytes())
        .unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.starts_with("HTTP/1.1 407"), "{rest}");
    assert!(rest.contains("another tenant"), "{rest}");
}

#[test]
fn a_bridge_with_tenants_takes_no_other_policy_and_says_what_is_wrong() {
    let dir = TestDir::new("tenants-mistakes");
    let file = tenants(&dir, 9);
    let broken = dir.write(
        "broken.toml",
        "[tenants.team-a]\nallowlist = [\"a.toml\"]\n",
    );
    let cases: [(Vec<String>, &str); 3] = [
        (
            vec![
                "--tenants".into(),
                file.display().to_string(),
                "--allow".into(),
                "x.test".into(),
            ],
            "--allow with --tenants",
        ),
        (
            vec!["--tenants".into(), broken.display().to_string()],
            "no client could name it",
        ),
        (vec!["--allow".into(), "x.test".into()], "--listen"),
    ];
    for (args, said) in cases {
        let mut command = Command::new(netbox_bin());
        command.arg("bridge");
        if args[0] == "--tenants" {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        let out = command.args(&args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let text = stderr(&out);
        assert!(text.contains(said), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{text}");
    }
}

#[test]
fn a_tenant_past_its_own_connection_limit_is_refused_and_others_are_not() {
    let dir = TestDir::new("tenants-limit");
    let http = HttpServer::start();
    let p = http.port();
    let file = tenants(&dir, p);
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text.replacen(
        "[tenants.team-a]\n",
        "[tenants.team-a]\nmax_connections = 1\n",
        1,
    );
    std::fs::write(&file, text).unwrap();
    let bridge = Bridge::start_args(&dir, &["--tenants".into(), file.display().to_string()]);
    let connect = |user: &str, secret: &str, host: &str| {
        connect_as(bridge.addr, &format!("{host}:{p}"), user, secret)
    };
    // Positive control: team-a's one tunnel opens.
    let (status, held) = connect("team-a", SECRET_A, "a.test");
    assert_eq!(status, "HTTP/1.1 200");
    let (status, _) = connect("team-a", SECRET_A, "a.test");
    assert_eq!(status, "HTTP/1.1 503", "team-a's second connection");
    // Another tenant still has its places.
    let (status, _other) = connect("team-b", SECRET_B, "b.test");
    assert_eq!(status, "HTTP/1.1 200");
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = connect("team-a", SECRET_A, "a.test");
        if status == "HTTP/1.1 200" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "team-a's place never came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let limited = bridge
        .events(4)
        .into_iter()
        .filter(|e| e["reason"] == "connection_limit")
        .count();
    assert!(limited >= 1);
}

/// Tenants kept apart: places, limits, and what a refusal says.
mod places_limits_and_refusals {
    use super::*;

    fn connect(bridge: &Bridge, user: &str, secret: &str, target: &str) -> (String, TcpStream) {
        connect_as(bridge.addr, target, user, secret)
    }

    fn socks_connect(bridge: &Bridge, user: &str, secret: &str, host: &str, p: u16) -> u8 {
        let mut s = TcpStream::connect(bridge.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&[5, 1, 2]).unwrap();
        let mut reply = [0u8; 2];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply, [5, 2]);
        let mut auth = vec![1, u8::try_from(user.len()).unwrap()];
        auth.extend_from_slice(user.as_bytes());
        auth.push(u8::try_from(secret.len()).unwrap());
        auth.extend_from_slice(secret.as_bytes());
        s.write_all(&auth).unwrap();
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply, [1, 0], "authenticated");
        let mut request = vec![5, 1, 0, 3, u8::try_from(host.len()).unwrap()];
        request.extend_from_slice(host.as_bytes());
        request.extend_from_slice(&p.to_be_bytes());
        s.write_all(&request).unwrap();
        let mut answer = [0u8; 10];
        s.read_exact(&mut answer).unwrap();
        answer[1]
    }

    fn with_limit(dir: &TestDir, p: u16, limit: &str) -> Bridge {
        let file = tenants(dir, p);
        Bridge::start_args(
            dir,
            &[
                "--tenants".into(),
                file.display().to_string(),
                "--max-connections".into(),
                limit.into(),
            ],
        )
    }

    #[test]
    fn socks5_past_the_bridge_limit_is_refused_as_http_is() {
        let dir = TestDir::new("r37-socks-limit");
        let http = HttpServer::start();
        let p = http.port();
        // Each tenant may have both places, so that only the bridge's limit is reached.
        let file = tenants(&dir, p);
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.replace("allowlist = ", "max_connections = 2\nallowlist = ");
        std::fs::write(&file, text).unwrap();
        let bridge = Bridge::start_args(
            &dir,
            &[
                "--tenants".into(),
                file.display().to_string(),
                "--max-connections".into(),
                "2".into(),
            ],
        );
        // Positive control: a SOCKS5 tunnel opens while there is room.
        assert_eq!(socks_connect(&bridge, "team-a", SECRET_A, "a.test", p), 0);
        std::thread::sleep(Duration::from_millis(300));
        // The bridge's two places, one tunnel of each tenant's (a connection that has not
        // named a tenant takes none).
        let (status, _held_a) = connect(&bridge, "team-a", SECRET_A, &format!("a.test:{p}"));
        assert_eq!(status, "HTTP/1.1 200");
        let (status, _held_b) = connect(&bridge, "team-b", SECRET_B, &format!("b.test:{p}"));
        assert_eq!(status, "HTTP/1.1 200");
        let (status, _) = connect(&bridge, "team-a", SECRET_A, &format!("a.test:{p}"));
        assert_eq!(status, "HTTP/1.1 503");
        let code = socks_connect(&bridge, "team-a", SECRET_A, "a.test", p);
        assert_ne!(
            code, 0,
            "a SOCKS5 tunnel was opened past --max-connections 2"
        );
    }

    #[test]
    fn one_tenant_does_not_take_the_other_tenants_places() {
        let dir = TestDir::new("r37-starve");
        let http = HttpServer::start();
        let p = http.port();
        // Two tenants with no budget of their own: one place each of the bridge's two.
        let bridge = with_limit(&dir, p, "2");
        let (status, _held) = connect(&bridge, "team-b", SECRET_B, &format!("b.test:{p}"));
        assert_eq!(status, "HTTP/1.1 200");
        let (status, _) = connect(&bridge, "team-b", SECRET_B, &format!("b.test:{p}"));
        assert_eq!(status, "HTTP/1.1 503", "team-b past its share");
        let (status, _) = connect(&bridge, "team-a", SECRET_A, &format!("a.test:{p}"));
        assert_eq!(status, "HTTP/1.1 200", "team-a lost its place to team-b");
        // The refusal is the tenant's, and names its budget.
        let refused = bridge
            .events(3)
            .into_iter()
            .find(|e| e["reason"] == "connection_limit")
            .expect("the refusal is logged");
        assert_eq!(refused["session"], "e2e/team-b");
        assert!(refused["detail"]
            .as_str()
            .unwrap()
            .contains("max_connections"));
    }

    #[test]
    fn a_407_does_not_say_whether_a_tenant_name_exists_and_has_one_content_type() {
        let dir = TestDir::new("r37-names");
        let http = HttpServer::start();
        let p = http.port();
        let bridge = start(&dir, p);
        let url = format!("http://a.test:{p}/");
        let head_and_body = |user: &str| {
            let proxy = format!("http://{user}:wrong@{}", bridge.addr);
            let out = curl(&["-s", "-D", "-", "-x", &proxy, &url]);
            let text = stdout(&out).to_ascii_lowercase();
            // Without the date, which differs by the second.
            text.lines()
                .filter(|l| !l.starts_with("date:"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let known = head_and_body("team-a");
        assert!(known.starts_with("http/1.1 407"), "{known}");
        assert_eq!(known, head_and_body("nobody"));
        assert_eq!(known.matches("content-type:").count(), 1, "{known}");
        assert_eq!(known.matches("proxy-authenticate:").count(), 2, "{known}");
    }

    #[test]
    fn a_tenants_own_listener_is_not_reachable_through_the_bridge() {
        let dir = TestDir::new("r37-hop");
        let http = HttpServer::start();
        let p = http.port();
        // team-a may reach every loopback port: the bridge's own listeners still not.
        dir.write(
            "a.toml",
            &format!(
                "allow = [\"127.0.0.0/8:1-65535\"]\nallow_private = [\"a.test:{p}\"]\n\
                 [hosts]\n\"a.test\" = \"127.0.0.1\"\n"
            ),
        );
        dir.write(
            "b.toml",
            &format!("allow_private = [\"b.test:{p}\"]\n[hosts]\n\"b.test\" = \"127.0.0.1\"\n"),
        );
        let file = dir.write(
            "tenants.toml",
            &format!(
                "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"{}\"]\n\n\
                 [tenants.team-b]\nallowlist = [\"b.toml\"]\nlisten = [\"127.0.0.1:0\"]\n",
                digest(SECRET_A)
            ),
        );
        let bridge = Bridge::start_args(&dir, &["--tenants".into(), file.display().to_string()]);
        let own = bridge.own_listener("team-b");
        // Positive control: team-a reaches another loopback port its rule opens.
        let (status, _) = connect(&bridge, "team-a", SECRET_A, &format!("127.0.0.1:{p}"));
        assert_eq!(status, "HTTP/1.1 200");
        for target in [own.clone(), bridge.addr.to_string()] {
            let (status, _) = connect(&bridge, "team-a", SECRET_A, &target);
            assert_eq!(status, "HTTP/1.1 502", "{target}");
        }
        let refused: Vec<_> = bridge
            .events(3)
            .into_iter()
            .filter(|e| e["detail"].as_str().unwrap_or("").contains("own listener"))
            .collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
    }

    #[test]
    fn a_client_that_names_no_tenant_holds_no_place_past_one_answer() {
        let dir = TestDir::new("r37-health");
        let http = HttpServer::start();
        let p = http.port();
        let bridge = start(&dir, p);
        let mut s = TcpStream::connect(bridge.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET /__netbox/health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let all = String::from_utf8_lossy(&all);
        assert!(all.starts_with("HTTP/1.1 200"), "{all}");
        assert!(
            all.to_ascii_lowercase().contains("connection: close"),
            "{all}"
        );
    }
}

#[test]
fn only_a_bridge_that_asks_every_client_may_listen_beyond_loopback() {
    // Without tenants, a listener (or the admin one) other machines could reach is an
    // open proxy (or an open window): refused before anything is bound.
    for flag in ["--listen", "--admin"] {
        let mut command = Command::new(netbox_bin());
        command.args(["bridge", "--allow", "x.test"]);
        if flag == "--admin" {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        let out = command
            .args([flag, "0.0.0.0:0"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{flag}");
        let text = stderr(&out);
        assert!(
            text.contains("must ask every client who it is: --tenants"),
            "{text}"
        );
    }

    // With tenants, every address: reached here through loopback only. Every client
    // names its tenant there too, and no tenant reaches the bridge itself through it,
    // whatever its rules open (team-a's open all of 127.0.0.0/8).
    let dir = TestDir::new("tenants-every-address");
    let http = HttpServer::start();
    let p = http.port();
    let file = tenants(&dir, p);
    dir.write(
        "a.toml",
        &format!(
            "allow = [\"127.0.0.0/8:*\"]\nallow_private = [\"a.test:{p}\"]\n\
             [hosts]\n\"a.test\" = \"127.0.0.1\"\n"
        ),
    );
    let bridge = Bridge::start_args(
        &dir,
        &[
            "--tenants".into(),
            file.display().to_string(),
            "--listen".into(),
            "0.0.0.0:0".into(),
        ],
    );
    let wildcard = {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let found = bridge.stderr().iter().find_map(|l| {
                l.split("listening on 0.0.0.0:")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|port| port.parse::<u16>().ok())
            });
            if let Some(port) = found {
                break std::net::SocketAddr::from(([127, 0, 0, 1], port));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                bridge.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (status, _) = connect_as(wildcard, &format!("a.test:{p}"), "team-a", SECRET_A);
    assert_eq!(status, "HTTP/1.1 200");
    let (status, _) = connect_as(wildcard, &format!("a.test:{p}"), "team-a", "wrong");
    assert_eq!(status, "HTTP/1.1 407");
    // The rules open 127.0.0.1 at any port; the positive control is the server there.
    let (status, _) = connect_as(wildcard, &format!("127.0.0.1:{p}"), "team-a", SECRET_A);
    assert_eq!(status, "HTTP/1.1 200");
    for own in [wildcard.port(), bridge.addr.port()] {
        let (status, _) = connect_as(wildcard, &format!("127.0.0.1:{own}"), "team-a", SECRET_A);
        assert_eq!(status, "HTTP/1.1 502", "{own}");
    }
    let refused: Vec<_> = bridge
        .events(5)
        .into_iter()
        .filter(|e| e["host"] == "127.0.0.1" && e["decision"] == "deny")
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused.iter().all(|e| e["detail"]
        .as_str()
        .unwrap()
        .contains("this bridge's own listener")));
}
