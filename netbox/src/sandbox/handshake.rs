//! The parent ↔ sandbox channel: a SOCK_SEQPACKET socketpair carrying serde messages, one
//! per packet, with file descriptors attached by SCM_RIGHTS (unix(7)).
//!
//! The sandbox hands its in-namespace proxy listeners out this way, so the parent's bridge
//! accepts CMD's connections directly: no relay process and no extra hop.

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use serde::{Deserialize, Serialize};

use crate::sandbox::probe::{Check, ProbeReport, WatchedConnect, WatchedWrite};

/// Largest message, in bytes (a probe report is a few KiB; the buffer is zeroed per
/// receive, so it is kept modest).
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// What the sandbox tells the parent, in order, and what the parent answers (`Start`, `Cut`).
#[derive(Debug, Serialize, Deserialize)]
pub enum SyncMsg {
    /// The proxy listeners inside the namespace (attached as fds), and the CPU pid 1 runs
    /// on as it sends them (for netbox to keep off: cpu.rs).
    /// With capture, the fds go on: one listener per port of `capture_ports` (in capture's
    /// namespace, at every address), then the DNS stub's UDP socket and TCP listener.
    Listeners {
        count: usize,
        cpu: Option<usize>,
        #[serde(default)]
        capture_ports: Vec<u16>,
    },
    /// The listener of the sandbox's seccomp filter, a sock_diag socket made in the
    /// sandbox's network namespace (for telling direct attempts from local traffic:
    /// netwatch.rs) and the sandbox's root (O_PATH) for judging paths: every write-intent
    /// or address-sending syscall from here on waits for netbox's answer (writewatch.rs).
    /// Their numbers in pid 1, not attached: attaching takes sendmsg, which the filter
    /// hands to the listener this message would carry. netbox copies them out of pid 1
    /// (pidfd_getfd) while pid 1 keeps them open and is dumpable (its probe).
    WriteWatch {
        listener: i32,
        diag: Option<i32>,
        root: Option<i32>,
        /// The port of a UDP socket pid 1 bound on 127.0.0.1 in the sandbox, for netbox to
        /// check its UDP lookups against.
        #[serde(default)]
        udp_witness: Option<u16>,
    },
    /// The probe after `--fetch`'s cut ran (in one message; the first probe comes as
    /// `ProbeChecks` then `ProbeWatched`); CMD starts only if it passed.
    Probe(ProbeReport),
    /// The first live probe's checks, sent before pid 1 installs the write filter, so that
    /// netbox reads them meanwhile. Not a report yet: `ProbeWatched` completes it.
    ProbeChecks(ProbeReport),
    /// The rest of the first probe: the writes made under the filter (for netbox's
    /// denied-write check), the checks made after them, and the time they took.
    ProbeWatched {
        writes: Vec<WatchedWrite>,
        #[serde(default)]
        connects: Vec<WatchedConnect>,
        checks: Vec<Check>,
        duration_us: u64,
    },
    /// While CMD ran, a pinned path stopped being a mount of its own (changed on the host);
    /// the sandbox was stopped.
    PinLost {
        #[serde(with = "bridge::log::path_json::exact")]
        path: std::path::PathBuf,
    },
    /// CMD has exited with `status` and every other process in the sandbox is gone; pid 1
    /// exits next, with that status.
    Done { status: i32 },
    /// From the parent, at once when the run inspects: the session CA's certificate (PEM),
    /// made after the clone so that its key is never in the sandbox's memory; pid 1 lays
    /// the trust bundle with it (trust.rs).
    Trust { ca_pem: String },
    /// From the parent, after a probe that passed: netbox's own checks passed too; start
    /// the command.
    Start,
    /// `--fetch`: CMD1 has exited with `status` and every process it left is gone. On 0,
    /// pid 1 waits for `Cut`; otherwise it exits with that status and CMD never runs.
    FetchDone { status: i32 },
    /// From the parent, after `FetchDone { status: 0 }`: the bridge has stopped and its
    /// listeners are closed; prove the cut and run CMD.
    Cut,
    /// CMD's terminal (terminal.rs): the master end of the pty pid 1 made inside the
    /// sandbox (attached as an fd), sent before CMD starts.
    Terminal,
    /// A setup step failed; CMD will not run.
    SetupFailed {
        step: String,
        detail: String,
        /// How to fix it, when known (user namespaces disabled, say).
        hint: Option<String>,
    },
}

