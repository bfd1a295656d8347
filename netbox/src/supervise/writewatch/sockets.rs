//! Connects and sends the filter hands over: each address read once from CMD's memory,
//! judged, and the call made for CMD (or refused), on the workers of `connector`/`sender`.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use bridge::EventLog;

use super::records::{executable_of, log_direct_attempts, record_refused_unix, record_vsock};
use super::{let_pid1_run, ProbeUnix, Watch, MAX_PATH_IN_RECORD};
use crate::supervise::connector::{AfterConnect, Job, Op};
use crate::supervise::netwatch::{self};
use crate::supervise::sender;
use crate::supervise::unixsockets::{self, Decision, Whose};
use crate::sys::seccomp::{self, Notification};

/// Longest socket address a connect takes (sizeof(struct sockaddr_storage)).
pub(super) const SOCKADDR_MAX: usize = 128;

/// A connect: answered by netbox, never let run (a call let run could be pointed
/// elsewhere after netbox looked: its address rewritten by another thread, a symlink on
/// its path swapped, its fd replaced). The address is read once; a Unix socket's path is
/// decided (unixsockets.rs); the connect is made on a copy of the caller's socket
/// (connector.rs), to what was decided, and its result is the caller's.
pub(super) fn handle_connect(listener: &OwnedFd, watch: &Watch, n: &Notification) {
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
pub(super) fn address_of_held(file: &OwnedFd) -> Option<Vec<u8>> {
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file));
    crate::sys::socket::unix_address(path.as_bytes())
}

/// A connect to a Unix socket's path: decided, then made to the file decided on.
pub(super) fn connect_unix(
    listener: &OwnedFd,
    watch: &Watch,
    n: &Notification,
    socket: OwnedFd,
    path: &[u8],
) {
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
pub(super) fn handle_send(listener: &OwnedFd, watch: &Watch, n: &Notification) {
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

/// Hands a call to the connector: pid 1's to its own worker (connector.rs).
pub(super) fn submit(watch: &Watch, n: &Notification, job: Job) {
    if n.pid == watch.context.pid1 {
        watch.connector.submit_own(job);
    } else {
        watch.connector.submit(job);
    }
}

/// The record of a use of allowed socket `index` (a connect, or a datagram sent), written
/// once the call has returned.
pub(super) fn allowed_use(
    watch: &Watch,
    n: &Notification,
    index: usize,
    done: &'static str,
) -> AfterConnect {
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
pub(super) struct AllowedUse {
    /// What the call did when it succeeded: `connected`, `sent`.
    pub(super) done: &'static str,
    pub(super) log: Arc<EventLog>,
    pub(super) session: String,
    pub(super) pid: u32,
    pub(super) executable: String,
    pub(super) path: String,
}

impl AllowedUse {
    pub(super) fn write(self, result: Result<(), i32>) {
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

/// A vsock address (`struct sockaddr_vm`: family, reserved, port, context id): the
/// context id and port it names, if it is one. vsock reaches the hypervisor and other
/// guests of the machine, and no network namespace confines it, so every connect and
/// send to one is refused.
pub(super) fn vsock_of(address: &[u8]) -> Option<(u32, u32)> {
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
