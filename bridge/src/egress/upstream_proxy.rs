//! Going out through another proxy: a company's (`netbox bridge --upstream-proxy`), or a
//! shared netbox bridge that judges for this one (`netbox --bridge URL -- CMD`).
//!
//! A tunnel is a `CONNECT host:port` to the upstream proxy, naming the host as the client
//! did (the upstream proxy resolves it: where the only way out is a proxy, this machine's
//! DNS may not see the outside at all); a forwarded request goes to it in absolute form.
//! Both carry the configured `Proxy-Authorization`, which is never sent anywhere else.
//!
//! A refusal that a netbox bridge sent says why in `X-Netbox-Reason`: it becomes the same
//! reason here, so the sandbox's client, the local log and the live probe see the remote
//! bridge's own answer. Anything else the upstream proxy says (a 407, a 403 of its own, no
//! answer) is [`Reason::UpstreamProxy`], never a policy refusal: the probe's canary proves
//! a refusal only when the judging bridge said it was one.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use ipnet::IpNet;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::egress::resolver::Resolver;
use crate::egress::Refusal;
use crate::outbound::Outbound;
use crate::policy::Reason;
use crate::target::{Host, Target};

/// A CONNECT answer's head, at most: a proxy's refusal page is not read past this.
const MAX_ANSWER_HEAD: usize = 16 * 1024;
/// Header lines read from that answer, at most.
const MAX_ANSWER_HEADERS: usize = 64;

/// The proxy this bridge's connections go out through.
#[derive(Debug)]
pub struct UpstreamProxy {
    /// As the user gave it, without credentials: `http://corp-proxy.test:3128`.
    pub name: String,
    /// Its host, looked up (by the bridge's own resolver, `--dns`) at each dial, so a
    /// service whose address moves is followed.
    pub host: Host,
    pub port: u16,
    /// `Proxy-Authorization` for every request to it.
    pub authorization: Option<HeaderValue>,
    /// Targets dialled directly, not through it (`--no-proxy`).
    pub except: NoProxy,
    /// `https://`: TLS to the proxy, verified against these roots, with a client
    /// certificate if one was given.
    pub tls: Option<ProxyTls>,
    /// A netbox bridge that judges for this one (`netbox --bridge`): its answers to
    /// forwarded requests are its own only when they say so (`X-Netbox-Reason`, which it
    /// strips from what servers send). A company proxy's are not told from its servers'.
    pub judges: bool,
}

impl UpstreamProxy {
    /// Whether `target` goes through this proxy.
    pub fn carries(&self, target: &Target) -> bool {
        !self.except.matches(&target.host)
    }

    /// Opens a tunnel to `target` through the proxy: dials it, sends CONNECT, and returns
    /// the stream once it answered 2xx. Nothing the far end sent after the answer's head
    /// is read (a server that speaks first keeps its greeting).
    pub async fn connect(
        &self,
        resolver: &Resolver,
        target: &Target,
        timeout: Duration,
    ) -> Result<Outbound, Refusal> {
        let mut stream = self.dial(resolver, timeout).await?;
        let authority = target.to_string();
        let head = self.head(&format!(
            "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
        ));
        let answered = tokio::time::timeout(timeout, async {
            stream.write_all(head.as_bytes()).await?;
            read_answer_head(&mut stream).await
        })
        .await;
        let answer = match answered {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(self.failed(format!("its answer to CONNECT: {e}"))),
            Err(_) => return Err(self.failed(format!("no answer to CONNECT within {timeout:?}"))),
        };
        match parse_answer(&answer) {
            Ok(answer) if (200..300).contains(&answer.status) => Ok(stream),
            Ok(answer) => Err(self.refused(&answer)),
            Err(e) => Err(self.failed(format!("its answer to CONNECT: {e}"))),
        }
    }

