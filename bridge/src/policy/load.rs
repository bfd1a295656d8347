//! Reads allowlist TOML files into a [`Policy`], keeping each rule's file and line.
//!
//! ```toml
//! include = ["base.toml"]          # relative to this file
//! allow = ["registry.test", "*.cdn.test:443", "127.0.0.1:8080"]
//! deny = ["evil.cdn.test"]
//! [hosts]
//! "registry.test" = "127.0.0.1"    # or a list; pins the name, no DNS is asked
//! ```
//!
//! Every error names `file:line` and the reason; unknown keys are errors, so a typo such as
//! `alow = [...]` cannot silently leave a policy empty.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::git::GitScope;
use super::secrets::Secret;
use super::{Action, HttpRule, Policy, Rule, RuleRef, RuleSpec};
use crate::target::{canonical_ip, normalise_host, Host};

/// How deep `include` may nest; deeper is surely a mistake.
const MAX_INCLUDE_DEPTH: usize = 16;

/// An allowlist that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{file}: cannot read allowlist: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}: {reason}")]
    Invalid {
        file: String,
        line: u32,
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowlistFile {
    #[serde(default)]
    include: Vec<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
    /// Allow rules whose names may reach the non-public address their DNS returns.
    #[serde(default)]
    allow_private: Vec<Spanned<String>>,
    /// Package managers whose configured registries are allowed (netbox asks each
    /// tool: `--allow-tool`).
    #[serde(default)]
    tools: Vec<Spanned<String>>,
    /// Host Unix sockets a sandboxed command may connect to (netbox's
    /// `--allow-socket`); `$VAR` and `~/` are expanded by netbox.
    #[serde(default)]
    sockets: Vec<Spanned<String>>,
    #[serde(default)]
    hosts: BTreeMap<String, Spanned<HostAddrs>>,
    /// Ports, besides 443, whose tunnels must be TLS naming their own host.
    #[serde(default)]
    tls_ports: Vec<Spanned<u16>>,
    /// `"require"` (the default) or `"allow-plain"`.
    #[serde(default)]
    tls: Option<Spanned<String>>,
    /// `[[http]]` tables: hosts allowed, whose requests are inspected (http.rs).
    #[serde(default)]
    http: Vec<Spanned<HttpTable>>,
    /// `[[secret]]` tables: credentials swapped in on the wire (secrets.rs).
    #[serde(default)]
    secret: Vec<Spanned<SecretTable>>,
    /// `[[git]]` tables: git hosts, held to the repositories listed (git.rs).
    #[serde(default)]
    git: Vec<Spanned<GitTable>>,
}

/// One `[[git]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GitTable {
    host: String,
    fetch: Option<Vec<String>>,
    push: Option<Vec<String>>,
}

/// One `[[secret]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretTable {
    name: String,
    from: String,
    hosts: Vec<String>,
}

/// One `[[http]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpTable {
    host: String,
    methods: Option<Vec<String>>,
    paths: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum HostAddrs {
    One(String),
    Many(Vec<String>),
}

struct Loader<'a> {
    policy: &'a mut Policy,
    /// Files on the current include chain, to refuse cycles.
    chain: Vec<PathBuf>,
    seen: HashSet<PathBuf>,
}

pub(super) fn load_file(path: &Path, policy: &mut Policy) -> Result<(), PolicyError> {
    let mut loader = Loader {
        policy,
        chain: Vec::new(),
        seen: HashSet::new(),
    };
    loader.load(path, None)
}

