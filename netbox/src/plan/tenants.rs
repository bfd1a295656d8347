//! The tenants file of a shared bridge (`netbox bridge --tenants FILE`): who may use it and
//! under which policy. Every mistake is reported, naming the file and the tenant, before
//! anything listens.
//!
//! ```toml
//! [tenants.team-a]
//! allowlist = ["team-a.toml"]       # relative to this file; `include` for shared parts
//! secrets = ["sha256:9f86…"]        # printf %s TOKEN | sha256sum
//! listen = ["127.0.0.1:3131"]       # optional: this listener's clients are team-a's
//! max_connections = 256             # optional
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bridge::serve::listen::ListenAddr;
use bridge::session::tenants::{parse_digest, SecretDigest};
use bridge::Policy;
use serde::Deserialize;

use crate::cli::PolicyArgs;
use crate::error::WrapperError;

/// Largest tenants file read, in bytes.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// Longest tenant name: it is a Basic user name and part of every log line's session.
const MAX_NAME_BYTES: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tenants: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    allowlist: Vec<PathBuf>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    listen: Vec<String>,
    /// Names a client certificate may carry (its DNS or URI subject alternative names)
    /// to name this tenant, on listeners with `--client-ca`.
    #[serde(default)]
    client_names: Vec<String>,
    max_connections: Option<usize>,
}

/// One tenant, checked: its name, policy, secrets' digests, own listeners and budget.
pub struct TenantPlan {
    pub name: String,
    pub policy: Policy,
    pub digests: Vec<SecretDigest>,
    pub listen: Vec<ListenAddr>,
    /// Names a client certificate may carry to name it, as compared (DNS names lowercase).
    pub client_names: Vec<String>,
    pub max_connections: usize,
    /// What the tools its allowlists name added, for the start-up lines.
    pub tool_lines: Vec<String>,
}

/// The digest of the empty string: what `printf %s "$token" | sha256sum` prints when
/// `$token` was never set. As a secret it would let in anyone who sends no token.
const EMPTY_DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A tenant's budget when the file names none: an equal share of the bridge's, so that no
/// tenant alone can take every place.
pub fn share_of(bridge_connections: usize, tenants: usize) -> usize {
    (bridge_connections / tenants.max(1)).max(1)
}

