//! The session CA: made in memory when a session that inspects starts, never written
//! anywhere, gone when the session ends. It signs one leaf certificate per host the
//! session's clients reach through an inspected tunnel, minted on first use and cached.
//! Only its certificate leaves the process (into the sandbox's trust bundle).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

/// Leaf certificates kept at most; past it the cache starts over (a client naming many
/// hosts costs a key generation each, not unbounded memory).
const MAX_CACHED_LEAVES: usize = 1024;

/// How long before now certificates are valid from (clocks differ a little), and how long
/// they last: a session is hours, and a certificate outliving it is worth nothing without
/// the key.
const VALID_BEFORE: time::Duration = time::Duration::days(1);
const VALID_FOR: time::Duration = time::Duration::days(30);

pub struct SessionCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl std::fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionCa")
    }
}

impl SessionCa {
    /// A new CA, named for the session (so a user who meets it in a trust bundle knows
    /// whose it is).
    pub fn new(
        session: &str,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<SessionCa, String> {
        let key = KeyPair::generate().map_err(|e| format!("generate the session CA's key: {e}"))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| format!("the session CA: {e}"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let session: String = session
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(40)
            .collect();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("netbox session CA {session}"));
        params.distinguished_name.push(
            DnType::OrganizationName,
            "netbox inspection (in memory only)",
        );
        set_validity(&mut params);
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("sign the session CA: {e}"))?;
        Ok(SessionCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
            leaves: Mutex::new(HashMap::new()),
            provider,
        })
    }

    /// The CA's certificate, PEM: what clients are told to trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key (PKCS #8 DER), for the test that searches the disk for it.
    #[cfg(feature = "test-hooks")]
    pub fn key_der_for_tests(&self) -> Vec<u8> {
        self.issuer.key().serialize_der()
    }

    /// The certificate and key the bridge shows a client for `host` (a name, or an IP
    /// address as text), minted on first use.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, String> {
        if let Some(leaf) = self.leaves.lock().ok().and_then(|l| l.get(host).cloned()) {
            return Ok(leaf);
        }
        let leaf = Arc::new(self.mint(host)?);
        if let Ok(mut leaves) = self.leaves.lock() {
            if leaves.len() >= MAX_CACHED_LEAVES {
                leaves.clear();
            }
            leaves.insert(host.to_owned(), Arc::clone(&leaf));
        }
        Ok(leaf)
    }

    fn mint(&self, host: &str) -> Result<CertifiedKey, String> {
        let failed = |e: rcgen::Error| format!("mint a certificate for {host}: {e}");
        let key = KeyPair::generate().map_err(failed)?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(failed)?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.distinguished_name.push(DnType::CommonName, host);
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params);
        let cert = params.signed_by(&key, &self.issuer).map_err(failed)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = self
            .provider
            .key_provider
            .load_private_key(der)
            .map_err(|e| format!("load the key minted for {host}: {e}"))?;
        Ok(CertifiedKey::new(
            vec![CertificateDer::from(cert.der().to_vec())],
            signing,
        ))
    }
}

fn set_validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - VALID_BEFORE;
    params.not_after = now + VALID_FOR;
}
