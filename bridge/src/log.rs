//! The event log: one JSON line per attempt, allowed or not, appended and flushed per line,
//! plus a one-line human summary on stderr unless quiet.
//!
//! Field names are defined once, here, by [`Event`]; the golden test at the bottom pins the
//! schema so a rename cannot slip through unnoticed.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::ipclass::IpClass;
use crate::policy::{Reason, RuleRef, Verdict};
use crate::records::{self, Stamped};
use crate::target::Target;

/// Version of the record layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Longest `detail` a record (and a refusal's body) carries: a detail can quote what the
/// client sent (a Host header of 60 KB), and the log is the client's to fill otherwise.
pub const MAX_DETAIL_BYTES: usize = 512;

/// Longest `method` a record carries (an extension method is any token).
const MAX_METHOD_BYTES: usize = 32;

/// Longest `path` a record carries (a request target can be 60 KB).
const MAX_PATH_BYTES: usize = 1024;

/// Distinct refusals announced on stderr; past this, one line says the rest are only in
/// the log (each one announced is kept to say it once).
const MAX_ANNOUNCED: usize = 1_000;

/// `text`, cut at a character boundary to at most `max` bytes, with "…" if it was cut.
pub fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

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
    /// (a registry's `config.json` or index page: [`crate::fetch`]).
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
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A record's common fields, then its body's, flattened.
#[derive(Serialize)]
struct Framed<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    schema_version: u32,
    ts: String,
    session: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

/// A log line read back.
#[derive(Debug)]
pub enum Record {
    /// A network attempt, as [`Event`] wrote it.
    Net(Box<Event>),
    SessionStart(Box<Stamped<records::SessionStart>>),
    SessionEnd(Box<Stamped<records::SessionEnd>>),
    Phase(Box<Stamped<records::Phase>>),
    WriteDenied(Box<Stamped<records::WriteDenied>>),
    DirectAttempt(Box<Stamped<records::DirectAttempt>>),
    Probe(Box<Stamped<records::Probe>>),
    NetCapped(Box<Stamped<records::NetCapped>>),
    NetSuppressed(Box<Stamped<records::Suppressed>>),
    WriteDeniedSuppressed(Box<Stamped<records::Suppressed>>),
    DirectAttemptSuppressed(Box<Stamped<records::Suppressed>>),
    SocketAllowed(Box<Stamped<records::SocketAllowed>>),
    GitAudit(Box<Stamped<records::GitAudit>>),
    GitMetadataCreated(Box<Stamped<records::GitMetadataCreated>>),
    PolicyLoaded(Box<Stamped<records::PolicyLoaded>>),
    PolicyReloadFailed(Box<Stamped<records::PolicyReloadFailed>>),
    UnidentifiedDropped(Box<Stamped<records::UnidentifiedDropped>>),
    /// A record of a type this version does not write, by name, with its fields.
    Other(String, serde_json::Value),
    /// A record of a newer layout than this reader knows (its `schema_version`): not
    /// guessed at.
    Newer(u64),
    /// Not a record: not JSON, no type, or a record of a known type that is not one.
    Unreadable,
}

impl Record {
    /// The session that wrote it, if it is a record at all.
    pub fn session(&self) -> Option<&str> {
        Some(match self {
            Record::Net(r) => &r.session,
            Record::SessionStart(r) => &r.session,
            Record::SessionEnd(r) => &r.session,
            Record::Phase(r) => &r.session,
            Record::WriteDenied(r) => &r.session,
            Record::DirectAttempt(r) => &r.session,
            Record::Probe(r) => &r.session,
            Record::NetCapped(r) => &r.session,
            Record::NetSuppressed(r) => &r.session,
            Record::WriteDeniedSuppressed(r) => &r.session,
            Record::DirectAttemptSuppressed(r) => &r.session,
            Record::SocketAllowed(r) => &r.session,
            Record::GitAudit(r) => &r.session,
            Record::GitMetadataCreated(r) => &r.session,
            Record::PolicyLoaded(r) => &r.session,
            Record::PolicyReloadFailed(r) => &r.session,
            Record::UnidentifiedDropped(r) => &r.session,
            Record::Other(_, fields) => fields["session"].as_str().unwrap_or(""),
            Record::Newer(_) | Record::Unreadable => return None,
        })
    }
}

