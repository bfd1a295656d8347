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

use crate::probe::ProbeReport;

/// Largest message, in bytes (a probe report is a few KiB; the buffer is zeroed per
/// receive, so it is kept modest).
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// What the sandbox tells the parent, in order (and the one thing the parent says).
#[derive(Debug, Serialize, Deserialize)]
pub enum SyncMsg {
    /// Parent to sandbox: the placeholders exist; build the filesystem.
    Proceed,
    /// The proxy listeners inside the namespace (attached as fds).
    Listeners { count: usize },
    /// The live probe ran; CMD starts only if it passed.
    Probe(ProbeReport),
    /// While CMD ran, a pinned path stopped being a mount of its own (changed on the host);
    /// the sandbox was stopped.
    PinLost { path: std::path::PathBuf },
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
        let bytes = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        let iov = [IoSlice::new(&bytes)];
        let cmsgs = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsgs };
        sendmsg::<()>(self.fd.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)
            .map_err(|e| format!("send: {e}"))?;
        Ok(())
    }

    /// Waits for one message (blocking); `Ok(None)` if the other side closed.
    pub fn recv_blocking(&self) -> Result<Option<SyncMsg>, String> {
        let mut buf = vec![0u8; MAX_MESSAGE_BYTES];
        let (len, _fds) = crate::sys::fd::recv_with_fds(self.fd.as_fd(), &mut buf)
            .map_err(|e| format!("receive: {e}"))?;
        if len == 0 {
            return Ok(None);
        }
        serde_json::from_slice(&buf[..len])
            .map(Some)
            .map_err(|e| format!("decode: {e}"))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
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

    /// Sends a message. The channel is nearly idle, so the small packet always fits the
    /// socket buffer and a non-blocking send completes at once.
    pub fn send(&self, msg: &SyncMsg) -> Result<(), String> {
        let bytes = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        let iov = [IoSlice::new(&bytes)];
        sendmsg::<()>(
            self.fd.get_ref().as_raw_fd(),
            &iov,
            &[],
            MsgFlags::empty(),
            None,
        )
        .map_err(|e| format!("send: {e}"))?;
        Ok(())
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
