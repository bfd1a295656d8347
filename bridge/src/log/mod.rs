//! The event log: one JSON line per attempt, allowed or not, appended and flushed per line,
//! plus a one-line human summary on stderr unless quiet.
//!
//! Field names are defined once, here, by [`Event`]; the golden test at the bottom pins the
//! schema so a rename cannot slip through unnoticed.
//!
//! The event and the attempt it is built from are in `event`, the writer ([`EventLog`]) here,
//! its targets in `sink`, the stderr line in `summary`, reading a line back in `read`; the
//! other record types in `records`, and the counters every event feeds in `metrics`.

mod event;
pub mod metrics;
pub mod path_json;
mod read;
pub mod records;
mod sink;
mod summary;

pub use event::{Attempt, End, Event, Proto, SCHEMA_VERSION};
pub use read::{read_record, Record};
pub use sink::LogTarget;
pub use summary::{describe, summary};

use std::fs::File;
use std::io::{self};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;

use crate::policy::Verdict;
use sink::{open_after_whole_lines, Sink, LOG_WRITE_DEADLINE};

/// Distinct refusals announced on stderr; past this, one line says the rest are only in
/// the log (each one announced is kept to say it once).
const MAX_ANNOUNCED: usize = 1_000;

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

/// Now, as every record's `ts`: RFC 3339 UTC with milliseconds.
pub fn timestamp() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Which events are summarised on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stderr {
    /// Every event (an allowed tunnel once per host).
    Summary = 2,
    /// Refusals alone.
    Blocked = 1,
    /// None.
    Quiet = 0,
}

/// Where events go: an append-only JSON-lines file and/or stderr.
pub struct EventLog {
    file: Option<Mutex<Sink>>,
    /// Which summaries go to stderr (a [`Stderr`] as its number); switchable, so start-up
    /// chatter can stay quiet.
    stderr: AtomicU8,
    /// The first write that failed, once one has: a log that cannot be written must stop
    /// what it records (see [`EventLog::failure`]).
    failed: tokio::sync::watch::Sender<Option<String>>,
    /// Refusals already announced: each is said once (the file gets every one), up to
    /// `MAX_ANNOUNCED`.
    announced: Mutex<Announced>,
    /// The targets (`HOST:PORT`) refused so far, the first `MAX_REFUSED_TARGETS` of them:
    /// for what netbox says after the run (a tool's flag that would have opened one).
    refused_targets: Mutex<Vec<String>>,
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
    metrics: Option<Arc<crate::log::metrics::Metrics>>,
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
            stderr: AtomicU8::new(stderr as u8),
            failed: tokio::sync::watch::Sender::new(None),
            announced: Mutex::new(Announced::default()),
            refused_targets: Mutex::new(Vec::new()),
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
    pub fn with_metrics(mut self, metrics: Arc<crate::log::metrics::Metrics>) -> EventLog {
        self.metrics = Some(metrics);
        self
    }

    pub fn metrics(&self) -> Option<&Arc<crate::log::metrics::Metrics>> {
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
                &crate::log::records::Suppressed { count },
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
                    &crate::log::records::Suppressed { count },
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
                        &crate::log::records::NetCapped {
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
        if let (Verdict::Deny, Some(host), Some(port)) = (event.decision, &event.host, event.port) {
            if let Ok(mut refused) = self.refused_targets.lock() {
                let target = format!("{host}:{port}");
                if refused.len() < MAX_REFUSED_TARGETS && !refused.contains(&target) {
                    refused.push(target);
                }
            }
        }
        let shown = self.stderr.load(Ordering::Relaxed);
        let said = match event.decision {
            Verdict::Allow => shown >= Stderr::Summary as u8,
            Verdict::Deny => shown >= Stderr::Blocked as u8,
        };
        if said {
            let line = summary(event);
            let tunnel = matches!(
                event.proto,
                Proto::HttpConnect | Proto::Socks5 | Proto::Captured
            );
            let say = match event.decision {
                // A tunnel to where one already went is not said again: a package manager
                // opens a dozen to its registry (the log has every one).
                Verdict::Allow if tunnel => self
                    .announced
                    .lock()
                    .map_or(Some(line.clone()), |mut seen| {
                        seen.first_allowed(summary::allowed_key(event), line)
                    }),
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

    /// The targets (`HOST:PORT`) refused so far, each once, the first few.
    pub fn refused_targets(&self) -> Vec<String> {
        self.refused_targets
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
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
        self.stderr.store(stderr as u8, Ordering::Relaxed);
    }

    /// Writes a record of another type (netbox's probe, phase, write and session
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
            // A record that cannot be put in JSON is a record lost: it stops what is
            // logged as a failed write does, never an empty line in its place.
            let result = serde_json::to_vec(record)
                .map_err(|e| {
                    io::Error::other(format!("a record could not be written as JSON: {e}"))
                })
                .and_then(|mut line| {
                    line.push(b'\n');
                    match file.lock() {
                        Ok(mut sink) => sink.write_line(&line),
                        Err(_) => Err(io::Error::other("event log lock poisoned")),
                    }
                });
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

/// Refused targets kept for [`EventLog::refused_targets`].
const MAX_REFUSED_TARGETS: usize = 64;

/// The refusals said on stderr so far.
#[derive(Default)]
struct Announced {
    lines: std::collections::HashSet<String>,
    capped: bool,
    /// Allowed tunnels said so far, by kind and target.
    allowed: std::collections::HashSet<String>,
}

impl Announced {
    /// What to say for an allowed tunnel: its line the first time its target is seen;
    /// past the cap, every line (the set no longer grows).
    fn first_allowed(&mut self, key: String, line: String) -> Option<String> {
        if self.allowed.contains(&key) {
            return None;
        }
        if self.allowed.len() < MAX_ANNOUNCED {
            self.allowed.insert(key);
        }
        Some(line)
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Reason, RuleRef};
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
    fn a_record_that_cannot_be_json_stops_the_log_and_leaves_no_empty_line() {
        let path = std::env::temp_dir().join(format!("netbox-log-unjson-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let log = EventLog::open(Some(&path), Stderr::Quiet).unwrap();
        // Control: a record that serialises is written.
        log.record_as("first", "s", &serde_json::json!({"n": 1}));
        assert!(log.failure().is_none());
        // JSON has no map with keys that are not strings.
        let unwritable: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        log.record_as("second", "s", &unwritable);
        log.record_as("third", "s", &serde_json::json!({"n": 3}));
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(text.contains(r#""type":"first""#), "{text}");
        let failure = log.failure().expect("the failure is kept");
        assert!(
            failure.contains("could not be written as JSON"),
            "{failure}"
        );
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
