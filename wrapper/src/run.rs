//! `netbox -- CMD`, netbox's side: plan everything, fork the sandbox before any thread
//! exists, serve the bridge on the listeners the sandbox hands out, log the probe, forward
//! signals, and exit with CMD's status.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bridge::policy::Verdict;
use bridge::target::Target;
use bridge::{BridgeConfig, EventLog, Listener, Session, SessionListener, Stderr};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use serde::Serialize;

use crate::config::SandboxConfig;
use crate::error::WrapperError;
use crate::handshake::{self, SyncMsg};
use crate::probe::{ProbeInput, ProbeReport};
use crate::protect::{self, ProtectInput, Protected};
use crate::sandbox::{self, ChildPlan, PROXY_PORT};
use crate::testhooks::Breakage;
use crate::{env, hostsockets, init, mounts, namespaces};

/// Names the probe tries through the bridge; the first the policy denies is used.
const CANARIES: &[&str] = &[
    "netbox-probe-canary.invalid:443",
    "canary.netbox-probe.invalid:9",
];

/// The probe's record in the event log.
#[derive(Serialize)]
struct ProbeRecord<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema_version: u32,
    ts: String,
    session: &'a str,
    #[serde(flatten)]
    report: &'a ProbeReport,
}

/// Runs CMD in the sandbox; returns the exit status for netbox.
pub fn run(config: SandboxConfig) -> Result<u8, WrapperError> {
    let home = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok());
    let protected = protect::protected_paths(&ProtectInput {
        write_roots: &config.requested_roots,
        home: home.as_deref(),
        extra: &config.protect,
        allow_git_writes: config.allow_git_writes,
    })?;
    let canary = CANARIES
        .iter()
        .find(|c| {
            Target::parse_authority(c)
                .map(|t| config.policy.decide(&t).verdict == Verdict::Deny)
                .unwrap_or(false)
        })
        .ok_or_else(|| {
            WrapperError::Usage("the allowlist allows the probe's .invalid canaries".into())
        })?;
    // A listener on host loopback that the sandbox must not reach (and that answers us).
    let host_listener = TcpListener::bind("127.0.0.1:0").map_err(WrapperError::Spawn)?;
    let host_addr = host_listener.local_addr().map_err(WrapperError::Spawn)?;
    // Quiet until the probe is done: its canary is logged, but is no news to the user.
    let log = EventLog::open(Some(&config.log_path), Stderr::Quiet).map_err(|source| {
        bridge::BridgeError::OpenLog {
            path: config.log_path.clone(),
            source,
        }
    })?;
    let plan = child_plan(&config, &protected, host_addr, canary)?;

    if !config.quiet {
        crate::say(&startup_line(&config));
    }

    let (ours, theirs) = handshake::pair().map_err(WrapperError::Spawn)?;
    // Single-threaded here: no runtime or thread exists yet, so cloning is sound.
    let pid = namespaces::spawn_in_new_namespaces(|| sandbox::run(&plan, &theirs))?;
    drop(theirs);
    // From here on, however this function ends, the sandbox is killed and reaped (the
    // guard) before the placeholders go (declared first, dropped last): nothing may run
    // unpinned.
    let _placeholders;
    let sandbox = SandboxGuard::new(pid)?;
    // While the sandbox sets up its namespaces, lay the placeholders its mounts need (it
    // waits for a Proceed, sent once its listeners arrive). Held (flocked) until this
    // function returns.
    _placeholders = protect::Placeholders::hold(&protected)?;
    // Threads may exist from here on; the runtime starts while the sandbox sets up. One
    // worker: each thread costs start-up time (measured: 2 workers 6.5 ms, 1 worker 5.5 ms
    // for `netbox -- true`), and a tunnel's relay runs in one task anyway.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(WrapperError::Runtime)?;
    let session = Arc::new(Session {
        id: Arc::from(config.session_id.as_str()),
        policy: Arc::new(config.policy),
    });
    let stderr = if config.quiet {
        Stderr::Quiet
    } else {
        Stderr::Summary
    };
    let pinned = protected.iter().map(|p| p.path.clone()).collect();
    runtime.block_on(supervise(Supervised {
        sandbox,
        pinned,
        channel: ours,
        session,
        log: Arc::new(log),
        host_listener,
        stderr,
    }))
}

