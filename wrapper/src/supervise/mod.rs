//! Following a started sandbox from netbox's side: receive its listeners and serve the
//! bridge on them, log the probe report, forward
//! signals (or cancel a start that is not proven yet), stop the run if a pin is lost on
//! the host, and turn the sandbox's end into netbox's exit status.

pub mod gitaudit;
pub mod session;
pub mod stdin_relay;
pub mod writejudge;
pub mod writewatch;

use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use bridge::{BridgeConfig, EventLog, Listener, Session, SessionListener, Stderr};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use serde::Serialize;

use crate::error::WrapperError;
use crate::plan::protect::Placeholders;
use crate::sandbox::handshake::{self, SyncMsg};
use crate::sandbox::init;
use crate::sandbox::probe::ProbeReport;
use crate::supervise::writewatch::{WatchContext, WriteWatch};

/// How long the sandbox may take to set up and pass its probe before netbox gives up on
/// it (measured: a few ms; the probe's own network attempts time out at 5 s).
const SETUP_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The probe's record in the event log.
#[derive(Serialize)]
struct ProbeRecord<'a> {
    /// With `--fetch`: which phase's probe ("fetch", or "cut" before CMD).
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<&'static str>,
    #[serde(flatten)]
    report: &'a ProbeReport,
}

pub(crate) fn check_host_listener_answers(listener: &TcpListener) -> Result<(), WrapperError> {
    let addr = listener.local_addr().map_err(WrapperError::Spawn)?;
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

/// The sandbox's pid 1, held by a pidfd; killed and reaped on drop unless already reaped
/// (or let exit on its own once it said it was done).
pub struct SandboxGuard {
    pid: Pid,
    pidfd: OwnedFd,
    reaped: bool,
    /// Left to exit on its own ([`SandboxGuard::let_exit`]).
    exiting: bool,
}

impl SandboxGuard {
    pub fn new(pid: Pid) -> Result<SandboxGuard, WrapperError> {
        match crate::sys::process::pidfd_open(pid) {
            Ok(pidfd) => Ok(SandboxGuard {
                pid,
                pidfd,
                reaped: false,
                exiting: false,
            }),
            Err(e) => {
                // Not yet reaped, so the pid cannot have been reused.
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
                Err(WrapperError::Spawn(e))
            }
        }
    }

    /// pid 1 said it is done (everything else in the sandbox is gone) and only exits now,
    /// which takes ~0.7 ms here (unmounting its namespace): netbox goes on without waiting.
    /// SIGKILL makes sure of the exit. It is reaped on drop if it has exited by then;
    /// otherwise its zombie goes, with netbox's exit, to the process that reaps orphans.
    fn let_exit(&mut self) {
        self.signal(Signal::SIGKILL);
        self.exiting = true;
    }

    fn signal(&self, sig: Signal) {
        let _ = crate::sys::process::pidfd_send_signal(self.pidfd.as_fd(), sig);
    }

    /// Waits for the exit (after the pidfd said so) and returns the shell-style status.
    fn reap(&mut self) -> i32 {
        loop {
            match waitpid(self.pid, None) {
                Ok(status) => {
                    if let Some(code) = init::exit_code(status) {
                        self.reaped = true;
                        return code;
                    }
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    self.reaped = true;
                    return i32::from(crate::error::EXIT_NETBOX_FAILURE);
                }
            }
        }
    }
}

impl Drop for SandboxGuard {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        if self.exiting {
            let alive = waitpid(self.pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
            if let Ok(nix::sys::wait::WaitStatus::StillAlive) = alive {
                // Still tearing its namespaces down: reaped as netbox exits
                // (`reap_left_behind`), after its own last work, so that no zombie goes
                // to an orphan reaper that may never reap it (a container's init).
                if let (Ok(mut left), Ok(pidfd)) = (LEFT_BEHIND.lock(), self.pidfd.try_clone()) {
                    *left = Some((self.pid, pidfd));
                }
            }
            return;
        }
        self.signal(Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

/// The sandbox's pid 1, left to exit on its own and not reaped yet.
static LEFT_BEHIND: std::sync::Mutex<Option<(Pid, OwnedFd)>> = std::sync::Mutex::new(None);

/// Reaps pid 1 if it was left to exit on its own: called as netbox exits. Its exit was
/// SIGKILL's, so it comes; waited for a second at most (a process stuck in the kernel
/// cannot be helped, and netbox must not hang on it).
pub fn reap_left_behind() {
    let left = LEFT_BEHIND.lock().ok().and_then(|mut l| l.take());
    let Some((pid, pidfd)) = left else {
        return;
    };
    let mut fds = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16));
    let _ = waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
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
    pub sandbox: SandboxGuard,
    /// `--timeout`: the whole sandbox is killed when it runs out.
    pub timeout: Option<std::time::Duration>,
    /// `--fetch CMD1`: the bridge serves CMD1 only and is closed before CMD runs.
    pub fetch: Option<String>,
    /// Test builds: controls to break on netbox's side.
    pub breakage: crate::testhooks::Breakage,
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
}

/// Waits for the listeners, serves the bridge, and follows the sandbox until CMD exits.
pub async fn supervise(run: Supervised<'_>) -> Result<u8, WrapperError> {
    let Supervised {
        placeholders,
        resolved_fds,
        refusal_status,
        mut sandbox,
        timeout,
        fetch,
        breakage,
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
        reap_pid1,
        cpus,
        tally,
        cpu_cgroup_tasks,
    } = run;
    // Handlers first: a signal from now on is forwarded (or cancels the start), never lost.
    let mut signals = Signals::new()?;
    let channel = handshake::AsyncChannel::new(channel).map_err(WrapperError::Spawn)?;
    let exited = sandbox
        .pidfd
        .try_clone()
        .and_then(crate::sys::fd::register_readable)
        .map_err(WrapperError::Spawn)?;

    // The control half of the host-loopback check (the listener answers us), while the
    // sandbox sets up and netbox would only wait.
    check_host_listener_answers(&host_listener)?;

    let (listener_fds, pid1_cpu) = match channel.recv().await {
        Ok(Some((SyncMsg::Listeners { cpu, .. }, fds))) if !fds.is_empty() => (fds, cpu),
        Ok(Some((SyncMsg::SetupFailed { step, detail, hint }, _))) => {
            sandbox.reap();
            return Err(WrapperError::Setup { step, detail, hint });
        }
        other => {
            return Err(WrapperError::Handshake(format!(
                "expected the proxy listeners, got {other:?}"
            )));
        }
    };
    let mut listeners = Vec::new();
    for fd in listener_fds {
        let std_listener = TcpListener::from(fd);
        std_listener
            .set_nonblocking(true)
            .map_err(WrapperError::Spawn)?;
        let listener =
            tokio::net::TcpListener::from_std(std_listener).map_err(WrapperError::Spawn)?;
        listeners.push(SessionListener {
            session: Arc::clone(&session),
            listener: Listener::Tcp(listener),
        });
    }
    // Started now, so its thread is up when the probe's first write waits for it.
    let watch = WriteWatch::spawn(WatchContext {
        log: Arc::clone(&log),
        session: Arc::clone(&session.id),
        pid1: u32::try_from(sandbox.pid.as_raw()).unwrap_or(0),
        protected: protected.clone(),
        read_only: read_only.clone(),
        notices: stderr == Stderr::Summary,
        blind: breakage.blind_write_watch,
        cpu_cgroup_tasks: cpu_cgroup_tasks.clone(),
        share_root: !allow_nested_userns,
    })
    .ok();
    // netbox keeps to one CPU until the probe has reported, apart from pid 1's, so that
    // the sandbox's messages and probe connections cannot queue it behind the sandbox
    // (cpu.rs). As soon as nothing can fail any more and the watcher's thread is started:
    // pid 1 has just yielded its CPU to netbox (and may soon want it back). No thread
    // starts while it lasts (a thread would inherit it; `allow` restores this one only).
    // What netbox may use again once the probe has reported (or the run has ended).
    let mut pinned_from = cpus.map(|(allowed, cpu)| {
        crate::cpu::stay_on(crate::cpu::apart_from(&allowed, cpu, pid1_cpu));
        allowed
    });
    let mut bridge = BridgeTask::serve(listeners, Arc::clone(&log), refusal_status);
    let mut cpu_join = cpu_cgroup_tasks;

    let mut state = RunState {
        done: false,
        failure: None,
        log: &log,
        session: &session.id,
        stderr,
        report: None,
        probe_checks: None,
        finished: None,
        fetch: fetch.as_deref(),
        fetch_status: None,
        cut_report: None,
        cut_sent: false,
        watch,
        channel: &channel,
        breakage,
    };
    let mut cancelled = None;
    let mut timed_out = false;
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    // Set-up and probe take milliseconds; a sandbox that has not reported by then is stuck
    // (on something another process planted where it looks, say) and never will.
    let setup_deadline = Some(tokio::time::Instant::now() + SETUP_TIME_LIMIT);
    let mut channel_open = true;
    let mut resolved_fds = Some(resolved_fds);
    // CMD's terminal, once pid 1 has handed it over (terminal.rs), and the caller's
    // terminal's size changes, which go to it.
    let mut terminal: Option<crate::terminal::Session> = None;
    let mut window_changes =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            .map_err(WrapperError::Spawn)?;
    loop {
        tokio::select! {
            // Messages first: a probe report that arrived with a signal decides whether
            // that signal cancels the start or goes to CMD.
            biased;
            msg = channel.recv(), if channel_open => match msg {
                Ok(Some((SyncMsg::WriteWatch, fds))) => {
                    let mut fds = fds.into_iter();
                    let attached = match (&mut state.watch, fds.next()) {
                        (Some(watch), Some(listener)) => watch.attach(listener, fds.next()),
                        _ => false,
                    };
                    if !attached {
                        // pid 1's next write would wait forever: stop here.
                        state.failure.get_or_insert(WrapperError::Handshake(
                            "the denied-write listener could not be used".into(),
                        ));
                        sandbox.signal(Signal::SIGKILL);
                    }
                }
                Ok(Some((SyncMsg::Terminal, fds))) if state.probed() && terminal.is_none() => {
                    let pid1 = sandbox.pid;
                    match fds.into_iter().next().map(|fd| crate::terminal::Session::start(fd, pid1)) {
                        Some(Ok(session)) => terminal = Some(session),
                        _ => {
                            state.failure.get_or_insert(WrapperError::Handshake(
                                "the command's terminal could not be used".into(),
                            ));
                            sandbox.signal(Signal::SIGKILL);
                        }
                    }
                }
                Ok(Some((msg, _))) => {
                    state.handle(msg);
                    if let Some(allowed) = pinned_from.take_if(|_| state.probed()) {
                        crate::cpu::allow(allowed);
                    }
                    drop(resolved_fds.take_if(|_| state.probed()));
                    // With --cpus, once CMD may run: the bridge's work for it (this
                    // thread runs the bridge) comes out of CMD's quota too, as the write
                    // watcher's does; a run that cannot keep it there stops.
                    if let Some(tasks) = cpu_join.take_if(|_| state.probed()) {
                        let tid = nix::unistd::gettid().to_string();
                        if let Err(e) = std::fs::write(&tasks, tid) {
                            state.failure.get_or_insert(WrapperError::Setup {
                                step: "cpu cgroup".into(),
                                detail: format!(
                                    "move the bridge's thread into {}: {e}",
                                    tasks.display()
                                ),
                                hint: None,
                            });
                            sandbox.signal(Signal::SIGKILL);
                        }
                    }
                    if state.done {
                        if let Some(placeholders) = placeholders.as_mut() {
                            placeholders.start_removal();
                        }
                    }
                    if state.finished.is_some() {
                        // Nothing the write filter could stop is left: the watcher need
                        // not wait for pid 1's exit (or, on older kernels, its reaping).
                        if let Some(watch) = state.watch.as_mut() {
                            watch.stop();
                        }
                        if !reap_pid1 {
                            break;
                        }
                    }
                    if state.failure.is_some() {
                        // Whatever pid 1 is waiting for (a start that will not come), the
                        // run is over.
                        sandbox.signal(Signal::SIGKILL);
                    }
                    if state.fetch_status == Some(0) && !state.cut_sent {
                        if breakage.keep_bridge_at_cut {
                            // The bridge keeps serving: the cut probe must catch it.
                            state.cut(&channel, &sandbox);
                        } else {
                            // The bridge stops accepting and its listeners (the sandbox
                            // holds no copy) close; once it has drained, nothing answers.
                            bridge.stop();
                        }
                    }
                }
                _ => channel_open = false,
            },
            () = bridge.stopped(), if bridge.is_stopping() => {
                state.cut(&channel, &sandbox);
            },
            sig = signals.next() => if state.probed() && !state.between_phases() {
                sandbox.signal(sig);
            } else {
                // Before a probe, the command to receive it does not exist yet (and in the
                // first moments pid 1 does not block signals yet, and would ignore them):
                // the start is cancelled instead.
                sandbox.signal(Signal::SIGKILL);
                cancelled = Some(sig);
            },
            () = log.failed(), if state.failure.is_none() => {
                // Nothing may go on unrecorded: the whole sandbox stops.
                state.failure = Some(WrapperError::EventLogWrite {
                    path: log_path.clone(),
                    reason: log.failure().unwrap_or_default(),
                });
                sandbox.signal(Signal::SIGKILL);
            },
            _ = window_changes.recv(), if terminal.is_some() => {
                if let Some(terminal) = &terminal {
                    terminal.resize();
                }
            },
            () = sleep_until_some(setup_deadline), if !state.probed() && state.failure.is_none() => {
                state.failure = Some(WrapperError::Setup {
                    step: "start".into(),
                    detail: format!(
                        "the sandbox did not finish setting up within {} s",
                        SETUP_TIME_LIMIT.as_secs()
                    ),
                    hint: None,
                });
                sandbox.signal(Signal::SIGKILL);
            },
            () = sleep_until_some(deadline), if !timed_out => {
                // The whole sandbox: pid 1's death takes everything in it.
                sandbox.signal(Signal::SIGKILL);
                timed_out = true;
            }
            _ = exited.readable() => break,
        }
    }
    if let Some(allowed) = pinned_from.take() {
        crate::cpu::allow(allowed);
    }
    // The last of CMD's output, and the caller's terminal as it was, before netbox says
    // anything more.
    if let Some(terminal) = terminal.take() {
        terminal.finish();
    }
    let code = match state.finished.filter(|_| !reap_pid1) {
        // Done is pid 1's last word: nothing more to read.
        Some(status) => {
            sandbox.let_exit();
            status
        }
        None => {
            let code = sandbox.reap();
            // What the sandbox said just before it exited (a probe report, a setup
            // failure) may still be queued: read to the end before deciding the outcome.
            while channel_open {
                let next = std::time::Duration::from_secs(5);
                match tokio::time::timeout(next, channel.recv()).await {
                    Ok(Ok(Some((msg, _)))) => state.handle(msg),
                    _ => channel_open = false,
                }
            }
            code
        }
    };
    let probed = state.probed();
    *probe_report = state.report.take();
    // Every process the filter could stop is gone: the watcher has logged its last.
    if let Some(watch) = state.watch.take() {
        tally.writes_denied = watch.finish(&log, &session.id);
    }
    tally.timed_out = timed_out;
    tally.cancelled = cancelled.is_some();
    drop(host_listener);
    bridge.stop();
    bridge.stopped().await;
    if timed_out {
        crate::output::say(&format!(
            "netbox: timed out after {}; the sandbox was killed",
            humantime::format_duration(timeout.unwrap_or_default())
        ));
        return Ok(crate::error::EXIT_TIMEOUT);
    }
    if let Some(sig) = cancelled {
        return Ok(u8::try_from(128 + sig as i32).unwrap_or(crate::error::EXIT_NETBOX_FAILURE));
    }
    if let Some(error) = state.failure {
        return Err(error);
    }
    if !probed {
        // Gone before proving anything (killed, out of memory): CMD never ran, and the
        // status is netbox's failure, not CMD's. If the probe's checks had arrived, they are
        // logged, incomplete, and their first failure said.
        let found = state.probe_checks.take().and_then(|mut partial| {
            let found = partial.first_failure();
            partial.add_check(crate::sandbox::probe::failed_check(
                "probe report complete",
                "receive the writes made under the write filter",
                "the sandbox ended first".into(),
            ));
            state.record_probe(None, &partial);
            found
        });
        let found = found.map_or(String::new(), |why| format!("; the probe had found: {why}"));
        return Err(WrapperError::Setup {
            step: "sandbox".into(),
            detail: format!("the sandbox ended before its live probe (status {code}){found}"),
            hint: None,
        });
    }
    if state.between_phases() {
        // The same, between --fetch and CMD.
        return Err(WrapperError::Setup {
            step: "sandbox".into(),
            detail: format!("the sandbox ended between --fetch and CMD (status {code})"),
            hint: None,
        });
    }
    Ok(u8::try_from(code).unwrap_or(crate::error::EXIT_NETBOX_FAILURE))
}

/// What netbox has learned from the sandbox so far.
struct RunState<'a> {
    /// The live probe's report, once it has arrived.
    report: Option<ProbeReport>,
    /// The first probe's checks, until the rest of its report (`ProbeWatched`) arrives.
    probe_checks: Option<ProbeReport>,
    /// pid 1 reported that nothing of CMD's is left.
    done: bool,
    /// CMD's exit status, as pid 1 reported it with Done.
    finished: Option<i32>,
    failure: Option<WrapperError>,
    log: &'a EventLog,
    session: &'a str,
    stderr: Stderr,
    /// `--fetch`'s CMD1, and how it ended.
    fetch: Option<&'a str>,
    fetch_status: Option<i32>,
    /// The probe after the cut, once it has arrived.
    cut_report: Option<ProbeReport>,
    /// netbox has told pid 1 the bridge is closed.
    cut_sent: bool,
    /// The denied-write watcher, once the sandbox has handed over its listener.
    watch: Option<WriteWatch>,
    channel: &'a handshake::AsyncChannel,
    breakage: crate::testhooks::Breakage,
}

impl RunState<'_> {
    fn record_phase(&self, phase: &'static str, command: Option<&str>, fetch_status: Option<i32>) {
        self.log.record_as(
            "phase",
            self.session,
            &bridge::records::Phase {
                phase: phase.to_owned(),
                command: command.map(str::to_owned),
                fetch_status,
            },
        );
    }

    fn record_probe(&self, phase: Option<&'static str>, report: &ProbeReport) {
        self.log
            .record_as("probe", self.session, &ProbeRecord { phase, report });
    }

    /// Adds netbox's own check to a probe report: the probe's writes were seen by the
    /// denied-write watcher and judged as the probe expected.
    fn check_writes(&self, report: &mut ProbeReport) {
        if self.breakage.no_write_watch {
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
            if let Err(e) = self.channel.send(&SyncMsg::Start) {
                self.failure
                    .get_or_insert(WrapperError::Handshake(format!("start the command: {e}")));
            }
        }
    }

    /// With --fetch: CMD1 succeeded and CMD has not been proven safe to start yet.
    fn between_phases(&self) -> bool {
        self.fetch_status == Some(0) && self.cut_report.is_none()
    }

    /// Logs the cut and tells pid 1. If that message cannot be delivered, pid 1 would wait
    /// for it forever: the sandbox is stopped instead.
    fn cut(&mut self, channel: &handshake::AsyncChannel, sandbox: &SandboxGuard) {
        self.cut_sent = true;
        self.record_phase("cut", None, Some(0));
        if let Err(e) = channel.send(&SyncMsg::Cut) {
            self.failure.get_or_insert(WrapperError::Handshake(format!(
                "tell the sandbox of the cut: {e}"
            )));
            sandbox.signal(Signal::SIGKILL);
        }
    }

    /// Whether CMD itself may have started (with --fetch: only after the proven cut).
    fn cmd_may_run(&self) -> bool {
        match self.fetch {
            None => self.probed(),
            Some(_) => self.cut_report.as_ref().is_some_and(|r| r.passed),
        }
    }

    fn probed(&self) -> bool {
        self.report.is_some()
    }

    /// The first probe's whole report: netbox's own check added, CMD started only if
    /// everything passed, then logged.
    fn first_probe(&mut self, mut report: ProbeReport) {
        self.check_writes(&mut report);
        self.start_if_passed(&report);
        self.record_probe(self.fetch.map(|_| "fetch"), &report);
        match report.first_failure() {
            Some(why) => {
                self.failure = Some(WrapperError::ProbeFailed(format!(
                    "{why}; CMD was not started"
                )));
            }
            None => {
                // Proven: from now on each blocked attempt is announced as it happens.
                self.log.set_stderr(self.stderr);
                if let Some(command) = self.fetch {
                    self.record_phase("fetch", Some(command), None);
                }
            }
        }
        self.report = Some(report);
    }

    fn handle(&mut self, msg: SyncMsg) {
        match msg {
            SyncMsg::ProbeChecks(report) if !self.probed() && self.probe_checks.is_none() => {
                self.probe_checks = Some(report);
            }
            SyncMsg::ProbeWatched {
                writes,
                checks,
                duration_us,
            } if !self.probed() && self.probe_checks.is_some() => {
                if let Some(mut report) = self.probe_checks.take() {
                    report.watched_writes = writes;
                    report.duration_us = report.duration_us.saturating_add(duration_us);
                    for check in checks {
                        report.add_check(check);
                    }
                    self.first_probe(report);
                }
            }
            SyncMsg::FetchDone { status }
                if self.fetch.is_some() && self.probed() && self.fetch_status.is_none() =>
            {
                self.fetch_status = Some(status);
                if status != 0 {
                    // pid 1 has ended everything of CMD1's and exits with its status.
                    self.record_phase("fetch_failed", None, Some(status));
                    crate::output::say(&format!(
                        "netbox: the --fetch command exited with status {status}; CMD was not run"
                    ));
                    self.done = true;
                }
            }
            SyncMsg::Probe(mut report)
                if self.fetch_status == Some(0) && self.cut_report.is_none() =>
            {
                self.check_writes(&mut report);
                self.start_if_passed(&report);
                self.record_probe(Some("cut"), &report);
                if let Some(why) = report.first_failure() {
                    self.failure = Some(WrapperError::ProbeFailed(format!(
                        "after --fetch: {why}; CMD was not started"
                    )));
                }
                self.cut_report = Some(report);
            }
            SyncMsg::Done { status } if self.cmd_may_run() => {
                self.done = true;
                self.finished = Some(status);
            }
            SyncMsg::SetupFailed { step, detail, hint } => {
                self.failure
                    .get_or_insert(WrapperError::Setup { step, detail, hint });
            }
            // pid 1 saw a pin go (removed or replaced on the host) and stopped the run.
            SyncMsg::PinLost { path } if self.probed() => {
                self.failure.get_or_insert(WrapperError::PinLost { path });
            }
            SyncMsg::Probe(_)
            | SyncMsg::ProbeChecks(_)
            | SyncMsg::ProbeWatched { .. }
            | SyncMsg::Listeners { .. }
            | SyncMsg::PinLost { .. }
            | SyncMsg::Done { .. }
            | SyncMsg::FetchDone { .. }
            | SyncMsg::WriteWatch
            | SyncMsg::Terminal
            | SyncMsg::Start
            | SyncMsg::Cut => {
                self.failure.get_or_insert(WrapperError::Handshake(
                    "unexpected message from the sandbox".into(),
                ));
            }
        }
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

/// The bridge serving the sandbox's listeners, from start to drained.
enum BridgeTask {
    Serving {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    },
    /// Told to stop: accepting no more, draining its connections.
    Stopping(tokio::task::JoinHandle<()>),
    Stopped,
}

impl BridgeTask {
    fn serve(
        listeners: Vec<SessionListener>,
        log: Arc<EventLog>,
        refusal_status: http::StatusCode,
    ) -> BridgeTask {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bridge::serve(
            listeners,
            BridgeConfig {
                refusal_status,
                ..BridgeConfig::default()
            },
            log,
            async {
                let _ = stopped.await;
            },
        ));
        BridgeTask::Serving { stop, task }
    }

    /// Closes the listeners and starts the drain (if not already).
    fn stop(&mut self) {
        *self = match std::mem::replace(self, BridgeTask::Stopped) {
            BridgeTask::Serving { stop, task } => {
                let _ = stop.send(());
                BridgeTask::Stopping(task)
            }
            other => other,
        };
    }

    fn is_stopping(&self) -> bool {
        matches!(self, BridgeTask::Stopping(_))
    }

    /// Waits until a stopping bridge has drained (at once if it has; forever if it was
    /// never told to stop).
    async fn stopped(&mut self) {
        match self {
            BridgeTask::Stopping(task) => {
                let _ = task.await;
                *self = BridgeTask::Stopped;
            }
            BridgeTask::Stopped => {}
            BridgeTask::Serving { .. } => std::future::pending().await,
        }
    }
}

/// Sleeps until `deadline`, or forever if there is none.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
