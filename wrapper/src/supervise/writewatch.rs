//! Denied writes, on record. The mounts refuse writes silently; the sandbox's pid 1
//! installs a seccomp filter that hands every write-intent syscall to a listener
//! (sys/seccomp.rs), and passes the listener to netbox. Here one thread answers each
//! notification: it has writejudge.rs tell whether the mounts will refuse the write,
//! then lets the syscall run (CONTINUE), so the kernel's own EROFS decides. A write the
//! mounts will refuse becomes a `write_denied` record and a one-line notice (both capped
//! per session); a write that will succeed is not logged.
//!
//! The verdict is only ever a log line: what was read from another process's memory can
//! change under us (seccomp_unotify(2)), so it never decides anything. pid 1's own probe
//! writes are kept apart and checked against what the probe expected, which proves the
//! whole chain (filter, listener, path reading, classification) before CMD runs.
//!
//! The same filter hands over the calls that send to an address; netwatch.rs judges
//! those, and they are recorded here as `direct_attempt`, with the same caps.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bridge::EventLog;

use crate::sandbox::probe::{Outcome, ProbeReport};
use crate::supervise::connector::{AfterConnect, Connector, Job, Op};
use crate::supervise::netwatch::{self, Attempt, NetContext};
use crate::supervise::sender;
use crate::supervise::unixsockets::{self, Decision, UnixContext, Whose};
use crate::supervise::writejudge::{judge, Verdict};
use crate::sys::notified;
use crate::sys::seccomp::{self, Notification};

/// Refused writes logged one by one per session; past this they are only counted (a
/// command refused in a loop must not fill the host's disk), and the count is logged at
/// the end as a `write_denied_suppressed` record.
const MAX_RECORDS: u64 = 10_000;

/// Longest path (and executable) a `write_denied` record carries: a path can be 4 KiB,
/// and 10,000 records of two of those would be 80 MB of log.
const MAX_PATH_IN_RECORD: usize = 1024;

/// Paths announced on stderr per session; past this, one line says the rest go only to
/// the log.
const MAX_NOTICES: usize = 1_000;

/// Longest socket address a connect takes (sizeof(struct sockaddr_storage)).
const SOCKADDR_MAX: usize = 128;

/// What the watcher knows of the run.
pub struct WatchContext {
    pub log: Arc<EventLog>,
    /// The bridge's session: its id, and the names its DNS stub handed addresses out for.
    pub session: Arc<bridge::Session>,
    /// Where capture listens, when the run captures.
    pub capture: Option<crate::plan::capture::CapturePlan>,
    /// Set at `--fetch`'s cut, once the bridge's listeners are closed.
    pub cut: Arc<std::sync::atomic::AtomicBool>,
    /// Host pid of the sandbox's pid 1, whose writes are the probe's.
    pub pid1: u32,
    pub protected: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    /// Whether to announce each denial on stderr (once per path).
    pub notices: bool,
    /// With `--cpus`: the `tasks` file of the sandbox's cpu cgroup, which the watcher's
    /// thread joins, so that the work CMD makes it do (each notified call is judged) is
    /// taken from CMD's own CPU quota instead of escaping it.
    pub cpu_cgroup_tasks: Option<PathBuf>,
    /// Whether every process in the sandbox shares pid 1's root, so it is opened once:
    /// without capabilities and without nested user namespaces none can chroot,
    /// pivot_root or unshare a mount namespace. Otherwise each caller's own is opened.
    pub share_root: bool,
    /// Host Unix sockets CMD may connect to (unixsockets.rs).
    pub allowed_sockets: Vec<crate::plan::sockets::AllowedSocket>,
}

/// What the watcher has seen so far.
#[derive(Default)]
struct Seen {
    /// pid 1's writes: path as the sandbox names it, and whether it was judged denied.
    probe: Mutex<Vec<(PathBuf, bool)>>,
    /// pid 1's connections: where to, and whether each was judged a direct attempt.
    probe_connects: Mutex<Vec<(SocketAddr, bool)>>,
    /// pid 1's connects to Unix socket paths: the path, and what netbox decided.
    probe_unix: Mutex<Vec<(PathBuf, ProbeUnix)>>,
    /// With `--cpus`, how joining the sandbox's cpu cgroup went.
    cpu_cgroup: Mutex<Option<Result<(), String>>>,
    denied: AtomicU64,
    announced: Mutex<Notices>,
    direct: AtomicU64,
    /// Destinations announced on stderr so far.
    announced_direct: Mutex<std::collections::HashSet<(netwatch::Protocol, SocketAddr)>>,
    /// Host Unix sockets announced on stderr so far.
    announced_local: Mutex<std::collections::HashSet<PathBuf>>,
}

/// What netbox decided for one of pid 1's connects to a Unix socket path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProbeUnix {
    Own,
    Allowed,
    /// Refused as a host socket.
    Host,
    /// Refused otherwise (nothing there, ...).
    Other,
}

