//! Reading a registry's own document (a sparse index's `config.json`, a simple index's
//! page) from the host at start-up, to learn where it serves files from.

use super::{query, Context};

/// Reads `url` with curl (the host's own client), trusting `cainfo` if the tool does. This
/// is a request from the host, before the sandbox, to a URL a workspace file may name
/// (one an earlier command may have written): HTTPS only, to a name that is pinned by
/// the policy or resolves to public addresses only (or, with `may_be_private`, to the
/// non-public ones of a registry the user's own settings name and said is internal), and
/// curl is held to the addresses checked (no second lookup).
pub fn https_document(
    url: &str,
    cainfo: Option<&str>,
    ctx: &Context<'_>,
    may_be_private: bool,
) -> Option<String> {
    use std::net::ToSocketAddrs;
    let (policy, untrusted) = (ctx.policy, ctx.untrusted);
    if !url.starts_with("https://") {
        return None;
    }
    let rule = super::rule_of(url)?;
    let (host, port) = rule.rsplit_once(':')?;
    if host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let name = bridge::target::Host::Name(host.to_owned());
    let addrs: Vec<std::net::IpAddr> = match policy.pinned(&name) {
        Some(pinned) => pinned.to_vec(),
        None => {
            let found: Vec<_> = (host, port.parse::<u16>().ok()?)
                .to_socket_addrs()
                .ok()?
                .map(|a| a.ip())
                .collect();
            let non_public = found
                .iter()
                .any(|a| !bridge::ipclass::classify(*a).is_public());
            if found.is_empty() || (non_public && !may_be_private) {
                return None;
            }
            found
        }
    };
    // -q first: no ~/.curlrc; no proxy (it would look the name up itself); no URL
    // globbing (`[1-5]` in a URL would be five requests).
    let mut args: Vec<String> = [
        "-q",
        "-fsS",
        "-g",
        "--max-time",
        "3",
        "--proto",
        "=https",
        "--max-redirs",
        "0",
        "--max-filesize",
        "4M",
        "--noproxy",
        "*",
    ]
    .map(String::from)
    .to_vec();
    if let Some(ca) = cainfo {
        args.extend(["--cacert".to_owned(), ca.to_owned()]);
    }
    for addr in addrs {
        let addr = match addr {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        args.extend(["--resolve".to_owned(), format!("{host}:{port}:{addr}")]);
    }
    args.push(url.to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    query::output("curl", &args, untrusted)
}
