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
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri};
use hyper::body::{Body, Frame, SizeHint};

use crate::policy::secrets::{Leg, Secret, PLACEHOLDER_PREFIX};
use crate::policy::Reason;
use crate::target::Target;

/// Why a request carrying a placeholder is not sent.
#[derive(Debug)]
pub(crate) struct SwapRefusal {
    pub reason: Reason,
    pub detail: String,
}

/// Swaps every placeholder in a request's headers and target for its value, for a request
/// to `target` going upstream on `leg`. Returns the names of the secrets swapped in (for
/// the log), or why the request must be refused: a placeholder for a secret that does not
/// go to `target` on `leg`, or a request that would echo a value back.
pub(crate) fn swap_request(
    secrets: &[Secret],
    target: &Target,
    leg: Leg,
    parts: &mut http::request::Parts,
) -> Result<Vec<String>, SwapRefusal> {
    if secrets.is_empty() {
        return Ok(Vec::new());
    }
    let secret_host = secrets.iter().any(|s| s.names_host(target));
    if secret_host && parts.method == Method::TRACE {
        return Err(SwapRefusal {
            reason: Reason::MethodNotAllowed,
            detail: format!(
                "TRACE to {target}, a host a secret goes to: a server answers it with the \
                 request it got, value and all"
            ),
        });
    }
    let mut used = Vec::new();
    let names: Vec<HeaderName> = parts.headers.keys().cloned().collect();
    for name in names {
        let values: Vec<HeaderValue> = parts.headers.get_all(&name).iter().cloned().collect();
        let mut swapped = Vec::with_capacity(values.len());
        let mut changed = false;
        for value in values {
            match swap_header_value(secrets, target, leg, &name, &value, &mut used)? {
                Some(new) => {
                    swapped.push(new);
                    changed = true;
                }
                None => swapped.push(value),
            }
        }
        // A name that came more than once keeps each of its values, in order.
        if changed {
            parts.headers.remove(&name);
            for value in swapped {
                parts.headers.append(name.clone(), value);
            }
        }
    }
    let uri = &mut parts.uri;
    if let Some(authority) = uri.authority() {
        if holds_placeholder(authority.as_str().as_bytes()) {
            // Checked, never swapped: a value has no place in a host name.
            swap_bytes(
                secrets,
                target,
                leg,
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
                leg,
                path.as_str().as_bytes(),
                &mut used,
                "URL",
                |v| url_escaped(v).into_bytes(),
            )?;
            let unparsable = || SwapRefusal {
                reason: Reason::BadRequest,
                detail: "the URL with the secret swapped in does not parse".into(),
            };
            let mut uri_parts = uri.clone().into_parts();
            uri_parts.path_and_query =
                Some(http::uri::PathAndQuery::try_from(&escaped[..]).map_err(|_| unparsable())?);
            *uri = Uri::from_parts(uri_parts).map_err(|_| unparsable())?;
        }
    }
    if secret_host {
        // What comes back is searched for the value: only a body without a content coding
        // can be, and only a whole one (a part can cut a value in two).
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        parts.headers.remove(header::RANGE);
        parts.headers.remove(header::IF_RANGE);
    }
    used.sort();
    used.dedup();
    Ok(used)
}

