//! A tunnel to a port that must carry TLS (443, and an allowlist's `tls_ports`) goes
//! where it claims: before a byte goes upstream, the client's ClientHello is read (not
//! answered: TLS is not terminated) and the server name it asks for must be the host the
//! tunnel was allowed for. Otherwise a command allowed to reach `a.test` on a shared CDN
//! could ask the CDN, through that tunnel, for any other customer's site.
//!
//! The bytes read are handed back to be replayed upstream unchanged; a refusal answers
//! the client with a TLS alert where it spoke TLS, then a reset.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client_hello::{self, Hello, MAX_HELLO_BYTES};
use crate::client_io::Stream;
use crate::policy::Reason;
use crate::target::{normalise_host, Target};

/// Bytes buffered while a ClientHello is incomplete, at most: its records' headers come
/// on top of the message (a hello cut into tiny records is still refused past this).
const MAX_BUFFERED_BYTES: usize = 2 * MAX_HELLO_BYTES;

/// A fatal `access_denied` alert (RFC 8446 §6): the client's TLS stack reports it.
const ACCESS_DENIED_ALERT: [u8; 7] = [21, 3, 3, 0, 2, 2, 49];

/// Why a tunnel was refused after its ClientHello, for the log.
#[derive(Debug)]
pub struct HelloRefusal {
    pub reason: Reason,
    pub detail: String,
    /// The client spoke TLS: it is told with an alert before the reset.
    pub alert: bool,
}

/// Reads the client's first bytes (after `prefix`, those already read) until its
/// ClientHello is whole, and checks the name it asks for against `target`. Returns every
/// byte read, to be sent upstream first. `plain_ok`: a tunnel that is not TLS, or whose
/// hello names no host, passes.
pub async fn check(
    client: &mut Stream,
    prefix: Bytes,
    target: &Target,
    plain_ok: bool,
    timeout: Duration,
) -> Result<Bytes, HelloRefusal> {
    let mut buffered = prefix.to_vec();
    let deadline = tokio::time::Instant::now() + timeout;
    let refuse = |reason, detail: String, alert| HelloRefusal {
        reason,
        detail,
        alert,
    };
    loop {
        match client_hello::read(&buffered) {
            Hello::Incomplete if buffered.len() < MAX_BUFFERED_BYTES => {}
            Hello::Incomplete => {
                return Err(refuse(
                    Reason::BadRequest,
                    format!("a TLS ClientHello longer than {MAX_BUFFERED_BYTES} bytes"),
                    true,
                ))
            }
            Hello::NotTls if plain_ok => return Ok(buffered.into()),
            Hello::NotTls => {
                return Err(refuse(
                    Reason::NotTls,
                    format!(
                        "the tunnel to {target} does not start with TLS; port {} carries \
                         TLS only (tls = \"allow-plain\" in an allowlist lets other \
                         protocols through)",
                        target.port
                    ),
                    false,
                ))
            }
            Hello::Malformed(why) => {
                return Err(refuse(
                    Reason::BadRequest,
                    format!("a malformed TLS ClientHello: {why}"),
                    true,
                ))
            }
            Hello::ClientHello { server_name, .. } => {
                return match named_host(server_name.as_deref(), target) {
                    Named::Same => Ok(buffered.into()),
                    Named::Nothing if plain_ok => Ok(buffered.into()),
                    Named::Nothing => Err(refuse(
                        Reason::NoServerName,
                        format!(
                            "the TLS ClientHello in the tunnel to {target} names no server \
                             (tls = \"allow-plain\" in an allowlist lets it through)"
                        ),
                        true,
                    )),
                    Named::Other(asked) => Err(refuse(
                        Reason::ServerNameMismatch,
                        format!("the TLS ClientHello in the tunnel to {target} asks for {asked}"),
                        true,
                    )),
                };
            }
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline, client.read(&mut chunk)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Err(refuse(
                    Reason::BadRequest,
                    "the client left before its TLS ClientHello was whole".into(),
                    false,
                ))
            }
            Ok(Ok(n)) => buffered.extend_from_slice(&chunk[..n]),
            Err(_) => {
                return Err(refuse(
                    Reason::HeaderTimeout,
                    format!("no whole TLS ClientHello within {}s", timeout.as_secs()),
                    false,
                ))
            }
        }
    }
}

/// What a ClientHello's server name is to the tunnel's host.
enum Named {
    Same,
    Nothing,
    /// Another host, as printable text.
    Other(String),
}

fn named_host(server_name: Option<&[u8]>, target: &Target) -> Named {
    let Some(raw) = server_name else {
        return Named::Nothing;
    };
    let printable = || String::from_utf8_lossy(raw).escape_debug().to_string();
    match std::str::from_utf8(raw).ok().map(normalise_host) {
        Some(Ok(host)) if host == target.host => Named::Same,
        Some(Ok(host)) => Named::Other(host.to_string()),
        _ => Named::Other(printable()),
    }
}

/// Ends a refused tunnel's client side: an alert if it spoke TLS, then a reset.
pub async fn cut(mut client: Stream, alert: bool) {
    if alert {
        let _ = client.write_all(&ACCESS_DENIED_ALERT).await;
        let _ = client.flush().await;
    }
    if let Stream::Tcp(tcp) = &client {
        tcp.set_zero_linger().ok();
    }
}
