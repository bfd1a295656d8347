//! The forward path keeps its upstream connection between a client's requests: one dial
//! per target and decision, each request still judged and logged on its own, and nothing
//! a server leaves on a kept connection taken for the next request's answer.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;

use crate::support::{curl, stderr, stdout, Bridge, TestDir};

/// A keep-alive server that answers every GET with which of its connections carried it
/// (`conn N req M PATH host HOST`), so a test can see which requests shared one. `/close`
/// is answered with `Connection: close`; `/drop` is answered as keep-alive and then the
/// connection is closed anyway; `/smuggle` answers with a second, unasked-for response
/// behind the first; after `/vanish`, the connection's next request is read and the
/// connection closed without an answer (a keep-alive that ran out as it came); `/trailers`
/// is answered chunked, with a trailer.
struct CountingServer {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
}

impl CountingServer {
    fn start() -> CountingServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || serve(stream, n + 1, &seen));
            }
        });
        CountingServer { addr, requests }
    }
}

fn serve(stream: std::net::TcpStream, conn: usize, seen: &AtomicUsize) {
    let mut reader = BufReader::new(stream);
    let mut vanishing = false;
    for request in 1.. {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
        let mut host = String::new();
        let mut length = 0;
        loop {
            let mut field = String::new();
            if reader.read_line(&mut field).unwrap_or(0) == 0 || field == "\r\n" {
                break;
            }
            if let Some((name, value)) = field.split_once(':') {
                if name.eq_ignore_ascii_case("host") {
                    host = value.trim().to_owned();
                }
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut content = vec![0u8; length];
        if std::io::Read::read_exact(&mut reader, &mut content).is_err() {
            return;
        }
        seen.fetch_add(1, Ordering::SeqCst);
        if vanishing {
            return;
        }
        vanishing = path == "/vanish";
        let body = format!("conn {conn} req {request} {path} host {host}\n");
        if path == "/trailers" {
            let chunked = format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n\
                 {:x}\r\n{body}\r\n0\r\nX-T: 1\r\n\r\n",
                body.len()
            );
            if reader.get_mut().write_all(chunked.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let close = if path == "/close" {
            "Connection: close\r\n"
        } else {
            ""
        };
        let mut reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{close}\r\n{body}",
            body.len()
        );
        if path == "/smuggle" {
            reply.push_str("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled\n");
        }
        let stream = reader.get_mut();
        if stream.write_all(reply.as_bytes()).is_err() || !close.is_empty() || path == "/drop" {
            return;
        }
    }
}

fn policy(port: u16, extra: &str) -> String {
    format!(
        "allow = [\"a.test:{port}\", \"b.test:{port}\", \"127.0.0.1:{port}\"]\n\
         [hosts]\n\"a.test\" = \"127.0.0.1\"\n\"b.test\" = \"127.0.0.1\"\n{extra}"
    )
}

/// One curl, several URLs through the proxy: curl keeps its connection to the proxy, so
/// they are one client connection. Prints each body, then `num_connects` per URL.
fn fetch_all(bridge: &Bridge, urls: &[String]) -> (Vec<String>, Vec<String>) {
    let proxy = bridge.proxy_url();
    let mut args = vec!["-x", proxy.as_str(), "-w", "connects %{num_connects}\n"];
    args.extend(urls.iter().map(String::as_str));
    let out = curl(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let (bodies, connects) = text
        .lines()
        .map(str::to_owned)
        .partition(|l| l.starts_with("conn "));
    (bodies, connects)
}

fn forwarded(bridge: &Bridge, count: usize) -> Vec<Value> {
    let events: Vec<Value> = bridge
        .events(count)
        .into_iter()
        .filter(|e| e["proto"] == "http_forward")
        .collect();
    assert_eq!(events.len(), count, "{events:#?}");
    events
}

#[test]
fn forwarded_requests_share_an_upstream_per_target_and_each_is_logged() {
    let dir = TestDir::new("fwd-keep");
    let server = CountingServer::start();
    let p = server.addr.port();
    let bridge = Bridge::start(&dir, &policy(p, ""), &[]);
    let url = |host: &str, path: &str| format!("http://{host}.test:{p}{path}");
    let urls = [
        url("a", "/one"),
        url("a", "/two"),
        url("b", "/three"),
        url("a", "/four"),
        url("a", "/close"),
        url("a", "/five"),
    ];
    let (bodies, connects) = fetch_all(&bridge, &urls);
    // The control: curl did keep one connection to the proxy for all six.
    assert_eq!(
        connects,
        [
            "connects 1",
            "connects 0",
            "connects 0",
            "connects 0",
            "connects 0",
            "connects 0"
        ],
        "{bodies:?}"
    );
    let a = format!("a.test:{p}");
    let b = format!("b.test:{p}");
    assert_eq!(
        bodies,
        [
            format!("conn 1 req 1 /one host {a}"),
            format!("conn 1 req 2 /two host {a}"),
            // Another target: another upstream connection, with its own Host.
            format!("conn 2 req 1 /three host {b}"),
            format!("conn 3 req 1 /four host {a}"),
            format!("conn 3 req 2 /close host {a}"),
            // The server said it closes: the next request dials anew.
            format!("conn 4 req 1 /five host {a}"),
        ]
    );
    // Every request is a record of its own, with its own path, status and body bytes.
    let events = forwarded(&bridge, 6);
    for (event, body) in events.iter().zip(&bodies) {
        let path = body.split(' ').nth(4).unwrap();
        assert_eq!(event["path"], path, "{event}");
        assert_eq!(event["method"], "GET", "{event}");
        assert_eq!(event["status"], 200, "{event}");
        assert_eq!(event["decision"], "allow", "{event}");
        assert_eq!(event["end"], "closed", "{event}");
        assert_eq!(event["dialed"], format!("127.0.0.1:{p}"), "{event}");
        assert_eq!(event["bytes_down"], body.len() + 1, "{event}");
        assert_eq!(event["bytes_up"], 0, "{event}");
        assert!(event["rule"].is_object(), "{event}");
    }
}

#[test]
fn a_kept_upstream_does_not_spare_a_request_its_own_judgement() {
    let dir = TestDir::new("fwd-judged");
    let server = CountingServer::start();
    let p = server.addr.port();
    let rules =
        format!("[[http]]\nhost = \"a.test:{p}\"\nmethods = [\"GET\"]\npaths = [\"/one\"]\n");
    let ca = dir.join("ca.pem").display().to_string();
    let bridge = Bridge::start(&dir, &policy(p, &rules), &["--ca-cert", &ca]);
    let proxy = bridge.proxy_url();
    let out = curl(&[
        "-x",
        &proxy,
        "-w",
        "%{http_code}\n",
        &format!("http://a.test:{p}/one"),
        &format!("http://a.test:{p}/two"),
    ]);
    // The allowed path passes (the control); the next, on the same client connection and
    // with an upstream connection kept for its target, is refused all the same.
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("conn 1 req 1 /one host a.test:{p}\n200\n")),
        "{text} {}",
        stderr(&out)
    );
    assert!(text.ends_with("403\n"), "{text}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "{text}");
    let events = forwarded(&bridge, 2);
    assert_eq!(events[0]["decision"], "allow", "{events:#?}");
    assert_eq!(events[1]["decision"], "deny", "{events:#?}");
    assert_eq!(events[1]["reason"], "path_not_allowed", "{events:#?}");
    assert_eq!(events[1]["path"], "/two", "{events:#?}");
}

#[test]
fn what_a_server_leaves_on_a_kept_connection_is_never_the_next_answer() {
    let dir = TestDir::new("fwd-hostile");
    let server = CountingServer::start();
    let p = server.addr.port();
    let bridge = Bridge::start(&dir, &policy(p, ""), &[]);
    let url = |path: &str| format!("http://a.test:{p}{path}");
    // An unasked-for second response behind the first, and a connection the server drops
    // after saying it keeps it: the next request is answered by a new connection.
    let (bodies, _) = fetch_all(
        &bridge,
        &[url("/smuggle"), url("/after"), url("/drop"), url("/last")],
    );
    let a = format!("a.test:{p}");
    assert_eq!(
        bodies,
        [
            format!("conn 1 req 1 /smuggle host {a}"),
            format!("conn 2 req 1 /after host {a}"),
            format!("conn 2 req 2 /drop host {a}"),
            format!("conn 3 req 1 /last host {a}"),
        ]
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 4);
    let events = forwarded(&bridge, 4);
    assert!(
        events
            .iter()
            .all(|e| e["status"] == 200 && e["end"] == "closed"),
        "{events:#?}"
    );
}

#[test]
fn a_keep_alive_that_runs_out_as_a_request_goes_is_not_the_clients_failure() {
    let dir = TestDir::new("fwd-vanish");
    let server = CountingServer::start();
    let p = server.addr.port();
    let bridge = Bridge::start(&dir, &policy(p, ""), &[]);
    let url = |path: &str| format!("http://a.test:{p}{path}");
    // A GET may be asked twice: it goes again on a new connection. The server saw it on
    // the first too (read, then the connection closed), so it counts four requests.
    let (bodies, _) = fetch_all(&bridge, &[url("/vanish"), url("/again")]);
    let a = format!("a.test:{p}");
    assert_eq!(
        bodies,
        [
            format!("conn 1 req 1 /vanish host {a}"),
            format!("conn 2 req 1 /again host {a}"),
        ]
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
    // A POST may not: the client is told it failed, and the record says how.
    let proxy = bridge.proxy_url();
    let out = curl(&[
        "-x",
        &proxy,
        "-w",
        "%{http_code}\n",
        &url("/vanish"),
        "--next",
        "-x",
        &proxy,
        "-w",
        "%{http_code}\n",
        "--data",
        "x",
        &url("/posted"),
    ]);
    let text = stdout(&out);
    let codes: Vec<&str> = text.lines().filter(|l| l.len() == 3).collect();
    assert_eq!(codes, ["200", "502"], "{text} {}", stderr(&out));
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        5,
        "the POST was sent once"
    );
    let events = forwarded(&bridge, 4);
    assert!(
        events[..3]
            .iter()
            .all(|e| e["status"] == 200 && e["end"] == "closed"),
        "{events:#?}"
    );
    assert_eq!(events[3]["path"], "/posted", "{events:#?}");
    assert_eq!(events[3]["status"], 502, "{events:#?}");
    assert_eq!(events[3]["end"], "upstream_error", "{events:#?}");
    assert_eq!(events[3]["bytes_up"], 1, "{events:#?}");
}

#[test]
fn a_response_with_trailers_is_logged_as_gone_through() {
    let dir = TestDir::new("fwd-trailers");
    let server = CountingServer::start();
    let p = server.addr.port();
    let bridge = Bridge::start(&dir, &policy(p, ""), &[]);
    let (bodies, _) = fetch_all(&bridge, &[format!("http://a.test:{p}/trailers")]);
    assert_eq!(bodies, [format!("conn 1 req 1 /trailers host a.test:{p}")]);
    let events = forwarded(&bridge, 1);
    assert_eq!(events[0]["bytes_down"], bodies[0].len() + 1, "{events:#?}");
    assert_eq!(events[0]["end"], "closed", "{events:#?}");
}
