//! CMD's environment: the caller's, with every proxy setting pointed at the bridge's
//! listener inside the sandbox and a temp dir that exists.
//!
//! `NO_PROXY` is set empty on purpose: a `NO_PROXY=localhost` inherited from the caller (as
//! codex and srt set it) would send loopback traffic around the bridge, and inside the
//! namespace loopback is the sandbox's own, where nothing but the bridge listens.

use std::ffi::OsString;

/// What CMD's environment starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvBase {
    /// The caller's environment (the default).
    Inherit,
    /// Only PATH, HOME (the private /tmp), TERM and LANG.
    Clean,
}

/// Variables a clean environment keeps (or gets a default for).
fn clean_base() -> Vec<(OsString, OsString)> {
    let keep = |name: &str, default: &str| {
        let value = std::env::var_os(name).unwrap_or_else(|| OsString::from(default));
        (OsString::from(name), value)
    };
    let mut env = vec![
        keep("PATH", "/usr/local/bin:/usr/bin:/bin"),
        (OsString::from("HOME"), OsString::from("/tmp")),
        keep("LANG", "C.UTF-8"),
    ];
    if let Some(term) = std::env::var_os("TERM") {
        env.push((OsString::from("TERM"), term));
    }
    env
}

/// Parses `--env` entries: `KEY=VALUE` sets, a bare `KEY` passes the caller's value
/// through (and is dropped if the caller has none).
pub fn parse_env_flags(flags: &[String]) -> Result<Vec<(OsString, OsString)>, String> {
    let mut out = Vec::new();
    for flag in flags {
        match flag.split_once('=') {
            Some((key, value)) => out.push((valid_key(key)?, OsString::from(value))),
            None => {
                let key = valid_key(flag)?;
                if let Some(value) = std::env::var_os(&key) {
                    out.push((key, value));
                }
            }
        }
    }
    Ok(out)
}

/// Parses an env file: `KEY=VALUE` lines, `#` comments, blank lines; errors name the line.
pub fn parse_env_file(text: &str) -> Result<Vec<(OsString, OsString)>, (usize, String)> {
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err((index + 1, "expected KEY=VALUE".into()));
        };
        let key = valid_key(key.trim()).map_err(|e| (index + 1, e))?;
        out.push((key, OsString::from(value)));
    }
    Ok(out)
}

fn valid_key(key: &str) -> Result<OsString, String> {
    let ok = !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(OsString::from(key))
    } else {
        Err(format!("{key:?} is not a valid variable name"))
    }
}

