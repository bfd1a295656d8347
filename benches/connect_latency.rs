//! Cost of a new connection + small GET, direct vs. through a CONNECT tunnel of the bridge.
//!
//! Run by `benches/run.sh` (which starts nginx and the bridge) as
//! `cargo bench --bench connect_latency -- UPSTREAM_ADDR BRIDGE_ADDR [ROUNDS]`.
//! Direct and proxied requests alternate in one run so machine noise hits both alike;
//! it prints the median and p90 of each and their ratio.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn get_small(stream: &mut TcpStream, host: &str) {
    write!(
        stream,
        "GET /small.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("send GET");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read response");
    assert!(response.starts_with(b"HTTP/1.1 200"), "unexpected response");
}

fn direct(upstream: SocketAddr) -> Duration {
    let start = Instant::now();
    let mut s = TcpStream::connect(upstream).expect("connect upstream");
    s.set_nodelay(true).ok();
    get_small(&mut s, &upstream.to_string());
    start.elapsed()
}

fn proxied(upstream: SocketAddr, bridge: SocketAddr) -> Duration {
    let start = Instant::now();
    let mut s = TcpStream::connect(bridge).expect("connect bridge");
    s.set_nodelay(true).ok();
    write!(s, "CONNECT {upstream} HTTP/1.1\r\nHost: {upstream}\r\n\r\n").expect("send CONNECT");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("read CONNECT reply");
        head.push(byte[0]);
    }
    // HTTP/1.0 from some proxies (tinyproxy).
    assert!(
        head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
        "CONNECT refused"
    );
    get_small(&mut s, &upstream.to_string());
    start.elapsed()
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() - 1) * p / 100]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.len() < 2 {
        eprintln!("usage: connect_latency UPSTREAM_ADDR BRIDGE_ADDR [ROUNDS]");
        std::process::exit(2);
    }
    let upstream: SocketAddr = args[0].parse().expect("upstream address");
    let bridge: SocketAddr = args[1].parse().expect("bridge address");
    let rounds: usize = args.get(2).map_or(2000, |r| r.parse().expect("rounds"));
    for _ in 0..50 {
        direct(upstream);
        proxied(upstream, bridge);
    }
    let (mut d, mut p) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        d.push(direct(upstream));
        p.push(proxied(upstream, bridge));
    }
    d.sort();
    p.sort();
    let (dm, pm) = (percentile(&d, 50), percentile(&p, 50));
    println!(
        "connect+GET direct:  median {:>7.1} us  p90 {:>7.1} us",
        dm.as_secs_f64() * 1e6,
        percentile(&d, 90).as_secs_f64() * 1e6
    );
    println!(
        "connect+GET proxied: median {:>7.1} us  p90 {:>7.1} us",
        pm.as_secs_f64() * 1e6,
        percentile(&p, 90).as_secs_f64() * 1e6
    );
    println!(
        "ratio proxied/direct (median): {:.2} (budget <= 2.00)",
        pm.as_secs_f64() / dm.as_secs_f64()
    );
}
