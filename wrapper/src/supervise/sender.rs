//! Sends made for CMD. A send that names an address (`sendto` with one, every `sendmsg`
//! and `sendmmsg`, whose names the filter cannot see) is answered by netbox, never let
//! run: the kernel would read the caller's fd table and memory again, and another thread
//! could by then have put a Unix datagram socket on that fd and a host socket's path in
//! the message (connector.rs says the same of connects). So netbox reads each message
//! once (its name, its data, its ancillary data, with the fds it passes copied) and sends
//! it on a copy of the caller's socket; the count or the errno is the caller's.
//!
//! What differs from the kernel's own: explicit credentials (`SCM_CREDENTIALS`) are left
//! out (a receiver that asks for them gets netbox's, as it would from the kernel for an
//! unmarked message); `MSG_ZEROCOPY` is dropped (the copy netbox sends from is its own);
//! a stream send of more than `MAX_DATA` bytes sends that much (a partial send, which
//! stream programs loop on); SIGPIPE is raised in the caller's thread as the kernel
//! would.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::supervise::writejudge::{int_arg, uint_arg};
use crate::sys::seccomp::{self, Notification};

/// Data read for one call at most; a datagram this large is past any socket's limit.
const MAX_DATA: usize = 4 << 20;
/// Ancillary data read for one message at most (the kernel's optmem_max is smaller).
const MAX_CONTROL: usize = 64 << 10;
/// `UIO_MAXIOV`: the kernel's limit on a message's buffers, and on sendmmsg's messages.
const MAX_IOV: u64 = 1024;
/// `struct msghdr` and `struct mmsghdr` (64-bit).
const MSGHDR_LEN: u64 = 56;
const MMSGHDR_LEN: u64 = 64;
/// linux/socket.h.
const MSG_ZEROCOPY: i32 = 0x0400_0000;

/// One message, read.
pub struct Outgoing {
    /// Its address, as bytes (empty: none); a Unix path may be replaced by netbox's own
    /// name for the file it decided on.
    pub name: Vec<u8>,
    pub data: Vec<u8>,
    /// Ancillary data, with passed fds replaced by netbox's copies of them.
    pub control: Vec<u8>,
    /// The copies, held until sent.
    pub passed: Vec<OwnedFd>,
    /// Whether the data was cut at `MAX_DATA`.
    cut: bool,
    /// sendmmsg: where this message's `msg_len` goes in the caller's memory.
    len_at: Option<u64>,
}

/// One call's messages.
pub struct Send {
    /// The caller (its thread), for SIGPIPE and sendmmsg's counts.
    pub pid: u32,
    pub flags: i32,
    pub messages: Vec<Outgoing>,
    /// sendmmsg: answered with the number of messages sent.
    pub many: bool,
}

/// Reads the call's messages, or the errno the kernel would fail it with.
pub fn read(n: &Notification) -> Result<Send, i32> {
    let pid = n.pid;
    match n.nr {
        libc::SYS_sendto => {
            let [_, buffer, len, flags, address, address_len] = n.args;
            let name = read_name(pid, address, int_arg(address_len), true)?;
            let (data, cut) = read_data(pid, &[(buffer, len)])?;
            Ok(Send {
                pid,
                flags: int_arg(flags),
                messages: vec![Outgoing {
                    name,
                    data,
                    control: Vec::new(),
                    passed: Vec::new(),
                    cut,
                    len_at: None,
                }],
                many: false,
            })
        }
        libc::SYS_sendmsg => Ok(Send {
            pid,
            flags: int_arg(n.args[2]),
            messages: vec![read_message(pid, n.args[1])?],
            many: false,
        }),
        libc::SYS_sendmmsg => {
            let count = u64::from(uint_arg(n.args[2])).min(MAX_IOV);
            let mut messages = Vec::new();
            for i in 0..count {
                let at = n.args[1].wrapping_add(i * MMSGHDR_LEN);
                match read_message(pid, at) {
                    Ok(mut message) => {
                        message.len_at = Some(at + MSGHDR_LEN);
                        messages.push(message);
                    }
                    // The kernel sends the messages before one it cannot read.
                    Err(errno) if messages.is_empty() => return Err(errno),
                    Err(_) => break,
                }
            }
            Ok(Send {
                pid,
                flags: int_arg(n.args[3]),
                messages,
                many: true,
            })
        }
        _ => Err(libc::ENOSYS),
    }
}