/// One header value with its placeholders swapped, if it holds any: `None` leaves it as
/// it is.
fn swap_header_value(
    secrets: &[Secret],
    target: &Target,
    leg: Leg,
    name: &HeaderName,
    value: &HeaderValue,
    used: &mut Vec<String>,
) -> Result<Option<HeaderValue>, SwapRefusal> {
    let bytes = value.as_bytes();
    // Only Authorization's `Basic` credentials are decoded: that is where clients put a
    // password, and decoding elsewhere would read what was never base64.
    let basic = (name == header::AUTHORIZATION)
        .then(|| basic_credentials(bytes))
        .flatten()
        .filter(|decoded| holds_placeholder(decoded));
    if basic.is_none() && !holds_placeholder(bytes) {
        return Ok(None);
    }
    if FRAMING.contains(&name.as_str()) {
        return Err(SwapRefusal {
            reason: Reason::BadRequest,
            detail: format!(
                "a secret's placeholder in the {name} header, which says how the request is \
                 framed or routed: a value never goes there"
            ),
        });
    }
    let swapped = match basic {
        Some(decoded) => {
            let inner = swap_bytes(secrets, target, leg, &decoded, used, name.as_str())?;
            let encoded =
                zeroize::Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*inner));
            zeroize::Zeroizing::new(format!("Basic {}", encoded.as_str()).into_bytes())
        }
        None => swap_bytes(secrets, target, leg, bytes, used, name.as_str())?,
    };
    HeaderValue::from_bytes(&swapped)
        .map(Some)
        .map_err(|_| SwapRefusal {
            reason: Reason::BadRequest,
            detail: format!(
                "a secret's value cannot be sent in the {name} header (it holds a byte a \
                 header may not)"
            ),
        })
}

/// A value as it goes into a path or query.
fn url_escaped(value: &[u8]) -> String {
    percent_encoding::percent_encode(value, URL_ESCAPED).to_string()
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
    leg: Leg,
    bytes: &[u8],
    used: &mut Vec<String>,
    place: &str,
) -> Result<zeroize::Zeroizing<Vec<u8>>, SwapRefusal> {
    swap_bytes_with(secrets, target, leg, bytes, used, place, <[u8]>::to_vec)
}

