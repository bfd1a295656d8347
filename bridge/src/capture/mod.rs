//! Capture: connections that reach the bridge without a proxy. Inside the sandbox every
//! address is local (pid 1's catch-all routes), so a program that ignores the proxy
//! settings and dials an address lands on the bridge's listener for that port, and the
//! accepted socket's local address is the one it dialled. That is the target: the name a
//! session address was handed out for by the DNS stub (dns.rs, addresses.rs), or the
//! address itself. From there it is a tunnel like CONNECT's: policy, resolution, the
//! address checks, the dial, and what the tunnel carries (a TLS port's ClientHello must
//! name the target; on port 80 the request's Host must). A refusal is a reset.

pub mod addresses;
pub mod dns;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;

use crate::client_io::{ClientIo, Stream};
use crate::conn::Conn;
use crate::log::{Attempt, End, Proto};
use crate::policy::{Reason, Verdict};
use crate::target::{canonical_ip, normalise_host, Host, Target};

pub use addresses::SessionAddresses;

/// The port whose captured connections must carry HTTP naming their target.
const HTTP_PORT: u16 = 80;

/// Largest request head read on port 80 before the Host is known.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Serves one captured connection, which was dialled to `dialled`.
pub async fn serve(io: ClientIo, conn: Conn, dialled: SocketAddr) {
    let conn = conn.wait_for_place(Duration::from_millis(500)).await;
    let mut attempt = Attempt::begin(conn.session.id.clone(), Proto::Captured);
    let host = match conn.session.addresses.name_for(dialled.ip()) {
        Some(name) => Host::Name(name),
        None => Host::Ip(canonical_ip(dialled.ip())),
    };
    let target = Target {
        host,
        port: dialled.port(),
    };
    if let Some(why) = conn.over_limit() {
        attempt.target = Some(target);
        attempt.reason = Reason::ConnectionLimit;
        attempt.detail = Some(why.to_owned());
        conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
        io.reset_on_close();
        return;
    }
    let upstream = match crate::upstream::open(&conn, &mut attempt, &target).await {
        Ok(upstream) => upstream,
        Err(_) => {
            // The attempt carries the refusal's reason and detail.
            conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
            io.reset_on_close();
            return;
        }
    };
    let (client, unread) = io.into_stream();
    let Some(mut client) = client else {
        conn.shared
            .log
            .record(&attempt.finish(End::ClientError, 0, 0));
        return;
    };
    let mut prefix = unread;
    let policy = &conn.session.policy;
    if target.port == HTTP_PORT && policy.http_check(&target).is_none() {
        match read_host(
            &mut client,
            prefix,
            &target,
            conn.shared.config.header_timeout,
        )
        .await
        {
            Ok(head) => prefix = head,
            Err((reason, detail)) => {
                attempt.decision = Verdict::Deny;
                attempt.reason = reason;
                attempt.detail = Some(detail);
                conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
                crate::tls_check::cut(client, false).await;
                return;
            }
        }
    }
    match crate::carry::carry(&conn, client, prefix, upstream, &target, &attempt).await {
        Ok(stats) => {
            conn.shared
                .log
                .record(&attempt.finish(stats.end, stats.bytes_up, stats.bytes_down));
        }
        Err(refused) => {
            refused.refuse(&mut attempt);
            conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
        }
    }
}

/// Reads a captured port-80 connection's first request head and checks that its Host
/// names the target (a server picks its site by it). Returns the bytes read, to be sent
/// on first.
async fn read_host(
    client: &mut Stream,
    prefix: Bytes,
    target: &Target,
    timeout: Duration,
) -> Result<Bytes, (Reason, String)> {
    let mut head = prefix.to_vec();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {
                let hosts: Vec<&[u8]> = request
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("host"))
                    .map(|h| h.value)
                    .collect();
                return match hosts.as_slice() {
                    [one] if names_target(one, target) => Ok(head.into()),
                    _ => Err((
                        Reason::HostMismatch,
                        format!(
                            "a captured connection to {target} asks, by its Host header, for \
                             another host (or none)"
                        ),
                    )),
                };
            }
            Ok(httparse::Status::Partial) if head.len() < MAX_HEAD_BYTES => {}
            Ok(httparse::Status::Partial) => {
                return Err((Reason::HeaderTooLarge, "request head too large".into()))
            }
            Err(_) => {
                return Err((
                    Reason::BadRequest,
                    format!(
                        "a captured connection to {target} does not start with an HTTP \
                         request (port {HTTP_PORT} carries HTTP only)"
                    ),
                ))
            }
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&chunk[..n]),
            Ok(_) => return Err((Reason::BadRequest, "the client left".into())),
            Err(_) => {
                return Err((
                    Reason::HeaderTimeout,
                    format!("no whole request head within {}s", timeout.as_secs()),
                ))
            }
        }
    }
}

/// Whether a Host header names the target: the same host (normalised), and the same port
/// if it gives one.
fn names_target(value: &[u8], target: &Target) -> bool {
    let Ok(text) = std::str::from_utf8(value) else {
        return false;
    };
    if text.contains('@') {
        return false;
    }
    match Target::parse_with_default_port(text, target.port) {
        Ok(named) => named == *target,
        // A bare name the parser takes otherwise (no port at all).
        Err(_) => normalise_host(text).is_ok_and(|host| host == target.host),
    }
}
