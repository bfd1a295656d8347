//! A session log read into a summary: what ran, the probe, per host and port the attempts
//! with bytes, per path the refused writes, direct attempts, sockets used, and the end.

use std::collections::BTreeMap;
use std::path::Path;

use bridge::log::records::{SessionEnd, SessionStart, Stamped, WriteDenied};
use bridge::log::{Event, Record};
use serde::Serialize;

use super::whole_lines;

/// One host:port's attempts.
#[derive(Debug, Default, Serialize)]
pub(super) struct Destination {
    pub(super) host: String,
    pub(super) port: u64,
    pub(super) allowed: u64,
    pub(super) denied: u64,
    pub(super) bytes_up: u64,
    pub(super) bytes_down: u64,
    /// Requests inside inspected tunnels, and how many of those were refused (their
    /// bytes are the tunnels', already counted).
    pub(super) requests: u64,
    pub(super) requests_refused: u64,
    /// Why attempts were refused (the log's `reason`s, in words), each once.
    pub(super) refused_because: Vec<String>,
}

/// One path's refused writes.
#[derive(Debug, Default, Serialize)]
pub(super) struct RefusedPath {
    pub(super) path: String,
    pub(super) attempts: u64,
    pub(super) reasons: Vec<String>,
    pub(super) syscalls: Vec<String>,
    pub(super) executables: Vec<String>,
}

/// One destination's direct attempts (past the proxy, to nothing of netbox's).
#[derive(Debug, Default, Serialize)]
pub(super) struct DirectDestination {
    pub(super) protocol: String,
    pub(super) address: String,
    pub(super) port: u16,
    /// The name the sandbox's DNS stub handed the address out for.
    pub(super) name: Option<String>,
    pub(super) attempts: u64,
    pub(super) reasons: Vec<String>,
    pub(super) executables: Vec<String>,
}

/// The connections to one allowed host socket.
#[derive(Debug, Default, Serialize)]
pub(super) struct SocketUse {
    pub(super) path: String,
    pub(super) connections: u64,
    /// Of those, how many failed (the socket's server was gone).
    pub(super) failed: u64,
    pub(super) executables: Vec<String>,
}

/// One session's summary.
#[derive(Debug, Default, Serialize)]
pub(super) struct Summary {
    pub(super) session: String,
    /// The `session_start` record as logged, if there is one.
    pub(super) start: Option<Stamped<SessionStart>>,
    /// Each probe: its phase (if any), whether it passed, the first failed check.
    pub(super) probes: Vec<ProbeSummary>,
    pub(super) phases: Vec<String>,
    pub(super) network: Vec<Destination>,
    /// `net` records past the log's caps: counted by the run, not written (`net_suppressed`).
    pub(super) network_not_shown: u64,
    pub(super) refused_writes: Vec<RefusedPath>,
    pub(super) direct_attempts: Vec<DirectDestination>,
    /// `direct_attempt` records past the log's cap: counted, not written.
    pub(super) direct_attempts_not_shown: u64,
    /// Connections to host sockets `--allow-socket` let through, by path.
    pub(super) sockets_allowed: Vec<SocketUse>,
    /// A shared bridge's connections dropped before they named a tenant
    /// (`unidentified_dropped`).
    #[serde(skip_serializing_if = "is_zero")]
    pub(super) unidentified_dropped: u64,
    /// The `session_end` record; `None` while running or after a crash.
    pub(super) end: Option<Stamped<SessionEnd>>,
    /// A standalone bridge's session: each policy it was held to (`policy_loaded`), and
    /// each reload refused (`policy_reload_failed`), in order.
    pub(super) policies: Vec<PolicyChange>,
}

/// A policy a bridge's session took on, or a reload it refused.
#[derive(Debug, Serialize)]
pub(super) struct PolicyChange {
    pub(super) ts: String,
    pub(super) cause: String,
    /// `None` for a refused reload.
    pub(super) policy_sha256: Option<String>,
    pub(super) allow_rules: Option<usize>,
    pub(super) error: Option<String>,
}

#[derive(Debug, Serialize)]
pub(super) struct ProbeSummary {
    pub(super) phase: Option<String>,
    pub(super) passed: bool,
    pub(super) failed_check: Option<String>,
    pub(super) duration_us: Option<u64>,
}

