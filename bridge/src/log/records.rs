//! The event log's records besides `net` (which is [`crate::log::Event`]): one type each,
//! serialised by the writer and read back by `netbox log`, `netbox learn` and the tests,
//! so a field renamed on one side is renamed on the other. On disk each is framed as
//! `{"type", "schema_version", "ts", "session", ...its fields}` ([`Stamped`]).

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
    "policy_loaded",
    "policy_reload_failed",
    "unidentified_dropped",
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
    #[serde(with = "super::path_json::text")]
    pub cwd: PathBuf,
    #[serde(with = "super::path_json::text")]
    pub workspace: PathBuf,
    #[serde(with = "super::path_json::text::list")]
    pub write_roots: Vec<PathBuf>,
    /// `private` (a tmpfs of the run's own) or `host`.
    pub tmp: String,
    #[serde(with = "super::path_json::text::list")]
    pub protected: Vec<PathBuf>,
    #[serde(with = "super::path_json::text::list")]
    pub read_only: Vec<PathBuf>,
    #[serde(with = "super::path_json::text::list")]
    pub hidden: Vec<PathBuf>,
    #[serde(with = "super::path_json::text::list")]
    pub policy_files: Vec<PathBuf>,
    /// SHA-256 of the policy's canonical text (its rules and pinned hosts).
    pub policy_sha256: String,
    pub allow_rules: usize,
    /// `--bridge URL`: the bridge that judges every connection (this log has what it
    /// answered; its own log has the tenant's policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    pub limits: Limits,
    pub clean_env: bool,
    pub nested_userns: bool,
    pub kernel: String,
    pub uid: u32,
    pub gid: u32,
}

/// `policy_loaded`: the policy a standalone bridge's session (or one of its tenants) is
/// held to from now on, at start and at each reload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyLoaded {
    /// `start`, `signal` (SIGHUP) or `watch` (`--watch` saw a policy file change).
    pub cause: String,
    /// The tenant, on a bridge with `--tenants`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(with = "super::path_json::text::list")]
    pub policy_files: Vec<PathBuf>,
    /// SHA-256 of the policy's canonical text, as `session_start`'s.
    pub policy_sha256: String,
    pub allow_rules: usize,
}

/// `policy_reload_failed`: a reload that was refused; every policy before it stays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyReloadFailed {
    pub cause: String,
    pub error: String,
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
    /// Requests inside inspected tunnels (apart from the tunnels, which the two above
    /// count), and how many of them were refused.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requests_inspected: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requests_refused: u64,
    pub writes_denied: u64,
    /// Direct attempts seen (`direct_attempt` records, and those past their cap).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub direct_attempts: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

/// `net_suppressed` and `write_denied_suppressed`, at the end of a run: how many records
/// past the cap were only counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suppressed {
    pub count: u64,
}

/// `unidentified_dropped`: a shared bridge dropped connections that had not named a tenant
/// (lobby.rs), for newer ones or to free descriptors: one record per interval in which it
/// did, apart from the refusal budgets (strangers who never ask anything could otherwise
/// fill those), under the bridge's own session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnidentifiedDropped {
    /// Connections dropped in the interval.
    pub count: u64,
    /// The interval, in milliseconds, that ends with this record.
    pub interval_ms: u64,
    /// `--max-unidentified`.
    pub max_unidentified: usize,
    /// The sources (an IPv4 address, an IPv6 /64, `local`) that lost the most of them,
    /// with how many each: 16 at most, so that a flood from many sources still writes one
    /// short record.
    #[serde(default)]
    pub from: std::collections::BTreeMap<String, u64>,
}

/// `net_capped`: the run reached its cap of `net` records of one decision; from here on
/// they are only counted (`net_suppressed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetCapped {
    pub decision: crate::policy::Verdict,
    pub cap: u64,
    /// The cap of requests inside inspected tunnels (`decision` is the first one's past it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inspected: bool,
    /// The cap of lookups the DNS stub refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lookups: bool,
}

/// `probe`: the live probe's report. The sandbox sends it to netbox as it is (netbox
/// adds its own checks), and netbox logs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// With `--fetch`: `fetch` (before CMD1) or `cut` (before CMD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(flatten)]
    pub report: ProbeReport,
}

