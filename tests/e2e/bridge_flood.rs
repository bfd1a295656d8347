//! A shared bridge (`--tenants`) under a flood of connections that never say who they are:
//! unfinished HTTP heads, SOCKS5 greetings without credentials, TLS handshakes that never
//! end, silent connections to the admin listener. Whoever can reach a listener can open
//! them; none may keep a tenant's client out, through the shared listener or the tenant's
//! own, and readiness answers 503 exactly while the bridge has no place for a new client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::upstream::HttpServer;
use crate::support::{connect_as, connect_tunnel, curl, sha256_hex, stdout, Bridge, TestDir};

const SECRET_A: &str = "flood-a-Vn4Kq8Zt2Lw6Rb";
const SECRET_B: &str = "flood-b-Hx5Pm1Jc9Sd3Ye";

/// More connections than the default `--max-connections` (1,024), as the attack was
/// written: each one more than the bridge's places would once have held.
const FLOOD: usize = 1100;

/// The seats of connections that have not named a tenant, by default, and the most the
/// lobby gives while every connection in it is within its grace (a second).
const LOBBY: usize = 256;
const CEILING: usize = 4 * LOBBY;

/// How long a tenant's request may take while the flood holds its connections open: a
/// request on a quiet bridge takes milliseconds; a client kept out waits for the flood's
/// head deadline (10 s) or is refused.
const SERVED_WITHIN: Duration = Duration::from_secs(2);

/// A TCP server that accepts every connection and holds it, saying nothing: the far end
/// of tunnels that only need to stay open. What it holds is closed when it is dropped.
struct Holder {
    port: u16,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl Holder {
    fn start() -> Holder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&held);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                keep.lock().unwrap().push(stream);
            }
        });
        Holder { port, held }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.held.lock().unwrap().clear();
    }
}

/// team-a (named by its token) may reach a.test, team-b (its token, or its own listener)
/// b.test, each on the test's HTTP server and the holder.
fn tenants(dir: &TestDir, http: u16, hold: u16, extra_a: &str) -> PathBuf {
    for (file, host) in [("a.toml", "a.test"), ("b.toml", "b.test")] {
        dir.write(
            file,
            &format!(
                "allow_private = [\"{host}:{http}\", \"{host}:{hold}\"]\n\
                 [hosts]\n\"{host}\" = \"127.0.0.1\"\n"
            ),
        );
    }
    dir.write(
        "tenants.toml",
        &format!(
            "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"sha256:{}\"]\n{extra_a}\n\
             [tenants.team-b]\nallowlist = [\"b.toml\"]\nsecrets = [\"sha256:{}\"]\n\
             listen = [\"127.0.0.1:0\"]\n",
            sha256_hex(SECRET_A.as_bytes()),
            sha256_hex(SECRET_B.as_bytes())
        ),
    )
}

fn start(dir: &TestDir, file: &Path, extra: &[&str]) -> Bridge {
    let mut args = vec![
        "--tenants".to_owned(),
        file.display().to_string(),
        "--admin".into(),
        "127.0.0.1:0".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Bridge::start_args(dir, &args)
}

/// `n` connections to `addr`, each having sent `first` and nothing more.
fn flood(addr: impl std::net::ToSocketAddrs + Copy, n: usize, first: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            // The bridge may already have dropped it: that is its answer.
            let _ = s.write_all(first);
            s
        })
        .collect()
}

/// Whether the bridge has ended `s` (closed or reset it) by now, without waiting.
fn ended_by_bridge(mut s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// Closes `s` with a reset, which the bridge passes on to the tunnel's other end.
fn reset(s: TcpStream) {
    let linger = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Linger, &linger).unwrap();
}

/// curl for `url` through `proxy`, with `extra`: the status it printed, and how long it
/// took.
fn timed(proxy: &str, url: &str, extra: &[&str]) -> (String, Duration) {
    let started = Instant::now();
    let mut args = vec!["-sS", "-o", "/dev/null", "-w", "%{http_code}"];
    args.extend(["--max-time", "15", "-x", proxy]);
    args.extend_from_slice(extra);
    args.push(url);
    let out = curl(&args);
    (stdout(&out), started.elapsed())
}