/// Reads one line of an event log.
pub fn read_record(line: &[u8]) -> Record {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
        return Record::Unreadable;
    };
    let version = value["schema_version"].as_u64().unwrap_or(0);
    if version > u64::from(SCHEMA_VERSION) {
        return Record::Newer(version);
    }
    fn typed<T: serde::de::DeserializeOwned>(
        value: serde_json::Value,
        wrap: impl FnOnce(Box<T>) -> Record,
    ) -> Record {
        serde_json::from_value::<T>(value).map_or(Record::Unreadable, |r| wrap(Box::new(r)))
    }
    match value["type"].as_str() {
        Some("net") => typed(value, Record::Net),
        Some("session_start") => typed(value, Record::SessionStart),
        Some("session_end") => typed(value, Record::SessionEnd),
        Some("phase") => typed(value, Record::Phase),
        Some("write_denied") => typed(value, Record::WriteDenied),
        Some("direct_attempt") => typed(value, Record::DirectAttempt),
        Some("direct_attempt_suppressed") => typed(value, Record::DirectAttemptSuppressed),
        Some("socket_allowed") => typed(value, Record::SocketAllowed),
        Some("probe") => typed(value, Record::Probe),
        Some("net_capped") => typed(value, Record::NetCapped),
        Some("net_suppressed") => typed(value, Record::NetSuppressed),
        Some("write_denied_suppressed") => typed(value, Record::WriteDeniedSuppressed),
        Some("git_audit") => typed(value, Record::GitAudit),
        Some("git_metadata_created") => typed(value, Record::GitMetadataCreated),
        Some("policy_loaded") => typed(value, Record::PolicyLoaded),
        Some("policy_reload_failed") => typed(value, Record::PolicyReloadFailed),
        Some("unidentified_dropped") => typed(value, Record::UnidentifiedDropped),
        Some(kind) => Record::Other(kind.to_owned(), value),
        None => Record::Unreadable,
    }
}

/// Now, as every record's `ts`: RFC 3339 UTC with milliseconds.
pub fn timestamp() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Whether to summarise each event on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    Summary,
    Quiet,
}

/// Where events go: an append-only JSON-lines file and/or stderr.
pub struct EventLog {
    file: Option<Mutex<Sink>>,
    /// Summaries on stderr (true) or not; switchable, so start-up chatter can stay quiet.
    stderr: AtomicBool,
    /// The first write that failed, once one has: a log that cannot be written must stop
    /// what it records (see [`EventLog::failure`]).
    failed: tokio::sync::watch::Sender<Option<String>>,
    /// Refusals already announced: each is said once (the file gets every one), up to
    /// `MAX_ANNOUNCED`.
    announced: Mutex<Announced>,
    /// `net` records written at most, refused and allowed ones apart (`None`: no bound);
    /// past a cap they are counted.
    net_cap: Option<NetCap>,
    /// Refused `net` records each session writes per minute at most (`None`: no bound);
    /// past it in a minute they are counted, and said in one `net_suppressed` record of
    /// that session when it ends.
    refusal_budget: Option<Mutex<RefusalBudgets>>,
    /// `net` records written: refused, allowed, requests inside inspected tunnels, and
    /// lookups the sandbox's DNS stub refused.
    net_written: [std::sync::atomic::AtomicU64; 4],
    net_suppressed: std::sync::atomic::AtomicU64,
    allowed: std::sync::atomic::AtomicU64,
    denied: std::sync::atomic::AtomicU64,
    /// Requests inside inspected tunnels: all, and refused.
    requests: [std::sync::atomic::AtomicU64; 2],
    /// A host whose attempts are logged but not counted (the live probe's canary).
    uncounted: Mutex<Vec<(String, Option<u32>)>>,
    /// A standalone bridge's counters (metrics.rs): every attempt, before caps and limits.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl EventLog {
    /// Opens (creating, appending) the log file, if one is given.
    pub fn open(path: Option<&Path>, stderr: Stderr) -> io::Result<EventLog> {
        EventLog::open_target(path.map(|p| LogTarget::File(p.to_owned())).as_ref(), stderr)
    }

