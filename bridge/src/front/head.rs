//! A connection's first request head, read and checked before hyper sees it.
//!
//! hyper answers a head it cannot take (unparseable, too large, an HTTP/2 preface, a bad
//! Content-Length) on its own, with a bare status: no `Proxy-Status`, no `X-Netbox-Reason`.
//! So the front end reads the first head itself, with the parser hyper uses (httparse)
//! and the same limits, and refuses such a head as it refuses any request; a head that
//! passes is put back (`ClientIo::unread`) for hyper to read. Later heads on a kept-alive
//! connection are hyper's alone: a bad one there still gets hyper's bare 400 (logged).

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::client_io::ClientIo;
use crate::egress::Refusal;
use crate::policy::Reason;

/// What the first look at a connection found.
pub enum FirstHead {
    /// A whole head hyper will take: everything read so far, to be read again.
    Complete(Bytes),
    /// A head refused before hyper saw it.
    Refused(Refusal),
    /// The client closed (or the connection failed) before the head was complete.
    Closed { partial: bool },
    /// The head was not complete within the deadline.
    TimedOut,
}

/// Reads until the first head is complete, refused, or out of time.
pub async fn read_first(io: &mut ClientIo, timeout: Duration, max_bytes: usize) -> FirstHead {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = BytesMut::new();
    // Where the search for the head's end resumes: a head is parsed whole once its end
    // is in (and while it is short, so that garbage is refused at once), not again on
    // every read, which would cost time in the square of its size.
    let mut scanned: usize = 0;
    loop {
        let ended = find_head_end(&buf[scanned.saturating_sub(3)..]);
        scanned = buf.len();
        if !ended && buf.len() > EARLY_CHECK_BYTES && buf.len() <= max_bytes {
            if let Err(stop) = read_more(io, &mut buf, deadline).await {
                return stop;
            }
            continue;
        }
        match check(&buf) {
            Check::Complete(len) if len <= max_bytes => return FirstHead::Complete(buf.freeze()),
            Check::Refused(refusal) => return FirstHead::Refused(refusal),
            Check::Complete(_) => return too_large(max_bytes),
            Check::Partial if buf.len() > max_bytes => return too_large(max_bytes),
            Check::Partial => {}
        }
        if let Err(stop) = read_more(io, &mut buf, deadline).await {
            return stop;
        }
    }
}

/// Reads more into `buf`, growing it by half at least so that a large head takes a few
/// reads; the first look's end when the client closes, fails or runs out of time.
async fn read_more(
    io: &mut ClientIo,
    buf: &mut BytesMut,
    deadline: tokio::time::Instant,
) -> Result<(), FirstHead> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve((buf.len() / 2).max(8 * 1024));
    }
    match tokio::time::timeout_at(deadline, io.read_more(buf)).await {
        Err(_) => Err(FirstHead::TimedOut),
        Ok(Ok(0) | Err(_)) => Err(FirstHead::Closed {
            partial: !buf.is_empty(),
        }),
        Ok(Ok(_)) => Ok(()),
    }
}

/// A head shorter than this is parsed on every read, so that what is not HTTP at all is
/// refused at once; a longer one only once its end has arrived.
const EARLY_CHECK_BYTES: usize = 4096;

/// Whether `bytes` holds the blank line that ends a head (CRLF CRLF, or bare LFs, which
/// httparse takes too).
fn find_head_end(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, b"\n\r\n").is_some()
        || memchr::memmem::find(bytes, b"\n\n").is_some()
}

fn too_large(max_bytes: usize) -> FirstHead {
    FirstHead::Refused(Refusal::new(
        Reason::HeaderTooLarge,
        format!("request head larger than {max_bytes} bytes"),
    ))
}

/// Most header fields hyper takes in one head (its `max_headers`); more is 431.
pub const MAX_HEADERS: usize = 100;

pub(crate) enum Check {
    /// A whole head, this many bytes long.
    Complete(usize),
    Partial,
    Refused(Refusal),
}

