//! Secrets swapped in on the wire (policy/secrets.rs): in a request the bridge reads (one
//! inside an inspected tunnel, or a forwarded one), each placeholder is replaced by its
//! secret's value if the request goes to one of that secret's hosts, and the request is
//! refused as misdirected if it goes anywhere else. Places looked in: every header value,
//! the credentials of `Authorization: Basic` (decoded, swapped, encoded again), and the
//! request target's path and query. A body is not read (the bridge streams it), so a
//! placeholder there is sent as it is: worthless to anyone but the bridge.
//!
//! Responses from a host a secret goes to are cleaned of the value on their way back:
//! header values get the placeholder in its place, bodies the same number of `*` (so the
//! length the server gave still holds). Only bodies sent without a content coding can be
//! searched: requests to those hosts ask for none (`Accept-Encoding: identity`).

use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::Uri;
use hyper::body::{Body, Frame, SizeHint};

use crate::policy::secrets::{Secret, PLACEHOLDER_PREFIX};
use crate::policy::Reason;
use crate::target::Target;

/// Why a request carrying a placeholder is not sent.
#[derive(Debug)]
pub(crate) struct SwapRefusal {
    pub reason: Reason,
    pub detail: String,
}

/// Swaps every placeholder in `headers` and `uri` for its value, for a request to
/// `target`. Returns the names of the secrets swapped in (for the log), or why the request
/// must be refused: a placeholder for a secret that does not go to `target`.
pub(crate) fn swap_request(
    secrets: &[Secret],
    target: &Target,
    headers: &mut HeaderMap,
    uri: &mut Uri,
) -> Result<Vec<String>, SwapRefusal> {
    if secrets.is_empty() {
        return Ok(Vec::new());
    }
    let mut used = Vec::new();
    let mut changed = Vec::new();
    for (name, value) in headers.iter() {
        let bytes = value.as_bytes();
        if FRAMING.contains(&name.as_str()) && holds_placeholder(bytes) {
            return Err(SwapRefusal {
                reason: Reason::BadRequest,
                detail: format!(
                    "a secret's placeholder in the {name} header, which says how the request \
                     is framed or routed: a value never goes there"
                ),
            });
        }
        let basic = (name == header::AUTHORIZATION)
            .then(|| basic_credentials(bytes))
            .flatten();
        let swapped = match basic {
            Some(decoded) if holds_placeholder(&decoded) => {
                let inner = swap_bytes(secrets, target, &decoded, &mut used, name.as_str())?;
                let encoded = base64::engine::general_purpose::STANDARD.encode(inner);
                Some(format!("Basic {encoded}").into_bytes())
            }
            _ if holds_placeholder(bytes) => Some(swap_bytes(
                secrets,
                target,
                bytes,
                &mut used,
                name.as_str(),
            )?),
            _ => None,
        };
        if let Some(swapped) = swapped {
            let value = HeaderValue::from_bytes(&swapped).map_err(|_| SwapRefusal {
                reason: Reason::BadRequest,
                detail: format!(
                    "a secret's value cannot be sent in the {name} header (it holds a byte a \
                     header may not)"
                ),
            })?;
            changed.push((name.clone(), value));
        }
    }
    // A header's values are set again in order: a name that came more than once keeps
    // each of its values, swapped or not.
    for (name, _) in &changed {
        let values: Vec<HeaderValue> = headers.get_all(name).iter().cloned().collect();
        let mut swapped = changed.iter().filter(|(n, _)| n == name).map(|(_, v)| v);
        headers.remove(name);
        for value in values {
            let value = if holds_placeholder(value.as_bytes())
                || basic_credentials(value.as_bytes()).is_some_and(|d| holds_placeholder(&d))
            {
                swapped.next().cloned().unwrap_or(value)
            } else {
                value
            };
            headers.append(name.clone(), value);
        }
    }
    if let Some(authority) = uri.authority() {
        if holds_placeholder(authority.as_str().as_bytes()) {
            // Checked, never swapped: a value has no place in a host name.
            swap_bytes(
                secrets,
                target,
                authority.as_str().as_bytes(),
                &mut Vec::new(),
                "host",
            )?;
        }
    }
    if let Some(path) = uri.path_and_query() {
        if holds_placeholder(path.as_str().as_bytes()) {
            let escaped = swap_bytes_with(
                secrets,
                target,
                path.as_str().as_bytes(),
                &mut used,
                "URL",
                |v| {
                    percent_encoding::percent_encode(v, URL_ESCAPED)
                        .to_string()
                        .into_bytes()
                },
            )?;
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(http::uri::PathAndQuery::try_from(escaped).map_err(
                |_| SwapRefusal {
                    reason: Reason::BadRequest,
                    detail: "the URL with the secret swapped in does not parse".into(),
                },
            )?);
            *uri = Uri::from_parts(parts).map_err(|_| SwapRefusal {
                reason: Reason::BadRequest,
                detail: "the URL with the secret swapped in does not parse".into(),
            })?;
        }
    }
    if secrets.iter().any(|s| s.goes_to(target)) {
        // What comes back is searched for the value: only a body without a content coding
        // can be.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    used.sort();
    used.dedup();
    Ok(used)
}

/// Every byte but letters, digits, `-`, `_` and `~` escaped: a value goes into a path or
/// query as data, never as a separator or a segment of dots.
const URL_ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'~');

