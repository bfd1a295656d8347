//! `netbox -- CMD`, netbox's side: plan everything, clone the sandbox before any thread
//! exists, lay the placeholders, then hand over to `supervise` until CMD's status is known.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

use bridge::policy::Verdict;
use bridge::target::Target;
use bridge::{EventLog, Session, Stderr};

mod audit;
mod child;
mod unsandboxed;

use crate::error::WrapperError;
use crate::plan::cgroup;
use crate::plan::config::SandboxConfig;
use crate::plan::protect::{self, ProtectInput, Protected};
use crate::plan::resolved::Resolved;
use crate::sandbox::handshake;
use crate::sandbox::namespaces;
use crate::sandbox::{self};
use crate::supervise::{supervise, SandboxGuard, Supervised};
use audit::{audit_interruptible, audit_orphans};
use child::{child_plan, startup_line};
pub use unsandboxed::run_unsandboxed;

/// Refused `net` records one session writes at most; past this they are counted
/// (`net_capped` when it is reached, `net_suppressed` at the end, and `net_denied` in
/// `session_end`).
const MAX_REFUSED_RECORDS: u64 = 10_000;

/// Allowed `net` records one session writes at most: each is a connection that went
/// through, so the bound is far higher, and refusals never count against it.
const MAX_ALLOWED_RECORDS: u64 = 100_000;

/// Records of requests inside inspected tunnels one session writes at most (capped apart
/// from the tunnels that carry them).
const MAX_REQUEST_RECORDS: u64 = 100_000;

/// Records of lookups the sandbox's DNS stub refused, at most (one per name already).
const MAX_LOOKUP_RECORDS: u64 = 10_000;

/// Names the probe tries through the bridge; the first the policy denies is used.
pub const CANARIES: &[&str] = &[
    "netbox-probe-canary.invalid:443",
    "canary.netbox-probe.invalid:9",
];

/// Whether a logged attempt is the probe's (its canary through the proxy, the canary's
/// name in the DNS stub, with no port, or capture's address no one has), not the
/// command's.
pub fn is_canary(host: &str, port: u64) -> bool {
    let probe_addresses = [
        bridge::session::addresses::PROBE_ADDRESS.to_string(),
        bridge::session::addresses::PROBE_ADDRESS_V6.to_string(),
    ];
    CANARIES.contains(&format!("{host}:{port}").as_str())
        || (port == 0 && CANARIES.iter().any(|c| c.split(':').next() == Some(host)))
        || probe_addresses.iter().any(|a| a == host)
}

/// Runs CMD in the sandbox; returns the exit status for netbox.
pub fn run(config: SandboxConfig) -> Result<u8, WrapperError> {
    let log_dir = config.log_path.parent().map(std::path::Path::to_owned);
    let result = run_reporting(config, &mut None);
    // Once a day, as a run ends (no run waits on it to start): old session logs pruned,
    // when this one went where they all go by default.
    if let (Some(dir), Ok(sessions)) = (log_dir, crate::plan::config::sessions_dir()) {
        if dir == sessions {
            crate::commands::log::sessions::prune_if_due(&dir);
        }
    }
    result
}

