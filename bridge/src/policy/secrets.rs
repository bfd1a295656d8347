//! Secrets the sandbox never holds: `[[secret]]` tables (and `--secret`) name a credential,
//! where the bridge reads it, and the only hosts it may be sent to. CMD is given a
//! placeholder, random per policy load; the bridge puts the real value in its place in
//! requests to those hosts alone (carry/secret_swap.rs).
//!
//! ```toml
//! [[secret]]
//! name = "GIT_TOKEN"                    # the variable CMD sees, holding the placeholder
//! from = "env:GIT_TOKEN"                # or "file:~/.config/tool/token"
//! hosts = ["git.test", "api.git.test"]  # names only, as in `allow` (ports too)
//! ```
//!
//! A host without a port takes the value over TLS alone, to a port a tunnel must carry TLS
//! on (443 and `tls_ports`), with the upstream's certificate verified by the bridge. A host
//! with ports takes it on those ports, in the clear too where the port is not a TLS port:
//! a value never goes in the clear where TLS is expected (that is a downgrade, and anyone
//! on the path reads it).
//!
//! A value is read by [`Policy::read_secret_values`], never at parse time: a sandboxed run
//! reads it after the sandbox is a process of its own, so that not even pid 1's copy of
//! netbox's memory holds it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zeroize::Zeroizing;

use super::{HostMatcher, Ports, RuleRef, RuleSpec};
use crate::target::Target;

/// Largest secret value read, in bytes: a token, a password, a key's passphrase.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;

/// The placeholder's prefix: recognisable in logs, and what the bridge looks for.
pub const PLACEHOLDER_PREFIX: &str = "netbox-secret-";

/// Random bytes in a placeholder: 128 bits, which no value collides with by chance.
const PLACEHOLDER_RANDOM_BYTES: usize = 16;

/// Where the bridge reads a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The bridge's (netbox's) own environment variable.
    Env(String),
    /// A file, read by the bridge (never mounted into a sandbox: netbox hides it).
    File(PathBuf),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Env(var) => write!(f, "env:{var}"),
            SecretSource::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

/// A secret's value: zeroed when the last holder drops it, and never shown by `Debug`.
#[derive(Clone)]
pub struct SecretValue(Arc<Zeroizing<Vec<u8>>>);

impl SecretValue {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(..)")
    }
}

/// One host (or `*.SUFFIX`) a secret's value may go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretHost {
    pub hosts: HostMatcher,
    /// The ports named; `None`: the TLS ports, over TLS alone.
    pub ports: Option<Ports>,
}

/// How a request goes upstream, which decides whether a value may go on it.
#[derive(Debug, Clone, Copy)]
pub struct Leg {
    /// Over the bridge's own TLS to the upstream, whose certificate it verified.
    pub verified_tls: bool,
    /// To a port a tunnel must carry TLS on (443, `tls_ports`).
    pub tls_port: bool,
}

impl SecretHost {
    /// Parses one of a secret's `hosts`: a name or `*.SUFFIX`, with ports or without.
    pub fn parse(text: &str) -> Result<SecretHost, String> {
        let (hosts, ports) = RuleSpec::parse_parts(text)?;
        if hosts.is_address() {
            return Err(format!(
                "host {text:?}: a secret goes to names (a host, *.SUFFIX), not addresses"
            ));
        }
        Ok(SecretHost { hosts, ports })
    }

    /// Whether a request to `target` on `leg` may carry the value.
    pub fn carries(&self, target: &Target, leg: Leg) -> bool {
        self.hosts.matches_host(&target.host)
            && match &self.ports {
                None => leg.verified_tls && leg.tls_port,
                Some(ports) => ports.contains(target.port) && (leg.verified_tls || !leg.tls_port),
            }
    }

    /// Whether a tunnel to `target` is one the value could go in, so the bridge must read
    /// its requests.
    fn could_carry(&self, target: &Target, tls_port: bool) -> bool {
        self.hosts.matches_host(&target.host)
            && match &self.ports {
                None => tls_port,
                Some(ports) => ports.contains(target.port),
            }
    }

    /// The ports a client is pointed at for this host: those named, or 443.
    pub fn ports_for_clients(&self) -> Vec<u16> {
        match &self.ports {
            None | Some(Ports::Any) => vec![443],
            Some(Ports::List(ranges)) => ranges
                .iter()
                .filter(|r| r.end() - r.start() < 8)
                .flatten()
                .collect(),
        }
    }
}

