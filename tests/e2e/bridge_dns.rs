//! Real DNS through hickory-resolver: a dnsmasq on loopback answers for `dns.test`. A name
//! that DNS resolves to loopback is refused (the bridge runs on the host; this is the
//! rebinding/SSRF guard) unless a CIDR rule opens the address; an unknown name is a
//! resolve failure. Nothing is asked of any resolver but this dnsmasq.

use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::upstream::HttpServer;
use crate::support::{connect_tunnel, curl, raw_exchange, stderr, stdout, Bridge, TestDir};

struct Dnsmasq {
    child: Child,
    port: u16,
}

impl Dnsmasq {
    /// Starts dnsmasq on a free port. dnsmasq takes the port for TCP as well, which another
    /// test may hold: then it exits at once, and another port is tried.
    fn start(dir: &TestDir) -> Dnsmasq {
        for _ in 0..5 {
            if let Some(dnsmasq) = Dnsmasq::try_start(dir) {
                return dnsmasq;
            }
        }
        panic!("dnsmasq did not start on any of 5 ports");
    }

    fn try_start(dir: &TestDir) -> Option<Dnsmasq> {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new("dnsmasq");
        cmd.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--address=/dns.test/127.0.0.1",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if is_root() {
            // Stay root rather than switch to a "dnsmasq" user that may not exist.
            cmd.arg("--user=root");
        }
        let child = cmd
            .spawn()
            .expect("dnsmasq is needed for the DNS tests (apt-get install dnsmasq-base)");
        let mut dnsmasq = Dnsmasq { child, port };
        dnsmasq.wait_until_answering().then_some(dnsmasq)
    }

    /// Sends a real query (A dns.test) until dnsmasq answers it; false if it exited.
    fn wait_until_answering(&mut self) -> bool {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in ["dns", "test"] {
            query.push(u8::try_from(label.len()).unwrap());
            query.extend_from_slice(label.as_bytes());
        }
        query.extend_from_slice(&[0, 0, 1, 0, 1]);
        let mut answer = [0u8; 512];
        for _ in 0..100 {
            let _ = socket.send_to(&query, ("127.0.0.1", self.port));
            if let Ok(n) = socket.recv(&mut answer) {
                if n > 12 && answer[..2] == [0x12, 0x34] {
                    return true;
                }
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
        }
        panic!("dnsmasq on port {} never answered", self.port);
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|uid| uid == "0"))
        .unwrap_or(false)
}

#[test]
fn dns_answers_are_classified_before_dialing() {
    let dir = TestDir::new("dns");
    let dns = Dnsmasq::start(&dir);
    let http = HttpServer::start();
    let p = http.port();
    let dns_arg = format!("127.0.0.1:{}", dns.port);
    let url = format!("http://dns.test:{p}/hello");

    // Allowed by name, but DNS says loopback: refused, and the log shows what DNS said.
    let closed = Bridge::start(
        &dir,
        &format!("allow = [\"dns.test:{p}\"]\n"),
        &["--dns", &dns_arg],
    );
    let out = curl(&["-x", &closed.proxy_url(), "-p", &url]);
    assert_eq!(out.status.code(), Some(56), "{}", stderr(&out));
    let event = closed.event_for("dns.test");
    assert_eq!(event["reason"], "non_public_address");
    assert_eq!(event["resolved"][0], "127.0.0.1");
    assert_eq!(event["refused_class"], "loopback");
    assert!(event["dialed"].is_null());

    // Positive control: the same name, with the loopback address opened on purpose.
    let dir2 = TestDir::new("dns-open");
    let open = Bridge::start(
        &dir2,
        &format!("allow = [\"dns.test:{p}\", \"*.dns.test:{p}\", \"127.0.0.1:{p}\"]\n"),
        &["--dns", &dns_arg],
    );
    let out = curl(&["-x", &open.proxy_url(), "-p", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");
    let event = open.event_for("dns.test");
    assert_eq!(event["decision"], "allow");
    assert_eq!(event["dialed"], format!("127.0.0.1:{p}"));

    // Subdomains are answered by dnsmasq too (address=/dns.test/ covers them).
    drop(connect_tunnel(open.addr, &format!("x.dns.test:{p}")));
}

#[test]
fn unknown_name_is_a_resolve_failure() {
    let dir = TestDir::new("dns-nx");
    let dns = Dnsmasq::start(&dir);
    let dns_arg = format!("127.0.0.1:{}", dns.port);
    let bridge = Bridge::start(&dir, "allow = [\"missing.test:*\"]\n", &["--dns", &dns_arg]);
    let (answer, reset) = raw_exchange(
        bridge.addr,
        b"CONNECT missing.test:443 HTTP/1.1\r\nHost: missing.test:443\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("x-netbox-reason: resolve-failed"),
        "{answer}"
    );
    assert!(answer.contains("error=dns_error"), "{answer}");
    assert!(reset);
    let event = bridge.event_for("missing.test");
    assert_eq!(event["reason"], "resolve_failed");
    assert!(event["duration_ms"].as_u64().unwrap() < 4000, "{event}");
}
