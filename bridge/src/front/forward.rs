//! The forward path: absolute-form requests (`GET http://host/path`) sent on to their
//! servers. Each request is judged on its own (the policy's decision for its target, the
//! target's HTTP rules) and is one `net` record, written when its response has gone
//! through (`http_relay`).
//!
//! A keep-alive client's requests to one target under one decision share an upstream
//! connection: one dial per client connection, not one per request. It is kept for that
//! client connection alone, never handed to another, so what one client leaves on it (a
//! slow server, a half-read response) stays that client's; and a request with a body is
//! the last on its upstream connection, as inside an inspected tunnel.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::outbound::Outbound;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;

use crate::carry::http_relay::{
    body_on_bodiless, carries_body, closes, host_header_names, origin_request, resendable,
    strip_hop_by_hop, CountedBody, Pending,
};
use crate::carry::secret_swap::{swap_request, RedactedBody, Redactions};
use crate::conn::{Conn, Slot};
use crate::counting::{Counted, Counters};
use crate::egress::{self, Refusal, ViaProxy};
use crate::log::{Attempt, End, Proto};
use crate::policy::secrets::Leg;
use crate::policy::{Reason, Verdict};
use crate::target::Target;

type Body = BoxBody<Bytes, hyper::Error>;

/// How a forwarded request came out.
pub(super) enum Forwarded {
    /// The server's response; its record is written when its body has gone through.
    Response(Response<Body>),
    /// Refused before anything went upstream: the record to write with the refusal.
    Refused(Attempt, Refusal),
    /// Sent, but no response came (the server failed, or was silent for the idle
    /// timeout): answered as a refusal is, the record written with `end`.
    Failed {
        pending: Pending,
        refusal: Refusal,
        end: End,
    },
}

/// The upstream connection a client connection keeps between its requests.
#[derive(Default)]
pub(super) struct KeptUpstream(Mutex<Option<Upstream>>);

/// One upstream connection, and what it was opened for.
struct Upstream {
    target: Target,
    /// The dial's record: its decision, rule, addresses, and the address dialed, which
    /// each request sent on this connection is logged with.
    opened: Attempt,
    sender: SendRequest<CountedBody>,
    /// Why the bridge ended the connection, if it did (`drive`).
    fate: Arc<OnceLock<End>>,
    /// The policy it was dialled under: after a reload no request takes it, as the
    /// address it dialled was admitted by the old policy.
    policy: Arc<crate::policy::Policy>,
    /// The upstream proxy it is a connection to, if it is: requests go to it in absolute
    /// form, with its credentials.
    via: Option<ViaProxy>,
}

impl KeptUpstream {
    /// The kept connection, if it was opened for `target` under the decision the policy
    /// gives it now, and can take a request.
    async fn take_for(&self, target: &Target, conn: &Conn) -> Option<Upstream> {
        let mut upstream = self.0.lock().ok()?.take()?;
        let decision = conn.policy.decide(target);
        let same = upstream.target == *target
            && Arc::ptr_eq(&upstream.policy, &conn.policy)
            && decision.is_allow()
            && decision.rule == upstream.opened.rule;
        // `ready` waits for nothing on an idle connection; it fails on a closed one.
        (same && upstream.sender.ready().await.is_ok()).then_some(upstream)
    }

    fn keep(&self, upstream: Upstream) {
        if let Ok(mut kept) = self.0.lock() {
            *kept = Some(upstream);
        }
    }
}