    /// Asks a judging bridge what it holds for this client (offer.rs): the placeholders
    /// of its tenant's secrets and the CA of the tunnels it inspects. A bridge that
    /// answers otherwise (an older one, or not a netbox bridge) is said to, with its
    /// answer's status and reason.
    pub async fn ask_offer(
        &self,
        resolver: &Resolver,
        timeout: Duration,
    ) -> Result<crate::offer::Offer, Refusal> {
        use crate::offer::{MAX_OFFER_BYTES, OFFER_HOST};
        use tokio::io::AsyncReadExt;
        let mut stream = self.dial(resolver, timeout).await?;
        let head = self.head(&format!(
            "GET http://{OFFER_HOST}/ HTTP/1.1\r\nHost: {OFFER_HOST}\r\nConnection: close\r\n"
        ));
        let limit = (MAX_ANSWER_HEAD + MAX_OFFER_BYTES) as u64;
        let mut answer = Vec::new();
        let answered = tokio::time::timeout(timeout, async {
            stream.write_all(head.as_bytes()).await?;
            (&mut stream).take(limit + 1).read_to_end(&mut answer).await
        })
        .await;
        match answered {
            Ok(Ok(_)) => {}
            // A refusal ends in a reset, which may come before the end was read: what
            // was read is the answer if its head is whole.
            Ok(Err(_)) if find_head_end(&answer).is_some() => {}
            Ok(Err(e)) => return Err(self.failed(format!("its answer for {OFFER_HOST}: {e}"))),
            Err(_) => {
                return Err(self.failed(format!("no answer for {OFFER_HOST} within {timeout:?}")))
            }
        }
        if answer.len() as u64 > limit {
            return Err(self.failed(format!("an answer for {OFFER_HOST} over {limit} bytes")));
        }
        let Some(end) = find_head_end(&answer) else {
            return Err(self.failed(format!("its answer for {OFFER_HOST}: a head cut short")));
        };
        let parsed = parse_answer(&answer[..end])
            .map_err(|e| self.failed(format!("its answer for {OFFER_HOST}: {e}")))?;
        if parsed.status != 200 {
            return Err(self.refused(&parsed));
        }
        serde_json::from_slice(&answer[end..]).map_err(|e| {
            self.failed(format!(
                "its answer for {OFFER_HOST} is not a netbox bridge's ({e})"
            ))
        })
    }

    /// A request head to the proxy: `lines` (the request line and headers, each ending in
    /// CRLF), then this bridge's credentials, then the blank line.
    fn head(&self, lines: &str) -> String {
        let mut head = lines.to_owned();
        if let Some(value) = self.authorization.as_ref().and_then(|v| v.to_str().ok()) {
            head.push_str(&format!("Proxy-Authorization: {value}\r\n"));
        }
        head.push_str("\r\n");
        head
    }

    /// Dials the proxy itself (the forward path sends its requests on this).
    pub async fn dial(&self, resolver: &Resolver, timeout: Duration) -> Result<Outbound, Refusal> {
        // No pins: the proxy's name is this bridge's own, not one a policy maps. Nor an
        // address check: the proxy is the one the user named on the command line (often on
        // loopback), never a destination a client or a workspace file chose.
        let addrs: Vec<SocketAddr> = resolver
            .resolve(&self.host, &crate::policy::Policy::deny_all())
            .await
            .map_err(|e| self.failed(format!("cannot resolve {}: {e}", self.host)))?
            .into_iter()
            .map(|ip| SocketAddr::new(ip, self.port))
            .collect();
        let tcp = crate::egress::dialer::dial(&addrs, timeout)
            .await
            .map_err(|e| {
                let mut refusal = self.failed(e.to_string());
                refusal.io_kind = Some(e.source.kind());
                refusal
            })?;
        let Some(tls) = &self.tls else {
            return Ok(Outbound::Tcp(tcp));
        };
        match tokio::time::timeout(timeout, tls.handshake(tcp)).await {
            Ok(Ok(stream)) => Ok(Outbound::Tls(Box::new(stream))),
            Ok(Err(e)) => Err(self.failed(format!("TLS: {e}"))),
            Err(_) => Err(self.failed(format!("no TLS handshake within {timeout:?}"))),
        }
    }

    /// What a response to a forwarded request means: the judging bridge's own refusal,
    /// or (`None`) the server's answer, to pass on as it is.
    pub fn refusal_in(&self, status: u16, headers: &http::HeaderMap) -> Option<Refusal> {
        if !self.judges {
            return None;
        }
        let answer = Answer::from_headers(status, headers);
        let reason = answer.netbox_reason.as_deref()?;
        if status < 400 || reason == "allowed" {
            return None;
        }
        Some(self.refused(&answer))
    }

