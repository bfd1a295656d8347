//! The allowlist policy: which targets a session may reach, and which resolved addresses
//! it may dial. Both decisions are pure values (no I/O, no clock, no DNS) that name the
//! rule that decided, so the event log can say `allow.toml:3` rather than "allowed".
//!
//! Order of precedence: a matching deny rule wins over any allow rule; no match is a deny.
//! Address admission runs after resolution on every address: deny CIDR rules first, then
//! public addresses pass, then a non-public address passes only if an allow CIDR rule
//! covers it (a deliberate opening such as `127.0.0.1:5432`), or the name was allowed by an
//! `allow_private` rule and the address is one a private service lives at (private,
//! loopback, carrier-grade NAT, documentation, benchmarking, reserved; never link-local,
//! cloud metadata, multicast, broadcast or unspecified).

pub mod git;
mod http;
mod index;
mod load;
mod rule;
pub mod secrets;

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

pub use http::{HttpCheck, HttpRefusal, HttpRule, PathPattern};
pub use load::PolicyError;
pub use rule::{Action, HostMatcher, PortList, Ports, RuleSpec};

use crate::ipclass::IpClass;
use crate::target::{canonical_ip, Host, Target};

/// Where a rule came from: the file, the line and its text, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RuleRef {
    pub file: Arc<str>,
    pub line: u32,
    pub text: Box<str>,
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One rule with its action and origin.
#[derive(Debug, Clone)]
pub struct Rule {
    pub action: Action,
    pub spec: RuleSpec,
    pub origin: RuleRef,
    /// An allow rule for names (`allow_private`, `--allow-private`) whose target may be
    /// dialed at the non-public address its DNS returns (a company mirror, split-horizon
    /// DNS): for the names it matches only, never for any other name.
    pub reach_private: bool,
}

/// Finds the first of some rules, in the policy's order, that its argument accepts.
type FirstRule<'a> = dyn Fn(&dyn Fn(&Rule) -> bool) -> Option<&'a Rule> + 'a;

/// An effective policy: every rule of every file, and the pinned host map.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
    /// The rules by what they match (index.rs), built on the first decision after a
    /// change.
    index: std::sync::OnceLock<index::RuleIndex>,
    hosts: HashMap<String, Vec<IpAddr>>,
    files: Vec<PathBuf>,
    /// The same files as they were named (see [`Policy::named_files`]).
    named_files: Vec<PathBuf>,
    /// `tools = [...]` in the files, with where each was named: netbox asks each
    /// tool for its registries and adds them as rules.
    tools: Vec<(String, RuleRef)>,
    /// `sockets = [...]` in the files, with where each was named: host Unix sockets
    /// netbox lets a sandboxed command connect to. A bridge alone carries no Unix socket.
    sockets: Vec<(String, RuleRef)>,
    /// Learn mode: a name no rule mentions is allowed too (deny rules still win, and
    /// addresses are still checked: only public ones, or ones an IP rule opens).
    learning: bool,
    /// Relaying to a bridge that judges (`netbox --bridge URL`): every target is passed on
    /// as it was named, and the remote bridge's answer is the decision.
    relaying: bool,
    /// Ports, besides 443, whose tunnels must be TLS naming their own host
    /// (`tls_ports = [...]`).
    tls_ports: std::collections::BTreeSet<u16>,
    /// `tls = "allow-plain"`: on those ports, a tunnel that is not TLS, or whose
    /// ClientHello names no host, passes (a server name that differs never does).
    tls_plain_ok: bool,
    /// `[[http]]` tables: tunnels they cover are inspected and their requests judged.
    http_rules: Vec<Arc<HttpRule>>,
    /// `--inspect`: every tunnel to a TLS port is inspected, and its requests logged.
    inspect_all: bool,
    /// `[[secret]]` tables and `--secret`: tunnels to their hosts are inspected, so that
    /// their placeholders can be swapped for their values.
    secrets: Vec<secrets::Secret>,
    /// For each flag that added rules (`--allow`, `--allow-tool pip (its index)`): its
    /// name, shared by its rules, and how many it added (a flag rule's "line"), so that
    /// adding one is not a count of every rule before it.
    flag_rules: HashMap<Arc<str>, u32>,
}