/// One end of the channel.
pub struct Channel {
    fd: OwnedFd,
}

/// Makes both ends; the parent keeps one, the sandbox the other.
pub fn pair() -> std::io::Result<(Channel, Channel)> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    Ok((Channel { fd: a }, Channel { fd: b }))
}

impl Channel {
    pub fn send(&self, msg: &SyncMsg, fds: &[RawFd]) -> Result<(), String> {
        send_on(self.fd.as_raw_fd(), msg, fds)
    }

    /// Waits for the next message (pid 1's side; fds attached to it are closed).
    pub fn recv(&self) -> Result<SyncMsg, String> {
        let mut buf = vec![0u8; MAX_MESSAGE_BYTES];
        loop {
            match crate::sys::fd::recv_with_fds(self.fd.as_fd(), &mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("receive: {e}")),
                Ok((0, _)) => return Err("netbox closed the channel".into()),
                Ok((len, _)) => {
                    return serde_json::from_slice(&buf[..len]).map_err(|e| format!("decode: {e}"))
                }
            }
        }
    }

    /// Whether the other end is closed (the process holding it is gone).
    pub fn peer_closed(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => fds[0]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
            Err(_) => true,
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One message as one packet, with `fds` attached.
fn send_on(socket: RawFd, msg: &SyncMsg, fds: &[RawFd]) -> Result<(), String> {
    let bytes = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
    if fds.is_empty() {
        // send(2), a sendto without an address, which the sandbox's seccomp filter lets
        // by; sendmsg would wait for netbox's answer, and the message that hands netbox
        // the filter's listener is one of these.
        nix::sys::socket::send(socket, &bytes, MsgFlags::empty())
            .map_err(|e| format!("send: {e}"))?;
        return Ok(());
    }
    let iov = [IoSlice::new(&bytes)];
    let cmsgs = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(socket, &iov, &cmsgs, MsgFlags::empty(), None)
        .map_err(|e| format!("send: {e}"))?;
    Ok(())
}

/// The parent's end, read from an async runtime without a blocked thread.
pub struct AsyncChannel {
    fd: tokio::io::unix::AsyncFd<OwnedFd>,
}

impl AsyncChannel {
    pub fn new(channel: Channel) -> std::io::Result<AsyncChannel> {
        nix::fcntl::fcntl(
            &channel.fd,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        Ok(AsyncChannel {
            fd: crate::sys::fd::register_readable(channel.fd)?,
        })
    }

    /// Sends a message without fds. The parent says one short thing, into a socket buffer
    /// that is otherwise empty, so the non-blocking send cannot find it full.
    pub fn send(&self, msg: &SyncMsg) -> Result<(), String> {
        send_on(self.fd.get_ref().as_raw_fd(), msg, &[])
    }

    /// The next message; `Ok(None)` once every sandbox process has closed its end.
    pub async fn recv(&self) -> Result<Option<(SyncMsg, Vec<OwnedFd>)>, String> {
        let mut buf = vec![0u8; MAX_MESSAGE_BYTES];
        loop {
            let mut ready = self
                .fd
                .readable()
                .await
                .map_err(|e| format!("receive: {e}"))?;
            match crate::sys::fd::recv_with_fds(self.fd.get_ref().as_fd(), &mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    ready.clear_ready();
                    continue;
                }
                Err(e) => return Err(format!("receive: {e}")),
                Ok((0, _)) => return Ok(None),
                Ok((len, fds)) => {
                    let msg =
                        serde_json::from_slice(&buf[..len]).map_err(|e| format!("decode: {e}"))?;
                    return Ok(Some((msg, fds)));
                }
            }
        }
    }
}
