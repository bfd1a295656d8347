//! The check of git metadata after a run: interruptible by Ctrl-C, and done in a later
//! run's place for runs that ended without theirs (netbox was killed).

use bridge::EventLog;

use crate::plan::config::SandboxConfig;
use crate::plan::protect::{self};

/// Audits on this thread, stopping at Ctrl-C: SIGINT is blocked here meanwhile (the only
/// other thread then, the stdin relay's, blocks every signal) and looked for between
/// directories through a signalfd, so a Ctrl-C is taken as the cancel and consumed. A
/// thread of its own would cost more than most walks (tens of µs, measured).
pub(super) fn audit_interruptible(
    scope: &crate::supervise::gitaudit::Scope,
) -> crate::supervise::gitaudit::Report {
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let mut sigint = SigSet::empty();
    sigint.add(Signal::SIGINT);
    let Ok(previous) = sigint.thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK) else {
        return crate::supervise::gitaudit::audit(scope, &|| false);
    };
    let pending = SignalFd::with_flags(&sigint, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC);
    let cancelled = || {
        pending
            .as_ref()
            .is_ok_and(|fd| matches!(fd.read_signal(), Ok(Some(_))))
    };
    let report = crate::supervise::gitaudit::audit(scope, &cancelled);
    let _ = previous.thread_set_mask();
    report
}

/// Runs whose check is done in one start's place at most.
const MAX_ORPHAN_AUDITS: usize = 4;

/// Checks, in this run's place, the runs whose record says their check never happened.
pub(super) fn audit_orphans(log: &EventLog, config: &SandboxConfig) {
    use crate::supervise::gitaudit::pending;
    let mut dirs = vec![pending::dir_beside(&config.log_path)];
    if let Ok(sessions) = crate::plan::config::sessions_dir() {
        let default = pending::dir_in(&sessions);
        if !dirs.contains(&default) {
            dirs.push(default);
        }
    }
    // Records where this run's CMD can write are CMD's to plant: not read.
    dirs.retain(|d| !config.write_roots.iter().any(|r| d.starts_with(r)));
    // A few a start (each is bounded in time); the rest wait for the next runs.
    for orphan in pending::orphans(&dirs).into_iter().take(MAX_ORPHAN_AUDITS) {
        let report = crate::supervise::gitaudit::audit(&orphan.record.scope, &|| false);
        let audited = orphan.record.session.as_str();
        crate::supervise::gitaudit::report(log, &config.session_id, Some(audited), &report);
        // What the killed run laid, if nobody uses it any more.
        protect::remove_orphaned_placeholders(&orphan.record.placeholders);
        orphan.finish();
    }
}