/// A socket address: none for a NULL pointer or length 0; EINVAL for a negative length,
/// or (`strict`, sendto's) one past sockaddr_storage, which a message header's is cut to.
fn read_name(pid: u32, address: u64, len: i32, strict: bool) -> Result<Vec<u8>, i32> {
    let len = usize::try_from(len).map_err(|_| libc::EINVAL)?;
    if address == 0 || len == 0 {
        return Ok(Vec::new());
    }
    let max = std::mem::size_of::<libc::sockaddr_storage>();
    if len > max && strict {
        return Err(libc::EINVAL);
    }
    seccomp::read_memory(pid, address, len.min(max)).map_err(|_| libc::EFAULT)
}

/// The buffers' bytes, in order, up to `MAX_DATA`.
fn read_data(pid: u32, buffers: &[(u64, u64)]) -> Result<(Vec<u8>, bool), i32> {
    let mut data = Vec::new();
    let mut cut = false;
    for &(at, len) in buffers {
        let len = usize::try_from(len).map_err(|_| libc::EINVAL)?;
        let room = MAX_DATA - data.len();
        if len > room {
            cut = true;
        }
        let take = len.min(room);
        if take > 0 {
            data.extend(seccomp::read_memory(pid, at, take).map_err(|_| libc::EFAULT)?);
        }
        if cut {
            break;
        }
    }
    Ok((data, cut))
}

/// One `struct msghdr` at `at`.
fn read_message(pid: u32, at: u64) -> Result<Outgoing, i32> {
    let header = seccomp::read_memory(pid, at, usize::try_from(MSGHDR_LEN).unwrap_or(56))
        .map_err(|_| libc::EFAULT)?;
    let word =
        |offset: usize| u64::from_ne_bytes(header[offset..offset + 8].try_into().unwrap_or([0; 8]));
    let name_len = i32::from_ne_bytes(header[8..12].try_into().unwrap_or([0; 4]));
    let (iov, iov_len, control, control_len) = (word(16), word(24), word(32), word(40));
    let name = read_name(pid, word(0), name_len, false)?;
    if iov_len > MAX_IOV {
        return Err(libc::EMSGSIZE);
    }
    let vectors = if iov_len == 0 {
        Vec::new()
    } else {
        seccomp::read_memory(pid, iov, usize::try_from(iov_len * 16).unwrap_or(0))
            .map_err(|_| libc::EFAULT)?
    };
    let buffers: Vec<(u64, u64)> = vectors
        .chunks_exact(16)
        .map(|v| {
            (
                u64::from_ne_bytes(v[0..8].try_into().unwrap_or([0; 8])),
                u64::from_ne_bytes(v[8..16].try_into().unwrap_or([0; 8])),
            )
        })
        .collect();
    let total = buffers
        .iter()
        .try_fold(0u64, |sum, (_, len)| sum.checked_add(*len));
    if total.is_none_or(|t| t > i64::MAX as u64) {
        return Err(libc::EINVAL);
    }
    let (data, cut) = read_data(pid, &buffers)?;
    let (control, passed) = if control == 0 || control_len == 0 {
        (Vec::new(), Vec::new())
    } else {
        let len = usize::try_from(control_len).unwrap_or(usize::MAX);
        if len > MAX_CONTROL {
            return Err(libc::ENOBUFS);
        }
        let raw = seccomp::read_memory(pid, control, len).map_err(|_| libc::EFAULT)?;
        translate_control(pid, &raw)?
    };
    Ok(Outgoing {
        name,
        data,
        control,
        passed,
        cut,
        len_at: None,
    })
}

/// `struct cmsghdr`: cmsg_len (size_t), cmsg_level, cmsg_type; data 8-aligned after it.
const CMSG_HEADER: usize = 16;

