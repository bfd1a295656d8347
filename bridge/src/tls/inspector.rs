//! What a session that inspects holds: its CA (which mints each tunnel's certificate),
//! how upstreams are verified (the system's trust store and `--upstream-ca`, never less),
//! and the TLS configurations both sides of an inspected tunnel use. Held by the bridge's
//! configuration; the inspection itself is `carry::inspect`.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;

use super::session_ca::SessionCa;

/// The protocol both sides of an inspected tunnel speak.
pub(crate) const HTTP1: &[u8] = b"http/1.1";
/// Offered to clients too: one that asks for HTTP/1.0 alone is served (hyper speaks it),
/// not refused the handshake.
pub(crate) const HTTP10: &[u8] = b"http/1.0";

/// How upstreams are verified: TLS to them, with the roots they must chain to.
#[derive(Debug, Clone)]
pub struct UpstreamTrust {
    config: Arc<rustls::ClientConfig>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

/// What a session that inspects holds: its CA, and how upstreams are verified.
#[derive(Debug)]
pub struct Inspector {
    pub(crate) ca: SessionCa,
    pub(crate) upstream: Arc<rustls::ClientConfig>,
    pub(crate) provider: Arc<rustls::crypto::CryptoProvider>,
}

impl UpstreamTrust {
    /// The system's trust store (as the host's OpenSSL finds it, `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR` included) plus `extra_roots`. Errors if that leaves no root at all.
    pub fn load(extra_roots: &[CertificateDer<'static>]) -> Result<UpstreamTrust, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        for root in extra_roots {
            roots
                .add(root.clone())
                .map_err(|e| format!("an extra upstream CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            let why = native
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            return Err(format!(
                "no trusted root certificate found on this machine{why}: inspection would \
                 have nothing to verify upstreams against (install ca-certificates, or give \
                 --upstream-ca FILE)"
            ));
        }
        let mut upstream = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS to upstreams: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![HTTP1.to_vec()];
        Ok(UpstreamTrust {
            config: Arc::new(upstream),
            provider,
        })
    }
}

impl Inspector {
    /// A new session CA, for a session verifying upstreams with `trust`.
    pub fn new(session: &str, trust: UpstreamTrust) -> Result<Inspector, String> {
        Ok(Inspector {
            ca: SessionCa::new(session, Arc::clone(&trust.provider))?,
            upstream: trust.config,
            provider: trust.provider,
        })
    }

    /// The session CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// The session CA's private key, for the test that proves it is on no disk.
    #[cfg(feature = "test-hooks")]
    pub fn ca_key_der_for_tests(&self) -> Vec<u8> {
        self.ca.key_der_for_tests()
    }

    /// The TLS the bridge offers a client of a tunnel to `host`: its minted certificate.
    pub(crate) fn client_side(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let leaf = self.ca.leaf(host)?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS to the client: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneCertificate(leaf)));
        config.alpn_protocols = vec![HTTP1.to_vec(), HTTP10.to_vec()];
        Ok(Arc::new(config))
    }
}

/// Reads PEM certificates (for `--upstream-ca`).
pub fn read_pem_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

/// The one certificate a tunnel's client is shown, whatever it asked for (its ClientHello
/// was checked to name the tunnel's host before this).
#[derive(Debug)]
struct OneCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}
