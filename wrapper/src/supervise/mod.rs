//! Following a started sandbox from netbox's side: receive its listeners and serve the
//! bridge on them, log the probe report, forward signals (or cancel a start that is not
//! proven yet), stop the run if a pin is lost on the host or git's configuration there
//! comes to name a path no pin covers (gitwatch.rs), and turn the sandbox's end into
//! netbox's exit status. Where the run stands is one `Stage` (stage.rs); each message,
//! signal or deadline is one of `Supervisor`'s transitions.

mod bridge_task;
mod budget;
mod connector;
pub mod gitaudit;
pub mod gitwatch;
pub mod netwatch;
mod sandbox_guard;
mod sender;
pub mod session;
mod stage;
pub mod stdin_relay;
pub mod unixsockets;
pub mod writejudge;
pub mod writewatch;

pub use sandbox_guard::{kill_sandbox_now, reap_left_behind, SandboxGuard};

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use bridge::{EventLog, Listener, Session, SessionListener, Stderr};
use nix::sys::signal::Signal;

use crate::error::WrapperError;
use crate::plan::capture::CapturePlan;
use crate::plan::protect::Placeholders;
use crate::sandbox::handshake::{self, SyncMsg};
use crate::sandbox::probe::ProbeReport;
use crate::supervise::bridge_task::BridgeTask;
use crate::supervise::stage::Stage;
use crate::supervise::writewatch::{Attached, WatchContext, WriteWatch};

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
    pub tally: &'a mut crate::supervise::session::Tally,
    /// With `--cpus`: the sandbox's cpu cgroup's `tasks`, for the write watcher's thread.
    pub cpu_cgroup_tasks: Option<std::path::PathBuf>,
    /// Where capture listens, when the run captures.
    pub capture: Option<CapturePlan>,
    /// The pins, checked again when git's configuration changes on the host.
    pub git_watch: Option<gitwatch::GitWatch>,
    /// Where the paths that became needed or watched during the run are handed back, for
    /// the check after it.
    pub grown: &'a mut Vec<crate::plan::protect::Watched>,
}

/// Waits for the listeners, serves the bridge, and follows the sandbox until CMD exits.
pub async fn supervise(run: Supervised<'_>) -> Result<u8, WrapperError> {
    // Handlers first: a signal from now on is forwarded (or cancels the start), never lost.
    let mut signals = Signals::new()?;
    let mut window_changes =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            .map_err(WrapperError::Spawn)?;
    let mut s = Supervisor::start(run).await?;
    let deadline = s.timeout.map(|t| tokio::time::Instant::now() + t);
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
            msg = s.channel.recv(), if s.channel_open => match msg {
                Ok(Some((msg, fds))) => s.on_message(msg, fds),
                _ => s.channel_open = false,
            },
            () = s.bridge.stopped(), if s.bridge.is_stopping() => s.send_cut(),
            sig = signals.next() => s.on_signal(sig),
            () = s.log.failed(), if s.failure.is_none() => s.on_log_failed(),
            _ = window_changes.recv(), if s.terminal.is_some() => s.resize_terminal(),
            () = sleep_until_some(setup_deadline),
                if !s.stage.probed() && s.failure.is_none() => s.on_setup_time_limit(),
            () = sleep_until_some(deadline), if !s.timed_out => s.on_timeout(),
            () = tick_if_some(&mut git_looks) => s.look_at_git(),
            _ = s.exited.readable() => break,
        }
        // CMD's status is pid 1's last word: unless pid 1 must be reaped first, netbox
        // need not wait for its exit.
        if s.stage.status().is_some() && !s.reap_pid1 {
            break;
        }
    }
    s.finish().await
}

