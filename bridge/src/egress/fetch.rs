//! A document netbox reads over HTTPS itself, before any sandbox exists: a sparse index's
//! `config.json` or a simple index's page, for `--allow-tool` (where a registry serves its
//! files from). The URL may come from a file an earlier sandboxed command wrote, so the
//! request goes out as a sandboxed client's would through the bridge: the policy's
//! decision on the target, the bridge's resolver (pins, then DNS as the bridge is told),
//! each address classified by the routing table and admitted by the policy's address rules
//! (`egress::admit`, which never admits one of the bridge's own listeners), and the
//! bridge's dialer; for a URL a workspace file chose, a public address only, whatever the
//! policy opens. Then TLS, verified for the name against the CA given or else the system's,
//! and one GET: HTTPS only, no redirect followed, no proxy, at most [`MAX_DOCUMENT_BYTES`],
//! all within the time given (at most [`DEADLINE`]). Each fetch gives back its record, as
//! the bridge records a client's request ([`Proto::Fetch`]), for the caller to log.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;

use crate::egress::resolver::{DnsConfig, Resolver};
use crate::log::{Attempt, End, Event, Proto};
use crate::policy::{Policy, Reason, Verdict};
use crate::target::{Host, Target};

/// How long one fetch may take at most, lookup to last byte.
pub const DEADLINE: Duration = Duration::from_secs(3);
/// A lookup's own deadline, within [`DEADLINE`].
const DNS_TIMEOUT: Duration = Duration::from_secs(2);
/// Each address's connect deadline, within [`DEADLINE`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest document read, in bytes (a registry's page lists its files: a big project's
/// is a few hundred KiB).
pub const MAX_DOCUMENT_BYTES: usize = 4 << 20;

/// Why a document was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Not a URL netbox reads: not `https://`, or naming an address rather than a host.
    #[error("{0}")]
    Url(String),
    /// What the bridge would refuse a sandboxed client, for the same reason.
    #[error("refused as the bridge would refuse it: {detail}")]
    Refused { reason: Reason, detail: String },
    /// Only a public address may be read (a URL a workspace file chose), and the name has
    /// none.
    #[error("{0}")]
    NotPublic(String),
    /// It was allowed, and failed (no connection, TLS, an answer other than 2xx).
    #[error("{0}")]
    Failed(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// How a fetch goes out, beside the policy it is judged by.
#[derive(Debug, Clone, Copy)]
pub struct Dial<'a> {
    /// How names are looked up: the bridge's own setting.
    pub dns: &'a DnsConfig,
    /// The bridge's own listeners (none before it listens): never dialed, as a client's
    /// CONNECT never reaches one.
    pub own_listeners: &'a [SocketAddr],
    /// The only CA trusted, if given; else the system's.
    pub ca_pem: Option<&'a [u8]>,
    /// Only a public address is dialed, whatever the policy opens (an `allow_private` or
    /// IP rule of the user's): for a URL a workspace file chose.
    pub public_only: bool,
    /// How long the fetch may take, lookup to last byte; at most [`DEADLINE`] is taken.
    pub within: Duration,
}

/// What one fetch did.
#[derive(Debug)]
pub struct Fetched {
    /// The body, as UTF-8 (anything else replaced), or why not.
    pub document: Result<String, FetchError>,
    /// Its record, as the bridge records a client's request (`proto` `fetch`, `method`
    /// `GET`, no `path`: an index URL's path may hold a token). Its `session` is empty:
    /// the caller that logs it names its own. `None` for a URL not read at all.
    pub event: Option<Event>,
}

