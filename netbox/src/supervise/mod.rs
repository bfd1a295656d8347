//! Following a started sandbox from netbox's side: receive its listeners and serve the
//! bridge on them, log the probe report, forward signals (or cancel a start that is not
//! proven yet), stop the run if a pin is lost on the host or git's configuration there
//! comes to name a path no pin covers (gitwatch.rs), and turn the sandbox's end into
//! netbox's exit status. Where the run stands is one `Stage` (stage.rs); each message,
//! signal or deadline is one of `Supervisor`'s transitions.

mod supervisor;

mod bridge_task;
mod budget;
mod connector;
pub mod gitaudit;
pub mod gitwatch;
pub mod netwatch;
mod sandbox_guard;
mod sender;
pub mod session_records;
mod stage;
pub mod stdin_relay;
pub mod unixsockets;
pub mod writejudge;
pub mod writewatch;

pub use sandbox_guard::{kill_sandbox_now, reap_left_behind, SandboxGuard};

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use bridge::{EventLog, Session, Stderr};
use nix::sys::signal::Signal;

use crate::error::WrapperError;
use crate::plan::capture::CapturePlan;
use crate::plan::protect::Placeholders;
use crate::sandbox::handshake::{self};
use crate::sandbox::probe::ProbeReport;
use supervisor::Supervisor;

/// How long the sandbox may take to set up and pass its probe before netbox gives up on
/// it (measured: a few ms; the probe's own network attempts time out at 5 s).
const SETUP_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

pub(crate) fn check_host_listener_answers(listener: &TcpListener) -> Result<(), WrapperError> {
    let addr = listener.local_addr().map_err(WrapperError::Spawn)?;
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let _client = std::net::TcpStream::connect(addr).map_err(|e| {
        WrapperError::ProbeFailed(format!(
            "host loopback listener {addr} does not answer: {e}"
        ))
    })?;
    listener.accept().map_err(|e| {
        WrapperError::ProbeFailed(format!(
            "host loopback listener {addr} does not accept: {e}"
        ))
    })?;
    Ok(())
}

/// What `supervise` follows.
pub struct Supervised<'a> {
    /// Their removal starts as soon as the sandbox says nothing of CMD's is left (Done),
    /// alongside netbox's teardown and the sandbox's own exit; the caller's drop waits
    /// for it (or, without Done, removes them after the sandbox is reaped).
    pub placeholders: &'a mut Option<Placeholders>,
    /// What netbox resolved at start-up (resolved.rs), held until the probe has reported:
    /// the sandbox's identity checks are done by then.
    pub resolved_fds: Vec<OwnedFd>,
    /// The HTTP status of a refused request.
    pub refusal_status: http::StatusCode,
    /// The session CA and upstream trust, when the run inspects.
    pub inspector: Option<Arc<bridge::tls::inspector::Inspector>>,
    /// `--bridge URL`: the bridge every connection goes to.
    pub upstream_proxy: Option<Arc<bridge::egress::upstream_proxy::UpstreamProxy>>,
    pub sandbox: SandboxGuard,
    /// `--timeout`: the whole sandbox is killed when it runs out.
    pub timeout: Option<std::time::Duration>,
    /// `--fetch CMD1`: the bridge serves CMD1 only and is closed before CMD runs.
    pub fetch: Option<String>,
    pub channel: handshake::Channel,
    pub session: Arc<Session>,
    pub log: Arc<EventLog>,
    /// Where the log is, for the error when it cannot be written.
    pub log_path: std::path::PathBuf,
    pub host_listener: TcpListener,
    pub stderr: Stderr,
    /// Where the probe's report is kept for the caller (`netbox verify`).
    pub probe_report: &'a mut Option<ProbeReport>,
    /// Protected and `--ro` paths, to say why a write was denied.
    pub protected: Vec<std::path::PathBuf>,
    pub read_only: Vec<std::path::PathBuf>,
    /// CMD may make user (and so mount) namespaces of its own.
    pub allow_nested_userns: bool,
    /// Host Unix sockets CMD may connect to.
    pub allowed_sockets: Vec<crate::plan::sockets::AllowedSocket>,
    /// pid 1 must be reaped before netbox goes on, even after it said it is done: the
    /// run's cgroups can be removed only once it has left them.
    pub reap_pid1: bool,
    /// The CPUs netbox may use, and the one it cloned on: netbox keeps to it (or, if pid 1
    /// runs there, to another) until the probe has reported or the run has ended.
    pub cpus: Option<(nix::sched::CpuSet, usize)>,
    /// How the run ended, for the session_end record.
    pub tally: &'a mut crate::supervise::session_records::Tally,
    /// With `--cpus`: the sandbox's cpu cgroup's `tasks`, for the write watcher's thread.
    pub cpu_cgroup_tasks: Option<std::path::PathBuf>,
    /// Where capture listens, when the run captures.
    pub capture: Option<CapturePlan>,
    /// The pins, checked again when git's configuration changes on the host.
    pub git_watch: Option<gitwatch::GitWatch>,
    /// Where the paths that became needed or watched during the run are handed back, for
    /// the check after it.
    pub grown: &'a mut Vec<crate::plan::protect::Watched>,
    /// Rows of the first probe netbox itself checked before the sandbox could report
    /// (where each secret's value is not: only netbox holds them).
    pub own_checks: Vec<bridge::log::records::Check>,
}

