//! The event log's records besides `net` (which is [`crate::log::Event`]): one type each,
//! serialised by the writer and read back by `netbox log`, `netbox learn` and the tests,
//! so a field renamed on one side is renamed on the other. On disk each is framed as
//! `{"type", "schema_version", "ts", "session", ...its fields}` ([`Stamped`]).
//!
//! Not yet here: `probe` (its report is the sandbox's own type) and the git audit's
//! records, which readers take by name.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Every record type a writer of this version writes: a reader that meets another says
/// so rather than guessing what it meant.
pub const KNOWN_TYPES: &[&str] = &[
    "net",
    "net_capped",
    "net_suppressed",
    "probe",
    "phase",
    "session_start",
    "session_end",
    "write_denied",
    "write_denied_suppressed",
    "git_audit",
    "git_metadata_created",
];

/// A record as read back: the frame every record has, and its own fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stamped<T> {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema_version: u32,
    pub ts: String,
    pub session: String,
    #[serde(flatten)]
    pub body: T,
}

/// `session_start`: what ran under which boundary, so a log can be read without the
/// command line that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStart {
    pub netbox_version: String,
    /// `sandbox`, `fetch_then_cut` with --fetch, or `learn` (`netbox learn`).
    pub mode: String,
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_command: Option<String>,
    pub cwd: PathBuf,
    pub workspace: PathBuf,
    pub write_roots: Vec<PathBuf>,
    /// `private` (a tmpfs of the run's own) or `host`.
    pub tmp: String,
    pub protected: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    pub hidden: Vec<PathBuf>,
    pub policy_files: Vec<PathBuf>,
    /// SHA-256 of the policy's canonical text (its rules and pinned hosts).
    pub policy_sha256: String,
    pub allow_rules: usize,
    pub limits: Limits,
    pub clean_env: bool,
    pub nested_userns: bool,
    pub kernel: String,
    pub uid: u32,
    pub gid: u32,
}

/// The limits a run was held to, those given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsize_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `session_end`: how a run ended and what was refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEnd {
    /// netbox's exit status.
    pub status: u8,
    /// `exited` (CMD ran and this is its status), `timed_out`, `cancelled`,
    /// `probe_failed` (CMD never ran) or `failed` (netbox's own failure; see `error`).
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
    pub net_allowed: u64,
    pub net_denied: u64,
    pub writes_denied: u64,
}

/// `phase`: with `--fetch`, where the session stands: "fetch" (CMD1 starts, with the
/// allowlist), "cut" (CMD1 succeeded and the bridge is closed; CMD is next), or
/// "fetch_failed" (CMD1 failed; CMD does not run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_status: Option<i32>,
}

/// `write_denied`: one write the mounts refused, as the denied-write log saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteDenied {
    /// The caller's pid as netbox sees it (the host's pid namespace).
    pub pid: u32,
    pub executable: String,
    pub syscall: String,
    pub path: String,
    /// `protected path`, `read-only path`, `mount point` or `read-only root`.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each record type, written through the log's own frame and read back whole; the
    /// field names are pinned by the text, so renaming one breaks this test.
    #[test]
    fn every_record_type_reads_back_as_written() {
        let start = r#"{"type":"session_start","schema_version":1,"ts":"2026-12-01T00:00:00.000Z","session":"s1","netbox_version":"0.1.0","mode":"sandbox","command":["true"],"cwd":"/w","workspace":"/w","write_roots":["/w"],"tmp":"private","protected":["/w/.git"],"read_only":[],"hidden":[],"policy_files":[],"policy_sha256":"ab","allow_rules":0,"limits":{"pids":64},"clean_env":false,"nested_userns":false,"kernel":"6.1","uid":0,"gid":0}"#;
        let end = r#"{"type":"session_end","schema_version":1,"ts":"2026-12-01T00:00:01.000Z","session":"s1","status":0,"outcome":"exited","duration_ms":12,"net_allowed":1,"net_denied":2,"writes_denied":3}"#;
        let phase = r#"{"type":"phase","schema_version":1,"ts":"2026-12-01T00:00:00.500Z","session":"s1","phase":"cut","command":"make","fetch_status":0}"#;
        let write = r#"{"type":"write_denied","schema_version":1,"ts":"2026-12-01T00:00:00.600Z","session":"s1","pid":42,"executable":"/bin/sh","syscall":"openat","path":"/etc/x","reason":"read-only root"}"#;
        fn round_trip<T: Serialize + serde::de::DeserializeOwned>(line: &str) -> Stamped<T> {
            let record: Stamped<T> = serde_json::from_str(line).expect(line);
            assert_eq!(serde_json::to_string(&record).unwrap(), line);
            record
        }
        let start = round_trip::<SessionStart>(start);
        assert_eq!(start.body.limits.pids, Some(64));
        assert_eq!(round_trip::<SessionEnd>(end).body.writes_denied, 3);
        assert_eq!(round_trip::<Phase>(phase).body.phase, "cut");
        assert_eq!(
            round_trip::<WriteDenied>(write).body.reason,
            "read-only root"
        );
    }
}
