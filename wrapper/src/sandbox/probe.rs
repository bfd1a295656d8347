//! The live probe: from inside the finished sandbox, before CMD starts, every control is
//! tried with an attempt that must be refused and a control case that must succeed, so a
//! broken probe cannot pass by everything failing (every check is listed in docs/running.md).
//!
//! Attempts avoid side effects: a refused create leaves nothing, opens for writing never
//! write or truncate, the control files are removed again, and network attempts go only to
//! loopback inside the namespace (the bridge's own listener) or to the parent's listener on
//! host loopback, which must be unreachable.

use std::ffi::CString;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The probe's row for the denied-write log (filled in by the sandbox and netbox's
/// write watch, not by the checks here).
pub const WRITE_LOG_CHECK: &str = "denied writes logged (seccomp)";
pub const DIRECT_LOG_CHECK: &str = "direct attempts logged (seccomp)";

/// How long a probe connection may take; everything it talks to is local.
const PROBE_IO_TIMEOUT: Duration = Duration::from_secs(5);

pub use bridge::log::records::{Check, Outcome, ProbeReport, WatchedConnect, WatchedWrite};

/// A report of `checks` and `watched_writes`, timed from `started`.
fn report(checks: Vec<Check>, watched_writes: Vec<WatchedWrite>, started: Instant) -> ProbeReport {
    let passed = checks.iter().all(|c| c.passed);
    ProbeReport {
        checks,
        passed,
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        watched_writes,
        watched_connects: Vec::new(),
    }
}

/// What the probe needs to know, in sandbox paths.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeInput {
    pub write_roots: Vec<PathBuf>,
    /// What netbox resolved each writable root to at start-up (resolved.rs): the sandbox's
    /// view of the path must be that very directory.
    pub root_identities: Vec<(PathBuf, crate::sys::resolve::FileId)>,
    pub temp_dir: PathBuf,
    /// A path outside every write root where a create must fail.
    pub outside: Vec<PathBuf>,
    pub protected: Vec<PathBuf>,
    /// `--hide` paths: each must read empty and be a mount of its own.
    pub hidden: Vec<PathBuf>,
    /// Covered directories (netbox's cache home), each with the writable roots kept in
    /// it: each must show those alone and be a mount of its own.
    #[serde(default)]
    pub covered: Vec<(PathBuf, Vec<PathBuf>)>,
    pub proxy: SocketAddr,
    /// A listener the parent bound on host loopback before the sandbox existed.
    pub host_listener: SocketAddr,
    /// A target the policy denies.
    pub canary: String,
    pub refusal_status: u16,
    /// The resource limits CMD will get; each one set is checked.
    pub limits: crate::limits::Limits,
    /// The cgroup limits the sandbox was born under (cgroup.rs); each is read back.
    pub cgroup_limits: Vec<crate::plan::cgroup::CgroupLimit>,
    /// Whether creating a user namespace must fail.
    pub nested_userns_forbidden: bool,
    /// Whether io_uring must be refused (ENOSYS).
    pub io_uring_forbidden: bool,
    /// The sockets `--allow-socket` names, as CMD names them: each is connected to once
    /// under the filter, for netbox to check that it let each through.
    #[serde(default)]
    pub allowed_sockets: Vec<PathBuf>,
    /// With capture: a port it listens on, and one it does not.
    #[serde(default)]
    pub capture: Option<CaptureProbe>,
}

/// What the capture row tries.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CaptureProbe {
    pub port: u16,
    pub closed_port: u16,
    /// A captured port of 1024 or above, if any: CMD must still be able to listen on it
    /// at every address of its own namespace.
    #[serde(default)]
    pub unprivileged_port: Option<u16>,
}

/// Runs every check.
/// `capture`: a netlink socket in capture's namespace, to read what it holds.
pub fn run(input: &ProbeInput, capture: Option<&crate::sys::rtnl::Rtnl>) -> ProbeReport {
    let started = Instant::now();
    // The bridge answers from netbox's process; its two requests go out first, so the
    // round trips overlap the local checks instead of following them.
    let egress = start_egress(input);
    // So do capture's connections and lookups.
    let pending_capture = input.capture.map(|plan| start_capture(input, plan));
    let mut checks = vec![
        read_only_root(input),
        protected_paths(input),
        network_namespace(input, &egress),
        host_sockets(input),
    ];
    if !input.hidden.is_empty() {
        checks.push(hidden_paths(input));
    }
    if !input.covered.is_empty() {
        checks.push(cache_home(input));
    }
    checks.push(finish_egress(input, egress));
    checks.push(privileges(input));
    if let (Some(plan), Some(pending)) = (input.capture, pending_capture) {
        checks.push(capture_check(plan, pending, capture));
    }
    if input.io_uring_forbidden {
        checks.push(io_uring());
    }
    if !input.limits.no_rlimits() {
        checks.push(resource_limits(input));
    }
    if !input.cgroup_limits.is_empty() {
        checks.push(cgroup_limits(input));
    }
    report(checks, Vec::new(), started)
}

/// The writes netbox's denied-write log must see, once the filter is on: ones the mounts
/// refuse (a file in `/` and in the first protected directory), ones they allow (a file in
/// the workspace, created the same way and removed: a judge that took every create, or
/// every removal, for refused would fail here). Few on purpose: each costs a round trip to
/// netbox.
pub fn watched_writes(input: &ProbeInput) -> Vec<WatchedWrite> {
    let mut writes = Vec::new();
    let protected_dir = input.protected.iter().find(|p| p.is_dir());
    for dir in input.outside.first().into_iter().chain(protected_dir) {
        let path = dir.join(probe_name());
        let _ = watched(&mut writes, &path, create_and_remove(&path));
    }
    if let Some(root) = input.write_roots.first().filter(|r| r.is_dir()) {
        let path = root.join(probe_name());
        let _ = watched(&mut writes, &path, create_and_remove(&path));
    }
    writes
}

/// The connections the probe makes under the filter, for netbox's direct-attempt check:
/// one past the proxy to a port of an address no one has (refused at once: no route out,
/// or with capture a port it does not listen on), which must be logged, and one to the
/// proxy, which must not.
pub fn watched_connects(input: &ProbeInput) -> Vec<WatchedConnect> {
    let closed = input.capture.map_or(1, |c| c.closed_port);
    let nowhere = SocketAddr::from((bridge::session::addresses::PROBE_ADDRESS, closed));
    let proxy = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, crate::sandbox::PROXY_PORT));
    [(nowhere, true), (proxy, false)]
        .into_iter()
        .map(|(to, direct)| {
            let _ = TcpStream::connect_timeout(&to, PROBE_IO_TIMEOUT);
            WatchedConnect { to, direct }
        })
        .collect()
}