/// Asserts that curl got 200 through `proxy`, within [`SERVED_WITHIN`].
fn served(what: &str, proxy: &str, url: &str, extra: &[&str]) {
    let (status, took) = timed(proxy, url, extra);
    assert_eq!(status, "200", "{what}: answered {status:?} after {took:?}");
    assert!(
        took < SERVED_WITHIN,
        "{what}: served, but only after {took:?}"
    );
}

/// `GET /__netbox/ready`: the status and the body.
fn ready(admin: &str) -> (String, String) {
    let out = curl(&[
        "-s",
        "--max-time",
        "5",
        "-w",
        "\n%{http_code}",
        &format!("http://{admin}/__netbox/ready"),
    ]);
    let text = stdout(&out);
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.to_owned(), body.to_owned())
}

/// One gauge of the admin listener's metrics, for `session`.
fn gauge(admin: &str, name: &str, session: &str) -> Option<u64> {
    let out = curl(&[
        "-s",
        "--max-time",
        "5",
        &format!("http://{admin}/__netbox/metrics"),
    ]);
    let prefix = format!("{name}{{session=\"{session}\"}} ");
    stdout(&out)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
}

/// Waits for readiness to answer `want`, and returns its body.
fn ready_becomes(admin: &str, want: &str, why: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = ready(admin);
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{why}: readiness still {status} ({body:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn unfinished_heads_from_anyone_deny_no_tenant() {
    let dir = TestDir::new("flood-heads");
    let http = HttpServer::start();
    let hold = Holder::start();
    let (p, h) = (http.port(), hold.port);
    let bridge = start(&dir, &tenants(&dir, p, h, ""), &[]);
    let admin = bridge.admin_addr();
    let own = bridge.own_listener("team-b");
    let shared_a = format!("http://team-a:{SECRET_A}@{}", bridge.addr);
    let (url_a, url_b) = (
        format!("http://a.test:{p}/hello"),
        format!("http://b.test:{p}/hello"),
    );

    // Positive control, on a quiet bridge.
    served("team-a, quiet", &shared_a, &url_a, &["-p"]);
    assert_eq!(ready(&admin).0, "200");

    // The attack as written: more connections than --max-connections, no credentials,
    // each sending `CONNECT x` and never finishing its head.
    let heads = flood(bridge.addr, FLOOD, b"CONNECT x");

    // Every tenant's client is served at once, tunnelled and forwarded, through the shared
    // listener and through a tenant's own; a client that names no tenant is still told so,
    // and the bridge can take new clients: ready.
    let shared_b = format!("http://team-b:{SECRET_B}@{}", bridge.addr);
    let own_b = format!("http://{own}");
    let every_client_served = |when: &str| {
        served(
            &format!("team-a, tunnelled, {when}"),
            &shared_a,
            &url_a,
            &["-p"],
        );
        served(
            &format!("team-a, forwarded, {when}"),
            &shared_a,
            &url_a,
            &[],
        );
        served(
            &format!("team-b, shared listener, {when}"),
            &shared_b,
            &url_b,
            &["-p"],
        );
        served(
            &format!("team-b, own listener, {when}"),
            &own_b,
            &url_b,
            &[],
        );
        assert_eq!(timed(&bridge.proxy_url(), &url_a, &[]).0, "407");
        let (status, body) = ready(&admin);
        assert_eq!(
            (status.as_str(), body.trim_end()),
            ("200", "ready"),
            "{when}"
        );
    };
    every_client_served("under the flood");

    // The flood opens more once the first have had their grace, as an attacker re-opening
    // what was dropped would: the newest hold seats in the lobby and nothing else, the
    // oldest were dropped for them (at the ceiling, then two for each newcomer, to bring
    // the lobby back to its size), each logged, and every client is still served.
    std::thread::sleep(Duration::from_millis(1200));
    let again = flood(bridge.addr, 100, b"CONNECT x");
    every_client_served("under the flood's second wave");
    assert_eq!(
        gauge(&admin, "netbox_max_connections", "e2e"),
        Some(LOBBY as u64)
    );
    let seated = gauge(&admin, "netbox_open_connections", "e2e").unwrap();
    assert!(
        seated <= (CEILING - again.len()) as u64 && seated >= again.len() as u64,
        "{seated} seats taken"
    );
    // What the bridge ended has reached this side by now.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !again.iter().any(ended_by_bridge),
        "a connection within its grace was dropped"
    );
    let dropped = heads.iter().filter(|s| ended_by_bridge(s)).count();
    assert!(
        dropped >= FLOOD - CEILING + 2 * again.len(),
        "{dropped} of the first wave dropped"
    );
    let logged = bridge
        .events(dropped)
        .into_iter()
        .filter(|e| {
            e["session"] == "e2e"
                && e["reason"] == "connection_limit"
                && e["detail"]
                    .as_str()
                    .unwrap_or("")
                    .contains("--max-unidentified")
        })
        .count();
    assert!(logged >= dropped, "{logged} drops logged, {dropped} seen");
    drop((heads, again));

    // Readiness says 503 exactly while no new client can be served. One tenant at its
    // limit (team-a's share, 512 of the 1,024) leaves the bridge room: still ready.
    let mut tunnels: Vec<TcpStream> = (0..512)
        .map(|_| {
            let (status, stream) =
                connect_as(bridge.addr, &format!("a.test:{h}"), "team-a", SECRET_A);
            assert_eq!(status, "HTTP/1.1 200");
            stream
        })
        .collect();
    let (status, _) = connect_as(bridge.addr, &format!("a.test:{h}"), "team-a", SECRET_A);
    assert_eq!(status, "HTTP/1.1 503", "team-a past its share");
    assert_eq!(
        ready(&admin).0,
        "200",
        "one tenant is full, the bridge is not"
    );
    // team-b's share through its own listener takes the bridge's last places.
    let held_b: Vec<TcpStream> = (0..512)
        .map(|_| connect_tunnel(own.parse::<SocketAddr>().unwrap(), &format!("b.test:{h}")))
        .collect();
    let body = ready_becomes(&admin, "503", "every place is taken");
    assert!(body.contains("--max-connections"), "{body:?}");
    let (status, took) = timed(&shared_b, &url_b, &[]);
    assert_eq!(
        status, "503",
        "a new client of a full bridge, after {took:?}"
    );
    // Still no seat in the lobby is a place: a client that names no tenant is answered.
    assert_eq!(timed(&bridge.proxy_url(), &url_a, &[]).0, "407");
    // One place back (a tunnel reset: a client's FIN alone would leave the far end's half
    // open): ready again, and a new client is served.
    reset(tunnels.pop().unwrap());
    ready_becomes(&admin, "200", "a place came back");
    served("team-a, a place freed", &shared_a, &url_a, &["-p"]);
    drop((tunnels, held_b));
}

#[test]
fn socks5_greetings_and_trickled_heads_deny_no_tenant() {
    let dir = TestDir::new("flood-socks");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, &tenants(&dir, p, p, ""), &[]);
    let own = bridge.own_listener("team-b");
    // SOCKS5 greetings offering username/password, whose credentials never come, and
    // heads that stop in their first line: more than --max-connections together.
    let _greetings = flood(bridge.addr, FLOOD / 2, &[5, 1, 2]);
    let _heads = flood(
        bridge.addr,
        FLOOD / 2,
        b"GET http://a.test/ HTTP/1.1\r\nHost: a",
    );
    served(
        "team-a over SOCKS5",
        &format!("socks5h://team-a:{SECRET_A}@{}", bridge.addr),
        &format!("http://a.test:{p}/hello"),
        &[],
    );
    served(
        "team-a over HTTP",
        &format!("http://team-a:{SECRET_A}@{}", bridge.addr),
        &format!("http://a.test:{p}/hello"),
        &[],
    );
    served(
        "team-b, own listener, SOCKS5",
        &format!("socks5h://{own}"),
        &format!("http://b.test:{p}/hello"),
        &[],
    );
}

#[test]
fn tls_handshakes_that_never_end_deny_no_tenant() {
    let dir = TestDir::new("flood-tls");
    let http = HttpServer::start();
    let p = http.port();
    let (ca, cert, key) = crate::support::upstream::tls_identity_files(&dir.path, &["127.0.0.1"]);
    let file = tenants(&dir, p, p, "");
    let arg = |p: &Path| p.display().to_string();
    let bridge = start(
        &dir,
        &file,
        &["--tls-cert", &arg(&cert), "--tls-key", &arg(&key)],
    );
    let proxy = format!("https://team-a:{SECRET_A}@{}", bridge.addr);
    let url = format!("http://a.test:{p}/hello");
    let trust = ["--proxy-cacert", &arg(&ca)];
    // Positive control.
    served("team-a over TLS, quiet", &proxy, &url, &trust);
    // Connections that say nothing, and ClientHellos that stop after their record header.
    let _silent = flood(bridge.addr, FLOOD / 2, b"");
    let _hellos = flood(
        bridge.addr,
        FLOOD / 2,
        &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01],
    );
    served(
        "team-a over TLS, tunnelled",
        &proxy,
        &url,
        &[&trust[..], &["-p"]].concat(),
    );
    served("team-a over TLS, forwarded", &proxy, &url, &trust);
}