/// Forwards one request, judged first; the client connection's kept upstream is used if
/// it fits, and a new one is kept if the response leaves it open.
// Whole: one request's steps in the order they happen (judge, reuse or dial, send, record),
// each taking up what the one before left.
pub(super) async fn forward(req: Request<Incoming>, conn: &Conn, kept: &KeptUpstream) -> Forwarded {
    let mut attempt = Attempt::begin(conn.session.id.clone(), Proto::HttpForward);
    attempt.method = Some(req.method().to_string());
    attempt.path = req.uri().path_and_query().map(|p| p.as_str().to_owned());
    let target = match forward_target(&req) {
        Ok(target) => target,
        Err(refusal) => return Forwarded::Refused(attempt, refusal),
    };
    // A placeholder going where its secret does not is refused before anything else is
    // judged: the log then says what it was, not merely that the host is not allowed.
    let (mut parts, body) = req.into_parts();
    let secrets = conn.policy.secrets();
    // The forward path speaks plain HTTP upstream: a value goes on it only to a port
    // named on purpose.
    let leg = Leg {
        verified_tls: false,
        tls_port: conn.policy.checks_tls(target.port),
    };
    match swap_request(secrets, &target, leg, &mut parts) {
        Ok(used) => attempt.secrets = used,
        Err(refused) => {
            attempt.target = Some(target);
            return Forwarded::Refused(attempt, Refusal::new(refused.reason, refused.detail));
        }
    }
    let req = Request::from_parts(parts, body);
    // A host with HTTP rules: the request is judged by them, as inside a tunnel.
    if let Some(check) = conn.policy.http_check(&target) {
        let judged = check
            .judge(
                req.method().as_str(),
                req.uri().path(),
                req.uri().query().unwrap_or(""),
            )
            .map_err(|refused| Refusal::new(refused.reason, refused.detail))
            .and_then(|_| match body_on_bodiless(req.method(), req.headers()) {
                Some(detail) => Err(bad(detail)),
                None => Ok(()),
            });
        if let Err(refusal) = judged {
            attempt.target = Some(target);
            attempt.rule = check.rules().first().map(|r| r.origin.clone());
            return Forwarded::Refused(attempt, refusal);
        }
    }
    // Everything that can refuse the request happens before anything is dialed. From here
    // the record is held by `pending`, which writes it however the request ends (the
    // client leaving mid-dial too).
    let last = carries_body(req.headers());
    let head_request = req.method() == http::Method::HEAD;
    let stop = conn.shared.stop.clone();
    let mut pending = Pending::new(attempt, Arc::clone(&conn.shared.log), stop);
    let reused = kept.take_for(&target, conn).await;
    let mut fresh = reused.is_none();
    let mut upstream = match reused {
        Some(upstream) => {
            pending.update(|attempt| attempt.goes_on(&upstream.opened));
            upstream
        }
        None => match dial_for(conn, &mut pending, &target).await {
            Ok(upstream) => upstream,
            Err(refused) => return refused,
        },
    };
    let client_body_failed = Arc::new(AtomicBool::new(false));
    let counted = (Arc::clone(&pending.up), Arc::clone(&client_body_failed));
    let mut outgoing = origin_request(req, &target, last, counted);
    if let Some(via) = &upstream.via {
        to_proxy(&mut outgoing, via);
    }
    // On a kept connection the server may close just as the request goes out (its
    // keep-alive ran out): the request goes again on a new connection, once, if it was
    // never written (hyper hands it back) or may be sent twice (idempotent, no body).
    let mut again = if fresh { None } else { resendable(&outgoing) };
    pending.sent = true;
    let idle = conn.shared.config.idle_timeout;
    let sent = loop {
        let sent = tokio::time::timeout(idle, upstream.sender.try_send_request(outgoing)).await;
        let Ok(Err(mut failed)) = sent else {
            break sent;
        };
        let retry = match failed.take_message() {
            Some(unsent) if !fresh => Some(unsent),
            _ if !fresh => again.take(),
            _ => None,
        };
        let Some(retry) = retry else {
            break Ok(Err(failed));
        };
        outgoing = retry;
        fresh = true;
        match dial_for(conn, &mut pending, &target).await {
            Ok(redialed) => upstream = redialed,
            Err(refused) => return refused,
        }
    };
    // The driver ends a connection nothing moved on for the idle timeout just as this
    // wait does: whichever saw it first, it is the same silence.
    let silent = upstream.fate.get() == Some(&End::IdleTimeout);
    let stopped = upstream.fate.get() == Some(&End::Shutdown);
    let response = match sent {
        Ok(Ok(response)) if !silent => response,
        Ok(Err(failed)) if !silent => {
            let client_left = client_body_failed.load(std::sync::atomic::Ordering::Relaxed);
            let end = if client_left {
                End::ClientError
            } else if stopped {
                End::Shutdown
            } else {
                End::UpstreamError
            };
            let refusal = Refusal::new(Reason::UpstreamUnreachable, failed.error().to_string());
            return Forwarded::Failed {
                pending,
                refusal,
                end,
            };
        }
        _ => {
            return Forwarded::Failed {
                pending,
                refusal: Refusal::new(
                    Reason::UpstreamTimeout,
                    format!("no response from upstream within {idle:?}"),
                ),
                end: End::IdleTimeout,
            }
        }
    };
    if let Some(via) = &upstream.via {
        if let Some(refusal) = via
            .proxy
            .credentials_refused(response.status(), response.headers())
        {
            pending.update(|attempt| {
                attempt.decision = Verdict::Deny;
                attempt.reason = refusal.reason;
            });
            return Forwarded::Failed {
                pending,
                refusal,
                end: End::Refused,
            };
        }
    }
    let closing = last || closes(response.version(), response.headers());
    let (mut parts, body) = response.into_parts();
    // The judging bridge refused it: logged as its refusal, and passed on as it came.
    let refused = upstream
        .via
        .as_ref()
        .and_then(|via| via.proxy.refusal_in(parts.status.as_u16(), &parts.headers));
    let redactions = Redactions::for_target(secrets, &target);
    if let Some(detail) = refused
        .is_none()
        .then(|| redactions.unsearchable(head_request, &parts, &target))
        .flatten()
    {
        // Its body is left unread: the connection goes with it, never kept.
        pending.update(|attempt| {
            attempt.decision = Verdict::Deny;
            attempt.reason = Reason::UpstreamNotTrusted;
        });
        return Forwarded::Failed {
            pending,
            refusal: Refusal::new(Reason::UpstreamNotTrusted, detail),
            end: End::Refused,
        };
    }
    strip_hop_by_hop(&mut parts.headers);
    if refused.is_none() {
        crate::carry::http_relay::strip_bridge_headers(&mut parts.headers);
    }
    let status = parts.status.as_u16();
    pending.update(|attempt| {
        attempt.status = Some(status);
        if let Some(refusal) = refused {
            attempt.decision = Verdict::Deny;
            attempt.reason = refusal.reason;
            attempt.detail = Some(refusal.detail);
        }
    });
    let body = pending.into_body(body, Arc::clone(&upstream.fate));
    if !closing {
        kept.keep(upstream);
    }
    let body = if redactions.is_empty() {
        body.boxed()
    } else {
        redactions.clean_head(&mut parts);
        RedactedBody::new(body, redactions).boxed()
    };
    Forwarded::Response(Response::from_parts(parts, body))
}