    /// The proxy's own 407 to a forwarded request: this bridge's credentials were
    /// refused, which is its failure, not something its client could answer. A judging
    /// bridge's says so; a company proxy's cannot be told from a server's, and a server
    /// has no business asking for proxy credentials.
    pub fn credentials_refused(
        &self,
        status: http::StatusCode,
        headers: &http::HeaderMap,
    ) -> Option<Refusal> {
        if status != http::StatusCode::PROXY_AUTHENTICATION_REQUIRED
            || (self.judges && !headers.contains_key("x-netbox-reason"))
        {
            return None;
        }
        Some(self.refused(&Answer::from_headers(407, headers)))
    }

    fn refused(&self, answer: &Answer) -> Refusal {
        let said = if answer.details.is_empty() {
            String::new()
        } else {
            format!(": {}", answer.details)
        };
        let reason = answer
            .netbox_reason
            .as_deref()
            .and_then(judged_reason)
            .unwrap_or(Reason::UpstreamProxy);
        let detail = match (reason, answer.status) {
            (Reason::UpstreamProxy, 407) => format!(
                "the upstream proxy {} wants credentials (407){said}; check the token it was \
                 given",
                self.name
            ),
            (Reason::UpstreamProxy, status) => {
                format!("the upstream proxy {} answered {status}{said}", self.name)
            }
            (_, status) => format!("refused by the bridge at {} ({status}){said}", self.name),
        };
        Refusal::new(reason, detail)
    }

    fn failed(&self, what: String) -> Refusal {
        Refusal::new(
            Reason::UpstreamProxy,
            format!("the upstream proxy {}: {what}", self.name),
        )
    }
}

/// TLS to an upstream proxy.
#[derive(Clone)]
pub struct ProxyTls {
    config: Arc<rustls::ClientConfig>,
    server_name: rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for ProxyTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProxyTls({:?})", self.server_name)
    }
}