/// [`run`], also handing back the live probe's report when there was one.
// Whole: pins, the canary, the log, the audit's scope, then the run, whose every outcome
// closes the log: one sequence on the config it takes apart.
pub fn run_reporting(
    mut config: SandboxConfig,
    probe_report: &mut Option<crate::sandbox::probe::ProbeReport>,
) -> Result<u8, WrapperError> {
    let started = std::time::Instant::now();
    if let Some(note) = crate::limits::open_file_note(config.max_connections, 0) {
        crate::output::say(&note);
    }
    // Before anything of the sandbox exists: whatever CMD creates is stamped later.
    let since = crate::supervise::gitaudit::Stamp::now_for(&config.write_roots);
    // Each writable root, held from here on: everything below is reached through it.
    let mut resolved = Resolved::roots(&config.write_roots)?;
    let home = crate::plan::config::home_dir();
    // The other names (hard links) of a split home's kept files, wherever a root holds
    // one (a workspace inside an entry kept for holding one is a root of its own).
    let links = crate::plan::config::kept_links_in_roots(&config)?;
    let extra: Vec<PathBuf> = config
        .protect
        .iter()
        .chain(&config.policy_inputs)
        .chain(&links)
        .cloned()
        .collect();
    let home_entries: Vec<PathBuf> = config
        .home_split
        .iter()
        .flat_map(|s| s.entries.iter().cloned())
        .collect();
    // A root's other names (a bind mount shows it, or a part of it, elsewhere too) are
    // written with it: what is found by path there (the repository it lies in, a hooks
    // directory a config names by that path) is pinned at the root's own name.
    let other_names = crate::plan::mount_names::roots_other_names(&config.write_roots)?;
    let protect_input = ProtectInput {
        write_roots: &config.requested_roots,
        writable: &config.write_roots,
        home_entries: &home_entries,
        home: home.as_deref(),
        homes: &config.homes,
        extra: &extra,
        allow_git_writes: config.allow_git_writes,
        other_names: &other_names,
    };
    let protection = protect::protected_paths(&protect_input)?;
    // Chosen again if what they were chosen from changes on the host during the run.
    let git_watch = crate::supervise::gitwatch::GitWatch::new(protect::recheck::Recheck::new(
        protect::recheck::ProtectRequest::of(&protect_input),
        &protection.pinned,
        &protection.watched,
        protection.basis,
        &config
            .read_only
            .iter()
            .chain(&config.hide)
            .cloned()
            .collect::<Vec<_>>(),
    ));
    let protected = protection.pinned;
    // Every root asked for, nested ones too (a `--write` inside a writable /tmp).
    let roots: Vec<PathBuf> = config
        .write_roots
        .iter()
        .chain(&config.requested_roots)
        .cloned()
        .collect();
    protect::refuse_roots_kept_read_only(
        &roots,
        &protected,
        &config.protect,
        &config.read_only,
        &config.hide,
    )?;
    // And by their other names: a root that shows a directory lying in a hidden or
    // read-only path would get that path's cover (mount_names.rs), and fail the probe.
    for (other, own) in other_names.iter().filter(|(_, own)| roots.contains(own)) {
        let kept = protect::refuse_roots_kept_read_only(
            std::slice::from_ref(other),
            &protected,
            &config.protect,
            &config.read_only,
            &config.hide,
        );
        if let Err(WrapperError::RootKeptReadOnly { kept, kept_as, .. }) = kept {
            return Err(WrapperError::RootKeptReadOnly {
                root: own.clone(),
                seen_as: Some(other.clone()),
                kept,
                kept_as,
            });
        }
        kept?;
    }
    let canary = pick_canary(&config)?;
    let log = open_run_log(&config, canary)?;
    // What is pinned read-only (the parts of a git directory left writable inside its pin
    // are not).
    let pinned: Vec<PathBuf> = protected
        .iter()
        .filter(|p| !p.writable)
        .map(|p| p.path.clone())
        .collect();
    crate::supervise::session_records::record_start(&log, &config, &pinned);
    // What --allow-tool read from the host before the log could be opened.
    crate::plan::tools::fetch::log_records(
        &log,
        &config.session_id,
        std::mem::take(&mut config.tool_fetches),
    );
    // A log that cannot be written stops the run before it starts (and, from supervise,
    // while it runs): nothing runs unrecorded.
    if let Some(reason) = log.failure() {
        return Err(WrapperError::EventLogWrite {
            path: config.log_path.clone(),
            reason,
        });
    }
    // Runs that ended without their check of git metadata (netbox was killed) get it now,
    // before this one starts.
    audit_orphans(&log, &config);
    let audit = crate::supervise::gitaudit::Scope {
        // Directories: a file root holds no git metadata. The parts of a pinned git
        // directory left writable are walked too (a repository could hide in `objects/`),
        // though the pin around them is skipped.
        roots: config
            .write_roots
            .iter()
            .chain(protected.iter().filter(|p| p.writable).map(|p| &p.path))
            .filter(|r| r.is_dir())
            .cloned()
            .collect(),
        skip: pinned.iter().chain(&config.read_only).cloned().collect(),
        watch: protection.watched,
        git_data: protection.git_data,
        since,
    };
    // From here on every outcome, failures included, closes the log with session_end.
    let session_id = config.session_id.clone();
    let log_path = config.log_path.clone();
    let mut tally = crate::supervise::session_records::Tally::default();
    let result = run_logged(
        config,
        Paths {
            protected: &protected,
            resolved: &mut resolved,
            git_watch,
        },
        canary,
        &log,
        audit,
        probe_report,
        &mut tally,
    );
    crate::supervise::session_records::record_end(
        &log,
        &session_id,
        &result,
        tally,
        started.elapsed(),
    );
    // Whatever was not written (the git metadata check's findings, session_end) makes the
    // run netbox's failure: nothing is left unrecorded in silence.
    match (result, log.failure()) {
        (Ok(_), Some(reason)) => Err(WrapperError::EventLogWrite {
            path: log_path,
            reason,
        }),
        (result, _) => result,
    }
}

