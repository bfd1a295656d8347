//! The sandbox side of a run, in order. One process, created by clone(2) in new user and
//! pid namespaces, so it is pid 1 of its pid namespace from the first instruction. It maps
//! its ids and enters new mount, ipc and uts namespaces. Then, at the same time, a second
//! thread builds the filesystem (on the placeholders netbox laid before creating it) while
//! the first enters a new network namespace, brings `lo` up, creates the proxy listeners
//! there and hands them out (with capture, first capture's own namespace, which it then
//! links to the sandbox's: capture.rs). With that thread ended, pid 1 drops every
//! privilege, runs the live probe, and only if it passed starts CMD, whose init it then
//! is (watching the pins while CMD runs).
//!
//! It dies with netbox (PR_SET_PDEATHSIG): if netbox is killed, even with SIGKILL, pid 1
//! dies, and with it the kernel kills everything in the namespace.

pub mod caps;
pub mod capture;
pub mod handshake;
pub mod init;
pub mod mount_error;
pub mod mounts;
pub mod namespaces;
pub mod probe;
pub mod run_dir;

use std::ffi::OsString;
use std::net::{Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::cpu;
use crate::sandbox::handshake::{Channel, SyncMsg};
use crate::sandbox::mounts::MountPlan;
use crate::sandbox::probe::ProbeInput;

/// The proxy port inside the sandbox's own network namespace, where nothing else listens.
pub const PROXY_PORT: u16 = 3128;

/// Everything the sandbox needs, computed before the clone.
pub struct ChildPlan {
    pub uid: u32,
    pub gid: u32,
    pub mounts: MountPlan,
    pub probe: ProbeInput,
    pub cmd: Vec<OsString>,
    /// `--fetch`: run first (as `sh -c CMD1`), with the bridge; CMD runs after the cut.
    pub fetch: Option<Vec<OsString>>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    /// The placeholders netbox laid, which pid 1 keeps open (see `hold_placeholders`).
    pub placeholders: Vec<PathBuf>,
    /// CMD's own terminal, when it gets one (terminal.rs).
    pub terminal: Option<crate::terminal::Plan>,
    /// Capture: what connections made without a proxy reach the bridge at (the DNS stub
    /// comes with it).
    pub capture: Option<crate::plan::capture::CapturePlan>,
}

/// Where the sandbox's DNS stub listens, when the run captures (resolv.conf names it).
pub const DNS_STUB: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 53);