/// Everything netbox follows while the sandbox runs.
struct Supervisor<'a> {
    stage: Stage,
    /// The first thing that went wrong: the run's outcome, whatever happens after it.
    failure: Option<WrapperError>,
    /// The first live probe's report, once it has arrived (the caller keeps it).
    first_report: Option<ProbeReport>,
    sandbox: SandboxGuard,
    /// pid 1's pidfd, readable once it has exited.
    exited: tokio::io::unix::AsyncFd<OwnedFd>,
    channel: handshake::AsyncChannel,
    /// Until pid 1 closes its end.
    channel_open: bool,
    bridge: BridgeTask,
    /// The denied-write watcher; it judges once the sandbox has handed over its listener.
    watch: Option<WriteWatch>,
    /// Told the watcher the bridge is closed, at `--fetch`'s cut.
    cut: Arc<std::sync::atomic::AtomicBool>,
    /// CMD's terminal, once pid 1 has handed it over (terminal.rs).
    terminal: Option<crate::terminal::Session>,
    /// Held from the start until the probe has reported (see `leave_start_up`).
    pinned_from: Option<nix::sched::CpuSet>,
    resolved_fds: Option<Vec<OwnedFd>>,
    cpu_cgroup_tasks: Option<std::path::PathBuf>,
    /// The signal that cancelled an unproven start.
    cancelled: Option<Signal>,
    timed_out: bool,
    placeholders: &'a mut Option<Placeholders>,
    timeout: Option<std::time::Duration>,
    fetch: Option<String>,
    session: Arc<Session>,
    log: Arc<EventLog>,
    log_path: std::path::PathBuf,
    host_listener: TcpListener,
    stderr: Stderr,
    probe_report: &'a mut Option<ProbeReport>,
    reap_pid1: bool,
    tally: &'a mut crate::supervise::session::Tally,
    git_watch: Option<gitwatch::GitWatch>,
    grown: &'a mut Vec<crate::plan::protect::Watched>,
}