/// The paths announced on stderr so far, and whether the cap was reached.
#[derive(Default)]
struct Notices {
    paths: std::collections::HashSet<PathBuf>,
    capped: bool,
}

/// What the sandbox hands the watcher: its seccomp listener, its root (O_PATH) if pid 1
/// sent it, and a sock_diag socket made in its network namespace if pid 1 could make one.
pub struct Attached {
    pub listener: OwnedFd,
    pub root: Option<OwnedFd>,
    pub diag: Option<OwnedFd>,
    /// The port of a UDP socket pid 1 holds on 127.0.0.1, to check `diag` against.
    pub udp_witness: Option<u16>,
}

/// The watcher thread and what it has seen.
pub struct WriteWatch {
    seen: Arc<Seen>,
    /// The sockets `--allow-socket` names, as CMD names them: the probe connects to each.
    allowed_sockets: Vec<PathBuf>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Hands the thread the sandbox's listener (and what it judges with); dropped once
    /// used (or at the end).
    listener: Option<std::sync::mpsc::SyncSender<Attached>>,
    /// Closed to tell the thread that nothing the filter could stop is left.
    stop: Option<std::io::PipeWriter>,
}

impl WriteWatch {
    /// Starts the watcher's thread, which waits for the sandbox's listener
    /// ([`WriteWatch::attach`]): started while the sandbox sets up, it is ready when the
    /// probe's first write waits for it.
    pub fn spawn(context: WatchContext) -> std::io::Result<WriteWatch> {
        let seen = Arc::new(Seen::default());
        let allowed_sockets = context
            .allowed_sockets
            .iter()
            .map(|a| a.named.clone())
            .collect();
        let (give, take) = std::sync::mpsc::sync_channel::<Attached>(1);
        let (stopped, stop) = std::io::pipe()?;
        let (joined, join_result) = std::sync::mpsc::sync_channel::<()>(1);
        let joins = context.cpu_cgroup_tasks.is_some();
        let thread = {
            let seen = Arc::clone(&seen);
            std::thread::Builder::new()
                .name("netbox-writewatch".into())
                .spawn(move || {
                    if let Some(tasks) = &context.cpu_cgroup_tasks {
                        // cgroup v1 moves a single thread by its id.
                        let result = std::fs::write(tasks, nix::unistd::gettid().to_string())
                            .map_err(|e| format!("{}: {e}", tasks.display()));
                        *seen.cpu_cgroup.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                        let _ = joined.send(());
                    }
                    let Ok(Attached {
                        listener,
                        root,
                        diag,
                        udp_witness,
                    }) = take.recv()
                    else {
                        return;
                    };
                    let net = NetContext::new(
                        context.capture.clone(),
                        diag,
                        udp_witness,
                        Arc::clone(&context.cut),
                    );
                    seccomp::prefer_sync_wakeup(listener.as_fd());
                    // The sandbox's root as pid 1 sent it, else opened now: pid 1 sends
                    // its listener after its mounts, so this is the sandbox's root, not
                    // the host's it started from.
                    let shared_root = context
                        .share_root
                        .then(|| {
                            root.or_else(|| crate::supervise::writejudge::open_root(context.pid1))
                        })
                        .flatten();
                    let unix_diag = net
                        .diag
                        .as_ref()
                        .map(AsFd::as_fd)
                        .filter(|diag| crate::supervise::unixsockets::diag_answers(*diag));
                    if unix_diag.is_none() && context.notices {
                        crate::output::say(
                            "netbox: warning: this kernel does not list the sandbox's Unix \
                             sockets (sock_diag's unix_diag), so connections to socket files \
                             are refused, the sandbox's own included",
                        );
                    }
                    let unix = crate::supervise::unixsockets::UnixContext {
                        root: shared_root.as_ref(),
                        diag: unix_diag,
                        allowed: &context.allowed_sockets,
                        started: std::time::SystemTime::now(),
                    };
                    let Ok(connector) = Connector::new(&listener) else {
                        return;
                    };
                    let watch = Watch {
                        context: &context,
                        net: &net,
                        unix: &unix,
                        connector: &connector,
                        seen: &seen,
                    };
                    serve(&listener, &stopped, &watch, shared_root.as_ref());
                })?
        };
        if joins {
            // Known before the probe's report is checked against it.
            let _ = join_result.recv();
        }
        Ok(WriteWatch {
            seen,
            allowed_sockets,
            thread: Some(thread),
            listener: Some(give),
            stop: Some(stop),
        })
    }

    /// Hands the thread the sandbox's listener and the rest; false if the thread already
    /// has a listener or is gone.
    pub fn attach(&mut self, attached: Attached) -> bool {
        self.listener
            .take()
            .is_some_and(|give| give.send(attached).is_ok())
    }

    /// Whether the thread has the sandbox's listener.
    pub fn attached(&self) -> bool {
        self.listener.is_none()
    }

