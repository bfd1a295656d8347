//! The run, once the sandbox exists: one `Supervisor` holds its state, and each message
//! from pid 1, signal and deadline is one of its methods. Where the run stands is one
//! `Stage` (setting up, probe writes due, fetching, cutting, running, refused, done), and
//! CMD is told to start only from a passed probe's.

mod start;

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use bridge::{EventLog, Session, Stderr};
use nix::sys::signal::Signal;

use super::gitwatch;
use super::SandboxGuard;
use super::SETUP_TIME_LIMIT;
use crate::error::WrapperError;
use crate::plan::protect::Placeholders;
use crate::sandbox::handshake::{self, SyncMsg};
use crate::sandbox::probe::ProbeReport;
use crate::supervise::bridge_task::BridgeTask;
use crate::supervise::stage::Stage;
use crate::supervise::writewatch::{Attached, WriteWatch};

/// Everything netbox follows while the sandbox runs.
pub(super) struct Supervisor<'a> {
    pub(super) stage: Stage,
    /// The first thing that went wrong: the run's outcome, whatever happens after it.
    pub(super) failure: Option<WrapperError>,
    /// The first live probe's report, once it has arrived (the caller keeps it).
    pub(super) first_report: Option<ProbeReport>,
    pub(super) bridge: BridgeTask,
    /// The denied-write watcher; it judges once the sandbox has handed over its listener.
    pub(super) watch: Option<WriteWatch>,
    /// Told the watcher the bridge is closed, at `--fetch`'s cut.
    pub(super) cut: Arc<std::sync::atomic::AtomicBool>,
    /// CMD's terminal, once pid 1 has handed it over (terminal.rs).
    pub(super) terminal: Option<crate::terminal::RelayedTerminal>,
    /// The signal that cancelled an unproven start.
    pub(super) cancelled: Option<Signal>,
    pub(super) timed_out: bool,
    pub(super) git_watch: Option<gitwatch::GitWatch>,
    /// The sandbox's pid 1: its process, its exit, the channel to it.
    pub(super) pid1: Pid1,
    /// What the caller lends the run and reads back after it.
    pub(super) lent: Lent<'a>,
    /// What the run was given: its session and policy, its log, its deadline and `--fetch`, the
    /// host-loopback listener the probe must not reach, and how much it says on stderr.
    pub(super) settings: Settings,
    /// Held from the start until the probe has reported (see `leave_start_up`).
    pub(super) start_up: StartUp,
}

/// The sandbox's pid 1: its process, its exit, the channel to it.
pub(super) struct Pid1 {
    pub(super) sandbox: SandboxGuard,
    /// pid 1's pidfd, readable once it has exited.
    pub(super) exited: tokio::io::unix::AsyncFd<OwnedFd>,
    /// Until pid 1 closes its end.
    pub(super) channel_open: bool,
    pub(super) channel: handshake::AsyncChannel,
    pub(super) reap_pid1: bool,
}

/// What the caller lends the run and reads back after it.
pub(super) struct Lent<'a> {
    pub(super) placeholders: &'a mut Option<Placeholders>,
    pub(super) probe_report: &'a mut Option<ProbeReport>,
    pub(super) tally: &'a mut crate::supervise::session_records::Tally,
    pub(super) grown: &'a mut Vec<crate::plan::protect::Watched>,
}

/// What the run was given: its session and policy, its log, its deadline and `--fetch`, the
/// host-loopback listener the probe must not reach, and how much it says on stderr.
pub(super) struct Settings {
    pub(super) timeout: Option<std::time::Duration>,
    pub(super) fetch: Option<String>,
    pub(super) session: Arc<Session>,
    pub(super) log_path: std::path::PathBuf,
    pub(super) log: Arc<EventLog>,
    pub(super) host_listener: TcpListener,
    pub(super) stderr: Stderr,
}

/// Held from the start until the probe has reported (see `leave_start_up`).
pub(super) struct StartUp {
    /// The CPUs netbox may use, kept to one of them until the probe has reported.
    pub(super) pinned_from: Option<nix::sched::CpuSet>,
    pub(super) resolved_fds: Option<Vec<OwnedFd>>,
    pub(super) cpu_cgroup_tasks: Option<std::path::PathBuf>,
    /// Rows netbox checked itself, added to the first probe's report.
    pub(super) own_checks: Vec<bridge::log::records::Check>,
}

impl<'a> Supervisor<'a> {
    /// Records the first failure and stops the whole sandbox: whatever pid 1 is waiting
    /// for (a start that will not come), the run is over.
    pub(super) fn fail(&mut self, error: WrapperError) {
        self.failure.get_or_insert(error);
        self.pid1.sandbox.signal(Signal::SIGKILL);
    }

