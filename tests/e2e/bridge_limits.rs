//! The connection budget: past `--max-connections`, each new connection is refused at once
//! (HTTP 503 with Proxy-Status, or a SOCKS5 failure reply) and logged, never left waiting
//! in the accept queue; a place freed is served again.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::upstream::HttpServer;
use crate::support::{connect_tunnel, raw_exchange, stderr, stdout, Bridge, Run, TestDir};

fn policy(port: u16) -> String {
    format!(
        "allow = [\"registry.test:{port}\", \"127.0.0.1:{port}\"]\n[hosts]\n\"registry.test\" = \"127.0.0.1\"\n"
    )
}

#[test]
fn past_the_connection_limit_each_new_connection_is_refused_at_once() {
    let dir = TestDir::new("conn-limit");
    let http = HttpServer::start();
    let p = http.port();
    let target = format!("registry.test:{p}");
    let mut bridge = Bridge::start(&dir, &policy(p), &["--max-connections", "4"]);
    // Positive control: the limit's worth of tunnels, held open.
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| connect_tunnel(bridge.addr, &target))
        .collect();

    // One more: answered at once, with why.
    let started = Instant::now();
    let (answer, reset) = raw_exchange(
        bridge.addr,
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    let head = answer.to_ascii_lowercase();
    assert!(
        head.contains("proxy-status: netbox; error=connection_limit_reached"),
        "{answer:?}"
    );
    assert!(
        head.contains("x-netbox-reason: connection-limit"),
        "{answer:?}"
    );
    assert!(reset, "a refused connection ends in a reset");

    // SOCKS5 past the limit: greeted, then a general-failure reply.
    let mut socks = TcpStream::connect(bridge.addr).unwrap();
    socks
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socks.write_all(&[0x05, 0x01, 0x00]).unwrap();
    let mut choice = [0u8; 2];
    socks.read_exact(&mut choice).unwrap();
    assert_eq!(choice, [0x05, 0x00]);
    let name = b"registry.test";
    let mut request = vec![0x05, 0x01, 0x00, 0x03, u8::try_from(name.len()).unwrap()];
    request.extend_from_slice(name);
    request.extend_from_slice(&p.to_be_bytes());
    socks.write_all(&request).unwrap();
    let mut reply = [0u8; 2];
    socks.read_exact(&mut reply).unwrap();
    assert_eq!(reply, [0x05, 0x01], "a general SOCKS server failure");

    // The held tunnels are logged when they end; the two refusals now.
    let deadline = Instant::now() + Duration::from_secs(10);
    let limited = loop {
        let limited: Vec<_> = bridge
            .events(0)
            .into_iter()
            .filter(|e| e["reason"] == "connection_limit")
            .collect();
        if limited.len() >= 2 || Instant::now() > deadline {
            break limited;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(limited.len(), 2, "{limited:#?}");
    assert!(limited.iter().all(|e| e["dialed"].is_null()), "{limited:?}");
    assert!(
        limited[0]["detail"]
            .as_str()
            .unwrap()
            .contains("4 connections open (--max-connections)"),
        "{limited:?}"
    );

    // A place freed is served again, even to clients that open their next connection the
    // moment they closed one (pools at their full size): two of them, each holding one
    // place, 50 times over, with the limit's other two places taken.
    held.truncate(0);
    let hold: Vec<TcpStream> = (0..2)
        .map(|_| connect_tunnel(bridge.addr, &target))
        .collect();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (addr, target) = (bridge.addr, target.clone());
            std::thread::spawn(move || {
                let mut refused = 0;
                for _ in 0..50 {
                    let mut stream = TcpStream::connect(addr).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    write!(
                        stream,
                        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
                    )
                    .unwrap();
                    let head = crate::support::read_head(&mut stream);
                    if !head.starts_with("HTTP/1.1 200") {
                        refused += 1;
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(refused, 0, "connections refused at exactly the limit");
    drop(hold);
    assert!(bridge.is_alive());
}

#[test]
fn memory_comes_back_after_tunnels_close() {
    let dir = TestDir::new("memory-back");
    let sink = crate::support::upstream::SinkServer::start();
    let target = format!("registry.test:{}", sink.addr.port());
    let bridge = Bridge::start(&dir, &policy(sink.addr.port()), &[]);
    let idle = bridge.rss_kib();
    // Control: 500 tunnels, each having carried a little, cost memory while open.
    let mut tunnels: Vec<TcpStream> = (0..500)
        .map(|_| {
            let mut t = connect_tunnel(bridge.addr, &target);
            t.write_all(&[b'x'; 1000]).unwrap();
            t
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let open = bridge.rss_kib();
    assert!(
        open > idle + 4 * 1024,
        "500 open tunnels: {idle} -> {open} KiB"
    );
    tunnels.clear();
    // Once they have closed, the bridge gives what they held back to the system. A leak
    // keeps all of it; the allocator's per-thread arenas keep about a fifth (0.17-0.25 of
    // the growth measured in debug builds), which a quarter left too little room for.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now = bridge.rss_kib();
    while now > idle + (open - idle) / 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        now = bridge.rss_kib();
    }
    assert!(
        now <= idle + (open - idle) / 3,
        "idle {idle} KiB, open {open} KiB, closed {now} KiB"
    );
}

/// Opens N tunnels through the sandbox's proxy and holds them; prints each answer's status.
const HOLD_TUNNELS: &str = r#"
import os, socket, sys
host, port = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/").split(":")
target = sys.argv[1]
held = []
for _ in range(int(sys.argv[2])):
    s = socket.create_connection((host, int(port)))
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    print(head.split(b" ")[1].decode() if head else "closed", flush=True)
    held.append(s)
"#;

#[test]
fn a_sandboxed_command_is_held_to_its_connection_budget() {
    let dir = TestDir::new("run-conn-limit");
    let http = HttpServer::start();
    let p = http.port();
    let allow = dir.write("allow.toml", &policy(p));
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allowlist")
        .arg(allow.display().to_string())
        .arg("--max-connections")
        .arg("2");
    std::fs::write(run.workspace.join("hold.py"), HOLD_TUNNELS).unwrap();
    let out = run.sh(&format!("python3 hold.py registry.test:{p} 3"));
    assert!(out.status.success(), "{}", stderr(&out));
    // Two served (the control), the third refused with 503.
    assert_eq!(stdout(&out), "200\n200\n503\n", "{}", stderr(&out));
    let limited = run
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "connection_limit")
        .count();
    assert_eq!(limited, 1);
}