/// Reads `url` (HTTPS, its host a name) as `policy` lets a sandboxed client reach it,
/// going out as `dial` says: `policy` is the caller's, holding the rule that would let
/// the tool reach the host.
pub async fn https_document(url: &str, policy: &Policy, dial: &Dial<'_>) -> Fetched {
    let request = match DocumentUrl::parse(url) {
        Ok(request) => request,
        Err(e) => {
            return Fetched {
                document: Err(e),
                event: None,
            }
        }
    };
    let mut attempt = Attempt::begin("".into(), Proto::Fetch);
    attempt.method = Some("GET".to_owned());
    attempt.target = Some(request.target.clone());
    let within = dial.within.min(DEADLINE);
    let mut read_bytes = 0;
    let fetching = fetch(&request, policy, dial, &mut attempt, &mut read_bytes);
    let document = match tokio::time::timeout(within, fetching).await {
        Ok(result) => result,
        Err(_) => {
            attempt.reason = Reason::UpstreamTimeout;
            attempt.detail = Some(format!("no answer within {within:?}"));
            Err(FetchError::Timeout(within))
        }
    };
    let end = match (&document, attempt.dialed) {
        (Ok(_), _) => End::Closed,
        (Err(_), None) => End::Refused,
        (Err(_), Some(_)) => End::UpstreamError,
    };
    Fetched {
        document,
        event: Some(attempt.finish(end, 0, read_bytes)),
    }
}

/// The steps of a fetch, each recorded in `attempt` as the bridge records a client's.
async fn fetch(
    url: &DocumentUrl,
    policy: &Policy,
    dial: &Dial<'_>,
    attempt: &mut Attempt,
    read_bytes: &mut u64,
) -> Result<String, FetchError> {
    let refused = |refusal: crate::egress::Refusal| FetchError::Refused {
        reason: refusal.reason,
        // The first clause: what follows is how to open it for CMD, which is said where
        // the connection is refused.
        detail: match refusal.detail.split_once("; ") {
            Some((what, _)) => what.to_owned(),
            None => refusal.detail,
        },
    };
    let decision = crate::egress::decide(policy, &url.target, attempt).map_err(refused)?;
    let resolver = Resolver::new(dial.dns, DNS_TIMEOUT, None);
    let mut admitted = crate::egress::admit(
        &resolver,
        policy,
        &decision,
        &url.target,
        dial.own_listeners,
        attempt,
    )
    .await
    .map_err(refused)?;
    if dial.public_only {
        let first_other = admitted
            .iter()
            .map(|(addr, _)| (*addr, crate::local_routes::classify_here(addr.ip())))
            .find(|(_, class)| !class.is_public());
        admitted.retain(|(addr, _)| crate::local_routes::classify_here(addr.ip()).is_public());
        if let (true, Some((addr, class))) = (admitted.is_empty(), first_other) {
            let detail = format!(
                "{} resolves to {}, a {} address, and a registry a workspace file names is \
                 read only at a public address",
                url.target.host,
                addr.ip(),
                class.describe()
            );
            attempt.reason = Reason::NonPublicAddress;
            attempt.refused_class = Some(class);
            attempt.detail = Some(detail.clone());
            return Err(FetchError::NotPublic(detail));
        }
    }
    admitted.truncate(crate::egress::MAX_DIAL_ADDRESSES);
    let candidates: Vec<_> = admitted.iter().map(|(addr, _)| *addr).collect();
    let tcp = match crate::egress::dialer::dial(&candidates, CONNECT_TIMEOUT).await {
        Ok(tcp) => tcp,
        Err(e) => {
            attempt.reason = Reason::UpstreamUnreachable;
            attempt.detail = Some(e.to_string());
            attempt.dialed = Some(e.addr);
            return Err(FetchError::Failed(e.to_string()));
        }
    };
    attempt.dialed = tcp.peer_addr().ok();
    attempt.opened_by = admitted
        .iter()
        .find(|(addr, _)| Some(*addr) == attempt.dialed)
        .and_then(|(_, rule)| rule.clone());
    attempt.decision = Verdict::Allow;
    let result = read(url, dial, tcp, attempt, read_bytes).await;
    if let Err(e) = &result {
        attempt.detail = Some(e.to_string());
    }
    result
}

