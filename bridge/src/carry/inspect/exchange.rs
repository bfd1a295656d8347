//! The requests inside an inspected tunnel: each is read from the client (hyper's server
//! side), judged by host, method and path, and either refused with a 403 inside the
//! tunnel or sent on the tunnel's one upstream connection (hyper's client side). Every
//! request is one `net` record (`proto: "inspected"`), written when its response has
//! gone through or was abandoned, with its method, path, status and body bytes.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::{TokioIo, TokioTimer};

use super::Io;
use crate::carry::http_relay::{
    body_on_bodiless, carries_body, closes, host_header_names, one_line, origin_request,
    strip_hop_by_hop, CountedBody, Pending,
};
use crate::carry::secret_swap::{swap_request, RedactedBody, Redactions};
use crate::counting::Counters;
use crate::egress::Refusal;
use crate::log::{Attempt, End, EventLog, Proto};
use crate::policy::secrets::Leg;
use crate::policy::{HttpCheck, Reason, Verdict};
use crate::target::Target;

type ResponseBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// Largest request head read inside a tunnel, as at the bridge's front door.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What every request of one inspected tunnel is judged and logged by.
pub(super) struct Exchange {
    pub check: HttpCheck,
    pub target: Target,
    /// `https` on a TLS port, else `http`: what an absolute-form request must name.
    pub scheme: &'static str,
    /// How requests go upstream: what a secret's value may go on.
    pub leg: Leg,
    /// The tunnel's attempt: its rule and addresses go into each request's record.
    pub opened: Attempt,
    pub log: Arc<EventLog>,
    /// The bridge's stop signal, for the records of requests it cuts off.
    pub stop: tokio::sync::watch::Receiver<bool>,
    pub idle: Duration,
    /// Requests waiting for their answer (at most one: HTTP/1.1 answers in order).
    pub in_flight: std::sync::atomic::AtomicUsize,
    pub header_timeout: Duration,
    /// The policy the tunnel was opened under: its secrets are swapped in here.
    pub policy: Arc<crate::policy::Policy>,
}

/// Why a request is not sent on: status and reason for the client and the log.
struct Refused {
    status: StatusCode,
    reason: Reason,
    detail: String,
}

