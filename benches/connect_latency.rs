//! Cost of a new connection + small GET, direct vs. through a CONNECT tunnel of a proxy.
//!
//! Run by `benches/proxies.py` as `connect_latency UPSTREAM_ADDR PROXY_ADDR [ROUNDS]
//! [--proxied-only]`. Direct and proxied requests alternate in one run so machine noise
//! hits both alike; it prints the median, mean, p90 and p99 of each. `--proxied-only` is
//! for a run inside a sandbox, where the upstream cannot be reached directly;
//! `--proxy-auth VALUE` sends a Proxy-Authorization header (a bridge with tenants).

// A benchmark: its sockets are at loopback literals and the addresses it is given, so
// std's and tokio's socket calls (clippy.toml) are allowed throughout.
#![allow(clippy::disallowed_methods)]

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

fn proxied(upstream: SocketAddr, bridge: SocketAddr, auth: Option<&str>) -> Duration {
    let start = Instant::now();
    let mut s = TcpStream::connect(bridge).expect("connect bridge");
    s.set_nodelay(true).ok();
    let auth = auth.map_or(String::new(), |a| format!("Proxy-Authorization: {a}\r\n"));
    write!(
        s,
        "CONNECT {upstream} HTTP/1.1\r\nHost: {upstream}\r\n{auth}\r\n"
    )
    .expect("send CONNECT");
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

fn report(label: &str, mut times: Vec<Duration>) {
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = times.iter().sum::<Duration>() / u32::try_from(times.len()).expect("rounds fit u32");
    println!(
        "connect+GET {label}: median {:.1} us  mean {:.1} us  p90 {:.1} us  p99 {:.1} us",
        us(percentile(&times, 50)),
        us(mean),
        us(percentile(&times, 90)),
        us(percentile(&times, 99))
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let proxied_only = args.iter().any(|a| a == "--proxied-only");
    // `--proxy-auth VALUE`: a Proxy-Authorization header for each CONNECT.
    let auth = args
        .iter()
        .position(|a| a == "--proxy-auth")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let args: Vec<&String> = args
        .iter()
        .filter(|a| *a != "--proxied-only" && *a != "--proxy-auth" && Some(*a) != auth.as_ref())
        .collect();
    if args.len() < 2 {
        eprintln!(
            "usage: connect_latency UPSTREAM_ADDR PROXY_ADDR [ROUNDS] [--proxied-only] \
             [--proxy-auth VALUE]"
        );
        std::process::exit(2);
    }
    let upstream: SocketAddr = args[0].parse().expect("upstream address");
    let proxy: SocketAddr = args[1].parse().expect("proxy address");
    let rounds: usize = args.get(2).map_or(2000, |r| r.parse().expect("rounds"));
    let (mut d, mut p) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    // The first 50 of each warm up and are not counted.
    for round in 0..rounds + 50 {
        let direct_time = (!proxied_only).then(|| direct(upstream));
        let proxied_time = proxied(upstream, proxy, auth.as_deref());
        if round >= 50 {
            d.extend(direct_time);
            p.push(proxied_time);
        }
    }
    if !proxied_only {
        report("direct", d);
    }
    report("proxied", p);
}