    /// Opens where the log goes, if anywhere: a file (created, appended to), standard
    /// output, or a Unix datagram socket a collector listens on (which must be there now).
    pub fn open_target(target: Option<&LogTarget>, stderr: Stderr) -> io::Result<EventLog> {
        let file = match target {
            Some(LogTarget::File(path)) => {
                Some(Mutex::new(Sink::File(open_after_whole_lines(path)?)))
            }
            Some(LogTarget::Stdout) => {
                use std::os::fd::AsFd;
                let out = io::stdout().as_fd().try_clone_to_owned()?;
                Some(Mutex::new(Sink::Stream(File::from(out))))
            }
            Some(LogTarget::Datagram(path)) => {
                let socket = std::os::unix::net::UnixDatagram::unbound()?;
                socket.connect(path)?;
                socket.set_write_timeout(Some(LOG_WRITE_DEADLINE))?;
                Some(Mutex::new(Sink::Datagram(socket)))
            }
            None => None,
        };
        Ok(EventLog {
            file,
            stderr: AtomicBool::new(stderr == Stderr::Summary),
            failed: tokio::sync::watch::Sender::new(None),
            announced: Mutex::new(Announced::default()),
            net_cap: None,
            refusal_budget: None,
            net_written: Default::default(),
            net_suppressed: std::sync::atomic::AtomicU64::new(0),
            allowed: std::sync::atomic::AtomicU64::new(0),
            denied: std::sync::atomic::AtomicU64::new(0),
            requests: Default::default(),
            uncounted: Mutex::new(Vec::new()),
            metrics: None,
        })
    }