    pub(super) fn on_message(&mut self, msg: SyncMsg, fds: Vec<OwnedFd>) {
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
    pub(super) fn attach_write_watch(
        &mut self,
        listener: i32,
        diag: Option<i32>,
        root: Option<i32>,
        udp_witness: Option<u16>,
    ) {
        use std::os::fd::AsFd;
        let pid1 = self.pid1.sandbox.pidfd.as_fd();
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

    pub(super) fn start_terminal(&mut self, fds: Vec<OwnedFd>) {
        let pid1 = self.pid1.sandbox.pid;
        match fds
            .into_iter()
            .next()
            .map(|fd| crate::terminal::RelayedTerminal::start(fd, pid1))
        {
            Some(Ok(session)) => self.terminal = Some(session),
            _ => self.fail(WrapperError::Handshake(
                "the command's terminal could not be used".into(),
            )),
        }
    }

    /// One message of the handshake, in the one stage that expects it.
    pub(super) fn handle(&mut self, msg: SyncMsg) {
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
    pub(super) fn first_probe(&mut self, mut report: ProbeReport) {
        self.check_writes(&mut report);
        for check in std::mem::take(&mut self.start_up.own_checks) {
            report.add_check(check);
        }
        self.start_if_passed(&report);
        let phase = self.settings.fetch.as_ref().map(|_| "fetch");
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
                self.settings.log.set_stderr(self.settings.stderr);
                match &self.settings.fetch {
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
    pub(super) fn fetch_done(&mut self, status: i32) {
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
    pub(super) fn cut_probe(&mut self, mut report: ProbeReport) {
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
    pub(super) fn after_message(&mut self) {
        if self.stage.probed() {
            self.leave_start_up();
        }
        if self.stage.nothing_left() {
            if let Some(placeholders) = self.lent.placeholders.as_mut() {
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
            self.pid1.sandbox.signal(Signal::SIGKILL);
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
    pub(super) fn leave_start_up(&mut self) {
        if let Some(allowed) = self.start_up.pinned_from.take() {
            crate::cpu::allow(allowed);
        }
        drop(self.start_up.resolved_fds.take());
        // With --cpus, once CMD may run: the bridge's work for it (this thread runs the
        // bridge) comes out of CMD's quota too, as the write watcher's does; a run that
        // cannot keep it there stops.
        if let Some(tasks) = self.start_up.cpu_cgroup_tasks.take() {
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
    pub(super) fn send_cut(&mut self) {
        if !matches!(self.stage, Stage::Cutting { told: false }) {
            return;
        }
        self.stage = Stage::Cutting { told: true };
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
        self.record_phase("cut", None, Some(0));
        if let Err(e) = self.pid1.channel.send(&SyncMsg::Cut) {
            self.fail(WrapperError::Handshake(format!(
                "tell the sandbox of the cut: {e}"
            )));
        }
    }

    pub(super) fn on_signal(&mut self, sig: Signal) {
        if self.stage.probed() && !self.stage.between_phases() {
            self.pid1.sandbox.signal(sig);
        } else {
            // Before a probe, the command to receive it does not exist yet (and in the
            // first moments pid 1 does not block signals yet, and would ignore them): the
            // start is cancelled instead.
            self.pid1.sandbox.signal(Signal::SIGKILL);
            self.cancelled = Some(sig);
        }
    }

    /// Nothing may go on unrecorded: the whole sandbox stops.
    pub(super) fn on_log_failed(&mut self) {
        let reason = self.settings.log.failure().unwrap_or_default();
        self.fail(WrapperError::EventLogWrite {
            path: self.settings.log_path.clone(),
            reason,
        });
    }

    pub(super) fn resize_terminal(&self) {
        if let Some(terminal) = &self.terminal {
            terminal.resize();
        }
    }

    pub(super) fn on_setup_time_limit(&mut self) {
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
    pub(super) fn look_at_git(&mut self) {
        if let Some(Err(e)) = self.git_watch.as_mut().map(gitwatch::GitWatch::look) {
            self.fail(e);
        }
    }

    /// `--timeout`: the whole sandbox, as pid 1's death takes everything in it.
    pub(super) fn on_timeout(&mut self) {
        self.pid1.sandbox.signal(Signal::SIGKILL);
        self.timed_out = true;
    }

    /// The sandbox has exited (or said its last word): collects its status and what it
    /// said last, stops the bridge and the watcher, and decides netbox's outcome.
    pub(super) async fn finish(mut self) -> Result<u8, WrapperError> {
        if let Some(allowed) = self.start_up.pinned_from.take() {
            crate::cpu::allow(allowed);
        }
        // The last of CMD's output, and the caller's terminal as it was, before netbox
        // says anything more; and nothing CMD left there may hide what netbox says.
        let had_terminal = self.terminal.is_some();
        if let Some(terminal) = self.terminal.take() {
            terminal.finish();
        }
        crate::terminal::cmd_ended();
        if let Stage::FetchFailed { status } = self.stage {
            crate::output::say(&format!(
                "netbox: the --fetch command exited with status {status}; CMD was not run"
            ));
        }
        let code = match self.stage.status().filter(|_| !self.pid1.reap_pid1) {
            // Done is pid 1's last word: nothing more to read.
            Some(status) => {
                self.pid1.sandbox.let_exit();
                status
            }
            None => {
                let code = self.pid1.sandbox.reap();
                // What the sandbox said just before it exited (a probe report, a setup
                // failure) may still be queued: read to the end before deciding.
                while self.pid1.channel_open {
                    let next = std::time::Duration::from_secs(5);
                    match tokio::time::timeout(next, self.pid1.channel.recv()).await {
                        Ok(Ok(Some((msg, _)))) => self.handle(msg),
                        _ => self.pid1.channel_open = false,
                    }
                }
                code
            }
        };
        *self.lent.probe_report = self.first_report.take();
        // Once more, with CMD gone: it may have used a path that became needed, and
        // exited, between two looks. The run is then failed as if stopped.
        if let Some(mut git_watch) = self.git_watch.take() {
            if let Err(e) = git_watch.look() {
                self.failure.get_or_insert(e);
            }
            *self.lent.grown = git_watch.into_grown();
        }
        // Every process the filter could stop is gone: the watcher has logged its last.
        if let Some(watch) = self.watch.take() {
            (
                self.lent.tally.writes_denied,
                self.lent.tally.direct_attempts,
            ) = watch.finish(&self.settings.log, &self.settings.session.id);
        }
        // A full-screen program (less, vim) draws over the refusals said while it ran: said
        // again in one line once it is gone.
        let refused = self.lent.tally.writes_denied;
        if refused > 0 && had_terminal && self.settings.stderr != Stderr::Quiet {
            crate::output::say(&format!(
                "netbox: {refused} write(s) refused while the command ran (`netbox log --last` \
                 lists them)"
            ));
        }
        self.lent.tally.timed_out = self.timed_out;
        self.lent.tally.cancelled = self.cancelled.is_some();
        drop(self.settings.host_listener);
        self.bridge.stop();
        self.bridge.stopped().await;
        if self.timed_out {
            crate::output::say(&format!(
                "netbox: timed out after {}; the sandbox was killed",
                humantime::format_duration(self.settings.timeout.unwrap_or_default())
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
                &self.settings.log,
                &self.settings.session.id,
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

    pub(super) fn record_phase(
        &self,
        phase: &'static str,
        command: Option<&str>,
        fetch_status: Option<i32>,
    ) {
        self.settings.log.record_as(
            "phase",
            &self.settings.session.id,
            &bridge::log::records::Phase {
                phase: phase.to_owned(),
                command: command.map(str::to_owned),
                fetch_status,
            },
        );
    }

    pub(super) fn record_probe(&self, phase: Option<&'static str>, report: &ProbeReport) {
        record_probe(&self.settings.log, &self.settings.session.id, phase, report);
    }

    /// Adds netbox's own check to a probe report: the probe's writes were seen by the
    /// denied-write watcher and judged as the probe expected.
    pub(super) fn check_writes(&self, report: &mut ProbeReport) {
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
    pub(super) fn start_if_passed(&mut self, report: &ProbeReport) {
        if report.passed {
            crate::supervise::gitaudit::command_starts();
            // From now on CMD may write to the caller's terminal.
            crate::terminal::handed_over();
            if let Err(e) = self.pid1.channel.send(&SyncMsg::Start) {
                self.failure
                    .get_or_insert(WrapperError::Handshake(format!("start the command: {e}")));
            }
        }
    }
}

pub(super) fn record_probe(
    log: &EventLog,
    session: &str,
    phase: Option<&'static str>,
    report: &ProbeReport,
) {
    // A copy, so the record is the type `netbox log` reads it as (a few KiB, once or
    // twice a run). The probe's writes and connections are netbox's to check, not news:
    // left only where the check was not made (no watcher), they are not logged either.
    let mut record = bridge::log::records::Probe {
        phase: phase.map(str::to_owned),
        report: report.clone(),
    };
    record.report.watched_writes.clear();
    record.report.watched_connects.clear();
    log.record_as("probe", session, &record);
}

/// The sandbox was gone before proving anything (killed, out of memory): CMD never ran,
/// and the status is netbox's failure, not CMD's. If the probe's checks had arrived, they
/// are logged, incomplete, and their first failure said.
pub(super) fn ended_unproven(
    stage: Stage,
    code: i32,
    log: &EventLog,
    session: &str,
) -> WrapperError {
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

/// A step pid 1 could not take, with the setting that allows it here when netbox knows one
/// (sandbox/place.rs: a container's seccomp profile, its masked /proc, ...).
pub(super) fn setup_failed(step: String, detail: String, hint: Option<String>) -> WrapperError {
    let hint = hint.or_else(|| crate::sandbox::hint_for_setup(&step, &detail));
    WrapperError::Setup { step, detail, hint }
}