/// The probe's canary: one the policy refuses; relaying, one it passes on, so that the
/// remote bridge judges it (a local deny rule's refusal would prove nothing of it).
fn pick_canary(config: &SandboxConfig) -> Result<&'static str, WrapperError> {
    let refuses_here = !config.policy.is_relaying();
    CANARIES
        .iter()
        .find(|c| {
            Target::parse_authority(c)
                .map(|t| (config.policy.decide(&t).verdict == Verdict::Deny) == refuses_here)
                .unwrap_or(false)
        })
        .copied()
        .ok_or_else(|| {
            WrapperError::Usage(if refuses_here {
                "the allowlist allows the probe's .invalid canaries".into()
            } else {
                "--deny rules cover the probe's .invalid canaries, which must reach the \
                 bridge at the other end for the probe to prove it refuses them"
                    .into()
            })
        })
}

/// The run's event log, bounded, with the probe's own attempts left uncounted.
fn open_run_log(config: &SandboxConfig, canary: &str) -> Result<Arc<EventLog>, WrapperError> {
    // Quiet until the probe is done: its canary is logged, but is no news to the user,
    // and no attempt of CMD's.
    let log = EventLog::open(Some(&config.log_path), Stderr::Quiet).map_err(|source| {
        bridge::BridgeError::OpenLog {
            path: config.log_path.clone(),
            source,
        }
    })?;
    // Bounded: a command looping on refused requests must not fill the host's disk.
    let log = Arc::new(log.cap_net_records(bridge::NetCap {
        refused: MAX_REFUSED_RECORDS,
        allowed: MAX_ALLOWED_RECORDS,
        requests: MAX_REQUEST_RECORDS,
        lookups: MAX_LOOKUP_RECORDS,
    }));
    log.leave_uncounted(canary.rsplit_once(':').map_or(canary, |(host, _)| host));
    if config.capture.is_some() {
        // The capture row's connection, which the bridge refuses.
        log.leave_one_uncounted(&bridge::session::addresses::PROBE_ADDRESS.to_string());
        log.leave_one_uncounted(&bridge::session::addresses::PROBE_ADDRESS_V6.to_string());
    }
    Ok(log)
}

/// The run itself, once its log is open.
/// What the sandbox's filesystem is built on: the paths to protect, and every path as
/// netbox resolved it (resolved.rs).
struct Paths<'a> {
    protected: &'a [Protected],
    resolved: &'a mut Resolved,
    /// The pins, to be checked again if git's configuration changes during the run.
    git_watch: crate::supervise::gitwatch::GitWatch,
}