    /// Denied writes recorded so far.
    pub fn denied(&self) -> u64 {
        self.seen.denied.load(Ordering::Relaxed)
    }

    /// Direct attempts seen so far.
    pub fn direct_attempts(&self) -> u64 {
        self.seen.direct.load(Ordering::Relaxed)
    }

    /// Checks the probe's writes against what the watcher saw of them and adds the result
    /// to the report as the "denied writes logged" check. The probe's writes are then
    /// forgotten, so the next probe (after --fetch's cut) is checked on its own.
    pub fn check_probe(&self, report: &mut ProbeReport) {
        let seen = take_all(&self.seen.probe);
        // Judged against what the mounts did, not what they should have done: that is
        // the other checks' business.
        let watched = std::mem::take(&mut report.watched_writes)
            .into_iter()
            .map(|write| {
                let path = write.path.display();
                let attempt = if write.refused {
                    format!("leave the refused write to {path} unlogged")
                } else {
                    format!("see the write to {path} and not log it")
                };
                (attempt, write.refused, judged_as(&seen, &write.path))
            });
        let (mut forbidden, control) = watched_outcomes(watched, "logged as denied");
        if let Some(joined) = &*self
            .seen
            .cpu_cgroup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            forbidden.push(Outcome {
                attempt: "judge CMD's writes outside its --cpus quota (the watcher not in \
                          the sandbox's cpu cgroup)"
                    .into(),
                ok: joined.is_ok(),
                result: match joined {
                    Ok(()) => "in the sandbox's cpu cgroup".into(),
                    Err(e) => e.clone(),
                },
            });
        }
        // With no refused write to look for (none was tried), nothing is proven.
        report.add_check(crate::sandbox::probe::check(
            crate::sandbox::probe::WRITE_LOG_CHECK,
            forbidden,
            control,
        ));
        self.check_probe_connects(report);
    }

    /// The same for the probe's connections, as the "direct attempts logged" check: the
    /// one to nothing judged a direct attempt, the one to the proxy not.
    fn check_probe_connects(&self, report: &mut ProbeReport) {
        let connects = std::mem::take(&mut report.watched_connects);
        if connects.is_empty() {
            // Not tried (a build that leaves the filter out): nothing to check.
            return;
        }
        let seen = take_all(&self.seen.probe_connects);
        let watched = connects.into_iter().map(|connect| {
            let attempt = if connect.direct {
                format!(
                    "leave the connection to {}, where nothing listens, unlogged",
                    connect.to
                )
            } else {
                format!(
                    "see the connection to the proxy at {} and not log it",
                    connect.to
                )
            };
            (attempt, connect.direct, judged_as(&seen, &connect.to))
        });
        let (forbidden, control) = watched_outcomes(watched, "logged as a direct attempt");
        report.add_check(crate::sandbox::probe::check(
            crate::sandbox::probe::DIRECT_LOG_CHECK,
            forbidden,
            control,
        ));
        self.check_allowed_sockets(report);
    }

    /// With `--allow-socket`, the "allowed sockets" check, from what netbox decided for
    /// pid 1's connects: the socket bound outside the sandbox's network namespace refused
    /// as a host socket, and each allowed one let through (whatever the host's service
    /// then answered: it may not be running).
    fn check_allowed_sockets(&self, report: &mut ProbeReport) {
        let decided = take_all(&self.seen.probe_unix);
        if self.allowed_sockets.is_empty() {
            return;
        }
        let describe = |verdict: Option<ProbeUnix>| match verdict {
            Some(ProbeUnix::Own) => "taken for the sandbox's own",
            Some(ProbeUnix::Allowed) => "let through",
            Some(ProbeUnix::Host) => "refused as a host socket",
            Some(ProbeUnix::Other) => "refused",
            None => "not seen by netbox",
        };
        let host = decided
            .iter()
            .find(|(_, v)| *v == ProbeUnix::Host)
            .map(|(_, v)| *v);
        let forbidden = vec![crate::sandbox::probe::Outcome {
            attempt: "connect to a socket listening outside the sandbox's network namespace".into(),
            ok: host == Some(ProbeUnix::Host),
            result: describe(host).into(),
        }];
        let control = self
            .allowed_sockets
            .iter()
            .map(|path| {
                let verdict = decided.iter().find(|(p, _)| p == path).map(|(_, v)| *v);
                crate::sandbox::probe::Outcome {
                    attempt: format!("connect to the allowed socket {}", path.display()),
                    ok: verdict == Some(ProbeUnix::Allowed),
                    result: describe(verdict).into(),
                }
            })
            .collect();
        report.add_check(crate::sandbox::probe::check(
            "allowed sockets",
            forbidden,
            control,
        ));
    }

    /// Tells the thread that every process the filter could stop is gone (pid 1 said so,
    /// or has been reaped): it handles what is queued and ends. Without this it ends only
    /// once the filter has no user left, which kernels before 6.11 see only when pid 1 is
    /// reaped.
    pub fn stop(&mut self) {
        self.stop.take();
    }

    /// Stops the thread and waits for it. Logs how many refused writes and direct attempts
    /// were only counted, if any were; returns how many of each there were. Called once
    /// no process the filter could stop is left.
    pub fn finish(mut self, log: &EventLog, session: &str) -> (u64, u64) {
        // Never attached: the thread is waiting for a listener that will not come.
        self.listener.take();
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let denied = self.denied();
        if denied > MAX_RECORDS {
            log.record_as(
                "write_denied_suppressed",
                session,
                &bridge::log::records::Suppressed {
                    count: denied - MAX_RECORDS,
                },
            );
        }
        let direct = self.direct_attempts();
        if direct > MAX_RECORDS {
            log.record_as(
                "direct_attempt_suppressed",
                session,
                &bridge::log::records::Suppressed {
                    count: direct - MAX_RECORDS,
                },
            );
        }
        (denied, direct)
    }
}