/// One secret of a policy.
#[derive(Debug, Clone)]
pub struct Secret {
    /// The variable CMD sees (and what the log names).
    pub name: String,
    pub from: SecretSource,
    /// The hosts the real value may be sent to.
    pub hosts: Vec<SecretHost>,
    /// The same hosts as they were written, for what a client of a shared bridge is told
    /// (bridge_offer.rs).
    pub written_hosts: Vec<String>,
    pub origin: RuleRef,
    /// What CMD holds instead of the value.
    pub placeholder: String,
    /// Read by [`super::Policy::read_secret_values`]; until then a request that needs it
    /// is refused.
    value: Option<SecretValue>,
}

impl Secret {
    /// Parses a secret's fields; errors say what to change.
    pub fn parse(
        name: &str,
        from: &str,
        hosts: &[String],
        relative_to: Option<&Path>,
        origin: RuleRef,
    ) -> Result<Secret, String> {
        if !valid_name(name) {
            return Err(format!(
                "name {name:?} is not a variable name (letters, digits and _, not starting \
                 with a digit)"
            ));
        }
        let from = parse_source(from, relative_to)?;
        if hosts.is_empty() {
            return Err("hosts = []: name the hosts the value may be sent to".into());
        }
        let hosts_written = hosts;
        let hosts = hosts
            .iter()
            .map(|h| SecretHost::parse(h))
            .collect::<Result<_, String>>()?;
        Ok(Secret {
            name: name.to_owned(),
            from,
            hosts,
            written_hosts: hosts_written.iter().map(|h| h.trim().to_owned()).collect(),
            origin,
            placeholder: new_placeholder(name),
            value: None,
        })
    }

    /// Keeps `before`'s placeholder if it is this very secret (its name, source and hosts
    /// unchanged): a shared bridge's reload then leaves the runs that hold it working,
    /// while a value read again takes effect.
    pub fn keep_placeholder_of(&mut self, before: &Secret) {
        if self.name == before.name && self.from == before.from && self.hosts == before.hosts {
            self.placeholder.clone_from(&before.placeholder);
        }
    }

    /// Whether the real value may be sent to `target` on `leg`.
    pub fn goes_to(&self, target: &Target, leg: Leg) -> bool {
        self.hosts.iter().any(|h| h.carries(target, leg))
    }

    /// Whether a tunnel to `target` could carry the value (see [`SecretHost::could_carry`]).
    pub fn could_go_to(&self, target: &Target, tls_port: bool) -> bool {
        self.hosts.iter().any(|h| h.could_carry(target, tls_port))
    }

    /// Whether the value may go to `target`'s host at all, on some port: what answers
    /// from it are searched for.
    pub fn names_host(&self, target: &Target) -> bool {
        self.hosts
            .iter()
            .any(|h| h.hosts.matches_host(&target.host))
    }

    /// The value, once read.
    pub fn value(&self) -> Option<&SecretValue> {
        self.value.as_ref()
    }

    /// Reads the value from its source, once.
    pub(super) fn read_value(&mut self) -> Result<(), String> {
        if self.value.is_some() {
            return Ok(());
        }
        let bytes = match &self.from {
            SecretSource::Env(var) => std::env::var_os(var)
                .map(|v| Zeroizing::new(std::os::unix::ffi::OsStringExt::into_vec(v)))
                .ok_or_else(|| format!("the variable {var} is not set"))?,
            SecretSource::File(path) => {
                read_secret_file(path).map_err(|e| format!("{}: {e}", path.display()))?
            }
        };
        let value = trimmed(bytes);
        if value.is_empty() {
            return Err("the value is empty".into());
        }
        if value.len() > MAX_SECRET_BYTES {
            return Err(format!("the value is over {MAX_SECRET_BYTES} bytes"));
        }
        if value
            .windows(self.placeholder.len())
            .any(|w| w == self.placeholder.as_bytes())
        {
            return Err("the value holds its own placeholder".into());
        }
        self.value = Some(SecretValue(Arc::new(value)));
        Ok(())
    }

