//! A tunnel to a TLS port goes where it claims: the ClientHello's server name
//! must be the tunnel's host, read without terminating TLS. One HTTPS server holds a
//! certificate for both `a.test` and `b.test`, as a CDN does for its customers; only
//! `a.test` is allowed. Each refusal beside a control that passes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use crate::support::upstream::HttpServer;
use crate::support::{connect_tunnel, curl, read_until_close, stderr, stdout, Bridge, TestDir};

/// `a.test` allowed (pinned to loopback, where the server is), its port a TLS port.
fn policy(port: u16, extra: &str) -> String {
    format!(
        "allow = [\"a.test:{port}\", \"127.0.0.1:{port}\"]\ntls_ports = [{port}]\n{extra}\
         [hosts]\n\"a.test\" = \"127.0.0.1\"\n\"b.test\" = \"127.0.0.1\"\n"
    )
}

/// The first bytes a real TLS client (rustls) sends for `name`: its ClientHello. An IP
/// address as the name sends no server name at all.
fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    hello
}

/// Sends `bytes` through a tunnel to `target` in `segment`-byte TCP segments; returns
/// what comes back and whether it ended in a reset.
fn through_tunnel(bridge: &Bridge, target: &str, bytes: &[u8], segment: usize) -> (Vec<u8>, bool) {
    let mut stream = connect_tunnel(bridge.addr, target);
    stream.set_nodelay(true).unwrap();
    for chunk in bytes.chunks(segment) {
        stream.write_all(chunk).unwrap();
        if segment < bytes.len() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    answer(&mut stream)
}

/// What comes back through a tunnel once a client has sent its hello: a server's first
/// flight (enough of it to know the hello got through), or what came before the tunnel
/// closed, and whether that close was a reset. A change_cipher_spec record first
/// (middlebox compatibility, after a retry request) is not what is looked at.
fn answer(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (got, false),
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.starts_with(&[20, 3, 3, 0, 1, 1]) {
                    got.drain(..6);
                }
                if got.first() == Some(&22) && got.len() > 100 {
                    return (got, false);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(e) => panic!("read: {e} after {} bytes", got.len()),
        }
    }
}

#[test]
fn a_tunnel_asking_tls_for_another_host_is_refused() {
    let dir = TestDir::new("tls-sni");
    let server = HttpServer::start_tls(&dir.path, &["a.test", "b.test"]);
    let p = server.port();
    let ca = server.ca.as_ref().unwrap().display().to_string();
    let bridge = Bridge::start(&dir, &policy(p, ""), &[]);

    // Honest: a.test through a tunnel to a.test.
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        "--cacert",
        &ca,
        &format!("https://a.test:{p}/hello"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");

    // The trick: curl opens the tunnel to a.test and asks TLS for b.test through it.
    let trick = |bridge: &Bridge| {
        curl(&[
            "-x",
            &bridge.proxy_url(),
            "--cacert",
            &ca,
            "--connect-to",
            &format!("b.test:{p}:a.test:{p}"),
            &format!("https://b.test:{p}/hello"),
        ])
    };
    let out = trick(&bridge);
    assert!(
        !out.status.success(),
        "b.test was reached through a.test's tunnel"
    );
    let events = bridge.events(2);
    let refused = events
        .iter()
        .find(|e| e["reason"] == "server_name_mismatch")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(refused["host"], "a.test");
    assert_eq!(refused["decision"], "deny");
    assert_eq!(refused["bytes_up"], 0, "the hello went upstream");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("asks for b.test"),
        "{refused}"
    );

    // Control: on a port not checked, the same trick reaches b.test (what the check is for).
    let open_dir = TestDir::new("tls-sni-unchecked");
    let unchecked = Bridge::start(
        &open_dir,
        &policy(p, "").replace(&format!("tls_ports = [{p}]\n"), ""),
        &[],
    );
    let out = trick(&unchecked);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");
}

#[test]
fn the_hello_is_read_across_one_byte_segments_and_replayed_unchanged() {
    let dir = TestDir::new("tls-sni-split");
    let server = HttpServer::start_tls(&dir.path, &["a.test", "b.test"]);
    let p = server.port();
    let bridge = Bridge::start(&dir, &policy(p, ""), &[]);
    let target = format!("a.test:{p}");
    // A real hello for a.test, one byte per TCP segment: it reaches the server, which
    // answers with its ServerHello (a handshake record).
    let hello = client_hello("a.test");
    let (got, reset) = through_tunnel(&bridge, &target, &hello, 1);
    assert!(!reset && got.first() == Some(&22), "{got:?}");
    // The same for b.test: a fatal access_denied alert, then a reset.
    let (got, reset) = through_tunnel(&bridge, &target, &client_hello("b.test"), 1);
    assert_eq!(got, [21, 3, 3, 0, 2, 2, 49]);
    assert!(reset);
    let events = bridge.events(2);
    assert!(
        events.iter().any(|e| e["reason"] == "server_name_mismatch"),
        "{events:#?}"
    );
    // The allowed one carried every byte of the hello upstream.
    let allowed = events.iter().find(|e| e["decision"] == "allow").unwrap();
    assert!(
        allowed["bytes_up"].as_u64().unwrap() >= hello.len() as u64,
        "{allowed}"
    );
}

