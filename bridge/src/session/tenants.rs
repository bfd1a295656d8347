//! Who a client of a shared bridge is: the tenant its credentials name, each tenant with
//! its own session (id, policy, connection budget).
//!
//! A listener whose session has [`Tenants`] serves no one anonymously: a request must
//! carry `Proxy-Authorization` (`Bearer SECRET`, or `Basic` with the tenant's name as
//! user and a secret as password; SOCKS5 clients give the same user and password, RFC
//! 1929), or it is refused with 407 and logged under the listener's own session. There is
//! no default tenant to fall back to.
//!
//! Secrets are held only as SHA-256 digests, as the tenants file stores them: they are
//! random tokens (the file's documentation says how to make one), not passwords, so a
//! fast hash loses nothing to guessing. Looking a digest up in a map leaks through timing
//! only which digests share a prefix with the guess's, which tells nothing about a secret.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use http::header::{HeaderMap, PROXY_AUTHORIZATION};
use sha2::{Digest, Sha256};

use crate::session::Session;

/// A secret's digest, as the tenants file gives it.
pub type SecretDigest = [u8; 32];

/// The tenants a shared bridge serves, by name and by secret.
#[derive(Debug, Default)]
pub struct Tenants {
    by_name: HashMap<String, Tenant>,
    by_digest: HashMap<SecretDigest, Arc<Session>>,
    /// The names a client certificate may carry (listener_tls.rs), each naming one tenant.
    by_client_name: HashMap<String, Arc<Session>>,
}

#[derive(Debug)]
struct Tenant {
    session: Arc<Session>,
    digests: Vec<SecretDigest>,
}