/// Everything a list of the probe's holds, taken (so the next probe starts empty).
fn take_all<T>(list: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *list.lock().unwrap_or_else(|e| e.into_inner()))
}

/// How the watcher judged one of the probe's attempts: `Some(true)` logged, `Some(false)`
/// seen and let be, `None` never seen.
fn judged_as<K: PartialEq>(seen: &[(K, bool)], attempt: &K) -> Option<bool> {
    seen.iter()
        .find(|(k, _)| k == attempt)
        .map(|(_, logged)| *logged)
}

/// The probe's watched attempts as outcomes: (what was tried, whether it must be logged,
/// how it was judged). One that must be logged is forbidden to go unlogged; one that must
/// not is the control.
fn watched_outcomes(
    watched: impl IntoIterator<Item = (String, bool, Option<bool>)>,
    logged_as: &str,
) -> (Vec<Outcome>, Vec<Outcome>) {
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    for (attempt, must_be_logged, judged) in watched {
        let result = match judged {
            Some(true) => logged_as,
            Some(false) => "not logged",
            None => "never seen",
        };
        let outcome = Outcome {
            attempt,
            ok: judged == Some(must_be_logged),
            result: result.into(),
        };
        if must_be_logged {
            forbidden.push(outcome);
        } else {
            control.push(outcome);
        }
    }
    (forbidden, control)
}

/// What the watcher's thread answers with.
struct Watch<'a> {
    context: &'a WatchContext,
    net: &'a NetContext,
    unix: &'a UnixContext<'a>,
    connector: &'a Connector,
    seen: &'a Seen,
}

fn serve(listener: &OwnedFd, stop: &std::io::PipeReader, watch: &Watch, root: Option<&OwnedFd>) {
    let (context, seen) = (watch.context, watch.seen);
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
            Ok(_) => {}
        }
        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
        if !revents.contains(PollFlags::POLLIN) {
            // POLLHUP: no process is left that the filter could stop. Or netbox said so
            // (its end of the stop pipe closed), and nothing is queued any more.
            return;
        }
        match seccomp::receive(listener.as_fd()) {
            Ok(notification) if notification.nr == libc::SYS_connect => {
                handle_connect(listener, watch, &notification);
            }
            Ok(notification) if netwatch::is_net_syscall(notification.nr) => {
                handle_send(listener, watch, &notification);
            }
            Ok(notification) => handle(listener, context, root, seen, &notification),
            // The caller died (ENOENT) or a signal interrupted us: go on.
            Err(_) => continue,
        }
    }
}

fn handle(
    listener: &OwnedFd,
    context: &WatchContext,
    root: Option<&OwnedFd>,
    seen: &Seen,
    n: &Notification,
) {
    // A test build can answer without looking, so the probe's check must fail.
    let verdicts = if crate::testhooks::hooks().blind_write_watch {
        Vec::new()
    } else {
        judge(n, root)
    };
    // pid 1's writes are the probe's: noted before the caller goes on, so its report
    // (sent after its last write returns) finds every one noted.
    if n.pid == context.pid1 {
        if let Ok(mut probe) = seen.probe.lock() {
            probe.extend(verdicts.iter().map(|v| (v.path.clone(), v.denied)));
        }
        let _ = seccomp::let_it_run(listener.as_fd(), n.id);
        return;
    }
    if !verdicts.iter().any(|v| v.denied) {
        let _ = seccomp::let_it_run(listener.as_fd(), n.id);
        return;
    }
    let Some(executable) = callers_executable_then_let_run(listener, n) else {
        return;
    };
    for verdict in verdicts.iter().filter(|v| v.denied) {
        record(context, seen, n, verdict, &executable);
    }
}

/// The caller's executable, read while it still waits (once let go, a short-lived one is
/// gone); then the syscall is let run. `None` if the caller died meanwhile: what was read
/// may then be another process's (its pid reused), and nothing is recorded.
fn callers_executable_then_let_run(listener: &OwnedFd, n: &Notification) -> Option<String> {
    let executable = std::fs::read_link(format!("/proc/{}/exe", n.pid))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let valid = seccomp::still_valid(listener.as_fd(), n.id);
    let _ = seccomp::let_it_run(listener.as_fd(), n.id);
    valid.then_some(executable)
}