    /// Counts every attempt in `metrics` too, as it is recorded.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> EventLog {
        self.metrics = Some(metrics);
        self
    }

    pub fn metrics(&self) -> Option<&Arc<crate::metrics::Metrics>> {
        self.metrics.as_ref()
    }

    /// Bounds the `net` records this log takes: past a cap, attempts are only counted
    /// ([`EventLog::net_suppressed`]), so a command looping on requests cannot fill the
    /// host's disk. Refused and allowed attempts are capped apart, so that refusals cannot
    /// push a connection that went through out of the log; the first attempt past a cap
    /// writes a `net_capped` record at once. Without it every attempt is written.
    pub fn cap_net_records(mut self, cap: NetCap) -> EventLog {
        self.net_cap = Some(cap);
        self
    }

    /// Bounds the refused `net` records this log takes in each minute, session by
    /// session: a long-running bridge has no end of run to cap at, and a client looping on
    /// refused connections (past the connection limit, say) must not fill the disk. Past
    /// `per_minute` in a minute, a session's refusals are counted; the minute's count is
    /// written as a `net_suppressed` record of that session with its next refusal after
    /// the minute ends, or by [`EventLog::flush_suppressed`]. Each session has a budget of
    /// its own, so that no client of another (a tenant's neighbour, or a stranger who names
    /// no tenant, logged under the bridge's own session) can push its refusals out of the
    /// log.
    pub fn limit_refusals_per_minute(mut self, per_minute: u64) -> EventLog {
        self.refusal_budget = Some(Mutex::new(RefusalBudgets {
            per_minute,
            windows: std::collections::HashMap::new(),
        }));
        self
    }

    /// Writes the current minute's count of refusals past the budget, if any, of every
    /// session (as the bridge stops).
    pub fn flush_suppressed(&self) {
        let pending: Vec<(Arc<str>, u64)> = self
            .refusal_budget
            .as_ref()
            .and_then(|budget| budget.lock().ok())
            .map(|mut budgets| {
                budgets
                    .windows
                    .iter_mut()
                    .filter_map(|(session, window)| {
                        let count = std::mem::take(&mut window.suppressed);
                        (count > 0).then(|| (Arc::clone(session), count))
                    })
                    .collect()
            })
            .unwrap_or_default();
        for (session, count) in pending {
            self.record_as(
                "net_suppressed",
                &session,
                &crate::records::Suppressed { count },
            );
        }
    }

    /// Whether a refusal of `session` fits its minute's budget; closes the minute before
    /// when it has ended (writing its `net_suppressed`).
    fn refusal_fits(&self, session: &Arc<str>) -> bool {
        let Some(budget) = &self.refusal_budget else {
            return true;
        };
        let Ok(mut budgets) = budget.lock() else {
            return true;
        };
        let per_minute = budgets.per_minute;
        if budgets.windows.len() >= MAX_REFUSAL_WINDOWS && !budgets.windows.contains_key(session) {
            // Sessions come from the configuration, not from clients; a bridge that has
            // seen this many forgets the minutes that ended with nothing to say.
            budgets.windows.retain(|_, window| {
                window.suppressed > 0 || window.started.elapsed() < REFUSAL_WINDOW
            });
        }
        let window = budgets
            .windows
            .entry(Arc::clone(session))
            .or_insert_with(|| RefusalWindow {
                started: std::time::Instant::now(),
                written: 0,
                suppressed: 0,
            });
        if window.started.elapsed() >= REFUSAL_WINDOW {
            let count = std::mem::take(&mut window.suppressed);
            if count > 0 {
                self.record_as(
                    "net_suppressed",
                    session,
                    &crate::records::Suppressed { count },
                );
            }
            window.started = std::time::Instant::now();
            window.written = 0;
        }
        if window.written < per_minute {
            window.written += 1;
            return true;
        }
        window.suppressed += 1;
        false
    }

    /// `net` attempts counted but not written (past the cap).
    pub fn net_suppressed(&self) -> u64 {
        self.net_suppressed.load(Ordering::Relaxed)
    }

    /// Writes one event: the whole line in one `write` (O_APPEND keeps lines whole even
    /// with several writers), then the stderr summary (a refusal only the first time).
    pub fn record(&self, event: &Event) {
        if let Some(metrics) = &self.metrics {
            metrics.count(event);
        }
        // Requests inside inspected tunnels are cheap to make by the thousand: capped apart,
        // so that they cannot push tunnels and refusals out of the log.
        let inspected = event.proto == Proto::Inspected;
        let (written, cap) = match event.decision {
            _ if inspected => (&self.net_written[2], self.net_cap.map(|c| c.requests)),
            // As cheap to make: a lookup loop cannot push refused connections out either.
            _ if event.proto == Proto::Dns => {
                (&self.net_written[3], self.net_cap.map(|c| c.lookups))
            }
            Verdict::Deny => (&self.net_written[0], self.net_cap.map(|c| c.refused)),
            Verdict::Allow => (&self.net_written[1], self.net_cap.map(|c| c.allowed)),
        };
        let count = written.fetch_add(1, Ordering::Relaxed);
        match cap {
            Some(cap) if count >= cap => {
                if count == cap {
                    self.record_as(
                        "net_capped",
                        &event.session,
                        &crate::records::NetCapped {
                            decision: event.decision,
                            cap,
                            inspected,
                            lookups: event.proto == Proto::Dns,
                        },
                    );
                }
                self.net_suppressed.fetch_add(1, Ordering::Relaxed);
            }
            _ if event.decision == Verdict::Deny && !self.refusal_fits(&event.session) => {
                self.net_suppressed.fetch_add(1, Ordering::Relaxed);
            }
            _ => self.record_json(event),
        }
        let counted = self.uncounted.lock().map_or(true, |mut hosts| {
            let found = hosts
                .iter_mut()
                .find(|(h, left)| Some(h.as_str()) == event.host.as_deref() && *left != Some(0));
            match found {
                Some((_, Some(left))) => {
                    *left -= 1;
                    false
                }
                Some((_, None)) => false,
                None => true,
            }
        });
        if inspected {
            self.requests[0].fetch_add(1, Ordering::Relaxed);
            if event.decision == Verdict::Deny {
                self.requests[1].fetch_add(1, Ordering::Relaxed);
            }
        } else if counted {
            let counter = match event.decision {
                Verdict::Allow => &self.allowed,
                Verdict::Deny => &self.denied,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if self.stderr.load(Ordering::Relaxed) {
            let line = summary(event);
            let say = match event.decision {
                Verdict::Allow => Some(line),
                Verdict::Deny => self
                    .announced
                    .lock()
                    .map_or(Some(line.clone()), |mut seen| seen.first(line)),
            };
            if let Some(line) = say {
                crate::terminal::say(&line);
            }
        }
    }

    /// The first write that failed, if one has.
    pub fn failure(&self) -> Option<String> {
        self.failed.borrow().clone()
    }

    /// Resolves once a write has failed (at once if one already has).
    pub async fn failed(&self) {
        let mut watch = self.failed.subscribe();
        let _ = watch.wait_for(Option::is_some).await;
    }

    /// Network attempts recorded so far: (allowed, denied), the uncounted host's aside, and
    /// requests inside inspected tunnels aside (`request_counts`).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.allowed.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed),
        )
    }

    /// Requests inside inspected tunnels recorded so far: (all, refused).
    pub fn request_counts(&self) -> (u64, u64) {
        (
            self.requests[0].load(Ordering::Relaxed),
            self.requests[1].load(Ordering::Relaxed),
        )
    }

    /// Leaves `host`'s attempts out of [`EventLog::counts`] (they are still logged).
    pub fn leave_uncounted(&self, host: &str) {
        if let Ok(mut uncounted) = self.uncounted.lock() {
            uncounted.push((host.to_owned(), None));
        }
    }

    /// Leaves the next attempt to `host` out of [`EventLog::counts`] (the live probe's own
    /// one, to an address CMD may try too).
    pub fn leave_one_uncounted(&self, host: &str) {
        if let Ok(mut uncounted) = self.uncounted.lock() {
            uncounted.push((host.to_owned(), Some(1)));
        }
    }

    /// Turns the stderr summaries on or off from now on (the file gets every event always).
    pub fn set_stderr(&self, stderr: Stderr) {
        self.stderr
            .store(stderr == Stderr::Summary, Ordering::Relaxed);
    }

    /// Writes a record of another type (the wrapper's probe, phase, write and session
    /// records) with the fields every record starts with: `type`, `schema_version`, `ts`
    /// and `session`, then `body`'s own fields.
    pub fn record_as(&self, kind: &str, session: &str, body: &impl Serialize) {
        self.record_json(&Framed {
            kind,
            schema_version: SCHEMA_VERSION,
            ts: timestamp(),
            session,
            body,
        });
    }

    /// Writes any serialisable record as one line.
    pub fn record_json(&self, record: &impl Serialize) {
        // Once a write failed, what is logged stops: the rest are not tried, each of which
        // could wait out a stalled reader's deadline again.
        if self.failed.borrow().is_some() {
            return;
        }
        if let Some(file) = &self.file {
            let mut line = serde_json::to_vec(record).unwrap_or_default();
            line.push(b'\n');
            let result = match file.lock() {
                Ok(mut sink) => sink.write_line(&line),
                Err(_) => Err(io::Error::other("event log lock poisoned")),
            };
            if let Err(e) = result {
                // Kept (the first only) for whoever runs what is logged: it stops.
                self.failed.send_if_modified(|failed| {
                    let first = failed.is_none();
                    if first {
                        *failed = Some(e.to_string());
                    }
                    first
                });
            }
        }
    }
}