/// Why a client was not identified; said in the 407 and the log, never with the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unidentified {
    /// No credentials at all.
    Missing,
    /// Credentials that name no tenant, or a tenant with another secret.
    Unknown(&'static str),
    /// A scheme other than Bearer and Basic, or a value that does not parse.
    Malformed(&'static str),
}

impl Unidentified {
    pub fn detail(&self) -> String {
        match self {
            Unidentified::Missing => "this bridge serves tenants: send Proxy-Authorization \
                 (Bearer TOKEN, or Basic TENANT:TOKEN; for SOCKS5, user TENANT and password \
                 TOKEN)"
                .to_owned(),
            Unidentified::Unknown(what) | Unidentified::Malformed(what) => {
                format!("proxy credentials refused: {what}")
            }
        }
    }
}

impl Tenants {
    /// Adds a tenant; a name or a secret given twice is a mistake in the tenants file.
    pub fn add(
        &mut self,
        name: &str,
        session: Arc<Session>,
        digests: Vec<SecretDigest>,
    ) -> Result<(), String> {
        if self.by_name.contains_key(name) {
            return Err(format!("tenant {name:?} is named twice"));
        }
        for digest in &digests {
            if let Some(other) = self.by_digest.get(digest) {
                return Err(format!(
                    "tenant {name:?} has a secret that session {} has too: each secret names \
                     one tenant",
                    other.id
                ));
            }
        }
        for digest in &digests {
            self.by_digest.insert(*digest, Arc::clone(&session));
        }
        self.by_name
            .insert(name.to_owned(), Tenant { session, digests });
        Ok(())
    }

    /// Lets a client certificate carrying one of `names` name tenant `name` (added
    /// before); a name given to two tenants is a mistake in the tenants file.
    pub fn add_client_names(&mut self, name: &str, names: &[String]) -> Result<(), String> {
        let session = self
            .by_name
            .get(name)
            .map(|t| Arc::clone(&t.session))
            .ok_or_else(|| format!("tenant {name:?} is not known"))?;
        for client in names {
            if let Some(other) = self.by_client_name.get(client) {
                return Err(format!(
                    "tenant {name:?} has client name {client:?}, which session {} has too: \
                     each client name names one tenant",
                    other.id
                ));
            }
        }
        for client in names {
            self.by_client_name
                .insert(client.clone(), Arc::clone(&session));
        }
        Ok(())
    }

    /// Whether some tenant is named by client certificates.
    pub fn by_certificates(&self) -> bool {
        !self.by_client_name.is_empty()
    }

    /// The tenant a verified client certificate's `names` name: none, one, or (a
    /// certificate naming two tenants) a refusal.
    pub fn from_client_names(
        &self,
        names: &[String],
    ) -> Result<Option<Arc<Session>>, Unidentified> {
        let mut named = names.iter().filter_map(|n| self.by_client_name.get(n));
        let Some(first) = named.next() else {
            return Ok(None);
        };
        if named.any(|other| !Arc::ptr_eq(other, first)) {
            return Err(Unidentified::Unknown(
                "the client certificate names more than one tenant",
            ));
        }
        Ok(Some(Arc::clone(first)))
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The tenants' sessions, by name.
    pub fn sessions(&self) -> impl Iterator<Item = (&str, &Arc<Session>)> {
        self.by_name.iter().map(|(n, t)| (n.as_str(), &t.session))
    }

    /// The tenant a request's `Proxy-Authorization` names. Only one such header is read:
    /// two are refused, as a proxy in front could have added one.
    pub fn from_headers(&self, headers: &HeaderMap) -> Result<Arc<Session>, Unidentified> {
        let mut values = headers.get_all(PROXY_AUTHORIZATION).iter();
        let value = match (values.next(), values.next()) {
            (None, _) => return Err(Unidentified::Missing),
            (Some(_), Some(_)) => {
                return Err(Unidentified::Malformed("more than one Proxy-Authorization"))
            }
            (Some(value), None) => value.as_bytes(),
        };
        let (scheme, rest) = split_scheme(value)
            .ok_or(Unidentified::Malformed("Proxy-Authorization has no scheme"))?;
        if scheme.eq_ignore_ascii_case(b"bearer") {
            return self
                .by_digest
                .get(&digest(rest))
                .cloned()
                .ok_or(Unidentified::Unknown("no tenant has this name and token"));
        }
        if scheme.eq_ignore_ascii_case(b"basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| Unidentified::Malformed("Basic credentials are not base64"))?;
            let colon = decoded
                .iter()
                .position(|&b| b == b':')
                .ok_or(Unidentified::Malformed("Basic credentials have no ':'"))?;
            return self.from_user_password(&decoded[..colon], &decoded[colon + 1..]);
        }
        Err(Unidentified::Malformed(
            "Proxy-Authorization scheme is neither Bearer nor Basic",
        ))
    }

    /// The tenant named `user`, if `password` is one of its secrets.
    /// A wrong name and a wrong token are refused alike, in the same time (the token is
    /// hashed either way): a client cannot learn which tenants exist.
    pub fn from_user_password(
        &self,
        user: &[u8],
        password: &[u8],
    ) -> Result<Arc<Session>, Unidentified> {
        let given = digest(password);
        std::str::from_utf8(user)
            .ok()
            .and_then(|name| self.by_name.get(name))
            .filter(|tenant| tenant.digests.contains(&given))
            .map(|tenant| Arc::clone(&tenant.session))
            .ok_or(Unidentified::Unknown("no tenant has this name and token"))
    }
}

/// `SCHEME SP credentials`, the credentials without surrounding blanks.
fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = value.iter().position(|&b| b == b' ')?;
    let rest = value[space..].trim_ascii();
    (space > 0 && !rest.is_empty()).then(|| (&value[..space], rest))
}

pub fn digest(secret: &[u8]) -> SecretDigest {
    Sha256::digest(secret).into()
}

/// A digest written as the tenants file writes it: `sha256:` and 64 hex digits.
pub fn parse_digest(text: &str) -> Result<SecretDigest, String> {
    let hex = text.strip_prefix("sha256:").ok_or_else(|| {
        format!("{text:?} is not a digest: write sha256:HEX (printf %s TOKEN | sha256sum)")
    })?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{text:?}: a SHA-256 digest is 64 hex digits"));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("{text:?}: not hex"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use http::HeaderValue;

    fn tenants() -> Tenants {
        let mut t = Tenants::default();
        for (name, secret) in [("team-a", "alpha-secret"), ("team-b", "beta-secret")] {
            let session = Arc::new(Session::new(name, Arc::new(Policy::deny_all()), 8));
            t.add(name, session, vec![digest(secret.as_bytes())])
                .unwrap();
        }
        t
    }

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.append(PROXY_AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn basic(user_password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_password)
        )
    }

    #[test]
    fn a_tenant_is_named_by_its_token_or_its_name_and_token() {
        let t = tenants();
        let id = |h: &HeaderMap| t.from_headers(h).map(|s| s.id.to_string());
        assert_eq!(id(&with("Bearer alpha-secret")), Ok("team-a".into()));
        assert_eq!(id(&with("bearer   beta-secret ")), Ok("team-b".into()));
        assert_eq!(
            id(&with(&basic("team-a:alpha-secret"))),
            Ok("team-a".into())
        );
        // A tenant's name with another tenant's secret is no one.
        assert!(matches!(
            id(&with(&basic("team-a:beta-secret"))),
            Err(Unidentified::Unknown(_))
        ));
        assert!(matches!(
            id(&with("Bearer nobody")),
            Err(Unidentified::Unknown(_))
        ));
        assert_eq!(id(&HeaderMap::new()), Err(Unidentified::Missing));
        for bad in ["Bearer", "Digest x", &basic("team-a"), "Basic !!!"] {
            assert!(
                matches!(id(&with(bad)), Err(Unidentified::Malformed(_))),
                "{bad}"
            );
        }
        let mut two = with("Bearer alpha-secret");
        two.append(PROXY_AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert!(matches!(id(&two), Err(Unidentified::Malformed(_))));
    }

    #[test]
    fn a_secret_or_a_name_given_twice_is_refused() {
        let mut t = tenants();
        let session = Arc::new(Session::new("c", Arc::new(Policy::deny_all()), 8));
        assert!(t
            .add(
                "team-c",
                Arc::clone(&session),
                vec![digest(b"alpha-secret")]
            )
            .is_err());
        assert!(t.add("team-a", session, vec![digest(b"gamma")]).is_err());
    }

    #[test]
    fn digests_are_written_as_sha256_hex() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert_eq!(
            parse_digest(&format!("sha256:{hex}")).unwrap(),
            digest(b"test")
        );
        assert!(parse_digest(hex).is_err());
        assert!(parse_digest("sha256:abc").is_err());
        assert!(parse_digest(&format!("sha256:{}", "g".repeat(64))).is_err());
    }
}
