//! A tunnel to a port that must carry TLS (443, and an allowlist's `tls_ports`) goes
//! where it claims: before a byte goes upstream, the client's ClientHello is read (not
//! answered: TLS is not terminated) and the server name it asks for must be the host the
//! tunnel was allowed for. Otherwise a command allowed to reach `a.test` on a shared CDN
//! could ask the CDN, through that tunnel, for any other customer's site.
//!
//! The bytes read are handed back to be replayed upstream unchanged; a refusal answers
//! the client with a TLS alert where it spoke TLS, then a reset.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::carry::tunnel::{self, TunnelStats};
use crate::client_io::Stream;
use crate::conn::BridgeConfig;
use crate::log::Attempt;
use crate::policy::{Policy, Reason, Verdict};
use crate::target::{Host, Target};
use crate::tls::client_hello::{self, Hello, MAX_HELLO_BYTES};

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

impl HelloRefusal {
    /// The tunnel's attempt, refused for this.
    pub fn refuse(self, attempt: &mut Attempt) {
        attempt.decision = Verdict::Deny;
        attempt.reason = self.reason;
        attempt.detail = Some(self.detail);
    }
}

/// Relays an opened tunnel to `target` (CONNECT's or SOCKS5's), `prefix` (what the client
/// sent before it opened) first; on a port the policy says carries TLS, only once the
/// ClientHello (and a second one after a retry request) names the tunnel's host. On a
/// refusal the client has been cut off already; the caller logs it.
pub async fn relay(
    mut client: Stream,
    prefix: Bytes,
    mut upstream: crate::outbound::Outbound,
    target: &Target,
    policy: &Policy,
    config: &BridgeConfig,
    stop: impl Future<Output = ()>,
) -> Result<TunnelStats, HelloRefusal> {
    if !policy.checks_tls(target.port) {
        return Ok(tunnel::relay_client(client, prefix, upstream, config.idle_timeout, stop).await);
    }
    let timeout = config.header_timeout;
    let checked = match check(&mut client, prefix, target, policy.tls_plain_ok(), timeout).await {
        Ok(hello) => check_retry(&mut client, &mut upstream, hello, target, timeout).await,
        Err(refused) => Err(refused),
    };
    let (up, down) = match checked {
        Ok(passed) => passed,
        Err(refused) => {
            cut(client, refused.alert).await;
            return Err(refused);
        }
    };
    let mut stats =
        tunnel::relay_client(client, Bytes::new(), upstream, config.idle_timeout, stop).await;
    stats.bytes_up += up;
    stats.bytes_down += down;
    Ok(stats)
}

