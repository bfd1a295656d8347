//! `netbox log [FILE|--last] [--json]`: a session log, summarised for people (or as JSON):
//! what ran, the probe's verdict, per host and port the allowed and refused attempts with
//! bytes, per path the refused writes, and how it ended.
//!
//! A log may still be growing, or cut short by a crash: only whole lines are read (a last
//! line with no newline yet is left out and said so), a line that is not JSON is counted
//! and skipped, and a session with no `session_end` is reported as not finished.

use std::path::PathBuf;

mod render;
mod summary;

use crate::cli::LogArgs;
use crate::error::WrapperError;
use render::render;
use summary::summarise;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
