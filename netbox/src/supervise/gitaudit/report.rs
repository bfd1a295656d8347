//! An audit's findings, said: one `git_metadata_created` record each (up to a bound)
//! and a `git_audit` record in the event log, and warnings on stderr.

use bridge::log::records::{GitAudit, GitMetadataCreated};

use super::{describe, How, Report, Stopped};

/// Findings written as records per audit; past this they are only counted.
const MAX_RECORDS: usize = 1_000;

/// Findings said on stderr per audit; the rest are in the event log.
const MAX_WARNINGS: usize = 20;

/// Unread directories of the sweep of git's data named on stderr.
const MAX_UNREAD_NAMED: usize = 5;

/// Writes an audit's findings to the event log (and a summary record), and warns on
/// stderr about each (up to a few) and about an audit that could not finish.
pub fn report(log: &bridge::EventLog, session: &str, audited: Option<&str>, report: &Report) {
    write_records(log, session, audited, report);
    warn(audited, report);
}

/// Each finding as a `git_metadata_created` record, then the audit's own `git_audit`.
fn write_records(log: &bridge::EventLog, session: &str, audited: Option<&str>, report: &Report) {
    for finding in report.findings.iter().take(MAX_RECORDS) {
        let record = GitMetadataCreated {
            path: finding.path.to_string_lossy().into_owned(),
            kind: finding.kind,
            how: finding.how,
            repository: finding
                .named_by
                .as_ref()
                .filter(|(git_dir, _)| !git_dir.as_os_str().is_empty())
                .map(|(git_dir, _)| git_dir.to_string_lossy().into_owned()),
            setting: finding.named_by.as_ref().map(|(_, s)| s.clone()),
            entry: None,
            removed: false,
            audited_session: audited.map(str::to_owned),
        };
        log.record_as("git_metadata_created", session, &record);
    }
    for foreign in report.foreign.found.iter().take(MAX_RECORDS) {
        let record = GitMetadataCreated {
            path: foreign.path.to_string_lossy().into_owned(),
            kind: super::Kind::ForeignEntry,
            how: foreign.how,
            repository: None,
            setting: None,
            entry: Some(foreign.entry),
            removed: foreign.removed,
            audited_session: audited.map(str::to_owned),
        };
        log.record_as("git_metadata_created", session, &record);
    }
    log.record_as(
        "git_audit",
        session,
        &GitAudit {
            complete: report.complete(),
            stopped: report.stopped,
            directories: report.directories,
            unread: report.unread,
            unread_paths: report
                .unread_paths
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            found: u64::try_from(report.findings.len() + report.foreign.found.len())
                .unwrap_or(u64::MAX),
            took_ms: u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX),
            audited_session: audited.map(str::to_owned),
        },
    );
}

/// The findings said on stderr (a few of each kind), and an audit that could not finish.
// Whole: one warning per kind of finding in turn, each a line or two of its own wording.
fn warn(audited: Option<&str>, report: &Report) {
    use crate::printable::printable;
    let whose = match audited {
        Some(id) => format!(
            "the run of session {} (which ended without its check)",
            printable(id)
        ),
        None => "the command".to_owned(),
    };
    for finding in report.findings.iter().take(MAX_WARNINGS) {
        let did = match finding.how {
            How::Created => "created",
            How::Changed | How::BeforeRun => "changed",
            How::Unread => "may have changed",
        };
        let path = printable(&finding.path.to_string_lossy());
        let line = match &finding.named_by {
            Some((git_dir, why)) if git_dir.as_os_str().is_empty() => format!(
                "netbox: warning: {whose} {did} {path} ({}): netbox watched it, being unable to \
                 pin it, and git or your shell may run it after the run; review it",
                printable(why),
            ),
            Some((git_dir, setting)) => format!(
                "netbox: warning: {whose} {did} {path}, which git runs or reads as code for \
                 the repository {} ({}); review it before running git there",
                printable(&git_dir.to_string_lossy()),
                printable(setting),
            ),
            None => format!(
                "netbox: warning: {whose} {} {} {path}: git run there, or in a repository \
                 that records it as a submodule, reads its config and hooks; review it before \
                 running git",
                match finding.how {
                    How::Created => "created",
                    How::Changed | How::BeforeRun => "changed the config or hooks of",
                    How::Unread => "may have changed the config or hooks of",
                },
                describe(finding.kind),
            ),
        };
        crate::output::say(&line);
    }
    if report.findings.len() > MAX_WARNINGS {
        crate::output::say(&format!(
            "netbox: warning: and {} more git metadata paths (see the event log)",
            report.findings.len() - MAX_WARNINGS
        ));
    }
    for foreign in report.foreign.found.iter().take(MAX_WARNINGS) {
        let path = printable(&foreign.path.to_string_lossy());
        let what = super::foreign::describe(foreign.entry);
        let line =
            match (foreign.how, foreign.removed) {
                (How::BeforeRun, _) => format!(
                    "netbox: warning: {path} is {what}, where git never makes one (it was there \
                 before the run, and is left): git writes through a link there, and blocks \
                 on a FIFO; remove it unless you made it"
                ),
                (how, true) => {
                    format!(
                "netbox: warning: removed {path}: {whose} {} {what} there, where git never \
                 makes one (git would have written through it, or blocked on it)",
                if how == How::Created { "made" } else { "changed" },
            )
                }
                (how, false) => {
                    format!(
                "netbox: warning: {whose} {} {what} at {path}, where git never makes one, and \
                 netbox could not remove it: git would write through it, or block on it; \
                 remove it before running git there",
                if how == How::Created { "made" } else { "changed" },
            )
                }
            };
        crate::output::say(&line);
    }
    if report.foreign.found.len() > MAX_WARNINGS {
        crate::output::say(&format!(
            "netbox: warning: and {} more entries git never makes (see the event log)",
            report.foreign.found.len() - MAX_WARNINGS
        ));
    }
    if report.foreign.stopped {
        crate::output::say(&format!(
            "netbox: warning: the check of git's data for links, FIFOs and sockets stopped \
             after {} entries; entries beyond that are not reported or removed",
            report.foreign.entries
        ));
    }
    if !report.foreign.unread.is_empty() {
        let named: Vec<String> = report
            .foreign
            .unread
            .iter()
            .take(MAX_UNREAD_NAMED)
            .map(|p| printable(&p.to_string_lossy()))
            .collect();
        crate::output::say(&format!(
            "netbox: warning: the check of git's data for links, FIFOs and sockets could not \
             read {}: entries there are not reported or removed",
            named.join(", ")
        ));
    }
    match report.stopped {
        Some(Stopped::Cancelled) => crate::output::say(
            "netbox: the check for git metadata was cancelled; the next netbox run finishes it",
        ),
        Some(why) => crate::output::say(&format!(
            "netbox: warning: the check for git metadata stopped early ({}: {} directories read); \
             git metadata beyond that is not reported",
            match why {
                Stopped::TimeLimit => "time limit",
                Stopped::EntryLimit => "entry limit of git's data",
                _ => "directory limit",
            },
            report.directories
        )),
        None => {}
    }
    if report.unread > 0 {
        let named: Vec<String> = report
            .unread_paths
            .iter()
            .map(|p| printable(&p.to_string_lossy()))
            .collect();
        let more = report.unread - u64::try_from(named.len()).unwrap_or(0);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        crate::output::say(&format!(
            "netbox: warning: the check for git metadata could not read {}{more}: git \
             metadata there is not reported",
            named.join(", ")
        ));
    }
}
