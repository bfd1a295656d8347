//! The bridge's allowlist, end to end: real curl through the real `netbox bridge` to real
//! local servers pinned by name. Each refusal has a positive control beside it.

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;

use crate::support::upstream::HttpServer;
use crate::support::{curl, netbox_bin, raw_exchange, read_head, stderr, stdout, Bridge, TestDir};

/// A policy that names registry.test on `port`, pinned to loopback and opened on purpose.
fn registry_policy(port: u16) -> String {
    format!(
        "allow = [\"registry.test:{port}\", \"127.0.0.1:{port}\"]\n\
         deny = [\"evil.test\"]\n\
         [hosts]\n\"registry.test\" = \"127.0.0.1\"\n\"evil.test\" = \"127.0.0.1\"\n"
    )
}

#[test]
fn allowed_connect_over_tls_and_plain_http_pass() {
    let dir = TestDir::new("allowed");
    let tls = HttpServer::start_tls(&dir.path, &["registry.test"]);
    let http = HttpServer::start();
    let policy = format!(
        "allow = [\"registry.test:{}\", \"127.0.0.1:{}\", \"plain.test:{}\", \"127.0.0.1:{}\"]\n\
         [hosts]\n\"registry.test\" = \"127.0.0.1\"\n\"plain.test\" = \"127.0.0.1\"\n",
        tls.port(),
        tls.port(),
        http.port(),
        http.port()
    );
    let bridge = Bridge::start(&dir, &policy, &[]);

    let https_url = format!("https://registry.test:{}/hello", tls.port());
    let ca = tls.ca.as_ref().unwrap().display().to_string();
    let out = curl(&["-x", &bridge.proxy_url(), "--cacert", &ca, &https_url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");

    let http_url = format!("http://plain.test:{}/hello", http.port());
    let out = curl(&["-x", &bridge.proxy_url(), &http_url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");

    let event = bridge.event_for("registry.test");
    assert_eq!(event["proto"], "http_connect");
    assert_eq!(event["decision"], "allow");
    assert_eq!(event["reason"], "allowed_by_rule");
    assert_eq!(event["rule"]["line"], 1);
    assert_eq!(event["resolved"][0], "127.0.0.1");
    assert_eq!(event["dialed"], format!("127.0.0.1:{}", tls.port()));
    assert_eq!(event["end"], "closed");
    assert!(event["bytes_up"].as_u64().unwrap() > 100, "{event}");
    assert!(event["bytes_down"].as_u64().unwrap() > 100, "{event}");
    assert_eq!(event["session"], "e2e");

    let event = bridge.event_for("plain.test");
    assert_eq!(event["proto"], "http_forward");
    assert_eq!(event["method"], "GET");
    assert_eq!(event["status"], 200);
    assert_eq!(event["decision"], "allow");
}

#[test]
fn denied_host_gets_502_reset_and_a_deny_line() {
    let dir = TestDir::new("denied");
    let http = HttpServer::start();
    let bridge = Bridge::start(&dir, &registry_policy(http.port()), &[]);

    // Positive control: the allowed name passes through the same bridge.
    let ok = curl(&[
        "-x",
        &bridge.proxy_url(),
        "-p",
        &format!("http://registry.test:{}/hello", http.port()),
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));

    let out = curl(&["-x", &bridge.proxy_url(), "https://blocked.test/"]);
    assert_eq!(out.status.code(), Some(56), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("CONNECT tunnel failed, response 502"),
        "{}",
        stderr(&out)
    );
    let event = bridge.event_for("blocked.test");
    assert_eq!(event["decision"], "deny");
    assert_eq!(event["reason"], "not_allowed");
    assert_eq!(event["port"], 443);
    assert_eq!(event["end"], "refused");
    assert_eq!(event["dialed"], serde_json::Value::Null);

    // Denied by an explicit rule: the log names the file and line of that rule.
    let url = format!("http://evil.test:{}/hello", http.port());
    let out = curl(&["-x", &bridge.proxy_url(), "-p", &url]);
    assert_eq!(out.status.code(), Some(56));
    let event = bridge.event_for("evil.test");
    assert_eq!(event["reason"], "denied_by_rule");
    assert_eq!(event["rule"]["line"], 2);
    assert_eq!(event["rule"]["text"], "evil.test");
    assert!(event["rule"]["file"]
        .as_str()
        .unwrap()
        .ends_with("allow.toml"));

    // The refusal itself: status, headers, one-line body, then a TCP reset.
    let (answer, reset) = raw_exchange(
        bridge.addr,
        b"CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("x-netbox-reason: policy\r\n"),
        "{answer}"
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("proxy-status: netbox; error=http_request_denied"),
        "{answer}"
    );
    assert!(answer.ends_with("netbox: not on allowlist\n"), "{answer}");
    assert!(reset, "a refusal must end in a TCP reset");
    assert!(bridge
        .stderr()
        .iter()
        .any(|l| l == "netbox: blocked CONNECT blocked.test:443 (not on allowlist)"));
}

#[test]
fn wildcard_matches_subdomains_not_the_apex() {
    let dir = TestDir::new("wildcard");
    let http = HttpServer::start();
    let p = http.port();
    let policy = format!(
        "allow = [\"*.cdn.test:{p}\", \"127.0.0.1:{p}\"]\n[hosts]\n\
         \"a.cdn.test\" = \"127.0.0.1\"\n\"x.y.cdn.test\" = \"127.0.0.1\"\n\
         \"cdn.test\" = \"127.0.0.1\"\n\"xcdn.test\" = \"127.0.0.1\"\n"
    );
    let bridge = Bridge::start(&dir, &policy, &[]);
    for (host, allowed) in [
        ("a.cdn.test", true),
        ("x.y.cdn.test", true),
        ("cdn.test", false),
        ("xcdn.test", false),
    ] {
        let out = curl(&[
            "-x",
            &bridge.proxy_url(),
            "-p",
            &format!("http://{host}:{p}/hello"),
        ]);
        assert_eq!(out.status.success(), allowed, "{host}: {}", stderr(&out));
    }
}

#[test]
fn port_rules_limit_ports() {
    let dir = TestDir::new("ports");
    let open = HttpServer::start();
    let other = HttpServer::start();
    let policy = format!(
        "allow = [\"registry.test:{}\", \"127.0.0.0/8:*\"]\n[hosts]\n\"registry.test\" = \"127.0.0.1\"\n",
        open.port()
    );
    let bridge = Bridge::start(&dir, &policy, &[]);
    let url = |port: u16| format!("http://registry.test:{port}/hello");
    let out = curl(&["-x", &bridge.proxy_url(), "-p", &url(open.port())]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = curl(&["-x", &bridge.proxy_url(), "-p", &url(other.port())]);
    assert_eq!(out.status.code(), Some(56));
    // A rule with no port covers 80 and 443 only.
    let bridge2 = Bridge::start(
        &TestDir::new("ports-default"),
        "allow = [\"registry.test\"]\n",
        &[],
    );
    let (answer, _) = raw_exchange(
        bridge2.addr,
        format!(
            "CONNECT registry.test:{0} HTTP/1.1\r\nHost: registry.test:{0}\r\n\r\n",
            open.port()
        )
        .as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
}

#[test]
fn ip_literal_and_cidr_rules() {
    let dir = TestDir::new("cidr");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = Bridge::start(
        &dir,
        &format!("allow = [\"127.0.0.0/8:{p}\"]\ndeny = [\"127.0.0.2\"]\n"),
        &[],
    );
    for (host, allowed) in [
        ("127.0.0.1", true),
        ("0x7f.1", true),
        ("2130706433", true),
        ("[::ffff:127.0.0.1]", true),
        ("127.0.0.2", false),
        ("127.2", false),
        ("[::1]", false),
    ] {
        let request = format!("CONNECT {host}:{p} HTTP/1.1\r\nHost: {host}:{p}\r\n\r\n");
        let mut stream = TcpStream::connect(bridge.addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let head = read_head(&mut stream);
        assert_eq!(head.starts_with("HTTP/1.1 200"), allowed, "{host}: {head}");
    }
    // A plain-HTTP literal too.
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        &format!("http://127.0.0.1:{p}/hello"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn pinned_name_to_loopback_needs_a_cidr_rule() {
    let dir = TestDir::new("pinned");
    let http = HttpServer::start();
    let p = http.port();
    let hosts = "[hosts]\n\"registry.test\" = \"127.0.0.1\"\n";
    let without = Bridge::start(
        &dir,
        &format!("allow = [\"registry.test:{p}\"]\n{hosts}"),
        &[],
    );
    let url = format!("http://registry.test:{p}/hello");
    let out = curl(&["-x", &without.proxy_url(), "-p", &url]);
    assert_eq!(out.status.code(), Some(56), "{}", stderr(&out));
    let event = without.event_for("registry.test");
    assert_eq!(event["reason"], "non_public_address");
    assert_eq!(event["refused_class"], "loopback");
    assert_eq!(event["resolved"][0], "127.0.0.1");
    let (answer, _) = raw_exchange(
        without.addr,
        format!("CONNECT registry.test:{p} HTTP/1.1\r\nHost: registry.test:{p}\r\n\r\n").as_bytes(),
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("x-netbox-reason: private-address"),
        "{answer}"
    );
    assert!(
        answer.contains("error=destination_ip_prohibited"),
        "{answer}"
    );

    // Positive control: the same request with the loopback address opened on purpose.
    let dir2 = TestDir::new("pinned-open");
    let with = Bridge::start(
        &dir2,
        &format!("allow = [\"registry.test:{p}\", \"127.0.0.1/32:{p}\"]\n{hosts}"),
        &[],
    );
    let out = curl(&["-x", &with.proxy_url(), "-p", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let event = with.event_for("registry.test");
    assert_eq!(event["decision"], "allow");
    assert_eq!(event["rule"]["text"], format!("registry.test:{p}"));
    assert_eq!(event["opened_by"]["text"], format!("127.0.0.1/32:{p}"));
}

#[test]
fn every_spelling_of_a_name_is_the_same_name() {
    let dir = TestDir::new("spellings");
    let http = HttpServer::start();
    let p = http.port();
    let policy = format!(
        "allow = [\"bücher.test:{p}\", \"registry.test:{p}\", \"127.0.0.1:{p}\"]\n\
         deny = [\"evil.test\"]\n[hosts]\n\"xn--bcher-kva.test\" = \"127.0.0.1\"\n\
         \"registry.test\" = \"127.0.0.1\"\n\"evil.test\" = \"127.0.0.1\"\n"
    );
    let bridge = Bridge::start(&dir, &policy, &[]);
    for (host, allowed) in [
        ("registry.test", true),
        ("REGISTRY.Test", true),
        ("registry.test.", true),
        ("xn--bcher-kva.test", true),
        ("XN--BCHER-KVA.TEST.", true),
        ("evil.test", false),
        ("EVIL.TEST", false),
        ("evil.test.", false),
        ("Evil.Test.", false),
    ] {
        let mut stream = TcpStream::connect(bridge.addr).unwrap();
        stream
            .write_all(
                format!("CONNECT {host}:{p} HTTP/1.1\r\nHost: {host}:{p}\r\n\r\n").as_bytes(),
            )
            .unwrap();
        let head = read_head(&mut stream);
        assert_eq!(head.starts_with("HTTP/1.1 200"), allowed, "{host}: {head}");
    }
}

#[test]
fn refusal_status_is_a_setting() {
    let dir = TestDir::new("status");
    let bridge = Bridge::start(&dir, "", &["--refusal-status", "403"]);
    let out = curl(&["-x", &bridge.proxy_url(), "https://blocked.test/"]);
    assert_eq!(out.status.code(), Some(56));
    assert!(stderr(&out).contains("response 403"), "{}", stderr(&out));
}

#[test]
fn forwarded_requests_drop_hop_by_hop_headers() {
    let dir = TestDir::new("hop");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = Bridge::start(
        &dir,
        &format!("allow = [\"plain.test:{p}\", \"127.0.0.1:{p}\"]\n[hosts]\n\"plain.test\" = \"127.0.0.1\"\n"),
        &[],
    );
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        "-H",
        "Connection: X-Secret",
        "-H",
        "X-Secret: leaked",
        "-H",
        "X-Kept: yes",
        "-H",
        "Proxy-Authorization: Basic c2VjcmV0",
        "-H",
        "Keep-Alive: 300",
        &format!("http://plain.test:{p}/headers"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = stdout(&out).to_ascii_lowercase();
    assert!(seen.starts_with("get /headers http/1.1\r\n"), "{seen}");
    assert!(seen.contains("x-kept: yes"), "{seen}");
    assert!(seen.contains(&format!("host: plain.test:{p}")), "{seen}");
    for gone in [
        "x-secret",
        "proxy-authorization",
        "keep-alive",
        "proxy-connection",
    ] {
        assert!(!seen.contains(gone), "{gone} forwarded: {seen}");
    }
}

#[test]
fn invalid_allowlist_is_refused_with_file_and_line() {
    let dir = TestDir::new("invalid");
    let bad = dir.write(
        "bad.toml",
        "allow = [\n  \"ok.test\",\n  \"a.*.test\",\n]\n",
    );
    let out = Command::new(netbox_bin())
        .args(["bridge", "--listen", "127.0.0.1:0", "--allowlist"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("netbox: ") && first.contains("bad.toml:3: allow rule:"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let out = Command::new(netbox_bin())
        .args([
            "bridge",
            "--listen",
            "127.0.0.1:0",
            "--allow",
            "a.test:99999",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("invalid rule \"a.test:99999\" in --allow"),
        "{}",
        stderr(&out)
    );

    let out = Command::new(netbox_bin())
        .args(["bridge", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("only loopback"), "{}", stderr(&out));
}

/// `allow_private`: a name allowed that way reaches the non-public address its
/// DNS gives (here pinned to loopback), without an IP rule that would open the address for
/// every name. Another name pinned to the same address, allowed the ordinary way, stays
/// refused, and its refusal says the exact flag and allowlist line that would open it.
#[test]
fn allow_private_opens_a_private_address_for_its_name_only() {
    let dir = TestDir::new("allow-private");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = Bridge::start(
        &dir,
        &format!(
            "allow_private = [\"mirror.test:{p}\"]\nallow = [\"other.test:{p}\"]\n\
             [hosts]\n\"mirror.test\" = \"127.0.0.1\"\n\"other.test\" = \"127.0.0.1\"\n"
        ),
        &[],
    );
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        &format!("http://mirror.test:{p}/hello"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");
    let event = bridge.event_for("mirror.test");
    assert_eq!(event["decision"], "allow");
    assert_eq!(event["opened_by"]["text"], format!("mirror.test:{p}"));

    // The same address under another name, and as a literal: still closed.
    for url in [
        format!("http://other.test:{p}/hello"),
        format!("http://127.0.0.1:{p}/hello"),
    ] {
        let out = curl(&[
            "-x",
            &bridge.proxy_url(),
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url,
        ]);
        assert_eq!(stdout(&out), "502", "{url}: {}", stderr(&out));
    }
    let (answer, _) = raw_exchange(
        bridge.addr,
        format!("CONNECT other.test:{p} HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n").as_bytes(),
    );
    let hint = format!("--allow-private other.test:{p}");
    assert!(answer.contains(&hint), "{answer}");
    // The body says it as written in a file.
    let line = format!("allow_private = [\"other.test:{p}\"]");
    assert!(answer.contains(&line), "{answer}");
}