/// Serves the tunnel's requests until either side closes, nothing moves for the idle
/// timeout, or the bridge stops. `upstream`: the upstream side, or why there is none (each
/// request is then answered with that).
pub(super) async fn serve(
    client: Box<dyn Io>,
    upstream: Result<Box<dyn Io>, Refusal>,
    exchange: Exchange,
    client_bytes: &Counters,
    stop: impl Future<Output = ()>,
) -> End {
    let exchange = Arc::new(exchange);
    // The upstream connection is driven by a task of its own, stopped with the tunnel.
    let (sender, driver) = match upstream {
        Ok(io) => {
            let handshake = hyper::client::conn::http1::Builder::new()
                .preserve_header_case(true)
                .handshake::<_, CountedBody>(TokioIo::new(io))
                .await;
            match handshake {
                Ok((sender, connection)) => (Ok(sender), Some(tokio::spawn(connection))),
                Err(e) => (
                    Err(Refusal::new(Reason::UpstreamUnreachable, e.to_string())),
                    None,
                ),
            }
        }
        Err(refusal) => (Err(refusal), None),
    };
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    // How the tunnel ended, for a response still on its way when it did.
    let fate = Arc::new(OnceLock::new());
    let service = {
        let exchange = Arc::clone(&exchange);
        let fate = Arc::clone(&fate);
        hyper::service::service_fn(move |req| {
            let exchange = Arc::clone(&exchange);
            let sender = Arc::clone(&sender);
            let fate = Arc::clone(&fate);
            async move {
                // While a request waits for its answer, its own deadline governs, not the
                // tunnel's idleness.
                let _in_flight = InFlight::start(&exchange.in_flight);
                exchange.answer(req, &sender, fate).await
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(exchange.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES)
        .preserve_header_case(true);
    let served = builder.serve_connection(TokioIo::new(client), service);
    tokio::pin!(served, stop);
    let end = loop {
        let now = tokio::time::Instant::now();
        let idle_since = client_bytes.last_activity() + exchange.idle;
        // A request waiting for its answer has a deadline of its own; look again later.
        let waiting = exchange.in_flight.load(Ordering::Relaxed) > 0;
        let deadline = if waiting {
            now + exchange.idle
        } else {
            idle_since
        };
        tokio::select! {
            result = &mut served => break match result {
                Ok(()) => End::Closed,
                Err(e) if e.is_timeout() => End::IdleTimeout,
                Err(_) => End::ClientError,
            },
            () = tokio::time::sleep_until(deadline) => {
                let waiting = exchange.in_flight.load(Ordering::Relaxed) > 0;
                let idle = client_bytes.last_activity() + exchange.idle <= tokio::time::Instant::now();
                if !waiting && idle {
                    break End::IdleTimeout;
                }
            }
            () = &mut stop => break End::Shutdown,
        }
    };
    if matches!(end, End::IdleTimeout | End::Shutdown) {
        let _ = fate.set(end);
    }
    if let Some(driver) = driver {
        driver.abort();
    }
    end
}

impl Exchange {
    /// One request's answer: a refusal, or the upstream's response. An `Err` closes the
    /// client's connection without an answer (its upstream connection has closed: the
    /// client retries on a new tunnel, as it would with a server that closed). However it
    /// ends, even if the client leaves while it waits (hyper then drops this future), the
    /// request is recorded: its record is held by a `Pending` until something writes it.
    async fn answer(
        &self,
        req: Request<Incoming>,
        sender: &tokio::sync::Mutex<Result<SendRequest<CountedBody>, Refusal>>,
        fate: Arc<OnceLock<End>>,
    ) -> Result<Response<ResponseBody>, std::io::Error> {
        let mut pending =
            Pending::new(self.attempt(&req), Arc::clone(&self.log), self.stop.clone());
        match self.judge(&req) {
            Ok(rule) => pending.update(|attempt| {
                attempt.decision = Verdict::Allow;
                if rule.is_some() {
                    attempt.rule = rule;
                }
            }),
            Err(refused) => return Ok(self.refuse(&mut pending, refused)),
        }
        let (mut parts, body) = req.into_parts();
        let secrets = self.policy.secrets();
        match swap_request(secrets, &self.target, self.leg, &mut parts) {
            Ok(used) => pending.update(|attempt| attempt.secrets = used),
            Err(refusal) => {
                let refused = Refused {
                    status: swap_refusal_status(refusal.reason),
                    reason: refusal.reason,
                    detail: refusal.detail,
                };
                return Ok(self.refuse(&mut pending, refused));
            }
        }
        let head_request = parts.method == Method::HEAD;
        let req = Request::from_parts(parts, body);
        let mut sender = sender.lock().await;
        let sender = match &mut *sender {
            Ok(sender) => sender,
            Err(refusal) => {
                let refused = Refused {
                    status: StatusCode::BAD_GATEWAY,
                    reason: refusal.reason,
                    detail: refusal.detail.clone(),
                };
                return Ok(self.refuse(&mut pending, refused));
            }
        };
        if sender.ready().await.is_err() {
            pending.finish(End::UpstreamError, "the upstream closed its connection");
            return Err(std::io::Error::other("the upstream closed its connection"));
        }
        // A request with a body is the last on its upstream connection: a server that
        // answers before reading all of it (or reads it otherwise than its framing says)
        // would take what is left for a request no one judged.
        let carries_body = carries_body(req.headers());
        let client_body_failed = Arc::new(AtomicBool::new(false));
        let counted = (Arc::clone(&pending.up), Arc::clone(&client_body_failed));
        let outgoing = origin_request(req, &self.target, carries_body, counted);
        pending.sent = true;
        match tokio::time::timeout(self.idle, sender.send_request(outgoing)).await {
            Ok(Ok(response)) => {
                let closing = carries_body || closes(response.version(), response.headers());
                let (mut parts, body) = response.into_parts();
                let redactions = Redactions::for_target(secrets, &self.target);
                if let Some(detail) = redactions.unsearchable(head_request, &parts, &self.target) {
                    // Its body is left unread: this upstream connection is not used again.
                    let refused = Refused {
                        status: StatusCode::BAD_GATEWAY,
                        reason: Reason::UpstreamNotTrusted,
                        detail,
                    };
                    return Ok(self.refuse(&mut pending, refused));
                }
                strip_hop_by_hop(&mut parts.headers);
                crate::carry::http_relay::strip_bridge_headers(&mut parts.headers);
                if closing {
                    parts
                        .headers
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                let status = parts.status.as_u16();
                pending.update(|attempt| attempt.status = Some(status));
                let body = pending.into_body(body, fate);
                let body = if redactions.is_empty() {
                    body.boxed_unsync()
                } else {
                    redactions.clean_head(&mut parts);
                    RedactedBody::new(body, redactions).boxed_unsync()
                };
                Ok(Response::from_parts(parts, body))
            }
            Ok(Err(e)) => {
                let end = if client_body_failed.load(Ordering::Relaxed) {
                    End::ClientError
                } else {
                    End::UpstreamError
                };
                pending.finish(end, &e.to_string());
                Err(std::io::Error::other(e))
            }
            Err(_) => {
                // It went upstream: an allowed request that timed out, not a refusal.
                let detail = format!("no response from {} within {:?}", self.target, self.idle);
                let status = StatusCode::GATEWAY_TIMEOUT;
                pending.update(|attempt| attempt.status = Some(status.as_u16()));
                pending.finish(End::IdleTimeout, &detail);
                Ok(answer_with(status, Reason::UpstreamTimeout, &detail))
            }
        }
    }

    /// A request's record, before it is judged: the tunnel's rule and addresses, the
    /// request's method and path.
    fn attempt(&self, req: &Request<Incoming>) -> Attempt {
        let mut attempt = Attempt::begin(self.opened.session.clone(), Proto::Inspected);
        attempt.goes_on(&self.opened);
        attempt.target = Some(self.target.clone());
        // Denied until it is judged.
        attempt.decision = Verdict::Deny;
        attempt.method = Some(req.method().to_string());
        attempt.path = Some(
            req.uri()
                .path_and_query()
                .map_or_else(|| req.uri().to_string(), |p| p.as_str().to_owned()),
        );
        attempt
    }

    /// Whether the request may go on: it names the tunnel's host, and the HTTP rules
    /// allow its method and path. Returns the `[[http]]` rule that allowed it, if one did.
    fn judge(&self, req: &Request<Incoming>) -> Result<Option<crate::policy::RuleRef>, Refused> {
        let forbidden = |reason, detail: String| Refused {
            status: StatusCode::FORBIDDEN,
            reason,
            detail,
        };
        if req.method() == Method::CONNECT {
            return Err(forbidden(
                Reason::HostMismatch,
                format!("a CONNECT inside the inspected tunnel to {}", self.target),
            ));
        }
        if let Some(authority) = req.uri().authority() {
            let named =
                Target::parse_with_default_port(authority.as_str(), default_port(self.scheme));
            let same = req.uri().scheme_str() == Some(self.scheme)
                && !authority.as_str().contains('@')
                && named.as_ref() == Ok(&self.target);
            if !same {
                return Err(forbidden(
                    Reason::HostMismatch,
                    format!(
                        "the request names {:?} inside the tunnel to {}",
                        crate::text::bounded(req.uri().to_string(), 200),
                        self.target
                    ),
                ));
            }
        }
        // A server picks its site by the Host: another name reaches another site.
        host_header_names(req.version(), req.headers(), &self.target)
            .map_err(|detail| forbidden(Reason::HostMismatch, detail))?;
        if let Some(detail) = body_on_bodiless(req.method(), req.headers()) {
            return Err(Refused {
                status: StatusCode::BAD_REQUEST,
                reason: Reason::BadRequest,
                detail,
            });
        }
        let path = req.uri().path();
        self.check
            .judge(req.method().as_str(), path, req.uri().query().unwrap_or(""))
            .map_err(|refusal| forbidden(refusal.reason, refusal.detail))
    }

    /// Logs a refused request and answers it; the connection closes after the answer
    /// (the request's body was not read).
    fn refuse(&self, pending: &mut Pending, refused: Refused) -> Response<ResponseBody> {
        if let Some((mut attempt, log)) = pending.record.take() {
            attempt.decision = Verdict::Deny;
            attempt.reason = refused.reason;
            attempt.detail = Some(refused.detail.clone());
            attempt.status = Some(refused.status.as_u16());
            log.record(&attempt.finish(End::Refused, 0, 0));
        }
        answer_with(refused.status, refused.reason, &refused.detail)
    }
}

/// A response the bridge gives itself, inside the tunnel: status, `X-Netbox-Reason`, one
/// line, and the connection closes after it.
fn answer_with(status: StatusCode, reason: Reason, detail: &str) -> Response<ResponseBody> {
    let line = one_line(detail);
    let mut response = Response::new(
        Full::new(Bytes::from(format!("netbox: {line}\n")))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        "x-netbox-reason",
        HeaderValue::from_static(reason.header_value()),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The status a request gets when its secrets cannot go with it: a misdirected one is the
/// policy's refusal (403), one the bridge cannot carry the client's mistake (400), and a
/// value never read the bridge's own failure (502).
pub(crate) fn swap_refusal_status(reason: Reason) -> StatusCode {
    match reason {
        Reason::SecretMisdirected | Reason::MethodNotAllowed => StatusCode::FORBIDDEN,
        Reason::BadRequest => StatusCode::BAD_REQUEST,
        _ => StatusCode::BAD_GATEWAY,
    }
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" {
        443
    } else {
        80
    }
}

/// A request counted as waiting for its answer while this lives.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl InFlight<'_> {
    fn start(count: &std::sync::atomic::AtomicUsize) -> InFlight<'_> {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