/// The probe's verdict: every check, and whether all passed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub checks: Vec<Check>,
    pub passed: bool,
    pub duration_us: u64,
    /// The writes the probe tried and whether the mounts refused each: netbox checks its
    /// denied-write log saw them the same way, then empties this (so it is not logged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watched_writes: Vec<WatchedWrite>,
    /// The connections the probe made under the filter, and whether each was a direct
    /// attempt (to nothing); checked against the direct-attempt log the same way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watched_connects: Vec<WatchedConnect>,
}

impl ProbeReport {
    /// Adds a check made outside the sandbox (netbox's view of the same attempts).
    pub fn add_check(&mut self, check: Check) {
        self.passed &= check.passed;
        self.checks.push(check);
    }

    /// The first failed check, described for a person.
    pub fn first_failure(&self) -> Option<String> {
        let check = self.checks.iter().find(|c| !c.passed)?;
        let bad = check
            .forbidden
            .iter()
            .chain(&check.control)
            .find(|o| !o.ok)
            .map(|o| format!("{}: {}", o.attempt, o.result))
            .unwrap_or_default();
        Some(format!("{} ({bad})", check.name))
    }
}

/// One control: the attempts that must fail and (usually) the controls that must succeed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub forbidden: Vec<Outcome>,
    pub control: Vec<Outcome>,
    pub passed: bool,
}

/// One attempt of a check: what was tried, what happened, and whether that is right.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub attempt: String,
    pub result: String,
    pub ok: bool,
}

/// One write the probe tried, as the sandbox names its path, and whether the mounts
/// refused it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchedWrite {
    #[serde(with = "super::path_json::exact")]
    pub path: PathBuf,
    pub refused: bool,
}

/// A connection the live probe made under the seccomp filter, and whether it went to
/// nothing (a direct attempt) or to one of netbox's listeners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchedConnect {
    pub to: std::net::SocketAddr,
    pub direct: bool,
}

/// `git_metadata_created`: git metadata a run left in its workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GitMetadataCreated {
    pub path: String,
    pub kind: GitMetadataKind,
    pub how: GitMetadataHow,
    /// For a `code_path`: the git directory whose configuration names it, and the
    /// setting that does (`core.hookspath`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<String>,
    /// For a `foreign_entry`: what it is (`symlink`, `fifo`, `socket`, `device`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<ForeignEntry>,
    /// For a `foreign_entry`: netbox removed it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// For a record of an earlier session that ended without its check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audited_session: Option<String>,
}

/// An entry git never makes in its data, as found there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForeignEntry {
    Symlink,
    Fifo,
    Socket,
    Device,
}

/// What a piece of git metadata is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GitMetadataKind {
    /// A `.git` directory.
    GitDir,
    /// A `.git` file (`gitdir: PATH`).
    GitdirFile,
    /// A `.git` symlink.
    GitSymlink,
    /// A directory shaped like a bare repository.
    BareRepository,
    /// A linked worktree's git directory (`HEAD` and `commondir`).
    LinkedGitDir,
    /// A file or directory a repository's configuration names for git to run or read
    /// as code (a hooks path, a program, an included file).
    CodePath,
    /// An entry git never makes (a symlink, FIFO, socket or device file) where CMD could
    /// write a git directory's data (`logs/`, `refs/`, `objects/`, a writable top).
    ForeignEntry,
}

/// How it came to be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GitMetadataHow {
    Created,
    Changed,
    /// There before the run (reported, never removed).
    BeforeRun,
    /// A watched directory read only in part: a change past what was read is unseen.
    Unread,
}

/// `git_audit`: what the check for git metadata read, and whether it read everything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GitAudit {
    pub complete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<AuditStopped>,
    pub directories: u64,
    pub unread: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread_paths: Vec<String>,
    pub found: u64,
    pub took_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audited_session: Option<String>,
}

/// Why the check for git metadata stopped before it had read everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditStopped {
    TimeLimit,
    DirectoryLimit,
    Cancelled,
    /// The sweep of git's data for entries git never makes read its limit of entries.
    EntryLimit,
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

