//! Broken, ambiguous and hostile requests: each gets the right status (or is dropped), none
//! causes an upstream dial, and the bridge keeps serving afterwards.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::upstream::HttpServer;
use crate::support::{curl, raw_exchange, stderr, Bridge, TestDir};

fn policy(port: u16) -> String {
    format!(
        "allow = [\"registry.test:{port}\", \"127.0.0.1:{port}\"]\n[hosts]\n\"registry.test\" = \"127.0.0.1\"\n"
    )
}

/// The bridge still answers a good request: the positive control after each abuse.
fn assert_still_serving(bridge: &mut Bridge, port: u16) {
    assert!(bridge.is_alive(), "bridge died");
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        "-p",
        &format!("http://registry.test:{port}/hello"),
    ]);
    assert!(
        out.status.success(),
        "bridge stopped serving: {}",
        stderr(&out)
    );
}

#[test]
fn malformed_requests_get_400_and_never_dial() {
    let dir = TestDir::new("malformed");
    let http = HttpServer::start();
    let p = http.port();
    let mut bridge = Bridge::start(&dir, &policy(p), &[]);
    let cases: Vec<(&str, String)> = vec![
        ("garbage", "\x16\x03\x01\x02\x00garbage\r\n\r\n".into()),
        ("no port", "CONNECT registry.test HTTP/1.1\r\n\r\n".into()),
        ("bad port", format!("CONNECT registry.test:{p}x HTTP/1.1\r\n\r\n")),
        ("userinfo", format!("CONNECT user@registry.test:{p} HTTP/1.1\r\n\r\n")),
        ("absolute connect", format!("CONNECT http://registry.test:{p}/ HTTP/1.1\r\n\r\n")),
        (
            "repeated host",
            format!("CONNECT registry.test:{p} HTTP/1.1\r\nHost: registry.test:{p}\r\nHost: evil.test:{p}\r\n\r\n"),
        ),
        (
            "host mismatch",
            format!("CONNECT registry.test:{p} HTTP/1.1\r\nHost: evil.test:{p}\r\n\r\n"),
        ),
        (
            "forward host mismatch",
            format!("GET http://registry.test:{p}/hello HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
        ),
        ("https absolute", "GET https://registry.test/ HTTP/1.1\r\n\r\n".into()),
        ("origin form", "GET /hello HTTP/1.1\r\nHost: registry.test\r\n\r\n".into()),
        ("junk host", "CONNECT ../..:443 HTTP/1.1\r\n\r\n".into()),
        ("nul", "CONNECT regi\0stry.test:443 HTTP/1.1\r\n\r\n".into()),
        ("bad version", "CONNECT registry.test:443 HTTP/9.9\r\n\r\n".into()),
        ("http/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".into()),
        (
            "bad content-length",
            format!("GET http://registry.test:{p}/hello HTTP/1.1\r\nHost: registry.test:{p}\r\nContent-Length: 1x\r\n\r\n"),
        ),
        (
            "http/1.1 connect without host",
            format!("CONNECT registry.test:{p} HTTP/1.1\r\n\r\n"),
        ),
        (
            "http/1.1 forward without host",
            format!("GET http://registry.test:{p}/hello HTTP/1.1\r\n\r\n"),
        ),
    ];
    for (name, request) in &cases {
        let (answer, reset) = raw_exchange(bridge.addr, request.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 400"), "{name}: {answer:?}");
        assert!(reset, "{name}: a refused connection must end in a reset");
        // Every refusal says why the same way, whoever parsed the head.
        assert_refusal_headers(name, &answer);
    }
    let events = bridge.events(cases.len());
    assert_eq!(events.len(), cases.len(), "one event per malformed request");
    assert!(events.iter().all(|e| e["status"] == 400), "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e["dialed"].is_null() && e["decision"] == "deny"),
        "a malformed request was dialed: {events:?}"
    );
    assert_still_serving(&mut bridge, p);
}

/// A refusal's `Proxy-Status` (RFC 9209) and `X-Netbox-Reason`.
fn assert_refusal_headers(name: &str, answer: &str) {
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        head.contains("\r\nproxy-status: netbox; error="),
        "{name}: no Proxy-Status: {answer:?}"
    );
    assert!(
        head.contains("\r\nx-netbox-reason: "),
        "{name}: no X-Netbox-Reason: {answer:?}"
    );
}

#[test]
fn http10_without_host_is_still_served() {
    let dir = TestDir::new("http10");
    let http = HttpServer::start();
    let p = http.port();
    let mut bridge = Bridge::start(&dir, &policy(p), &[]);
    // RFC 9112 §3.2 asks Host of HTTP/1.1 only (Python's http.client tunnels with
    // `CONNECT host:port HTTP/1.0` and no Host).
    let mut tunnel = TcpStream::connect(bridge.addr).unwrap();
    tunnel
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    write!(tunnel, "CONNECT registry.test:{p} HTTP/1.0\r\n\r\n").unwrap();
    let head = crate::support::read_head(&mut tunnel);
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head:?}"
    );
    write!(tunnel, "GET /hello HTTP/1.0\r\n\r\n").unwrap();
    // The test server keeps the connection open: read until the body is in.
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.ends_with(b"hello from upstream\n") {
        match tunnel.read(&mut buf) {
            Ok(n) if n > 0 => answer.extend_from_slice(&buf[..n]),
            other => panic!("tunnel ended: {other:?} after {answer:?}"),
        }
    }
    let (answer, _) = raw_exchange(
        bridge.addr,
        format!("GET http://registry.test:{p}/hello HTTP/1.0\r\n\r\n").as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1."), "{answer:?}");
    assert!(answer.contains(" 200 "), "{answer:?}");
    assert_still_serving(&mut bridge, p);
}

