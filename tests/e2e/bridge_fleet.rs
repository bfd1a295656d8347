//! Two `netbox bridge --tenants` processes behind a real TCP load balancer (HAProxy, from
//! Debian's packages), as a fleet runs them: each tenant reaches only its own hosts through
//! either bridge, a wrong token gets 407 from either, and killing one bridge costs only its
//! own connections while clients go on through the other.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::upstream::HttpServer;
use crate::support::{connect_as, curl, start_two_tenants, stdout, Bridge, TestDir};

const SECRET_A: &str = "fleet-a-4Kd9Qw2Lx7Vb";
const SECRET_B: &str = "fleet-b-8Hn3Zp6Rt1Ym";

/// A bridge with the fleet's one tenants file (each bridge its own copy and log).
fn bridge(dir: &TestDir, port: u16) -> Bridge {
    for (file, host) in [("a.toml", "a.test"), ("b.toml", "b.test")] {
        dir.write(
            file,
            &format!("allow_private = [\"{host}:{port}\"]\n[hosts]\n\"{host}\" = \"127.0.0.1\"\n"),
        );
    }
    start_two_tenants(dir, SECRET_A, SECRET_B)
}

/// HAProxy in TCP mode in front of `bridges`, round robin, checking each every 200 ms and
/// sending a connection a dead bridge refused to the other.
struct Balancer {
    child: Child,
    port: u16,
}

impl Balancer {
    fn start(dir: &TestDir, bridges: &[&Bridge]) -> Balancer {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let servers: String = bridges
            .iter()
            .enumerate()
            .map(|(i, b)| {
                format!(
                    "  server bridge{i} {} check inter 200 fall 1 rise 1\n",
                    b.addr
                )
            })
            .collect();
        let conf = dir.write(
            "haproxy.cfg",
            &format!(
                "global\n  maxconn 256\n\
                 defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 30s\n\
                 \x20 timeout server 30s\n  retries 3\n  option redispatch\n\
                 frontend egress\n  bind 127.0.0.1:{port}\n  default_backend bridges\n\
                 backend bridges\n  balance roundrobin\n{servers}"
            ),
        );
        let child = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy (apt-get install haproxy)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Balancer { child, port }
    }

    fn proxy(&self, user: Option<&str>) -> String {
        match user {
            Some(user) => format!("http://{user}@127.0.0.1:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status(proxy: &str, url: &str) -> String {
    stdout(&curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-x",
        proxy,
        url,
    ]))
}

/// A CONNECT tunnel through the balancer as team-a, with one GET through it.
fn tunnel(balancer: &Balancer, port: u16) -> TcpStream {
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], balancer.port));
    let (status, mut s) = connect_as(at, &format!("a.test:{port}"), "team-a", SECRET_A);
    assert_eq!(status, "HTTP/1.1 200");
    assert!(get(&mut s));
    s
}

/// A GET through an open tunnel: whether its answer came.
fn get(s: &mut TcpStream) -> bool {
    if write!(s, "GET /hello HTTP/1.1\r\nHost: a.test\r\n\r\n").is_err() {
        return false;
    }
    let mut got = Vec::new();
    while !got.ends_with(b"hello from upstream\n") {
        let mut chunk = [0u8; 512];
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

#[test]
fn two_bridges_behind_a_load_balancer_serve_each_tenant_its_own_policy() {
    let (dir1, dir2, dir_lb) = (
        TestDir::new("fleet-1"),
        TestDir::new("fleet-2"),
        TestDir::new("fleet-lb"),
    );
    let http = HttpServer::start();
    let p = http.port();
    let mut first = bridge(&dir1, p);
    let second = bridge(&dir2, p);
    let balancer = Balancer::start(&dir_lb, &[&first, &second]);
    let a_user = format!("team-a:{SECRET_A}");
    let b_user = format!("team-b:{SECRET_B}");
    let (a, b) = (
        format!("http://a.test:{p}/hello"),
        format!("http://b.test:{p}/hello"),
    );
    // Seven connections a round, so that round robin gives every kind to both bridges.
    for _ in 0..4 {
        assert_eq!(status(&balancer.proxy(Some(&a_user)), &a), "200");
        // Positive controls, and each tenant refused the other's host.
        assert_eq!(status(&balancer.proxy(Some(&a_user)), &a), "200");
        assert_eq!(status(&balancer.proxy(Some(&b_user)), &b), "200");
        assert_eq!(status(&balancer.proxy(Some(&a_user)), &b), "502");
        assert_eq!(status(&balancer.proxy(Some(&b_user)), &a), "502");
        assert_eq!(status(&balancer.proxy(Some("team-a:wrong")), &a), "407");
        assert_eq!(status(&balancer.proxy(None), &a), "407");
    }
    // Both bridges took their share, each under the tenants' own sessions.
    for bridge in [&first, &second] {
        let events = bridge.events(6);
        let allowed = |session: &str, host: &str| {
            events
                .iter()
                .any(|e| e["session"] == session && e["host"] == host && e["decision"] == "allow")
        };
        assert!(
            allowed("e2e/team-a", "a.test") && allowed("e2e/team-b", "b.test"),
            "{events:?}"
        );
        assert!(!allowed("e2e/team-a", "b.test") && !allowed("e2e/team-b", "a.test"));
        assert!(events.iter().any(|e| e["reason"] == "proxy_auth_required"));
    }

    // Two tunnels, one through each bridge (round robin); then one bridge dies.
    let mut tunnels = [tunnel(&balancer, p), tunnel(&balancer, p)];
    first.kill();
    let alive: Vec<bool> = tunnels.iter_mut().map(get).collect();
    assert_eq!(
        alive.iter().filter(|a| **a).count(),
        1,
        "only the dead bridge's tunnel is lost: {alive:?}"
    );
    // New clients go on through the other bridge, none refused.
    for _ in 0..6 {
        assert_eq!(status(&balancer.proxy(Some(&a_user)), &a), "200");
        assert_eq!(status(&balancer.proxy(Some(&b_user)), &b), "200");
    }
    let survivor = second
        .events(0)
        .iter()
        .filter(|e| e["session"] == "e2e/team-a" && e["decision"] == "allow")
        .count();
    assert!(
        survivor >= 6 + 2,
        "the other bridge served them: {survivor}"
    );
}