/// A connect: answered by netbox, never let run (a call let run could be pointed
/// elsewhere after netbox looked: its address rewritten by another thread, a symlink on
/// its path swapped, its fd replaced). The address is read once; a Unix socket's path is
/// decided (unixsockets.rs); the connect is made on a copy of the caller's socket
/// (connector.rs), to what was decided, and its result is the caller's.
fn handle_connect(listener: &OwnedFd, watch: &Watch, n: &Notification) {
    if crate::testhooks::hooks().let_connects_run {
        let _ = seccomp::let_it_run(listener.as_fd(), n.id);
        return;
    }
    let answer = |result: Result<i64, i32>| {
        let _ = seccomp::answer(listener.as_fd(), n.id, result);
    };
    // connect's length is an int: negative or past sockaddr_storage is EINVAL.
    let len = crate::supervise::writejudge::int_arg(n.args[2]);
    let Ok(len) = usize::try_from(len) else {
        return answer(Err(libc::EINVAL));
    };
    if len > SOCKADDR_MAX {
        return answer(Err(libc::EINVAL));
    }
    let address = if len == 0 {
        Vec::new()
    } else {
        match seccomp::read_memory(n.pid, n.args[1], len) {
            Ok(address) => address,
            Err(_) => return answer(Err(libc::EFAULT)),
        }
    };
    if let Some(vsock) = vsock_of(&address) {
        record_vsock(listener, watch, n, vsock);
        return answer(Err(libc::ENETUNREACH));
    }
    let socket = match netwatch::copy_socket_or_errno(n) {
        Ok(socket) => socket,
        Err(_) if n.pid == watch.context.pid1 => return let_pid1_run(listener, n),
        Err(errno) => return answer(Err(errno)),
    };
    if let Some(path) = unixsockets::path_of(&address) {
        return connect_unix(listener, watch, n, socket, path);
    }
    // An internet address: judged for the log as before, then connected as asked.
    log_direct_attempts(
        listener,
        watch,
        n,
        netwatch::judge_connect(n, &address, &socket, watch.net),
        false,
    );
    submit(
        watch,
        n,
        Job {
            id: n.id,
            socket,
            op: Op::Connect(address),
            hold: Vec::new(),
            after: None,
        },
    );
}

/// The Unix address by which netbox reaches a socket file it holds (`/proc/self/fd/N`):
/// the file decided on, whatever its path names by the time the call is made.
fn address_of_held(file: &OwnedFd) -> Option<Vec<u8>> {
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file));
    crate::sys::socket::unix_address(path.as_bytes())
}

/// A connect to a Unix socket's path: decided, then made to the file decided on.
fn connect_unix(listener: &OwnedFd, watch: &Watch, n: &Notification, socket: OwnedFd, path: &[u8]) {
    let answer = |result: Result<i64, i32>| {
        let _ = seccomp::answer(listener.as_fd(), n.id, result);
    };
    let Some(named) = unixsockets::as_named(n.pid, path) else {
        return answer(Err(libc::ENOENT));
    };
    let decision = unixsockets::decide(n.pid, &named, watch.unix);
    if n.pid == watch.context.pid1 {
        let verdict = match &decision {
            Decision::Connect {
                whose: Whose::Own, ..
            } => ProbeUnix::Own,
            Decision::Connect { .. } => ProbeUnix::Allowed,
            Decision::Refuse { host: true, .. } => ProbeUnix::Host,
            Decision::Refuse { .. } => ProbeUnix::Other,
        };
        if let Ok(mut probe) = watch.seen.probe_unix.lock() {
            probe.push((named.clone(), verdict));
        }
    }
    match decision {
        Decision::Connect { file, whose } => {
            let Some(address) = address_of_held(&file) else {
                return answer(Err(libc::ENAMETOOLONG));
            };
            let after: Option<AfterConnect> = match whose {
                // pid 1's are the probe's own, not CMD's use.
                Whose::Own => None,
                Whose::Allowed(_) if n.pid == watch.context.pid1 => None,
                Whose::Allowed(index) => Some(allowed_use(watch, n, index, "connected")),
            };
            submit(
                watch,
                n,
                Job {
                    id: n.id,
                    socket,
                    op: Op::Connect(address),
                    hold: vec![file],
                    after,
                },
            );
        }
        Decision::Refuse { errno, host } => {
            if host {
                record_refused_unix(listener, watch, n, &named);
            }
            answer(Err(errno));
        }
    }
}

