//! TLS on a shared bridge's listeners (`--tls-cert`, `--tls-key`): clients speak TLS to
//! the bridge (an HTTPS proxy, as curl's `--proxy https://…` and pip's do), so that their
//! credentials and request heads do not cross the network in the clear. With
//! `--client-ca`, a client may present a certificate that CA issued: its names (the
//! subject alternative names, DNS and URI, as a SPIFFE ID is one) identify its tenant
//! (identity.rs). A client without one still names its tenant by Proxy-Authorization.
//!
//! The ClientHello is read with nothing held; the work it asks of the bridge (a key
//! exchange and a signature, ~0.6 ms of a core with an RSA-2048 key, which a client that
//! replays one canned ClientHello asks for at no cost of its own) takes a turn (turns.rs),
//! source by source, a few at once.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;

use crate::serve::turns::Turns;
use crate::session::lobby::Source;

/// What the bridge needs to serve TLS on a listener.
#[derive(Clone)]
pub struct ListenerTls {
    config: Arc<rustls::ServerConfig>,
    /// The handshakes' turns, shared by every clone, made on the first handshake (sized
    /// to the runtime that serves them).
    turns: Arc<OnceLock<Arc<Turns>>>,
}

/// Handshakes that do their ClientHello's work at once: half the runtime's worker threads
/// (one at least), so that however many handshakes a flood asks for, the other half serve
/// the clients already in.
fn turns_for(workers: usize) -> usize {
    (workers / 2).max(1)
}

/// Why a TLS handshake did not end in a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HandshakeFailed {
    /// Not within the deadline (a wait for its turn included).
    TimedOut(Duration),
    /// The client's bytes, or what it offered, would not do.
    Failed(String),
}

impl std::fmt::Display for HandshakeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeFailed::TimedOut(deadline) => {
                write!(f, "no TLS handshake within {deadline:?}")
            }
            HandshakeFailed::Failed(why) => write!(f, "TLS handshake failed: {why}"),
        }
    }
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListenerTls")
    }
}

/// A client certificate's name kept at most, with its type: no tenant's is longer (the
/// certificate itself is bounded by the handshake's size limits).
const MAX_CLIENT_NAME_BYTES: usize = 4 + 255;

impl ListenerTls {
    /// From PEM: the bridge's certificate chain and key, and the CA whose client
    /// certificates are taken (none: no client certificate is asked for).
    pub fn new(
        chain_pem: &[u8],
        key_pem: &[u8],
        client_ca_pem: Option<&[u8]>,
    ) -> Result<ListenerTls, String> {
        let chain = CertificateDer::pem_slice_iter(chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("--tls-cert: not PEM certificates: {e}"))?;
        if chain.is_empty() {
            return Err("--tls-cert holds no PEM certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| format!("--tls-key: no PEM private key: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match client_ca_pem {
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("--client-ca: not PEM: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("--client-ca: not a CA certificate: {e}"))?;
                }
                if roots.is_empty() {
                    return Err("--client-ca holds no PEM certificate".into());
                }
                // A client without a certificate still names its tenant by its
                // credentials; one with a certificate the CA did not issue is refused in
                // the handshake.
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("--client-ca: {e}"))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("--tls-cert and --tls-key do not go together: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ListenerTls {
            config: Arc::new(config),
            turns: Arc::default(),
        })
    }

    /// The server side of the handshake of a client from `source`, within `deadline`
    /// (its wait for a turn included); then the names of the client's certificate, if it
    /// gave one (it was verified in the handshake).
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
        source: Source,
        deadline: Duration,
    ) -> Result<(tokio_rustls::server::TlsStream<TcpStream>, Vec<String>), HandshakeFailed> {
        let turns = self.turns.get_or_init(|| {
            let workers = tokio::runtime::Handle::try_current()
                .map_or(1, |runtime| runtime.metrics().num_workers());
            Turns::new(turns_for(workers))
        });
        let handshake = async {
            let acceptor = rustls::server::Acceptor::default();
            let start = tokio_rustls::LazyConfigAcceptor::new(acceptor, tcp)
                .await
                .map_err(|e| HandshakeFailed::Failed(e.to_string()))?;
            let turn = turns.take(source).await;
            // The ClientHello's work (the key exchange, the signature) is done here, in
            // one go; the rest of the handshake waits on the client, with no turn held.
            let accept = start.into_stream(Arc::clone(&self.config));
            drop(turn);
            accept
                .await
                .map_err(|e| HandshakeFailed::Failed(e.to_string()))
        };
        let tls = match tokio::time::timeout(deadline, handshake).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(failed)) => return Err(failed),
            Err(_) => return Err(HandshakeFailed::TimedOut(deadline)),
        };
        let names = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(client_names)
            .unwrap_or_default();
        Ok((tls, names))
    }
}

/// A certificate's DNS and URI subject alternative names, each with its type
/// (`dns:runner.ci.corp.test`, `uri:spiffe://corp.test/ci`) so that one type never stands
/// for the other: a CA constrained to DNS names still signs any URI. No
/// wildcard (a name that stands for many clients names no one tenant), no URI without a
/// scheme, every name (a cut list could hide a second tenant's).
pub fn client_names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok(cert) = webpki::EndEntityCert::try_from(cert) else {
        return Vec::new();
    };
    let dns = cert
        .valid_dns_names()
        .filter(|name| !name.starts_with('*'))
        .map(|name| format!("dns:{}", name.trim_end_matches('.').to_ascii_lowercase()));
    let uris = cert
        .valid_uri_names()
        .filter(|uri| has_scheme(uri))
        .map(|uri| format!("uri:{uri}"));
    dns.chain(uris)
        .filter(|name| name.len() <= MAX_CLIENT_NAME_BYTES && name.is_ascii())
        .collect()
}

/// Whether `uri` starts with a scheme (RFC 3986: a letter, then letters, digits, `+`, `-`
/// or `.`, then `:`).
pub fn has_scheme(uri: &str) -> bool {
    let Some((scheme, _)) = uri.split_once(':') else {
        return false;
    };
    scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}
