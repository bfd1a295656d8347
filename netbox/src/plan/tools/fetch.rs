//! Reading a registry's own document (a sparse index's `config.json`, a simple index's
//! page) at start-up, to learn where it serves files from.
//!
//! This is a request from the host, before the sandbox, to a URL a workspace file may name
//! (one an earlier command may have written). So it is made as the bridge would make it
//! for a sandboxed client ([`bridge::egress::fetch`]): judged by the run's policy with the rule
//! the tool would get, the name looked up by the bridge's resolver (pins, then DNS as the
//! bridge is told: never the host's getaddrinfo), every address classified by the routing
//! table (this machine's own public addresses are not public) and admitted by the
//! policy's address rules (never one of the bridge's own listeners), then dialed by the
//! bridge's dialer; a registry a workspace file names is read at a public address only,
//! whatever the user's rules open. HTTPS only, no redirect, no proxy, at most 4 MiB,
//! within 3 s, and all of one start-up's fetches within [`ALL_FETCHES_DEADLINE`]. Each
//! is recorded as the bridge records a request, for the event log once it is open.
//!
//! It runs before netbox forks (STYLE.md rule 13), so it leaves no thread: the bridge's
//! code runs on a current-thread tokio runtime on this thread, made for the one fetch and
//! dropped after it. Such a runtime starts a thread only for blocking work
//! (`spawn_blocking`, `tokio::fs`, tokio's own name lookups), which nothing on this path
//! asks for (hickory's resolver, rustls and hyper make no blocking calls through it), and
//! dropping it joins any it started. `tests::a_fetch_leaves_no_thread_behind` checks it.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::Context;

/// How the bridge this process serves looks names up (`netbox bridge --dns`); the
/// system's resolver configuration otherwise, as a run's bridge has.
static DNS: OnceLock<bridge::DnsConfig> = OnceLock::new();

/// The listeners of the bridge this process serves, once they are bound (a standalone
/// bridge's, for the fetches of its reloads): the addresses its CONNECT path refuses as
/// its own.
static OWN_LISTENERS: OnceLock<Vec<SocketAddr>> = OnceLock::new();

/// Makes every later fetch look names up as `dns` says: the bridge's own setting, given
/// before any tool is asked. The first setting stays.
pub fn resolve_as(dns: bridge::DnsConfig) {
    let _ = DNS.set(dns);
}

/// Makes every later fetch refuse `listeners` as a client's CONNECT does: the bridge's own,
/// given once all are bound, before any reload asks the tools again. The first setting
/// stays.
pub fn listening_at(listeners: Vec<SocketAddr>) {
    let _ = OWN_LISTENERS.set(listeners);
}

/// The origin shown for the rule a fetch is judged with.
const RULE_ORIGIN: &str = "--allow-tool (the registry it names)";

/// CA files read at most, in bytes (a system bundle is a few hundred KiB).
const MAX_CA_BYTES: u64 = 4 << 20;

/// How long all the fetches of one start-up (or one reload) may take together, from the
/// first one's start: each takes at most [`bridge::egress::fetch::DEADLINE`] of what is left.
pub const ALL_FETCHES_DEADLINE: Duration = Duration::from_secs(5);

/// Where a registry's document may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The user said the registries are internal (`--private-ok`) and the user's own
    /// settings name this one: its rule is an `allow_private` one.
    Private,
    /// A plain rule: a non-public address only where the policy opens it (an IP/CIDR or
    /// `allow_private` rule of the user's), as for the tool in the sandbox.
    AsTheToolWould,
    /// A registry a workspace file names: a public address only, whatever the policy
    /// opens.
    PublicOnly,
}

/// What the fetches of one start-up (or of one reload of a standalone bridge) share: one
/// deadline for all of them, and the record of each, for the event log once it is open.
#[derive(Debug, Default)]
pub struct Fetches {
    deadline: Cell<Option<Instant>>,
    records: RefCell<Vec<FetchRecord>>,
    /// The tenant whose tools are being asked (a bridge with `--tenants`).
    tenant: RefCell<Option<String>>,
}