/// The probe after `--fetch`'s cut, before CMD: the filesystem controls again (CMD1 ran in
/// this sandbox) and the network, now with nothing listening for CMD at all. Privileges
/// and limits are pid 1's own state, which CMD1 could not change, and are not repeated.
pub fn run_cut(input: &ProbeInput, proxy_v6: bool) -> ProbeReport {
    let started = Instant::now();
    let mut checks = vec![
        read_only_root(input),
        protected_paths(input),
        network_cut(input, proxy_v6),
        host_sockets(input),
    ];
    if !input.hidden.is_empty() {
        checks.push(hidden_paths(input));
    }
    if !input.covered.is_empty() {
        checks.push(cache_home(input));
    }
    report(checks, watched_writes(input), started)
}

/// A check that could not even be tried: `attempt` failed with `result`.
pub fn failed_check(name: &str, attempt: &str, result: String) -> Check {
    let outcome = Outcome {
        attempt: attempt.to_owned(),
        result,
        ok: false,
    };
    check(name, vec![outcome], Vec::new())
}

pub fn check(name: &str, forbidden: Vec<Outcome>, control: Vec<Outcome>) -> Check {
    let passed = !forbidden.is_empty() && forbidden.iter().chain(&control).all(|o| o.ok);
    Check {
        name: name.to_owned(),
        forbidden: bounded(forbidden),
        control: bounded(control),
        passed,
    }
}

/// Outcomes a check reports one by one at most; the rest are said as one (a home split
/// into hundreds of writable roots, thousands of pinned submodules): the report travels
/// to netbox in one message of bounded size, and goes into the log.
const MAX_OUTCOMES_SHOWN: usize = 24;

fn bounded(mut outcomes: Vec<Outcome>) -> Vec<Outcome> {
    if outcomes.len() <= MAX_OUTCOMES_SHOWN {
        return outcomes;
    }
    let rest = outcomes.split_off(MAX_OUTCOMES_SHOWN - 1);
    let failed = rest.iter().find(|o| !o.ok);
    outcomes.push(Outcome {
        attempt: format!("{} more like these", rest.len()),
        ok: failed.is_none(),
        result: match failed {
            Some(o) => format!("{}: {}", o.attempt, o.result),
            None => "all as expected".into(),
        },
    });
    outcomes
}

/// An attempt that must fail with one of `expected`.
fn refused(attempt: String, result: std::io::Result<()>, expected: &[i32]) -> Outcome {
    match result {
        Ok(()) => Outcome {
            attempt,
            result: "succeeded".into(),
            ok: false,
        },
        Err(e) => Outcome {
            attempt,
            ok: e.raw_os_error().is_some_and(|n| expected.contains(&n)),
            result: e.to_string(),
        },
    }
}

fn succeeded(attempt: String, result: std::io::Result<()>) -> Outcome {
    match result {
        Ok(()) => Outcome {
            attempt,
            result: "ok".into(),
            ok: true,
        },
        Err(e) => Outcome {
            attempt,
            result: e.to_string(),
            ok: false,
        },
    }
}

/// A file name no one can have prepared: CMD of an earlier run could have left any fixed
/// name behind (as a directory, say) to make every later probe fail.
fn probe_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".netbox-probe-{nanos:08x}-{n}")
}

/// Creates a new file (never truncating anything) and removes it again. Nothing is written
/// to it: a read-only mount refuses the create itself (EROFS), and an empty file holds no
/// block whose removal ext4 mounted with `discard` would wait to trim (~45 µs here).
fn create_and_remove(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    std::fs::remove_file(path)
}

/// The writable-root control: a file is created and removed inside a directory root; a
/// file root is opened for appending (nothing is written).
fn write_control(root: &Path) -> Outcome {
    if root.is_dir() {
        let path = root.join(probe_name());
        succeeded(
            format!("create and remove {}", path.display()),
            create_and_remove(&path),
        )
    } else {
        succeeded(
            format!("open {} for writing", root.display()),
            std::fs::OpenOptions::new()
                .append(true)
                .open(root)
                .map(drop),
        )
    }
}

/// Notes a write the probe tried, and whether the mounts refused it (EROFS), for netbox
/// to compare with its denied-write log; hands the result on.
fn watched(
    list: &mut Vec<WatchedWrite>,
    path: &Path,
    result: std::io::Result<()>,
) -> std::io::Result<()> {
    list.push(WatchedWrite {
        path: path.to_owned(),
        refused: matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EROFS)),
    });
    result
}

/// Writable roots the probe writes to.
const MAX_WRITE_CONTROLS: usize = 4;

fn read_only_root(input: &ProbeInput) -> Check {
    let forbidden = input
        .outside
        .iter()
        .map(|dir| {
            let path = dir.join(probe_name());
            refused(
                format!("create {}", path.display()),
                create_and_remove(&path),
                &[libc::EROFS],
            )
        })
        .collect();
    // A few roots take a write (the control that the mounts let writes through); each is
    // checked for being the directory netbox resolved. Not every root is written to: a
    // home split into its entries has hundreds, and each write changes a directory's
    // modification time.
    let control = input
        .write_roots
        .iter()
        .take(MAX_WRITE_CONTROLS)
        .chain(std::iter::once(&input.temp_dir))
        .map(|root| write_control(root))
        .chain(
            input
                .root_identities
                .iter()
                .map(|(root, expected)| same_directory(root, *expected)),
        )
        .collect();
    check("read-only root, writable roots", forbidden, control)
}

/// That the sandbox's path to a writable root leads, with no symlink, to the directory
/// netbox resolved at start-up: not a look-alike swapped in while the sandbox was built.
fn same_directory(root: &Path, expected: crate::sys::resolve::FileId) -> Outcome {
    use crate::sys::resolve::{open_exact, FileId};
    let found = open_exact(root).and_then(FileId::of);
    Outcome {
        attempt: format!("{} is the directory netbox resolved", root.display()),
        ok: matches!(&found, Ok(id) if *id == expected),
        result: match found {
            Ok(id) if id == expected => "same".into(),
            Ok(id) => format!("another: {id}, not {expected}"),
            Err(e) => crate::sys::resolve::describe(&e),
        },
    }
}