/// The log's own path, as the event log writes paths: a string, with U+FFFD for each byte
/// that is not UTF-8 (bridge::log::path_json).
fn file_as_text<S: serde::Serializer>(file: &&Path, serializer: S) -> Result<S::Ok, S::Error> {
    bridge::log::path_json::text::serialize(file, serializer)
}

/// What `--json` prints.
#[derive(Serialize)]
pub(super) struct Report<'a> {
    #[serde(serialize_with = "file_as_text")]
    pub(super) file: &'a Path,
    pub(super) sessions: Vec<Summary>,
    /// The last line had no newline yet (still being written, or cut short).
    pub(super) incomplete_last_line: bool,
    /// Lines that were not JSON records, skipped.
    pub(super) unreadable_lines: usize,
    /// Records of a newer layout than this netbox reads (their `schema_version`),
    /// skipped rather than guessed at.
    pub(super) newer_records: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) newer_schema_version: Option<u64>,
    /// Record types this netbox does not know, skipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) unknown_types: Vec<String>,
}

/// A log's whole lines read into one summary per session, in the order sessions start.
// Whole: one pass over the lines, one match arm per record type, each a line or two.
pub(super) fn summarise<'a>(file: &'a Path, bytes: &[u8]) -> Report<'a> {
    let incomplete_last_line = !bytes.is_empty() && !bytes.ends_with(b"\n");
    let mut unreadable_lines = 0;
    let mut newer_records = 0;
    let mut newer_schema_version = None;
    let mut unknown_types: std::collections::BTreeSet<String> = Default::default();
    let mut sessions: Vec<Summary> = Vec::new();
    let mut destinations: Vec<BTreeMap<(String, u64), Destination>> = Vec::new();
    let mut writes: Vec<BTreeMap<String, RefusedPath>> = Vec::new();
    let mut direct: Vec<BTreeMap<(String, String, u16), DirectDestination>> = Vec::new();
    for line in whole_lines(bytes) {
        // Every record as the type that wrote it (bridge::log::records).
        let record = bridge::log::read_record(line);
        let id = match &record {
            Record::Unreadable => {
                unreadable_lines += 1;
                continue;
            }
            Record::Newer(version) => {
                newer_records += 1;
                newer_schema_version = Some(*version);
                continue;
            }
            record => record.session().unwrap_or_default().to_owned(),
        };
        let at = match sessions.iter().position(|s| s.session == id) {
            Some(at) => at,
            None => {
                sessions.push(Summary {
                    session: id,
                    ..Summary::default()
                });
                destinations.push(BTreeMap::new());
                writes.push(BTreeMap::new());
                direct.push(BTreeMap::new());
                sessions.len() - 1
            }
        };
        let summary = &mut sessions[at];
        match record {
            Record::SessionStart(start) => summary.start = Some(*start),
            Record::SessionEnd(end) => summary.end = Some(*end),
            Record::Phase(phase) => summary.phases.push(phase.body.phase),
            Record::Net(event) => add_attempt(&mut destinations[at], &event),
            Record::WriteDenied(write) => add_write(&mut writes[at], &write.body),
            Record::DirectAttempt(attempt) => add_direct(&mut direct[at], &attempt.body),
            Record::DirectAttemptSuppressed(suppressed) => {
                summary.direct_attempts_not_shown += suppressed.body.count;
            }
            Record::Probe(probe) => summary.probes.push(probe_summary(&probe.body)),
            Record::Other(kind, _) => {
                unknown_types.insert(kind);
            }
            Record::NetSuppressed(suppressed) => {
                summary.network_not_shown += suppressed.body.count;
            }
            Record::UnidentifiedDropped(dropped) => {
                summary.unidentified_dropped += dropped.body.count;
            }
            Record::PolicyLoaded(loaded) => summary.policies.push(PolicyChange {
                ts: loaded.ts.clone(),
                cause: loaded.body.cause.clone(),
                policy_sha256: Some(loaded.body.policy_sha256.clone()),
                allow_rules: Some(loaded.body.allow_rules),
                error: None,
            }),
            Record::PolicyReloadFailed(failed) => summary.policies.push(PolicyChange {
                ts: failed.ts.clone(),
                cause: failed.body.cause.clone(),
                policy_sha256: None,
                allow_rules: None,
                error: Some(failed.body.error.clone()),
            }),
            Record::SocketAllowed(used) => {
                let body = &used.body;
                let at = match summary
                    .sockets_allowed
                    .iter()
                    .position(|u| u.path == body.path)
                {
                    Some(at) => at,
                    None => {
                        summary.sockets_allowed.push(SocketUse {
                            path: body.path.clone(),
                            ..SocketUse::default()
                        });
                        summary.sockets_allowed.len() - 1
                    }
                };
                let entry = &mut summary.sockets_allowed[at];
                entry.connections += 1;
                if body.result != "connected" {
                    entry.failed += 1;
                }
                if !body.executable.is_empty() && !entry.executables.contains(&body.executable) {
                    entry.executables.push(body.executable.clone());
                }
            }
            Record::NetCapped(_)
            | Record::WriteDeniedSuppressed(_)
            | Record::GitAudit(_)
            | Record::GitMetadataCreated(_)
            | Record::Unreadable
            | Record::Newer(_) => {}
        }
    }
    for (((summary, dest), refused), direct) in sessions
        .iter_mut()
        .zip(destinations)
        .zip(writes)
        .zip(direct)
    {
        summary.network = dest.into_values().collect();
        summary.refused_writes = refused.into_values().collect();
        summary.direct_attempts = direct.into_values().collect();
    }
    Report {
        file,
        sessions,
        incomplete_last_line,
        unreadable_lines,
        newer_records,
        newer_schema_version,
        unknown_types: unknown_types.into_iter().collect(),
    }
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub(super) fn probe_summary(probe: &bridge::log::records::Probe) -> ProbeSummary {
    ProbeSummary {
        phase: probe.phase.clone(),
        passed: probe.report.passed,
        failed_check: probe
            .report
            .checks
            .iter()
            .find(|c| !c.passed)
            .map(|c| c.name.clone()),
        duration_us: Some(probe.report.duration_us),
    }
}