/// pid 1 of the sandbox: set up, prove, then run CMD. Returns the exit status.
// Whole: pid 1's life in order (set up, prove, wait for netbox's word, run CMD, reap),
// each step using what the one before left, with no thread to hand work to.
pub fn run(plan: &ChildPlan, channel: &Channel) -> i32 {
    let (network, foreign) = match set_up(plan, channel) {
        Ok(done) => done,
        Err((step, detail, hint)) => {
            let _ = channel.send(&SyncMsg::SetupFailed { step, detail, hint }, &[]);
            return crate::error::EXIT_NETBOX_FAILURE.into();
        }
    };
    hold_placeholders(&plan.placeholders);
    let probe_input = &plan.probe;
    if !prove(
        probe_input,
        &plan.env,
        network.capture.as_ref(),
        foreign,
        channel,
    ) {
        return crate::error::EXIT_NETBOX_FAILURE.into();
    }
    // Capture's namespace lives as long as pid 1 (this socket is in it): after
    // `--fetch`'s cut, with netbox's listeners there closed, what it carried is refused at
    // once, and the link stays as the cut probe finds it.
    let _capture_namespace = network.capture;
    let proxy_v6 = network.proxy_v6;
    // CMD's terminal: made here, from the sandbox's own devpts; its master end goes to
    // netbox, its slave end stays with pid 1 (so the pty lasts as long as the run) and is
    // CMD's standard input and output.
    let terminal = match plan.terminal.as_ref().map(|t| open_terminal(t, channel)) {
        None => None,
        Some(Ok(slave)) => Some(slave),
        Some(Err(e)) => {
            crate::output::say(&format!("netbox: cannot give the command a terminal: {e}"));
            return crate::error::EXIT_NETBOX_FAILURE.into();
        }
    };
    let tty = terminal
        .as_ref()
        .zip(plan.terminal.as_ref())
        .map(|(slave, t)| init::Tty {
            fd: slave.as_raw_fd(),
            stderr_too: t.stderr_too,
        });
    // pid 1 keeps the channel, to report a lost pin; CMD cannot reach it (pid 1 is not
    // dumpable and never execs, so /proc/1/fd, ptrace and pidfd_getfd are all refused:
    // see set_up).
    // Pinned: every read-only bind, every `--hide` cover (a credential refresher's
    // save-by-rename on the host would uncover it) and the cover of netbox's cache home.
    // Host sockets are not covered but decided at each connect (supervise/unixsockets.rs),
    // so a service that recreates its socket changes nothing here.
    let pinned = probe_input
        .protected
        .iter()
        .chain(&probe_input.hidden)
        .chain(probe_input.covered.iter().map(|(cover, _)| cover));
    let pins = crate::plan::pins::Pins::new(pinned.cloned().collect());
    let run = |cmd: &[OsString]| {
        let limits = &plan.probe.limits;
        init::run_to_end(cmd, &plan.env, &plan.cwd, limits, &pins, tty)
    };
    if let Some(fetch) = &plan.fetch {
        let status = match run(fetch) {
            Ok(status) => status,
            Err(stop) => return init::report_stop(stop, channel),
        };
        if channel.send(&SyncMsg::FetchDone { status }, &[]).is_err() {
            return crate::error::EXIT_NETBOX_FAILURE.into();
        }
        if status != 0 {
            return status;
        }
        match cut_and_prove(probe_input, channel, proxy_v6) {
            Ok(true) => {}
            // netbox says which control failed.
            Ok(false) => return crate::error::EXIT_NETBOX_FAILURE.into(),
            Err(e) => {
                crate::output::say(&format!("netbox: between --fetch and CMD: {e}"));
                return crate::error::EXIT_NETBOX_FAILURE.into();
            }
        }
        // A signal netbox forwarded as CMD1 ended was meant for the run: it ends here.
        if let Some(sig) = init::take_forwarded_signal() {
            return 128 + sig as i32;
        }
        // Pins lost while CMD1 ran down are caught before CMD, not after it has started.
        if let Some(path) = pins.lost() {
            return init::report_stop(init::Stop::PinLost(path.to_owned()), channel);
        }
        // What CMD1 left on the shared terminal (input pushed with TIOCSTI, changed modes)
        // is not CMD's: flushed, and the modes and size set as they were made.
        if let (Some(slave), Some(plan_tty)) = (&terminal, &plan.terminal) {
            let _ = nix::sys::termios::tcflush(slave, nix::sys::termios::FlushArg::TCIOFLUSH);
            if let Some(modes) = plan_tty.modes {
                let modes = nix::sys::termios::Termios::from(modes);
                let _ =
                    nix::sys::termios::tcsetattr(slave, nix::sys::termios::SetArg::TCSANOW, &modes);
            }
            if let Some(size) = &plan_tty.size {
                let _ = crate::sys::pty::set_window_size(std::os::fd::AsFd::as_fd(slave), size);
            }
        }
    }
    match run(&plan.cmd) {
        Ok(code) => {
            // Nothing of CMD's is left: netbox may remove its placeholders and finish while
            // pid 1 exits.
            let _ = channel.send(&SyncMsg::Done { status: code }, &[]);
            // Likewise, let netbox go on before this exit's long teardown.
            cpu::let_the_woken_run();
            code
        }
        Err(stop) => init::report_stop(stop, channel),
    }
}

/// Opens CMD's pty and hands its master end to netbox. Returns the slave end.
fn open_terminal(
    terminal: &crate::terminal::Plan,
    channel: &Channel,
) -> Result<std::os::fd::OwnedFd, String> {
    let modes = terminal.modes.map(nix::sys::termios::Termios::from);
    let (master, slave) = crate::sys::pty::open(modes.as_ref(), terminal.size.as_ref())
        .map_err(|e| format!("open a pty: {e}"))?;
    channel
        .send(&SyncMsg::Terminal, &[master.as_raw_fd()])
        .map_err(|e| format!("hand netbox the pty: {e}"))?;
    Ok(slave)
}