fn protected_paths(input: &ProbeInput) -> Check {
    let mut forbidden: Vec<Outcome> = input
        .protected
        .iter()
        .map(|path| {
            if path.is_dir() {
                let inside = path.join(probe_name());
                refused(
                    format!("create {}", inside.display()),
                    create_and_remove(&inside),
                    &[libc::EROFS],
                )
            } else {
                // Append mode, and nothing written: no side effect even if it opened.
                let opened = std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map(drop);
                refused(
                    format!("open {} for writing", path.display()),
                    opened,
                    &[libc::EROFS],
                )
            }
        })
        .collect();
    // Kernel knobs: as kuid 0 a capability-less process could still open these for
    // writing, so the mount itself must be read-only (EACCES alone would only show that
    // this user lacks permission).
    let sysctl_ro = nix::sys::statvfs::statvfs("/proc/sys")
        .map(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    forbidden.push(Outcome {
        attempt: "find /proc/sys mounted writable".into(),
        ok: matches!(sysctl_ro, Ok(true)),
        result: match sysctl_ro {
            Ok(true) => "read-only mount".into(),
            Ok(false) => "writable mount".into(),
            Err(e) => e.to_string(),
        },
    });
    // Each pin is a mount of its own (what pid 1 keeps checking while CMD runs).
    let pins = crate::plan::pins::Pins::new(input.protected.clone());
    forbidden.push(Outcome {
        attempt: "find a protected path that is not pinned by a mount of its own".into(),
        ok: pins.lost().is_none(),
        result: match pins.lost() {
            Some(path) => format!("{} is not pinned", path.display()),
            None => "all pinned".into(),
        },
    });
    let control = vec![succeeded(
        "read /proc/sys/kernel/hostname".into(),
        std::fs::read_to_string("/proc/sys/kernel/hostname").map(drop),
    )];
    check("protected paths", forbidden, control)
}

/// `--hide`: each path reads empty (a directory lists nothing, a file reads no byte) and
/// is a mount of its own (what pid 1 keeps checking while CMD runs); its directory can be
/// listed, so "empty" is not a directory this probe cannot read.
fn hidden_paths(input: &ProbeInput) -> Check {
    let mut forbidden: Vec<Outcome> = input
        .hidden
        .iter()
        .map(|path| {
            let content = if path.is_dir() {
                std::fs::read_dir(path).map(|entries| entries.count())
            } else {
                std::fs::read(path).map(|bytes| bytes.len())
            };
            Outcome {
                attempt: format!("read what {} held", path.display()),
                ok: matches!(content, Ok(0)),
                result: match content {
                    Ok(0) => "empty".into(),
                    Ok(n) => format!("{n} entries or bytes"),
                    Err(e) => e.to_string(),
                },
            }
        })
        .collect();
    let pins = crate::plan::pins::Pins::new(input.hidden.clone());
    forbidden.push(Outcome {
        attempt: "find a hidden path that is not covered by a mount of its own".into(),
        ok: pins.lost().is_none(),
        result: match pins.lost() {
            Some(path) => format!("{} is not covered", path.display()),
            None => "all covered".into(),
        },
    });
    let control = input
        .hidden
        .iter()
        .filter_map(|path| path.parent())
        .map(|dir| {
            succeeded(
                format!("list {}", dir.display()),
                std::fs::read_dir(dir).map(drop),
            )
        })
        .collect();
    check("hidden paths", forbidden, control)
}

/// netbox's cache home: each covered directory shows nothing but this run's own caches,
/// and is a mount of its own (pid 1 keeps checking that too); the directory holding it
/// can be listed, so "nothing" is not a directory this probe cannot read.
fn cache_home(input: &ProbeInput) -> Check {
    let mut forbidden: Vec<Outcome> = input
        .covered
        .iter()
        .map(|(cover, keep)| {
            let shown = shows_only(cover, keep);
            Outcome {
                attempt: format!(
                    "find what {} holds besides this run's own caches",
                    cover.display()
                ),
                ok: shown.is_ok(),
                result: match shown {
                    Ok(()) => "nothing".into(),
                    Err(found) => found,
                },
            }
        })
        .collect();
    let pins = crate::plan::pins::Pins::new(input.covered.iter().map(|(c, _)| c.clone()).collect());
    forbidden.push(Outcome {
        attempt: "find netbox's cache home not covered by a mount of its own".into(),
        ok: pins.lost().is_none(),
        result: match pins.lost() {
            Some(path) => format!("{} is not covered", path.display()),
            None => "covered".into(),
        },
    });
    let control = input
        .covered
        .iter()
        .filter_map(|(cover, _)| cover.parent())
        .map(|dir| {
            succeeded(
                format!("list {}", dir.display()),
                std::fs::read_dir(dir).map(drop),
            )
        })
        .collect();
    check("netbox's cache home", forbidden, control)
}

/// Whether `dir` holds nothing but the directories on the way to each of `keep` (each
/// below it), and those: what it found otherwise.
fn shows_only(dir: &Path, keep: &[PathBuf]) -> Result<(), String> {
    let mut wanted: Vec<PathBuf> = Vec::new();
    for kept in keep {
        for above in kept.ancestors() {
            if above.starts_with(dir) && above != dir {
                wanted.push(above.to_owned());
            }
        }
    }
    let mut to_list = vec![dir.to_owned()];
    while let Some(here) = to_list.pop() {
        let entries = std::fs::read_dir(&here).map_err(|e| format!("{}: {e}", here.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if !wanted.contains(&path) {
                return Err(format!("{} is there", path.display()));
            }
            // A kept root's own entries are the run's.
            if !keep.contains(&path) {
                to_list.push(path);
            }
        }
    }
    Ok(())
}

/// The control is the probe's own connection to the bridge, made for the egress check: a
/// connection of its own would cost a connect here and an accept in netbox.
/// Capture: a connection to an address that is no one's (the first of the DNS stub's range,
/// which it never hands out) lands on netbox's listener, which refuses it without a byte
/// (it is never dialled); a port capture does not listen on refuses at once; the DNS stub
/// answers the canary's name with NXDOMAIN. Nothing else could have answered: the
/// namespace has only loopback, and the host's loopback stays unreachable (the network
/// row).
fn capture_check(
    capture: CaptureProbe,
    pending: PendingCapture,
    namespace: Option<&crate::sys::rtnl::Rtnl>,
) -> Check {
    use bridge::session::addresses::PROBE_ADDRESS;
    let captured = SocketAddr::from((PROBE_ADDRESS, capture.port));
    // Taken and reset so soon that the connect itself may see the reset: as good.
    let reached = match pending.v4 {
        Ok(mut s) => s.set_read_timeout(Some(PROBE_IO_TIMEOUT)).and_then(|()| {
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(0) => Ok(()),
                Ok(n) => Err(std::io::Error::other(format!("{n} bytes came back"))),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
                Err(e) => Err(e),
            }
        }),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
        Err(e) => Err(e),
    };
    let refused_by_netbox = Outcome {
        attempt: format!("connect to {captured}, an address no one has, and be answered"),
        ok: reached.is_ok(),
        result: match &reached {
            Ok(()) => "taken by netbox's listener and refused, nothing answered".into(),
            Err(e) => format!("not captured: {e}"),
        },
    };
    let mut forbidden = vec![refused_by_netbox];
    // IPv6 too, where it is up (the stub hands out IPv6 addresses then).
    if let Some(v6) = pending.v6 {
        let captured =
            SocketAddr::from((bridge::session::addresses::PROBE_ADDRESS_V6, capture.port));
        let reached = match v6 {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
            Err(e) => Err(e),
        };
        forbidden.push(Outcome {
            attempt: format!("connect to {captured}, an address no one has"),
            ok: reached.is_ok(),
            result: match &reached {
                Ok(()) => "taken by netbox's listener".into(),
                Err(e) => format!("not captured: {e}"),
            },
        });
    }
    let conf = std::fs::read_to_string("/etc/resolv.conf");
    let stub_line = format!("nameserver {}", crate::sandbox::DNS_STUB);
    let nameservers: Vec<String> = conf
        .as_ref()
        .map(|text| {
            text.lines()
                .map(str::trim)
                .filter(|l| l.starts_with("nameserver"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    forbidden.push(Outcome {
        attempt: "read /etc/resolv.conf, which must name the DNS stub alone".into(),
        ok: nameservers == [stub_line],
        result: match &conf {
            Ok(_) => nameservers.join("; "),
            Err(e) => e.to_string(),
        },
    });
    let closed = SocketAddr::from((PROBE_ADDRESS, capture.closed_port));
    let closed_port = refused(
        format!("connect to {closed}, a port capture does not listen on"),
        TcpStream::connect_timeout(&closed, PROBE_IO_TIMEOUT).map(drop),
        &[libc::ECONNREFUSED],
    );
    let name = pending.canary_name;
    let answer = pending
        .canary
        .and_then(read_dns_answer)
        .map(|(code, _)| code);
    let dns = Outcome {
        attempt: format!("resolve {name}, which the policy denies, in the sandbox's DNS"),
        ok: matches!(answer, Ok(3)),
        result: match answer {
            Ok(3) => "NXDOMAIN".into(),
            Ok(code) => format!("answered with code {code}"),
            Err(e) => e.to_string(),
        },
    };
    forbidden.extend([closed_port, dns, capture_namespace_leads_nowhere(namespace)]);
    let probe_name = bridge::session::addresses::PROBE_NAME;
    let answered = pending
        .probe_name
        .and_then(read_dns_answer)
        .map(|answer| address_in(&answer));
    let mut control = vec![Outcome {
        attempt: format!("resolve {probe_name}, which the stub always answers"),
        ok: matches!(answered, Ok(Some(a)) if a == PROBE_ADDRESS),
        result: match answered {
            Ok(Some(a)) => format!("answered {a}"),
            Ok(None) => "no address in the answer".into(),
            Err(e) => e.to_string(),
        },
    }];
    // Capture's listeners are not in this namespace: a port they carry is still free here,
    // at every address.
    if let Some(port) = capture.unprivileged_port {
        let every = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
        #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
        let listened = std::net::TcpListener::bind(every)
            .or_else(|_| std::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))));
        control.push(succeeded(
            format!("listen at every address on port {port}, which capture carries"),
            listened.map(drop),
        ));
    }
    check("capture", forbidden, control)
}

/// What capture's link leads to: a namespace with nothing up but `lo` and the link's far
/// end. No way leads out of it: every address is local to it, and an interface is the only
/// way anywhere else.
fn capture_namespace_leads_nowhere(namespace: Option<&crate::sys::rtnl::Rtnl>) -> Outcome {
    use crate::sandbox::capture::FAR_LINK_NAME;
    let attempt =
        format!("find an interface up other than lo and {FAR_LINK_NAME} in capture's namespace");
    let up = match namespace {
        Some(namespace) => namespace.links().map(|links| {
            links
                .into_iter()
                .filter(|l| l.up)
                .map(|l| l.name)
                .collect::<Vec<String>>()
        }),
        None => Err(std::io::Error::other("it cannot be read")),
    };
    Outcome {
        attempt,
        ok: up
            .as_ref()
            .is_ok_and(|up| up.iter().all(|name| name == "lo" || name == FAR_LINK_NAME)),
        result: match up {
            Ok(up) => format!("up: {}", up.join(",")),
            Err(e) => format!("cannot read it: {e}"),
        },
    }
}

/// Capture's round trips, started with the probe so that netbox answers them while the
/// local checks run: a connection to a captured port of an address no one has (IPv6 too,
/// where it is up), and the DNS stub asked for the canary's name and the probe's own.
struct PendingCapture {
    v4: std::io::Result<TcpStream>,
    v6: Option<std::io::Result<TcpStream>>,
    canary_name: String,
    canary: std::io::Result<std::net::UdpSocket>,
    probe_name: std::io::Result<std::net::UdpSocket>,
}

fn start_capture(input: &ProbeInput, capture: CaptureProbe) -> PendingCapture {
    use bridge::session::addresses::{PROBE_ADDRESS, PROBE_ADDRESS_V6, PROBE_NAME};
    let connect = |ip: std::net::IpAddr| {
        TcpStream::connect_timeout(&SocketAddr::new(ip, capture.port), PROBE_IO_TIMEOUT)
    };
    let ipv6 = crate::sys::netdev::ipv6_up();
    let canary_name = input
        .canary
        .rsplit_once(':')
        .map_or(input.canary.as_str(), |(host, _)| host)
        .to_owned();
    PendingCapture {
        v4: connect(PROBE_ADDRESS.into()),
        v6: ipv6.then(|| connect(PROBE_ADDRESS_V6.into())),
        canary: send_dns_query(&canary_name),
        canary_name,
        probe_name: send_dns_query(PROBE_NAME),
    }
}

/// The IPv4 address a DNS answer's one record carries (the last four bytes of a NOERROR
/// answer with one record).
fn address_in((code, answer): &(u8, Vec<u8>)) -> Option<std::net::Ipv4Addr> {
    let records = answer
        .get(6..8)
        .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]));
    (*code == 0 && records == 1 && answer.len() >= 4).then(|| {
        let at = answer.len() - 4;
        std::net::Ipv4Addr::new(answer[at], answer[at + 1], answer[at + 2], answer[at + 3])
    })
}