#[test]
fn silent_admin_connections_do_not_hold_up_readiness() {
    let dir = TestDir::new("flood-admin");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, &tenants(&dir, p, p, ""), &[]);
    let admin = bridge.admin_addr();
    assert_eq!(ready(&admin).0, "200");
    let _silent = flood(admin.as_str(), 1000, b"");
    let _asking = flood(admin.as_str(), 100, b"GET /__netbox/ready HTTP/1.1\r\nHo");
    let started = Instant::now();
    let (status, body) = ready(&admin);
    assert_eq!(status, "200", "{body:?} after {:?}", started.elapsed());
    assert!(started.elapsed() < SERVED_WITHIN, "{:?}", started.elapsed());
    assert!(gauge(&admin, "netbox_max_connections", "e2e").is_some());
}

#[test]
fn a_client_has_the_identify_deadline_to_name_its_tenant_and_no_more() {
    let dir = TestDir::new("flood-deadline");
    let http = HttpServer::start();
    let p = http.port();
    let file = tenants(&dir, p, p, "");
    let bridge = start(&dir, &file, &["--identify-timeout", "1s"]);
    let target = format!("a.test:{p}");
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("team-a:{SECRET_A}"));
    let head = format!(
        "GET http://{target}/hello HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic \
         {basic}\r\n\r\n"
    );
    // The control: a client that sends its head in parts, within the deadline, is served;
    // and on its kept-alive connection a later head has --header-timeout (10 s), not the
    // deadline to name a tenant.
    let mut kept = TcpStream::connect(bridge.addr).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (first, rest) = head.split_at(20);
    kept.write_all(first.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    kept.write_all(rest.as_bytes()).unwrap();
    let answer = read_response(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    std::thread::sleep(Duration::from_millis(1500));
    kept.write_all(head.as_bytes()).unwrap();
    let answer = read_response(&mut kept);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "second request: {answer}"
    );

    // A client that has not named its tenant a second after it connected is dropped, and
    // logged.
    let mut slow = TcpStream::connect(bridge.addr).unwrap();
    let started = Instant::now();
    slow.write_all(&head.as_bytes()[..20]).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    let ended = slow.read(&mut buf);
    assert!(
        matches!(ended, Ok(0)) || ended.is_err(),
        "the slow head was answered: {ended:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "dropped after {took:?}"
    );
    assert!(bridge
        .events(3)
        .iter()
        .any(|e| e["reason"] == "header_timeout" && e["session"] == "e2e"));
}

