//! Inspection: a tunnel an `[[http]]` rule covers (or any TLS tunnel, under `--inspect`)
//! is opened up, so that each request in it is judged by method, path and host, and
//! logged with them.
//!
//! On a TLS port the bridge ends the client's TLS with a certificate for the tunnel's host,
//! minted by the session CA (ca.rs), and opens its own TLS to the upstream, verified
//! against the system's trust store (never less: no option turns verification off). On
//! another port the tunnel is read as plain HTTP. Either way the bridge speaks HTTP/1.1 on
//! both sides (ALPN offers nothing else, so a client that would speak h2 falls back).
//! The ClientHello is checked first as for any TLS tunnel (tls_check.rs): the name a
//! client asks for is the tunnel's host, or the tunnel is refused before any certificate
//! is shown.

mod exchange;

use std::sync::Arc;

use bytes::Bytes;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::carry::tls_check::{self, HelloRefusal};
use crate::carry::tunnel::TunnelStats;
use crate::client_io::{ClientIo, Stream};
use crate::conn::Conn;
use crate::counting::{Counted, Counters};
use crate::egress::Refusal;
use crate::log::Attempt;
use crate::policy::secrets::Leg;
use crate::policy::{HttpCheck, Reason};
use crate::target::{Host, Target};

use crate::tls::inspector::Inspector;

/// A byte stream either side of an inspected tunnel.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Serves an opened tunnel to `target` as inspected HTTP, `prefix` (what the client sent
/// before it opened) first. `opened`: the tunnel's own attempt, which each request's
/// record takes its rule and addresses from. On a refusal before any request (the
/// ClientHello, or the client's side of TLS failing) the client has been cut off; the
/// caller logs it. `inspector`: the session CA, which a TLS port needs (a plain one does
/// not).
// Whole: the tunnel's life in order (the hello, both TLS sides, the request loop, the end),
// each step using the streams the one before opened.
pub(crate) async fn serve(
    conn: &Conn,
    inspector: Option<&Inspector>,
    check: HttpCheck,
    (client, prefix): (Stream, Bytes),
    upstream: crate::outbound::Outbound,
    target: &Target,
    opened: &Attempt,
) -> Result<TunnelStats, HelloRefusal> {
    let config = &conn.shared.config;
    let policy = &conn.policy;
    let counters = Counters::default();
    let tls = policy.checks_tls(target.port);
    let (client, upstream): (Box<dyn Io>, Result<Box<dyn Io>, Refusal>) = if tls {
        let mut client = client;
        let Some(inspector) = inspector else {
            let rule = check
                .rules()
                .first()
                .map(|r| format!(" ([[http]] at {})", r.origin))
                .unwrap_or_default();
            tls_check::cut(client, false).await;
            return Err(HelloRefusal {
                reason: Reason::Unsupported,
                detail: format!(
                    "the allowlist has the tunnel to {target} inspected{rule}, and this \
                     bridge holds no session CA to do it with"
                ),
                alert: false,
            });
        };
        // A client names the host it wants, as for any TLS tunnel; to an IP address it
        // names none, and the Host header is what is checked.
        let unnamed_ok = matches!(target.host, Host::Ip(_));
        let hello = match tls_check::check(
            &mut client,
            prefix,
            target,
            unnamed_ok,
            config.header_timeout,
        )
        .await
        {
            Ok(hello) => hello,
            Err(refused) => {
                tls_check::cut(client, refused.alert).await;
                return Err(refused);
            }
        };
        let host = target.host.to_string();
        let client_side = inspector
            .client_side(&host)
            .map_err(|detail| HelloRefusal {
                reason: Reason::Unsupported,
                detail,
                alert: false,
            })?;
        let client = Counted::new(replayed(client, hello), counters.clone());
        let accepting = tokio_rustls::TlsAcceptor::from(client_side).accept(client);
        let client = match tokio::time::timeout(config.header_timeout, accepting).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(HelloRefusal {
                    reason: Reason::BadRequest,
                    detail: format!(
                        "the client's TLS with the bridge failed ({e}); a client that does \
                         not trust the session CA has a trust store of its own that the \
                         sandbox's bundle does not reach"
                    ),
                    alert: false,
                })
            }
            Err(_) => {
                return Err(HelloRefusal {
                    reason: Reason::HeaderTimeout,
                    detail: format!(
                        "the client's TLS with the bridge was not done within {}s",
                        config.header_timeout.as_secs()
                    ),
                    alert: false,
                })
            }
        };
        let name = match &target.host {
            Host::Name(name) => ServerName::try_from(name.clone()).map_err(|e| e.to_string()),
            Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        };
        let connecting = async {
            let name = name.map_err(|e| Refusal::new(Reason::BadRequest, e))?;
            let connector = tokio_rustls::TlsConnector::from(Arc::clone(&inspector.upstream));
            match tokio::time::timeout(config.connect_timeout, connector.connect(name, upstream))
                .await
            {
                Ok(Ok(tls)) => Ok(Box::new(tls) as Box<dyn Io>),
                Ok(Err(e)) => Err(upstream_tls_failed(target, &e)),
                Err(_) => Err(Refusal::new(
                    Reason::UpstreamTimeout,
                    format!(
                        "TLS with {target} was not done within {}s",
                        config.connect_timeout.as_secs()
                    ),
                )),
            }
        };
        (Box::new(client), connecting.await)
    } else {
        let client = Counted::new(replayed(client, prefix), counters.clone());
        (Box::new(client), Ok(Box::new(upstream)))
    };
    let exchange = exchange::Exchange {
        check,
        target: target.clone(),
        scheme: if tls { "https" } else { "http" },
        // On a TLS port the upstream's certificate was verified above: never less.
        leg: Leg {
            verified_tls: tls,
            tls_port: tls,
        },
        opened: opened.clone(),
        log: Arc::clone(&conn.shared.log),
        stop: conn.shared.stop.clone(),
        idle: config.idle_timeout,
        in_flight: Default::default(),
        header_timeout: config.header_timeout,
        policy: std::sync::Arc::clone(policy),
    };
    let end = exchange::serve(client, upstream, exchange, &counters, conn.stopped()).await;
    // Counted wraps the client: what it writes went down to the client.
    let (down, up) = counters.get();
    Ok(TunnelStats {
        bytes_up: up,
        bytes_down: down,
        end,
    })
}

/// The client's stream with the bytes already read from it put back in front, closed
/// with a FIN as any tunnel is.
fn replayed(client: Stream, read: Bytes) -> ClientIo {
    let mut io = ClientIo::new(client);
    io.unread(read);
    io.reset_flag()
        .store(false, std::sync::atomic::Ordering::Relaxed);
    io
}

/// Why TLS with the upstream failed, in words a user can act on.
fn upstream_tls_failed(target: &Target, e: &std::io::Error) -> Refusal {
    let certificate = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        });
    if certificate {
        Refusal::new(
            Reason::UpstreamNotTrusted,
            format!(
                "{target} showed a certificate this machine does not trust for that name \
                 ({e}); a private registry's CA can be added with --upstream-ca FILE"
            ),
        )
    } else {
        Refusal::new(
            Reason::UpstreamUnreachable,
            format!("TLS with {target} failed: {e}"),
        )
    }
}