/// The id of the probe's DNS queries.
const DNS_ID: [u8; 2] = [0x6e, 0x62];

/// Asks the DNS stub for `name`'s IPv4 address; the answer is read from the returned
/// socket.
fn send_dns_query(name: &str) -> std::io::Result<std::net::UdpSocket> {
    // Header: id, a standard query with recursion desired, one question.
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&DNS_ID);
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let len = u8::try_from(label.len()).map_err(|_| std::io::Error::other("label"))?;
        query.push(len);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let socket = std::net::UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket.set_read_timeout(Some(PROBE_IO_TIMEOUT))?;
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    socket.connect(SocketAddr::from((crate::sandbox::DNS_STUB, 53)))?;
    socket.send(&query)?;
    Ok(socket)
}

/// The response code and the answer to a query [`send_dns_query`] sent.
fn read_dns_answer(socket: std::net::UdpSocket) -> std::io::Result<(u8, Vec<u8>)> {
    let mut answer = [0u8; 512];
    let n = socket.recv(&mut answer)?;
    if n < 4 || answer[..2] != DNS_ID {
        return Err(std::io::Error::other("not an answer to the question"));
    }
    Ok((answer[3] & 0x0f, answer[..n].to_vec()))
}

fn network_namespace(input: &ProbeInput, egress: &PendingEgress) -> Check {
    let connected = match &egress.health {
        Ok(_) => Ok(()),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
    };
    let control = vec![succeeded(
        format!("connect to the bridge at {}", input.proxy),
        connected,
    )];
    check("empty network namespace", no_way_out(input), control)
}