/// The span a refusal budget counts over.
const REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Sessions whose refusal minutes a log keeps before it forgets those with nothing to say.
const MAX_REFUSAL_WINDOWS: usize = 65_536;

/// Every session's refusal budget.
struct RefusalBudgets {
    per_minute: u64,
    windows: std::collections::HashMap<Arc<str>, RefusalWindow>,
}

/// One minute of one session's refusal budget.
struct RefusalWindow {
    started: std::time::Instant,
    written: u64,
    suppressed: u64,
}

/// How many `net` records a log takes.
#[derive(Debug, Clone, Copy)]
pub struct NetCap {
    pub refused: u64,
    pub allowed: u64,
    /// Requests inside inspected tunnels, allowed and refused alike.
    pub requests: u64,
    /// Lookups the sandbox's DNS stub refused.
    pub lookups: u64,
}

/// The refusals said on stderr so far.
#[derive(Default)]
struct Announced {
    lines: std::collections::HashSet<String>,
    capped: bool,
}

impl Announced {
    /// What to say for a refusal: the line the first time it is seen; once the set is
    /// full, one line saying that the rest go only to the log, then nothing.
    fn first(&mut self, line: String) -> Option<String> {
        if self.lines.contains(&line) {
            return None;
        }
        if self.lines.len() < MAX_ANNOUNCED {
            self.lines.insert(line.clone());
            return Some(line);
        }
        if std::mem::replace(&mut self.capped, true) {
            return None;
        }
        Some(format!(
            "netbox: {MAX_ANNOUNCED} different refusals announced; the rest are only in the event log"
        ))
    }
}