impl ProxyTls {
    /// TLS to `host`, whose certificate must be valid for it: issued by one of `ca_pem`'s
    /// certificates, or without one by a CA this system trusts. `client`: a certificate
    /// chain and key (PEM) to present, for a bridge that names tenants by them.
    pub fn new(
        host: &Host,
        ca_pem: Option<&[u8]>,
        client: Option<(&[u8], &[u8])>,
    ) -> Result<ProxyTls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        match ca_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("the CA file is not PEM: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("the CA file: not a CA certificate: {e}"))?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        if roots.is_empty() {
            return Err("no CA to verify the proxy's certificate against".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let config = match client {
            Some((chain_pem, key_pem)) => {
                let chain = CertificateDer::pem_slice_iter(chain_pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("the client certificate is not PEM: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key_pem)
                    .map_err(|e| format!("no PEM private key for the client certificate: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the client certificate and key: {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        let server_name = match host {
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
            Host::Name(name) => ServerName::try_from(name.clone())
                .map_err(|e| format!("{name} is no name to verify a certificate for: {e}"))?,
        };
        Ok(ProxyTls {
            config: Arc::new(config),
            server_name,
        })
    }

    /// TLS over `tcp`, the peer's certificate verified as [`ProxyTls::new`] was told.
    pub(crate) async fn handshake(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
            .connect(self.server_name.clone(), tcp)
            .await
    }
}

/// A netbox bridge's `X-Netbox-Reason` for a refusal, as this bridge's reason. Its
/// `proxy-auth` is this bridge's credentials, not the client's: not passed on as such.
fn judged_reason(value: &str) -> Option<Reason> {
    Some(match value {
        "policy" => Reason::NotAllowed,
        "private-address" => Reason::NonPublicAddress,
        "resolve-failed" => Reason::ResolveFailed,
        "upstream-unreachable" => Reason::UpstreamUnreachable,
        "upstream-timeout" => Reason::UpstreamTimeout,
        "connection-limit" => Reason::ConnectionLimit,
        "http-rule" => Reason::PathNotAllowed,
        "bad-request" => Reason::BadRequest,
        "secret-misdirected" => Reason::SecretMisdirected,
        _ => return None,
    })
}

/// Characters of a proxy's `details` kept, at most.
const MAX_DETAILS_CHARS: usize = 200;

/// `details="..."` of a `Proxy-Status` header (RFC 9209), as a netbox bridge writes it:
/// printable ASCII only, bounded (it reaches the log and the terminal).
fn proxy_status_details(value: &str) -> Option<String> {
    let start = value.find("details=\"")? + "details=\"".len();
    let rest = &value[start..];
    let end = rest.find('"')?;
    Some(
        rest[..end]
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { ' ' })
            .take(MAX_DETAILS_CHARS)
            .collect(),
    )
}

/// The parts of an answer to CONNECT that matter here.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    netbox_reason: Option<String>,
    details: String,
}

impl Answer {
    /// An answer of `status` whose headers `header` looks up by name.
    fn of(status: u16, header: impl Fn(&str) -> Option<String>) -> Answer {
        Answer {
            status,
            netbox_reason: header("x-netbox-reason"),
            details: header("proxy-status")
                .as_deref()
                .and_then(proxy_status_details)
                .unwrap_or_default(),
        }
    }

    fn from_headers(status: u16, headers: &http::HeaderMap) -> Answer {
        Answer::of(status, |name| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
    }
}

fn parse_answer(head: &[u8]) -> Result<Answer, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_ANSWER_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("a head cut short".into()),
        Err(e) => return Err(format!("not HTTP ({e})")),
    }
    Ok(Answer::of(response.code.unwrap_or(0), |name| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::to_owned)
    }))
}

/// Reads an answer's head and not one byte past it (a server that speaks first keeps its
/// greeting): over TLS a byte at a time from what the library has decrypted, else from
/// the socket itself.
async fn read_answer_head(stream: &mut Outbound) -> io::Result<Vec<u8>> {
    let Outbound::Tcp(tcp) = stream else {
        use tokio::io::AsyncReadExt;
        let mut head = Vec::new();
        while find_head_end(&head[head.len().saturating_sub(4)..]).is_none() {
            if head.len() >= MAX_ANSWER_HEAD {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("an answer head over {MAX_ANSWER_HEAD} bytes"),
                ));
            }
            let mut byte = [0u8; 1];
            if stream.read(&mut byte).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before answering",
                ));
            }
            head.push(byte[0]);
        }
        return Ok(head);
    };
    read_plain_answer_head(tcp).await
}

/// [`read_answer_head`] on a socket: bytes are peeked, and only the head's own are taken
/// off it.
async fn read_plain_answer_head(stream: &TcpStream) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let peeked = stream.peek(&mut buf).await?;
        if peeked == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before answering",
            ));
        }
        // The end of the head may straddle what was taken before and what is peeked now.
        let seen = head.len().saturating_sub(3);
        let mut joined = head[seen..].to_vec();
        joined.extend_from_slice(&buf[..peeked]);
        let take = match find_head_end(&joined) {
            Some(end) => end - (head.len() - seen),
            None => peeked,
        };
        if head.len() + take > MAX_ANSWER_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("an answer head over {MAX_ANSWER_HEAD} bytes"),
            ));
        }
        let mut taken = vec![0u8; take];
        read_exact_now(stream, &mut taken).await?;
        head.extend_from_slice(&taken);
        if find_head_end(&head[seen..]).is_some() {
            return Ok(head);
        }
    }
}