/// The environment CMD starts with: the base, the proxy settings, then `extra` (from
/// `--env` and `--env-file`, which win).
/// `trust_bundle`: when inspecting, the sandbox's trust bundle (system roots and the
/// session CA), which every variable a TLS client reads for its CA file is pointed at.
pub fn sandbox_env(
    proxy_port: u16,
    base: EnvBase,
    trust_bundle: Option<&str>,
    extra: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let http = format!("http://127.0.0.1:{proxy_port}");
    let socks = format!("socks5h://127.0.0.1:{proxy_port}");
    let java = format!(
        "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort={proxy_port} \
         -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort={proxy_port} -Dhttp.nonProxyHosts="
    );
    let mut overrides: Vec<(&str, String)> = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        overrides.push((name, http.clone()));
    }
    for name in ["ALL_PROXY", "all_proxy"] {
        overrides.push((name, socks.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        overrides.push((name, String::new()));
    }
    for name in [
        "npm_config_proxy",
        "npm_config_https_proxy",
        "YARN_HTTP_PROXY",
        "YARN_HTTPS_PROXY",
        "PIP_PROXY",
        "CARGO_HTTP_PROXY",
        "GIT_HTTP_PROXY",
    ] {
        overrides.push((name, http.clone()));
    }
    // Under --clean-env, netbox's properties alone: the caller's options may carry a
    // secret (`-Dhttp.proxyPassword=…`) the clean environment is there to leave out.
    // Otherwise CMD inherits the caller's JAVA_TOOL_OPTIONS anyway, so keeping them before
    // netbox's (which win, being later) gives CMD nothing it would not have.
    let java_opts = match (base, std::env::var("JAVA_TOOL_OPTIONS")) {
        (EnvBase::Inherit, Ok(existing)) if !existing.is_empty() => format!("{existing} {java}"),
        _ => java,
    };
    overrides.push(("JAVA_TOOL_OPTIONS", java_opts));
    if let Some(bundle) = trust_bundle {
        for name in crate::plan::inspection::CA_FILE_VARS {
            overrides.push((name, bundle.to_owned()));
        }
    }
    overrides.push(("TMPDIR", "/tmp".into()));
    overrides.push(("NETBOX_SANDBOX", "1".into()));

    let start = match base {
        EnvBase::Inherit => std::env::vars_os().collect(),
        EnvBase::Clean => clean_base(),
    };
    let mut env: Vec<(OsString, OsString)> = start
        .into_iter()
        .filter(|(k, _)| !overrides.iter().any(|(name, _)| k == name))
        .collect();
    env.extend(
        overrides
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    for (key, value) in extra {
        env.retain(|(k, _)| k != key);
        env.push((key.clone(), value.clone()));
    }
    env
}

/// A secret as CMD's environment carries it: its variable, the placeholder in it, the hosts
/// its value goes to (for git's credential helpers), and the variable of netbox's own the
/// value is read from, if it is (left out of CMD's). One a shared bridge holds has none.
#[derive(Debug, Clone)]
pub struct SecretVar {
    pub name: String,
    pub placeholder: String,
    pub hosts: Vec<bridge::policy::secrets::SecretHost>,
    pub read_from: Option<String>,
}

impl SecretVar {
    pub fn of(secret: &bridge::policy::secrets::Secret) -> SecretVar {
        SecretVar {
            name: secret.name.clone(),
            placeholder: secret.placeholder.clone(),
            hosts: secret.hosts.clone(),
            read_from: match &secret.from {
                bridge::policy::secrets::SecretSource::Env(var) => Some(var.clone()),
                bridge::policy::secrets::SecretSource::File(_) => None,
            },
        }
    }
}

/// `env` with each secret's variable holding its placeholder (whatever `--env` or the
/// caller gave it), and the variable a secret is read from left out: CMD holds no value.
pub fn with_placeholders(
    mut env: Vec<(OsString, OsString)>,
    secrets: &[SecretVar],
) -> Vec<(OsString, OsString)> {
    env.retain(|(name, _)| {
        !secrets
            .iter()
            .any(|s| name == s.name.as_str() || s.read_from.as_deref().is_some_and(|v| name == v))
    });
    env.extend(
        secrets
            .iter()
            .map(|s| (OsString::from(&s.name), OsString::from(&s.placeholder))),
    );
    git_credential_helpers(&mut env, secrets);
    env
}

/// For git over HTTPS to each host a secret names one by one: a credential helper (in
/// git's `GIT_CONFIG_*` variables, after any the caller set) that answers with the secret's
/// placeholder, which the bridge swaps on the wire. A host's own helpers come first in git's
/// order only if they are more specific; these are scoped to the host's URL.
fn git_credential_helpers(env: &mut Vec<(OsString, OsString)>, secrets: &[SecretVar]) {
    use bridge::policy::HostMatcher;
    let mut entries = Vec::new();
    for secret in secrets {
        let helper = format!(
            "!f() {{ test \"$1\" = get && printf 'username=netbox\\npassword=%s\\n' \"${}\"; }}; f",
            secret.name
        );
        for host in &secret.hosts {
            let HostMatcher::Exact(name) = &host.hosts else {
                continue;
            };
            for port in host.ports_for_clients() {
                // A port named on purpose may be spoken to in the clear or over TLS.
                let urls = match port {
                    443 => vec![format!("https://{name}")],
                    80 => vec![format!("http://{name}")],
                    _ => vec![
                        format!("https://{name}:{port}"),
                        format!("http://{name}:{port}"),
                    ],
                };
                for url in urls {
                    entries.push((format!("credential.{url}.helper"), helper.clone()));
                }
            }
        }
    }
    if entries.is_empty() {
        return;
    }
    let count_at = env.iter().position(|(k, _)| k == "GIT_CONFIG_COUNT");
    let first = count_at
        .and_then(|i| env[i].1.to_str()?.parse::<usize>().ok())
        .unwrap_or(0);
    if let Some(i) = count_at {
        env.remove(i);
    }
    for (index, (key, value)) in entries.iter().enumerate() {
        env.push((
            OsString::from(format!("GIT_CONFIG_KEY_{}", first + index)),
            OsString::from(key),
        ));
        env.push((
            OsString::from(format!("GIT_CONFIG_VALUE_{}", first + index)),
            OsString::from(value),
        ));
    }
    env.push((
        OsString::from("GIT_CONFIG_COUNT"),
        OsString::from((first + entries.len()).to_string()),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_point_at_the_bridge_and_no_proxy_is_empty() {
        let env = sandbox_env(3128, EnvBase::Inherit, None, &[]);
        let get = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("HTTPS_PROXY").as_deref(), Some("http://127.0.0.1:3128"));
        assert_eq!(get("http_proxy").as_deref(), Some("http://127.0.0.1:3128"));
        assert_eq!(
            get("ALL_PROXY").as_deref(),
            Some("socks5h://127.0.0.1:3128")
        );
        assert_eq!(get("NO_PROXY").as_deref(), Some(""));
        assert_eq!(get("TMPDIR").as_deref(), Some("/tmp"));
        assert!(get("JAVA_TOOL_OPTIONS")
            .unwrap()
            .contains("-Dhttps.proxyPort=3128"));
        assert_eq!(env.iter().filter(|(k, _)| k == "NO_PROXY").count(), 1);
    }

    #[test]
    fn clean_env_keeps_only_the_basics_and_the_extras() {
        let extra = vec![(OsString::from("TOKEN"), OsString::from("given"))];
        let env = sandbox_env(3128, EnvBase::Clean, None, &extra);
        let keys: Vec<String> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert!(keys.contains(&"PATH".into()) && keys.contains(&"HTTPS_PROXY".into()));
        assert!(keys.contains(&"TOKEN".into()));
        let home = env.iter().find(|(k, _)| k == "HOME").unwrap();
        assert_eq!(home.1, "/tmp");
        assert!(keys.len() < 30, "{keys:?}");
    }

    #[test]
    fn env_files_and_flags_are_checked() {
        let parsed = parse_env_file("# comment\n\nA=1\nB = two words\n").unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parse_env_file("A=1\nnot a pair\n").unwrap_err().0, 2);
        assert!(parse_env_file("1X=1").is_err());
        assert!(parse_env_flags(&["BAD-NAME=1".into()]).is_err());
        let flags = parse_env_flags(&["A=b=c".into()]).unwrap();
        assert_eq!(flags[0].1, "b=c");
    }
}