/// Where a log's records go (`--log`): a file, standard output (`-`), or a Unix datagram
/// socket (`unix:PATH`), one record per datagram, for a collector such as Vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    File(std::path::PathBuf),
    Stdout,
    Datagram(std::path::PathBuf),
}

impl LogTarget {
    /// `-`, `unix:PATH`, or a file's path.
    pub fn parse(text: &std::ffi::OsStr) -> LogTarget {
        use std::os::unix::ffi::OsStrExt;
        let bytes = text.as_bytes();
        if bytes == b"-" {
            LogTarget::Stdout
        } else if let Some(path) = bytes.strip_prefix(b"unix:") {
            LogTarget::Datagram(std::ffi::OsStr::from_bytes(path).into())
        } else {
            LogTarget::File(text.into())
        }
    }
}

impl std::fmt::Display for LogTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogTarget::File(path) => write!(f, "{}", path.display()),
            LogTarget::Stdout => write!(f, "standard output"),
            LogTarget::Datagram(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// How long a record may wait for a reader that takes nothing (a collector that stopped
/// reading, a pipe nobody drains) before the log counts as one that cannot be written,
/// which stops what it records rather than holding every connection that logs (review 38).
const LOG_WRITE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// An open log target.
enum Sink {
    File(File),
    /// Standard output: a pipe or a terminal, which a stalled reader can keep full.
    Stream(File),
    Datagram(std::os::unix::net::UnixDatagram),
}

impl Sink {
    /// One record, whole: one write to a file (O_APPEND keeps it in one piece), one
    /// datagram to a socket (a short send is an error: the record would be cut).
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        match self {
            Sink::File(f) => f.write_all(line).and_then(|()| f.flush()),
            Sink::Stream(f) => {
                use std::os::fd::AsFd;
                let mut fds = [nix::poll::PollFd::new(
                    f.as_fd(),
                    nix::poll::PollFlags::POLLOUT,
                )];
                let deadline = nix::poll::PollTimeout::try_from(LOG_WRITE_DEADLINE)
                    .unwrap_or(nix::poll::PollTimeout::MAX);
                match nix::poll::poll(&mut fds, deadline) {
                    Ok(0) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the log's reader took nothing for 5 s",
                    )),
                    Ok(_) => f.write_all(line).and_then(|()| f.flush()),
                    Err(e) => Err(io::Error::from(e)),
                }
            }
            Sink::Datagram(socket) => match socket.send(line)? {
                sent if sent == line.len() => Ok(()),
                _ => Err(io::Error::other("a record did not fit one datagram")),
            },
        }
    }
}

/// Opens a log for appending. A crash can leave its last line half written: a newline
/// first then keeps the next record from being glued onto it (and lost with it).
fn open_after_whole_lines(path: &Path) -> io::Result<File> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    if file.seek(SeekFrom::End(0))? > 0 {
        file.seek(SeekFrom::End(-1))?;
        let mut last = [0u8; 1];
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            file.write_all(b"\n")?;
        }
    }
    Ok(file)
}

