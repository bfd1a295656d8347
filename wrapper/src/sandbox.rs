//! The sandbox side of a run, in order. Two processes:
//!
//! - the **holder** (forked by netbox) enters the new namespaces, creates the proxy
//!   listeners inside the new network namespace and hands them out, then forks the init
//!   process and waits for it;
//! - the **init** (pid 1 of the new pid namespace) builds the filesystem, drops every
//!   privilege, runs the live probe, and only if it passed starts CMD.
//!
//! Each dies with its parent (PR_SET_PDEATHSIG): if netbox is killed, even with SIGKILL, the
//! holder dies, then init, and with pid 1 gone the kernel kills everything in the namespace.

use std::ffi::OsString;
use std::net::{Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::handshake::{Channel, SyncMsg};
use crate::mounts::MountPlan;
use crate::probe::ProbeInput;
use crate::sys::process::{exit_child, fork, Forked};
use crate::testhooks::Breakage;
use crate::{caps, init, mounts, namespaces, probe};

/// The proxy port inside the sandbox's own network namespace, where nothing else listens.
pub const PROXY_PORT: u16 = 3128;

/// Everything the sandbox processes need, computed before the fork.
pub struct ChildPlan {
    pub parent: Pid,
    pub uid: u32,
    pub gid: u32,
    pub mounts: MountPlan,
    pub probe: ProbeInput,
    pub cmd: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    pub breakage: Breakage,
}

/// The holder process: runs in the child of netbox; returns its exit status.
pub fn run_holder(plan: &ChildPlan, channel: &Channel) -> i32 {
    match hold(plan, channel) {
        Ok(code) => code,
        Err((step, detail)) => {
            let hint = None;
            let _ = channel.send(&SyncMsg::SetupFailed { step, detail, hint }, &[]);
            crate::error::EXIT_NETBOX_FAILURE.into()
        }
    }
}

type StepResult<T> = Result<T, (String, String)>;

fn failed<E: std::fmt::Display>(step: &str) -> impl FnOnce(E) -> (String, String) + '_ {
    move |e| (step.to_owned(), e.to_string())
}

fn hold(plan: &ChildPlan, channel: &Channel) -> StepResult<i32> {
    // Die with netbox; and if it already died before this line, stop here.
    set_pdeathsig(Signal::SIGKILL).map_err(failed("set parent-death signal"))?;
    if nix::unistd::getppid() != plan.parent {
        return Err(("start".into(), "netbox exited during start-up".into()));
    }
    // Signals meant for CMD reach it through netbox and init; the holder only waits.
    init::block_signals().map_err(failed("block signals"))?;
    if let Err(e) = namespaces::unshare_all().and_then(|()| namespaces::map_ids(plan.uid, plan.gid))
    {
        // Sent here, with the hint, rather than as a plain step failure.
        let msg = SyncMsg::SetupFailed {
            step: "user namespace".into(),
            detail: chain(&e),
            hint: e.hint(),
        };
        let _ = channel.send(&msg, &[]);
        return Ok(crate::error::EXIT_NETBOX_FAILURE.into());
    }
    nix::unistd::sethostname("netbox").map_err(failed("set hostname"))?;
    crate::sys::netdev::bring_loopback_up().map_err(failed("bring lo up"))?;

    // The bridge's listeners live here, inside the new network namespace, and are handed
    // to netbox: CMD's connections reach the bridge directly, with no relay.
    let v4 = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)))
        .map_err(failed("listen on 127.0.0.1"))?;
    let v6 = TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, PROXY_PORT))).ok();
    let mut fds = vec![v4.as_raw_fd()];
    fds.extend(v6.as_ref().map(AsRawFd::as_raw_fd));
    channel
        .send(&SyncMsg::Listeners { count: fds.len() }, &fds)
        .map_err(failed("hand over listeners"))?;
    drop((v4, v6));

    // The holder is single-threaded (it only ever forks and waits).
    let init_pid = match fork().map_err(failed("fork init"))? {
        Forked::Child => exit_child(run_init(plan, channel)),
        Forked::Parent { child } => child,
    };
    channel
        .send(
            &SyncMsg::InitStarted {
                pid: init_pid.as_raw(),
            },
            &[],
        )
        .map_err(failed("report init"))?;
    loop {
        match waitpid(init_pid, None) {
            Ok(status) => {
                if let Some(code) = init::exit_code(status) {
                    return Ok(code);
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(("wait for init".into(), e.to_string())),
        }
    }
}

/// pid 1 of the sandbox: set up, prove, then run CMD.
fn run_init(plan: &ChildPlan, channel: &Channel) -> i32 {
    if let Err((step, detail)) = set_up(plan, channel) {
        let hint = None;
        let _ = channel.send(&SyncMsg::SetupFailed { step, detail, hint }, &[]);
        return crate::error::EXIT_NETBOX_FAILURE.into();
    }
    let report = probe::run(&plan.probe);
    let passed = report.passed;
    if channel.send(&SyncMsg::Probe(report), &[]).is_err() || !passed {
        return crate::error::EXIT_NETBOX_FAILURE.into();
    }
    // The channel's last word is said: close it, so nothing CMD does can speak on it.
    if crate::sys::fd::close_from_3().is_err() {
        return crate::error::EXIT_NETBOX_FAILURE.into();
    }
    init::run(&plan.cmd, &plan.env, &plan.cwd)
}

/// The setup steps, in order. Each must succeed; there is no weaker fallback.
fn set_up(plan: &ChildPlan, channel: &Channel) -> StepResult<()> {
    // If the holder dies, so does pid 1, and with it everything in the namespace.
    set_pdeathsig(Signal::SIGKILL).map_err(failed("set parent-death signal"))?;
    // pid 1 outlives nothing of netbox's but its channel: every other inherited fd (the
    // event log, the host listener, whatever netbox's caller passed) goes now. And it is
    // not dumpable, so CMD cannot reach into it through /proc/1 or ptrace (same uid).
    crate::sys::fd::close_from_3_except(channel.raw_fd()).map_err(failed("close fds"))?;
    nix::sys::prctl::set_dumpable(false).map_err(failed("set non-dumpable"))?;
    // Out of the caller's process group: terminal signals reach netbox, which forwards
    // them once, instead of reaching CMD twice.
    nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)).map_err(failed("setpgid"))?;
    // The placeholders the mounts pin are laid by netbox meanwhile; wait for its word.
    match channel.recv_blocking() {
        Ok(Some(SyncMsg::Proceed)) => {}
        other => return Err(("wait for netbox".into(), format!("got {other:?}"))),
    }
    // Capabilities are still held here, which the mounts need. While they are held, /
    // could be remounted read-write: the drop follows immediately.
    mounts::apply(&plan.mounts, plan.breakage)
        .map_err(|e| (format!("mount: {}", e.step), e.source.to_string()))?;
    // After the mounts, before the probe and CMD: no capability, no way to regain one.
    if !plan.breakage.skip_capability_drop {
        caps::drop_all().map_err(failed("drop capabilities"))?;
    }
    Ok(())
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