pub(super) fn add_attempt(destinations: &mut BTreeMap<(String, u64), Destination>, record: &Event) {
    let host = record
        .host
        .clone()
        .unwrap_or_else(|| "(unparsed)".to_owned());
    let port = record.port.map_or(0, u64::from);
    if crate::commands::run::is_canary(&host, port) {
        return;
    }
    let entry = destinations
        .entry((host.clone(), port))
        .or_insert_with(|| Destination {
            host,
            port,
            ..Destination::default()
        });
    let request = record.proto == bridge::log::Proto::Inspected;
    if request {
        entry.requests += 1;
    }
    if record.decision == bridge::policy::Verdict::Allow {
        if !request {
            entry.allowed += 1;
        }
    } else {
        if request {
            entry.requests_refused += 1;
        } else {
            entry.denied += 1;
        }
        // In words, as the live notice said it.
        let reason = bridge::log::describe(record.reason).to_owned();
        if !entry.refused_because.contains(&reason) {
            entry.refused_because.push(reason);
        }
    }
    if !request {
        entry.bytes_up += record.bytes_up;
        entry.bytes_down += record.bytes_down;
    }
}

pub(super) fn add_write(writes: &mut BTreeMap<String, RefusedPath>, record: &WriteDenied) {
    let path = record.path.clone();
    let entry = writes.entry(path.clone()).or_insert_with(|| RefusedPath {
        path,
        ..RefusedPath::default()
    });
    entry.attempts += 1;
    for (value, list) in [
        (&record.reason, &mut entry.reasons),
        (&record.syscall, &mut entry.syscalls),
        (&record.executable, &mut entry.executables),
    ] {
        if !value.is_empty() && !list.contains(value) {
            list.push(value.clone());
        }
    }
}

pub(super) fn add_direct(
    direct: &mut BTreeMap<(String, String, u16), DirectDestination>,
    record: &bridge::log::records::DirectAttempt,
) {
    let key = (record.protocol.clone(), record.address.clone(), record.port);
    let entry = direct.entry(key).or_insert_with(|| DirectDestination {
        protocol: record.protocol.clone(),
        address: record.address.clone(),
        port: record.port,
        name: record.name.clone(),
        ..DirectDestination::default()
    });
    entry.attempts += 1;
    for (value, list) in [
        (&record.reason, &mut entry.reasons),
        (&record.executable, &mut entry.executables),
    ] {
        if !value.is_empty() && !list.contains(value) {
            list.push(value.clone());
        }
    }
}