/// Opens each placeholder netbox laid, through the sandbox's own read-only view of it, and
/// leaves it open until pid 1 exits. netbox removes the placeholders once CMD is done, and
/// the last close of a removed directory waits for the disk (ext4 mounted with `discard`:
/// ~50 µs a directory here); with these open, that close is often pid 1's, in its exit,
/// which nobody waits for, instead of netbox's. Held as `O_PATH` fds following no symlink
/// (what stands there may have been swapped by the host since: a FIFO would block an
/// ordinary open forever); close-on-exec, in a process CMD cannot reach (pid 1 is not
/// dumpable and never execs).
fn hold_placeholders(paths: &[PathBuf]) {
    for path in paths {
        if let Ok(file) = crate::sys::resolve::open_exact(path) {
            // Closed by the kernel as pid 1 exits.
            std::mem::forget(file);
        }
    }
}

/// The first live probe, reported in two parts: its checks, sent before the write filter
/// goes on, so that netbox reads them while pid 1 installs it; then the writes made under
/// the filter, with what was checked after them. Whether the command may start: the probe
/// passed, and netbox, its own checks added, said so.
fn prove(
    input: &ProbeInput,
    env: &[(OsString, OsString)],
    capture: Option<&crate::sys::rtnl::Rtnl>,
    foreign: Option<probe::ForeignSocket>,
    channel: &Channel,
) -> bool {
    let (watched, unreadable) = while_readable(|| {
        let report = probe::run(input, env, capture);
        let passed = report.passed;
        // If netbox cannot be told, nothing will start.
        channel.send(&SyncMsg::ProbeChecks(report), &[]).ok()?;
        // Last, so the probe's other writes cost no round trip to netbox: from here on
        // every write-intent syscall (a few of the probe's, then CMD's, which inherits the
        // filter) waits for netbox, which logs the ones the mounts will refuse.
        let started = std::time::Instant::now();
        let (writes, connects, checks, handed) = match watch_writes(channel) {
            Ok(handed) => (
                probe::watched_writes(input),
                probe::watched_connects(input),
                {
                    let checks = vec![probe::unix_sockets_at_connect(input, foreign)];
                    probe::connect_allowed_sockets(input);
                    checks
                },
                handed,
            ),
            Err(e) => {
                let failed = probe::failed_check(
                    crate::sandbox::probe::WRITE_LOG_CHECK,
                    "install the filter and hand netbox its listener",
                    e,
                );
                (Vec::new(), Vec::new(), vec![failed], Vec::new())
            }
        };
        let duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        Some((passed, writes, connects, checks, duration_us, handed))
    });
    // `_handed` stays open until netbox has answered, by which time it has its copies
    // (the watched calls above each waited for netbox, which needs them to answer).
    let Some((passed, writes, connects, mut checks, duration_us, _handed)) = watched else {
        return false;
    };
    checks.extend(unreadable);
    let passed = passed && checks.iter().all(|c| c.passed);
    let rest = SyncMsg::ProbeWatched {
        writes,
        connects,
        checks,
        duration_us,
    };
    channel.send(&rest, &[]).is_ok() && passed && matches!(channel.recv(), Ok(SyncMsg::Start))
}

/// Between `--fetch`'s two commands: waits until netbox has closed the bridge's listeners,
/// then proves that nothing answers any more. Whether CMD may run.
fn cut_and_prove(input: &ProbeInput, channel: &Channel, proxy_v6: bool) -> Result<bool, String> {
    match channel.recv()? {
        SyncMsg::Cut => {}
        other => return Err(format!("expected the cut, got {other:?}")),
    }
    let (mut report, unreadable) = while_readable(|| probe::run_cut(input, proxy_v6));
    if let Some(check) = unreadable {
        report.add_check(check);
    }
    Ok(report_and_wait(channel, report))
}

