//! SOCKS5 through the same listener: real curl with --socks5-hostname, and raw clients for
//! IPv4/IPv6 address types and the reply codes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::support::upstream::HttpServer;
use crate::support::{curl, read_until_close, stderr, stdout, Bridge, TestDir};

fn policy(port: u16) -> String {
    format!(
        "allow = [\"registry.test:{port}\", \"127.0.0.1:{port}\", \"[::1]:{port}\", \"evil.test:{port}\"]\n\
         deny = [\"evil.test\"]\n\
         [hosts]\n\"registry.test\" = \"127.0.0.1\"\n\"evil.test\" = \"127.0.0.1\"\n"
    )
}

/// Greets, sends a CONNECT with the given address bytes, returns the reply code.
fn socks_connect(bridge: SocketAddr, address: &[u8], port: u16) -> (u8, TcpStream) {
    let mut stream = TcpStream::connect(bridge).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&[0x05, 0x01, 0x00]).unwrap();
    let mut choice = [0u8; 2];
    stream.read_exact(&mut choice).unwrap();
    assert_eq!(choice, [0x05, 0x00]);
    let mut request = vec![0x05, 0x01, 0x00];
    request.extend_from_slice(address);
    request.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&request).unwrap();
    let mut reply = [0u8; 10];
    stream.read_exact(&mut reply[..4]).unwrap();
    let rest = if reply[3] == 0x04 { 18 } else { 6 };
    let mut tail = vec![0u8; rest];
    stream.read_exact(&mut tail).unwrap();
    // The bound address would be the host's side of the upstream: never disclosed.
    assert!(tail.iter().all(|&b| b == 0), "reply discloses {tail:?}");
    (reply[1], stream)
}

#[test]
fn socks5_allowed_and_denied_with_curl() {
    let dir = TestDir::new("socks-curl");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = Bridge::start(&dir, &policy(p), &[]);
    let socks = bridge.addr.to_string();
    let out = curl(&[
        "--socks5-hostname",
        &socks,
        &format!("http://registry.test:{p}/hello"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");
    let event = bridge.event_for("registry.test");
    assert_eq!(event["proto"], "socks5");
    assert_eq!(event["decision"], "allow");

    let out = curl(&[
        "--socks5-hostname",
        &socks,
        &format!("http://evil.test:{p}/hello"),
    ]);
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(97), "{}", stderr(&out));
    let event = bridge.event_for("evil.test");
    assert_eq!(event["reason"], "denied_by_rule");

    let out = curl(&["--socks5-hostname", &socks, "http://blocked.test/"]);
    assert_eq!(out.status.code(), Some(97), "{}", stderr(&out));
    assert_eq!(bridge.event_for("blocked.test")["reason"], "not_allowed");
}

#[test]
fn socks5_address_types_and_reply_codes() {
    let dir = TestDir::new("socks-raw");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = Bridge::start(&dir, &policy(p), &[]);

    // IPv4 literal, allowed by an IP rule: the tunnel works.
    let (code, mut stream) = socks_connect(bridge.addr, &[0x01, 127, 0, 0, 1], p);
    assert_eq!(code, 0x00);
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (answer, _) = read_until_close(&mut stream);
    assert!(answer.ends_with("hello from upstream\n"), "{answer}");

    // Domain, denied by rule: 0x02 and a reset.
    let mut domain = vec![0x03, 9];
    domain.extend_from_slice(b"evil.test");
    let (code, mut stream) = socks_connect(bridge.addr, &domain, p);
    assert_eq!(code, 0x02);
    let (_, reset) = read_until_close(&mut stream);
    assert!(reset, "SOCKS refusal must reset");

    // IPv6 loopback, allowed by a bracketed rule, but nothing listens there: refused (0x05).
    let mut v6 = vec![0x04];
    v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    let (code, _) = socks_connect(bridge.addr, &v6, p);
    assert_eq!(code, 0x05);

    // A port nobody allowed: 0x02.
    let (code, _) = socks_connect(bridge.addr, &[0x01, 127, 0, 0, 1], 1);
    assert_eq!(code, 0x02);

    // BIND is not supported: 0x07.
    let mut stream = TcpStream::connect(bridge.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&[0x05, 0x01, 0x00]).unwrap();
    let mut choice = [0u8; 2];
    stream.read_exact(&mut choice).unwrap();
    stream
        .write_all(&[0x05, 0x02, 0x00, 0x01, 127, 0, 0, 1, 0, 80])
        .unwrap();
    let mut reply = [0u8; 10];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(reply[1], 0x07);

    // Only username/password offered: no acceptable method.
    let mut stream = TcpStream::connect(bridge.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&[0x05, 0x01, 0x02]).unwrap();
    let mut choice = [0u8; 2];
    stream.read_exact(&mut choice).unwrap();
    assert_eq!(choice, [0x05, 0xff]);
}
