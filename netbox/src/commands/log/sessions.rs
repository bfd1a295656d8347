//! The session logs in the sessions directory, each as its first and last records tell
//! it: when it started, from which workspace, what ran, how it ended. For `netbox log
//! --list` and `--last` (the newest from this workspace), and for pruning old ones.
//!
//! Only a log's head and tail are read (the first record is `session_start`, the last
//! `session_end` once the run is over), so listing hundreds of sessions reads little.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

/// Bytes read at a log's head and at its tail, at most.
const EDGE_BYTES: u64 = 64 * 1024;

/// One session log, as listed.
#[derive(Debug, Clone)]
pub struct SessionLog {
    pub path: PathBuf,
    pub modified: SystemTime,
    pub size: u64,
    /// `session_start`'s time stamp, as written.
    pub started: Option<String>,
    pub workspace: Option<PathBuf>,
    pub command: Vec<String>,
    /// `session_end`'s outcome and netbox's status; `None` while it runs (or if it was
    /// killed before writing it).
    pub ended: Option<(String, u64)>,
}

impl SessionLog {
    /// Whether the run ended with CMD exiting 0.
    pub fn succeeded(&self) -> bool {
        matches!(&self.ended, Some((outcome, 0)) if outcome == "exited")
    }

    /// How it ended, in a word or two.
    pub fn outcome(&self) -> String {
        match &self.ended {
            Some((outcome, status)) if outcome == "exited" => format!("exit {status}"),
            Some((outcome, _)) => outcome.replace('_', " "),
            None => "not ended".into(),
        }
    }
}

/// Every `*.jsonl` in `dir`, newest first. A file that cannot be read is left out.
pub fn list(dir: &Path) -> std::io::Result<Vec<SessionLog>> {
    let mut logs: Vec<SessionLog> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| read(&e.path()))
        .collect();
    logs.sort_by(|a, b| b.modified.cmp(&a.modified).then(b.path.cmp(&a.path)));
    Ok(logs)
}

fn read(path: &Path) -> Option<SessionLog> {
    let mut file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    let mut head = Vec::new();
    (&mut file).take(EDGE_BYTES).read_to_end(&mut head).ok()?;
    let first = head
        .split(|&b| b == b'\n')
        .next()
        .and_then(|line| serde_json::from_slice::<Value>(line).ok());
    let start = first.filter(|r| r["type"] == "session_start");
    let tail = if meta.len() > EDGE_BYTES {
        file.seek(SeekFrom::End(-(EDGE_BYTES as i64))).ok()?;
        let mut tail = Vec::new();
        file.take(EDGE_BYTES).read_to_end(&mut tail).ok()?;
        tail
    } else {
        head
    };
    let lines: Vec<&[u8]> = super::whole_lines(&tail).collect();
    let end = lines
        .into_iter()
        .rev()
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .find(|r| r["type"] == "session_end");
    Some(SessionLog {
        path: path.to_owned(),
        modified: meta.modified().ok()?,
        size: meta.len(),
        started: start
            .as_ref()
            .and_then(|r| r["ts"].as_str())
            .map(str::to_owned),
        workspace: start
            .as_ref()
            .and_then(|r| r["workspace"].as_str())
            .map(PathBuf::from),
        command: start
            .as_ref()
            .and_then(|r| r["command"].as_array())
            .map(|words| {
                words
                    .iter()
                    .filter_map(|w| w.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        ended: end.map(|r| {
            (
                r["outcome"].as_str().unwrap_or("?").to_owned(),
                r["status"].as_u64().unwrap_or(0),
            )
        }),
    })
}

/// Whether a session ran from `dir`: its workspace is `dir` or holds it. The log writes a
/// path that is not UTF-8 with U+FFFD for each byte that is not: `dir` is compared so.
pub fn ran_from(log: &SessionLog, dir: &Path) -> bool {
    let dir = PathBuf::from(dir.to_string_lossy().into_owned());
    log.workspace
        .as_deref()
        .is_some_and(|ws| dir.starts_with(ws))
}

/// Removes the logs past `keep_days` old and, newest first, those past `max_bytes` in
/// all; a run still writing its log (no `session_end`, written in the last day) is kept.
/// Returns how many were removed and their bytes.
pub fn prune(logs: &[SessionLog], keep_days: u64, max_bytes: u64) -> (usize, u64) {
    let now = SystemTime::now();
    let age = |log: &SessionLog| now.duration_since(log.modified).unwrap_or_default();
    let day = std::time::Duration::from_secs(24 * 3600);
    let mut total = 0u64;
    let mut removed = (0usize, 0u64);
    for log in logs {
        let running = log.ended.is_none() && age(log) < day;
        total += log.size;
        let too_old = age(log) > day * u32::try_from(keep_days).unwrap_or(u32::MAX);
        if !running && (too_old || total > max_bytes) && std::fs::remove_file(&log.path).is_ok() {
            removed.0 += 1;
            removed.1 += log.size;
        }
    }
    removed
}

/// Days a session log is kept, and the most they take together, when a run prunes.
pub const KEEP_DAYS: u64 = 30;
pub const MAX_BYTES: u64 = 200 << 20;

/// The file whose time says when `dir` was last pruned.
const PRUNED_STAMP: &str = ".netbox-pruned";

/// Prunes `dir` with the defaults if it was not in the last day: a run calls this as it
/// ends, so that no run waits on it as it starts, and most runs do no more than a stat.
pub fn prune_if_due(dir: &Path) {
    let stamp = dir.join(PRUNED_STAMP);
    let day = std::time::Duration::from_secs(24 * 3600);
    let recent = std::fs::metadata(&stamp)
        .and_then(|m| m.modified())
        .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() < day);
    if recent {
        return;
    }
    // Written first: a prune that fails is not tried again at once by every run.
    if std::fs::write(&stamp, b"").is_err() {
        return;
    }
    if let Ok(logs) = list(dir) {
        prune(&logs, KEEP_DAYS, MAX_BYTES);
    }
}