/// A send that names an address (or may: sendmsg's and sendmmsg's names are behind a
/// pointer): answered by netbox, never let run (sender.rs says why). Its messages are
/// read once; a Unix socket's path is decided like a connect's, and one that is not the
/// sandbox's own (nor allowed) is refused; internet addresses are judged for the log; then
/// netbox sends the messages on a copy of the caller's socket.
fn handle_send(listener: &OwnedFd, watch: &Watch, n: &Notification) {
    let answer = |result: Result<i64, i32>| {
        let _ = seccomp::answer(listener.as_fd(), n.id, result);
    };
    let socket = match netwatch::copy_socket_or_errno(n) {
        Ok(socket) => socket,
        Err(_) if n.pid == watch.context.pid1 => return let_pid1_run(listener, n),
        Err(errno) => return answer(Err(errno)),
    };
    let mut send = match sender::read(n) {
        Ok(send) => send,
        Err(errno) => return answer(Err(errno)),
    };
    let mut hold: Vec<OwnedFd> = Vec::new();
    let mut after: Option<AfterConnect> = None;
    for (index, message) in send.messages.iter_mut().enumerate() {
        if let Some(vsock) = vsock_of(&message.name) {
            record_vsock(listener, watch, n, vsock);
            if index == 0 {
                return answer(Err(libc::ENETUNREACH));
            }
            send.messages.truncate(index);
            break;
        }
        let Some(path) = unixsockets::path_of(&message.name).map(<[u8]>::to_vec) else {
            continue;
        };
        let decided = match unixsockets::as_named(n.pid, &path) {
            Some(named) => Ok((unixsockets::decide(n.pid, &named, watch.unix), named)),
            None => Err(libc::ENOENT),
        };
        let errno = match decided {
            Ok((Decision::Connect { file, whose }, _)) => {
                match address_of_held(&file) {
                    Some(name) => {
                        message.name = name;
                        hold.push(file);
                        // A datagram to an allowed socket is a use of it, logged like a
                        // connect (once per call, with the call's result).
                        if let Whose::Allowed(index) = whose {
                            if after.is_none() && n.pid != watch.context.pid1 {
                                after = Some(allowed_use(watch, n, index, "sent"));
                            }
                        }
                        continue;
                    }
                    None => libc::ENAMETOOLONG,
                }
            }
            Ok((Decision::Refuse { errno, host }, named)) => {
                if host {
                    record_refused_unix(listener, watch, n, &named);
                }
                errno
            }
            Err(errno) => errno,
        };
        // The messages before it are sent (sendmmsg); the first one refused is the
        // call's error.
        if index == 0 {
            return answer(Err(errno));
        }
        send.messages.truncate(index);
        break;
    }
    let names: Vec<Vec<u8>> = send.messages.iter().map(|m| m.name.clone()).collect();
    log_direct_attempts(
        listener,
        watch,
        n,
        netwatch::judge_send(n, &names, &socket, watch.net),
        false,
    );
    submit(
        watch,
        n,
        Job {
            id: n.id,
            socket,
            op: Op::Send(send),
            hold,
            after,
        },
    );
}

/// Hands a call to the connector: pid 1's on a thread of its own (connector.rs).
fn submit(watch: &Watch, n: &Notification, job: Job) {
    if n.pid == watch.context.pid1 {
        watch.connector.submit_own(job);
    } else {
        watch.connector.submit(job);
    }
}

/// pid 1's own call, which netbox cannot copy from once pid 1 is no longer dumpable
/// (after the probe: handing netbox CMD's terminal): netbox's own code, in memory CMD
/// cannot reach, so the kernel may run it as asked. During the probe pid 1 is dumpable,
/// and its calls are made by netbox like CMD's, which is what the probe proves.
fn let_pid1_run(listener: &OwnedFd, n: &Notification) {
    let _ = seccomp::let_it_run(listener.as_fd(), n.id);
}

/// Records a refused host Unix socket, with the caller's executable read while it still
/// waits (and nothing if it died meanwhile: the pid may be another's); pid 1's are the
/// probe's own and not recorded.
fn record_refused_unix(
    listener: &OwnedFd,
    watch: &Watch,
    n: &Notification,
    named: &std::path::Path,
) {
    if n.pid == watch.context.pid1 {
        return;
    }
    let executable = executable_of(n.pid);
    if seccomp::still_valid(listener.as_fd(), n.id) {
        record_unix(watch, n, named, &executable);
    }
}

/// The caller's executable, for a record.
fn executable_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Records what a call would send past netbox's listeners; with `let_run`, lets the call
/// run once the caller's executable is read.
fn log_direct_attempts(
    listener: &OwnedFd,
    watch: &Watch,
    n: &Notification,
    attempts: Vec<Attempt>,
    let_run: bool,
) {
    let (context, seen) = (watch.context, watch.seen);
    // A test build can answer without looking, so the probe's check must fail.
    let attempts = if crate::testhooks::hooks().blind_net_watch {
        Vec::new()
    } else {
        attempts
    };
    let let_it_run = || {
        if let_run {
            let _ = seccomp::let_it_run(listener.as_fd(), n.id);
        }
    };
    if n.pid == context.pid1 {
        if let Ok(mut probe) = seen.probe_connects.lock() {
            probe.extend(attempts.iter().map(|a| (a.to, a.direct.is_some())));
        }
        return let_it_run();
    }
    if !attempts.iter().any(|a| a.direct.is_some()) {
        return let_it_run();
    }
    let executable = executable_of(n.pid);
    let valid = seccomp::still_valid(listener.as_fd(), n.id);
    let_it_run();
    if !valid {
        return;
    }
    for attempt in &attempts {
        if let Some(reason) = attempt.direct {
            record_direct(watch, n, attempt, reason, &executable);
        }
    }
}

