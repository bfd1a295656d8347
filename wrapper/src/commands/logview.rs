//! `netbox log [FILE|--last] [--json]`: a session log, summarised for people (or as JSON):
//! what ran, the probe's verdict, per host and port the allowed and refused attempts with
//! bytes, per path the refused writes, and how it ended.
//!
//! A log may still be growing, or cut short by a crash: only whole lines are read (a last
//! line with no newline yet is left out and said so), a line that is not JSON is counted
//! and skipped, and a session with no `session_end` is reported as not finished.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bridge::log::records::{SessionEnd, SessionStart, Stamped, WriteDenied};
use bridge::log::{Event, Record};
use serde::Serialize;

use crate::cli::LogArgs;
use crate::error::WrapperError;

/// One host:port's attempts.
#[derive(Debug, Default, Serialize)]
struct Destination {
    host: String,
    port: u64,
    allowed: u64,
    denied: u64,
    bytes_up: u64,
    bytes_down: u64,
    /// Requests inside inspected tunnels, and how many of those were refused (their
    /// bytes are the tunnels', already counted).
    requests: u64,
    requests_refused: u64,
    /// Why attempts were refused (the log's `reason`s, in words), each once.
    refused_because: Vec<String>,
}

/// One path's refused writes.
#[derive(Debug, Default, Serialize)]
struct RefusedPath {
    path: String,
    attempts: u64,
    reasons: Vec<String>,
    syscalls: Vec<String>,
    executables: Vec<String>,
}

/// One destination's direct attempts (past the proxy, to nothing of netbox's).
#[derive(Debug, Default, Serialize)]
struct DirectDestination {
    protocol: String,
    address: String,
    port: u16,
    /// The name the sandbox's DNS stub handed the address out for.
    name: Option<String>,
    attempts: u64,
    reasons: Vec<String>,
    executables: Vec<String>,
}

/// The connections to one allowed host socket.
#[derive(Debug, Default, Serialize)]
struct SocketUse {
    path: String,
    connections: u64,
    /// Of those, how many failed (the socket's server was gone).
    failed: u64,
    executables: Vec<String>,
}

/// One session's summary.
#[derive(Debug, Default, Serialize)]
struct Summary {
    session: String,
    /// The `session_start` record as logged, if there is one.
    start: Option<Stamped<SessionStart>>,
    /// Each probe: its phase (if any), whether it passed, the first failed check.
    probes: Vec<ProbeSummary>,
    phases: Vec<String>,
    network: Vec<Destination>,
    /// `net` records past the log's caps: counted by the run, not written (`net_suppressed`).
    network_not_shown: u64,
    refused_writes: Vec<RefusedPath>,
    direct_attempts: Vec<DirectDestination>,
    /// `direct_attempt` records past the log's cap: counted, not written.
    direct_attempts_not_shown: u64,
    /// Connections to host sockets `--allow-socket` let through, by path.
    sockets_allowed: Vec<SocketUse>,
    /// A shared bridge's connections dropped before they named a tenant
    /// (`unidentified_dropped`).
    #[serde(skip_serializing_if = "is_zero")]
    unidentified_dropped: u64,
    /// The `session_end` record; `None` while running or after a crash.
    end: Option<Stamped<SessionEnd>>,
    /// A standalone bridge's session: each policy it was held to (`policy_loaded`), and
    /// each reload refused (`policy_reload_failed`), in order.
    policies: Vec<PolicyChange>,
}

