//! HTTP/1.1 proxy front end on hyper: `CONNECT host:port` tunnels, absolute-form requests
//! (`GET http://host/path`) are forwarded (`forward`), and `GET /__netbox/health` answers
//! the probe. Every refusal, whichever path made it, is answered and logged here.
//!
//! Parsing is strict about anything that names a destination: a CONNECT target must be
//! authority-form with a port and no userinfo, a forwarded URI must be `http://` with no
//! userinfo, and a Host header that disagrees with the target or a repeated Host header is
//! a 400 before any policy or DNS work, as are an HTTP/1.1 request without Host (RFC 9112
//! §3.2) and a CONNECT that declares content (which would swallow tunnel bytes). hyper itself answers unparseable heads with 400 and
//! oversized ones with 431, enforces the header-read deadline, and resolves
//! Content-Length alongside Transfer-Encoding as RFC 9112 §6.3 says (chunked wins, the
//! length is dropped, the connection closes after); the request is re-framed upstream, so
//! the server never sees both.
//!
//! Order for CONNECT follows the pipeline, not hyper's example: dial first, answer 200
//! only once the upstream is connected, so every failure can still be a 502 + reset.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

use super::forward::{self, Forwarded, KeptUpstream};
use super::head::FirstHead;
use crate::carry::http_relay::{host_header_names, one_line};
use crate::carry::tls_check;
use crate::carry::tunnel;
use crate::client_io::ClientIo;
use crate::conn::Conn;
use crate::egress::{self, Refusal};
use crate::log::{Attempt, End, Proto};
use crate::offer::{Offer, OFFER_HOST};
use crate::policy::Reason;
use crate::target::Target;

type Body = BoxBody<Bytes, hyper::Error>;

/// Largest request head accepted, in bytes; larger gets 431.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Most header fields accepted in one request head; more gets 431.
const MAX_HEADERS: usize = super::head::MAX_HEADERS;

/// Origin-form path the bridge answers itself, so a probe can tell it is alive.
pub const HEALTH_PATH: &str = "/__netbox/health";

/// Per-connection state the service shares with the connection task.
struct ConnState {
    conn: Conn,
    reset: Arc<AtomicBool>,
    requests: AtomicU64,
    /// The forward path's upstream connection, kept between requests.
    upstream: KeptUpstream,
    /// On a listener that serves tenants: this connection as the tenant its first request
    /// named; every later request must name the same one.
    tenant: std::sync::OnceLock<Conn>,
}