/// One fetch's record, as the bridge records a client's request (its `session` empty: the
/// log's writer names its own), and the tenant whose tools made it.
#[derive(Debug)]
pub struct FetchRecord {
    tenant: Option<String>,
    event: bridge::log::Event,
}

impl Fetches {
    pub fn new() -> Fetches {
        Fetches::default()
    }

    /// The fetches from now on are for tenant `name`'s tools.
    pub fn for_tenant(&self, name: &str) {
        self.tenant.replace(Some(name.to_owned()));
    }

    /// The records of the fetches made so far, taken out.
    pub fn take_records(&self) -> Vec<FetchRecord> {
        self.records.take()
    }

    /// What is left of [`ALL_FETCHES_DEADLINE`], which starts with the first fetch.
    fn time_left(&self) -> Duration {
        let now = Instant::now();
        let deadline = self.deadline.get().unwrap_or(now + ALL_FETCHES_DEADLINE);
        self.deadline.set(Some(deadline));
        deadline.saturating_duration_since(now)
    }
}

/// Writes `records` (what [`Fetches::take_records`] gave) to `log` as session `session`'s
/// (`SESSION/TENANT` for a tenant's): `net` records with `proto` `fetch`, not counted among
/// the session's attempts nor said on stderr (the start-up line said what became of each).
pub fn log_records(log: &bridge::EventLog, session: &str, records: Vec<FetchRecord>) {
    for FetchRecord { tenant, mut event } in records {
        event.session = match tenant {
            Some(tenant) => format!("{session}/{tenant}").into(),
            None => session.into(),
        };
        log.record_json(&event);
    }
}

/// Reads `url`, trusting only `cainfo` (a PEM file) if the tool names one, else the
/// system's CAs. It is judged as a sandboxed client's request would be under the run's
/// policy plus the rule the tool's registry gets, and reaches as far as `reach` says. The
/// error says why it was not read, for the start-up line.
pub fn https_document(
    url: &str,
    cainfo: Option<&str>,
    ctx: &Context<'_>,
    reach: Reach,
) -> Result<String, String> {
    let rule = super::rule_of(url)
        .filter(|_| url.trim_start().starts_with("https://"))
        .ok_or_else(|| "not an https:// URL to a name netbox reads".to_owned())?;
    let mut judged = ctx.policy.clone();
    let added = match reach {
        Reach::Private => judged.add_private_rule(&rule, RULE_ORIGIN),
        Reach::AsTheToolWould | Reach::PublicOnly => {
            judged.add_rule(bridge::policy::Action::Allow, &rule, RULE_ORIGIN)
        }
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
    let within = ctx.fetches.time_left();
    if within.is_zero() {
        return Err(format!(
            "not asked: the start-up's fetches took the {}s they may take together",
            ALL_FETCHES_DEADLINE.as_secs()
        ));
    }
    let dns = DNS.get().cloned().unwrap_or_default();
    let dial = bridge::egress::fetch::Dial {
        dns: &dns,
        own_listeners: OWN_LISTENERS.get().map_or(&[], Vec::as_slice),
        ca_pem: ca.as_deref().map(str::as_bytes),
        public_only: reach == Reach::PublicOnly,
        within,
    };
    // One thread, no blocking pool started: see the module's comment.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the fetch: {e}"))?;
    let fetched = runtime.block_on(bridge::egress::fetch::https_document(
        url.trim(),
        &judged,
        &dial,
    ));
    drop(runtime);
    if let Some(event) = fetched.event {
        let tenant = ctx.fetches.tenant.borrow().clone();
        ctx.fetches
            .records
            .borrow_mut()
            .push(FetchRecord { tenant, event });
    }
    fetched.document.map_err(|e| e.to_string())
}

#[cfg(test)]
// Test code: its servers are at loopback literals (clippy.toml).
#[allow(clippy::disallowed_methods)]
mod tests;