/// TLS on `tcp`, then the GET.
async fn read(
    url: &DocumentUrl,
    dial: &Dial<'_>,
    tcp: tokio::net::TcpStream,
    attempt: &mut Attempt,
    read_bytes: &mut u64,
) -> Result<String, FetchError> {
    let tls = crate::egress::upstream_proxy::ProxyTls::new(&url.target.host, dial.ca_pem, None)
        .map_err(|e| FetchError::Failed(format!("TLS to {}: {e}", url.target.host)))?;
    let stream = tls
        .handshake(tcp)
        .await
        .map_err(|e| FetchError::Failed(format!("TLS to {}: {e}", url.target.host)))?;
    get(url, stream, attempt, read_bytes).await
}

/// One GET on `stream`, its body if the answer is 2xx.
async fn get(
    url: &DocumentUrl,
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    attempt: &mut Attempt,
    read_bytes: &mut u64,
) -> Result<String, FetchError> {
    let failed = |what: &str, e: &dyn std::fmt::Display| FetchError::Failed(format!("{what}: {e}"));
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| failed("HTTP", &e))?;
    // Driven beside the request; it ends with the runtime's tasks, at the deadline at most.
    tokio::spawn(connection);
    let mut request = http::Request::get(url.path.as_str())
        .header(http::header::HOST, url.host_header())
        .header(http::header::USER_AGENT, "netbox")
        .header(http::header::ACCEPT, "*/*")
        .header(http::header::CONNECTION, "close");
    if let Some(credentials) = &url.basic {
        request = request.header(http::header::AUTHORIZATION, credentials.as_str());
    }
    let request = request
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| failed("the request", &e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| failed("HTTP", &e))?;
    let status = response.status();
    attempt.status = Some(status.as_u16());
    if status.is_redirection() {
        return Err(FetchError::Failed(format!(
            "answered {status}, a redirect, which netbox does not follow"
        )));
    }
    if !status.is_success() {
        return Err(FetchError::Failed(format!("answered {status}")));
    }
    let body = http_body_util::Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                FetchError::Failed(format!("larger than {MAX_DOCUMENT_BYTES} bytes"))
            } else {
                failed("reading the answer", &e)
            }
        })?
        .to_bytes();
    *read_bytes = u64::try_from(body.len()).unwrap_or(u64::MAX);
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// A URL netbox reads: `https://[USER[:PASSWORD]@]NAME[:PORT][/PATH][?QUERY][#…]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DocumentUrl {
    target: Target,
    /// The path and query, `/` at least (a fragment is the client's own, never sent).
    path: String,
    /// `Basic …` for credentials in the URL, sent as a client of the URL would.
    basic: Option<String>,
}

impl DocumentUrl {
    fn parse(url: &str) -> Result<DocumentUrl, FetchError> {
        let bad = |why: &str| FetchError::Url(format!("{why}: not a URL netbox reads"));
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| bad("not https://"))?;
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        let target = Target::parse_with_default_port(host_port, 443)
            .map_err(|e| FetchError::Url(format!("{e}: not a URL netbox reads")))?;
        if !matches!(target.host, Host::Name(_)) {
            return Err(bad("an address, not a name"));
        }
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        // What a request line may hold: no space, no control character.
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad("a path with spaces or control characters"));
        }
        let basic = userinfo.map(|userinfo| {
            use base64::Engine;
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let pair = [
                percent_decoded(user),
                b":".to_vec(),
                percent_decoded(password),
            ]
            .concat();
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        Ok(DocumentUrl {
            target,
            path,
            basic,
        })
    }

    /// The `Host` header: the name, and the port unless it is 443.
    fn host_header(&self) -> String {
        match self.target.port {
            443 => self.target.host.to_string(),
            port => format!("{}:{port}", self.target.host),
        }
    }
}

/// `%XX` sequences as the bytes they stand for (RFC 3986 §2.1); anything else as it is.
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
// Test code: its servers are at loopback literals (clippy.toml).
#[allow(clippy::disallowed_methods)]
mod tests;