/// The record of a use of allowed socket `index` (a connect, or a datagram sent), written
/// once the call has returned.
fn allowed_use(watch: &Watch, n: &Notification, index: usize, done: &'static str) -> AfterConnect {
    let record = AllowedUse {
        done,
        log: Arc::clone(&watch.context.log),
        session: watch.context.session.id.to_string(),
        pid: n.pid,
        executable: executable_of(n.pid),
        path: watch.unix.allowed[index].named.display().to_string(),
    };
    Box::new(move |result| record.write(result))
}

/// A connect to an allowed host socket, for the log.
struct AllowedUse {
    /// What the call did when it succeeded: `connected`, `sent`.
    done: &'static str,
    log: Arc<EventLog>,
    session: String,
    pid: u32,
    executable: String,
    path: String,
}

impl AllowedUse {
    fn write(self, result: Result<(), i32>) {
        self.log.record_as(
            "socket_allowed",
            &self.session,
            &bridge::log::records::SocketAllowed {
                pid: self.pid,
                executable: bridge::text::bounded(self.executable, MAX_PATH_IN_RECORD),
                path: bridge::text::bounded(self.path, MAX_PATH_IN_RECORD),
                result: match result {
                    Ok(()) => self.done.to_owned(),
                    Err(errno) => std::io::Error::from_raw_os_error(errno).to_string(),
                },
            },
        );
    }
}

/// A connect or datagram to a host Unix socket, refused: a `direct_attempt` record with
/// protocol `unix`, and a notice once per path.
fn record_unix(watch: &Watch, n: &Notification, named: &std::path::Path, executable: &str) {
    let path = named.display().to_string();
    let program = program_of(executable);
    record_refused_local(
        watch,
        n,
        executable,
        Refused {
            protocol: "unix",
            address: path.clone(),
            port: 0,
            reason: UNIX_REASON,
            key: named.to_owned(),
            notice: format!(
                "netbox: refused a connection to the host socket {} by {} (not the \
                 sandbox's own; --allow-socket PATH lets one through)",
                crate::printable::printable(&path),
                crate::printable::printable(&program),
            ),
        },
    );
}

/// A connect or datagram to a vsock address, refused: a `direct_attempt` record with
/// protocol `vsock`, and a notice once per context id.
fn record_vsock(listener: &OwnedFd, watch: &Watch, n: &Notification, (cid, port): (u32, u32)) {
    let executable = executable_of(n.pid);
    if !seccomp::still_valid(listener.as_fd(), n.id) {
        return;
    }
    let program = program_of(&executable);
    record_refused_local(
        watch,
        n,
        &executable,
        Refused {
            protocol: "vsock",
            address: format!("cid {cid}"),
            port: u16::try_from(port).unwrap_or(u16::MAX),
            reason: VSOCK_REASON,
            key: PathBuf::from(format!("vsock:{cid}")),
            notice: format!(
                "netbox: refused a vsock connection to context {cid} by {} (vsock reaches \
                 the hypervisor past any network namespace)",
                crate::printable::printable(&program),
            ),
        },
    );
}

/// A refused attempt that never reaches the network namespace's interfaces.
struct Refused {
    protocol: &'static str,
    address: String,
    port: u16,
    reason: &'static str,
    /// What a notice is announced once for.
    key: PathBuf,
    notice: String,
}

fn record_refused_local(watch: &Watch, n: &Notification, executable: &str, refused: Refused) {
    let (context, seen) = (watch.context, watch.seen);
    let count = seen.direct.fetch_add(1, Ordering::Relaxed) + 1;
    if count > MAX_RECORDS {
        return;
    }
    context.log.record_as(
        "direct_attempt",
        &context.session.id,
        &bridge::log::records::DirectAttempt {
            pid: n.pid,
            executable: bridge::text::bounded(executable.to_owned(), MAX_PATH_IN_RECORD),
            syscall: notified::name(n.nr).to_owned(),
            protocol: refused.protocol.to_owned(),
            address: bridge::text::bounded(refused.address, MAX_PATH_IN_RECORD),
            port: refused.port,
            name: None,
            reason: refused.reason.to_owned(),
        },
    );
    if !context.notices {
        return;
    }
    let Ok(mut announced) = seen.announced_local.lock() else {
        return;
    };
    if announced.len() < MAX_NOTICES {
        if announced.insert(refused.key) {
            crate::output::say(&refused.notice);
        }
    } else if !announced.contains(&refused.key) && announced.len() == MAX_NOTICES {
        announced.insert(refused.key);
        crate::output::say(
            "netbox: more host sockets were refused; they are not announced, only logged",
        );
    }
}