/// The stderr line for an event.
pub fn summary(e: &Event) -> String {
    let verb = match (e.proto, e.method.as_deref()) {
        (Proto::HttpConnect, _) => "CONNECT".to_owned(),
        (Proto::Socks5, _) => "SOCKS5".to_owned(),
        (Proto::Captured, _) => "captured".to_owned(),
        (Proto::Dns, _) => "DNS lookup of".to_owned(),
        (Proto::Fetch, _) => "netbox's own GET of".to_owned(),
        (Proto::Inspected, Some(method)) => format!(
            "{} {}",
            printable_ascii(method),
            printable_ascii(e.path.as_deref().unwrap_or("?"))
        ),
        (_, Some(method)) => method.to_owned(),
        (_, None) => "request".to_owned(),
    };
    let target = match (&e.host, e.port) {
        (Some(host), Some(port)) if host.contains(':') => format!("[{host}]:{port}"),
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.clone(),
        _ => "(unparsed)".to_owned(),
    };
    let rule = e
        .rule
        .as_ref()
        .map(|r| format!(" [{r}]"))
        .unwrap_or_default();
    match e.decision {
        Verdict::Allow => format!(
            "netbox: allowed {verb} {target}{} ({} B up, {} B down, {} ms){rule}",
            e.dialed.map(|d| format!(" via {d}")).unwrap_or_default(),
            e.bytes_up,
            e.bytes_down,
            e.duration_ms,
        ),
        Verdict::Deny => format!(
            "netbox: blocked {verb} {target} ({}){rule}",
            e.detail.as_deref().unwrap_or(describe(e.reason)),
        ),
    }
}

/// Prose for a reason, for people.
pub fn describe(reason: Reason) -> &'static str {
    match reason {
        Reason::AllowedByRule => "allowed by rule",
        Reason::Learning => "learn mode",
        Reason::PublicAddress => "public address",
        Reason::OpenedByRule => "address opened by rule",
        Reason::DeniedByRule => "denied by rule",
        Reason::NotAllowed => "not on allowlist",
        Reason::NonPublicAddress => "resolves to a non-public address",
        Reason::ResolveFailed => "name did not resolve",
        Reason::UpstreamUnreachable => "upstream unreachable",
        Reason::UpstreamTimeout => "upstream did not answer in time",
        Reason::BadRequest => "malformed request",
        Reason::HeaderTooLarge => "request header too large",
        Reason::HeaderTimeout => "request header timed out",
        Reason::Unsupported => "unsupported request",
        Reason::ConnectionLimit => "too many connections open",
        Reason::ServerNameMismatch => "TLS asks for another host",
        Reason::NoServerName => "TLS names no host",
        Reason::NotTls => "not TLS on a TLS port",
        Reason::MethodNotAllowed => "method not allowed by the HTTP rules",
        Reason::PathNotAllowed => "path not allowed by the HTTP rules",
        Reason::HostMismatch => "request names another host than its tunnel",
        Reason::UpstreamNotTrusted => "upstream certificate not trusted",
        Reason::ProxyAuthRequired => "names no tenant of this bridge",
        Reason::Relayed => "relayed to the bridge that judges",
        Reason::UpstreamProxy => "the upstream proxy refused or failed",
    }
}