/// Waits for the listeners, serves the bridge, and follows the sandbox until CMD exits.
pub async fn supervise(run: Supervised<'_>) -> Result<u8, WrapperError> {
    // Handlers first: a signal from now on is forwarded (or cancels the start), never lost.
    let mut signals = Signals::new()?;
    let mut window_changes =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            .map_err(WrapperError::Spawn)?;
    let mut s = Supervisor::start(run).await?;
    let deadline = s.settings.timeout.map(|t| tokio::time::Instant::now() + t);
    // Set-up and probe take milliseconds; a sandbox that has not reported by then is stuck
    // (on something another process planted where it looks, say) and never will.
    let setup_deadline = Some(tokio::time::Instant::now() + SETUP_TIME_LIMIT);
    let mut git_looks = s.git_watch.as_ref().map(|_| {
        let period = gitwatch::POLL_PERIOD;
        let mut looks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        looks
    });
    loop {
        tokio::select! {
            // Messages first: a probe report that arrived with a signal decides whether
            // that signal cancels the start or goes to CMD.
            biased;
            msg = s.pid1.channel.recv(), if s.pid1.channel_open => match msg {
                Ok(Some((msg, fds))) => s.on_message(msg, fds),
                _ => s.pid1.channel_open = false,
            },
            () = s.bridge.stopped(), if s.bridge.is_stopping() => s.send_cut(),
            sig = signals.next() => s.on_signal(sig),
            () = s.settings.log.failed(), if s.failure.is_none() => s.on_log_failed(),
            _ = window_changes.recv(), if s.terminal.is_some() => s.resize_terminal(),
            () = sleep_until_some(setup_deadline),
                if !s.stage.probed() && s.failure.is_none() => s.on_setup_time_limit(),
            () = sleep_until_some(deadline), if !s.timed_out => s.on_timeout(),
            () = tick_if_some(&mut git_looks) => s.look_at_git(),
            _ = s.pid1.exited.readable() => break,
        }
        // CMD's status is pid 1's last word: unless pid 1 must be reaped first, netbox
        // need not wait for its exit.
        if s.stage.status().is_some() && !s.pid1.reap_pid1 {
            break;
        }
    }
    s.finish().await
}

/// The signals netbox forwards to the sandbox.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals, WrapperError> {
        use tokio::signal::unix::{signal, SignalKind};
        let make = |kind| signal(kind).map_err(WrapperError::Spawn);
        Ok(Signals {
            int: make(SignalKind::interrupt())?,
            term: make(SignalKind::terminate())?,
            hup: make(SignalKind::hangup())?,
            quit: make(SignalKind::quit())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}

/// The next tick of `interval`, or never if there is none.
async fn tick_if_some(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Sleeps until `deadline`, or forever if there is none.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
