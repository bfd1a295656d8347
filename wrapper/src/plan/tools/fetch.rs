//! Reading a registry's own document (a sparse index's `config.json`, a simple index's
//! page) at start-up, to learn where it serves files from.
//!
//! This is a request from the host, before the sandbox, to a URL a workspace file may name
//! (one an earlier command may have written). So it is made as the bridge would make it
//! for a sandboxed client ([`bridge::fetch`]): judged by the run's policy with the rule
//! the tool would get, the name looked up by the bridge's resolver (pins, then DNS as the
//! bridge is told: never the host's getaddrinfo), every address classified by the routing
//! table (this machine's own public addresses are not public) and admitted by the
//! policy's address rules, then dialed by the bridge's dialer. HTTPS only, no redirect,
//! no proxy, at most 4 MiB, within 3 s.
//!
//! It runs before netbox forks (STYLE.md rule 13), so it leaves no thread: the bridge's
//! code runs on a current-thread tokio runtime on this thread, made for the one fetch and
//! dropped after it. Such a runtime starts a thread only for blocking work
//! (`spawn_blocking`, `tokio::fs`, tokio's own name lookups), which nothing on this path
//! asks for (hickory's resolver, rustls and hyper make no blocking calls through it), and
//! dropping it joins any it started. `tests::a_fetch_leaves_no_thread_behind` checks it.

use std::sync::OnceLock;

use super::Context;

/// How the bridge this process serves looks names up (`netbox bridge --dns`); the
/// system's resolver configuration otherwise, as a run's bridge has.
static DNS: OnceLock<bridge::DnsConfig> = OnceLock::new();

/// Makes every later fetch look names up as `dns` says: the bridge's own setting, given
/// before any tool is asked. The first setting stays.
pub fn resolve_as(dns: bridge::DnsConfig) {
    let _ = DNS.set(dns);
}

/// The origin shown for the rule a fetch is judged with.
const RULE_ORIGIN: &str = "--allow-tool (the registry it names)";

/// CA files read at most, in bytes (a system bundle is a few hundred KiB).
const MAX_CA_BYTES: u64 = 4 << 20;

/// Reads `url`, trusting only `cainfo` (a PEM file) if the tool names one, else the
/// system's CAs. It is judged as a sandboxed client's request would be under the run's
/// policy plus the rule the tool's registry gets: one that may reach a non-public address
/// (`allow_private`) with `may_be_private` (the user said the registries are internal, and
/// the user's own settings name this one), a plain one otherwise. The error says why it
/// was not read, for the start-up line.
pub fn https_document(
    url: &str,
    cainfo: Option<&str>,
    ctx: &Context<'_>,
    may_be_private: bool,
) -> Result<String, String> {
    let rule = super::rule_of(url)
        .filter(|_| url.trim_start().starts_with("https://"))
        .ok_or_else(|| "not an https:// URL to a name netbox reads".to_owned())?;
    let mut judged = ctx.policy.clone();
    let added = if may_be_private {
        judged.add_private_rule(&rule, RULE_ORIGIN)
    } else {
        judged.add_rule(bridge::policy::Action::Allow, &rule, RULE_ORIGIN)
    };
    added?;
    let ca = match cainfo.map(std::path::Path::new) {
        // Read from where netbox runs (the workspace), it could be any file there.
        Some(path) if !path.is_absolute() => {
            return Err(format!(
                "its CA file {} is not an absolute path",
                path.display()
            ))
        }
        Some(path) => Some(
            crate::plan::read_small_file(path, MAX_CA_BYTES)
                .map_err(|e| format!("cannot read its CA file {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let dns = DNS.get().cloned().unwrap_or_default();
    // One thread, no blocking pool started: see the module's comment.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the fetch: {e}"))?;
    let read = runtime.block_on(bridge::fetch::https_document(
        url.trim(),
        &judged,
        &dns,
        ca.as_deref().map(str::as_bytes),
    ));
    drop(runtime);
    read.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