/// `dial` for the request `pending` holds the record of; a refusal takes the record with it.
async fn dial_for(
    conn: &Conn,
    pending: &mut Pending,
    target: &Target,
) -> Result<Upstream, Forwarded> {
    let dialed = match pending.record.as_mut() {
        Some((attempt, _)) => dial(conn, attempt, target).await,
        None => Err(Refusal::new(
            Reason::UpstreamUnreachable,
            "no record to dial for",
        )),
    };
    dialed.map_err(|refusal| {
        let attempt = pending.record.take().map_or_else(
            || Attempt::begin(conn.session.id.clone(), Proto::HttpForward),
            |(attempt, _)| attempt,
        );
        Forwarded::Refused(attempt, refusal)
    })
}

/// Runs the pipeline for `target` (policy, resolve, classify, dial) and opens an HTTP/1.1
/// connection on what it dialed, driven by a task of its own.
async fn dial(conn: &Conn, attempt: &mut Attempt, target: &Target) -> Result<Upstream, Refusal> {
    let (stream, via) = egress::open_for_requests(&conn.egress(), attempt, target).await?;
    let counters = Counters::default();
    let io = TokioIo::new(Counted::new(stream, counters.clone()));
    let handshake = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake::<_, CountedBody>(io)
        .await;
    let (sender, connection) = match handshake {
        Ok(pair) => pair,
        Err(e) => {
            attempt.decision = Verdict::Deny;
            return Err(Refusal::new(Reason::UpstreamUnreachable, e.to_string()));
        }
    };
    let fate = Arc::new(OnceLock::new());
    let driven = Driven {
        idle: conn.shared.config.idle_timeout,
        counters,
        fate: Arc::clone(&fate),
        slot: Arc::clone(&conn.slot),
    };
    tokio::spawn(driven.drive(connection, conn.stopped()));
    Ok(Upstream {
        target: target.clone(),
        opened: attempt.clone(),
        sender,
        fate,
        policy: Arc::clone(&conn.policy),
        via,
    })
}

