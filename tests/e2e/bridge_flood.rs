//! A shared bridge (`--tenants`) under a flood of connections that never say who they are:
//! unfinished HTTP heads, SOCKS5 greetings without credentials, TLS handshakes that never
//! end, replayed ClientHellos, silent connections to the admin listener, more than the
//! bridge has descriptors. Whoever can reach a listener can open them; none may keep a
//! tenant's client out, through the shared listener or the tenant's own, nor push another
//! source's slow client out (each 127.0.0.x address is a source of its own), nor a
//! tenant's refusals out of the log; readiness answers 503 exactly while the bridge has no
//! place for a new client.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
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
    // The gauges say what holds: the lobby holds up to 4 x N (its max), N is its size.
    assert_eq!(
        gauge(&admin, "netbox_max_connections", "e2e"),
        Some(CEILING as u64)
    );
    assert_eq!(
        gauge(&admin, "netbox_max_unidentified", "e2e"),
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
    let counted = gauge(&admin, "netbox_unidentified_dropped_total", "e2e").unwrap();
    assert!(
        counted >= dropped as u64,
        "{counted} drops counted, {dropped} seen"
    );
    drop((heads, again));

    // Readiness says 503 exactly while no new client can be served. A tenant at its own
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
    // Its record says how long it was held: from its accept.
    let timed_out = bridge.events(3);
    let timed_out = timed_out
        .iter()
        .find(|e| e["reason"] == "header_timeout" && e["session"] == "e2e")
        .expect("the slow client's drop is logged");
    let held = timed_out["duration_ms"].as_u64().unwrap();
    assert!((900..3000).contains(&held), "duration_ms {held}");
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

/// A connection to `to` from the loopback address `from`: every address of 127.0.0.0/8
/// is this machine's, and each is a source of its own to the bridge.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::os::fd::AsRawFd;
    let SocketAddr::V4(to) = to else {
        panic!("an IPv4 listener")
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(from, 0)),
    )
    .unwrap();
    connect(fd.as_raw_fd(), &SockaddrIn::from(to)).unwrap();
    TcpStream::from(fd)
}

/// [`flood`] from the loopback address `from`.
fn flood_from(from: Ipv4Addr, to: SocketAddr, n: usize, first: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = connect_from(from, to);
            let _ = s.write_all(first);
            s
        })
        .collect()
}

const HONEST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const FLOODER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A SOCKS5 client in steps, so that a test can pause it between them.
struct Socks5(TcpStream);

impl Socks5 {
    /// Connects from `from` and sends the greeting (username/password), read answered.
    fn greet(from: Ipv4Addr, bridge: SocketAddr) -> Socks5 {
        let mut s = connect_from(from, bridge);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&[5, 1, 2]).unwrap();
        let mut answer = [0u8; 2];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(answer, [5, 2], "username/password chosen");
        Socks5(s)
    }

    /// Sends `user`'s credentials: whether they were taken (an error: the bridge has
    /// ended the connection).
    fn credentials(&mut self, user: &str, secret: &str) -> std::io::Result<bool> {
        let mut sub = vec![1, u8::try_from(user.len()).unwrap()];
        sub.extend_from_slice(user.as_bytes());
        sub.push(u8::try_from(secret.len()).unwrap());
        sub.extend_from_slice(secret.as_bytes());
        self.0.write_all(&sub)?;
        let mut answer = [0u8; 2];
        self.0.read_exact(&mut answer)?;
        Ok(answer == [1, 0])
    }

    /// CONNECT to `host:port`, then one GET through the tunnel: its status line.
    fn get(mut self, host: &str, port: u16) -> std::io::Result<String> {
        let mut request = vec![5, 1, 0, 3, u8::try_from(host.len()).unwrap()];
        request.extend_from_slice(host.as_bytes());
        request.extend_from_slice(&port.to_be_bytes());
        self.0.write_all(&request)?;
        let mut reply = [0u8; 10];
        self.0.read_exact(&mut reply)?;
        if reply[1] != 0 {
            return Ok(format!("SOCKS5 reply {}", reply[1]));
        }
        write!(
            self.0,
            "GET /hello HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )?;
        let head = crate::support::read_head(&mut self.0);
        Ok(head.lines().next().unwrap_or("").to_owned())
    }
}