/// A policy a bridge's session took on, or a reload it refused.
#[derive(Debug, Serialize)]
struct PolicyChange {
    ts: String,
    cause: String,
    /// `None` for a refused reload.
    policy_sha256: Option<String>,
    allow_rules: Option<usize>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct ProbeSummary {
    phase: Option<String>,
    passed: bool,
    failed_check: Option<String>,
    duration_us: Option<u64>,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Report<'a> {
    file: &'a Path,
    sessions: Vec<Summary>,
    /// The last line had no newline yet (still being written, or cut short).
    incomplete_last_line: bool,
    /// Lines that were not JSON records, skipped.
    unreadable_lines: usize,
    /// Records of a newer layout than this netbox reads (their `schema_version`),
    /// skipped rather than guessed at.
    newer_records: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    newer_schema_version: Option<u64>,
    /// Record types this netbox does not know, skipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unknown_types: Vec<String>,
}

pub fn run(args: &LogArgs) -> Result<u8, WrapperError> {
    let file = match (&args.file, args.last) {
        (Some(file), false) => file.clone(),
        (None, true) => newest_session_log()?,
        _ => {
            return Err(WrapperError::Usage(
                "netbox log needs a log FILE or --last (the newest session log)".into(),
            ))
        }
    };
    let bytes = std::fs::read(&file).map_err(|source| WrapperError::Path {
        path: file.clone(),
        what: "event log",
        source,
    })?;
    let report = summarise(&file, &bytes);
    let text = if args.json {
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
    } else {
        render(&report)
    };
    crate::output::print_stdout(&text)?;
    Ok(0)
}

/// The most recently written log in the default sessions directory.
fn newest_session_log() -> Result<PathBuf, WrapperError> {
    let dir = crate::plan::config::sessions_dir()?;
    let newest = std::fs::read_dir(&dir)
        .map_err(|source| WrapperError::Path {
            path: dir.clone(),
            what: "sessions directory",
            source,
        })?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    newest
        .map(|(_, path)| path)
        .ok_or_else(|| WrapperError::Usage(format!("no session logs in {} yet", dir.display())))
}

/// The complete lines of a log that may still be written (or was cut short): a last
/// line without its newline is left out.
pub fn whole_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let whole = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &[][..],
    };
    whole.split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