fn aligned(len: usize) -> usize {
    (len + 7) & !7
}

/// The ancillary data with each `SCM_RIGHTS` fd replaced by netbox's copy of the caller's
/// (held in the second value), `SCM_CREDENTIALS` left out, and the rest as it was.
fn translate_control(pid: u32, raw: &[u8]) -> Result<(Vec<u8>, Vec<OwnedFd>), i32> {
    let mut out = Vec::new();
    let mut passed = Vec::new();
    let mut at = 0;
    while at + CMSG_HEADER <= raw.len() {
        let len = usize::try_from(u64::from_ne_bytes(
            raw[at..at + 8].try_into().unwrap_or([0; 8]),
        ))
        .unwrap_or(usize::MAX);
        if len < CMSG_HEADER || len > raw.len() - at {
            return Err(libc::EINVAL);
        }
        let level = i32::from_ne_bytes(raw[at + 8..at + 12].try_into().unwrap_or([0; 4]));
        let kind = i32::from_ne_bytes(raw[at + 12..at + 16].try_into().unwrap_or([0; 4]));
        let data = &raw[at + CMSG_HEADER..at + len];
        let start = out.len();
        match (level, kind) {
            (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                let mut ours = Vec::with_capacity(data.len());
                for fd in data.chunks_exact(4) {
                    let fd = i32::from_ne_bytes(fd.try_into().unwrap_or([0xff; 4]));
                    let copy =
                        crate::sys::process::copy_fd_of_thread(pid, fd).map_err(|_| libc::EBADF)?;
                    ours.extend_from_slice(&copy.as_raw_fd().to_ne_bytes());
                    passed.push(copy);
                }
                out.extend_from_slice(&((CMSG_HEADER + ours.len()) as u64).to_ne_bytes());
                out.extend_from_slice(&level.to_ne_bytes());
                out.extend_from_slice(&kind.to_ne_bytes());
                out.extend_from_slice(&ours);
            }
            (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) => {}
            _ => out.extend_from_slice(&raw[at..at + len]),
        }
        out.resize(start + aligned(out.len() - start), 0);
        at += aligned(len);
    }
    Ok((out, passed))
}

/// Sends the messages on `socket` (the caller's, copied); the caller's answer.
pub fn send(socket: &OwnedFd, send: &Send) -> Result<i64, i32> {
    let stream = nix::sys::socket::getsockopt(socket, nix::sys::socket::sockopt::SockType)
        .is_ok_and(|t| t == nix::sys::socket::SockType::Stream);
    let flags = (send.flags | libc::MSG_NOSIGNAL) & !MSG_ZEROCOPY;
    let mut sent = 0i64;
    for message in &send.messages {
        let result = if message.cut && !stream {
            Err(libc::EMSGSIZE)
        } else {
            crate::sys::socket::sendmsg_raw(
                socket.as_fd(),
                &message.name,
                &message.data,
                &message.control,
                flags,
            )
        };
        match result {
            Ok(bytes) => {
                if !send.many {
                    return Ok(i64::try_from(bytes).unwrap_or(i64::MAX));
                }
                if let Some(at) = message.len_at {
                    let len = u32::try_from(bytes).unwrap_or(u32::MAX);
                    let _ = seccomp::write_memory(send.pid, at, &len.to_ne_bytes());
                }
                sent += 1;
            }
            Err(errno) => {
                if errno == libc::EPIPE && send.flags & libc::MSG_NOSIGNAL == 0 {
                    raise_sigpipe(send.pid);
                }
                return if sent > 0 { Ok(sent) } else { Err(errno) };
            }
        }
    }
    Ok(sent)
}

/// SIGPIPE in the caller's thread, as the kernel raises it for a send on a closed pipe.
fn raise_sigpipe(tid: u32) {
    if let Some((tgid, _)) = crate::supervise::writejudge::thread_group(tid) {
        let _ = crate::sys::process::tgkill(tgid, tid, nix::sys::signal::Signal::SIGPIPE);
    }
}