#[test]
fn a_flood_from_one_source_pushes_out_only_its_own_connections() {
    let dir = TestDir::new("flood-sources");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(
        &dir,
        &tenants(&dir, p, p, ""),
        &["--max-unidentified", "16"],
    );
    // 16 seats, 64 at most while they are young.
    let over_the_ceiling = 150;
    // The control, on a quiet bridge: a client that takes 1.2 s between its greeting and
    // its credentials (a slow link, a slow machine) is served.
    let mut quiet = Socks5::greet(HONEST, bridge.addr);
    std::thread::sleep(Duration::from_millis(1200));
    assert!(quiet.credentials("team-a", SECRET_A).unwrap());
    assert_eq!(quiet.get("a.test", p).unwrap(), "HTTP/1.1 200 OK");

    // The attack: that client again, and meanwhile one source opens connections that say
    // nothing, past the lobby's ceiling at once and more again once the first are past
    // their grace.
    let mut slow = Socks5::greet(HONEST, bridge.addr);
    // A client of the flood's own source that has given its credentials (its tenant is
    // known: it has left the lobby) and is slow to send its request.
    let mut named = Socks5::greet(FLOODER, bridge.addr);
    assert!(named.credentials("team-a", SECRET_A).unwrap());
    let first = flood_from(FLOODER, bridge.addr, over_the_ceiling, b"");
    std::thread::sleep(Duration::from_millis(1100));
    let second = flood_from(FLOODER, bridge.addr, over_the_ceiling, b"");
    std::thread::sleep(Duration::from_millis(200));
    // The flood was pushed out, by its own newer connections...
    let ended = first
        .iter()
        .chain(&second)
        .filter(|s| ended_by_bridge(s))
        .count();
    assert!(
        ended >= 2 * over_the_ceiling - 64,
        "only {ended} of the flood's connections were dropped"
    );
    // ...and the slow client of another source was not: it names its tenant and is served.
    let taken = slow.credentials("team-a", SECRET_A);
    assert!(
        matches!(taken, Ok(true)),
        "the slow client was dropped for the flood: {taken:?}"
    );
    assert_eq!(slow.get("a.test", p).unwrap(), "HTTP/1.1 200 OK");
    // Nor was the flood source's own client whose credentials were in.
    let asked = named.get("a.test", p);
    assert!(
        matches!(&asked, Ok(status) if status == "HTTP/1.1 200 OK"),
        "a client past its credentials was dropped with the lobby: {asked:?}"
    );
    drop((first, second));
}

