//! The live probe: from inside the finished sandbox, before CMD starts, every control is
//! tried with an attempt that must be refused and a control case that must succeed, so a
//! broken probe cannot pass by everything failing (every check is listed in docs/running.md).
//!
//! Attempts avoid side effects: a refused create leaves nothing, opens for writing never
//! write or truncate, the control files are removed again, and network attempts go only to
//! loopback inside the namespace (the bridge's own listener) or to the parent's listener on
//! host loopback, which must be unreachable.
//!
//! One file per family of rows: `filesystem`, `network` (the namespace, the cut, host
//! sockets, egress), `capture`, `limits` (privileges, io_uring, resource and cgroup
//! limits); `verdict` turns a row's outcomes into its verdict. Here the order they run in.

mod capture;
mod filesystem;
mod limits;
mod network;
mod secret_values;
mod secrets;
mod verdict;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use capture::{capture_check, start_capture};
use filesystem::{
    bound_paths, cache_home, create_and_remove, hidden_paths, probe_name, protected_paths,
    read_only_root, watched,
};
use limits::{cgroup_limits, io_uring, privileges, resource_limits};
pub use network::{connect_allowed_sockets, unix_sockets_at_connect, ForeignSocket};
use network::{finish_egress, host_sockets, network_cut, network_namespace, start_egress};
pub use secret_values::check_plan as secret_values;
pub use verdict::{check, failed_check};

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

/// What the probe needs to know, in sandbox paths. Never serialised: pid 1 has it from
/// its copy of netbox's memory.
#[derive(Debug, Clone)]
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
    pub covered: Vec<(PathBuf, Vec<PathBuf>)>,
    /// `--bind` and `--ro-bind`: each DST must be that very SRC, and read-only unless
    /// writable.
    pub binds: Vec<BoundPath>,
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
    pub allowed_sockets: Vec<PathBuf>,
    /// With capture: a port it listens on, and one it does not.
    pub capture: Option<CaptureProbe>,
    /// Each secret's name and placeholder: CMD must hold the placeholder, and the bridge
    /// must refuse it bound for the canary.
    pub secrets: Vec<(String, String)>,
}

/// A bind as the probe checks it.
#[derive(Debug, Clone)]
pub struct BoundPath {
    pub source: PathBuf,
    pub target: PathBuf,
    /// What netbox resolved SRC to.
    pub identity: crate::sys::resolve::FileId,
    pub writable: bool,
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
/// `env`: CMD's environment. `capture`: a netlink socket in capture's namespace, to read
/// what it holds.
pub fn run(
    input: &ProbeInput,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    capture: Option<&crate::sys::rtnl::Rtnl>,
) -> ProbeReport {
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
    checks.extend(bound_paths(input));
    checks.push(finish_egress(input, egress));
    if !input.secrets.is_empty() {
        checks.push(secrets::secrets(input, env));
    }
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
    checks.extend(bound_paths(input));
    report(checks, watched_writes(input), started)
}
