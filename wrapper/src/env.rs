//! CMD's environment: the caller's, with every proxy setting pointed at the bridge's
//! listener inside the sandbox and a temp dir that exists.
//!
//! `NO_PROXY` is set empty on purpose: a `NO_PROXY=localhost` inherited from the caller (as
//! codex and srt set it) would send loopback traffic around the bridge, and inside the
//! namespace loopback is the sandbox's own, where nothing but the bridge listens.

use std::ffi::OsString;

/// The environment CMD starts with.
pub fn sandbox_env(proxy_port: u16) -> Vec<(OsString, OsString)> {
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
    let java_opts = match std::env::var("JAVA_TOOL_OPTIONS") {
        Ok(existing) if !existing.is_empty() => format!("{existing} {java}"),
        _ => java,
    };
    overrides.push(("JAVA_TOOL_OPTIONS", java_opts));
    overrides.push(("TMPDIR", "/tmp".into()));
    overrides.push(("NETBOX_SANDBOX", "1".into()));

    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !overrides.iter().any(|(name, _)| k == name))
        .collect();
    env.extend(
        overrides
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_point_at_the_bridge_and_no_proxy_is_empty() {
        let env = sandbox_env(3128);
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
}