/// Reads and checks the tenants file. `bridge_connections` is `--max-connections`: no
/// tenant may have more. A tenant that names no budget gets `share`, or the share of this
/// file's tenants when `None` (at start; a reload keeps the share it started with, so that
/// a tenant added does not change the others' budgets).
// Whole: the file read, then each tenant's table checked field by field in the file's order.
pub fn load(
    path: &Path,
    bridge_connections: usize,
    share: Option<usize>,
    cwd: &Path,
    fetches: &crate::plan::tools::fetch::Fetches,
) -> Result<Vec<TenantPlan>, WrapperError> {
    let mistake =
        |reason: String| WrapperError::Usage(format!("tenants file {}: {reason}", path.display()));
    let text = super::read_small_file(path, MAX_FILE_BYTES)
        .map_err(|e| mistake(format!("cannot read it: {e}")))?;
    let file: File = toml::from_str(&text).map_err(|e| mistake(one_line(&e.to_string())))?;
    if file.tenants.is_empty() {
        return Err(mistake("it names no tenant ([tenants.NAME] tables)".into()));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let share = share.unwrap_or_else(|| share_of(bridge_connections, file.tenants.len()));
    let mut plans: Vec<TenantPlan> = Vec::new();
    for (name, entry) in file.tenants {
        let mistake = |reason: String| mistake(format!("tenant {name:?}: {reason}"));
        check_name(&name).map_err(mistake)?;
        if let Some(same) = plans.iter().find(|p| p.name.eq_ignore_ascii_case(&name)) {
            return Err(mistake(format!(
                "{:?} is the same name but for case: name tenants apart",
                same.name
            )));
        }
        if entry.allowlist.is_empty() {
            return Err(mistake(
                "give it an allowlist (allowlist = [\"FILE\"]); a tenant has no default policy"
                    .into(),
            ));
        }
        if entry.secrets.is_empty() && entry.listen.is_empty() && entry.client_names.is_empty() {
            return Err(mistake(
                "no client could name it: give it secrets, client_names, a listener of its \
                 own, or more than one of these"
                    .into(),
            ));
        }
        let client_names = entry
            .client_names
            .iter()
            .map(|n| client_name(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(mistake)?;
        if entry
            .secrets
            .iter()
            .any(|s| s.eq_ignore_ascii_case(&format!("sha256:{EMPTY_DIGEST}")))
        {
            return Err(mistake(
                "a secret is the digest of the empty string (was $token unset? `set -u` \
                 catches it): make a token and hash that"
                    .into(),
            ));
        }
        let digests = entry
            .secrets
            .iter()
            .map(|s| parse_digest(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(mistake)?;
        let listen = entry
            .listen
            .iter()
            .map(|a| match ListenAddr::parse_network(a) {
                Ok(addr) if !addr.is_loopback_or_unix() => Err(format!(
                    "listen {a:?}: a tenant's own listener asks no credentials, so it listens \
                     on loopback or unix: only"
                )),
                parsed => parsed.map_err(|e| e.to_string()),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(mistake)?;
        let max_connections = entry.max_connections.unwrap_or(share);
        if max_connections == 0 || max_connections > bridge_connections {
            return Err(mistake(format!(
                "max_connections must be 1 to {bridge_connections} (the bridge's \
                 --max-connections)"
            )));
        }
        let args = PolicyArgs {
            allowlist: entry.allowlist.iter().map(|f| base.join(f)).collect(),
            allow: Vec::new(),
            deny: Vec::new(),
            allow_private: Vec::new(),
            allow_tool: Vec::new(),
            private_ok: false,
            inspect: false,
            upstream_ca: Vec::new(),
            secret: Vec::new(),
        };
        fetches.for_tenant(&name);
        let (mut policy, tool_lines, _) =
            super::policy::load_policy_with_tools(&args, cwd, &[cwd.to_owned()], &[], fetches)
                .map_err(|e| mistake(e.to_string()))?;
        // A bridge holds the values of its tenants' secrets itself: read now, at each load,
        // so that a value changed at its source takes effect with a reload.
        policy.read_secret_values().map_err(mistake)?;
        plans.push(TenantPlan {
            name,
            policy,
            digests,
            listen,
            client_names,
            max_connections,
            tool_lines,
        });
    }
    Ok(plans)
}

/// A letter or digit, then letters, digits, `.`, `_` and `-`: a name that reads the same
/// in a log line, a Basic user name and a shell, and is never `.` or `..`.
fn check_name(name: &str) -> Result<(), String> {
    let fits = name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if fits {
        Ok(())
    } else {
        Err(format!(
            "a tenant's name is 1 to {MAX_NAME_BYTES} letters, digits, '.', '_' or '-', \
             starting with a letter or digit"
        ))
    }
}

/// Longest client name: a DNS name's limit.
const MAX_CLIENT_NAME_BYTES: usize = 253;

/// A client certificate's name as it is compared, with its type (as
/// `bridge::serve::listener_tls::client_names` gives a certificate's): a URI (it has a scheme:
/// `spiffe://corp.test/ci`) as written, else a DNS name in lower case and without a final
/// dot; printable ASCII, no spaces, no wildcard.
fn client_name(name: &str) -> Result<String, String> {
    let fits = !name.is_empty()
        && name.len() <= MAX_CLIENT_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_graphic())
        && !name.starts_with('*');
    let invalid = || {
        format!(
            "client name {name:?}: a DNS name or a URI with a scheme, 1 to \
             {MAX_CLIENT_NAME_BYTES} printable characters, no wildcard"
        )
    };
    if !fits {
        return Err(invalid());
    }
    if bridge::serve::listener_tls::has_scheme(name) {
        return Ok(format!("uri:{name}"));
    }
    let dns = name.trim_end_matches('.').to_ascii_lowercase();
    let label_ok =
        |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !dns.split('.').all(label_ok) {
        return Err(invalid());
    }
    Ok(format!("dns:{dns}"))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn load_text(text: &str) -> Result<Vec<TenantPlan>, String> {
        let dir = tempfile_dir();
        write(&dir, "a.toml", "allow = [\"a.test:443\"]\n");
        let path = write(&dir, "tenants.toml", text);
        let loaded = load(
            &path,
            16,
            None,
            &dir,
            &crate::plan::tools::fetch::Fetches::new(),
        )
        .map_err(|e| e.to_string());
        std::fs::remove_dir_all(&dir).unwrap();
        loaded
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "netbox-tenants-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const DIGEST: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_tenant_has_a_policy_from_its_own_files_and_a_way_to_be_named() {
        let plans = load_text(&format!(
            "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"{DIGEST}\"]\n"
        ))
        .unwrap();
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].name, "team-a");
        assert_eq!(plans[0].policy.allow_count(), 1);
        assert_eq!(plans[0].max_connections, 16);
    }

    #[test]
    fn a_tenants_file_past_the_limit_is_refused_not_cut() {
        let head =
            format!("[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"{DIGEST}\"]\n");
        let line = "max_connections = 1";
        let pad = usize::try_from(MAX_FILE_BYTES).unwrap() - head.len() - line.len();
        // Cut at the limit, `max_connections = 16` would read as 1.
        let text = format!("{head}#{}\n{line}6\n", "x".repeat(pad - 2));
        let error = load_text(&text).err().unwrap_or_default();
        assert!(error.contains("larger than"), "{error}");
    }

    #[test]
    fn a_tenant_without_a_budget_gets_a_share_of_the_bridges() {
        let plans = load_text(&format!(
            "[tenants.a]\nallowlist = [\"a.toml\"]\nsecrets = [\"{DIGEST}\"]\n\
             [tenants.b]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\n\
             [tenants.c]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\n"
        ))
        .unwrap();
        // 16 places among three: five each.
        assert!(plans.iter().all(|p| p.max_connections == 5));
    }

    #[test]
    fn mistakes_name_the_tenant_and_what_to_do() {
        let cases = [
            ("[tenants.team-a]\nsecrets = []\n", "allowlist"),
            ("[tenants.team-a]\nallowlist = [\"a.toml\"]\n", "no client could name it"),
            (
                "[tenants.\"a b\"]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\n",
                "letters, digits",
            ),
            (
                "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"plain-token\"]\n",
                "sha256:HEX",
            ),
            (
                "[tenants.team-a]\nallowlist = [\"missing.toml\"]\nlisten = [\"127.0.0.1:0\"]\n",
                "missing.toml",
            ),
            (
                "[tenants.team-a]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\nextra = 1\n",
                "unknown field",
            ),
            ("[tenants]\n", "names no tenant"),
            (
                "[tenants.\"..\"]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\n",
                "starting with a letter or digit",
            ),
            (
                "[tenants.team-a]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\n\
                 [tenants.Team-A]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\n",
                "but for case",
            ),
            (
                "[tenants.team-a]\nallowlist = [\"a.toml\"]\nlisten = [\"127.0.0.1:0\"]\n\
                 max_connections = 17\n",
                "1 to 16",
            ),
            (
                "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"sha256:\
                 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"]\n",
                "empty string",
            ),
        ];
        for (text, said) in cases {
            let error = load_text(text).err().unwrap_or_default();
            assert!(error.contains(said), "{text:?}: {error}");
            assert!(error.contains("tenants file"), "{error}");
        }
    }
}
