//! Bytes through the bridge: large bodies intact both ways, half-close honoured, idle
//! tunnels closed, and a Unix-socket listener.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::support::upstream::{pattern, HttpServer, SinkServer};
use crate::support::{
    connect_tunnel, curl, file_sha256, read_head, sha256_hex, stderr, stdout, Bridge, TestDir,
};

const BIG: usize = 64 * 1024 * 1024;

fn open_policy(port: u16) -> String {
    format!(
        "allow = [\"big.test:{port}\", \"127.0.0.1:{port}\"]\n[hosts]\n\"big.test\" = \"127.0.0.1\"\n"
    )
}

#[test]
fn sixty_four_mib_both_ways_intact() {
    let dir = TestDir::new("big");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = Bridge::start(&dir, &open_policy(p), &[]);
    let want = sha256_hex(&pattern(BIG));
    let upload = dir.join("upload.bin");
    std::fs::write(&upload, pattern(BIG)).unwrap();
    let upload_arg = format!("@{}", upload.display());

    let proxy = bridge.proxy_url();
    // Once through a CONNECT tunnel (-p), once forwarded as absolute-form HTTP.
    for mode in ["tunnel", "forward"] {
        let mut args = vec!["-x", proxy.as_str()];
        if mode == "tunnel" {
            args.push("-p");
        }
        let down = dir.join("down.bin");
        let down_arg = down.display().to_string();
        let url = format!("http://big.test:{p}/bytes/{BIG}");
        let mut get = args.clone();
        get.extend(["-o", &down_arg, &url]);
        let out = curl(&get);
        assert!(out.status.success(), "download ({mode}): {}", stderr(&out));
        assert_eq!(file_sha256(&down), want, "download ({mode})");

        let url = format!("http://big.test:{p}/sha256");
        let mut post = args.clone();
        post.extend(["--data-binary", &upload_arg, &url]);
        let out = curl(&post);
        assert!(out.status.success(), "upload ({mode}): {}", stderr(&out));
        assert_eq!(stdout(&out).trim(), want, "upload ({mode})");
    }
    let events = bridge.events(4);
    assert_eq!(events.len(), 4, "{events:?}");
    for event in &events {
        let total = event["bytes_up"].as_u64().unwrap() + event["bytes_down"].as_u64().unwrap();
        // A tunnel counts its bytes as they are; a forwarded request, its bodies.
        assert!(total >= BIG as u64, "{event}");
    }
}

#[test]
fn half_close_still_gets_the_whole_response() {
    let dir = TestDir::new("halfclose");
    let sink = SinkServer::start();
    let p = sink.addr.port();
    let bridge = Bridge::start(&dir, &open_policy(p), &[]);
    let mut tunnel = connect_tunnel(bridge.addr, &format!("big.test:{p}"));
    let payload = pattern(3 * 1024 * 1024 + 17);
    tunnel.write_all(&payload).unwrap();
    // Done sending; the sink only answers after it sees EOF.
    tunnel.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).unwrap();
    assert_eq!(
        answer,
        format!("{} {}\n", payload.len(), sha256_hex(&payload))
    );
    let event = bridge.event_for("big.test");
    assert_eq!(event["end"], "closed");
    assert_eq!(event["bytes_up"].as_u64().unwrap(), payload.len() as u64);
}

#[test]
fn idle_tunnel_is_closed_after_the_idle_timeout() {
    let dir = TestDir::new("idle");
    let sink = SinkServer::start();
    let p = sink.addr.port();
    let bridge = Bridge::start(&dir, &open_policy(p), &["--idle-timeout", "1s"]);
    let mut tunnel = connect_tunnel(bridge.addr, &format!("big.test:{p}"));
    // Positive control: traffic flows, then nothing moves.
    tunnel.write_all(b"ping").unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = tunnel.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "tunnel should be closed by the bridge");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed too early: {waited:?}"
    );
    let event = bridge.event_for("big.test");
    assert_eq!(event["end"], "idle_timeout");
    assert_eq!(event["bytes_up"], 4);
}

#[test]
fn unix_socket_listener_serves_connect() {
    let dir = TestDir::new("unix");
    let http = HttpServer::start();
    let p = http.port();
    let socket = dir.join("bridge.sock");
    let policy = dir.write("allow.toml", &open_policy(p));
    let args: Vec<String> = vec![
        "--listen".into(),
        format!("unix:{}", socket.display()),
        "--allowlist".into(),
        policy.display().to_string(),
    ];
    let bridge = Bridge::start_args(&dir, &args);
    let mut stream = UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "CONNECT big.test:{p} HTTP/1.1\r\nHost: big.test:{p}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut stream);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    write!(
        stream,
        "GET /hello HTTP/1.1\r\nHost: big.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.ends_with("hello from upstream\n"), "{answer}");

    // And a refusal on the same socket.
    let mut stream = UnixStream::connect(&socket).unwrap();
    write!(
        stream,
        "CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut stream);
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    drop(bridge);
}

#[test]
fn forwarded_request_to_a_silent_upstream_times_out() {
    let dir = TestDir::new("silent");
    // Accepts and reads, never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let bridge = Bridge::start(&dir, &open_policy(p), &["--idle-timeout", "1s"]);
    let started = Instant::now();
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        "-w",
        "%{http_code}",
        "-o",
        "/dev/null",
        &format!("http://big.test:{p}/hello"),
    ]);
    let waited = started.elapsed();
    assert_eq!(stdout(&out), "504", "{}", stderr(&out));
    assert!(waited < Duration::from_secs(5), "took {waited:?}");
    let event = bridge.event_for("big.test");
    assert_eq!(event["status"], 504);
    assert_eq!(event["end"], "idle_timeout");
}