/// `bytes` with each placeholder replaced by `escape` of its value.
fn swap_bytes_with(
    secrets: &[Secret],
    target: &Target,
    leg: Leg,
    bytes: &[u8],
    used: &mut Vec<String>,
    place: &str,
    escape: impl Fn(&[u8]) -> Vec<u8>,
) -> Result<zeroize::Zeroizing<Vec<u8>>, SwapRefusal> {
    let mut out = zeroize::Zeroizing::new(bytes.to_vec());
    for secret in secrets {
        let placeholder = secret.placeholder.as_bytes();
        if memchr::memmem::find(&out, placeholder).is_none() {
            continue;
        }
        if !secret.goes_to(target, leg) {
            let why = if secret.names_host(target) && !leg.verified_tls {
                "in the clear, where its value goes over TLS alone (a host named with a port \
                 that is not a TLS port takes it in the clear on purpose)"
                    .to_owned()
            } else {
                "which is not among its hosts".to_owned()
            };
            return Err(SwapRefusal {
                reason: Reason::SecretMisdirected,
                detail: format!(
                    "the placeholder of secret {} (in the {place}) is sent to {target}, {why} \
                     ({})",
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
        let escaped = zeroize::Zeroizing::new(escape(value.bytes()));
        out = zeroize::Zeroizing::new(replace_all(&out, placeholder, &escaped));
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

/// The values a response is cleaned of, in each form they may come back in, each with what
/// goes in its place in a header.
#[derive(Clone, Default)]
pub(crate) struct Redactions {
    forms: Vec<(zeroize::Zeroizing<Vec<u8>>, Bytes)>,
}

/// Shortest base64 text searched for: a shorter run of base64 would match by chance.
const MIN_BASE64_FORM: usize = 8;

impl Redactions {
    /// The values of the secrets that may go to `target`'s host, on any port (only those
    /// hosts were ever sent them; searching a little wider costs nothing).
    pub fn for_target(secrets: &[Secret], target: &Target) -> Redactions {
        let mut forms = Vec::new();
        for secret in secrets.iter().filter(|s| s.names_host(target)) {
            if let Some(value) = secret.value() {
                forms_of(value.bytes(), &secret.placeholder, &mut forms);
            }
        }
        Redactions { forms }
    }

    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// Why a response cannot be searched for the values, if it cannot: its body is in a
    /// content coding (the server ignored the bridge's `Accept-Encoding: identity`), so a
    /// value inside would pass unseen. A response with no body (to HEAD, 204, 304) can be.
    pub fn unsearchable(
        &self,
        head_request: bool,
        head: &http::response::Parts,
        target: &Target,
    ) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        // A part of a body cuts a value where no search sees it whole: requests to these
        // hosts ask for none (`Range` is taken off), so a part is not passed on either.
        if head.status == http::StatusCode::PARTIAL_CONTENT {
            return Some(format!(
                "the response from {target}, a host a secret goes to, is part of a body (206): \
                 a value cut across parts cannot be searched for, so it is not passed on"
            ));
        }
        // A transfer coding other than chunked: hyper undoes the chunking alone.
        let transfer_coded = head
            .headers
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("?").split(','))
            .map(str::trim)
            .any(|c| !c.is_empty() && !c.eq_ignore_ascii_case("chunked"));
        if transfer_coded {
            return Some(format!(
                "the response from {target}, a host a secret goes to, came in a transfer \
                 coding other than chunked: it cannot be searched for the secret's value, so \
                 it is not passed on"
            ));
        }
        if head_request
            || head.status == http::StatusCode::NO_CONTENT
            || head.status == http::StatusCode::NOT_MODIFIED
        {
            return None;
        }
        let coded: Vec<&str> = head
            .headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("?").split(','))
            .map(str::trim)
            .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
            .collect();
        // The server's words are not quoted (they could hold the value): a known coding's
        // name is.
        const KNOWN: [&str; 6] = ["gzip", "x-gzip", "deflate", "br", "zstd", "compress"];
        let named = match coded.first() {
            None => return None,
            Some(c) => KNOWN
                .iter()
                .find(|k| c.eq_ignore_ascii_case(k))
                .map_or("a content coding", |k| k),
        };
        Some(format!(
            "the response from {target}, a host a secret goes to, came in {named} though \
             the bridge asked for none: it cannot be searched for the secret's value, so it \
             is not passed on"
        ))
    }

    /// Cleans a response's head: a value in a header becomes its placeholder, and a
    /// reason phrase of the server's own goes (hyper then writes the standard one): it is
    /// text the server chose, as a header is.
    pub fn clean_head(&self, head: &mut http::response::Parts) {
        if self.is_empty() {
            return;
        }
        // hyper's extensions carry text the server chose as it spelled it: its reason
        // phrase, and each header name's case. None of it goes on.
        head.extensions = http::Extensions::new();
        self.clean_headers(&mut head.headers);
    }

    /// Replaces each value in header values (a response's, or its trailers) with its
    /// placeholder.
    pub fn clean_headers(&self, headers: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        let names: Vec<_> = headers.keys().cloned().collect();
        for name in names {
            // A value as a header's name (lower-cased, so compared without case): the
            // header goes whole.
            if self.names_a_value(name.as_str().as_bytes()) {
                headers.remove(&name);
                continue;
            }
            let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
            if !values.iter().any(|v| self.holds_value(v.as_bytes())) {
                continue;
            }
            headers.remove(&name);
            for value in values {
                let mut bytes = value.as_bytes().to_vec();
                for (form, replacement) in &self.forms {
                    bytes = replace_all(&bytes, form, replacement);
                }
                if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                    headers.append(name.clone(), value);
                }
            }
        }
    }

    fn names_a_value(&self, name: &[u8]) -> bool {
        self.forms.iter().any(|(form, _)| {
            form.len() <= name.len()
                && name
                    .windows(form.len())
                    .any(|w| w.eq_ignore_ascii_case(form))
        })
    }

    fn holds_value(&self, bytes: &[u8]) -> bool {
        self.forms
            .iter()
            .any(|(v, _)| memchr::memmem::find(bytes, v).is_some())
    }

    /// The longest form: a body keeps back one byte less than this between frames, in
    /// case a value is split across them. Always that much, whatever the bytes are: a
    /// hold-back that depended on them (whether the frame ends as a value begins) would
    /// tell CMD, by what arrives when, whether its guess at the value's start was right.
    fn longest(&self) -> usize {
        self.forms.iter().map(|(v, _)| v.len()).max().unwrap_or(0)
    }

    /// Masks every occurrence of every form in `held` (the original bytes, of which the
    /// first `masked` are the end of a value the last frame cut, masked already) and
    /// returns what goes on now, and the original bytes kept back (none if `end`) with
    /// how many of them are to be masked. Occurrences are found in the original bytes, so
    /// neither a value holding `*` nor one form inside another hides the rest of one.
    fn mask(&self, held: Held, end: bool) -> (Bytes, Held) {
        let Held {
            bytes: mut original,
            masked,
        } = held;
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for (form, _) in &self.forms {
            let mut from = 0;
            while let Some(at) = memchr::memmem::find(&original[from..], form) {
                let start = from + at;
                ranges.push((start, start + form.len()));
                from = start + 1;
            }
        }
        let mut out = original.clone();
        out[..masked.min(original.len())].fill(b'*');
        for &(start, stop) in &ranges {
            out[start..stop].fill(b'*');
        }
        let keep = if end {
            0
        } else {
            self.longest().saturating_sub(1).min(out.len())
        };
        let cut = out.len() - keep;
        // What of a value that began before the cut lies past it: masked when it goes on.
        let still_masked = ranges
            .iter()
            .filter(|&&(start, _)| start < cut)
            .map(|&(_, stop)| stop.saturating_sub(cut))
            .chain(std::iter::once(masked.saturating_sub(cut)))
            .max()
            .unwrap_or(0);
        let kept = original.split_off(cut);
        out.truncate(cut);
        (
            out.freeze(),
            Held {
                bytes: kept,
                masked: still_masked,
            },
        )
    }
}

/// `escaped` with the hex digits of each `%XX` in lower case, and nothing else changed (a
/// value's own letters keep their case).
fn lower_hex(escaped: &str) -> String {
    let mut out = escaped.as_bytes().to_vec();
    let mut at = 0;
    while at < out.len() {
        if out[at] == b'%' && at + 2 < out.len() {
            out[at + 1] = out[at + 1].to_ascii_lowercase();
            out[at + 2] = out[at + 2].to_ascii_lowercase();
            at += 3;
        } else {
            at += 1;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Bytes a body keeps back between frames: as the server sent them, with how many of the
/// first are the end of a value already found (masked when they go on).
#[derive(Debug, Default)]
struct Held {
    bytes: BytesMut,
    masked: usize,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The forms `value` can come back in, added to `forms`: as it is (a header gets the
/// placeholder in its place), and as the bridge itself encodes it (a header gets `*`s):
/// escaped in a URL, upper or lower case hex, and inside base64 (Basic credentials, which
/// the bridge builds, or a server's own echo) at each of the three alignments base64 has,
/// standard and URL-safe alphabets alike.
fn forms_of(
    value: &[u8],
    placeholder: &str,
    forms: &mut Vec<(zeroize::Zeroizing<Vec<u8>>, Bytes)>,
) {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let mut add = |form: Vec<u8>, replacement: Bytes| {
        if !form.is_empty() && !forms.iter().any(|(f, _)| **f == form) {
            forms.push((zeroize::Zeroizing::new(form), replacement));
        }
    };
    add(value.to_vec(), Bytes::from(placeholder.to_owned()));
    let stars = |n: usize| Bytes::from(vec![b'*'; n]);
    let escaped = zeroize::Zeroizing::new(url_escaped(value));
    add(escaped.as_bytes().to_vec(), stars(escaped.len()));
    let lower = zeroize::Zeroizing::new(lower_hex(&escaped));
    add(lower.as_bytes().to_vec(), stars(lower.len()));
    for engine in [STANDARD, URL_SAFE] {
        for shift in 0..3usize {
            // The value after `shift` bytes of anything: the characters that hold its bits
            // alone are the same whatever those bytes are, and whatever follows it.
            let mut shifted = zeroize::Zeroizing::new(vec![0u8; shift]);
            shifted.extend_from_slice(value);
            let text = zeroize::Zeroizing::new(engine.encode(&*shifted));
            let first = (8 * shift).div_ceil(6);
            let end = 8 * (shift + value.len()) / 6;
            if end >= first + MIN_BASE64_FORM {
                add(text.as_bytes()[first..end].to_vec(), stars(end - first));
            }
        }
    }
}

/// A response body with the values of `Redactions` masked, frame by frame.
pub(crate) struct RedactedBody<B> {
    inner: B,
    redactions: Redactions,
    held: Held,
    /// Trailers that came while bytes were held: they go after those bytes.
    trailers: Option<Frame<Bytes>>,
    done: bool,
}

impl<B> RedactedBody<B> {
    pub fn new(inner: B, redactions: Redactions) -> RedactedBody<B> {
        RedactedBody {
            inner,
            redactions,
            held: Held::default(),
            trailers: None,
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
            if let Some(trailers) = this.trailers.take() {
                this.done = true;
                return Poll::Ready(Some(Ok(trailers)));
            }
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
                        let mut held = std::mem::take(&mut this.held);
                        held.bytes.extend_from_slice(&data);
                        let (out, held) = this.redactions.mask(held, false);
                        this.held = held;
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(trailers) => {
                        let trailers = match trailers.into_trailers() {
                            Ok(mut trailers) => {
                                this.redactions.clean_headers(&mut trailers);
                                Frame::trailers(trailers)
                            }
                            Err(other) => other,
                        };
                        // What was held goes before the trailers, which end the body.
                        let rest = std::mem::take(&mut this.held);
                        if rest.is_empty() {
                            this.done = true;
                            return Poll::Ready(Some(Ok(trailers)));
                        }
                        this.trailers = Some(trailers);
                        let (out, _) = this.redactions.mask(rest, true);
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                },
                Poll::Ready(None) => this.done = true,
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // As the body it wraps says before the first poll (a 204's, a HEAD's): hyper reads
        // an empty body's length from this.
        self.held.is_empty() && self.trailers.is_none() && (self.done || self.inner.is_end_stream())
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
            text: "".into(),
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

    /// As a tunnel is inspected with no `tls_ports`: over verified TLS on 443, else plain.
    fn swap(
        secrets: &[Secret],
        target: &Target,
        headers: &mut HeaderMap,
        uri: &mut Uri,
    ) -> Result<Vec<String>, SwapRefusal> {
        let tls = target.port == 443;
        let leg = Leg {
            verified_tls: tls,
            tls_port: tls,
        };
        swap_on(secrets, target, leg, Method::GET, headers, uri)
    }

    fn swap_on(
        secrets: &[Secret],
        target: &Target,
        leg: Leg,
        method: Method,
        headers: &mut HeaderMap,
        uri: &mut Uri,
    ) -> Result<Vec<String>, SwapRefusal> {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.method = method;
        parts.headers = std::mem::take(headers);
        parts.uri = uri.clone();
        let swapped = swap_request(secrets, target, leg, &mut parts);
        *headers = parts.headers;
        *uri = parts.uri;
        swapped
    }

    #[test]
    fn a_bearer_header_is_swapped_for_its_host() {
        let s = secret("SWAP_T1", "real-token-1", &["git.test"]);
        let mut headers = HeaderMap::new();
        let bearer = format!("Bearer {}", s.placeholder);
        headers.insert(header::AUTHORIZATION, bearer.parse().unwrap());
        let mut uri: Uri = "/x".parse().unwrap();
        let used = swap(&[s], &target("git.test:443"), &mut headers, &mut uri).unwrap();
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
        swap(&[s], &target("git.test:443"), &mut headers, &mut uri).unwrap();
        let sent = headers[header::AUTHORIZATION].to_str().unwrap();
        let decoded = b64.decode(sent.strip_prefix("Basic ").unwrap()).unwrap();
        assert_eq!(decoded, "user:pa:ss/wörd".as_bytes());
    }

    #[test]
    fn a_query_gets_the_value_escaped() {
        let s = secret("SWAP_T3", "a&b=c d", &["api.test"]);
        let mut headers = HeaderMap::new();
        let mut uri: Uri = format!("/v1?token={}&x=1", s.placeholder).parse().unwrap();
        swap(&[s], &target("api.test:443"), &mut headers, &mut uri).unwrap();
        assert_eq!(uri.to_string(), "/v1?token=a%26b%3Dc%20d&x=1");
        // A value of dots is no segment of dots once swapped in.
        let s = secret("SWAP_T3B", "..", &["api.test"]);
        let mut uri: Uri = format!("/a/{}/admin", s.placeholder).parse().unwrap();
        swap(&[s], &target("api.test:443"), &mut headers, &mut uri).unwrap();
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
            let refused = swap(
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
            let refused = swap(
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
            assert!(swap(
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
        let used = swap(&[s], &target("other.test:443"), &mut headers, &mut uri).unwrap();
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
            let body = Frames::data([Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)]);
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

    #[test]
    fn a_value_never_goes_in_the_clear_unless_its_port_is_named() {
        let s = secret("SWAP_T8", "real-token-8", &["git.test", "plain.test:8080"]);
        let plain = |port| Leg {
            verified_tls: false,
            tls_port: port == 443,
        };
        for t in ["git.test:80", "git.test:443", "git.test:8080"] {
            let t = target(t);
            let mut headers = HeaderMap::new();
            headers.insert("x-token", s.placeholder.parse().unwrap());
            let mut uri: Uri = "/".parse().unwrap();
            let refused = swap_on(
                std::slice::from_ref(&s),
                &t,
                plain(t.port),
                Method::GET,
                &mut headers,
                &mut uri,
            )
            .unwrap_err();
            assert_eq!(refused.reason, Reason::SecretMisdirected, "{t}");
            assert!(
                refused.detail.contains("in the clear"),
                "{}",
                refused.detail
            );
        }
        // Named on purpose: in the clear there.
        let mut headers = HeaderMap::new();
        headers.insert("x-token", s.placeholder.parse().unwrap());
        let mut uri: Uri = "/".parse().unwrap();
        let t = target("plain.test:8080");
        swap_on(&[s], &t, plain(8080), Method::GET, &mut headers, &mut uri).unwrap();
        assert_eq!(headers["x-token"], "real-token-8");
    }

    #[test]
    fn trace_to_a_secret_host_is_refused() {
        let s = secret("SWAP_T9", "real-token-9", &["git.test"]);
        let t = target("git.test:443");
        let tls = Leg {
            verified_tls: true,
            tls_port: true,
        };
        let mut headers = HeaderMap::new();
        let mut uri: Uri = "/".parse().unwrap();
        let refused = swap_on(
            std::slice::from_ref(&s),
            &t,
            tls,
            Method::TRACE,
            &mut headers,
            &mut uri,
        )
        .unwrap_err();
        assert_eq!(refused.reason, Reason::MethodNotAllowed);
        // Elsewhere TRACE is the allowlist's business, and GET here passes.
        let other = target("other.test:443");
        swap_on(
            std::slice::from_ref(&s),
            &other,
            tls,
            Method::TRACE,
            &mut headers,
            &mut uri,
        )
        .unwrap();
        swap_on(&[s], &t, tls, Method::GET, &mut headers, &mut uri).unwrap();
    }

    #[test]
    fn basic_is_read_in_authorization_alone_and_repeated_headers_keep_their_order() {
        let s = secret("SWAP_T10", "real-token-10", &["git.test"]);
        let b64 = base64::engine::general_purpose::STANDARD;
        let encoded = format!("Basic {}", b64.encode(format!("u:{}", s.placeholder)));
        let mut headers = HeaderMap::new();
        headers.append("x-a", encoded.parse().unwrap());
        headers.append("x-a", "plain".parse().unwrap());
        headers.append("x-a", s.placeholder.parse().unwrap());
        let mut uri: Uri = "/".parse().unwrap();
        swap(&[s], &target("git.test:443"), &mut headers, &mut uri).unwrap();
        let values: Vec<_> = headers.get_all("x-a").iter().collect();
        assert_eq!(values, [encoded.as_str(), "plain", "real-token-10"]);
    }

    #[test]
    fn responses_lose_the_value_in_the_forms_the_bridge_makes() {
        let value = "Tok/EN+with=odd&bytes";
        assert_eq!(lower_hex("AB%2Fcd%3D"), "AB%2fcd%3d");
        let s = secret("SWAP_T11", value, &["git.test"]);
        let redactions = Redactions::for_target(std::slice::from_ref(&s), &target("git.test:443"));
        let b64 = base64::engine::general_purpose::STANDARD;
        let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let escaped = url_escaped(value.as_bytes());
        let echoes = [
            value.to_owned(),
            escaped.clone(),
            lower_hex(&escaped),
            b64.encode(format!("user:{value}")),
            b64.encode(format!("x{value}")),
            b64.encode(format!("xy{value}")),
            b64.encode(format!("{value}tail")),
            url_safe.encode(format!("a{value}")),
        ];
        for echo in echoes {
            let body = Frames::data([Bytes::from(format!("<{echo}>"))]);
            let out = block_on(RedactedBody::new(body, redactions.clone()).collect())
                .unwrap()
                .to_bytes();
            let out = String::from_utf8(out.to_vec()).unwrap();
            assert!(out.contains("****"), "{echo} came back as {out}");
            assert_eq!(out.len(), echo.len() + 2);
            // What is left decodes to nothing holding the value.
            for piece in out.split(['*', '<', '>']) {
                for decoded in [b64.decode(piece).ok(), url_safe.decode(piece).ok()] {
                    let decoded = decoded.unwrap_or_default();
                    assert!(memchr::memmem::find(&decoded, value.as_bytes()).is_none());
                }
            }
        }
        // A response's head: the reason phrase goes, a header gets the placeholder.
        let (mut head, ()) = http::Response::new(()).into_parts();
        head.extensions.insert(
            hyper::ext::ReasonPhrase::try_from(format!("bad {escaped}").into_bytes()).unwrap(),
        );
        head.headers
            .insert("location", format!("/x?t={escaped}").parse().unwrap());
        redactions.clean_head(&mut head);
        assert!(head.extensions.get::<hyper::ext::ReasonPhrase>().is_none());
        assert!(!head.headers["location"]
            .to_str()
            .unwrap()
            .contains(&escaped));
    }

    #[test]
    fn trailers_lose_the_value_and_come_after_held_bytes() {
        let s = secret("SWAP_T12", "0123456789abcdef", &["git.test"]);
        let redactions = Redactions::for_target(std::slice::from_ref(&s), &target("git.test:443"));
        let mut trailers = HeaderMap::new();
        trailers.insert("x-echo", "0123456789abcdef".parse().unwrap());
        let body = Frames(
            [
                Frame::data(Bytes::from_static(b"end 0123")),
                Frame::trailers(trailers),
            ]
            .into_iter()
            .collect(),
        );
        let collected = block_on(RedactedBody::new(body, redactions).collect()).unwrap();
        let trailers = collected.trailers().cloned().expect("the trailers");
        assert_eq!(trailers["x-echo"], s.placeholder.as_str());
        assert_eq!(&collected.to_bytes()[..], b"end 0123");
    }

    #[test]
    fn a_frame_keeps_back_as_much_whatever_its_bytes_are() {
        let s = secret("SWAP_T13", "0123456789abcdef", &["git.test"]);
        let r = Redactions::for_target(std::slice::from_ref(&s), &target("git.test:443"));
        // Whether a frame ends as the value begins or not, the same length waits: what
        // arrives says nothing of a guess at the value's start.
        let keep = r.longest() - 1;
        let padding = "-".repeat(keep);
        for end in ["0123456789a", "zzzzzzzzzzz"] {
            let frame = format!("data: {padding}{end}");
            let held = Held {
                bytes: BytesMut::from(frame.as_bytes()),
                masked: 0,
            };
            let (out, held) = r.mask(held, false);
            assert_eq!(out.len(), frame.len() - keep, "{frame}");
            assert_eq!(held.bytes.len(), keep);
        }
    }

    /// Streamed in frames cut anywhere, a body comes out as it does whole: values inside
    /// one another (one secret's value within another's, a value within its own escaped
    /// form), values holding `*`, a value cut by several frames.
    #[test]
    fn a_body_cut_anywhere_is_masked_as_it_is_whole() {
        let secrets = [
            secret("SWAP_T18", "25%", &["git.test"]),
            secret("SWAP_T19", "ab25%cd", &["git.test"]),
            secret("SWAP_T20", "*a*", &["git.test"]),
        ];
        let r = Redactions::for_target(&secrets, &target("git.test:443"));
        let text: &[u8] = b"x25%25y ab25%cd *a** ab25%2 *a*a* 25%";
        let whole = |frames: Vec<&[u8]>| {
            let body = Frames::data(frames.into_iter().map(Bytes::copy_from_slice));
            block_on(RedactedBody::new(body, r.clone()).collect())
                .unwrap()
                .to_bytes()
        };
        let expected = whole(vec![text]);
        for form in ["25%", "ab25%cd", "*a*", "25%25"] {
            assert!(
                memchr::memmem::find(&expected, form.as_bytes()).is_none() || form == "*a*",
                "{form} in {:?}",
                String::from_utf8_lossy(&expected)
            );
        }
        for a in 1..text.len() {
            for b in a..text.len() {
                let got = whole(vec![&text[..a], &text[a..b], &text[b..]]);
                assert_eq!(got, expected, "cut at {a} and {b}");
            }
        }
    }

    #[test]
    fn a_value_as_a_header_name_takes_the_header_with_it() {
        let s = secret("SWAP_T15", "MiXeDCaseToken0123", &["git.test"]);
        let r = Redactions::for_target(std::slice::from_ref(&s), &target("git.test:443"));
        let (mut head, ()) = http::Response::new(()).into_parts();
        head.headers
            .insert("x-mixedcasetoken0123-seen", "1".parse().unwrap());
        head.headers.insert("x-other", "2".parse().unwrap());
        r.clean_head(&mut head);
        assert!(head.headers.get("x-mixedcasetoken0123-seen").is_none());
        assert_eq!(head.headers["x-other"], "2");
    }

    #[test]
    fn parts_and_transfer_codings_are_not_passed_on() {
        let s = secret("SWAP_T16", "real-token-16", &["git.test"]);
        let t = target("git.test:443");
        let r = Redactions::for_target(std::slice::from_ref(&s), &t);
        let head = |status: u16, te: Option<&str>| {
            let (mut head, ()) = http::Response::new(()).into_parts();
            head.status = http::StatusCode::from_u16(status).unwrap();
            if let Some(te) = te {
                head.headers
                    .insert(header::TRANSFER_ENCODING, te.parse().unwrap());
            }
            head
        };
        assert!(r.unsearchable(false, &head(206, None), &t).is_some());
        assert!(r
            .unsearchable(false, &head(200, Some("gzip, chunked")), &t)
            .is_some());
        assert!(r
            .unsearchable(false, &head(200, Some("chunked")), &t)
            .is_none());
        assert!(r.unsearchable(false, &head(200, None), &t).is_none());
        // And requests to the host ask for no part.
        let mut headers = HeaderMap::new();
        headers.insert(header::RANGE, "bytes=0-9".parse().unwrap());
        headers.insert(header::IF_RANGE, "\"x\"".parse().unwrap());
        let mut uri: Uri = "/".parse().unwrap();
        swap(&[s], &t, &mut headers, &mut uri).unwrap();
        assert!(headers.get(header::RANGE).is_none() && headers.get(header::IF_RANGE).is_none());
    }

    #[test]
    fn an_empty_body_says_so_before_it_is_read() {
        let s = secret("SWAP_T17", "real-token-17", &["git.test"]);
        let r = Redactions::for_target(std::slice::from_ref(&s), &target("git.test:443"));
        let empty = RedactedBody::new(http_body_util::Empty::<Bytes>::new(), r.clone());
        assert!(empty.is_end_stream());
        let full = RedactedBody::new(Frames::data([Bytes::from_static(b"x")]), r);
        assert!(!full.is_end_stream());
    }

    /// A body of ready frames, data and trailers.
    struct Frames(std::collections::VecDeque<Frame<Bytes>>);

    impl Frames {
        /// A body of these data frames alone.
        fn data(data: impl IntoIterator<Item = Bytes>) -> Frames {
            Frames(data.into_iter().map(Frame::data).collect())
        }
    }

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