impl Loader<'_> {
    // Whole: the file read, then each of its tables taken in the file's order, an include
    // loaded at its place; the tables share the loader's state and the file's line map.
    fn load(&mut self, path: &Path, included_at: Option<(&str, u32)>) -> Result<(), PolicyError> {
        let shown = path.display().to_string();
        let canonical = std::fs::canonicalize(path).map_err(|source| match included_at {
            Some((file, line)) => PolicyError::Invalid {
                file: file.to_owned(),
                line,
                reason: format!("cannot read included allowlist {shown}: {source}"),
            },
            None => PolicyError::Read {
                file: shown.clone(),
                source,
            },
        })?;
        if self.chain.contains(&canonical) || self.chain.len() >= MAX_INCLUDE_DEPTH {
            let (file, line) = included_at.unwrap_or((&shown, 1));
            return Err(PolicyError::Invalid {
                file: file.to_owned(),
                line,
                reason: format!("include of {shown} loops or nests too deep"),
            });
        }
        // Every route a file is reached by is named: a later load takes each again.
        self.policy.named_files.push(path.to_owned());
        if !self.seen.insert(canonical.clone()) {
            // Included twice through different routes: its rules are already in.
            return Ok(());
        }
        let text = crate::small_file::read_small_file(&canonical, MAX_POLICY_FILE_BYTES).map_err(
            |source| PolicyError::Read {
                file: shown.clone(),
                source,
            },
        )?;
        let file: Arc<str> = Arc::from(shown.as_str());
        let lines = LineStarts::of(&text);
        let at = |offset: usize| lines.line_of(offset);
        let invalid = |line: u32, reason: String| PolicyError::Invalid {
            file: shown.clone(),
            line,
            reason,
        };
        let parsed: AllowlistFile = toml::from_str(&text).map_err(|e| {
            let line = e.span().map_or(1, |span| at(span.start));
            invalid(line, e.message().trim().to_owned())
        })?;

        self.policy.files.push(canonical.clone());
        self.chain.push(canonical);
        for include in &parsed.include {
            let line = at(include.span().start);
            let target = resolve_relative(path, include.get_ref());
            self.load(&target, Some((&shown, line)))?;
        }
        self.chain.pop();

        let rules = [
            (Action::Deny, &parsed.deny, false),
            (Action::Allow, &parsed.allow, false),
            (Action::Allow, &parsed.allow_private, true),
        ];
        for (action, texts, reach_private) in rules {
            for text in texts {
                let line = at(text.span().start);
                let spec = RuleSpec::parse(text.get_ref(), action)
                    .map_err(|reason| invalid(line, format!("{action} rule: {reason}")))?;
                if reach_private {
                    super::check_names_only(&spec).map_err(|reason| invalid(line, reason))?;
                }
                self.policy
                    .push_rule(Rule {
                        action,
                        spec,
                        origin: RuleRef {
                            file: Arc::clone(&file),
                            line,
                            text: text.get_ref().as_str().into(),
                        },
                        reach_private,
                    })
                    .map_err(|reason| invalid(line, reason))?;
            }
        }
        for table in &parsed.http {
            let line = at(table.span().start);
            let HttpTable {
                host,
                methods,
                paths,
            } = table.get_ref();
            let origin = RuleRef {
                file: Arc::clone(&file),
                line,
                text: host.as_str().into(),
            };
            let rule = HttpRule::parse(host, methods.as_deref(), paths.as_deref(), origin)
                .map_err(|reason| invalid(line, format!("[[http]] {host:?}: {reason}")))?;
            self.policy
                .push_http_rule(rule)
                .map_err(|reason| invalid(line, reason))?;
        }
        for table in &parsed.git {
            let line = at(table.span().start);
            let GitTable { host, fetch, push } = table.get_ref();
            let origin = RuleRef {
                file: Arc::clone(&file),
                line,
                text: host.as_str().into(),
            };
            let rule = GitScope::parse(fetch.as_deref(), push.as_deref())
                .and_then(|scope| HttpRule::git(host, scope, origin))
                .map_err(|reason| invalid(line, format!("[[git]] {host:?}: {reason}")))?;
            self.policy
                .push_http_rule(rule)
                .map_err(|reason| invalid(line, reason))?;
        }
        for table in &parsed.secret {
            let line = at(table.span().start);
            let SecretTable { name, from, hosts } = table.get_ref();
            let origin = RuleRef {
                file: Arc::clone(&file),
                line,
                text: name.as_str().into(),
            };
            Secret::parse(name, from, hosts, path.parent(), origin)
                .and_then(|secret| self.policy.add_secret(secret))
                .map_err(|reason| invalid(line, format!("[[secret]] {name:?}: {reason}")))?;
        }
        for port in &parsed.tls_ports {
            if *port.get_ref() == 0 {
                return Err(invalid(at(port.span().start), "tls_ports: port 0".into()));
            }
            self.policy.tls_ports.insert(*port.get_ref());
        }
        if let Some(tls) = &parsed.tls {
            match tls.get_ref().as_str() {
                "require" => {}
                "allow-plain" => self.policy.tls_plain_ok = true,
                other => {
                    return Err(invalid(
                        at(tls.span().start),
                        format!("tls = {other:?}: use \"require\" or \"allow-plain\""),
                    ))
                }
            }
        }
        for tool in &parsed.tools {
            let line = at(tool.span().start);
            self.policy.tools.push((
                tool.get_ref().clone(),
                RuleRef {
                    file: Arc::clone(&file),
                    line,
                    text: tool.get_ref().as_str().into(),
                },
            ));
        }
        for socket in &parsed.sockets {
            let line = at(socket.span().start);
            self.policy.sockets.push((
                socket.get_ref().clone(),
                RuleRef {
                    file: Arc::clone(&file),
                    line,
                    text: socket.get_ref().as_str().into(),
                },
            ));
        }
        for (name, addrs) in &parsed.hosts {
            let line = at(addrs.span().start);
            let (name, addrs) =
                parse_pin(name, addrs.get_ref()).map_err(|reason| invalid(line, reason))?;
            if !self.policy.pin_host(name.clone(), addrs) {
                return Err(invalid(line, format!("[hosts] {name:?} is pinned twice")));
            }
        }
        Ok(())
    }
}

