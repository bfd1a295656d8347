//! A summary as people read it: one block per session, a line per host, path or attempt.

use super::summary::{Report, Summary};

pub(super) fn render(report: &Report<'_>) -> String {
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

pub(super) fn render_session(summary: &Summary, line: &mut impl FnMut(String)) {
    line(format!("session {}", summary.session));
    // A standalone bridge's session (no run starts one): its policies, and no probe,
    // writes or end to expect.
    let bridge = summary.start.is_none();
    start_lines(summary, line);
    policy_lines(summary, line);
    probe_lines(summary, bridge, line);
    network_lines(summary, line);
    write_lines(summary, bridge, line);
    past_the_proxy_lines(summary, line);
    end_lines(summary, bridge, line);
}

/// What ran, where, under which policy.
pub(super) fn start_lines(summary: &Summary, line: &mut impl FnMut(String)) {
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
}

/// Each policy a standalone bridge loaded, or refused to.
pub(super) fn policy_lines(summary: &Summary, line: &mut impl FnMut(String)) {
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
}

/// Each probe's verdict, and the phases the run went through.
pub(super) fn probe_lines(summary: &Summary, bridge: bool, line: &mut impl FnMut(String)) {
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
}

/// Per host and port: the allowed and refused attempts, their bytes and requests.
pub(super) fn network_lines(summary: &Summary, line: &mut impl FnMut(String)) {
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
}

/// Per path: the refused writes, why, by which call and program.
pub(super) fn write_lines(summary: &Summary, bridge: bool, line: &mut impl FnMut(String)) {
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
}

/// What CMD tried past the proxy: direct attempts, and the host sockets it was allowed.
pub(super) fn past_the_proxy_lines(summary: &Summary, line: &mut impl FnMut(String)) {
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
}

/// How the run ended, if it did.
pub(super) fn end_lines(summary: &Summary, bridge: bool, line: &mut impl FnMut(String)) {
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

pub(super) fn bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{} MiB", n >> 20),
        n if n >= 10 << 10 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}