/// Text a client chose, for a terminal line: no control characters, at most 120 bytes.
fn printable_ascii(text: &str) -> String {
    let shown: String = text
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .take(120)
        .collect();
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Target;

    #[test]
    fn schema_is_pinned() {
        let mut a = Attempt::begin(Arc::from("s1"), Proto::HttpConnect);
        a.target = Some(Target::parse_authority("registry.test:443").unwrap());
        a.decision = Verdict::Allow;
        a.reason = Reason::AllowedByRule;
        a.rule = Some(RuleRef {
            file: Arc::from("allow.toml"),
            line: 2,
            text: "registry.test".into(),
        });
        a.opened_by = Some(RuleRef {
            file: Arc::from("allow.toml"),
            line: 3,
            text: "127.0.0.1:443".into(),
        });
        a.resolved = vec!["127.0.0.1".parse().unwrap()];
        a.dialed = Some("127.0.0.1:443".parse().unwrap());
        let mut e = a.finish(End::Closed, 10, 20);
        e.ts = "2026-11-29T00:00:00.000Z".into();
        e.duration_ms = 5;
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(
            json,
            r#"{"type":"net","schema_version":1,"ts":"2026-11-29T00:00:00.000Z","session":"s1","proto":"http_connect","host":"registry.test","port":443,"decision":"allow","reason":"allowed_by_rule","rule":{"file":"allow.toml","line":2,"text":"registry.test"},"resolved":["127.0.0.1"],"dialed":"127.0.0.1:443","opened_by":{"file":"allow.toml","line":3,"text":"127.0.0.1:443"},"bytes_up":10,"bytes_down":20,"duration_ms":5,"end":"closed"}"#
        );
        assert_eq!(
            summary(&e),
            "netbox: allowed CONNECT registry.test:443 via 127.0.0.1:443 (10 B up, 20 B down, 5 ms) [allow.toml:2]"
        );
    }

    /// Requests inside inspected tunnels are capped apart: a flood of them leaves the
    /// tunnels that carried them, and refusals, in the log.
    #[test]
    fn inspected_requests_have_a_cap_of_their_own() {
        let path = std::env::temp_dir().join(format!("netbox-log-cap-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let log = EventLog::open(Some(&path), Stderr::Quiet)
            .unwrap()
            .cap_net_records(NetCap {
                refused: 10,
                allowed: 10,
                requests: 3,
                lookups: 10,
            });
        let event = |proto, decision| {
            let mut a = Attempt::begin(Arc::from("s"), proto);
            a.decision = decision;
            a.finish(End::Closed, 0, 0)
        };
        for _ in 0..50 {
            log.record(&event(Proto::Inspected, Verdict::Allow));
        }
        log.record(&event(Proto::Inspected, Verdict::Deny));
        log.record(&event(Proto::HttpConnect, Verdict::Allow));
        log.record(&event(Proto::HttpConnect, Verdict::Deny));
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let records: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let count =
            |f: &dyn Fn(&serde_json::Value) -> bool| records.iter().filter(|r| f(r)).count();
        assert_eq!(count(&|r| r["proto"] == "inspected"), 3, "{text}");
        assert_eq!(count(&|r| r["proto"] == "http_connect"), 2, "{text}");
        assert_eq!(
            count(&|r| r["type"] == "net_capped" && r["inspected"] == true && r["cap"] == 3),
            1,
            "{text}"
        );
        assert_eq!(log.net_suppressed(), 48);
    }

    #[test]
    fn net_records_read_back_as_they_were_written() {
        // The pinned line above, read back: every field by the same name.
        let golden = r#"{"type":"net","schema_version":1,"ts":"2026-11-29T00:00:00.000Z","session":"s1","proto":"http_connect","host":"registry.test","port":443,"decision":"allow","reason":"allowed_by_rule","rule":{"file":"allow.toml","line":2,"text":"registry.test"},"resolved":["127.0.0.1"],"dialed":"127.0.0.1:443","opened_by":{"file":"allow.toml","line":3,"text":"127.0.0.1:443"},"bytes_up":10,"bytes_down":20,"duration_ms":5,"end":"closed"}"#;
        let Record::Net(event) = read_record(golden.as_bytes()) else {
            panic!("the pinned record does not read back");
        };
        assert_eq!(event.host.as_deref(), Some("registry.test"));
        assert_eq!(event.decision, Verdict::Allow);
        assert_eq!(event.reason, Reason::AllowedByRule);
        assert_eq!(event.bytes_down, 20);
        assert_eq!(serde_json::to_string(&event).unwrap(), golden);
        // A record of a newer layout is not guessed at; a line that is no record says so.
        let newer = golden.replace("\"schema_version\":1", "\"schema_version\":2");
        assert!(matches!(read_record(newer.as_bytes()), Record::Newer(2)));
        assert!(matches!(read_record(b"not json"), Record::Unreadable));
        let missing = golden.replace("\"decision\":\"allow\",", "");
        assert!(matches!(
            read_record(missing.as_bytes()),
            Record::Unreadable
        ));
        assert!(matches!(
            read_record(br#"{"type":"probe","schema_version":1}"#),
            Record::Unreadable
        ));
        assert!(matches!(
            read_record(br#"{"type":"later_kind","schema_version":1}"#),
            Record::Other(kind, _) if kind == "later_kind"
        ));
    }

    #[test]
    fn deny_summary_names_reason() {
        let mut a = Attempt::begin(Arc::from("s1"), Proto::HttpConnect);
        a.target = Some(Target::parse_authority("blocked.test:443").unwrap());
        a.reason = Reason::NotAllowed;
        let e = a.finish(End::Refused, 0, 0);
        assert_eq!(
            summary(&e),
            "netbox: blocked CONNECT blocked.test:443 (not on allowlist)"
        );
    }
}