/// Installs the denied-write (and direct-attempt) filter on pid 1 (and so on everything it
/// starts) and hands netbox its listener, with a sock_diag socket and the sandbox's root.
fn watch_writes(channel: &Channel) -> Result<Vec<std::os::fd::OwnedFd>, String> {
    if crate::testhooks::hooks().no_write_watch {
        return Ok(Vec::new());
    }
    // The sandbox's root, for netbox's judge, which would otherwise open it through
    // /proc/1/root (~20 µs more). Opened before the filter, which it must not wait for.
    let root = nix::fcntl::open(
        "/",
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    );
    // pid 1 is in the sandbox's network namespace: so is this socket, wherever it is used.
    let diag = crate::sys::sockdiag::open();
    // Something netbox's UDP lookups through `diag` must find (held until CMD starts).
    #[allow(clippy::disallowed_methods)] // An address and port: nothing is looked up (clippy.toml).
    let witness = std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0));
    let udp_witness = witness
        .as_ref()
        .ok()
        .and_then(|w| w.local_addr().ok())
        .map(|a| a.port());
    let listener = crate::sys::seccomp::install_with_listener(&crate::sys::seccomp::build())
        .map_err(|e| format!("install the seccomp filter: {e}"))?;
    let (diag, root) = (diag.ok(), root.ok());
    let message = SyncMsg::WriteWatch {
        listener: listener.as_raw_fd(),
        diag: diag.as_ref().map(AsRawFd::as_raw_fd),
        root: root.as_ref().map(AsRawFd::as_raw_fd),
        udp_witness,
    };
    channel.send(&message, &[])?;
    let witness = witness.ok().map(std::os::fd::OwnedFd::from);
    Ok([Some(listener), diag, root, witness]
        .into_iter()
        .flatten()
        .collect())
}

/// Runs a probe with pid 1 dumpable, so netbox (as an ordinary user, without
/// CAP_SYS_PTRACE) can read the paths of its writes from its memory, which is how the
/// denied-write log proves itself. Nothing but netbox's own code runs in the sandbox then:
/// CMD has not started (or, after --fetch, everything of CMD1's is gone). pid 1 is
/// non-dumpable again before any command starts; if that fails, none does: the failed
/// check is returned, for the report.
fn while_readable<T>(probe: impl FnOnce() -> T) -> (T, Option<probe::Check>) {
    let _ = nix::sys::prctl::set_dumpable(true);
    let done = probe();
    let unreadable = nix::sys::prctl::set_dumpable(false).err().map(|e| {
        probe::failed_check(
            "pid 1 unreachable from CMD",
            "stay dumpable (reachable through /proc/1 and ptrace)",
            e.to_string(),
        )
    });
    (done, unreadable)
}

/// Sends a probe report and, if it passed, waits for netbox's word to start: netbox adds
/// checks of its own (the denied-write log). Whether the command may start.
fn report_and_wait(channel: &Channel, report: probe::ProbeReport) -> bool {
    let passed = report.passed;
    channel.send(&SyncMsg::Probe(report), &[]).is_ok()
        && passed
        && matches!(channel.recv(), Ok(SyncMsg::Start))
}

/// The set-up step that enters the user namespace (its failure's hint is netbox's).
pub const USERNS_STEP: &str = "user namespace";

/// A failed step: which, why, and how to fix it when known.
type StepError = (String, String, Option<String>);

fn failed<E: std::fmt::Display>(step: &str) -> impl FnOnce(E) -> StepError + '_ {
    move |e| (step.to_owned(), e.to_string(), None)
}