/// After `--fetch`'s cut: the same empty namespace, and now the bridge's port refuses too,
/// while a listener of the probe's own on loopback answers (so "refused" is not loopback
/// itself being broken).
fn network_cut(input: &ProbeInput, proxy_v6: bool) -> Check {
    let mut forbidden = no_way_out(input);
    forbidden.push(refused(
        format!("connect to the closed bridge port {}", input.proxy),
        TcpStream::connect_timeout(&input.proxy, PROBE_IO_TIMEOUT).map(drop),
        &[libc::ECONNREFUSED],
    ));
    let v6_proxy = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, input.proxy.port()));
    // Where the bridge listened on ::1 it must refuse there too; without IPv6 on lo, ::1
    // cannot be reached at all, which is as good.
    let v6_refusals: &[i32] = if proxy_v6 {
        &[libc::ECONNREFUSED]
    } else {
        &[libc::ECONNREFUSED, libc::EADDRNOTAVAIL, libc::ENETUNREACH]
    };
    forbidden.push(refused(
        format!("connect to the closed bridge port {v6_proxy}"),
        TcpStream::connect_timeout(&v6_proxy, PROBE_IO_TIMEOUT).map(drop),
        v6_refusals,
    ));
    // Capture's listeners closed with the bridge; its namespace stays (pid 1 holds it), so
    // what it carried is refused there at once (IPv6 too, where it is up); and the DNS
    // stub is closed.
    if let Some(capture) = input.capture {
        use bridge::session::addresses::{PROBE_ADDRESS, PROBE_ADDRESS_V6};
        let mut carried = vec![SocketAddr::from((PROBE_ADDRESS, capture.port))];
        if crate::sys::netdev::ipv6_up() {
            carried.push(SocketAddr::from((PROBE_ADDRESS_V6, capture.port)));
        }
        for captured in carried {
            forbidden.push(refused(
                format!("connect to {captured}, which capture carried before the cut"),
                TcpStream::connect_timeout(&captured, PROBE_IO_TIMEOUT).map(drop),
                &[libc::ECONNREFUSED],
            ));
        }
        let stub = SocketAddr::from((crate::sandbox::DNS_STUB, 53));
        forbidden.push(refused(
            format!("ask the DNS stub at {stub}, closed with the bridge"),
            send_dns_query(bridge::session::addresses::PROBE_NAME)
                .and_then(read_dns_answer)
                .map(drop),
            &[libc::ECONNREFUSED],
        ));
        forbidden.push(refused(
            format!("connect to the DNS stub at {stub} over TCP"),
            TcpStream::connect_timeout(&stub, PROBE_IO_TIMEOUT).map(drop),
            &[libc::ECONNREFUSED],
        ));
    }
    #[allow(clippy::disallowed_methods)] // A SocketAddr: nothing is looked up (clippy.toml).
    let answered =
        std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).and_then(|listener| {
            let addr = listener.local_addr()?;
            TcpStream::connect_timeout(&addr, PROBE_IO_TIMEOUT)?;
            listener.accept().map(drop)
        });
    let control = vec![succeeded(
        "connect to a loopback listener of the probe's own".into(),
        answered,
    )];
    check("network cut", forbidden, control)
}

/// The attempts that must find no way out of the namespace: an interface other than lo,
/// a route off the machine, the parent's listener on host loopback.
fn no_way_out(input: &ProbeInput) -> Vec<Outcome> {
    // Some hosts give every new namespace down fallback tunnel devices (sit0, tunl0);
    // what must not exist is an interface that is up, other than lo.
    let up: Result<Vec<String>, _> = nix::ifaddrs::getifaddrs().map(|addrs| {
        let mut names: Vec<String> = addrs
            .filter(|a| a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP))
            .map(|a| a.interface_name)
            .collect();
        names.sort();
        names.dedup();
        names
    });
    // With capture, its link leads to netbox's listeners alone (the capture row proves
    // what is at its far end).
    let link = crate::sandbox::capture::LINK_NAME;
    let expected: &[&str] = if input.capture.is_some() {
        &["lo", link]
    } else {
        &["lo"]
    };
    let only_lo = Outcome {
        attempt: if input.capture.is_some() {
            format!("find an interface that is up, other than lo and {link}")
        } else {
            "find an interface that is up, other than lo".into()
        },
        ok: up.as_ref().is_ok_and(|names| names == expected),
        result: match &up {
            Ok(names) => format!("up: {}", names.join(",")),
            Err(e) => e.to_string(),
        },
    };
    let routes = off_box_routes(input.capture.is_some());
    let no_routes = Outcome {
        attempt: "find a route that leaves the machine".into(),
        ok: routes.as_ref().is_ok_and(Vec::is_empty),
        result: match &routes {
            Ok(r) if r.is_empty() => "none".into(),
            Ok(r) => r.join("; "),
            Err(e) => format!("cannot read routes: {e}"),
        },
    };
    let host = refused(
        format!("connect to host loopback listener {}", input.host_listener),
        TcpStream::connect_timeout(&input.host_listener, PROBE_IO_TIMEOUT).map(drop),
        &[libc::ECONNREFUSED],
    );
    vec![only_lo, no_routes, host]
}