/// How the origin of a rule `--allow-tool` added begins (`--allow-tool pip (its index)`),
/// so that a refusal can name the one flag that opens every tool's registry.
pub const TOOL_RULE_PREFIX: &str = "--allow-tool ";

/// Most rules a policy holds (~2.7 GB of them at ~160 bytes a rule). The index keeps rule
/// positions in 32 bits, so a policy must stay below 2^32 of them; this bound says so long
/// before.
pub const MAX_RULES: usize = 1 << 24;

/// The port whose tunnels are always checked for TLS naming their own host.
pub const HTTPS_PORT: u16 = 443;

/// Plain HTTP's port: a secret's host is read there too (`http_check`).
const HTTP_PORT: u16 = 80;

/// The outcome of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
}

/// Why a request was allowed or refused. Serialised as snake_case into the event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    AllowedByRule,
    /// Learn mode let a name through that no rule mentions.
    Learning,
    PublicAddress,
    OpenedByRule,
    DeniedByRule,
    NotAllowed,
    NonPublicAddress,
    ResolveFailed,
    UpstreamUnreachable,
    UpstreamTimeout,
    BadRequest,
    HeaderTooLarge,
    HeaderTimeout,
    Unsupported,
    /// Past the session's or the bridge's connection limit.
    ConnectionLimit,
    /// A tunnel's TLS ClientHello asks for another host than the tunnel's (tls_check.rs).
    ServerNameMismatch,
    /// A tunnel's TLS ClientHello names no host, on a port that must carry TLS.
    NoServerName,
    /// A tunnel that must carry TLS does not start with it.
    NotTls,
    /// Inside an inspected tunnel: a method no HTTP rule for the host allows.
    MethodNotAllowed,
    /// Inside an inspected tunnel: a path no HTTP rule for the host allows.
    PathNotAllowed,
    /// Inside an inspected tunnel: a request naming another host than the tunnel's.
    HostMismatch,
    /// Inspection: the upstream's certificate is not one the system trusts for its name;
    /// or a response from a host a secret goes to cannot be searched for its value.
    UpstreamNotTrusted,
    /// A shared bridge: the client named no tenant (no credentials, or unknown ones).
    ProxyAuthRequired,
    /// Relaying to a bridge that judges (`netbox --bridge URL`): every name is passed on,
    /// and that bridge's answer is the decision.
    Relayed,
    /// The upstream proxy (`--upstream-proxy`, `--bridge`) refused the request without a
    /// judging netbox bridge's reason (its own 403 or 407), or could not be reached.
    UpstreamProxy,
    /// A request carried a secret's placeholder to a host that is not among the secret's.
    SecretMisdirected,
}

impl Reason {
    /// The `X-Netbox-Reason` header value.
    pub fn header_value(self) -> &'static str {
        match self {
            Reason::AllowedByRule
            | Reason::Learning
            | Reason::PublicAddress
            | Reason::OpenedByRule
            | Reason::Relayed => "allowed",
            Reason::DeniedByRule | Reason::NotAllowed => "policy",
            Reason::NonPublicAddress => "private-address",
            Reason::ResolveFailed => "resolve-failed",
            Reason::UpstreamUnreachable => "upstream-unreachable",
            Reason::UpstreamTimeout => "upstream-timeout",
            Reason::BadRequest | Reason::Unsupported => "bad-request",
            Reason::HeaderTooLarge => "header-too-large",
            Reason::HeaderTimeout => "header-timeout",
            Reason::ConnectionLimit => "connection-limit",
            Reason::ServerNameMismatch | Reason::NoServerName | Reason::NotTls => "tls",
            Reason::MethodNotAllowed | Reason::PathNotAllowed | Reason::HostMismatch => "http-rule",
            Reason::UpstreamNotTrusted => "upstream-not-trusted",
            Reason::ProxyAuthRequired => "proxy-auth",
            Reason::UpstreamProxy => "upstream-proxy",
            Reason::SecretMisdirected => "secret-misdirected",
        }
    }
}

/// A decision on a target or an address, with the rule that made it (if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: Reason,
    pub rule: Option<RuleRef>,
    /// For address decisions: what the address is.
    pub class: Option<IpClass>,
    /// For target decisions: the allow rule that matched lets the name reach a
    /// non-public address.
    pub reach_private: bool,
    /// For target decisions: the rule that matched is a wildcard (`*.corp.test`).
    pub wildcard: bool,
}