fn child_plan(
    config: &SandboxConfig,
    protected: &[Protected],
    host_listener: SocketAddr,
    canary: &str,
) -> Result<ChildPlan, WrapperError> {
    // Hidden whole in the sandbox: /run, and a private /tmp except the writable roots in it.
    let private_tmp = config.tmp == crate::cli::TmpMode::Private;
    let in_root = |p: &Path| config.write_roots.iter().any(|r| p.starts_with(r));
    let hidden =
        |p: &Path| p.starts_with("/run") || (private_tmp && p.starts_with("/tmp") && !in_root(p));
    let sockets = hostsockets::visible_host_sockets(hidden, &config.write_roots);
    let hidden: Vec<PathBuf> = config.hide.iter().chain(&sockets).cloned().collect();
    let mounts = mounts::plan(
        &mounts::Layout {
            write_roots: &config.write_roots,
            tmp: config.tmp,
            protected,
            read_only: &config.read_only,
            hidden: &hidden,
        },
        Path::is_dir,
    );
    let mut outside = vec![PathBuf::from("/")];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        // Only where the sandbox can see it: under a private /tmp it does not exist at all.
        // And where this user can look: a home it cannot search would fail with EACCES,
        // which proves nothing about the mount.
        let hidden = config.tmp == crate::cli::TmpMode::Private && home.starts_with("/tmp");
        let searchable = nix::unistd::access(&home, nix::unistd::AccessFlags::X_OK).is_ok();
        if home.is_dir()
            && searchable
            && !hidden
            && !config.write_roots.iter().any(|r| home.starts_with(r))
        {
            outside.push(home);
        }
    }
    Ok(ChildPlan {
        uid: config.uid,
        gid: config.gid,
        mounts,
        probe: ProbeInput {
            write_roots: config.write_roots.clone(),
            temp_dir: PathBuf::from("/tmp"),
            outside,
            protected: protected
                .iter()
                .map(|p| p.path.clone())
                .chain(config.read_only.iter().cloned())
                .collect(),
            host_sockets: sockets,
            proxy: SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)),
            host_listener,
            canary: canary.to_owned(),
            refusal_status: BridgeConfig::default().refusal_status.as_u16(),
        },
        cmd: config.cmd.clone(),
        env: env::sandbox_env(PROXY_PORT),
        cwd: config.cwd.clone(),
        breakage: Breakage::from_env(),
    })
}

fn startup_line(config: &SandboxConfig) -> String {
    let mut roots: Vec<String> = config
        .write_roots
        .iter()
        .map(|r| r.display().to_string())
        .collect();
    if config.tmp == crate::cli::TmpMode::Private {
        roots.push("/tmp (private)".into());
    }
    format!(
        "netbox: sandbox normal | workspace {} | write {} | {} allowed hosts | log {}",
        config.workspace.display(),
        roots.join(", "),
        config.policy.allow_count(),
        config.log_path.display()
    )
}