/// What hyper would make of `buf` as a request head.
pub(crate) fn check(buf: &[u8]) -> Check {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Partial) => Check::Partial,
        Ok(httparse::Status::Complete(len)) => match refused_by_hyper(&request) {
            Some(detail) => Check::Refused(Refusal::new(Reason::BadRequest, detail)),
            None => Check::Complete(len),
        },
        Err(httparse::Error::TooManyHeaders) => Check::Refused(Refusal::new(
            Reason::HeaderTooLarge,
            format!("more than {MAX_HEADERS} header fields"),
        )),
        Err(httparse::Error::Version) => Check::Refused(Refusal::new(
            Reason::BadRequest,
            "not an HTTP/1.0 or HTTP/1.1 request (the proxy speaks HTTP/1.1; an HTTP/2 \
             client must use CONNECT first)",
        )),
        Err(e) => Check::Refused(Refusal::new(
            Reason::BadRequest,
            format!("unparseable request head: {e}"),
        )),
    }
}

/// The checks hyper makes of a head httparse took, which it would answer with a bare 400:
/// a target that is no URI, a Content-Length that is no single number, a
/// Transfer-Encoding in HTTP/1.0 or one that does not end in chunked.
fn refused_by_hyper(request: &httparse::Request) -> Option<String> {
    let target = request.path.unwrap_or_default();
    if http::Uri::try_from(target).is_err() {
        return Some("the request target is not a URI".into());
    }
    let named = |name: &'static str| {
        request
            .headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    // Every Content-Length is checked, with Transfer-Encoding or without (hyper checks
    // those it meets before one).
    let mut length = None;
    for value in named("content-length") {
        for part in value.split(|b| *b == b',') {
            let part = part.trim_ascii();
            let number = (!part.is_empty() && part.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(part).ok()?.parse::<u64>().ok())
                .flatten();
            match (number, length) {
                (None, _) => return Some("a Content-Length that is not a number".into()),
                (Some(n), Some(seen)) if n != seen => {
                    return Some("Content-Length values that disagree".into())
                }
                (Some(n), _) => length = Some(n),
            }
        }
    }
    let encodings: Vec<&[u8]> = named("transfer-encoding").collect();
    if let Some(last) = encodings.last() {
        if request.version == Some(0) {
            return Some("Transfer-Encoding in an HTTP/1.0 request".into());
        }
        // hyper reads the values as visible ASCII; anything else is not chunked to it.
        let visible = encodings
            .iter()
            .all(|v| v.iter().all(|b| *b == b'\t' || (b' '..=b'~').contains(b)));
        let last = last
            .rsplit(|b| *b == b',')
            .next()
            .map(|v| v.trim_ascii().to_ascii_lowercase());
        if !visible || last.as_deref() != Some(b"chunked".as_slice()) {
            return Some("Transfer-Encoding that does not end in chunked".into());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(head: &str) -> &'static str {
        match check(head.as_bytes()) {
            Check::Complete(_) => "complete",
            Check::Partial => "partial",
            Check::Refused(r) if r.reason == Reason::HeaderTooLarge => "431",
            Check::Refused(_) => "400",
        }
    }

    #[test]
    fn heads_hyper_would_refuse_are_refused_first() {
        for (head, want) in [
            ("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", "complete"),
            ("\r\nGET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", "complete"),
            ("CONNECT a.test:443 HTTP/1.1\r\nHost: a", "partial"),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "400"),
            ("CONNECT a.test:443 HTTP/9.9\r\n\r\n", "400"),
            ("\x16\x03\x01\x02\x00garbage\r\n\r\n", "400"),
            ("GET http://a.test/ HTTP/1.1\r\nContent-Length: x\r\n\r\n", "400"),
            ("GET http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "400"),
            ("GET http://a.test/ HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n", "complete"),
            ("POST http://a.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "400"),
            ("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", "400"),
            ("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n", "complete"),
            ("POST http://a.test/ HTTP/1.1\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n", "400"),
            ("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip\x7f, chunked\r\n\r\n", "400"),
        ] {
            assert_eq!(verdict(head), want, "{head:?}");
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(verdict(&format!("GET / HTTP/1.1\r\n{many}\r\n")), "431");
    }
}