/// Takes bytes a peek has just shown are there.
async fn read_exact_now(stream: &TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        stream.readable().await?;
        match stream.try_read(&mut buf[filled..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Where a head ends: just past its blank line.
fn find_head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
}

/// `--no-proxy`: targets that are dialled directly. Each entry is a name (that name and
/// every name under it, as `NO_PROXY` is read by curl; a leading dot or `*.` changes
/// nothing), an IP address, or a CIDR block (matching IP targets).
#[derive(Debug, Default, Clone)]
pub struct NoProxy {
    names: Vec<String>,
    nets: Vec<IpNet>,
}

impl NoProxy {
    /// Parses a comma- or space-separated list; an entry that is none of the above is an
    /// error naming it.
    pub fn parse(list: &str) -> Result<NoProxy, String> {
        let mut except = NoProxy::default();
        for entry in list
            .split([',', ' '])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            if let Ok(net) = entry.parse::<IpNet>() {
                except.nets.push(net);
            } else if let Ok(ip) = entry.parse::<std::net::IpAddr>() {
                except.nets.push(IpNet::from(ip));
            } else {
                let name = entry.trim_start_matches("*.").trim_start_matches('.');
                let target = Target::parse_authority(&format!("{name}:1"))
                    .map_err(|e| format!("--no-proxy entry {entry:?}: {e}"))?;
                match target.host {
                    Host::Name(name) => except.names.push(name),
                    Host::Ip(_) => {
                        return Err(format!("--no-proxy entry {entry:?}: not a name or a CIDR"))
                    }
                }
            }
        }
        Ok(except)
    }

    pub fn matches(&self, host: &Host) -> bool {
        match host {
            Host::Ip(ip) => self.nets.iter().any(|net| net.contains(ip)),
            Host::Name(name) => self.names.iter().any(|entry| {
                name == entry
                    || name
                        .strip_suffix(entry.as_str())
                        .is_some_and(|rest| rest.ends_with('.'))
            }),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.nets.is_empty()
    }
}

#[cfg(test)]
// Test code: its sockets are at loopback literals (clippy.toml).
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_matches_names_below_and_addresses_within() {
        let except = NoProxy::parse("corp.test, .mirror.test,*.cache.test 10.0.0.0/8,::1").unwrap();
        let host = |s: &str| Target::parse_authority(&format!("{s}:1")).unwrap().host;
        for yes in [
            "corp.test",
            "a.corp.test",
            "mirror.test",
            "x.cache.test",
            "10.1.2.3",
            "[::1]",
        ] {
            assert!(except.matches(&host(yes)), "{yes}");
        }
        for no in [
            "evilcorp.test",
            "corp.test.evil.test",
            "11.0.0.1",
            "[::2]",
            "cache.test.x",
        ] {
            assert!(!except.matches(&host(no)), "{no}");
        }
        assert!(NoProxy::parse("bad name!").is_err());
    }

    #[test]
    fn a_netbox_refusal_keeps_its_reason_and_others_do_not_pass_for_policy() {
        let proxy = UpstreamProxy {
            name: "http://egress.test:3129".into(),
            host: Host::Name("egress.test".into()),
            port: 3129,
            authorization: None,
            except: NoProxy::default(),
            tls: None,
            judges: true,
        };
        let head = b"HTTP/1.1 502 Bad Gateway\r\nX-Netbox-Reason: policy\r\n\
            Proxy-Status: netbox; error=http_request_denied; details=\"not on allowlist\"\r\n\r\n";
        let refusal = proxy.refused(&parse_answer(head).unwrap());
        assert_eq!(refusal.reason, Reason::NotAllowed);
        assert!(
            refusal.detail.contains("not on allowlist"),
            "{}",
            refusal.detail
        );
        for head in [
            &b"HTTP/1.1 502 Bad Gateway\r\n\r\n"[..],
            b"HTTP/1.1 403 Forbidden\r\nX-Netbox-Reason: something-new\r\n\r\n",
            b"HTTP/1.1 407 Proxy Authentication Required\r\nX-Netbox-Reason: proxy-auth\r\n\r\n",
        ] {
            let refusal = proxy.refused(&parse_answer(head).unwrap());
            assert_eq!(refusal.reason, Reason::UpstreamProxy, "{head:?}");
        }
    }

    #[tokio::test]
    async fn the_answer_head_is_read_and_the_greeting_after_it_is_left() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            // The head in pieces, its blank line split between two writes.
            for piece in [
                &b"HTTP/1.1 200 OK\r\nVia: x\r\n\r"[..],
                b"\nSSH-2.0-greeting\r\n",
            ] {
                sock.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            sock
        });
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut stream = Outbound::Tcp(stream);
        let head = read_answer_head(&mut stream).await.unwrap();
        assert_eq!(head, b"HTTP/1.1 200 OK\r\nVia: x\r\n\r\n");
        let _sock = server.await.unwrap();
        let mut rest = [0u8; 64];
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut rest)
            .await
            .unwrap();
        assert_eq!(&rest[..n], b"SSH-2.0-greeting\r\n");
    }
}