/// An executable's file name, for a notice.
fn program_of(executable: &str) -> String {
    std::path::Path::new(executable)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A vsock address (`struct sockaddr_vm`: family, reserved, port, context id): the
/// context id and port it names, if it is one. vsock reaches the hypervisor and other
/// guests of the machine, and no network namespace confines it, so every connect and
/// send to one is refused.
fn vsock_of(address: &[u8]) -> Option<(u32, u32)> {
    let family = i32::from(u16::from_ne_bytes(address.get(0..2)?.try_into().ok()?));
    if family != libc::AF_VSOCK {
        return None;
    }
    let word = |at: usize| {
        address
            .get(at..at + 4)
            .and_then(|w| w.try_into().ok())
            .map_or(0, u32::from_ne_bytes)
    };
    Some((word(8), word(4)))
}

/// A refused vsock attempt's `reason`.
const VSOCK_REASON: &str = "vsock";

/// A refused Unix socket's `reason`.
const UNIX_REASON: &str = "host socket";

fn record_direct(
    watch: &Watch,
    n: &Notification,
    attempt: &Attempt,
    reason: netwatch::Reason,
    executable: &str,
) {
    let (context, seen) = (watch.context, watch.seen);
    let count = seen.direct.fetch_add(1, Ordering::Relaxed) + 1;
    if count > MAX_RECORDS {
        return;
    }
    let ip = bridge::target::canonical_ip(attempt.to.ip());
    let name = context.session.addresses.name_for(ip);
    context.log.record_as(
        "direct_attempt",
        &context.session.id,
        &bridge::log::records::DirectAttempt {
            pid: n.pid,
            executable: bridge::text::bounded(executable.to_owned(), MAX_PATH_IN_RECORD),
            syscall: notified::name(n.nr).to_owned(),
            protocol: attempt.protocol.name().to_owned(),
            address: ip.to_string(),
            port: attempt.to.port(),
            name: name.clone(),
            reason: reason.text().to_owned(),
        },
    );
    if !context.notices {
        return;
    }
    let Ok(mut announced) = seen.announced_direct.lock() else {
        return;
    };
    let key = (attempt.protocol, SocketAddr::new(ip, attempt.to.port()));
    if announced.len() < MAX_NOTICES {
        if announced.insert(key) {
            let to = match &name {
                Some(name) => format!("{name} ({})", key.1),
                None => key.1.to_string(),
            };
            let program = std::path::Path::new(executable)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            crate::output::say(&format!(
                "netbox: blocked direct {} to {} by {} ({})",
                attempt.protocol.name(),
                crate::printable::printable(&to),
                crate::printable::printable(&program),
                reason.explained(),
            ));
        }
    } else if !announced.contains(&key) && announced.len() == MAX_NOTICES {
        // One line for the rest, once: the set grows past the cap by this one entry.
        announced.insert(key);
        crate::output::say(
            "netbox: more direct attempts were blocked; they are not announced, only logged",
        );
    }
}

fn record(
    context: &WatchContext,
    seen: &Seen,
    n: &Notification,
    verdict: &Verdict,
    executable: &str,
) {
    let count = seen.denied.fetch_add(1, Ordering::Relaxed) + 1;
    // Where the write would land, symlinks resolved, says why it is refused.
    let landing = verdict.resolved.as_ref().unwrap_or(&verdict.path);
    let reason = if context.protected.iter().any(|p| landing.starts_with(p)) {
        "protected path"
    } else if context.read_only.iter().any(|p| landing.starts_with(p)) {
        "read-only path"
    } else if verdict.busy {
        "mount point"
    } else {
        "read-only root"
    };
    if count > MAX_RECORDS {
        return;
    }
    context.log.record_as(
        "write_denied",
        &context.session.id,
        &bridge::log::records::WriteDenied {
            pid: n.pid,
            syscall: notified::name(n.nr).to_owned(),
            executable: bridge::text::bounded(executable.to_owned(), MAX_PATH_IN_RECORD),
            path: bridge::text::bounded(verdict.path.display().to_string(), MAX_PATH_IN_RECORD),
            reason: reason.to_owned(),
        },
    );
    if context.notices {
        let Ok(mut notices) = seen.announced.lock() else {
            return;
        };
        if notices.paths.len() < MAX_NOTICES {
            if notices.paths.insert(verdict.path.clone()) {
                crate::output::say(&format!(
                    "netbox: blocked write {} ({reason})",
                    crate::printable::printable(&verdict.path.to_string_lossy())
                ));
            }
        } else if !notices.paths.contains(&verdict.path) && !notices.capped {
            notices.capped = true;
            crate::output::say(
                "netbox: more writes were blocked; they are not announced, only logged",
            );
        }
    }
}
