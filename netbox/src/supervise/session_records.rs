//! The records that open and close a session's event log: `session_start` says what ran
//! under which boundary (so a log can be read without the command line that made it),
//! `session_end` how it ended and what was refused. Every record between them is the
//! probe's, the bridge's or the denied-write log's.

use std::path::PathBuf;
use std::time::Duration;

use bridge::log::records::{Limits, SessionEnd, SessionStart};
use bridge::EventLog;

use crate::error::WrapperError;
use crate::plan::config::SandboxConfig;

/// Writes `session_start`. `protected` is what the run pins read-only.
/// `text` with each secret's value named instead, for a value read from netbox's own
/// environment (typed on the host's command line, expanded by its shell): the record is
/// written before any value is read, and one from a file is read only once the sandbox
/// exists, so that one is not known here (the probe still stops the run).
fn without_secrets(text: &str, policy: &bridge::Policy) -> String {
    let mut text = text.to_owned();
    for secret in policy.secrets() {
        let bridge::policy::secrets::SecretSource::Env(var) = &secret.from else {
            continue;
        };
        let Some(value) = std::env::var_os(var) else {
            continue;
        };
        let value = zeroize::Zeroizing::new(value.to_string_lossy().into_owned());
        if !value.is_empty() && text.contains(value.as_str()) {
            text = text.replace(value.as_str(), &format!("<secret {}>", secret.name));
        }
    }
    text
}

pub fn record_start(log: &EventLog, config: &SandboxConfig, protected: &[PathBuf]) {
    let policy_sha256 = config.policy.sha256_hex();
    let start = SessionStart {
        netbox_version: crate::cli::VERSION.to_owned(),
        mode: match (config.policy.is_learning(), config.fetch.is_some()) {
            (true, _) => "learn",
            (false, true) => "fetch_then_cut",
            (false, false) => "sandbox",
        }
        .to_owned(),
        command: config
            .cmd
            .iter()
            .map(|a| without_secrets(&a.to_string_lossy(), &config.policy))
            .collect(),
        fetch_command: config
            .fetch
            .as_ref()
            .map(|f| without_secrets(f, &config.policy)),
        cwd: config.cwd.clone(),
        workspace: config.workspace.clone(),
        write_roots: config.write_roots.clone(),
        tmp: match config.tmp {
            crate::cli::TmpMode::Private => "private",
            crate::cli::TmpMode::Host => "host",
        }
        .to_owned(),
        protected: protected.to_vec(),
        read_only: config.read_only.clone(),
        hidden: config.hide.clone(),
        policy_files: config.policy.files().to_vec(),
        policy_sha256,
        allow_rules: config.policy.allow_count(),
        bridge: config.upstream.as_ref().map(|u| u.name.clone()),
        limits: Limits {
            memory_bytes: config.limits.memory,
            fsize_bytes: config.limits.file_size,
            pids: config.limits.pids,
            cpus: config.limits.cpu_millis.map(|m| m as f64 / 1000.0),
            timeout_ms: config
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        },
        clean_env: config.env_base == crate::plan::env::EnvBase::Clean,
        nested_userns: config.allow_nested_userns,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| r.trim().to_owned())
            .unwrap_or_default(),
        uid: config.uid,
        gid: config.gid,
    };
    log.record_as("session_start", &config.session_id, &start);
}

/// How a run ended, as far as netbox's supervision knows.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub writes_denied: u64,
    pub direct_attempts: u64,
    pub timed_out: bool,
    /// A signal stopped the start before CMD ran.
    pub cancelled: bool,
}

/// Writes `session_end` for a run's result.
pub fn record_end(
    log: &EventLog,
    session: &str,
    result: &Result<u8, WrapperError>,
    tally: Tally,
    took: Duration,
) {
    let (status, outcome, error) = match result {
        Ok(status) if tally.timed_out => (*status, "timed_out", None),
        Ok(status) if tally.cancelled => (*status, "cancelled", None),
        Ok(status) => (*status, "exited", None),
        Err(e @ WrapperError::ProbeFailed(_)) => (e.exit_code(), "probe_failed", Some(e)),
        Err(e) => (e.exit_code(), "failed", Some(e)),
    };
    let (net_allowed, net_denied) = log.counts();
    let (requests_inspected, requests_refused) = log.request_counts();
    let suppressed = log.net_suppressed();
    if suppressed > 0 {
        log.record_as(
            "net_suppressed",
            session,
            &bridge::log::records::Suppressed { count: suppressed },
        );
    }
    let end = SessionEnd {
        status,
        outcome: outcome.to_owned(),
        error: error.map(|e| crate::error::chain(e)),
        duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        net_allowed,
        net_denied,
        requests_inspected,
        requests_refused,
        writes_denied: tally.writes_denied,
        direct_attempts: tally.direct_attempts,
    };
    log.record_as("session_end", session, &end);
}