#[test]
fn a_connect_that_declares_content_is_refused_and_loses_nothing() {
    let dir = TestDir::new("connect-content");
    let http = HttpServer::start();
    let p = http.port();
    let mut bridge = Bridge::start(&dir, &policy(p), &[]);
    let head = |extra: &str| {
        format!("CONNECT registry.test:{p} HTTP/1.1\r\nHost: registry.test:{p}\r\n{extra}\r\n")
    };
    let request = "GET /hello HTTP/1.1\r\nHost: registry.test\r\nConnection: close\r\n\r\n";
    // Declared content, with the first tunnel bytes in the same write (where they would
    // be eaten as that content), after it, or all of them: refused, never tunnelled.
    for (name, extra, split) in [
        ("length 3, one write", "Content-Length: 3\r\n", false),
        ("length 3, split", "Content-Length: 3\r\n", true),
        ("length 100, one write", "Content-Length: 100\r\n", false),
        ("chunked", "Transfer-Encoding: chunked\r\n", false),
    ] {
        let mut stream = TcpStream::connect(bridge.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        // The reset may meet the second write first (then the read finds the end).
        let mut reset_at_write = false;
        if split {
            stream.write_all(head(extra).as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            reset_at_write = stream.write_all(request.as_bytes()).is_err();
        } else {
            let _ = stream.write_all(format!("{}{request}", head(extra)).as_bytes());
        }
        let (answer, reset) = crate::support::read_until_close(&mut stream);
        assert!(answer.starts_with("HTTP/1.1 400"), "{name}: {answer:?}");
        assert!(answer.contains("has no content"), "{name}: {answer:?}");
        assert!(reset || reset_at_write, "{name}: not reset");
        assert_refusal_headers(name, &answer);
    }
    let events = bridge.events(4);
    assert!(
        events
            .iter()
            .all(|e| e["dialed"].is_null() && e["status"] == 400),
        "a CONNECT with content was dialed: {events:?}"
    );
    // Controls: no content declared, or `Content-Length: 0`, with the tunnel's first bytes
    // in the same write as the head (a client that does not wait for the 200), and behind
    // a large head: every byte reaches the upstream.
    let big = format!("X-Pad: {}\r\n", "p".repeat(40 * 1024));
    for (name, extra) in [
        ("none", String::new()),
        ("length 0", "Content-Length: 0\r\n".to_owned()),
        ("large head", big),
    ] {
        let mut stream = TcpStream::connect(bridge.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        stream
            .write_all(format!("{}{request}", head(&extra)).as_bytes())
            .unwrap();
        let (answer, reset) = crate::support::read_until_close(&mut stream);
        assert!(answer.starts_with("HTTP/1.1 200"), "{name}: {answer:?}");
        assert!(
            answer.ends_with("hello from upstream\n"),
            "{name}: the pipelined request was lost: {answer:?}"
        );
        assert!(!reset, "{name}");
    }
    assert_still_serving(&mut bridge, p);
}

#[test]
fn content_length_with_chunked_is_reframed_not_smuggled() {
    let dir = TestDir::new("smuggle");
    let http = HttpServer::start();
    let p = http.port();
    let mut bridge = Bridge::start(&dir, &policy(p), &[]);
    // RFC 9112 §6.3: chunked wins and the length is dropped. The smuggled second request
    // after the empty chunked body must not reach the upstream as a request of its own.
    let request = format!(
        "POST http://registry.test:{p}/sha256 HTTP/1.1\r\nHost: registry.test:{p}\r\n\
         Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
         GET http://evil.test/ HTTP/1.1\r\n\r\n"
    );
    let (answer, _) = raw_exchange(bridge.addr, request.as_bytes());
    let empty_sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(answer.ends_with(&format!("{empty_sha}\n")), "{answer:?}");
    assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer:?}");
    let events = bridge.events(1);
    assert!(
        events.iter().all(|e| e["host"] != "evil.test"),
        "{events:?}"
    );
    assert_still_serving(&mut bridge, p);
}

#[test]
fn oversized_head_gets_431() {
    let dir = TestDir::new("oversized");
    let http = HttpServer::start();
    let mut bridge = Bridge::start(&dir, &policy(http.port()), &[]);
    let big = "x".repeat(100 * 1024);
    let request = format!("CONNECT registry.test:443 HTTP/1.1\r\nX-Big: {big}\r\n\r\n");
    let (answer, _) = raw_exchange(bridge.addr, request.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert_refusal_headers("large", &answer);
    let many: String = (0..500).map(|i| format!("X-H{i}: v\r\n")).collect();
    let request = format!("CONNECT registry.test:443 HTTP/1.1\r\n{many}\r\n");
    let (answer, _) = raw_exchange(bridge.addr, request.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert_refusal_headers("many", &answer);
    let event = bridge.events(1);
    assert_eq!(event[0]["reason"], "header_too_large", "{event:?}");
    assert_eq!(event[0]["status"], 431, "{event:?}");
    assert_still_serving(&mut bridge, http.port());
}

#[test]
fn slow_headers_time_out() {
    let dir = TestDir::new("slow");
    let http = HttpServer::start();
    let mut bridge = Bridge::start(&dir, &policy(http.port()), &["--header-timeout", "1s"]);
    // A head that never completes, and a client that never says anything.
    let mut partial = TcpStream::connect(bridge.addr).unwrap();
    partial
        .write_all(b"CONNECT registry.test:443 HTTP/1.1\r\nX-Slow: ")
        .unwrap();
    let mut silent = TcpStream::connect(bridge.addr).unwrap();
    let started = Instant::now();
    for stream in [&mut partial, &mut silent] {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = Vec::new();
        // Closed by the bridge: EOF or reset, either way not a hang.
        let _ = stream.read_to_end(&mut buf);
    }
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "took {waited:?}");
    assert!(
        waited >= Duration::from_millis(900),
        "closed before the deadline: {waited:?}"
    );
    let events = bridge.events(2);
    let timeouts = events
        .iter()
        .filter(|e| e["reason"] == "header_timeout")
        .count();
    assert_eq!(timeouts, 2, "{events:?}");
    assert_still_serving(&mut bridge, http.port());
}

#[test]
fn random_junk_never_crashes_the_bridge() {
    let dir = TestDir::new("junk");
    let http = HttpServer::start();
    let mut bridge = Bridge::start(&dir, &policy(http.port()), &["--header-timeout", "1s"]);
    // Deterministic pseudo-random inputs (xorshift), including SOCKS-looking ones.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..150 {
        let len = usize::try_from(next() % 600).unwrap();
        let mut input: Vec<u8> = (0..len).map(|_| (next() & 0xff) as u8).collect();
        if i % 3 == 0 && !input.is_empty() {
            input[0] = 0x05;
        }
        if i % 5 == 0 {
            input.splice(0..0, b"CONNECT ".iter().copied());
        }
        let mut stream = TcpStream::connect(bridge.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(&input);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
    }
    assert_still_serving(&mut bridge, http.port());
    let events = bridge.events(0);
    assert!(events
        .iter()
        .all(|e| e["dialed"].is_null() || e["host"] == "registry.test"));
}
