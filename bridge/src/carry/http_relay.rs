//! One HTTP request on its way to its server and its response on the way back, whoever
//! judged it (the proxy's forward path, or an inspected tunnel): the request rewritten as
//! the server expects it, the Host and body checks both judges hold requests to, bodies
//! counted both ways, and the request's one `net` record, written when its response has
//! gone through or was abandoned.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use tokio::sync::watch;

use crate::log::{Attempt, End, EventLog};
use crate::target::Target;

/// Whether a request's Host header names `target`: an HTTP/1.1 request must carry one
/// (RFC 9112 §3.2; HTTP/1.0 need not), and one that is there must be single, ASCII and
/// the same host and port (a name spelled with userinfo is no host). Why not, if not.
/// The proxy's front end and an inspected tunnel's requests are held to it alike.
pub(crate) fn host_header_names(
    version: Version,
    headers: &HeaderMap,
    target: &Target,
) -> Result<(), String> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let Some(host) = hosts.next() else {
        if version == Version::HTTP_11 {
            return Err("an HTTP/1.1 request must carry a Host header".into());
        }
        return Ok(());
    };
    if hosts.next().is_some() {
        return Err("repeated Host header".into());
    }
    let host = host
        .to_str()
        .map_err(|_| "Host header is not ASCII".to_owned())?;
    match Target::parse_with_default_port(host, target.port) {
        Ok(named) if named == *target => Ok(()),
        _ => Err(format!("Host header {host:?} disagrees with the target")),
    }
}

/// A body on a method that has none is what a server may read as the next request (one
/// this bridge never judged): refused, not passed on. Why, if this request has one.
pub(crate) fn body_on_bodiless(method: &Method, headers: &HeaderMap) -> Option<String> {
    // Methods are case-sensitive, but a lenient server takes `get` for GET.
    let bodiless = ["GET", "HEAD", "OPTIONS", "TRACE"];
    let named = bodiless
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method.as_str()));
    (named && carries_body(headers))
        .then(|| format!("a {method} with a body: a server may read the body as another request"))
}

/// Whether a request declares a body: a length other than 0, or any transfer coding.
pub(crate) fn carries_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes() != b"0")
}

/// Whether the server ends its connection after this response.
pub(crate) fn closes(version: Version, headers: &HeaderMap) -> bool {
    let close = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("close"));
    close || version < Version::HTTP_11
}

/// Removes hop-by-hop fields (RFC 9110 §7.6.1), including any the Connection header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

/// A server's response as the bridge passes it on: without `X-Netbox-Reason` and
/// `Proxy-Status`, which only the bridge itself may say. A bridge relaying to this one
/// takes them for this bridge's own refusal (upstream_proxy.rs), so a server must not be
/// able to make a request it answered look refused.
pub(crate) fn strip_bridge_headers(headers: &mut HeaderMap) {
    headers.remove("x-netbox-reason");
    headers.remove("proxy-status");
}

/// Keeps a detail safe for a header and a single body line.
pub(crate) fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .filter(char::is_ascii)
        .take(300)
        .collect()
}

/// The request as the server gets it: origin-form, HTTP/1.1, no hop-by-hop fields, a Host
/// naming what was judged (an absolute-form request's authority, as RFC 9112 §3.2.2 has a
/// proxy do; else the request's own, already held to the target; else the target's: never
/// none, which a server would answer with its default site), `Connection: close` when
/// `last`, its body counted (`up`, and `failed` if the client fails it).
pub(crate) fn origin_request(
    req: Request<Incoming>,
    target: &Target,
    last: bool,
    (up, failed): (Arc<AtomicU64>, Arc<AtomicBool>),
) -> Request<CountedBody> {
    let (mut parts, body) = req.into_parts();
    let named = parts
        .uri
        .authority()
        .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok());
    let host = named
        .or_else(|| parts.headers.get(header::HOST).cloned())
        .or_else(|| HeaderValue::from_str(&target.to_string()).ok());
    if parts.uri.authority().is_some() {
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        // A path that came out of a parsed URI parses again.
        if let Ok(origin) = Uri::try_from(path) {
            parts.uri = origin;
        }
    }
    parts.version = Version::HTTP_11;
    // `Connection: host` would strip the Host that was checked: it is put back.
    strip_hop_by_hop(&mut parts.headers);
    if let Some(host) = host {
        parts.headers.insert(header::HOST, host);
    }
    // A server that answers before reading the body (or reads it otherwise than its
    // framing says) must not take what is left for another request: the connection ends
    // with this one.
    if last {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    Request::from_parts(
        parts,
        CountedBody {
            inner: Some(body),
            up,
            failed,
        },
    )
}

/// The same request again, for another connection, if it can be sent twice: a method a
/// server may be asked twice (RFC 9110 §9.2.2), and no body.
pub(crate) fn resendable(req: &Request<CountedBody>) -> Option<Request<CountedBody>> {
    let idempotent = [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::TRACE,
        Method::PUT,
        Method::DELETE,
    ];
    if !idempotent.contains(req.method()) || carries_body(req.headers()) {
        return None;
    }
    let mut again = Request::new(CountedBody {
        inner: None,
        up: Arc::clone(&req.body().up),
        failed: Arc::clone(&req.body().failed),
    });
    *again.method_mut() = req.method().clone();
    *again.uri_mut() = req.uri().clone();
    *again.version_mut() = req.version();
    *again.headers_mut() = req.headers().clone();
    Some(again)
}