/// Reads one response with a Content-Length body.
fn read_response(s: &mut TcpStream) -> String {
    let head = crate::support::read_head(s);
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

#[test]
fn a_burst_of_tenant_clients_is_not_turned_away() {
    let dir = TestDir::new("flood-burst");
    let http = HttpServer::start();
    let hold = Holder::start();
    let (p, h) = (http.port(), hold.port);
    let file = tenants(&dir, p, h, "max_connections = 1024\n");
    let bridge = start(&dir, &file, &[]);
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("team-a:{SECRET_A}"));
    let target = format!("a.test:{h}");
    let connect = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {basic}\r\n\r\n"
    );
    // A thousand clients in the same moment, each sending its head as it connects: four
    // times the lobby's seats arrive before the bridge has read most of them.
    let mut burst = flood(bridge.addr, 1000, connect.as_bytes());
    let answers: Vec<String> = burst
        .iter_mut()
        .map(|s| {
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            crate::support::read_head(s)
        })
        .collect();
    let refused: Vec<&String> = answers
        .iter()
        .filter(|a| !a.starts_with("HTTP/1.1 200"))
        .collect();
    assert!(
        refused.is_empty(),
        "{} of 1000 not served, e.g. {:?}",
        refused.len(),
        refused.first()
    );
}