#[test]
fn a_flood_of_drops_and_refusals_hides_no_tenants_refusal() {
    let dir = TestDir::new("flood-audit");
    let http = HttpServer::start();
    let p = http.port();
    let mut bridge = start(
        &dir,
        &tenants(&dir, p, p, ""),
        &["--max-unidentified", "8", "--log-refusals-per-minute", "50"],
    );
    let own = bridge.own_listener("team-b");
    let shared_a = format!("http://team-a:{SECRET_A}@{}", bridge.addr);
    // The control: on a quiet bridge a tenant's refused attempt is in the log.
    assert_eq!(
        timed(&shared_a, &format!("http://quiet-a.test:{p}/steal"), &[]).0,
        "502"
    );
    bridge.event_for("quiet-a.test");

    // The attack: 400 connections from one source that never name a tenant (all but 32
    // dropped for newer ones, as fast as they come), and 100 requests with no credentials
    // (each a 407, a refusal under the bridge's own session), more than the minute's 50.
    let heads = flood_from(FLOODER, bridge.addr, 400, b"CONNECT x");
    for _ in 0..100 {
        let mut s = connect_from(FLOODER, bridge.addr);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n")
            .unwrap();
        assert!(crate::support::read_head(&mut s).starts_with("HTTP/1.1 407"));
    }
    // Each tenant's refused attempt right after is still in the log.
    assert_eq!(
        timed(&shared_a, &format!("http://exfil-a.test:{p}/steal"), &[]).0,
        "502"
    );
    assert_eq!(
        timed(
            &format!("http://{own}"),
            &format!("http://exfil-b.test:{p}/steal"),
            &[]
        )
        .0,
        "502"
    );
    let a = bridge.event_for("exfil-a.test");
    assert_eq!(a["session"], "e2e/team-a");
    assert_eq!(bridge.event_for("exfil-b.test")["session"], "e2e/team-b");
    let dropped_seen = heads.iter().filter(|s| ended_by_bridge(s)).count();
    assert!(dropped_seen >= 360, "{dropped_seen} dropped");
    bridge.stop();
    // The drops are summed up, not written one by one: a record or two (one per 5 s, and
    // one as the bridge stops), naming the flood's source; the bridge's own refusals past
    // its budget are counted.
    let records = bridge.records();
    let summaries: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["type"] == "unidentified_dropped")
        .collect();
    assert!(
        (1..=3).contains(&summaries.len()),
        "{} summaries",
        summaries.len()
    );
    let counted: u64 = summaries.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    let from_flooder: u64 = summaries
        .iter()
        .map(|r| r["from"]["127.0.0.2"].as_u64().unwrap_or(0))
        .sum();
    assert!(counted >= dropped_seen as u64, "{counted} counted");
    assert_eq!(from_flooder, counted, "all from the flood's source");
    let bridge_refusals = records
        .iter()
        .filter(|r| r["type"] == "net" && r["session"] == "e2e")
        .count();
    assert!(
        bridge_refusals <= 50,
        "{bridge_refusals} of the bridge's refusals written"
    );
    assert!(records
        .iter()
        .any(|r| r["type"] == "net_suppressed" && r["session"] == "e2e"));
}

/// A ClientHello as a TLS client sends it: the flood replays these bytes, computing
/// nothing per connection.
fn canned_client_hello() -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("bridge.test").unwrap();
    let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    hello
}