/// Routes that use an interface other than `lo` (and with capture, its link).
fn off_box_routes(capture: bool) -> std::io::Result<Vec<String>> {
    let leaves =
        |iface: &str| iface != "lo" && !(capture && iface == crate::sandbox::capture::LINK_NAME);
    let mut found = Vec::new();
    let v4 = std::fs::read_to_string("/proc/net/route")?;
    for line in v4.lines().skip(1) {
        if let Some(iface) = line.split_whitespace().next() {
            if leaves(iface) {
                found.push(line.to_owned());
            }
        }
    }
    if let Ok(v6) = std::fs::read_to_string("/proc/net/ipv6_route") {
        for line in v6.lines() {
            if let Some(iface) = line.split_whitespace().last() {
                if leaves(iface) {
                    found.push(line.to_owned());
                }
            }
        }
    }
    Ok(found)
}

fn host_sockets(input: &ProbeInput) -> Check {
    use std::os::unix::net::{UnixListener, UnixStream};
    // Abstract sockets belong to the network namespace: the host's are out of reach. (Host
    // sockets with a path are decided at each connect: `unix_sockets_at_connect`.)
    let forbidden = vec![refused(
        "connect to the host's abstract socket @/org/freedesktop/systemd1/private".into(),
        connect_abstract(b"/org/freedesktop/systemd1/private"),
        &[libc::ECONNREFUSED],
    )];
    // Control: a socket of the sandbox's own, in its temp root, works.
    let own = input.temp_dir.join(format!("{}.sock", probe_name()));
    let control = vec![succeeded(
        format!("connect to a socket of our own at {}", own.display()),
        UnixListener::bind(&own).and_then(|listener| {
            let connected = UnixStream::connect(&own).map(drop);
            drop(listener);
            let _ = std::fs::remove_file(&own);
            connected
        }),
    )];
    check("host unix sockets", forbidden, control)
}

/// A Unix socket listening at a path in the sandbox's temp root, bound outside the
/// sandbox's network namespace (by pid 1's mounting thread, before it joins it): to the
/// sandbox, a host socket, which the kernel alone would connect to.
pub struct ForeignSocket {
    path: PathBuf,
    _listener: std::os::unix::net::UnixListener,
}

impl ForeignSocket {
    pub fn bind(temp_dir: &Path) -> Option<ForeignSocket> {
        let path = temp_dir.join(format!("{}-outside.sock", probe_name()));
        let listener = std::os::unix::net::UnixListener::bind(&path).ok()?;
        Some(ForeignSocket {
            path,
            _listener: listener,
        })
    }
}

impl Drop for ForeignSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Unix sockets decided at connect (supervise/unixsockets.rs), under the filter: a socket
/// bound outside the sandbox's network namespace, listening, is refused; one the sandbox
/// binds itself connects. Both are gone before CMD starts.
pub fn unix_sockets_at_connect(input: &ProbeInput, foreign: Option<ForeignSocket>) -> Check {
    use std::os::unix::net::{UnixListener, UnixStream};
    let forbidden = vec![match &foreign {
        Some(foreign) => refused(
            format!(
                "connect to {}, a socket listening outside the sandbox's network namespace",
                foreign.path.display()
            ),
            UnixStream::connect(&foreign.path).map(drop),
            &[libc::ECONNREFUSED],
        ),
        None => Outcome {
            attempt: "bind a socket outside the sandbox's network namespace".into(),
            ok: false,
            result: "could not be made".into(),
        },
    }];
    drop(foreign);
    let own = input.temp_dir.join(format!("{}-own.sock", probe_name()));
    let control = vec![succeeded(
        format!(
            "connect to a socket of the sandbox's own at {}",
            own.display()
        ),
        UnixListener::bind(&own).and_then(|listener| {
            let connected = UnixStream::connect(&own).map(drop);
            drop(listener);
            let _ = std::fs::remove_file(&own);
            connected
        }),
    )];
    check("unix sockets decided at connect", forbidden, control)
}

/// Connects to each allowed socket once, under the filter, and closes at once: what netbox
/// decided is its own check ("allowed sockets"); the host's answer is the service's (it
/// may not be running), so nothing is judged here.
pub fn connect_allowed_sockets(input: &ProbeInput) {
    for path in &input.allowed_sockets {
        let _ = std::os::unix::net::UnixStream::connect(path);
    }
}

fn connect_abstract(name: &[u8]) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    std::os::unix::net::UnixStream::connect_addr(&addr).map(drop)
}

/// The egress check's two requests, sent and not yet answered.
struct PendingEgress {
    canary: std::io::Result<TcpStream>,
    health: std::io::Result<TcpStream>,
}

fn start_egress(input: &ProbeInput) -> PendingEgress {
    PendingEgress {
        canary: send_request(
            input.proxy,
            &format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n", input.canary),
        ),
        health: send_request(
            input.proxy,
            &format!(
                "GET {} HTTP/1.1\r\nHost: netbox\r\nConnection: close\r\n\r\n",
                bridge::HEALTH_PATH
            ),
        ),
    }
}

fn finish_egress(input: &ProbeInput, pending: PendingEgress) -> Check {
    let canary = pending.canary.and_then(read_answer);
    let want = format!("HTTP/1.1 {} ", input.refusal_status);
    // A refusal by policy, said so: a bridge that failed otherwise (a remote one that
    // could not be reached, or that let the canary through to its failed lookup) answers
    // with the same status and another reason.
    let reason = canary
        .as_ref()
        .ok()
        .and_then(|r| header_value(r, "x-netbox-reason"));
    let forbidden = vec![Outcome {
        attempt: format!("CONNECT {} through the bridge", input.canary),
        ok: canary.as_ref().is_ok_and(|r| r.starts_with(&want)) && reason == Some("policy"),
        result: match reason {
            Some(reason) => format!("{} ({reason})", status_line(&canary)),
            None => status_line(&canary),
        },
    }];
    let health = pending.health.and_then(read_answer);
    let control = vec![Outcome {
        attempt: format!(
            "GET {} from the bridge at {}",
            bridge::HEALTH_PATH,
            input.proxy
        ),
        ok: health
            .as_ref()
            .is_ok_and(|r| r.starts_with("HTTP/1.1 200 ")),
        result: status_line(&health),
    }];
    check("egress policy", forbidden, control)
}