/// A request in origin form made one for the upstream proxy: absolute form again (the
/// target as judged, not as the client spelt it; its Host stays the name), with the
/// proxy's credentials (the client's own were stripped with the other hop-by-hop fields).
fn to_proxy(request: &mut Request<CountedBody>, via: &ViaProxy) {
    let (target, proxy) = (&via.named, &via.proxy);
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    if let Ok(uri) = http::Uri::try_from(format!("http://{target}{path}")) {
        *request.uri_mut() = uri;
    }
    if let Some(value) = &proxy.authorization {
        request
            .headers_mut()
            .insert(http::header::PROXY_AUTHORIZATION, value.clone());
    }
}

/// What the task that drives an upstream connection watches it by.
struct Driven {
    idle: Duration,
    /// Bytes on the upstream socket, and when they last moved.
    counters: Counters,
    fate: Arc<OnceLock<End>>,
    /// The client connection's place under the limits, held while this lives.
    slot: Arc<Slot>,
}

impl Driven {
    /// Drives the connection until the server or the bridge ends it: nothing moving for
    /// the idle timeout (mid-response as between requests) ends it, as it does a tunnel,
    /// and so does the bridge stopping; a response on its way then ends with that `fate`.
    async fn drive(
        self,
        connection: Connection<TokioIo<Counted<Outbound>>, CountedBody>,
        stopped: impl std::future::Future<Output = ()>,
    ) {
        let _slot = self.slot;
        tokio::pin!(connection, stopped);
        loop {
            let deadline = self.counters.last_activity() + self.idle;
            tokio::select! {
                // Its errors reach the response body in flight, which is logged with it.
                _ = &mut connection => return,
                () = tokio::time::sleep_until(deadline) => {
                    if self.counters.last_activity() + self.idle <= tokio::time::Instant::now() {
                        let _ = self.fate.set(End::IdleTimeout);
                        return;
                    }
                }
                () = &mut stopped => {
                    let _ = self.fate.set(End::Shutdown);
                    return;
                }
            }
        }
    }
}

/// The target of an absolute-form request, after the ambiguity checks.
fn forward_target(req: &Request<Incoming>) -> Result<Target, Refusal> {
    let uri = req.uri();
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// URIs are forwarded; use CONNECT for TLS"));
    }
    let Some(authority) = uri.authority() else {
        return Err(bad("absolute URI without a host"));
    };
    if authority.as_str().contains('@') {
        return Err(bad("URI must not carry userinfo"));
    }
    let target = Target::parse_with_default_port(authority.as_str(), 80)
        .map_err(|e| bad(format!("URI host: {e}")))?;
    host_header_names(req.version(), req.headers(), &target).map_err(bad)?;
    Ok(target)
}

fn bad(detail: impl Into<String>) -> Refusal {
    Refusal::new(Reason::BadRequest, detail)
}
