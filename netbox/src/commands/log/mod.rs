//! `netbox log [FILE|--last] [--json]`: a session log, summarised for people (or as JSON):
//! what ran, the probe's verdict, per host and port the allowed and refused attempts with
//! bytes, per path the refused writes, and how it ended.
//!
//! A log may still be growing, or cut short by a crash: only whole lines are read (a last
//! line with no newline yet is left out and said so), a line that is not JSON is counted
//! and skipped, and a session with no `session_end` is reported as not finished.

use std::path::PathBuf;

mod render;
pub mod sessions;
mod summary;

use crate::cli::LogArgs;
use crate::error::WrapperError;
use render::render;
use summary::summarise;

pub fn run(args: &LogArgs) -> Result<u8, WrapperError> {
    if args.list {
        return list(args);
    }
    if args.prune {
        return prune(args);
    }
    let file = match (&args.file, args.last) {
        (Some(file), false) => file.clone(),
        (None, true) => last_from_here()?,
        _ => {
            return Err(WrapperError::Usage(
                "netbox log needs a log FILE, --last (the newest run from here) or --list".into(),
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
        serde_json::to_string_pretty(&report)
            .map_err(|e| WrapperError::Output(std::io::Error::other(e)))?
            + "\n"
    } else {
        render(&report)
    };
    crate::output::print_stdout(&text)?;
    Ok(0)
}

/// The session logs in the default sessions directory, newest first.
fn session_logs() -> Result<(PathBuf, Vec<sessions::SessionLog>), WrapperError> {
    let dir = crate::plan::config::sessions_dir()?;
    let logs = sessions::list(&dir).map_err(|source| WrapperError::Path {
        path: dir.clone(),
        what: "sessions directory",
        source,
    })?;
    Ok((dir, logs))
}

/// The newest log of a run from this directory; else the newest of all, said on stderr
/// (another terminal's run is not taken for this one's without a word).
fn last_from_here() -> Result<PathBuf, WrapperError> {
    let (dir, logs) = session_logs()?;
    let here = std::env::current_dir()
        .ok()
        .and_then(|d| std::fs::canonicalize(d).ok());
    if let Some(log) = here
        .as_deref()
        .and_then(|here| logs.iter().find(|l| sessions::ran_from(l, here)))
    {
        return Ok(log.path.clone());
    }
    let newest = logs
        .first()
        .ok_or_else(|| WrapperError::Usage(format!("no session logs in {} yet", dir.display())))?;
    crate::output::say(&format!(
        "netbox log: no run from this directory; the newest of all is from {} ({})",
        crate::printable::printable(
            &newest
                .workspace
                .as_deref()
                .map_or("an unknown workspace".into(), |w| w.display().to_string())
        ),
        crate::printable::printable(&newest.command.join(" "))
    ));
    Ok(newest.path.clone())
}

/// `--list`: one line a session, newest first, as the filters keep them.
fn list(args: &LogArgs) -> Result<u8, WrapperError> {
    let (_, logs) = session_logs()?;
    let here = std::env::current_dir()
        .ok()
        .and_then(|d| std::fs::canonicalize(d).ok());
    let now = std::time::SystemTime::now();
    let kept = logs.iter().filter(|log| {
        (!args.here || here.as_deref().is_some_and(|h| sessions::ran_from(log, h)))
            && args
                .command
                .as_deref()
                .is_none_or(|text| log.command.join(" ").contains(text))
            && args
                .since
                .is_none_or(|since| now.duration_since(log.modified).unwrap_or_default() <= since)
            && (!args.failed || !log.succeeded())
    });
    let mut text = String::new();
    for log in kept {
        text.push_str(&crate::printable::printable(&format!(
            "{}  {:<12} {}  {}  {}",
            log.started.as_deref().unwrap_or("?"),
            log.outcome(),
            log.workspace
                .as_deref()
                .map_or("?".into(), |w| w.display().to_string()),
            log.command.join(" "),
            log.path.display()
        )));
        text.push('\n');
    }
    crate::output::print_stdout(&text)?;
    Ok(0)
}

/// `--prune`: what `--keep-days` and `--max-size` leave out, removed and said.
fn prune(args: &LogArgs) -> Result<u8, WrapperError> {
    let (dir, logs) = session_logs()?;
    let (count, bytes) = sessions::prune(&logs, args.keep_days, args.max_size);
    crate::output::say(&format!(
        "netbox log: removed {count} session log(s), {bytes} bytes, from {}",
        dir.display()
    ));
    Ok(0)
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