/// A request's record until it is written: by `finish`, by whoever answers a refusal, by
/// the response body that takes it, or, if the request's handler is dropped first (the
/// client left, the connection ended), by `Drop`.
pub(crate) struct Pending {
    pub record: Option<(Attempt, Arc<EventLog>)>,
    pub up: Arc<AtomicU64>,
    /// The request went to the upstream.
    pub sent: bool,
    /// The bridge's stop signal: a request cut off by the bridge stopping ended so, not
    /// by its client.
    stop: watch::Receiver<bool>,
}

impl Pending {
    pub fn new(attempt: Attempt, log: Arc<EventLog>, stop: watch::Receiver<bool>) -> Pending {
        Pending {
            record: Some((attempt, log)),
            up: Arc::new(AtomicU64::new(0)),
            sent: false,
            stop,
        }
    }

    pub fn update(&mut self, change: impl FnOnce(&mut Attempt)) {
        if let Some((attempt, _)) = &mut self.record {
            change(attempt);
        }
    }

    pub fn finish(&mut self, end: End, detail: &str) {
        if let Some((mut attempt, log)) = self.record.take() {
            attempt.detail = Some(detail.to_owned());
            log.record(&attempt.finish(end, self.up.load(Ordering::Relaxed), 0));
        }
    }

    /// The response body that writes the record once it has gone through.
    pub fn into_body(mut self, inner: Incoming, fate: Arc<OnceLock<End>>) -> LoggedBody {
        LoggedBody {
            inner,
            down: 0,
            up: Arc::clone(&self.up),
            record: self.record.take(),
            ended: false,
            upstream_failed: false,
            fate,
            stop: self.stop.clone(),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if *self.stop.borrow() {
            return self.finish(
                End::Shutdown,
                "the bridge stopped before the upstream answered",
            );
        }
        let detail = if self.sent {
            "the client left, or its connection ended, before the upstream answered"
        } else {
            "the client left, or its connection ended, before the request was sent on"
        };
        self.finish(End::ClientError, detail);
    }
}

/// A request body on its way up, counted; `failed` is set if reading it from the client
/// fails (the client left mid-upload), so that is not taken for the upstream's failure.
pub(crate) struct CountedBody {
    /// None: a request sent again, which has no body.
    inner: Option<Incoming>,
    up: Arc<AtomicU64>,
    failed: Arc<AtomicBool>,
}

impl Body for CountedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.up.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
            }
            Poll::Ready(Some(Err(_))) => self.failed.store(true, Ordering::Relaxed),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

/// A response body on its way down, counted; its request's record is written when it
/// ends or is dropped unfinished.
pub(crate) struct LoggedBody {
    inner: Incoming,
    down: u64,
    up: Arc<AtomicU64>,
    record: Option<(Attempt, Arc<EventLog>)>,
    ended: bool,
    /// The upstream failed mid-body (else an unfinished body is the client's leaving).
    upstream_failed: bool,
    /// Why the upstream connection was ended, when the bridge ended it (nothing moved for
    /// the idle timeout, the bridge stopped): that, rather than a failure, ends the body.
    fate: Arc<OnceLock<End>>,
    stop: watch::Receiver<bool>,
}

impl Body for LoggedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.down += data.len() as u64;
                }
                // Trailers are a body's last frame: hyper asks for nothing after them.
                if frame.is_trailers() {
                    self.ended = true;
                }
            }
            Poll::Ready(None) => self.ended = true,
            Poll::Ready(Some(Err(_))) => self.upstream_failed = true,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        if let Some((attempt, log)) = self.record.take() {
            let end = if self.ended || self.inner.is_end_stream() {
                End::Closed
            } else if let Some(end) = self.fate.get() {
                *end
            } else if *self.stop.borrow() {
                End::Shutdown
            } else if self.upstream_failed {
                End::UpstreamError
            } else {
                End::ClientError
            };
            log.record(&attempt.finish(end, self.up.load(Ordering::Relaxed), self.down));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_on_a_bodiless_method_is_refused_in_any_case() {
        let mut with_body = HeaderMap::new();
        with_body.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        let mut chunked = HeaderMap::new();
        chunked.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        let mut empty = HeaderMap::new();
        empty.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        let method = |m: &str| Method::from_bytes(m.as_bytes()).unwrap();
        for m in ["GET", "get", "Head", "OPTIONS", "trace"] {
            assert!(body_on_bodiless(&method(m), &with_body).is_some(), "{m}");
            assert!(body_on_bodiless(&method(m), &chunked).is_some(), "{m}");
            assert!(body_on_bodiless(&method(m), &empty).is_none(), "{m}");
        }
        assert!(body_on_bodiless(&Method::POST, &with_body).is_none());
    }
}
