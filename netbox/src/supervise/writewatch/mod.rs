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
//! The same listener hands over CMD's connects and sends (`sockets`: judged and made for
//! it); what is written to the event log for all of them is `records`.
//!
//! The same filter hands over the calls that send to an address; netwatch.rs judges
//! those, and they are recorded here as `direct_attempt`, with the same caps.

mod records;
mod sockets;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bridge::EventLog;

use crate::sandbox::probe::{Outcome, ProbeReport};
use crate::supervise::connector::Connector;
use crate::supervise::netwatch::{self, NetContext};
use crate::supervise::unixsockets::UnixContext;
use crate::supervise::writejudge::judge;
use crate::sys::seccomp::{self, Notification};
use records::record;
use sockets::{handle_connect, handle_send};

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
                    // Ready before the probe's first call, which waits for them.
                    let own_worker = crate::supervise::connector::OwnWorker::start();
                    let reaper = crate::supervise::connector::Reaper::start().ok();
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
                    let Ok(connector) = Connector::new(&listener, own_worker, reaper) else {
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
    // Recorded, and said, while the caller still waits: its line is on the terminal before
    // anything the command prints after the refusal (its own error, the next command's
    // output). The caller's executable is read then too (once let go, a short-lived one is
    // gone); if the caller died meanwhile, what was read may be another process's (its pid
    // reused), and nothing is recorded.
    let executable = std::fs::read_link(format!("/proc/{}/exe", n.pid))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if seccomp::still_valid(listener.as_fd(), n.id) {
        for verdict in verdicts.iter().filter(|v| v.denied) {
            record(context, seen, n, verdict, &executable);
        }
    }
    let _ = seccomp::let_it_run(listener.as_fd(), n.id);
}

/// pid 1's own call, which netbox cannot copy from once pid 1 is no longer dumpable
/// (after the probe: handing netbox CMD's terminal): netbox's own code, in memory CMD
/// cannot reach, so the kernel may run it as asked. During the probe pid 1 is dumpable,
/// and its calls are made by netbox like CMD's, which is what the probe proves.
fn let_pid1_run(listener: &OwnedFd, n: &Notification) {
    let _ = seccomp::let_it_run(listener.as_fd(), n.id);
}