/// Reads the client's first bytes (after `prefix`, those already read) until its
/// ClientHello is whole, and checks the name it asks for against `target`. Returns every
/// byte read, to be sent upstream first. `plain_ok`: a tunnel that is not TLS, or whose
/// hello names no host, passes.
// Whole: read until the hello is whole, then each check in the order a refusal must come.
pub(crate) async fn check(
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
    let mut need = 1;
    loop {
        let verdict = if buffered.len() >= need {
            client_hello::read(&buffered)
        } else {
            Hello::Incomplete { need }
        };
        match verdict {
            Hello::Incomplete { need: more } if more <= MAX_BUFFERED_BYTES => need = more,
            Hello::Incomplete { .. } => {
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
            Err(_) if buffered.is_empty() => {
                return Err(refuse(
                    Reason::HeaderTimeout,
                    format!(
                        "the client sent nothing within {}s; port {} carries TLS, whose \
                         client speaks first (a protocol whose server speaks first, as SSH \
                         and SMTP do, cannot pass here: use another port)",
                        timeout.as_secs(),
                        target.port
                    ),
                    false,
                ))
            }
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

/// The `random` of a ServerHello that is a HelloRetryRequest (RFC 8446 §4.1.3).
const RETRY_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];
/// A ServerHello's random ends this far into the stream: record header (5), handshake
/// header (4), legacy_version (2), random (32).
const SERVER_RANDOM_END: usize = 43;

/// Sends the checked first flight (`hello`) upstream, then watches the server's answer
/// before anything more of the client's goes on: if it is a HelloRetryRequest, the
/// client's second ClientHello is checked like the first (RFC 8446 forbids it to name
/// another host, but not every server holds the client to that: OpenSSL's name callback
/// takes the second name, so a tunnel could ask for `a.test` and then be served
/// `b.test`). What was read either way is passed on, so the tunnel goes on from there.
/// Returns the bytes passed up and down.
async fn check_retry(
    client: &mut Stream,
    upstream: &mut crate::outbound::Outbound,
    hello: Bytes,
    target: &Target,
    timeout: Duration,
) -> Result<(u64, u64), HelloRefusal> {
    let failed = |detail: &str| HelloRefusal {
        reason: Reason::UpstreamUnreachable,
        detail: detail.to_owned(),
        alert: false,
    };
    let tls = hello.first() == Some(&22);
    upstream
        .write_all(&hello)
        .await
        .map_err(|_| failed("the upstream left during the TLS handshake"))?;
    upstream
        .flush()
        .await
        .map_err(|_| failed("the upstream left during the TLS handshake"))?;
    let mut up = hello.len() as u64;
    if !tls {
        return Ok((up, 0));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    // The server's first bytes, up to the end of its ServerHello's random.
    let mut answer = Vec::new();
    while answer.len() < SERVER_RANDOM_END && answer.first().is_none_or(|b| *b == 22) {
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, upstream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&chunk[..n]),
            // The server left, failed or was slow: the relay passes on what there is.
            _ => break,
        }
    }
    let retry = answer.len() >= SERVER_RANDOM_END
        && answer[0] == 22
        && answer[5] == 2
        && answer[11..SERVER_RANDOM_END] == RETRY_RANDOM;
    client
        .write_all(&answer)
        .await
        .map_err(|_| failed("the client left during the TLS handshake"))?;
    client
        .flush()
        .await
        .map_err(|_| failed("the client left during the TLS handshake"))?;
    let down = answer.len() as u64;
    if !retry {
        return Ok((up, down));
    }
    // The client's second flight: a change_cipher_spec record first, or not (middlebox
    // compatibility mode), then its second ClientHello.
    let mut second = Vec::new();
    while second.len() < 6 && second.first().is_none_or(|b| *b == 20) {
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => second.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let ccs = if second.starts_with(&[20, 3]) && second.get(3..6) == Some(&[0, 1, 1][..]) {
        6
    } else {
        0
    };
    let rest = Bytes::from(second.split_off(ccs));
    let hello = check(client, rest, target, false, timeout).await?;
    second.extend_from_slice(&hello);
    upstream
        .write_all(&second)
        .await
        .map_err(|_| failed("the upstream left during the TLS handshake"))?;
    upstream
        .flush()
        .await
        .map_err(|_| failed("the upstream left during the TLS handshake"))?;
    up += second.len() as u64;
    Ok((up, down))
}

/// What a ClientHello's server name is to the tunnel's host.
enum Named {
    Same,
    Nothing,
    /// Another host, as printable text.
    Other(String),
}

/// The same host only as a server's virtual hosting would read it: an ASCII name of
/// letters, digits, hyphens and dots, equal to the tunnel's (already lower case and
/// punycode) but for case and one final dot. No IDNA mapping or IP spelling: a server
/// falls back to its default site for a name it does not know (`ａ.test`, `127.1`), so
/// such a name is another host. A tunnel to an IP address has no name to ask for.
fn named_host(server_name: Option<&[u8]>, target: &Target) -> Named {
    let Some(raw) = server_name else {
        return Named::Nothing;
    };
    let plain = raw
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.');
    let name = raw.strip_suffix(b".").unwrap_or(raw);
    match &target.host {
        Host::Name(want) if plain && name.eq_ignore_ascii_case(want.as_bytes()) => Named::Same,
        _ => Named::Other(String::from_utf8_lossy(raw).escape_debug().to_string()),
    }
}

/// Ends a refused tunnel's client side: an alert if it spoke TLS, then a reset.
pub(crate) async fn cut(mut client: Stream, alert: bool) {
    if alert {
        let _ = client.write_all(&ACCESS_DENIED_ALERT).await;
        let _ = client.flush().await;
    }
    client.set_zero_linger();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tunnels_own_name_is_the_same_host() {
        let name = Target::parse_authority("a.test:443").unwrap();
        let ip = Target::parse_authority("127.0.0.1:443").unwrap();
        let same =
            |sni: &[u8], target: &Target| matches!(named_host(Some(sni), target), Named::Same);
        assert!(same(b"a.test", &name) && same(b"A.TEST", &name) && same(b"a.test.", &name));
        for other in [
            "b.test",
            "a.test..",
            "\u{ff41}.test",
            "a\u{ad}.test",
            "a.te\u{17f}t",
            "a.test\0",
            "xn--a.test",
        ] {
            assert!(!same(other.as_bytes(), &name), "{other:?}");
        }
        // A tunnel to an address: no name is its own, not even the address's spellings.
        for sni in ["127.0.0.1", "127.1", "2130706433"] {
            assert!(!same(sni.as_bytes(), &ip), "{sni}");
        }
        assert!(matches!(named_host(None, &ip), Named::Nothing));
    }
}