// Whole: the order is the point (cgroups, placeholders, the plan, the clone while no thread
// exists, then the runtime, supervision, the audit); each step holds what the next needs.
fn run_logged(
    mut config: SandboxConfig,
    paths: Paths<'_>,
    canary: &str,
    log: &Arc<EventLog>,
    mut audit: crate::supervise::gitaudit::Scope,
    probe_report: &mut Option<crate::sandbox::probe::ProbeReport>,
    tally: &mut crate::supervise::session_records::Tally,
) -> Result<u8, WrapperError> {
    let Paths {
        protected,
        resolved,
        git_watch,
    } = paths;
    let mut grown = Vec::new();
    // A listener on host loopback that the sandbox must not reach (and that answers us).
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let host_listener =
        TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(WrapperError::Spawn)?;
    let host_addr = host_listener.local_addr().map_err(WrapperError::Spawn)?;
    // The cgroups the limits need (none for most runs), which the sandbox is born into
    // (netbox steps in for the clone only); the probe reads their limits back. Dropped
    // after the sandbox is reaped.
    let cgroups = cgroup::SandboxCgroups::create(&config.session_id, &config.limits)?;
    // The placeholders the sandbox's mounts pin, laid before the plan records what each
    // pin is. Held (flocked) until this function returns; declared before the sandbox
    // guard, so dropped after it: however this function ends, the sandbox is killed and
    // reaped before they go.
    let mut placeholders = Some(protect::Placeholders::hold(protected, resolved)?);
    let plan = child_plan(
        &config,
        protected,
        resolved,
        host_addr,
        canary,
        cgroups.limits(),
    )?;

    if config.show == crate::cli::Show::All {
        // Escaped: it names paths the user or a config chose, in any bytes.
        crate::output::say(&crate::printable::printable(&startup_line(&config)));
    }
    // A file given as standard input reaches CMD through a pipe (stdin_relay.rs).
    // With a terminal of its own, CMD reads that instead (terminal.rs).
    let stdin_relay = match plan.terminal {
        Some(_) => None,
        None => crate::supervise::stdin_relay::StdinRelay::take_over_if_file()
            .map_err(WrapperError::Spawn)?,
    };
    let (ours, theirs) = handshake::pair().map_err(WrapperError::Spawn)?;
    cgroups.enter()?;
    // Single-threaded here: no runtime or thread exists yet, so cloning is sound.
    let spawned = namespaces::spawn_in_new_namespaces(|| sandbox::run(&plan, &theirs));
    // The new pid 1 is most often queued on this CPU: let it start its setup, the longer
    // of the two sides, at once (cpu.rs; measured: pid 1 starts ~0.14 ms sooner).
    crate::cpu::let_the_woken_run();
    let left = cgroups.leave();
    let pid = spawned?;
    // Until the probe has reported, netbox keeps to one CPU: this one, unless pid 1 runs
    // here (cpu.rs).
    let cpus = crate::cpu::allowed().zip(crate::cpu::current());
    drop(theirs);
    let sandbox = SandboxGuard::new(pid)?;
    left?;
    // The secrets' values, read now that the sandbox is a process of its own: not even
    // pid 1's copy of netbox's memory holds one read from a file. (One read from netbox's
    // environment is in pid 1's copy of it, which CMD cannot read: pid 1 is not dumpable.)
    config
        .policy
        .read_secret_values()
        .map_err(WrapperError::Usage)?;
    let own_checks = if config.policy.secrets().is_empty() {
        Vec::new()
    } else {
        vec![crate::sandbox::probe::secret_values(
            config.policy.secrets(),
            &plan,
            crate::plan::config::home_dir().as_deref(),
            &config.workspace,
        )]
    };
    let inspector = match (&config.inspection, &config.from_bridge.ca_pem) {
        (Some(inspection), _) => Some(start_inspection(
            &config.session_id,
            inspection.upstream.clone(),
            &ours,
        )?),
        // A shared bridge inspects the tenant's tunnels: its CA heads the trust bundle.
        (None, Some(ca_pem)) => {
            ours.send(
                &handshake::SyncMsg::Trust {
                    ca_pem: format!(
                        "# netbox: the CA of the bridge at {} (it inspects this tenant's \
                         tunnels)\n{ca_pem}",
                        config.upstream.as_ref().map_or("?", |u| u.name.as_str())
                    ),
                },
                &[],
            )
            .map_err(WrapperError::Handshake)?;
            None
        }
        (None, None) => None,
    };
    // The record that gets this run's check of git metadata done even if netbox is
    // killed: written while the sandbox sets up (CMD cannot start before netbox says so).
    let pending = crate::supervise::gitaudit::pending::Pending::begin(
        &crate::supervise::gitaudit::pending::dir_beside(&config.log_path),
        &crate::supervise::gitaudit::pending::Record {
            session: config.session_id.clone(),
            scope: audit.clone(),
            placeholders: protected
                .iter()
                .filter(|p| p.placeholder.is_some())
                .map(|p| p.path.clone())
                .collect(),
        },
    );
    // Threads may exist from here on; the runtime starts while the sandbox sets up. It
    // runs on this thread alone: every thread costs start-up time and a wake-up per
    // hand-off (measured for `netbox -- true`: 2 workers 6.5 ms, 1 worker 5.5 ms; none,
    // 0.26 ms less again), and netbox's side of a run is mostly waiting: a tunnel's relay
    // runs in one task anyway, and the write watcher has a thread of its own.
    if let Some(relay) = stdin_relay {
        relay.start();
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WrapperError::Runtime)?;
    let session_id = config.session_id.clone();
    let (cmd, tools, cwd, show) = (
        config.cmd.clone(),
        config.tools.clone(),
        config.cwd.clone(),
        config.show,
    );
    let session = Arc::new(Session::new(
        config.session_id.as_str(),
        Arc::new(config.policy),
        config.max_connections,
    ));
    let stderr = match config.show {
        crate::cli::Show::All => Stderr::Summary,
        crate::cli::Show::Blocked => Stderr::Blocked,
        crate::cli::Show::None => Stderr::Quiet,
    };
    let result = runtime.block_on(supervise(Supervised {
        placeholders: &mut placeholders,
        resolved_fds: resolved.release(),
        refusal_status: config.refusal_status,
        inspector,
        upstream_proxy: config.upstream.clone(),
        sandbox,
        timeout: config.timeout,
        fetch: config.fetch.clone(),
        channel: ours,
        session,
        log: Arc::clone(log),
        log_path: config.log_path.clone(),
        host_listener,
        stderr,
        probe_report,
        protected: protected
            .iter()
            .filter(|p| !p.writable)
            .map(|p| p.path.clone())
            .collect(),
        read_only: config.read_only.clone(),
        allow_nested_userns: config.allow_nested_userns,
        allowed_sockets: config.allowed_sockets.clone(),
        reap_pid1: !cgroups.is_empty(),
        cpus,
        tally,
        cpu_cgroup_tasks: cgroups.cpu_tasks(),
        capture: config.capture.clone(),
        git_watch: Some(git_watch),
        grown: &mut grown,
        own_checks,
    }));
    // The bridge's thread may have joined the sandbox's cpu cgroup (--cpus): back out of
    // it, so that the cgroup can be removed, and the check below is not held to CMD's
    // quota.
    if cgroups.cpu_tasks().is_some() {
        let _ = cgroups.leave();
    }
    // A refused registry that CMD's own tool names: the flag that would have opened it.
    if show != crate::cli::Show::None {
        let refused = log.refused_targets();
        if let Some(hint) = crate::plan::tools::hint_after_refusals(&cmd, &tools, &refused, &cwd) {
            crate::output::say(&hint);
        }
    }
    // Everything of the sandbox is gone: what did it leave for git to find? Paths that
    // became needed during the run are looked at too: CMD may have been there first.
    audit.watch.extend(grown);
    let report = audit_interruptible(&audit);
    crate::supervise::gitaudit::report(log, &session_id, None, &report);
    // A check whose findings could not be written stays owed (the next run does it).
    let unwritten = log.failure().is_some();
    if unwritten || report.stopped == Some(crate::supervise::gitaudit::Stopped::Cancelled) {
        pending.keep();
    } else {
        pending.finish();
    }
    result
}

/// Makes the session CA, now that the sandbox is a process of its own (its key is then in
/// netbox's memory alone, never in pid 1's copy), and sends pid 1 its certificate for the
/// trust bundle.
fn start_inspection(
    session: &str,
    upstream: bridge::tls::inspector::UpstreamTrust,
    channel: &handshake::Channel,
) -> Result<Arc<bridge::tls::inspector::Inspector>, WrapperError> {
    let inspector = crate::plan::inspection::session_ca(session, upstream)?;
    let ca_pem = format!(
        "# netbox session CA (this run only)\n{}",
        inspector.ca_pem()
    );
    channel
        .send(&handshake::SyncMsg::Trust { ca_pem }, &[])
        .map_err(WrapperError::Handshake)?;
    Ok(Arc::new(inspector))
}