#[test]
fn replayed_client_hellos_from_one_source_do_not_stall_anothers_handshake() {
    let dir = TestDir::new("flood-hellos");
    let http = HttpServer::start();
    let p = http.port();
    // An RSA key, whose signature costs the bridge the most.
    let (cert, key) = (dir.join("rsa.pem"), dir.join("rsa.key"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=bridge",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr_of(&made));
    let arg = |p: &Path| p.display().to_string();
    let bridge = start(
        &dir,
        &tenants(&dir, p, p, ""),
        &["--tls-cert", &arg(&cert), "--tls-key", &arg(&key)],
    );
    let proxy = format!("https://team-a:{SECRET_A}@{}", bridge.addr);
    let url = format!("http://a.test:{p}/hello");
    let trust = ["--proxy-cacert", &arg(&cert)];
    // The control, on a quiet bridge.
    served("team-a over TLS, quiet", &proxy, &url, &trust);

    // The attack: one source replays a canned ClientHello on new connections as fast as
    // it can, from two threads, for 4 s.
    let hello = canned_client_hello();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = bridge.addr;
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            let (hello, stop) = (hello.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut held = std::collections::VecDeque::new();
                let mut sent = 0usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut s = connect_from(FLOODER, addr);
                    let _ = s.write_all(&hello);
                    held.push_back(s);
                    if held.len() > 300 {
                        reset(held.pop_front().unwrap());
                    }
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    // Another source's client is served as on a quiet bridge, three times over.
    let mut took = Vec::new();
    for _ in 0..3 {
        let (status, t) = timed(&proxy, &url, &trust);
        took.push((status, t));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent: usize = flooders.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(sent > 1000, "the flood sent only {sent} ClientHellos");
    for (status, t) in &took {
        assert_eq!(
            status, "200",
            "under the flood, after {t:?} ({sent} hellos)"
        );
        assert!(
            *t < Duration::from_secs(1),
            "under the flood, served only after {t:?} ({sent} hellos)"
        );
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn out_of_descriptors_the_floods_seats_make_room() {
    let dir = TestDir::new("flood-fds");
    let http = HttpServer::start();
    let p = http.port();
    let file = tenants(&dir, p, p, "");
    let args: Vec<String> = [
        "--tenants",
        &file.display().to_string(),
        "--admin",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // An open-file limit well below what the default lobby (1,024 seats) can take.
    let bridge = Bridge::start_under(&dir, &["prlimit", "--nofile=300:300", "--"], &args);
    let own = format!("http://{}", bridge.own_listener("team-b"));
    let shared_a = format!("http://team-a:{SECRET_A}@{}", bridge.addr);
    let (url_a, url_b) = (
        format!("http://a.test:{p}/hello"),
        format!("http://b.test:{p}/hello"),
    );
    // The control.
    served("team-a, quiet", &shared_a, &url_a, &[]);
    // The attack: more silent connections than the bridge has descriptors, from one
    // source; those it cannot accept wait in the queue, ahead of every later client.
    let silent = flood_from(FLOODER, bridge.addr, 340, b"");
    std::thread::sleep(Duration::from_millis(300));
    // Clients of another source, through the shared listener and a tenant's own, are
    // served at once (not when the flood's connections reach --identify-timeout, 5 s).
    served(
        "team-b, own listener, out of descriptors",
        &own,
        &url_b,
        &[],
    );
    served(
        "team-a, shared listener, out of descriptors",
        &shared_a,
        &url_a,
        &[],
    );
    let dropped = silent.iter().filter(|s| ended_by_bridge(s)).count();
    assert!(dropped > 0, "no flood connection was dropped");
    assert!(
        bridge.stderr().iter().any(|l| l.contains("to make room")),
        "{:?}",
        bridge.stderr()
    );
}

#[test]
fn a_slow_scrape_is_not_pushed_out_by_another_sources_admin_flood() {
    let dir = TestDir::new("flood-admin-sources");
    let http = HttpServer::start();
    let p = http.port();
    let bridge = start(&dir, &tenants(&dir, p, p, ""), &[]);
    let admin: SocketAddr = bridge.admin_addr().parse().unwrap();
    let ask = b"GET /__netbox/ready HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n";
    // The control: a scrape that sends its request 1.2 s after it connects is answered.
    let mut quiet = connect_from(HONEST, admin);
    std::thread::sleep(Duration::from_millis(1200));
    quiet.write_all(ask).unwrap();
    quiet
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(crate::support::read_head(&mut quiet).starts_with("HTTP/1.1 200"));
    // The attack: that scrape again, and meanwhile one source opens silent connections,
    // past the admin lobby's ceiling (4 x 64) at once and again after their grace.
    let mut slow = connect_from(HONEST, admin);
    let first = flood_from(FLOODER, admin, 300, b"");
    std::thread::sleep(Duration::from_millis(1100));
    let second = flood_from(FLOODER, admin, 300, b"");
    std::thread::sleep(Duration::from_millis(100));
    let ended = first
        .iter()
        .chain(&second)
        .filter(|s| ended_by_bridge(s))
        .count();
    assert!(
        ended >= 300,
        "only {ended} of the flood's connections were dropped"
    );
    let _ = slow.write_all(ask);
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = crate::support::read_head(&mut slow);
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "the slow scrape was dropped for the flood: {head:?}"
    );
}

#[test]
fn an_identify_timeout_of_zero_is_refused_with_one_line() {
    let dir = TestDir::new("flood-zero");
    let file = tenants(&dir, 9, 9, "");
    let mut child = std::process::Command::new(crate::support::netbox_bin())
        .args(["bridge", "--listen", "127.0.0.1:0", "--tenants"])
        .arg(&file)
        .args(["--identify-timeout", "0s"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("--identify-timeout 0s was taken: the bridge started");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success());
    assert!(
        err.contains("--identify-timeout") && err.contains("longer than zero"),
        "{err}"
    );
    // The control: one second is taken.
    let mut dir_ok = Bridge::start_args(
        &dir,
        &[
            "--tenants".into(),
            file.display().to_string(),
            "--identify-timeout".into(),
            "1s".into(),
        ],
    );
    assert!(dir_ok.is_alive());
}

/// A TLS client of the bridge that presents a certificate of its own, in steps.
struct CertClient(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl CertClient {
    /// Connects from `from` and completes the handshake, trusting `server_ca` and
    /// presenting `cert` (signed by `issuer`).
    fn handshake(
        from: Ipv4Addr,
        bridge: SocketAddr,
        server_ca: &Path,
        (cert, key): &(rcgen::Certificate, rcgen::KeyPair),
    ) -> CertClient {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(server_ca).unwrap() {
            roots.add(ca.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![cert.der().clone()], key)
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut tcp = connect_from(from, bridge);
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).unwrap();
        }
        CertClient(rustls::StreamOwned::new(conn, tcp))
    }

    /// One GET of `url` with no credentials: its status line.
    fn get(mut self, url: &str) -> std::io::Result<String> {
        write!(
            self.0,
            "GET {url} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        )?;
        self.0.flush()?;
        let head = crate::support::read_head(&mut self.0);
        Ok(head.lines().next().unwrap_or("").to_owned())
    }
}

#[test]
fn a_client_named_by_its_certificate_is_out_of_the_lobby_before_its_request() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let dir = TestDir::new("flood-certs");
    let http = HttpServer::start();
    let p = http.port();
    let (server_ca, cert, key) =
        crate::support::upstream::tls_identity_files(&dir.path, &["127.0.0.1"]);
    // The operator's client CA, and a runner's certificate that names team-a.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let client_ca = dir.write(
        "client-ca.pem",
        &ca_params.self_signed(&ca_key).unwrap().pem(),
    );
    let issuer = Issuer::new(ca_params, ca_key);
    let runner_key = KeyPair::generate().unwrap();
    let runner = CertificateParams::new(vec!["runner-a.ci.test".to_owned()])
        .unwrap()
        .signed_by(&runner_key, &issuer)
        .unwrap();
    let runner = (runner, runner_key);
    let file = tenants(&dir, p, p, "client_names = [\"runner-a.ci.test\"]\n");
    let arg = |p: &Path| p.display().to_string();
    let bridge = start(
        &dir,
        &file,
        &[
            "--tls-cert",
            &arg(&cert),
            "--tls-key",
            &arg(&key),
            "--client-ca",
            &arg(&client_ca),
            "--max-unidentified",
            "16",
        ],
    );
    let url = format!("http://a.test:{p}/hello");
    // The control, on a quiet bridge: the runner completes its handshake, then sends its
    // request 1.2 s later, and is served.
    let quiet = CertClient::handshake(FLOODER, bridge.addr, &server_ca, &runner);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(quiet.get(&url).unwrap(), "HTTP/1.1 200 OK");

    // The attack: the runner again, and meanwhile its own source (a machine it shares)
    // floods the listener past the lobby's ceiling, at once and after the grace. Its
    // certificate named its tenant: it has left the lobby, and nothing done there reaches
    // it.
    let named = CertClient::handshake(FLOODER, bridge.addr, &server_ca, &runner);
    std::thread::sleep(Duration::from_millis(200));
    let first = flood_from(FLOODER, bridge.addr, 150, b"");
    std::thread::sleep(Duration::from_millis(1100));
    let second = flood_from(FLOODER, bridge.addr, 150, b"");
    std::thread::sleep(Duration::from_millis(200));
    let ended = first
        .iter()
        .chain(&second)
        .filter(|s| ended_by_bridge(s))
        .count();
    assert!(
        ended >= 300 - 64,
        "only {ended} of the flood's connections were dropped"
    );
    let asked = named.get(&url);
    assert!(
        matches!(&asked, Ok(status) if status == "HTTP/1.1 200 OK"),
        "the runner was dropped with the lobby: {asked:?}"
    );
}