/// The setup steps, in order. Each must succeed; there is no weaker fallback. Returns
/// what the network set-up leaves, and the probe's socket outside the sandbox's network
/// namespace.
// Whole: the steps in the order the kernel allows them (above), each refusing on failure.
fn set_up(
    plan: &ChildPlan,
    channel: &Channel,
) -> Result<(Network, Option<probe::ForeignSocket>), StepError> {
    // First, keep nothing of netbox's but this end of the channel (netbox's own end, the
    // event log, the host listener, whatever netbox's caller passed): then netbox's end is
    // open exactly as long as netbox lives.
    crate::sys::fd::close_from_3_except(channel.raw_fd()).map_err(failed("close fds"))?;
    // Die with netbox; and if it already died before that took effect, stop here.
    set_pdeathsig(Signal::SIGKILL).map_err(failed("set parent-death signal"))?;
    if channel.peer_closed() {
        return Err(("start".into(), "netbox exited during start-up".into(), None));
    }
    // netbox's fault handlers (std's stack-overflow report, on netbox's alternate signal
    // stack) are not pid 1's: a fault here ends pid 1 plainly.
    crate::sys::process::reset_fault_handlers().map_err(failed("reset fault handlers"))?;
    // Signals for CMD arrive through netbox, which forwards them; pid 1 reads them from a
    // signalfd, so they are blocked from the start.
    init::block_signals().map_err(failed("block signals"))?;
    // Out of the caller's process group: terminal signals reach netbox, which forwards
    // them once, instead of reaching CMD twice.
    nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)).map_err(failed("setpgid"))?;
    namespaces::map_ids(plan.uid, plan.gid)
        .and_then(|()| namespaces::unshare_rest())
        // The hint is netbox's to find (place.rs): here, in the new namespace, this
        // process holds every capability and sees no uid of its own.
        .map_err(|e| (USERNS_STEP.to_owned(), crate::error::chain(&e), None))?;
    // The sandbox's own name hides the host's, and guards nothing: a container's seccomp
    // profile that refuses sethostname (podman's default does) must not stop the run.
    let _ = nix::unistd::sethostname("netbox");
    // Not dumpable, so CMD cannot reach into pid 1 through /proc/1 or ptrace (same uid):
    // that would take CAP_SYS_PTRACE in the user namespace pid 1's memory belongs to,
    // netbox's (the host's), since pid 1 never execs. Both halves matter.
    nix::sys::prctl::set_dumpable(false).map_err(failed("set non-dumpable"))?;

    // Capabilities are still held here, which the mounts need. While they are held, /
    // could be remounted read-write: the drop follows as soon as both halves are done.
    // The filesystem is built on a second thread while this one makes the network
    // namespace: each takes ~0.5 ms here and neither needs the other (the mount namespace
    // is shared by both threads; the new network namespace is this thread's, and the
    // process's once the other thread has ended). Mounting needs nothing of the network:
    // no sysfs is mounted. pid 1 was made by a raw clone(), so glibc's cached thread id in
    // this thread is still netbox's: sound here because neither thread takes a lock that
    // records its owner's id (recursive or error-checking mutexes, dlopen, NSS).
    let mount = || {
        mounts::apply(&plan.mounts, || match channel.recv()? {
            SyncMsg::Trust { ca_pem } => Ok(ca_pem),
            other => Err(format!("netbox sent {other:?} before the session CA")),
        })
        .map_err(|e| (format!("mount: {}", e.step), e.source.to_string(), None))?;
        // Still in the namespace netbox ran in (the other thread makes the sandbox's): a
        // socket bound here is, to the sandbox, one of the host's, which the probe must
        // find refused once the filter is on (probe::unix_sockets_at_connect).
        Ok(probe::ForeignSocket::bind(&plan.probe.temp_dir))
    };
    crate::sys::memory::share_one_malloc_arena();
    let here = cpu::current();
    let started = std::sync::atomic::AtomicBool::new(false);
    let (mounted, network) = std::thread::scope(|scope| {
        let mounter = std::thread::Builder::new()
            .name("netbox-mounts".into())
            // Mounting goes a few calls deep; glibc keeps a thread's stack mapped after
            // it ends (pid 1's footprint counts against --memory).
            .stack_size(256 << 10)
            .spawn_scoped(scope, || {
                // New threads often queue on their creator's CPU, where this one would
                // wait for the network namespace (the kernel does not preempt it): move
                // off (cpu.rs).
                if let Some(cpu) = here {
                    cpu::move_off(cpu);
                }
                started.store(true, std::sync::atomic::Ordering::Release);
                mount()
            });
        if mounter.is_ok() {
            cpu::wait_until_moved(&started);
        }
        let network = set_up_network(channel, plan.capture.as_ref());
        let mounted = match mounter {
            Ok(mounter) => mounter.join().unwrap_or_else(|_| {
                Err(("mount".into(), "the mounting thread panicked".into(), None))
            }),
            // No second thread: one after the other.
            Err(_) => mount(),
        };
        (mounted, network)
    });
    // Single-threaded again as far as user space goes (the helper may take a few more
    // microseconds to leave the kernel): nothing that needs an empty thread group (seccomp's
    // TSYNC, unshare(CLONE_NEWUSER)) comes next.
    let network = network?;
    let foreign = mounted?;
    // After the mounts, before the probe and CMD: no capability, no way to regain one.
    if !crate::testhooks::hooks().skip_capability_drop {
        caps::drop_all().map_err(failed("drop capabilities"))?;
    }
    // io_uring's operations would bypass the denied-write log: refused, unless asked for.
    if plan.probe.io_uring_forbidden && !crate::testhooks::hooks().skip_io_uring_denial {
        let denial = crate::sys::seccomp::io_uring_denial();
        crate::sys::seccomp::install_plain(&denial).map_err(failed("refuse io_uring"))?;
    }
    Ok((network, foreign))
}