    /// Whether the source is checked to exist, without reading the value: for a run, which
    /// must fail before the sandbox exists when it names nothing.
    pub fn check_source(&self) -> Result<(), String> {
        match &self.from {
            SecretSource::Env(var) => std::env::var_os(var)
                .is_some()
                .then_some(())
                .ok_or_else(|| format!("the variable {var} is not set")),
            SecretSource::File(path) => match std::fs::metadata(path) {
                Ok(meta) if meta.is_file() => Ok(()),
                Ok(_) => Err(format!("{} is not a regular file", path.display())),
                Err(e) => Err(format!("{}: {e}", path.display())),
            },
        }
    }

    /// The secret as the policy's canonical text has it: never its value or placeholder.
    pub(super) fn canonical(&self) -> String {
        format!(
            "secret {} from {} to {:?}\n",
            self.name, self.from, self.hosts
        )
    }
}

/// Whether `text` is a placeholder as this bridge makes them for the secret `name`: what a
/// run takes from a shared bridge is held to it, so that nothing else lands in CMD's
/// environment under the secret's name.
pub fn is_placeholder_for(name: &str, text: &str) -> bool {
    text.strip_prefix(PLACEHOLDER_PREFIX)
        .and_then(|rest| rest.strip_prefix(name))
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|hex| {
            hex.len() == 2 * PLACEHOLDER_RANDOM_BYTES
                && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// Whether `name` may name a secret: a variable name, at most 128 bytes.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn parse_source(from: &str, relative_to: Option<&Path>) -> Result<SecretSource, String> {
    if let Some(var) = from.strip_prefix("env:") {
        if !valid_name(var) {
            return Err(format!("from = {from:?}: {var:?} is not a variable name"));
        }
        return Ok(SecretSource::Env(var.to_owned()));
    }
    if let Some(path) = from.strip_prefix("file:") {
        if path.is_empty() {
            return Err("from = \"file:\" names no file".into());
        }
        let path = match path.strip_prefix("~/") {
            Some(rest) => {
                let home = std::env::var_os("HOME")
                    .ok_or_else(|| format!("from = {from:?}: HOME is not set"))?;
                PathBuf::from(home).join(rest)
            }
            None => match relative_to {
                Some(dir) if Path::new(path).is_relative() => dir.join(path),
                _ => PathBuf::from(path),
            },
        };
        return Ok(SecretSource::File(path));
    }
    Err(format!(
        "from = {from:?}: use \"env:VARIABLE\" or \"file:PATH\""
    ))
}

/// A file's bytes, read through `small_file` (no FIFO hangs, no endless device).
fn read_secret_file(path: &Path) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let text = crate::small_file::read_small_bytes(path, MAX_SECRET_BYTES as u64 + 2)?;
    Ok(Zeroizing::new(text))
}

/// The value without the one line ending a file or `echo` leaves.
fn trimmed(mut bytes: Zeroizing<Vec<u8>>) -> Zeroizing<Vec<u8>> {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    bytes
}