/// A header's value in an HTTP answer's head (the first of that name).
fn header_value<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer
        .split("\r\n\r\n")
        .next()?
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .find(|(field, _)| field.trim().eq_ignore_ascii_case(name))
        .map(|(_, value)| value.trim())
}

fn status_line(result: &std::io::Result<String>) -> String {
    match result {
        Ok(text) => text.lines().next().unwrap_or("(empty)").to_owned(),
        Err(e) => e.to_string(),
    }
}

/// Connects and sends a request.
fn send_request(addr: SocketAddr, request: &str) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_IO_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_IO_TIMEOUT))?;
    stream.write_all(request.as_bytes())?;
    Ok(stream)
}

/// Reads the answer until the bridge closes (or resets) the connection.
fn read_answer(mut stream: TcpStream) -> std::io::Result<String> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset && !answer.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn privileges(input: &ProbeInput) -> Check {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| status_field(&status, name).unwrap_or("?").to_owned();
    let mut forbidden: Vec<Outcome> = ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
        .iter()
        .map(|name| {
            let value = field(name);
            Outcome {
                attempt: format!("hold any capability ({name})"),
                ok: value.chars().all(|c| c == '0') && !value.is_empty(),
                result: value,
            }
        })
        .collect();
    let nnp = field("NoNewPrivs:");
    forbidden.push(Outcome {
        attempt: "gain privileges on exec (no_new_privs must be 1)".into(),
        ok: nnp == "1",
        result: nnp,
    });
    forbidden.push(refused(
        "remount / read-write".into(),
        remount_root_rw(),
        &[libc::EPERM],
    ));
    if input.nested_userns_forbidden {
        forbidden.push(refused(
            "create a user namespace (ENOSPC)".into(),
            create_user_namespace(),
            &[libc::ENOSPC],
        ));
    }
    check("privileges dropped", forbidden, Vec::new())
}

/// io_uring, refused by netbox's filter as by a kernel without it (ENOSYS); the control: a
/// syscall just past io_uring's numbers (pidfd_open) still reaches the kernel.
fn io_uring() -> Check {
    let setup = crate::sys::seccomp::try_io_uring_setup().map(drop);
    let forbidden = vec![refused(
        "set up an io_uring (ENOSYS)".into(),
        setup,
        &[libc::ENOSYS],
    )];
    let pidfd = crate::sys::process::pidfd_open(nix::unistd::getpid()).map(drop);
    let control = vec![succeeded("open a pidfd of its own".into(), pidfd)];
    check("io_uring refused", forbidden, control)
}

/// Tries to enter a new user namespace, which must not be possible (ENOSPC: the sandbox's
/// limit is 0). pid 1 tries itself: a failed unshare(2) costs ~3 µs against ~55 µs for a
/// failed clone(2) (measured), which allocates and frees a task and its kernel stack
/// before it gets to the namespace. Should it succeed, pid 1 is in a new user namespace,
/// the check fails and CMD never starts. unshare refuses a process the kernel still counts
/// more than one thread in (EINVAL): the mounting thread has been joined, but may not
/// have quite left; then a child tries instead.
fn create_user_namespace() -> std::io::Result<()> {
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        Err(nix::errno::Errno::EINVAL) => {
            // pid 1 is single-threaded as far as user space goes: the probe starts no
            // thread.
            let child =
                crate::sys::process::clone_process(nix::sched::CloneFlags::CLONE_NEWUSER, || 0)?;
            let _ = nix::sys::wait::waitpid(child, None);
            Ok(())
        }
        result => result.map_err(std::io::Error::from),
    }
}

/// The escape the capability drop must prevent; EPERM is the expected answer.
fn remount_root_rw() -> std::io::Result<()> {
    let root = CString::new("/").unwrap_or_default();
    nix::mount::mount(
        None::<&str>,
        root.as_c_str(),
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT | nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(std::io::Error::from)
}

/// The resource-limit control, run in a forked child of pid 1 with the limits applied as
/// CMD gets them: each requested limit must be set (hard and soft), an allocation or a
/// write past it must fail, and one inside it must succeed.
fn resource_limits(input: &ProbeInput) -> Check {
    const NAME: &str = "resource limits";
    let child_failed =
        |detail: String| failed_check(NAME, "run the limit checks in a child", detail);
    let (reader, writer) = match nix::unistd::pipe() {
        Ok(pair) => pair,
        Err(e) => return child_failed(e.to_string()),
    };
    // pid 1 is single-threaded: the probe starts no thread.
    let child = match crate::sys::process::fork() {
        Ok(crate::sys::process::Forked::Child) => {
            drop(reader);
            let outcomes = limit_outcomes(input);
            let mut writer = std::fs::File::from(writer);
            let ok = serde_json::to_writer(&mut writer, &outcomes).is_ok();
            crate::sys::process::exit_child(if ok { 0 } else { 1 })
        }
        Ok(crate::sys::process::Forked::Parent { child }) => child,
        Err(e) => return child_failed(e.to_string()),
    };
    drop(writer);
    let mut text = String::new();
    let read = std::fs::File::from(reader).read_to_string(&mut text);
    let _ = nix::sys::wait::waitpid(child, None);
    match read
        .ok()
        .and_then(|_| serde_json::from_str::<(Vec<Outcome>, Vec<Outcome>)>(&text).ok())
    {
        Some((forbidden, control)) => check(NAME, forbidden, control),
        None => child_failed("the child reported nothing".into()),
    }
}

/// In the probe's child: applies the limits and tries each. Returns (forbidden, control).
fn limit_outcomes(input: &ProbeInput) -> (Vec<Outcome>, Vec<Outcome>) {
    use nix::sys::resource::{getrlimit, Resource};
    let limits = input.limits;
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    if let Err(e) = crate::limits::apply(&limits) {
        forbidden.push(Outcome {
            attempt: "set the limits".into(),
            result: e.to_string(),
            ok: false,
        });
        return (forbidden, control);
    }
    let is_set = |resource, value: u64, unit: &str| {
        let got = getrlimit(resource);
        Outcome {
            attempt: format!("{resource:?} is {value} {unit}, soft and hard"),
            ok: got == Ok((value, value)),
            result: format!("{got:?}"),
        }
    };
    if let Some(bytes) = limits.memory {
        control.push(is_set(Resource::RLIMIT_AS, bytes, "bytes"));
        forbidden.push(reservation(bytes, false));
        // This child is a copy of pid 1, whose own footprint counts against the limit;
        // half of what is left must still be available.
        let used = vm_size().unwrap_or(u64::MAX);
        control.push(reservation(bytes.saturating_sub(used) / 2, true));
    }
    if let Some(bytes) = limits.file_size {
        control.push(is_set(Resource::RLIMIT_FSIZE, bytes, "bytes"));
        let (refused_write, allowed_write) = file_size_attempts(&input.temp_dir, bytes);
        forbidden.push(refused_write);
        control.push(allowed_write);
    }
    if let (Some(pids), Some(count)) = (limits.pids, limits.sandbox_pids()) {
        // Set for root too, where a cgroup does the enforcing (cgroup.rs).
        control.push(is_set(Resource::RLIMIT_NPROC, count, "processes"));
        let (refused_fork, allowed_forks) = process_attempts(pids);
        forbidden.push(refused_fork);
        control.push(allowed_forks);
    }
    (forbidden, control)
}

/// Each cgroup limit reads back on the cgroup that holds it, the sandbox is in that
/// cgroup's child, and neither the limit nor a way back out of the cgroup is writable.
fn cgroup_limits(input: &ProbeInput) -> Check {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    let mut homes = Vec::new();
    for limit in &input.cgroup_limits {
        let value = std::fs::read_to_string(&limit.file);
        control.push(Outcome {
            attempt: format!("{} reads {}", limit.file.display(), limit.value),
            ok: value.as_deref().is_ok_and(|v| v.trim() == limit.value),
            result: match &value {
                Ok(v) => v.trim().to_owned(),
                Err(e) => e.to_string(),
            },
        });
        forbidden.push(refused(
            format!("open {} for writing", limit.file.display()),
            open_for_writing(&limit.file),
            &[libc::EROFS, libc::EACCES, libc::EPERM],
        ));
        if !homes.contains(&limit.home_procs) {
            homes.push(limit.home_procs.clone());
            let member = own.lines().find(|line| {
                let mut fields = line.splitn(3, ':');
                let controllers = fields.nth(1).unwrap_or("");
                controllers.split(',').any(|c| c == limit.controller)
                    && fields.next() == Some(limit.member_of.as_str())
            });
            control.push(Outcome {
                attempt: format!("in the {} cgroup {}", limit.controller, limit.member_of),
                ok: member.is_some(),
                result: member.unwrap_or("not a member").to_owned(),
            });
            forbidden.push(refused(
                format!("leave it: open {} for writing", limit.home_procs.display()),
                open_for_writing(&limit.home_procs),
                &[libc::EROFS, libc::EACCES, libc::EPERM],
            ));
        }
    }
    check("cgroup limits", forbidden, control)
}

/// Opens an existing file for writing without writing or truncating anything.
fn open_for_writing(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path).map(drop)
}