/// `direct_attempt`: a connection or datagram CMD sent past the proxy, to somewhere no
/// listener of netbox's (nor of the sandbox's own) takes it, as the seccomp filter saw it
/// before the kernel refused it (or, with capture, before it reached nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectAttempt {
    /// The caller's pid as netbox sees it (the host's pid namespace).
    pub pid: u32,
    pub executable: String,
    /// `connect`, `sendto`, `sendmsg` or `sendmmsg`.
    pub syscall: String,
    /// `tcp`, `udp`, or `other` (another kind of socket, or one netbox could not look at).
    pub protocol: String,
    pub address: String,
    pub port: u16,
    /// The name the sandbox's DNS stub handed `address` out for (capture).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `port not captured`, `udp not carried`, `no listener` or `no route out`.
    pub reason: String,
}

/// `socket_allowed`: a connection CMD made to a host Unix socket the user allowed
/// (`--allow-socket`, `sockets = [...]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketAllowed {
    /// The caller's pid as netbox sees it (the host's pid namespace).
    pub pid: u32,
    pub executable: String,
    /// The allowed path, as given (variables expanded).
    pub path: String,
    /// `connected`, or why the connect failed (the agent is gone: `Connection refused`).
    pub result: String,
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
        let direct = r#"{"type":"direct_attempt","schema_version":1,"ts":"2026-12-01T00:00:00.650Z","session":"s1","pid":43,"executable":"/usr/bin/ssh","syscall":"connect","protocol":"tcp","address":"198.18.0.1","port":2222,"name":"git.test","reason":"port not captured"}"#;
        let probe = r#"{"type":"probe","schema_version":1,"ts":"2026-12-01T00:00:00.100Z","session":"s1","phase":"cut","checks":[{"name":"read-only root","forbidden":[{"attempt":"create /etc/x","result":"EROFS","ok":true}],"control":[{"attempt":"write the workspace","result":"written","ok":false}],"passed":false}],"passed":false,"duration_us":900}"#;
        let capped = r#"{"type":"net_capped","schema_version":1,"ts":"2026-12-01T00:00:00.700Z","session":"s1","decision":"deny","cap":10000}"#;
        let suppressed = r#"{"type":"net_suppressed","schema_version":1,"ts":"2026-12-01T00:00:00.800Z","session":"s1","count":501}"#;
        let created = r#"{"type":"git_metadata_created","schema_version":1,"ts":"2026-12-01T00:00:00.900Z","session":"s2","path":"/w/sub/.git","kind":"gitdir_file","how":"changed","audited_session":"s1"}"#;
        let dropped = r#"{"type":"unidentified_dropped","schema_version":1,"ts":"2026-12-01T00:00:00.990Z","session":"s1","count":900,"interval_ms":5000,"max_unidentified":256,"from":{"192.0.2.7":880,"2001:db8::/64":20}}"#;
        let audit = r#"{"type":"git_audit","schema_version":1,"ts":"2026-12-01T00:00:00.950Z","session":"s1","complete":false,"stopped":"time_limit","directories":12,"unread":1,"unread_paths":["/w/hid"],"found":1,"took_ms":3}"#;
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
        let direct = round_trip::<DirectAttempt>(direct).body;
        assert_eq!(
            (direct.port, direct.name.as_deref()),
            (2222, Some("git.test"))
        );
        let probe = round_trip::<Probe>(probe).body;
        assert_eq!(probe.phase.as_deref(), Some("cut"));
        assert_eq!(
            probe.report.first_failure().as_deref(),
            Some("read-only root (write the workspace: written)")
        );
        assert_eq!(
            round_trip::<NetCapped>(capped).body.decision,
            crate::policy::Verdict::Deny
        );
        assert_eq!(round_trip::<Suppressed>(suppressed).body.count, 501);
        assert_eq!(
            round_trip::<GitMetadataCreated>(created).body.kind,
            GitMetadataKind::GitdirFile
        );
        assert_eq!(
            round_trip::<GitAudit>(audit).body.stopped,
            Some(AuditStopped::TimeLimit)
        );
        let dropped = round_trip::<UnidentifiedDropped>(dropped).body;
        assert_eq!(
            (dropped.count, dropped.from.get("192.0.2.7")),
            (900, Some(&880))
        );
    }

    /// Every type a writer writes reads back as its own record, not as another's.
    #[test]
    fn every_known_type_has_a_reader() {
        for kind in KNOWN_TYPES {
            let line = format!(r#"{{"type":"{kind}","schema_version":1}}"#);
            assert!(
                !matches!(
                    crate::log::read_record(line.as_bytes()),
                    crate::log::Record::Other(..)
                ),
                "{kind} is read by name"
            );
        }
    }
}