fn check_host_listener_answers(listener: &TcpListener) -> Result<(), WrapperError> {
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

/// The sandbox's pid 1, held by a pidfd; killed and reaped on drop unless already reaped.
struct SandboxGuard {
    pid: Pid,
    pidfd: OwnedFd,
    reaped: bool,
}

impl SandboxGuard {
    fn new(pid: Pid) -> Result<SandboxGuard, WrapperError> {
        match crate::sys::process::pidfd_open(pid) {
            Ok(pidfd) => Ok(SandboxGuard {
                pid,
                pidfd,
                reaped: false,
            }),
            Err(e) => {
                // Not yet reaped, so the pid cannot have been reused.
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
                Err(WrapperError::Spawn(e))
            }
        }
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
        if !self.reaped {
            self.signal(Signal::SIGKILL);
            let _ = waitpid(self.pid, None);
        }
    }
}

/// What `supervise` follows.
struct Supervised {
    sandbox: SandboxGuard,
    /// Paths the sandbox pins read-only (watched for host-side changes).
    pinned: Vec<PathBuf>,
    channel: handshake::Channel,
    session: Arc<Session>,
    log: Arc<EventLog>,
    host_listener: TcpListener,
    stderr: Stderr,
}

/// Waits for the listeners, serves the bridge, and follows the sandbox until CMD exits.
async fn supervise(run: Supervised) -> Result<u8, WrapperError> {
    let Supervised {
        mut sandbox,
        pinned,
        channel,
        session,
        log,
        host_listener,
        stderr,
    } = run;
    // Handlers first: a signal from now on is forwarded (or cancels the start), never lost.
    let mut signals = Signals::new()?;
    let channel = handshake::AsyncChannel::new(channel).map_err(WrapperError::Spawn)?;
    let exited = sandbox
        .pidfd
        .try_clone()
        .and_then(crate::sys::fd::register_readable)
        .map_err(WrapperError::Spawn)?;

    let listener_fds = match channel.recv().await {
        Ok(Some((SyncMsg::Listeners { .. }, fds))) if !fds.is_empty() => fds,
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
    // Watching starts before the sandbox pins anything, so no host-side change is missed.
    let watch = crate::pinwatch::PinWatch::new(&pinned).map_err(WrapperError::Spawn)?;
    // The sandbox is past its namespaces and now waits for this: the placeholders exist,
    // it may build its filesystem.
    channel
        .send(&SyncMsg::Proceed)
        .map_err(WrapperError::Handshake)?;
    // The control half of the host-loopback check: the listener answers us.
    check_host_listener_answers(&host_listener)?;
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
    let (stop_bridge, bridge_stopped) = tokio::sync::oneshot::channel::<()>();
    let bridge = tokio::spawn(bridge::serve(
        listeners,
        BridgeConfig::default(),
        Arc::clone(&log),
        async {
            let _ = bridge_stopped.await;
        },
    ));

    let mut state = RunState {
        probed: false,
        failure: None,
        log: &log,
        session: &session.id,
        stderr,
    };
    let mut cancelled = None;
    let mut channel_open = true;
    loop {
        tokio::select! {
            // Messages first: a probe report that arrived with a signal decides whether
            // that signal cancels the start or goes to CMD.
            biased;
            msg = channel.recv(), if channel_open => match msg {
                Ok(Some((msg, _))) => state.handle(msg),
                _ => channel_open = false,
            },
            sig = signals.next() => if state.probed {
                sandbox.signal(sig);
            } else {
                // Before the probe, pid 1 may not block signals yet (and pid 1 ignores what
                // it does not handle): the start is cancelled instead.
                sandbox.signal(Signal::SIGKILL);
                cancelled = Some(sig);
            },
            path = watch.changed(), if state.failure.is_none() => {
                sandbox.signal(Signal::SIGKILL);
                state.failure = Some(WrapperError::PinLost { path });
            }
            _ = exited.readable() => break,
        }
    }
    let code = sandbox.reap();
    // What the sandbox said just before it exited (a probe report, a setup failure) may
    // still be queued: read to the end before deciding the outcome.
    while channel_open {
        match tokio::time::timeout(std::time::Duration::from_secs(5), channel.recv()).await {
            Ok(Ok(Some((msg, _)))) => state.handle(msg),
            _ => channel_open = false,
        }
    }
    drop(host_listener);
    let _ = stop_bridge.send(());
    let _ = bridge.await;
    if let Some(sig) = cancelled {
        return Ok(u8::try_from(128 + sig as i32).unwrap_or(crate::error::EXIT_NETBOX_FAILURE));
    }
    if let Some(error) = state.failure {
        return Err(error);
    }
    if !state.probed {
        // Gone before proving anything (killed, out of memory): CMD never ran, and the
        // status is netbox's failure, not CMD's.
        return Err(WrapperError::Setup {
            step: "sandbox".into(),
            detail: format!("the sandbox ended before its live probe (status {code})"),
            hint: None,
        });
    }
    Ok(u8::try_from(code).unwrap_or(crate::error::EXIT_NETBOX_FAILURE))
}

/// What netbox has learned from the sandbox so far.
struct RunState<'a> {
    probed: bool,
    failure: Option<WrapperError>,
    log: &'a EventLog,
    session: &'a str,
    stderr: Stderr,
}

impl RunState<'_> {
    fn handle(&mut self, msg: SyncMsg) {
        match msg {
            SyncMsg::Probe(report) if !self.probed => {
                self.probed = true;
                self.log.record_json(&ProbeRecord {
                    kind: "probe",
                    schema_version: bridge::log::SCHEMA_VERSION,
                    ts: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
                    session: self.session,
                    report: &report,
                });
                match report.first_failure() {
                    Some(why) => {
                        self.failure = Some(WrapperError::ProbeFailed(format!(
                            "{why}; CMD was not started"
                        )));
                    }
                    // Proven: from now on each blocked attempt is announced as it happens.
                    None => self.log.set_stderr(self.stderr),
                }
            }
            SyncMsg::SetupFailed { step, detail, hint } => {
                self.failure
                    .get_or_insert(WrapperError::Setup { step, detail, hint });
            }
            SyncMsg::Probe(_) | SyncMsg::Listeners { .. } | SyncMsg::Proceed => {
                self.failure.get_or_insert(WrapperError::Handshake(
                    "unexpected message after the probe".into(),
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

/// `--disable-sandbox`: CMD as it is, no protection, no probe, said loudly.
pub fn run_unsandboxed(config: &crate::cli::RunArgs) -> Result<u8, WrapperError> {
    let Some((program, args)) = config.cmd.split_first() else {
        return Err(WrapperError::Usage(
            "nothing to run: use netbox [OPTIONS] -- CMD [ARGS...]".into(),
        ));
    };
    crate::say(
        "netbox: sandbox disabled: CMD runs with no network filter, no filesystem protection and no probe",
    );
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .map_err(|source| WrapperError::Exec {
            cmd: program.to_string_lossy().into_owned(),
            source,
        })?;
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(i32::from(crate::error::EXIT_NETBOX_FAILURE));
    Ok(u8::try_from(code).unwrap_or(crate::error::EXIT_NETBOX_FAILURE))
}