/// Starts processes until the limit: pid 1 and this child are two of the sandbox's
/// `pids + 1`, so `pids - 1` more must start and the next must fail with EAGAIN. The
/// children wait on a pipe and exit together when it closes.
fn process_attempts(pids: u64) -> (Outcome, Outcome) {
    let allowed = pids - 1;
    let mut started = Vec::new();
    let mut refusal = None;
    match nix::unistd::pipe() {
        Ok((hold, release)) => {
            for _ in 0..=allowed {
                // Single-threaded: this is a forked child of pid 1, which starts no thread.
                match crate::sys::process::fork() {
                    Ok(crate::sys::process::Forked::Child) => {
                        drop(release);
                        let mut byte = [0u8; 1];
                        let _ = nix::unistd::read(&hold, &mut byte);
                        crate::sys::process::exit_child(0)
                    }
                    Ok(crate::sys::process::Forked::Parent { child }) => started.push(child),
                    Err(e) => {
                        refusal = Some(e);
                        break;
                    }
                }
            }
            drop(release);
            for child in &started {
                let _ = nix::sys::wait::waitpid(*child, None);
            }
        }
        Err(e) => refusal = Some(std::io::Error::from(e)),
    }
    let count = started.len() as u64;
    let past = match refusal {
        Some(e) if count == allowed => Err(e),
        Some(e) => Err(std::io::Error::other(format!(
            "only {count} started before: {e}"
        ))),
        None => Ok(()),
    };
    (
        refused(
            format!("start a process past the {pids} CMD may have"),
            past,
            &[libc::EAGAIN],
        ),
        Outcome {
            attempt: format!("start {allowed} processes"),
            ok: count >= allowed,
            result: format!("{count} started"),
        },
    )
}

/// Reserves (never touches) `bytes` of address space; `expect_ok` says which answer is
/// right. Only RLIMIT_AS can refuse it: it is not counted as committed memory, so a limit
/// above the machine's RAM is checked as well as a small one.
fn reservation(bytes: u64, expect_ok: bool) -> Outcome {
    let attempt = format!("reserve {} MiB of address space", bytes >> 20);
    if bytes == 0 {
        return Outcome {
            attempt,
            result: "netbox's own footprint already fills the limit".into(),
            ok: false,
        };
    }
    let got = usize::try_from(bytes)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EOVERFLOW))
        .and_then(crate::sys::memory::reserve_and_release);
    if expect_ok {
        succeeded(attempt, got)
    } else {
        refused(attempt, got, &[libc::ENOMEM])
    }
}

/// Writes one byte at the last offset the limit allows (must work) and one past it (must
/// fail with EFBIG), in an unnamed file in the temp root, sparse so nothing is stored.
fn file_size_attempts(temp_dir: &Path, bytes: u64) -> (Outcome, Outcome) {
    use std::os::unix::fs::FileExt;
    // A blocked SIGXFSZ leaves the write to fail with EFBIG instead of killing the child.
    let mut xfsz = nix::sys::signal::SigSet::empty();
    xfsz.add(nix::sys::signal::Signal::SIGXFSZ);
    let _ = xfsz.thread_block();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(temp_dir);
    let write_at = |offset| match &file {
        Ok(file) => file.write_at(b"x", offset).map(drop),
        // io::Error is not Clone: both attempts report the open's failure.
        Err(e) => Err(e.raw_os_error().map_or_else(
            || std::io::Error::other(e.to_string()),
            std::io::Error::from_raw_os_error,
        )),
    };
    let (past, inside) = (write_at(bytes), write_at(bytes - 1));
    (
        refused(
            format!("write a byte at offset {bytes}"),
            past,
            &[libc::EFBIG],
        ),
        succeeded(format!("write a byte at offset {}", bytes - 1), inside),
    )
}

/// This process's address-space size in bytes (VmSize in /proc/self/status).
fn vm_size() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status_field(&status, "VmSize:")?
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// The value of the line `name` (e.g. `CapEff:`) in a /proc/PID/status text, trimmed.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}