impl Decision {
    fn deny(reason: Reason, rule: Option<&Rule>) -> Decision {
        Decision {
            verdict: Verdict::Deny,
            reason,
            rule: rule.map(|r| r.origin.clone()),
            class: None,
            reach_private: false,
            wildcard: false,
        }
    }

    /// Allowed by an allow rule that matched the target.
    fn allowed_by(rule: &Rule) -> Decision {
        Decision {
            verdict: Verdict::Allow,
            reason: Reason::AllowedByRule,
            rule: Some(rule.origin.clone()),
            class: None,
            reach_private: rule.reach_private,
            wildcard: matches!(rule.spec.hosts, HostMatcher::Subdomains(_)),
        }
    }

    pub fn is_allow(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

impl Policy {
    /// A policy that refuses everything.
    pub fn deny_all() -> Policy {
        Policy::default()
    }

    /// Loads a policy from allowlist files (each may `include` others).
    pub fn load(paths: &[PathBuf]) -> Result<Policy, PolicyError> {
        let mut policy = Policy::default();
        for path in paths {
            load::load_file(path, &mut policy)?;
        }
        Ok(policy)
    }

    /// Readies a policy whose rules are all in (files, flags, tools) for deciding: its
    /// rules vector shrunk and its index built. Called where loading runs (netbox's start,
    /// a bridge's reload thread), so that an allowlist of 10^6 names is indexed there, not
    /// on the first connection's thread while other connections wait for it. A policy not
    /// prepared builds its index on its first decision.
    pub fn prepare(&mut self) {
        // The vector grew by doubling: an allowlist of 10^6 rules would keep up to as many
        // empty places for as long as it is loaded.
        self.rules.shrink_to_fit();
        self.index();
    }

    /// Adds one rule given on a command line, e.g. `--allow registry.test:443`.
    pub fn add_rule(&mut self, action: Action, text: &str, origin: &str) -> Result<(), String> {
        self.add_flag_rule(action, text, origin, false)
    }

    /// Adds an allow rule whose names may reach the non-public address their DNS returns,
    /// e.g. `--allow-private mirror.corp:443`.
    pub fn add_private_rule(&mut self, text: &str, origin: &str) -> Result<(), String> {
        self.add_flag_rule(Action::Allow, text, origin, true)
    }

    fn add_flag_rule(
        &mut self,
        action: Action,
        text: &str,
        origin: &str,
        reach_private: bool,
    ) -> Result<(), String> {
        let spec = RuleSpec::parse(text, action)?;
        if reach_private {
            check_names_only(&spec)?;
        }
        self.room_for_a_rule()?;
        // "Line" of a flag rule: its position among the rules given by the same flag.
        let (file, line) = match self.flag_rules.get_key_value(origin) {
            Some((file, &added)) => (Arc::clone(file), added + 1),
            None => (Arc::from(origin), 1),
        };
        self.flag_rules.insert(Arc::clone(&file), line);
        self.index = std::sync::OnceLock::new();
        self.rules.push(Rule {
            action,
            spec,
            origin: RuleRef {
                file,
                line,
                text: text.into(),
            },
            reach_private,
        });
        Ok(())
    }

    pub(crate) fn push_rule(&mut self, rule: Rule) -> Result<(), String> {
        self.room_for_a_rule()?;
        self.index = std::sync::OnceLock::new();
        self.rules.push(rule);
        Ok(())
    }

    /// Refuses a rule past [`MAX_RULES`].
    fn room_for_a_rule(&self) -> Result<(), String> {
        if self.rules.len() >= MAX_RULES {
            return Err(format!(
                "more than {MAX_RULES} rules; split the policy between bridges"
            ));
        }
        Ok(())
    }

    /// Adds an `[[http]]` table: an allow rule for its hosts, whose tunnels are inspected.
    pub(crate) fn push_http_rule(&mut self, rule: HttpRule) -> Result<(), String> {
        self.room_for_a_rule()?;
        self.index = std::sync::OnceLock::new();
        self.rules.push(Rule {
            action: Action::Allow,
            spec: rule.spec.clone(),
            origin: rule.origin.clone(),
            reach_private: false,
        });
        self.http_rules.push(Arc::new(rule));
        Ok(())
    }

    /// `--inspect`: every allowed tunnel to a TLS port is inspected, its requests logged.
    pub fn set_inspect_all(&mut self) {
        self.inspect_all = true;
    }

    /// The ports the allow rules name one by one (ranges of up to 64; `*` names none).
    pub fn named_ports(&self) -> std::collections::BTreeSet<u16> {
        let mut ports = std::collections::BTreeSet::new();
        for rule in self.rules.iter().filter(|r| r.action == Action::Allow) {
            if let Ports::List(ranges) = &rule.spec.ports {
                for range in ranges.iter().filter(|r| r.end() - r.start() < 64) {
                    ports.extend(range);
                }
            }
        }
        ports
    }

    /// Whether any tunnel may be inspected: the session then needs a CA.
    pub fn inspects(&self) -> bool {
        self.inspect_all || !self.http_rules.is_empty() || !self.secrets.is_empty()
    }

    /// Adds a secret; refused if another has its name (one variable holds one placeholder).
    pub fn add_secret(&mut self, secret: secrets::Secret) -> Result<(), String> {
        if let Some(other) = self.secrets.iter().find(|s| s.name == secret.name) {
            return Err(format!(
                "secret {} is named twice (also at {})",
                secret.name, other.origin
            ));
        }
        self.secrets.push(secret);
        Ok(())
    }

    /// The secrets, with their placeholders (and values, once read).
    pub fn secrets(&self) -> &[secrets::Secret] {
        &self.secrets
    }

    /// Keeps the placeholders of `before`'s secrets that are unchanged here (a shared
    /// bridge's reload: see [`secrets::Secret::keep_placeholder_of`]).
    pub fn keep_placeholders_of(&mut self, before: &Policy) {
        for secret in &mut self.secrets {
            if let Some(old) = before.secrets.iter().find(|s| s.name == secret.name) {
                secret.keep_placeholder_of(old);
            }
        }
    }

    /// Reads every secret's value from its source. A sandboxed run calls this only once
    /// the sandbox is a process of its own; a bridge, as it loads its policy.
    pub fn read_secret_values(&mut self) -> Result<(), String> {
        for secret in &mut self.secrets {
            secret
                .read_value()
                .map_err(|e| format!("secret {} ({}): {e}", secret.name, secret.from))?;
        }
        Ok(())
    }

    /// A secret whose hosts no allow rule lets the bridge reach (checked by name, for the
    /// hosts named one by one, at any port the value could go to): the value could never
    /// be used, which is surely a mistake.
    pub fn secret_host_not_allowed(&self) -> Option<(&secrets::Secret, String)> {
        for secret in &self.secrets {
            for host in &secret.hosts {
                let rule::HostMatcher::Exact(name) = &host.hosts else {
                    continue;
                };
                let ports = self.secret_ports(host);
                let Some(&first) = ports.first() else {
                    continue;
                };
                let at = |port| Target {
                    host: Host::Name(name.to_string()),
                    port,
                };
                if !ports.iter().any(|&port| self.decide(&at(port)).is_allow()) {
                    return Some((secret, at(first).to_string()));
                }
            }
        }
        None
    }

    /// The ports a secret's host is checked at: the TLS ports for one named without ports
    /// (443 first), else the first it names.
    fn secret_ports(&self, host: &secrets::SecretHost) -> Vec<u16> {
        match &host.ports {
            None => std::iter::once(HTTPS_PORT)
                .chain(self.tls_ports.iter().copied())
                .collect(),
            Some(Ports::Any) => vec![HTTPS_PORT],
            Some(ports) if ports.contains(HTTPS_PORT) => vec![HTTPS_PORT],
            Some(Ports::List(ranges)) => ranges.iter().take(1).map(|r| *r.start()).collect(),
        }
    }

    /// How an allowed tunnel to `target` is inspected, if it is: by the `[[http]]` rules
    /// that cover it (an `allow` entry for the same host does not widen them), or, under
    /// `--inspect`, every request on a TLS port.
    pub fn http_check(&self, target: &Target) -> Option<HttpCheck> {
        let rules = http::matching(&self.http_rules, target);
        if !rules.is_empty() {
            return Some(HttpCheck::Rules(rules));
        }
        let tls_port = self.checks_tls(target.port);
        // A secret's host is read wherever its value could go, and on HTTP's own port too:
        // what the host answers there is cleaned of the value as on its TLS ports (a value
        // stored through one could be read back through the other).
        let secret_host = self.secrets.iter().any(|s| {
            s.could_go_to(target, tls_port) || (target.port == HTTP_PORT && s.names_host(target))
        });
        (secret_host || (self.inspect_all && self.checks_tls(target.port)))
            .then_some(HttpCheck::Any)
    }

    /// Pins a name; returns false (and changes nothing) if it is already pinned, so two
    /// files cannot silently disagree about where a name points.
    pub(crate) fn pin_host(&mut self, name: String, addrs: Vec<IpAddr>) -> bool {
        if self.hosts.contains_key(&name) {
            return false;
        }
        self.hosts.insert(name, addrs);
        true
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    fn index(&self) -> &index::RuleIndex {
        self.index.get_or_init(|| index::RuleIndex::of(&self.rules))
    }

    /// Whether a tunnel to `port` must be TLS whose ClientHello names the tunnel's own
    /// host (443, and the ports `tls_ports` adds).
    pub fn checks_tls(&self, port: u16) -> bool {
        port == HTTPS_PORT || self.tls_ports.contains(&port)
    }

    /// `tls = "allow-plain"`: a checked tunnel that is not TLS, or names no host, passes.
    pub fn tls_plain_ok(&self) -> bool {
        self.tls_plain_ok
    }

    /// The tools the files name (`tools = ["pip"]`), with where.
    pub fn tools(&self) -> &[(String, RuleRef)] {
        &self.tools
    }

    /// The host Unix sockets the files let through (`sockets = ["$SSH_AUTH_SOCK"]`), as
    /// written, with where.
    pub fn sockets(&self) -> &[(String, RuleRef)] {
        &self.sockets
    }

    /// The files this policy was read from, includes too, in load order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The same files as they were named: the path given, or an include resolved against
    /// its including file's path as named, symlinks and all. This is the path a later
    /// load opens again, so what lies along it decides what that load reads.
    pub fn named_files(&self) -> &[PathBuf] {
        &self.named_files
    }

    /// SHA-256 of [`Policy::canonical_text`], in hex: the hash the log carries. The text is
    /// hashed as it is written, never held whole: for an allowlist of 10^6 names it would
    /// be ~70 MB.
    pub fn sha256_hex(&self) -> String {
        use sha2::Digest;
        struct Hashing(sha2::Sha256);
        impl fmt::Write for Hashing {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.0.update(s.as_bytes());
                Ok(())
            }
        }
        let mut hashing = Hashing(sha2::Sha256::new());
        // Writing to a hash cannot fail.
        let _ = self.write_canonical(&mut hashing);
        hashing
            .0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What the policy decides by, as canonical text: its rules in order (allow/deny and
    /// the parsed rule, not its spelling) and its pinned hosts, sorted. Two policies with
    /// the same text decide alike; the session record carries its hash.
    pub fn canonical_text(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_canonical(&mut text);
        text
    }

    fn write_canonical(&self, out: &mut impl fmt::Write) -> fmt::Result {
        for rule in &self.rules {
            let private = if rule.reach_private { " private" } else { "" };
            writeln!(out, "{:?}{private} {:?}", rule.action, rule.spec)?;
        }
        if self.learning {
            out.write_str("learning\n")?;
        }
        if self.relaying {
            out.write_str("relaying\n")?;
        }
        for port in &self.tls_ports {
            writeln!(out, "tls port {port}")?;
        }
        if self.tls_plain_ok {
            out.write_str("tls allow-plain\n")?;
        }
        for rule in &self.http_rules {
            writeln!(
                out,
                "http {:?} methods {:?} paths {:?} git {:?}",
                rule.spec, rule.methods, rule.paths, rule.git
            )?;
        }
        if self.inspect_all {
            out.write_str("inspect all\n")?;
        }
        for secret in &self.secrets {
            out.write_str(&secret.canonical())?;
        }
        let mut hosts: Vec<_> = self.hosts.iter().collect();
        hosts.sort();
        for (name, addrs) in hosts {
            writeln!(out, "host {name} {addrs:?}")?;
        }
        Ok(())
    }

    /// Number of allow rules: what a start-up line reports.
    pub fn allow_count(&self) -> usize {
        self.rules
            .iter()
            .filter(|r| r.action == Action::Allow)
            .count()
    }

    /// The addresses a name is pinned to by a `[hosts]` table, if any.
    pub fn pinned(&self, host: &Host) -> Option<&[IpAddr]> {
        match host {
            Host::Name(name) => self.hosts.get(name).map(Vec::as_slice),
            Host::Ip(_) => None,
        }
    }

    /// Decides whether a target may be attempted at all. Deny rules win; no match denies.
    pub fn decide(&self, target: &Target) -> Decision {
        // The first deny rule, the first `allow_private` rule and the first allow rule that
        // match, in the policy's order, found in one pass over the host's candidates (only
        // they are tried: the index finds them).
        let (mut deny, mut private, mut allow) = (None, None, None);
        self.index()
            .candidates(&self.rules, &target.host)
            .visit(|at| {
                // Any deny rule decides; past the first found, nothing in this run matters.
                if deny.is_some_and(|first| at > first) {
                    return ControlFlow::Break(());
                }
                let rule = &self.rules[at];
                if rule.spec.matches(target) {
                    let keep_first = |slot: &mut Option<usize>| {
                        *slot = Some(slot.map_or(at, |first: usize| first.min(at)));
                    };
                    match rule.action {
                        Action::Deny => keep_first(&mut deny),
                        Action::Allow if rule.reach_private => keep_first(&mut private),
                        Action::Allow => keep_first(&mut allow),
                    }
                }
                ControlFlow::Continue(())
            });
        if let Some(at) = deny {
            return Decision::deny(Reason::DeniedByRule, Some(&self.rules[at]));
        }
        // An `allow_private` rule for the name counts wherever it stands among the allow
        // rules that match (a learned allowlist may name the same host plainly first).
        match private.or(allow).map(|at| &self.rules[at]) {
            Some(rule) => Decision::allowed_by(rule),
            None if self.relaying => Decision {
                verdict: Verdict::Allow,
                reason: Reason::Relayed,
                rule: None,
                class: None,
                reach_private: false,
                wildcard: false,
            },
            None if self.learning && !is_invalid(&target.host) => Decision {
                verdict: Verdict::Allow,
                reason: Reason::Learning,
                rule: None,
                class: None,
                reach_private: false,
                wildcard: false,
            },
            None => Decision::deny(Reason::NotAllowed, None),
        }
    }

    /// Turns learn mode on: see [`Policy`]'s `learning`. Names under `.invalid` stay
    /// refused: they never resolve (RFC 6761), so no command needs one, and the live
    /// probe's canary is one.
    pub fn set_learning(&mut self) {
        self.learning = true;
    }

    pub fn is_learning(&self) -> bool {
        self.learning
    }

    /// Turns relaying on: see [`Policy`]'s `relaying`. Deny rules still win.
    pub fn set_relaying(&mut self) {
        self.relaying = true;
    }

    pub fn is_relaying(&self) -> bool {
        self.relaying
    }

    /// Decides whether one resolved address may be dialed for `port`, by the class tables
    /// alone (the pure rules' tests); a connection's addresses are classified by the
    /// routing table ([`Policy::admit_for`], from the upstream pipeline).
    #[cfg(test)]
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn admit(&self, addr: IpAddr, port: u16) -> Decision {
        let addr = canonical_ip(addr);
        self.admit_classified(addr, crate::ipclass::classify(addr), port)
    }

    /// Decides whether one resolved address, already classified (by
    /// `local::classify_here`, which knows this machine's own addresses), may be dialed for
    /// `port`.
    pub fn admit_classified(&self, addr: IpAddr, class: IpClass, port: u16) -> Decision {
        let addr = canonical_ip(addr);
        let candidates = self.index().address_candidates(&self.rules, addr);
        let first = |wanted: &dyn Fn(&Rule) -> bool| {
            candidates
                .first(|at| wanted(&self.rules[at]))
                .map(|at| &self.rules[at])
        };
        self.admit_among(&first, addr, class, port)
    }

    /// [`Policy::admit_classified`] for `addr`, a canonical address, with `first` finding
    /// the first of the rules that may cover it (in the policy's order) that its argument
    /// accepts.
    pub(super) fn admit_among<'a>(
        &'a self,
        first: &FirstRule<'a>,
        addr: IpAddr,
        class: IpClass,
        port: u16,
    ) -> Decision {
        // A deny rule covers the address in any of its spellings; an allow rule opens it
        // only where the connection really ends (see `opens_ip`).
        let covering = |action| {
            first(&|r: &Rule| {
                r.action == action
                    && r.spec.ports.contains(port)
                    && match action {
                        Action::Deny => r.spec.hosts.matches_ip(addr),
                        Action::Allow => r.spec.hosts.opens_ip(addr),
                    }
            })
        };
        let with_class = |d: Decision| Decision {
            class: Some(class),
            ..d
        };
        if let Some(rule) = covering(Action::Deny) {
            return with_class(Decision::deny(Reason::DeniedByRule, Some(rule)));
        }
        // A connect to 0.0.0.0 or :: reaches this machine's loopback, which no deny rule
        // for 127.0.0.0/8 or ::1 would see: no rule opens it.
        if class == IpClass::Unspecified {
            return with_class(Decision::deny(Reason::NonPublicAddress, None));
        }
        if class.is_public() {
            return with_class(Decision {
                verdict: Verdict::Allow,
                reason: Reason::PublicAddress,
                rule: None,
                class: None,
                reach_private: false,
                wildcard: false,
            });
        }
        match covering(Action::Allow) {
            Some(rule) => with_class(Decision {
                verdict: Verdict::Allow,
                reason: Reason::OpenedByRule,
                rule: Some(rule.origin.clone()),
                class: None,
                reach_private: false,
                wildcard: false,
            }),
            None => with_class(Decision::deny(Reason::NonPublicAddress, None)),
        }
    }

    /// [`Policy::admit_classified`] for an address `target` resolved to, where `target` was allowed
    /// by `decision`: an `allow_private` rule also admits the non-public addresses a
    /// private service can have (the rule that opened it is named).
    pub fn admit_for(
        &self,
        decision: &Decision,
        addr: IpAddr,
        class: IpClass,
        port: u16,
    ) -> Decision {
        let admitted = self.admit_classified(addr, class, port);
        // This machine (loopback, or an address of its own) only for a rule naming the host
        // exactly: a wildcard rule would let any name in the zone that says 127.0.0.1
        // (`localhost.corp.test`) reach the host's own services.
        let this_machine = |c| matches!(c, IpClass::Loopback | IpClass::ThisMachine);
        let reachable = admitted.reason == Reason::NonPublicAddress
            && decision.reach_private
            && admitted.class.is_some_and(|c| {
                private_service_class(c) && (!this_machine(c) || !decision.wildcard)
            });
        if !reachable {
            return admitted;
        }
        Decision {
            verdict: Verdict::Allow,
            reason: Reason::OpenedByRule,
            rule: decision.rule.clone(),
            class: admitted.class,
            reach_private: true,
            wildcard: decision.wildcard,
        }
    }
}

/// Where a private service (a mirror, a proxy, a split-horizon name) can live; not where
/// only the machine itself or its cloud is (link-local, metadata), nor no one at all, nor
/// reserved space (`0.0.0.0/8` and `240.0.0.0/4` are routed to the default gateway).
pub fn private_service_class(class: IpClass) -> bool {
    matches!(
        class,
        IpClass::Private
            | IpClass::Loopback
            | IpClass::ThisMachine
            | IpClass::Cgnat
            | IpClass::Documentation
            | IpClass::Benchmarking
    )
}

/// An `allow_private` rule names hosts: for an address, an IP/CIDR rule is the way.
pub(crate) fn check_names_only(spec: &RuleSpec) -> Result<(), String> {
    if spec.hosts.is_address() {
        return Err("allow_private takes names (mirror.corp:443, *.corp.test); \
                    open an address with an IP/CIDR allow rule"
            .into());
    }
    Ok(())
}

/// Whether a host is a name under the reserved `.invalid` top-level domain.
/// Whether a host is a name under `.invalid`, which never resolves (RFC 6761).
pub fn is_invalid(host: &Host) -> bool {
    matches!(host, Host::Name(name) if name == "invalid" || name.ends_with(".invalid"))
}

#[cfg(test)]
mod tests;