#[test]
fn plain_bytes_or_a_nameless_hello_on_a_tls_port_need_allow_plain() {
    let dir = TestDir::new("tls-plain");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let p = server.port();
    let strict = Bridge::start(&dir, &policy(p, ""), &[]);
    let plain = b"GET /hello HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    let (_, reset) = through_tunnel(&strict, &format!("a.test:{p}"), plain, plain.len());
    assert!(reset);
    // A hello to an IP address carries no server name.
    let (got, reset) = through_tunnel(
        &strict,
        &format!("127.0.0.1:{p}"),
        &client_hello("127.0.0.1"),
        4096,
    );
    assert_eq!(got, [21, 3, 3, 0, 2, 2, 49]);
    assert!(reset);
    let events = strict.events(2);
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(
        reasons.contains(&"not_tls") && reasons.contains(&"no_server_name"),
        "{events:#?}"
    );

    // Control: with tls = "allow-plain", both go through (plain bytes to a TLS server get
    // its answer, or its close; the nameless hello its ServerHello).
    let dir = TestDir::new("tls-plain-ok");
    let lenient = Bridge::start(&dir, &policy(p, "tls = \"allow-plain\"\n"), &[]);
    let (got, reset) = through_tunnel(
        &lenient,
        &format!("127.0.0.1:{p}"),
        &client_hello("127.0.0.1"),
        4096,
    );
    assert!(!reset && got.first() == Some(&22), "{got:?}");
    let mut stream = connect_tunnel(lenient.addr, &format!("a.test:{p}"));
    stream.write_all(plain).unwrap();
    let (_, _) = read_until_close(&mut stream);
    let events = lenient.events(2);
    assert!(
        events.iter().all(|e| e["decision"] == "allow"),
        "{events:#?}"
    );
    // A server name that differs is refused even so.
    let (got, _) = through_tunnel(
        &lenient,
        &format!("a.test:{p}"),
        &client_hello("b.test"),
        4096,
    );
    assert_eq!(got, [21, 3, 3, 0, 2, 2, 49]);
}

/// A malformed setting is one clear line with the file and line. (That 443 is checked
/// with no setting at all is a unit test: a test cannot listen on 443 as nobody.)
#[test]
fn a_bad_tls_setting_is_one_clear_line() {
    let dir = TestDir::new("tls-settings");
    let file = dir.write("bad.toml", "allow = [\"a.test\"]\ntls = \"sometimes\"\n");
    let out = std::process::Command::new(crate::support::netbox_bin())
        .args(["bridge", "--listen", "127.0.0.1:0", "--allowlist"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("bad.toml:2")
            && stderr(&out).contains("\"require\" or \"allow-plain\""),
        "{}",
        stderr(&out)
    );
}

/// The server asks again (a HelloRetryRequest: the client's first key share was of a
/// group it does not take); the client's second ClientHello is checked as its first was.
/// RFC 8446 forbids it to change the name, but OpenSSL's name callback takes the second
/// one, so a tunnel could ask for a.test and then be served b.test.
#[test]
fn a_second_client_hello_after_a_retry_is_checked_too() {
    let dir = TestDir::new("tls-retry");
    let server = HttpServer::start_tls_asking_again(&dir.path, &["a.test", "b.test"]);
    let p = server.port();
    let bridge = Bridge::start(&dir, &policy(p, ""), &[]);
    // A real client's two flights for a.test; `rename` rewrites the second one's name.
    let second_flight = |rename: bool| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut hello = Vec::new();
        client.write_tls(&mut hello).unwrap();
        let mut stream = connect_tunnel(bridge.addr, &format!("a.test:{p}"));
        stream.write_all(&hello).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // The retry request: one handshake record.
        let mut retry = vec![0u8; 5];
        stream.read_exact(&mut retry).unwrap();
        assert_eq!(retry[0], 22, "{retry:?}");
        let len = usize::from(u16::from_be_bytes([retry[3], retry[4]]));
        retry.resize(5 + len, 0);
        stream.read_exact(&mut retry[5..]).unwrap();
        client.read_tls(&mut &retry[..]).unwrap();
        client.process_new_packets().unwrap();
        let mut second = Vec::new();
        client.write_tls(&mut second).unwrap();
        if rename {
            let at = second.windows(6).position(|w| w == b"a.test").unwrap();
            second[at..at + 6].copy_from_slice(b"b.test");
        }
        stream.write_all(&second).unwrap();
        answer(&mut stream)
    };
    // Honest: the server goes on with its ServerHello.
    let (got, reset) = second_flight(false);
    assert!(!reset && got.first() == Some(&22), "{got:?}");
    // Renamed: an access_denied alert and a reset, logged.
    let (got, reset) = second_flight(true);
    assert_eq!(got, [21, 3, 3, 0, 2, 2, 49]);
    assert!(reset);
    let events = bridge.events(2);
    let refused = events
        .iter()
        .find(|e| e["reason"] == "server_name_mismatch")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("asks for b.test"),
        "{refused}"
    );
}
