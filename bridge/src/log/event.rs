//! The `net` event: how the client spoke, how the attempt ended, the record's fields, and
//! the attempt each front end fills in as the pipeline runs.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ipclass::IpClass;
use crate::policy::{Reason, RuleRef, Verdict};
use crate::target::Target;
use crate::text::{bounded, MAX_DETAIL_BYTES};

use super::timestamp;

/// Version of the record layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Longest `method` a record carries (an extension method is any token).
const MAX_METHOD_BYTES: usize = 32;

/// Longest `path` a record carries (a request target can be 60 KB).
const MAX_PATH_BYTES: usize = 1024;

/// How the client spoke to the bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    /// `CONNECT host:port`.
    HttpConnect,
    /// Absolute-form `GET http://host/path`, forwarded.
    HttpForward,
    /// A request the HTTP parser could not read far enough to classify.
    Http,
    Socks5,
    /// One request inside a tunnel the bridge inspects (TLS terminated, or plain HTTP).
    Inspected,
    /// A connection a program made without the proxy, captured inside the sandbox.
    Captured,
    /// A lookup in the sandbox's DNS stub (only refused ones are logged).
    Dns,
    /// A document netbox itself read from the host for `--allow-tool`, before any sandbox
    /// (a registry's `config.json` or index page: [`crate::egress::fetch`]).
    Fetch,
}

/// How the attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// Refused before any upstream connection.
    Refused,
    /// Both directions finished (EOF each way, or the forwarded exchange completed).
    Closed,
    IdleTimeout,
    ClientError,
    UpstreamError,
    /// The bridge was shutting down.
    Shutdown,
}

/// One attempt, as logged, and as `netbox log` and `netbox learn` read it back: the one
/// definition of a `net` record (see [`read_record`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: std::borrow::Cow<'static, str>,
    pub schema_version: u32,
    pub ts: String,
    pub session: Arc<str>,
    pub proto: Proto,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// An inspected request's path (with its query), as the client sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub decision: Verdict,
    pub reason: Reason,
    pub rule: Option<RuleRef>,
    pub resolved: Vec<IpAddr>,
    /// The class of the address that was refused, when an address was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_class: Option<IpClass>,
    pub dialed: Option<SocketAddr>,
    /// The upstream proxy the connection went out through (`dialed` is its address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The IP/CIDR rule that opened a non-public dialed address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opened_by: Option<RuleRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    pub end: End,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The secrets whose values the bridge put in this request, by name (never a value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

/// An attempt in progress; becomes an [`Event`] when it ends.
#[derive(Debug, Clone)]
pub struct Attempt {
    started: Instant,
    pub session: Arc<str>,
    pub proto: Proto,
    pub method: Option<String>,
    pub path: Option<String>,
    pub target: Option<Target>,
    pub decision: Verdict,
    pub reason: Reason,
    pub rule: Option<RuleRef>,
    pub resolved: Vec<IpAddr>,
    pub refused_class: Option<IpClass>,
    pub dialed: Option<SocketAddr>,
    /// The upstream proxy's name, when the connection goes out through one.
    pub via: Option<String>,
    pub opened_by: Option<RuleRef>,
    pub status: Option<u16>,
    pub detail: Option<String>,
    /// The secrets swapped into the request, by name.
    pub secrets: Vec<String>,
}

impl Attempt {
    /// A new attempt, denied until something allows it.
    pub fn begin(session: Arc<str>, proto: Proto) -> Attempt {
        Attempt::since(session, proto, Instant::now())
    }

    /// [`Attempt::begin`] for an attempt that began at `started` (a connection's first
    /// request: at its accept, so that one dropped or timed out before it asked anything
    /// says how long it was held).
    pub fn since(session: Arc<str>, proto: Proto, started: Instant) -> Attempt {
        Attempt {
            started,
            session,
            proto,
            method: None,
            path: None,
            target: None,
            decision: Verdict::Deny,
            reason: Reason::BadRequest,
            rule: None,
            resolved: Vec::new(),
            refused_class: None,
            dialed: None,
            via: None,
            opened_by: None,
            status: None,
            detail: None,
            secrets: Vec::new(),
        }
    }

    /// This request goes on the connection `opened` was dialed for: its decision, rule and
    /// addresses are this request's too.
    pub fn goes_on(&mut self, opened: &Attempt) {
        self.target.clone_from(&opened.target);
        self.decision = opened.decision;
        self.reason = opened.reason;
        self.rule.clone_from(&opened.rule);
        self.resolved.clone_from(&opened.resolved);
        self.dialed = opened.dialed;
        self.via.clone_from(&opened.via);
        self.opened_by.clone_from(&opened.opened_by);
    }

    pub fn finish(self, end: End, bytes_up: u64, bytes_down: u64) -> Event {
        let (host, port) = match &self.target {
            Some(t) => (Some(t.host.to_string()), Some(t.port)),
            None => (None, None),
        };
        Event {
            kind: std::borrow::Cow::Borrowed("net"),
            schema_version: SCHEMA_VERSION,
            ts: timestamp(),
            session: self.session,
            proto: self.proto,
            method: self.method.map(|m| bounded(m, MAX_METHOD_BYTES)),
            path: self.path.map(|p| bounded(p, MAX_PATH_BYTES)),
            host,
            port,
            decision: self.decision,
            reason: self.reason,
            rule: self.rule,
            resolved: self.resolved,
            refused_class: self.refused_class,
            dialed: self.dialed,
            via: self.via,
            opened_by: self.opened_by,
            status: self.status,
            bytes_up,
            bytes_down,
            duration_ms: millis(self.started.elapsed()),
            end,
            detail: self.detail.map(|d| bounded(d, MAX_DETAIL_BYTES)),
            secrets: self.secrets,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