/// `netbox-secret-NAME-` and 32 random hex digits.
fn new_placeholder(name: &str) -> String {
    let mut random = [0u8; PLACEHOLDER_RANDOM_BYTES];
    // The same source the session CA's keys come from; it fails only without a kernel
    // random source, where no TLS would work either.
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut random)
        .expect("the kernel's random source");
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PLACEHOLDER_PREFIX}{name}-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> RuleRef {
        RuleRef {
            file: Arc::from("t.toml"),
            line: 1,
            text: "".into(),
        }
    }

    #[test]
    fn placeholders_are_random_and_name_their_secret() {
        let hosts = ["git.test".to_owned()];
        let a = Secret::parse("TOKEN", "env:TOKEN", &hosts, None, origin()).unwrap();
        let b = Secret::parse("TOKEN", "env:TOKEN", &hosts, None, origin()).unwrap();
        assert_ne!(a.placeholder, b.placeholder);
        assert!(a.placeholder.starts_with("netbox-secret-TOKEN-"));
        assert_eq!(a.placeholder.len(), "netbox-secret-TOKEN-".len() + 32);
        assert!(is_placeholder_for("TOKEN", &a.placeholder));
        assert!(!is_placeholder_for("TOKE", &a.placeholder));
        assert!(!is_placeholder_for("TOKEN", &format!("{}0", a.placeholder)));
        assert!(!is_placeholder_for("TOKEN", &a.placeholder.to_uppercase()));
    }

    #[test]
    fn a_reload_keeps_the_placeholder_of_the_same_secret_only() {
        let hosts = ["git.test".to_owned()];
        let before = Secret::parse("T", "env:T", &hosts, None, origin()).unwrap();
        let mut same = Secret::parse("T", "env:T", &hosts, None, origin()).unwrap();
        same.keep_placeholder_of(&before);
        assert_eq!(same.placeholder, before.placeholder);
        let other_hosts = ["git.test".to_owned(), "evil.test".to_owned()];
        let mut widened = Secret::parse("T", "env:T", &other_hosts, None, origin()).unwrap();
        widened.keep_placeholder_of(&before);
        assert_ne!(widened.placeholder, before.placeholder);
        let mut moved = Secret::parse("T", "env:U", &hosts, None, origin()).unwrap();
        moved.keep_placeholder_of(&before);
        assert_ne!(moved.placeholder, before.placeholder);
    }

    #[test]
    fn a_secret_goes_to_its_hosts_alone() {
        let hosts = ["git.test".to_owned(), "*.api.test".to_owned()];
        let s = Secret::parse("T", "env:T", &hosts, None, origin()).unwrap();
        let t = |a: &str| Target::parse_authority(a).unwrap();
        let tls = Leg {
            verified_tls: true,
            tls_port: true,
        };
        assert!(s.goes_to(&t("git.test:443"), tls));
        assert!(s.goes_to(&t("v1.api.test:443"), tls));
        assert!(!s.goes_to(&t("api.test:443"), tls));
        assert!(!s.goes_to(&t("git.test.evil.test:443"), tls));
        let plain = Leg {
            verified_tls: false,
            tls_port: false,
        };
        assert!(!s.goes_to(&t("git.test:22"), plain));
    }

    #[test]
    fn a_host_without_ports_takes_the_value_over_tls_alone() {
        let hosts = ["git.test".to_owned(), "plain.test:80,443".to_owned()];
        let s = Secret::parse("T", "env:T", &hosts, None, origin()).unwrap();
        let t = |a: &str| Target::parse_authority(a).unwrap();
        let leg = |verified_tls, tls_port| Leg {
            verified_tls,
            tls_port,
        };
        // The forward path and a plain tunnel: never for a host named without ports.
        assert!(!s.goes_to(&t("git.test:80"), leg(false, false)));
        assert!(!s.goes_to(&t("git.test:443"), leg(false, true)));
        // A TLS port added by `tls_ports`, over verified TLS.
        assert!(s.goes_to(&t("git.test:8443"), leg(true, true)));
        // Port 80 named on purpose: in the clear there; 443 named, never in the clear.
        assert!(s.goes_to(&t("plain.test:80"), leg(false, false)));
        assert!(s.goes_to(&t("plain.test:443"), leg(true, true)));
        assert!(!s.goes_to(&t("plain.test:443"), leg(false, true)));
        assert!(!s.goes_to(&t("plain.test:8080"), leg(false, false)));
        // Which tunnels are read for it.
        assert!(s.could_go_to(&t("git.test:443"), true));
        assert!(!s.could_go_to(&t("git.test:80"), false));
        assert!(!s.could_go_to(&t("git.test:22"), false));
        assert!(s.could_go_to(&t("plain.test:80"), false));
        assert!(s.names_host(&t("git.test:22")));
    }

    #[test]
    fn mistakes_are_refused_with_what_to_change() {
        let hosts = ["git.test".to_owned()];
        let e = |name: &str, from: &str, hosts: &[String]| {
            Secret::parse(name, from, hosts, None, origin()).unwrap_err()
        };
        assert!(e("1X", "env:X", &hosts).contains("variable name"));
        assert!(e("X", "vault:X", &hosts).contains("env:VARIABLE"));
        assert!(e("X", "env:X", &[]).contains("hosts"));
        assert!(e("X", "env:X", &["10.0.0.1".to_owned()]).contains("names"));
        assert!(e("X", "env:X", &["10.0.0.0/8".to_owned()]).contains("names"));
    }

    #[test]
    fn debug_never_shows_a_value() {
        let value = SecretValue(Arc::new(Zeroizing::new(b"hunter2".to_vec())));
        assert!(!format!("{value:?}").contains("hunter2"));
    }
}