fn summarise<'a>(file: &'a Path, bytes: &[u8]) -> Report<'a> {
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

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn probe_summary(probe: &bridge::log::records::Probe) -> ProbeSummary {
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

fn add_attempt(destinations: &mut BTreeMap<(String, u64), Destination>, record: &Event) {
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

fn add_write(writes: &mut BTreeMap<String, RefusedPath>, record: &WriteDenied) {
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

fn add_direct(
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

fn render(report: &Report<'_>) -> String {
    let mut out = String::new();
    // Paths, programs and commands in a log are the sandboxed command's choice: each
    // line is made printable whole, so none can move the cursor or forge another line.
    let mut line = |text: String| {
        out.push_str(&crate::printable::printable(&text));
        out.push('\n');
    };
    if report.sessions.is_empty() {
        line(format!("{}: no records", report.file.display()));
    }
    for summary in &report.sessions {
        render_session(summary, &mut line);
    }
    if report.unreadable_lines > 0 {
        line(format!(
            "note: {} line(s) were not JSON records and were skipped",
            report.unreadable_lines
        ));
    }
    if let Some(version) = report.newer_schema_version {
        line(format!(
            "note: {} record(s) of a newer layout (schema_version {version}) were skipped: \
             read this log with the netbox that wrote it",
            report.newer_records
        ));
    }
    if !report.unknown_types.is_empty() {
        line(format!(
            "note: records of types this netbox does not know were skipped: {}",
            report.unknown_types.join(", ")
        ));
    }
    if report.incomplete_last_line {
        line("note: the last line is incomplete (the log is still being written, or was cut short); it was left out".into());
    }
    out
}

fn render_session(summary: &Summary, line: &mut impl FnMut(String)) {
    line(format!("session {}", summary.session));
    if let Some(start) = &summary.start {
        let body = &start.body;
        line(format!(
            "  started  {} (netbox {}, {})",
            start.ts, body.netbox_version, body.mode,
        ));
        if let Some(fetch) = &body.fetch_command {
            line(format!("  fetch    {fetch}"));
        }
        line(format!("  command  {}", body.command.join(" ")));
        let policy: String = body.policy_sha256.chars().take(12).collect();
        line(format!(
            "  workspace {}; {} allow rule(s), policy {policy}",
            body.workspace.display(),
            body.allow_rules,
        ));
    }
    // A standalone bridge's session (no run starts one): its policies, and no probe,
    // writes or end to expect.
    let bridge = summary.start.is_none();
    for change in &summary.policies {
        line(match (&change.policy_sha256, &change.error) {
            (Some(sha), _) => format!(
                "  policy   {} ({}): {} allow rule(s), policy {}",
                change.ts,
                change.cause,
                change.allow_rules.unwrap_or_default(),
                sha.chars().take(12).collect::<String>()
            ),
            (None, error) => format!(
                "  policy   {} ({}): reload refused, the policy before it kept: {}",
                change.ts,
                change.cause,
                error.as_deref().unwrap_or_default()
            ),
        });
    }
    if summary.probes.is_empty() && !bridge {
        line("  probe    none recorded".into());
    }
    for probe in &summary.probes {
        let phase = probe
            .phase
            .as_deref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        let verdict = match (&probe.failed_check, probe.passed) {
            (_, true) => "every control held".to_owned(),
            (Some(check), false) => format!("FAILED: {check}; the command was not started"),
            (None, false) => "FAILED".to_owned(),
        };
        line(format!("  probe{phase}  {verdict}"));
    }
    if !summary.phases.is_empty() {
        line(format!("  phases   {}", summary.phases.join(" -> ")));
    }
    if summary.network.is_empty() {
        line("  network  no attempts".into());
    } else {
        line("  network".into());
        for d in &summary.network {
            let why = if d.refused_because.is_empty() {
                String::new()
            } else {
                format!(" ({})", d.refused_because.join(", "))
            };
            let inspected = if d.requests == 0 {
                String::new()
            } else {
                format!(
                    "  {} request{} inspected, {} refused",
                    d.requests,
                    if d.requests == 1 { "" } else { "s" },
                    d.requests_refused
                )
            };
            line(
                format!(
                    "    {:<40} allowed {:>3}  refused {:>3}  {} up  {} down{why}",
                    // A refused lookup in the sandbox's DNS names no port.
                    if d.port == 0 {
                        format!("{} (lookup)", d.host)
                    } else if d.host.contains(':') {
                        format!("[{}]:{}", d.host, d.port)
                    } else {
                        format!("{}:{}", d.host, d.port)
                    },
                    d.allowed,
                    d.denied,
                    bytes(d.bytes_up),
                    bytes(d.bytes_down),
                ) + &inspected,
            );
        }
    }
    if summary.network_not_shown > 0 {
        line(format!(
            "    and {} more network records past the log's caps: counted, not written",
            summary.network_not_shown
        ));
    }
    if summary.unidentified_dropped > 0 {
        line(format!(
            "    and {} connections dropped before they named a tenant (unidentified_dropped)",
            summary.unidentified_dropped
        ));
    }
    if summary.refused_writes.is_empty() {
        if !bridge {
            line("  writes   none refused".into());
        }
    } else {
        line("  refused writes".into());
        for w in &summary.refused_writes {
            line(format!(
                "    {:<40} {:>3}x  {}  [{}] by {}",
                w.path,
                w.attempts,
                w.reasons.join(", "),
                w.syscalls.join(", "),
                w.executables.join(", "),
            ));
        }
    }
    if !summary.direct_attempts.is_empty() {
        line("  direct attempts (past the proxy, to nothing of netbox's)".into());
        for d in &summary.direct_attempts {
            let to = if d.protocol == "unix" {
                d.address.clone()
            } else if d.address.contains(':') {
                format!("[{}]:{}", d.address, d.port)
            } else {
                format!("{}:{}", d.address, d.port)
            };
            let to = match &d.name {
                Some(name) => format!("{name} ({to})"),
                None => to,
            };
            line(format!(
                "    {:<40} {} {:>3}x  {} by {}",
                to,
                d.protocol,
                d.attempts,
                d.reasons.join(", "),
                d.executables.join(", "),
            ));
        }
    }
    if !summary.sockets_allowed.is_empty() {
        line("  allowed sockets (--allow-socket)".into());
        for u in &summary.sockets_allowed {
            let failed = if u.failed > 0 {
                format!(" ({} failed)", u.failed)
            } else {
                String::new()
            };
            line(format!(
                "    {:<40} {:>3}x{} by {}",
                u.path,
                u.connections,
                failed,
                u.executables.join(", "),
            ));
        }
    }
    if summary.direct_attempts_not_shown > 0 {
        line(format!(
            "    and {} more direct attempts past the log's cap: counted, not written",
            summary.direct_attempts_not_shown
        ));
    }
    match &summary.end {
        Some(end) => line(format!(
            "  ended    {} with status {} after {} ms{}",
            end.body.outcome,
            end.body.status,
            end.body.duration_ms,
            end.body
                .error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default(),
        )),
        None if bridge => {}
        None => line("  ended    not recorded: still running, or cut short".into()),
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{} MiB", n >> 20),
        n if n >= 10 << 10 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_text_cannot_forge_lines_or_escape_sequences() {
        let log = b"{\"type\":\"write_denied\",\"schema_version\":1,\"ts\":\"t\",\"session\":\"s\",\"pid\":1,\"executable\":\"/bin/sh\",\"syscall\":\"openat\",\"path\":\"/x\\n  ended    exited with status 0\\u001b[2J\",\"reason\":\"read-only root\"}\n";
        let text = render(&summarise(Path::new("x"), log));
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            !text.lines().any(|l| l.starts_with("  ended    exited")),
            "{text}"
        );
        assert!(text.contains("/x\\n  ended"), "{text}");
    }

    #[test]
    fn a_bridge_session_says_its_policies_and_no_probe_it_never_had() {
        let record = |kind: &str, body: &str| {
            format!("{{\"type\":\"{kind}\",\"schema_version\":1,\"ts\":\"t\",\"session\":\"b/team-a\",{body}}}\n")
        };
        let log = record(
            "policy_loaded",
            "\"cause\":\"start\",\"tenant\":\"team-a\",\"policy_files\":[],\"policy_sha256\":\"abcdef0123456789\",\"allow_rules\":3",
        ) + &record(
            "policy_reload_failed",
            "\"cause\":\"signal\",\"error\":\"a.toml:1: bad rule\"",
        );
        let text = render(&summarise(Path::new("x"), log.as_bytes()));
        assert!(
            text.contains("policy   t (start): 3 allow rule(s), policy abcdef012345"),
            "{text}"
        );
        assert!(
            text.contains(
                "(signal): reload refused, the policy before it kept: a.toml:1: bad rule"
            ),
            "{text}"
        );
        for absent in ["probe", "ended", "writes"] {
            assert!(!text.contains(absent), "{text}");
        }
    }

    #[test]
    fn records_past_the_caps_are_said_not_shown() {
        let mut attempt = bridge::log::Attempt::begin("s".into(), bridge::log::Proto::HttpConnect);
        attempt.target = bridge::target::Target::parse_authority("a.test:443").ok();
        let tunnel =
            serde_json::to_string(&attempt.finish(bridge::log::End::Closed, 0, 0)).unwrap();
        let log = format!(
            "{tunnel}\n{{\"type\":\"net_capped\",\"schema_version\":1,\"ts\":\"t\",\"session\":\"s\",\"decision\":\"allow\",\"cap\":1,\"inspected\":true}}\n\
             {{\"type\":\"net_suppressed\",\"schema_version\":1,\"ts\":\"t\",\"session\":\"s\",\"count\":5000}}\n"
        );
        let text = render(&summarise(Path::new("x"), log.as_bytes()));
        assert!(
            text.contains("and 5000 more network records past the log's caps"),
            "{text}"
        );
    }

    #[test]
    fn a_half_written_last_line_is_left_out() {
        let mut attempt = bridge::log::Attempt::begin("s".into(), bridge::log::Proto::HttpConnect);
        attempt.target = bridge::target::Target::parse_authority("a.test:443").ok();
        attempt.reason = bridge::policy::Reason::NotAllowed;
        let denied = attempt.finish(bridge::log::End::Refused, 0, 0);
        let newer = serde_json::to_string(&denied)
            .unwrap()
            .replace("\"schema_version\":1", "\"schema_version\":9");
        let log = format!(
            "{}\nnot json\n{newer}\n{{\"type\":\"net\",\"sess",
            serde_json::to_string(&denied).unwrap()
        );
        let log = log.as_bytes();
        let report = summarise(Path::new("x"), log);
        assert!(report.incomplete_last_line);
        assert_eq!(report.unreadable_lines, 1);
        assert_eq!(report.sessions.len(), 1);
        assert_eq!(report.sessions[0].network[0].denied, 1);
        assert!(report.sessions[0].end.is_none());
        assert!(render(&report).contains("cut short"));
        // A record of a newer layout is counted and said, not guessed at.
        assert_eq!(report.newer_records, 1);
        assert!(render(&report).contains("newer layout (schema_version 9)"));
        // A record type this netbox does not know is named, not guessed at.
        let report = summarise(
            Path::new("x"),
            b"{\"type\":\"teleport\",\"schema_version\":1,\"session\":\"s\"}\n",
        );
        assert!(render(&report).contains("does not know were skipped: teleport"));
    }
}