/// What the network set-up leaves pid 1: whether the proxy also listens on ::1, and with
/// capture, a netlink socket in capture's namespace (for the probe to read it through).
struct Network {
    proxy_v6: bool,
    capture: Option<crate::sys::rtnl::Rtnl>,
}

/// The network namespace with only `lo`, up, and the proxy's listeners in it, handed to
/// netbox. With `capture`, first capture's own namespace with its listeners
/// (sandbox/capture.rs), then CMD's, linked to it, with the DNS stub's sockets; all
/// handed to netbox too.
fn set_up_network(
    channel: &Channel,
    capture: Option<&crate::plan::capture::CapturePlan>,
) -> Result<Network, StepError> {
    let hint = || {
        Some(
            "run with --no-capture to go without capture (programs that ignore the proxy \
             settings then find no network)"
                .to_owned(),
        )
    };
    let far = capture
        .map(capture::make_far_side)
        .transpose()
        .map_err(|(step, detail)| (step, detail, hint()))?;
    namespaces::unshare_net().map_err(failed("enter a new network namespace"))?;
    crate::sys::netdev::bring_loopback_up().map_err(failed("bring lo up"))?;
    let dns = match &far {
        Some(far) => {
            let routes = !crate::testhooks::hooks().skip_capture_routes;
            capture::link(far, routes).map_err(|(step, detail)| (step, detail, hint()))?;
            let stub = SocketAddr::from((DNS_STUB, 53));
            #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up.
            let udp = std::net::UdpSocket::bind(stub);
            #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up.
            let tcp = TcpListener::bind(stub);
            let step = "listen for DNS on 127.0.0.53 (capture)";
            Some((
                udp.map_err(|e| (step.to_owned(), e.to_string(), hint()))?,
                tcp.map_err(|e| (step.to_owned(), e.to_string(), hint()))?,
            ))
        }
        None => None,
    };

    // The bridge's listeners live here, inside the new network namespace, and are handed
    // to netbox: CMD's connections reach the bridge directly, with no relay.
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let v4 = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)))
        .map_err(failed("listen on 127.0.0.1"))?;
    bridge::serve::listen::deepen_backlog(&v4).map_err(failed("listen on 127.0.0.1"))?;
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let v6 = TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, PROXY_PORT)))
        .ok()
        .filter(|v6| bridge::serve::listen::deepen_backlog(v6).is_ok());
    let mut fds = vec![v4.as_raw_fd()];
    fds.extend(v6.as_ref().map(AsRawFd::as_raw_fd));
    let proxies = fds.len();
    if let Some(far) = &far {
        fds.extend(far.listeners.iter().map(AsRawFd::as_raw_fd));
    }
    if let Some((udp, tcp)) = &dns {
        fds.extend([udp.as_raw_fd(), tcp.as_raw_fd()]);
    }
    let listeners = SyncMsg::Listeners {
        count: proxies,
        cpu: cpu::current(),
        capture_ports: capture.map(|c| c.ports.clone()).unwrap_or_default(),
    };
    channel
        .send(&listeners, &fds)
        .map_err(failed("hand over listeners"))?;
    // netbox, woken by the message, would otherwise wait until the probe blocks: let it
    // start the bridge now (cpu.rs; measured: ~0.1 ms sooner done).
    cpu::let_the_woken_run();
    let proxy_v6 = v6.is_some();
    drop((v4, v6, dns));
    Ok(Network {
        proxy_v6,
        capture: far.map(|far| far.rtnl),
    })
}

/// The setting that would let a failed set-up step through here, for its hint: a /proc of
/// the sandbox's own, or a call a container's seccomp profile refused (EPERM).
pub fn hint_for_setup(step: &str, detail: &str) -> Option<String> {
    if step == USERNS_STEP {
        return Some(crate::sandbox::namespaces::userns_hint());
    }
    let refused = detail.contains("Operation not permitted") || detail.contains("EPERM");
    if !refused {
        return None;
    }
    let place = crate::place::Place::detect();
    if step.contains("/proc") || detail.contains("mount /proc") {
        place.fix(crate::place::Need::OwnProc)
    } else {
        place.fix(crate::place::Need::Syscalls)
    }
}