/// Headers that frame or route a request (or are the bridge's own): a placeholder there is
/// refused rather than swapped, since what the bridge parsed and what the server parses
/// must not come apart.
const FRAMING: [&str; 10] = [
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
];

fn holds_placeholder(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, PLACEHOLDER_PREFIX.as_bytes()).is_some()
}

/// The decoded credentials of a `Basic` authorization, if it is one.
fn basic_credentials(value: &[u8]) -> Option<Vec<u8>> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let rest = std::str::from_utf8(rest).ok()?.trim();
    base64::engine::general_purpose::STANDARD.decode(rest).ok()
}

fn swap_bytes(
    secrets: &[Secret],
    target: &Target,
    bytes: &[u8],
    used: &mut Vec<String>,
    place: &str,
) -> Result<Vec<u8>, SwapRefusal> {
    swap_bytes_with(secrets, target, bytes, used, place, <[u8]>::to_vec)
}

/// `bytes` with each placeholder replaced by `escape` of its value.
fn swap_bytes_with(
    secrets: &[Secret],
    target: &Target,
    bytes: &[u8],
    used: &mut Vec<String>,
    place: &str,
    escape: impl Fn(&[u8]) -> Vec<u8>,
) -> Result<Vec<u8>, SwapRefusal> {
    let mut out = bytes.to_vec();
    for secret in secrets {
        let placeholder = secret.placeholder.as_bytes();
        if memchr::memmem::find(&out, placeholder).is_none() {
            continue;
        }
        if !secret.goes_to(target) {
            return Err(SwapRefusal {
                reason: Reason::SecretMisdirected,
                detail: format!(
                    "the placeholder of secret {} (in the {place}) is sent to {target}, \
                     which is not among its hosts ({})",
                    secret.name, secret.origin
                ),
            });
        }
        let Some(value) = secret.value() else {
            return Err(SwapRefusal {
                reason: Reason::Unsupported,
                detail: format!("secret {}'s value has not been read", secret.name),
            });
        };
        out = replace_all(&out, placeholder, &escape(value.bytes()));
        used.push(secret.name.clone());
    }
    Ok(out)
}

fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = memchr::memmem::find(rest, from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// The values a response is cleaned of, each with what goes in its place in a header.
#[derive(Clone, Default)]
pub(crate) struct Redactions {
    values: Vec<(zeroize::Zeroizing<Vec<u8>>, Bytes)>,
}

impl Redactions {
    /// The values of the secrets whose hosts include `target` (only those hosts were ever
    /// sent them).
    pub fn for_target(secrets: &[Secret], target: &Target) -> Redactions {
        let values = secrets
            .iter()
            .filter(|s| s.goes_to(target))
            .filter_map(|s| {
                let value = s.value()?;
                Some((
                    zeroize::Zeroizing::new(value.bytes().to_vec()),
                    Bytes::from(s.placeholder.clone()),
                ))
            })
            .collect();
        Redactions { values }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Replaces each value in a response's header values with its placeholder.
    pub fn clean_headers(&self, headers: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        let names: Vec<_> = headers.keys().cloned().collect();
        for name in names {
            let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
            if !values.iter().any(|v| self.holds_value(v.as_bytes())) {
                continue;
            }
            headers.remove(&name);
            for value in values {
                let mut bytes = value.as_bytes().to_vec();
                for (secret, placeholder) in &self.values {
                    bytes = replace_all(&bytes, secret, placeholder);
                }
                if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                    headers.append(name.clone(), value);
                }
            }
        }
    }

    fn holds_value(&self, bytes: &[u8]) -> bool {
        self.values
            .iter()
            .any(|(v, _)| memchr::memmem::find(bytes, v).is_some())
    }

    /// The longest value: a body keeps back one byte less than this between frames, in
    /// case a value is split across them.
    fn longest(&self) -> usize {
        self.values.iter().map(|(v, _)| v.len()).max().unwrap_or(0)
    }

    /// `buf` with every whole value masked; what might be the start of a value cut by the
    /// frame's end is kept back (returned second) unless this is the end.
    fn mask(&self, mut buf: BytesMut, end: bool) -> (Bytes, BytesMut) {
        for (value, _) in &self.values {
            let mut from = 0;
            while let Some(at) = memchr::memmem::find(&buf[from..], value) {
                let start = from + at;
                buf[start..start + value.len()].fill(b'*');
                from = start + value.len();
            }
        }
        let keep = if end {
            0
        } else {
            self.longest().saturating_sub(1).min(buf.len())
        };
        let held = buf.split_off(buf.len() - keep);
        (buf.freeze(), held)
    }
}

/// A response body with the values of `Redactions` masked, frame by frame.
pub(crate) struct RedactedBody<B> {
    inner: B,
    redactions: Redactions,
    held: BytesMut,
    done: bool,
}

impl<B> RedactedBody<B> {
    pub fn new(inner: B, redactions: Redactions) -> RedactedBody<B> {
        RedactedBody {
            inner,
            redactions,
            held: BytesMut::new(),
            done: false,
        }
    }
}

impl<B> Body for RedactedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        loop {
            if this.done {
                if this.held.is_empty() {
                    return Poll::Ready(None);
                }
                let rest = std::mem::take(&mut this.held);
                let (out, _) = this.redactions.mask(rest, true);
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let mut buf = std::mem::take(&mut this.held);
                        buf.extend_from_slice(&data);
                        let (out, held) = this.redactions.mask(buf, false);
                        this.held = held;
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(trailers) => {
                        // What was held goes before the trailers, which end the body.
                        if this.held.is_empty() {
                            return Poll::Ready(Some(Ok(trailers)));
                        }
                        let rest = std::mem::take(&mut this.held);
                        let (out, _) = this.redactions.mask(rest, true);
                        this.done = true;
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                },
                Poll::Ready(None) => this.done = true,
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.held.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::RuleRef;
    use http_body_util::BodyExt;
    use std::sync::Arc;

    fn secret(env: &str, value: &str, hosts: &[&str]) -> Secret {
        // Each test names its own variable.
        std::env::set_var(env, value);
        let hosts: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
        let origin = RuleRef {
            file: Arc::from("t.toml"),
            line: 3,
            text: String::new(),
        };
        let mut policy = crate::policy::Policy::default();
        policy
            .add_secret(Secret::parse(env, &format!("env:{env}"), &hosts, None, origin).unwrap())
            .unwrap();
        policy.read_secret_values().unwrap();
        policy.secrets()[0].clone()
    }

    fn target(t: &str) -> Target {
        Target::parse_authority(t).unwrap()
    }

    #[test]
    fn a_bearer_header_is_swapped_for_its_host() {
        let s = secret("SWAP_T1", "real-token-1", &["git.test"]);
        let mut headers = HeaderMap::new();
        let bearer = format!("Bearer {}", s.placeholder);
        headers.insert(header::AUTHORIZATION, bearer.parse().unwrap());
        let mut uri: Uri = "/x".parse().unwrap();
        let used = swap_request(&[s], &target("git.test:443"), &mut headers, &mut uri).unwrap();
        assert_eq!(used, ["SWAP_T1"]);
        assert_eq!(headers[header::AUTHORIZATION], "Bearer real-token-1");
        assert_eq!(headers[header::ACCEPT_ENCODING], "identity");
    }

    #[test]
    fn basic_credentials_are_decoded_swapped_and_encoded() {
        let s = secret("SWAP_T2", "pa:ss/wörd", &["git.test"]);
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut headers = HeaderMap::new();
        let basic = format!("basic {}", b64.encode(format!("user:{}", s.placeholder)));
        headers.insert(header::AUTHORIZATION, basic.parse().unwrap());
        let mut uri: Uri = "/".parse().unwrap();
        swap_request(&[s], &target("git.test:443"), &mut headers, &mut uri).unwrap();
        let sent = headers[header::AUTHORIZATION].to_str().unwrap();
        let decoded = b64.decode(sent.strip_prefix("Basic ").unwrap()).unwrap();
        assert_eq!(decoded, "user:pa:ss/wörd".as_bytes());
    }

    #[test]
    fn a_query_gets_the_value_escaped() {
        let s = secret("SWAP_T3", "a&b=c d", &["api.test"]);
        let mut headers = HeaderMap::new();
        let mut uri: Uri = format!("/v1?token={}&x=1", s.placeholder).parse().unwrap();
        swap_request(&[s], &target("api.test:443"), &mut headers, &mut uri).unwrap();
        assert_eq!(uri.to_string(), "/v1?token=a%26b%3Dc%20d&x=1");
        // A value of dots is no segment of dots once swapped in.
        let s = secret("SWAP_T3B", "..", &["api.test"]);
        let mut uri: Uri = format!("/a/{}/admin", s.placeholder).parse().unwrap();
        swap_request(&[s], &target("api.test:443"), &mut headers, &mut uri).unwrap();
        assert_eq!(uri.to_string(), "/a/%2E%2E/admin");
    }

    #[test]
    fn a_placeholder_in_a_header_that_frames_the_request_is_refused() {
        let s = secret("SWAP_T7", "7", &["git.test"]);
        for name in ["host", "transfer-encoding", "connection", "content-length"] {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::HeaderName::from_static(name),
                s.placeholder.parse().unwrap(),
            );
            let mut uri: Uri = "/".parse().unwrap();
            let refused = swap_request(
                std::slice::from_ref(&s),
                &target("git.test:443"),
                &mut headers,
                &mut uri,
            )
            .unwrap_err();
            assert_eq!(refused.reason, Reason::BadRequest, "{name}");
        }
    }

    #[test]
    fn a_placeholder_to_another_host_is_refused_wherever_it_is() {
        let s = secret("SWAP_T4", "real-token-4", &["git.test"]);
        let b64 = base64::engine::general_purpose::STANDARD;
        let places: Vec<(Option<(&str, String)>, String)> = vec![
            (Some(("x-token", s.placeholder.clone())), "/".into()),
            (
                Some((
                    "authorization",
                    format!("Basic {}", b64.encode(format!("u:{}", s.placeholder))),
                )),
                "/".into(),
            ),
            (None, format!("/?t={}", s.placeholder)),
            (None, format!("/{}/x", s.placeholder)),
        ];
        for (header, path) in places {
            let mut headers = HeaderMap::new();
            if let Some((name, value)) = header {
                headers.insert(http::HeaderName::from_static(name), value.parse().unwrap());
            }
            let mut uri: Uri = path.parse().unwrap();
            let refused = swap_request(
                std::slice::from_ref(&s),
                &target("evil.test:443"),
                &mut headers,
                &mut uri,
            )
            .unwrap_err();
            assert_eq!(refused.reason, Reason::SecretMisdirected);
            assert!(refused.detail.contains("SWAP_T4"));
            assert!(!refused.detail.contains("real-token-4"));
            // Same host, another port the secret does not name: misdirected too.
            assert!(swap_request(
                std::slice::from_ref(&s),
                &target("git.test:8443"),
                &mut headers,
                &mut uri
            )
            .is_err());
        }
    }

    #[test]
    fn a_request_without_a_placeholder_passes_unchanged() {
        let s = secret("SWAP_T5", "real-token-5", &["git.test"]);
        let mut headers = HeaderMap::new();
        headers.insert("x-a", "netbox-secret-OTHER-00".parse().unwrap());
        let mut uri: Uri = "/a?b=c".parse().unwrap();
        let used = swap_request(&[s], &target("other.test:443"), &mut headers, &mut uri).unwrap();
        assert!(used.is_empty());
        assert_eq!(headers["x-a"], "netbox-secret-OTHER-00");
        assert!(headers.get(header::ACCEPT_ENCODING).is_none());
    }

    #[test]
    fn responses_lose_the_value_even_split_across_frames() {
        let s = secret("SWAP_T6", "0123456789abcdef", &["git.test"]);
        let redactions = Redactions::for_target(std::slice::from_ref(&s), &target("git.test:443"));
        let mut headers = HeaderMap::new();
        headers.insert("x-echo", "token=0123456789abcdef;".parse().unwrap());
        redactions.clean_headers(&mut headers);
        assert_eq!(
            headers["x-echo"].to_str().unwrap(),
            format!("token={};", s.placeholder)
        );
        let text = b"echo: 0123456789abcdef and again 0123456789abcdef end";
        for cut in 1..text.len() {
            let (a, b) = text.split_at(cut);
            let body = Frames(
                [Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)]
                    .into_iter()
                    .collect(),
            );
            let redacted = RedactedBody::new(body, redactions.clone());
            let out = block_on(redacted.collect()).unwrap().to_bytes();
            assert_eq!(out.len(), text.len());
            assert_eq!(
                &out[..],
                b"echo: **************** and again **************** end".as_slice(),
                "cut at {cut}"
            );
        }
    }

    /// A body of ready frames.
    struct Frames(std::collections::VecDeque<Bytes>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