/// Serves one HTTP client connection: possibly several requests, possibly one tunnel.
/// `header_timeout` is what is left of the first head's deadline; later heads have
/// `--header-timeout` each.
pub async fn serve(mut io: ClientIo, conn: Conn, header_timeout: std::time::Duration) {
    // The first head is read and checked here, so that one hyper would refuse on its own
    // is refused as every request is (head.rs).
    let first = tokio::select! {
        first = super::head::read_first(&mut io, header_timeout, MAX_HEADER_BYTES) => first,
        // The bridge is stopping: a head still on its way will not be served.
        () = conn.stopped() => {
            let detail = "the bridge stopped before the request head was complete";
            return log_unanswered(io, &conn, Reason::HeaderTimeout, detail.into());
        }
    };
    match first {
        // Past a connection limit: the head is read only to be answered with why.
        FirstHead::Complete(_) if conn.over_limit().is_some() => {
            let why = conn.over_limit().unwrap_or_default().to_owned();
            let refusal = Refusal::new(Reason::ConnectionLimit, why);
            return refuse_first_head(io, &conn, &refusal).await;
        }
        FirstHead::Complete(head) => io.unread(head),
        FirstHead::Refused(refusal) => return refuse_first_head(io, &conn, &refusal).await,
        // The client left before finishing a head, or never finished it in time: a
        // refused attempt, cut off hard, with nothing to answer.
        FirstHead::Closed { partial: false } => return,
        FirstHead::Closed { partial: true } => {
            let detail = "the client closed before its request head was complete";
            return log_unanswered(io, &conn, Reason::BadRequest, detail.into());
        }
        FirstHead::TimedOut => {
            let detail = format!("request head not complete within {header_timeout:?}");
            return log_unanswered(io, &conn, Reason::HeaderTimeout, detail);
        }
    }
    let stopped = conn.stopped();
    let state = Arc::new(ConnState {
        reset: io.reset_flag(),
        conn,
        requests: AtomicU64::new(0),
        upstream: KeptUpstream::default(),
        tenant: std::sync::OnceLock::new(),
    });
    let service = {
        let state = Arc::clone(&state);
        service_fn(move |req| {
            let state = Arc::clone(&state);
            async move {
                state.requests.fetch_add(1, Ordering::Relaxed);
                // A readable request: from here on only a refusal resets the connection.
                state.reset.store(false, Ordering::Relaxed);
                Ok::<_, Infallible>(route(req, &state).await)
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(state.conn.shared.config.header_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS)
        .preserve_header_case(true);
    let served = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::select! {
        result = served => {
            if let Err(e) = result {
                log_protocol_error(&state, &e);
            }
        }
        () = stopped => {}
    }
}

/// Answers a refused first head as any refusal is answered (status, `Proxy-Status`,
/// `X-Netbox-Reason`, one line), logs it, and resets the connection.
async fn refuse_first_head(mut io: ClientIo, conn: &Conn, refusal: &Refusal) {
    use tokio::io::AsyncWriteExt;
    let (status, headers, body) = refusal_parts(&conn.shared.config, refusal);
    let mut response = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or_default()
    )
    .into_bytes();
    for (name, value) in &headers {
        response.extend_from_slice(name.as_str().as_bytes());
        response.extend_from_slice(b": ");
        response.extend_from_slice(value.as_bytes());
        response.extend_from_slice(b"\r\n");
    }
    response.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    response.extend_from_slice(body.as_bytes());
    io.reset_on_close();
    // The client may be gone already; the refusal is logged either way.
    let _ = io.write_all(&response).await;
    let _ = io.flush().await;
    let mut attempt = Attempt::since(conn.session.id.clone(), Proto::Http, conn.accepted);
    attempt.reason = refusal.reason;
    attempt.detail = Some(refusal.detail.clone());
    attempt.status = Some(status.as_u16());
    conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
}

/// Logs a first head that never came whole, and resets the connection.
fn log_unanswered(io: ClientIo, conn: &Conn, reason: Reason, detail: String) {
    let mut attempt = Attempt::since(conn.session.id.clone(), Proto::Http, conn.accepted);
    attempt.reason = reason;
    attempt.detail = Some(detail);
    conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
    io.reset_on_close();
}

/// Logs what hyper refused on its own (a bad head after the first, or a slow one).
fn log_protocol_error(state: &ConnState, e: &hyper::Error) {
    let first_request = state.requests.load(Ordering::Relaxed) == 0;
    // hyper answers parse errors itself (400, 431, 414) before closing; record what it sent.
    let (reason, status) = if e.is_parse_too_large() {
        (Reason::HeaderTooLarge, Some(431))
    } else if e.is_parse() {
        let too_long = e.to_string().contains("too long");
        (Reason::BadRequest, Some(if too_long { 414 } else { 400 }))
    } else if e.is_incomplete_message() && first_request {
        (Reason::BadRequest, None)
    } else if e.is_timeout() && first_request {
        (Reason::HeaderTimeout, None)
    } else {
        // Mid-stream I/O errors and idle keep-alive timeouts are not attempts.
        return;
    };
    let mut attempt = Attempt::begin(state.conn.session.id.clone(), Proto::Http);
    attempt.reason = reason;
    attempt.status = status;
    attempt.detail = Some(e.to_string());
    state
        .conn
        .shared
        .log
        .record(&attempt.finish(End::Refused, 0, 0));
}

async fn route(req: Request<Incoming>, state: &Arc<ConnState>) -> Response<Body> {
    let proxied = req.method() == Method::CONNECT || req.uri().scheme().is_some();
    let conn = match identify(&req, state).await {
        Ok(conn) => conn,
        Err((refusal, session)) if proxied => {
            let connect = req.method() == Method::CONNECT;
            let proto = if connect {
                Proto::HttpConnect
            } else {
                Proto::HttpForward
            };
            let mut attempt = Attempt::begin(session, proto);
            attempt.method = (!connect).then(|| req.method().to_string());
            return refuse(state, attempt, &refusal);
        }
        // Not a proxy request: answered below whoever asks.
        Err(_) => state.conn.renewed(),
    };
    if req.method() == Method::CONNECT {
        return connect(req, state, &conn).await;
    }
    if names_this_bridge(&req) {
        return offer(state, &conn, &req);
    }
    if req.uri().scheme().is_some() {
        return match forward::forward(req, &conn, &state.upstream).await {
            Forwarded::Response(response) => response,
            Forwarded::Refused(attempt, refusal) => refuse(state, attempt, &refusal),
            Forwarded::Failed {
                mut pending,
                refusal,
                end,
            } => {
                let response = refusal_response(state, &refusal);
                let status = response.status().as_u16();
                pending.update(|attempt| attempt.status = Some(status));
                pending.finish(end, &refusal.detail);
                response
            }
        };
    }
    if req.method() == Method::GET && req.uri().path() == HEALTH_PATH {
        let mut response = text_response(StatusCode::OK, "netbox bridge ok\n");
        // On a listener that serves tenants, a connection that names none holds no place
        // for longer than its one answer.
        if conn.session.tenants().is_some() {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return response;
    }
    let mut attempt = Attempt::begin(state.conn.session.id.clone(), Proto::Http);
    attempt.method = Some(req.method().to_string());
    let refusal = Refusal::new(
        Reason::BadRequest,
        "not a proxy request: use CONNECT host:port or an absolute http:// URI",
    );
    refuse(state, attempt, &refusal)
}

/// Whether a forwarded request names this bridge itself (offer.rs).
fn names_this_bridge(req: &Request<Incoming>) -> bool {
    req.uri().scheme().is_some()
        && req
            .uri()
            .host()
            .is_some_and(|host| host.trim_end_matches('.').eq_ignore_ascii_case(OFFER_HOST))
}

/// The answer to `GET http://netbox-bridge.invalid/`: what the connection's session lets
/// its client know (a tenant's placeholders, the CA of inspected tunnels), logged as a
/// request the bridge answered itself. Any other method is refused.
fn offer(state: &ConnState, conn: &Conn, req: &Request<Incoming>) -> Response<Body> {
    let mut attempt = Attempt::begin(conn.session.id.clone(), Proto::HttpForward);
    attempt.method = Some(req.method().to_string());
    attempt.path = req.uri().path_and_query().map(|p| p.as_str().to_owned());
    attempt.target = Some(Target {
        host: crate::target::Host::Name(OFFER_HOST.to_owned()),
        port: 80,
    });
    if req.method() != Method::GET {
        let refusal = bad(format!("{OFFER_HOST} answers GET alone"));
        return refuse(state, attempt, &refusal);
    }
    let ca = conn.shared.config.inspector.as_ref().map(|i| i.ca_pem());
    let offered = Offer::of(&conn.policy, ca);
    let body = serde_json::to_vec(&offered).unwrap_or_default();
    attempt.decision = crate::policy::Verdict::Allow;
    attempt.reason = Reason::AllowedByRule;
    attempt.status = Some(200);
    attempt.detail = Some(format!(
        "answered by the bridge: {} placeholder(s){}",
        offered.secrets.len(),
        if offered.ca.is_some() {
            " and its CA"
        } else {
            ""
        }
    ));
    attempt.secrets = offered.secrets.iter().map(|s| s.name.clone()).collect();
    let length = body.len() as u64;
    state
        .conn
        .shared
        .log
        .record(&attempt.finish(End::Closed, 0, length));
    body_response(StatusCode::OK, Bytes::from(body), "application/json")
}

/// The connection a request is served as: the listener's, or on a listener that serves
/// tenants, the one of the tenant the request's credentials name (the same tenant for
/// every request of a connection, so that a kept upstream is never another tenant's).
/// Refused with the session the refusal is logged under: the tenant's once one is named.
async fn identify(req: &Request<Incoming>, state: &ConnState) -> Result<Conn, (Refusal, Arc<str>)> {
    let Some(tenants) = state.conn.session.tenants() else {
        return Ok(state.conn.renewed());
    };
    let gate = || Arc::clone(&state.conn.session.id);
    let refused = |why: crate::session::tenants::Unidentified| {
        let refusal = Refusal::new(Reason::ProxyAuthRequired, why.detail());
        (refusal, gate())
    };
    // A client certificate that names a tenant names this connection's; credentials
    // beside it must name the same one.
    let session = match tenants
        .from_client_names(&state.conn.client_names)
        .map_err(refused)?
    {
        Some(by_certificate) => {
            if req.headers().contains_key(header::PROXY_AUTHORIZATION) {
                let named = tenants.from_headers(req.headers()).map_err(refused)?;
                if !Arc::ptr_eq(&named, &by_certificate) {
                    let detail = "Proxy-Authorization names another tenant than the client \
                                  certificate";
                    return Err((Refusal::new(Reason::ProxyAuthRequired, detail), gate()));
                }
            }
            by_certificate
        }
        None => tenants.from_headers(req.headers()).map_err(refused)?,
    };
    let bound = match state.tenant.get() {
        Some(bound) => bound,
        None => {
            let conn = state
                .conn
                .as_tenant(Arc::clone(&session))
                .await
                .map_err(|why| {
                    (
                        Refusal::new(Reason::ConnectionLimit, why),
                        Arc::clone(&session.id),
                    )
                })?;
            // HTTP/1 serves one request at a time: nothing else sets it meanwhile.
            state.tenant.get_or_init(|| conn)
        }
    };
    if !Arc::ptr_eq(&bound.session, &session) {
        let refusal = Refusal::new(
            Reason::ProxyAuthRequired,
            "this connection's first request named another tenant: open a connection per tenant",
        );
        return Err((refusal, gate()));
    }
    Ok(bound.renewed())
}

async fn connect(
    mut req: Request<Incoming>,
    state: &Arc<ConnState>,
    conn: &Conn,
) -> Response<Body> {
    let mut attempt = Attempt::begin(conn.session.id.clone(), Proto::HttpConnect);
    let target = match connect_target(&req) {
        Ok(target) => target,
        Err(refusal) => return refuse(state, attempt, &refusal),
    };
    let upstream = match egress::open(&conn.egress(), &mut attempt, &target).await {
        Ok(upstream) => upstream,
        Err(refusal) => return refuse(state, attempt, &refusal),
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let idle = conn.shared.config.idle_timeout;
    let policy = Arc::clone(&conn.policy);
    let log = Arc::clone(&conn.shared.log);
    let stopped = conn.stopped();
    let conn = conn.share();
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(e) => {
                attempt.detail = Some(format!("client left before the tunnel opened: {e}"));
                log.record(&attempt.finish(End::ClientError, 0, 0));
                return;
            }
        };
        // Unwrap hyper's wrapper to relay on the raw socket; bytes hyper read past the
        // CONNECT head (a client that did not wait for the 200) are sent first.
        let stats = match upgraded.downcast::<TokioIo<ClientIo>>() {
            Ok(parts) => {
                // What hyper read past the head comes first, then whatever of the first
                // look's bytes hyper had not read yet.
                let (client, unread) = parts.io.into_inner().into_stream();
                let prefix = if unread.is_empty() {
                    parts.read_buf
                } else {
                    Bytes::from([&parts.read_buf[..], &unread[..]].concat())
                };
                match client {
                    Some(client) => {
                        let relayed =
                            crate::carry::carry(&conn, client, prefix, upstream, &target, &attempt)
                                .await;
                        match relayed {
                            Ok(stats) => stats,
                            Err(refused) => {
                                refused.refuse(&mut attempt);
                                log.record(&attempt.finish(End::Refused, 0, 0));
                                return;
                            }
                        }
                    }
                    None => tunnel::TunnelStats {
                        bytes_up: 0,
                        bytes_down: 0,
                        end: End::ClientError,
                    },
                }
            }
            // Not a stream netbox can read first: a port that must carry TLS is refused
            // rather than relayed unchecked (hyper hands HTTP/1 streams back as they are).
            Err(_) if policy.checks_tls(target.port) || policy.http_check(&target).is_some() => {
                let refused = tls_check::HelloRefusal {
                    reason: Reason::NotTls,
                    detail: "the tunnel's stream could not be checked for TLS".into(),
                    alert: false,
                };
                refused.refuse(&mut attempt);
                log.record(&attempt.finish(End::Refused, 0, 0));
                return;
            }
            Err(upgraded) => tunnel::relay(TokioIo::new(upgraded), upstream, idle, stopped).await,
        };
        log.record(&attempt.finish(stats.end, stats.bytes_up, stats.bytes_down));
    });
    Response::new(empty_body())
}

/// The authority-form target of a CONNECT, after the ambiguity checks.
fn connect_target(req: &Request<Incoming>) -> Result<Target, Refusal> {
    let uri = req.uri();
    let authority = match (uri.scheme(), uri.authority(), uri.path_and_query()) {
        (None, Some(authority), None) => authority,
        _ => return Err(bad("CONNECT target must be host:port")),
    };
    if authority.as_str().contains('@') {
        return Err(bad("CONNECT target must not carry userinfo"));
    }
    let target = Target::parse_authority(authority.as_str())
        .map_err(|e| bad(format!("CONNECT target: {e}")))?;
    host_header_names(req.version(), req.headers(), &target).map_err(bad)?;
    refuse_connect_content(req.headers())?;
    Ok(target)
}

/// A CONNECT has no content (RFC 9110 §9.3.6). One that declares some would have its
/// first tunnel bytes read as that content and lost, or not, by how TCP split the writes:
/// refused instead (`Content-Length: 0` declares none, and passes).
fn refuse_connect_content(headers: &HeaderMap) -> Result<(), Refusal> {
    let declares_content = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes() != b"0");
    if declares_content {
        return Err(bad(
            "a CONNECT request has no content: drop its Content-Length or Transfer-Encoding",
        ));
    }
    Ok(())
}

fn bad(detail: impl Into<String>) -> Refusal {
    Refusal::new(Reason::BadRequest, detail)
}

/// Logs the refusal and answers it: status, one-line body, then a reset.
fn refuse(state: &ConnState, mut attempt: Attempt, refusal: &Refusal) -> Response<Body> {
    attempt.reason = refusal.reason;
    attempt.detail = Some(refusal.detail.clone());
    let response = refusal_response(state, refusal);
    attempt.status = Some(response.status().as_u16());
    state
        .conn
        .shared
        .log
        .record(&attempt.finish(End::Refused, 0, 0));
    response
}

/// The refusal response. The connection is marked so that, once hyper has flushed this
/// response, it is closed with a reset.
fn refusal_response(state: &ConnState, refusal: &Refusal) -> Response<Body> {
    let (status, headers, body) = refusal_parts(&state.conn.shared.config, refusal);
    let mut response = text_response(status, &body);
    // A 407 carries one challenge per scheme: appended. Every other header once.
    for (name, value) in headers {
        if name == header::PROXY_AUTHENTICATE {
            response.headers_mut().append(name, value);
        } else {
            response.headers_mut().insert(name, value);
        }
    }
    state.reset.store(true, Ordering::Relaxed);
    response
}

/// Every refusal's status, headers (`X-Netbox-Reason`, `Proxy-Status` per RFC 9209,
/// `Connection: close`, the content type) and one-line body.
fn refusal_parts(
    config: &crate::conn::BridgeConfig,
    refusal: &Refusal,
) -> (StatusCode, Vec<(HeaderName, HeaderValue)>, String) {
    let status = match refusal.reason {
        Reason::DeniedByRule | Reason::NotAllowed | Reason::NonPublicAddress => {
            config.refusal_status
        }
        Reason::BadRequest | Reason::Unsupported => StatusCode::BAD_REQUEST,
        Reason::MethodNotAllowed
        | Reason::PathNotAllowed
        | Reason::HostMismatch
        | Reason::SecretMisdirected => StatusCode::FORBIDDEN,
        Reason::HeaderTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Reason::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        Reason::ConnectionLimit => StatusCode::SERVICE_UNAVAILABLE,
        Reason::ProxyAuthRequired => StatusCode::PROXY_AUTHENTICATION_REQUIRED,
        _ => StatusCode::BAD_GATEWAY,
    };
    let error_type = match (refusal.reason, refusal.io_kind) {
        (Reason::NonPublicAddress, _) => "destination_ip_prohibited",
        (Reason::ResolveFailed, _) => "dns_error",
        (Reason::UpstreamUnreachable, Some(std::io::ErrorKind::ConnectionRefused)) => {
            "connection_refused"
        }
        (Reason::UpstreamUnreachable, Some(std::io::ErrorKind::TimedOut)) => "connection_timeout",
        (Reason::UpstreamUnreachable | Reason::UpstreamProxy, _) => "destination_unavailable",
        (Reason::UpstreamTimeout, _) => "http_response_timeout",
        (Reason::ConnectionLimit, _) => "connection_limit_reached",
        (Reason::BadRequest | Reason::Unsupported | Reason::HeaderTooLarge, _) => {
            "http_request_error"
        }
        _ => "http_request_denied",
    };
    let line = format!("netbox: {}\n", one_line(&refusal.detail));
    let details = one_line(&refusal.detail).replace(['"', '\\'], "'");
    let mut headers = vec![(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    )];
    let mut insert = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.push((HeaderName::from_static(name), value));
        }
    };
    insert("x-netbox-reason", refusal.reason.header_value().to_owned());
    insert(
        "proxy-status",
        format!("netbox; error={error_type}; details=\"{details}\""),
    );
    insert("connection", "close".to_owned());
    if refusal.reason == Reason::ProxyAuthRequired {
        for scheme in ["Basic", "Bearer"] {
            let value = HeaderValue::from_str(&format!("{scheme} realm=\"netbox\""));
            headers.extend(value.ok().map(|v| (header::PROXY_AUTHENTICATE, v)));
        }
    }
    (status, headers, line)
}

fn text_response(status: StatusCode, text: &str) -> Response<Body> {
    body_response(
        status,
        Bytes::from(text.to_owned()),
        "text/plain; charset=utf-8",
    )
}

/// A response of the bridge's own: `body`, of `content_type`.
fn body_response(status: StatusCode, body: Bytes, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn empty_body() -> Body {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}