impl<'a> Supervisor<'a> {
    /// Receives the sandbox's listeners and starts serving them, with the write watcher.
    async fn start(run: Supervised<'a>) -> Result<Supervisor<'a>, WrapperError> {
        let Supervised {
            placeholders,
            resolved_fds,
            refusal_status,
            inspector,
            upstream_proxy,
            mut sandbox,
            timeout,
            fetch,
            channel,
            session,
            log,
            log_path,
            host_listener,
            stderr,
            probe_report,
            protected,
            read_only,
            allow_nested_userns,
            allowed_sockets,
            reap_pid1,
            cpus,
            tally,
            cpu_cgroup_tasks,
            capture,
            git_watch,
            grown,
        } = run;
        let channel = handshake::AsyncChannel::new(channel).map_err(WrapperError::Spawn)?;
        let exited = sandbox
            .pidfd
            .try_clone()
            .and_then(crate::sys::fd::register_readable)
            .map_err(WrapperError::Spawn)?;
        // The control half of the host-loopback check (the listener answers us), while the
        // sandbox sets up and netbox would only wait.
        check_host_listener_answers(&host_listener)?;

        let (listener_fds, proxies, capture_ports, pid1_cpu) = match channel.recv().await {
            Ok(Some((
                SyncMsg::Listeners {
                    cpu,
                    count,
                    capture_ports,
                },
                fds,
            ))) if count > 0
                && fds.len()
                    == count + capture_ports.len() + 2 * usize::from(!capture_ports.is_empty()) =>
            {
                (fds, count, capture_ports, cpu)
            }
            Ok(Some((SyncMsg::SetupFailed { step, detail, hint }, _))) => {
                sandbox.reap();
                return Err(setup_failed(step, detail, hint));
            }
            other => {
                return Err(WrapperError::Handshake(format!(
                    "expected the proxy listeners, got {other:?}"
                )));
            }
        };
        let mut listeners = Vec::new();
        let mut fds = listener_fds.into_iter();
        for (at, fd) in fds.by_ref().take(proxies + capture_ports.len()).enumerate() {
            let std_listener = TcpListener::from(fd);
            std_listener
                .set_nonblocking(true)
                .map_err(WrapperError::Spawn)?;
            let listener =
                tokio::net::TcpListener::from_std(std_listener).map_err(WrapperError::Spawn)?;
            listeners.push(SessionListener {
                session: Arc::clone(&session),
                listener: if at < proxies {
                    Listener::Tcp(listener)
                } else {
                    Listener::Captured(listener)
                },
            });
        }
        let dns_ports = capture
            .as_ref()
            .map(|c| c.ports.clone())
            .unwrap_or_default();
        // With capture, the DNS stub's sockets come last: UDP, then TCP.
        if let (Some(udp), Some(tcp)) = (fds.next(), fds.next()) {
            let udp = std::net::UdpSocket::from(udp);
            udp.set_nonblocking(true).map_err(WrapperError::Spawn)?;
            let udp = tokio::net::UdpSocket::from_std(udp).map_err(WrapperError::Spawn)?;
            let tcp = TcpListener::from(tcp);
            tcp.set_nonblocking(true).map_err(WrapperError::Spawn)?;
            let tcp = tokio::net::TcpListener::from_std(tcp).map_err(WrapperError::Spawn)?;
            listeners.push(SessionListener {
                session: Arc::clone(&session),
                listener: Listener::Dns(udp, dns_ports.clone()),
            });
            listeners.push(SessionListener {
                session: Arc::clone(&session),
                listener: Listener::DnsTcp(tcp, dns_ports),
            });
        }
        // Started now, so its thread is up when the probe's first write waits for it.
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = WriteWatch::spawn(WatchContext {
            log: Arc::clone(&log),
            session: Arc::clone(&session),
            capture: capture.clone(),
            cut: Arc::clone(&cut),
            pid1: u32::try_from(sandbox.pid.as_raw()).unwrap_or(0),
            protected,
            read_only,
            notices: stderr == Stderr::Summary,
            cpu_cgroup_tasks: cpu_cgroup_tasks.clone(),
            share_root: !allow_nested_userns,
            allowed_sockets: allowed_sockets.clone(),
        })
        .ok();
        // netbox keeps to one CPU until the probe has reported, apart from pid 1's, so
        // that the sandbox's messages and probe connections cannot queue it behind the
        // sandbox (cpu.rs). As soon as nothing can fail any more and the watcher's thread
        // is started: pid 1 has just yielded its CPU to netbox (and may soon want it
        // back). No thread starts while it lasts (a thread would inherit it; `allow`
        // restores this one only).
        let pinned_from = cpus.map(|(allowed, cpu)| {
            crate::cpu::stay_on(crate::cpu::apart_from(&allowed, cpu, pid1_cpu));
            allowed
        });
        let bridge = BridgeTask::serve(
            listeners,
            Arc::clone(&log),
            bridge::BridgeConfig {
                refusal_status,
                inspector,
                upstream_proxy,
                ..bridge::BridgeConfig::default()
            },
        );
        Ok(Supervisor {
            stage: Stage::SettingUp,
            failure: None,
            first_report: None,
            sandbox,
            exited,
            channel,
            channel_open: true,
            bridge,
            watch,
            cut,
            terminal: None,
            pinned_from,
            resolved_fds: Some(resolved_fds),
            cpu_cgroup_tasks,
            cancelled: None,
            timed_out: false,
            placeholders,
            timeout,
            fetch,
            session,
            log,
            log_path,
            host_listener,
            stderr,
            probe_report,
            reap_pid1,
            tally,
            git_watch,
            grown,
        })
    }

    /// Records the first failure and stops the whole sandbox: whatever pid 1 is waiting
    /// for (a start that will not come), the run is over.
    fn fail(&mut self, error: WrapperError) {
        self.failure.get_or_insert(error);
        self.sandbox.signal(Signal::SIGKILL);
    }

    fn on_message(&mut self, msg: SyncMsg, fds: Vec<OwnedFd>) {
        match msg {
            SyncMsg::WriteWatch {
                listener,
                diag,
                root,
                udp_witness,
            } => self.attach_write_watch(listener, diag, root, udp_witness),
            SyncMsg::Terminal if self.stage.probed() && self.terminal.is_none() => {
                self.start_terminal(fds);
            }
            msg => {
                self.handle(msg);
                self.after_message();
            }
        }
    }

    /// The sandbox's seccomp listener, sock_diag socket and root for the write watcher,
    /// copied out of pid 1 by their numbers there.
    fn attach_write_watch(
        &mut self,
        listener: i32,
        diag: Option<i32>,
        root: Option<i32>,
        udp_witness: Option<u16>,
    ) {
        use std::os::fd::AsFd;
        let pid1 = self.sandbox.pidfd.as_fd();
        let copy = |fd: Option<i32>| fd.and_then(|fd| crate::sys::process::copy_fd(pid1, fd).ok());
        let attached = match (&mut self.watch, copy(Some(listener))) {
            (Some(watch), Some(listener)) => watch.attach(Attached {
                listener,
                root: copy(root),
                diag: copy(diag),
                udp_witness,
            }),
            _ => false,
        };
        if !attached {
            // pid 1's next write would wait forever: stop here.
            self.fail(WrapperError::Handshake(
                "the denied-write listener could not be used".into(),
            ));
        }
    }

    fn start_terminal(&mut self, fds: Vec<OwnedFd>) {
        let pid1 = self.sandbox.pid;
        match fds
            .into_iter()
            .next()
            .map(|fd| crate::terminal::Session::start(fd, pid1))
        {
            Some(Ok(session)) => self.terminal = Some(session),
            _ => self.fail(WrapperError::Handshake(
                "the command's terminal could not be used".into(),
            )),
        }
    }

    /// One message of the handshake, in the one stage that expects it.
    fn handle(&mut self, msg: SyncMsg) {
        match (&self.stage, msg) {
            (Stage::SettingUp, SyncMsg::ProbeChecks(report)) => {
                self.stage = Stage::ProbeWritesDue(report);
            }
            (
                Stage::ProbeWritesDue(_),
                SyncMsg::ProbeWatched {
                    writes,
                    connects,
                    checks,
                    duration_us,
                },
            ) => {
                let Stage::ProbeWritesDue(mut report) =
                    std::mem::replace(&mut self.stage, Stage::SettingUp)
                else {
                    unreachable!("matched just above")
                };
                report.watched_writes = writes;
                report.watched_connects = connects;
                report.duration_us = report.duration_us.saturating_add(duration_us);
                for check in checks {
                    report.add_check(check);
                }
                self.first_probe(report);
            }
            (Stage::Fetching, SyncMsg::FetchDone { status }) => self.fetch_done(status),
            // Only once pid 1 was told of the cut, which it waits for before it probes.
            (Stage::Cutting { told: true }, SyncMsg::Probe(report)) => self.cut_probe(report),
            (Stage::Running, SyncMsg::Done { status }) => self.stage = Stage::Done { status },
            (_, SyncMsg::SetupFailed { step, detail, hint }) => {
                self.failure.get_or_insert(setup_failed(step, detail, hint));
            }
            // pid 1 saw a pin go (removed or replaced on the host) and stopped the run.
            (stage, SyncMsg::PinLost { path }) if stage.probed() => {
                self.failure.get_or_insert(WrapperError::PinLost { path });
            }
            (_, _) => {
                self.failure.get_or_insert(WrapperError::Handshake(
                    "unexpected message from the sandbox".into(),
                ));
            }
        }
    }

    /// The first probe's whole report: netbox's own check added, CMD (or CMD1) started
    /// only if everything passed, then logged.
    fn first_probe(&mut self, mut report: ProbeReport) {
        self.check_writes(&mut report);
        self.start_if_passed(&report);
        let phase = self.fetch.as_ref().map(|_| "fetch");
        self.record_probe(phase, &report);
        self.stage = match report.first_failure() {
            Some(why) => {
                self.failure = Some(WrapperError::ProbeFailed(format!(
                    "{why}; CMD was not started"
                )));
                Stage::Refused
            }
            None => {
                // Proven: from now on each blocked attempt is announced as it happens.
                self.log.set_stderr(self.stderr);
                match &self.fetch {
                    Some(command) => {
                        self.record_phase("fetch", Some(command), None);
                        Stage::Fetching
                    }
                    None => Stage::Running,
                }
            }
        };
        self.first_report = Some(report);
    }

    /// `--fetch`'s CMD1 ended: on success the cut begins, otherwise the run ends.
    fn fetch_done(&mut self, status: i32) {
        if status == 0 {
            self.stage = Stage::Cutting { told: false };
            return;
        }
        // pid 1 has ended everything of CMD1's and exits with its status. Said once the
        // last of CMD1's output has been relayed (`finish`), or it could come after.
        self.record_phase("fetch_failed", None, Some(status));
        self.stage = Stage::FetchFailed { status };
    }

    /// The probe after the cut: CMD starts only if it passed.
    fn cut_probe(&mut self, mut report: ProbeReport) {
        self.check_writes(&mut report);
        self.start_if_passed(&report);
        self.record_probe(Some("cut"), &report);
        self.stage = match report.first_failure() {
            Some(why) => {
                self.failure = Some(WrapperError::ProbeFailed(format!(
                    "after --fetch: {why}; CMD was not started"
                )));
                Stage::Refused
            }
            None => Stage::Running,
        };
    }

    /// What follows from the stage a message left the run in.
    fn after_message(&mut self) {
        if self.stage.probed() {
            self.leave_start_up();
        }
        if self.stage.nothing_left() {
            if let Some(placeholders) = self.placeholders.as_mut() {
                placeholders.start_removal();
            }
        }
        if self.stage.status().is_some() {
            // Nothing the write filter could stop is left: the watcher need not wait for
            // pid 1's exit (or, on older kernels, its reaping).
            if let Some(watch) = self.watch.as_mut() {
                watch.stop();
            }
        }
        if self.failure.is_some() {
            self.sandbox.signal(Signal::SIGKILL);
        }
        if let Stage::Cutting { told: false } = self.stage {
            if crate::testhooks::hooks().keep_bridge_at_cut {
                // The bridge keeps serving: the cut probe must catch it.
                self.send_cut();
            } else {
                // The bridge stops accepting and its listeners (the sandbox holds no
                // copy) close; once it has drained, nothing answers, and `send_cut`
                // follows.
                self.bridge.stop();
            }
        }
    }

    /// Once the probe has reported: netbox may use every CPU again, lets go of what it
    /// resolved at start-up (the sandbox's identity checks are done), and with `--cpus`
    /// moves the bridge's thread into CMD's quota. Each happens once.
    fn leave_start_up(&mut self) {
        if let Some(allowed) = self.pinned_from.take() {
            crate::cpu::allow(allowed);
        }
        drop(self.resolved_fds.take());
        // With --cpus, once CMD may run: the bridge's work for it (this thread runs the
        // bridge) comes out of CMD's quota too, as the write watcher's does; a run that
        // cannot keep it there stops.
        if let Some(tasks) = self.cpu_cgroup_tasks.take() {
            let tid = nix::unistd::gettid().to_string();
            if let Err(e) = std::fs::write(&tasks, tid) {
                self.fail(WrapperError::Setup {
                    step: "cpu cgroup".into(),
                    detail: format!("move the bridge's thread into {}: {e}", tasks.display()),
                    hint: None,
                });
            }
        }
    }

    /// Logs the cut and tells pid 1. If that message cannot be delivered, pid 1 would wait
    /// for it forever: the sandbox is stopped instead.
    fn send_cut(&mut self) {
        if !matches!(self.stage, Stage::Cutting { told: false }) {
            return;
        }
        self.stage = Stage::Cutting { told: true };
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
        self.record_phase("cut", None, Some(0));
        if let Err(e) = self.channel.send(&SyncMsg::Cut) {
            self.fail(WrapperError::Handshake(format!(
                "tell the sandbox of the cut: {e}"
            )));
        }
    }

    fn on_signal(&mut self, sig: Signal) {
        if self.stage.probed() && !self.stage.between_phases() {
            self.sandbox.signal(sig);
        } else {
            // Before a probe, the command to receive it does not exist yet (and in the
            // first moments pid 1 does not block signals yet, and would ignore them): the
            // start is cancelled instead.
            self.sandbox.signal(Signal::SIGKILL);
            self.cancelled = Some(sig);
        }
    }

    /// Nothing may go on unrecorded: the whole sandbox stops.
    fn on_log_failed(&mut self) {
        let reason = self.log.failure().unwrap_or_default();
        self.fail(WrapperError::EventLogWrite {
            path: self.log_path.clone(),
            reason,
        });
    }

    fn resize_terminal(&self) {
        if let Some(terminal) = &self.terminal {
            terminal.resize();
        }
    }

    fn on_setup_time_limit(&mut self) {
        self.fail(WrapperError::Setup {
            step: "start".into(),
            detail: format!(
                "the sandbox did not finish setting up within {} s",
                SETUP_TIME_LIMIT.as_secs()
            ),
            hint: None,
        });
    }

    /// git's configuration, index or hooks changed on the host: a path now needed
    /// read-only that no pin covers stops the run.
    fn look_at_git(&mut self) {
        if let Some(Err(e)) = self.git_watch.as_mut().map(gitwatch::GitWatch::look) {
            self.fail(e);
        }
    }

    /// `--timeout`: the whole sandbox, as pid 1's death takes everything in it.
    fn on_timeout(&mut self) {
        self.sandbox.signal(Signal::SIGKILL);
        self.timed_out = true;
    }

    /// The sandbox has exited (or said its last word): collects its status and what it
    /// said last, stops the bridge and the watcher, and decides netbox's outcome.
    async fn finish(mut self) -> Result<u8, WrapperError> {
        if let Some(allowed) = self.pinned_from.take() {
            crate::cpu::allow(allowed);
        }
        // The last of CMD's output, and the caller's terminal as it was, before netbox
        // says anything more; and nothing CMD left there may hide what netbox says.
        if let Some(terminal) = self.terminal.take() {
            terminal.finish();
        }
        crate::terminal::cmd_ended();
        if let Stage::FetchFailed { status } = self.stage {
            crate::output::say(&format!(
                "netbox: the --fetch command exited with status {status}; CMD was not run"
            ));
        }
        let code = match self.stage.status().filter(|_| !self.reap_pid1) {
            // Done is pid 1's last word: nothing more to read.
            Some(status) => {
                self.sandbox.let_exit();
                status
            }
            None => {
                let code = self.sandbox.reap();
                // What the sandbox said just before it exited (a probe report, a setup
                // failure) may still be queued: read to the end before deciding.
                while self.channel_open {
                    let next = std::time::Duration::from_secs(5);
                    match tokio::time::timeout(next, self.channel.recv()).await {
                        Ok(Ok(Some((msg, _)))) => self.handle(msg),
                        _ => self.channel_open = false,
                    }
                }
                code
            }
        };
        *self.probe_report = self.first_report.take();
        // Once more, with CMD gone: it may have used a path that became needed, and
        // exited, between two looks. The run is then failed as if stopped.
        if let Some(mut git_watch) = self.git_watch.take() {
            if let Err(e) = git_watch.look() {
                self.failure.get_or_insert(e);
            }
            *self.grown = git_watch.into_grown();
        }
        // Every process the filter could stop is gone: the watcher has logged its last.
        if let Some(watch) = self.watch.take() {
            (self.tally.writes_denied, self.tally.direct_attempts) =
                watch.finish(&self.log, &self.session.id);
        }
        self.tally.timed_out = self.timed_out;
        self.tally.cancelled = self.cancelled.is_some();
        drop(self.host_listener);
        self.bridge.stop();
        self.bridge.stopped().await;
        if self.timed_out {
            crate::output::say(&format!(
                "netbox: timed out after {}; the sandbox was killed",
                humantime::format_duration(self.timeout.unwrap_or_default())
            ));
            return Ok(crate::error::EXIT_TIMEOUT);
        }
        if let Some(sig) = self.cancelled {
            return Ok(u8::try_from(128 + sig as i32).unwrap_or(crate::error::EXIT_NETBOX_FAILURE));
        }
        if let Some(error) = self.failure {
            return Err(error);
        }
        match self.stage {
            Stage::SettingUp | Stage::ProbeWritesDue(_) => Err(ended_unproven(
                self.stage,
                code,
                &self.log,
                &self.session.id,
            )),
            // The same, between --fetch and CMD.
            Stage::Cutting { .. } => Err(WrapperError::Setup {
                step: "sandbox".into(),
                detail: format!("the sandbox ended between --fetch and CMD (status {code})"),
                hint: None,
            }),
            // pid 1 ended without its last word (a failure it reported above, a panic, a
            // kill from outside): its status is not CMD's.
            Stage::Running | Stage::Fetching => Err(WrapperError::Setup {
                step: "sandbox".into(),
                detail: format!(
                    "the sandbox's pid 1 stopped before the command ended (status {code})"
                ),
                hint: None,
            }),
            _ => Ok(u8::try_from(code).unwrap_or(crate::error::EXIT_NETBOX_FAILURE)),
        }
    }

    fn record_phase(&self, phase: &'static str, command: Option<&str>, fetch_status: Option<i32>) {
        self.log.record_as(
            "phase",
            &self.session.id,
            &bridge::log::records::Phase {
                phase: phase.to_owned(),
                command: command.map(str::to_owned),
                fetch_status,
            },
        );
    }

    fn record_probe(&self, phase: Option<&'static str>, report: &ProbeReport) {
        record_probe(&self.log, &self.session.id, phase, report);
    }

    /// Adds netbox's own check to a probe report: the probe's writes were seen by the
    /// denied-write watcher and judged as the probe expected.
    fn check_writes(&self, report: &mut ProbeReport) {
        if crate::testhooks::hooks().no_write_watch {
            return;
        }
        match &self.watch {
            Some(watch) if watch.attached() => watch.check_probe(report),
            _ => report.add_check(crate::sandbox::probe::failed_check(
                crate::sandbox::probe::WRITE_LOG_CHECK,
                "receive the sandbox's seccomp listener",
                "none arrived".into(),
            )),
        }
    }

    /// pid 1 starts the command only on netbox's word, given once every check, netbox's
    /// own included, has passed (first, before the report is logged: it is what CMD waits
    /// for). Otherwise nothing is sent and the sandbox is stopped.
    fn start_if_passed(&mut self, report: &ProbeReport) {
        if report.passed {
            crate::supervise::gitaudit::command_starts();
            // From now on CMD may write to the caller's terminal.
            crate::terminal::handed_over();
            if let Err(e) = self.channel.send(&SyncMsg::Start) {
                self.failure
                    .get_or_insert(WrapperError::Handshake(format!("start the command: {e}")));
            }
        }
    }
}

fn record_probe(log: &EventLog, session: &str, phase: Option<&'static str>, report: &ProbeReport) {
    // A copy, so the record is the type `netbox log` reads it as (a few KiB, once or
    // twice a run).
    let record = bridge::log::records::Probe {
        phase: phase.map(str::to_owned),
        report: report.clone(),
    };
    log.record_as("probe", session, &record);
}

/// The sandbox was gone before proving anything (killed, out of memory): CMD never ran,
/// and the status is netbox's failure, not CMD's. If the probe's checks had arrived, they
/// are logged, incomplete, and their first failure said.
fn ended_unproven(stage: Stage, code: i32, log: &EventLog, session: &str) -> WrapperError {
    let found = match stage {
        Stage::ProbeWritesDue(mut partial) => {
            let found = partial.first_failure();
            partial.add_check(crate::sandbox::probe::failed_check(
                "probe report complete",
                "receive the writes made under the write filter",
                "the sandbox ended first".into(),
            ));
            record_probe(log, session, None, &partial);
            found
        }
        _ => None,
    };
    let found = found.map_or(String::new(), |why| format!("; the probe had found: {why}"));
    WrapperError::Setup {
        step: "sandbox".into(),
        detail: format!("the sandbox ended before its live probe (status {code}){found}"),
        hint: None,
    }
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

/// A step pid 1 could not take, with the setting that allows it here when netbox knows one
/// (sandbox/place.rs: a container's seccomp profile, its masked /proc, ...).
fn setup_failed(step: String, detail: String, hint: Option<String>) -> WrapperError {
    let hint = hint.or_else(|| crate::sandbox::hint_for_setup(&step, &detail));
    WrapperError::Setup { step, detail, hint }
}
