//! What the watch writes to the event log: each refused write, each direct attempt, each
//! host socket used or refused, bounded and announced once.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::{Seen, Watch, WatchContext, MAX_NOTICES, MAX_PATH_IN_RECORD, MAX_RECORDS};
use crate::supervise::netwatch::{self, Attempt};
use crate::supervise::writejudge::Verdict;
use crate::sys::notified;
use crate::sys::seccomp::{self, Notification};

/// Records a refused host Unix socket, with the caller's executable read while it still
/// waits (and nothing if it died meanwhile: the pid may be another's); pid 1's are the
/// probe's own and not recorded.
pub(super) fn record_refused_unix(
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
pub(super) fn executable_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Records what a call would send past netbox's listeners; with `let_run`, lets the call
/// run once the caller's executable is read.
pub(super) fn log_direct_attempts(
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

/// A connect or datagram to a host Unix socket, refused: a `direct_attempt` record with
/// protocol `unix`, and a notice once per path.
pub(super) fn record_unix(
    watch: &Watch,
    n: &Notification,
    named: &std::path::Path,
    executable: &str,
) {
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
pub(super) fn record_vsock(
    listener: &OwnedFd,
    watch: &Watch,
    n: &Notification,
    (cid, port): (u32, u32),
) {
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
pub(super) struct Refused {
    pub(super) protocol: &'static str,
    pub(super) address: String,
    pub(super) port: u16,
    pub(super) reason: &'static str,
    /// What a notice is announced once for.
    pub(super) key: PathBuf,
    pub(super) notice: String,
}

pub(super) fn record_refused_local(
    watch: &Watch,
    n: &Notification,
    executable: &str,
    refused: Refused,
) {
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
pub(super) fn program_of(executable: &str) -> String {
    std::path::Path::new(executable)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A refused vsock attempt's `reason`.
pub(super) const VSOCK_REASON: &str = "vsock";

/// A refused Unix socket's `reason`.
pub(super) const UNIX_REASON: &str = "host socket";

pub(super) fn record_direct(
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

pub(super) fn record(
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
