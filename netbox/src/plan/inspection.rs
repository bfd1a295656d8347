//! What a run that inspects needs before the clone: the upstream trust (the system's
//! roots, plus `--upstream-ca`), checked now so a mistake stops the run before anything
//! starts. The session CA itself is made only after the clone, in netbox (run.rs), so that
//! its key never exists in the sandbox's memory, not even in pid 1's copy of netbox.

use std::path::PathBuf;

use bridge::policy::Policy;
use bridge::tls::inspector::UpstreamTrust;

use crate::cli::PolicyArgs;
use crate::error::WrapperError;

/// Where the sandbox's trust bundle is: the session CA, `--upstream-ca`'s certificates and
/// the system's roots, in a read-only tmpfs pid 1 lays over `/run`.
pub const TRUST_BUNDLE: &str = "/run/netbox/ca-bundle.pem";

/// The distributions' trust-store files, each covered with the bundle where it exists
/// (a symlink among them is followed inside the sandbox's root: its target is covered):
/// Debian, Ubuntu and Alpine; Fedora and RHEL; SUSE; and the OpenSSL default others
/// link to. The first one that exists gives the bundle its system roots.
pub const TRUST_STORES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/var/lib/ca-certificates/ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The variables TLS clients read for their CA file: OpenSSL and what is built on it,
/// Python's requests, curl, Node.js (added to its own roots), git, pip, cargo.
pub const CA_FILE_VARS: [&str; 7] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
];

/// Largest `--upstream-ca` file read.
const MAX_CA_FILE_BYTES: u64 = 4 << 20;

/// A run's inspection, before its CA exists.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// How the bridge verifies upstreams.
    pub upstream: UpstreamTrust,
    /// `--upstream-ca` certificates, PEM: CMD trusts them too (for tunnels that are not
    /// inspected, which reach the upstream itself).
    pub extra_pem: String,
    /// The `--upstream-ca` files, for pinning those inside a writable root.
    pub files: Vec<PathBuf>,
}

/// The session's CA, made in memory. From here on this process dumps no core (a core file
/// would hold the key): its core limit is 0, and it is not dumpable, which also holds
/// where `core_pattern` pipes cores to a program (the kernel ignores the limit then), and
/// keeps other processes of this user without CAP_SYS_PTRACE out of its memory.
pub fn session_ca(
    session: &str,
    upstream: UpstreamTrust,
) -> Result<bridge::tls::inspector::Inspector, WrapperError> {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_CORE, 0, 0)
        .map_err(|e| WrapperError::Spawn(std::io::Error::from(e)))?;
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| WrapperError::Spawn(std::io::Error::from(e)))?;
    let inspector =
        bridge::tls::inspector::Inspector::new(session, upstream).map_err(|detail| {
            WrapperError::Setup {
                step: "session CA".into(),
                detail,
                hint: None,
            }
        })?;
    if crate::testhooks::hooks().show_ca_key {
        show_key_for_tests(&inspector);
    }
    Ok(inspector)
}

/// The test that searches the disk for the CA's key learns it here, on stderr.
#[cfg(feature = "test-hooks")]
fn show_key_for_tests(inspector: &bridge::tls::inspector::Inspector) {
    let key: String = inspector
        .ca_key_der_for_tests()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    crate::output::say(&format!("netbox test hook: session CA key {key}"));
}

/// A release build has no way to show the key.
#[cfg(not(feature = "test-hooks"))]
fn show_key_for_tests(_: &bridge::tls::inspector::Inspector) {}

/// The inspection `policy` asks for, if any. `--upstream-ca` without inspection is a
/// mistake (it would change nothing), said as one.
pub fn prepare(policy: &Policy, args: &PolicyArgs) -> Result<Option<Inspection>, WrapperError> {
    prepare_if(policy.inspects(), args)
}

/// [`prepare`] for a bridge whose policies (its tenants') inspect, or not.
pub fn prepare_if(inspects: bool, args: &PolicyArgs) -> Result<Option<Inspection>, WrapperError> {
    if !inspects {
        if let Some(file) = args.upstream_ca.first() {
            return Err(WrapperError::Usage(format!(
                "--upstream-ca {}: nothing is inspected; add --inspect, or an [[http]] rule \
                 to an allowlist",
                file.display()
            )));
        }
        return Ok(None);
    }
    let mut extra = Vec::new();
    let mut extra_pem = String::new();
    for file in &args.upstream_ca {
        let bad =
            |why: String| WrapperError::Usage(format!("--upstream-ca {}: {why}", file.display()));
        let text = crate::plan::read_small_file(file, MAX_CA_FILE_BYTES)
            .map_err(|e| bad(e.to_string()))?;
        let certificates =
            bridge::tls::inspector::read_pem_certificates(text.as_bytes()).map_err(bad)?;
        // The certificates alone go to the sandbox's bundle, written afresh: the file may
        // hold a private key beside them, or anything else around them.
        for certificate in &certificates {
            extra_pem.push_str(&pem_certificate(certificate));
        }
        extra.extend(certificates);
    }
    let upstream = UpstreamTrust::load(&extra).map_err(WrapperError::Usage)?;
    Ok(Some(Inspection {
        upstream,
        extra_pem,
        files: args
            .upstream_ca
            .iter()
            .filter_map(|f| std::fs::canonicalize(f).ok())
            .collect(),
    }))
}

/// One certificate as PEM (RFC 7468: base64 in lines of 64 characters).
pub(crate) fn pem_certificate(der: &[u8]) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in encoded.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}