fn parse_pin(name: &str, addrs: &HostAddrs) -> Result<(String, Vec<IpAddr>), String> {
    let name = match normalise_host(name) {
        Ok(Host::Name(name)) => name,
        Ok(Host::Ip(_)) => return Err(format!("[hosts] key {name:?} is an address, not a name")),
        Err(e) => return Err(format!("[hosts] key: {e}")),
    };
    let texts: Vec<&String> = match addrs {
        HostAddrs::One(one) => vec![one],
        HostAddrs::Many(many) => many.iter().collect(),
    };
    if texts.is_empty() {
        return Err(format!("[hosts] {name:?} lists no address"));
    }
    let addrs = texts
        .into_iter()
        .map(|t| {
            let t = t.trim();
            let bare = match t.strip_prefix('[') {
                Some(inner) => inner.strip_suffix(']').unwrap_or(t),
                None => t,
            };
            bare.parse::<IpAddr>()
                .map(canonical_ip)
                .map_err(|_| format!("[hosts] {name:?}: {t:?} is not an IP address"))
        })
        .collect::<Result<_, _>>()?;
    Ok((name, addrs))
}

fn resolve_relative(including: &Path, include: &str) -> PathBuf {
    let include = Path::new(include);
    if include.is_absolute() {
        return include.to_owned();
    }
    including
        .parent()
        .map_or_else(|| include.to_owned(), |dir| dir.join(include))
}

/// Where each line of a file starts: a rule's line is found by a binary search, not by
/// counting the newlines before it (which, for every rule of a 12 MB allowlist, took the
/// load quadratic).
struct LineStarts(Vec<usize>);

impl LineStarts {
    fn of(text: &str) -> LineStarts {
        let starts = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', text.as_bytes()).map(|at| at + 1))
            .collect();
        LineStarts(starts)
    }

    /// 1-based line of a byte offset.
    fn line_of(&self, offset: usize) -> u32 {
        let line = self.0.partition_point(|&start| start <= offset);
        u32::try_from(line.max(1)).unwrap_or(u32::MAX)
    }
}

/// Largest allowlist file read, in bytes: room for a blocklist of ~2 million names (a
/// million `"hN.example.test:443"` rules is 30 MB). A running bridge reads its files again
/// at each reload: `/dev/zero` in a file's place must not eat its memory, nor a FIFO hold
/// the reload and the bridge's exit forever (`small_file` refuses both).
const MAX_POLICY_FILE_BYTES: u64 = 64 << 20;
