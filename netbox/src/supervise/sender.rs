//! Sends made for CMD. A send that names an address (`sendto` with one, every `sendmsg`
//! and `sendmmsg`, whose names the filter cannot see) is answered by netbox, never let
//! run: the kernel would read the caller's fd table and memory again, and another thread
//! could by then have put a Unix datagram socket on that fd and a host socket's path in
//! the message (connector.rs says the same of connects). So netbox reads each message's
//! name once, on the watcher's thread, where it is decided; a worker then reads the rest
//! of each message (its data, its ancillary data, with the fds it passes copied), one
//! message at a time, and sends it on a copy of the caller's socket; the count or the
//! errno is the caller's.
//!
//! Memory: a command can ask for a thousand messages of megabytes in one `sendmmsg`, from
//! many threads at once, and what netbox reads for it lies outside the command's memory
//! limit. So a worker holds one message at a time, a stream's data in `CHUNK`s, and all
//! workers together at most `Budget`'s bytes; a send that would pass it waits.
//!
//! What differs from the kernel's own: explicit credentials (`SCM_CREDENTIALS`) are left
//! out (a receiver that asks for them gets netbox's, as it would from the kernel for an
//! unmarked message; the kernel would refuse netbox the caller's, unless netbox is root,
//! and then it would accept any the caller wrote); `MSG_ZEROCOPY` is dropped (the copy
//! netbox sends from is its own); a stream send of more than `MAX_DATA` bytes sends that
//! much (a partial send, which stream programs loop on); SIGPIPE is raised in the
//! caller's thread as the kernel would.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::supervise::budget::{Amount, Budget, Held};
use crate::supervise::writejudge::{int_arg, uint_arg};
use crate::sys::seccomp::{self, Notification};

/// A stream's data sent for one message at most; a datagram this large is past any
/// socket's limit.
const MAX_DATA: usize = 4 << 20;
/// A stream's data is read and sent in pieces of this size at most.
const CHUNK: usize = 256 << 10;
/// A datagram larger than the socket's send buffer and than this fails with EMSGSIZE
/// unread (the kernel's limit is the send buffer for Unix datagrams, 64 KiB for UDP).
const DATAGRAM_FLOOR: usize = 64 << 10;
/// Ancillary data read for one message at most (the kernel's optmem_max is smaller).
const MAX_CONTROL: usize = 64 << 10;
/// `UIO_MAXIOV`: the kernel's limit on a message's buffers.
const MAX_IOV: u64 = 1024;
/// sendmmsg's messages taken from one call: the rest are left for the caller's next call
/// (sendmmsg answers with how many it sent, and callers loop on a short count), so that a
/// call waiting in the queue holds little.
const MAX_MESSAGES: u64 = 64;
/// `SCM_MAX_FD`: the fds one message may pass (more is EINVAL from the kernel).
const MAX_PASSED_FDS: usize = 253;
/// `struct msghdr` and `struct mmsghdr` (64-bit).
const MSGHDR_LEN: u64 = 56;
const MMSGHDR_LEN: u64 = 64;
/// linux/socket.h.
const MSG_ZEROCOPY: i32 = 0x0400_0000;

/// Where a message's data lies in the caller's memory.
enum Data {
    /// sendto's one buffer.
    Buffer { at: u64, len: u64 },
    /// A message header's array of `struct iovec`.
    Vector { at: u64, count: u64 },
}

/// One message: its name, read and decided; the rest still in the caller's memory.
pub struct Outgoing {
    /// Its address, as bytes (empty: none); a Unix path may be replaced by netbox's own
    /// name for the file it decided on.
    pub name: Vec<u8>,
    data: Data,
    /// Its ancillary data: address and length.
    control: (u64, u64),
    /// sendmmsg: where this message's `msg_len` goes in the caller's memory.
    len_at: Option<u64>,
}

/// One call's messages.
pub struct Send {
    /// The caller (its thread): its memory, its fds, SIGPIPE and sendmmsg's counts.
    pub pid: u32,
    pub flags: i32,
    pub messages: Vec<Outgoing>,
    /// sendmmsg: answered with the number of messages sent.
    pub many: bool,
}

/// Reads the call's message headers and names, or the errno the kernel would fail it
/// with.
pub fn read(n: &Notification) -> Result<Send, i32> {
    let pid = n.pid;
    match n.nr {
        libc::SYS_sendto => {
            let [_, buffer, len, flags, address, address_len] = n.args;
            let name = read_name(pid, address, int_arg(address_len), true)?;
            Ok(Send {
                pid,
                flags: int_arg(flags),
                messages: vec![Outgoing {
                    name,
                    data: Data::Buffer { at: buffer, len },
                    control: (0, 0),
                    len_at: None,
                }],
                many: false,
            })
        }
        libc::SYS_sendmsg => Ok(Send {
            pid,
            flags: int_arg(n.args[2]),
            messages: vec![read_header(pid, n.args[1])?],
            many: false,
        }),
        libc::SYS_sendmmsg => {
            let count = u64::from(uint_arg(n.args[2])).min(MAX_MESSAGES);
            let mut messages = Vec::new();
            for i in 0..count {
                let at = n.args[1].wrapping_add(i * MMSGHDR_LEN);
                match read_header(pid, at) {
                    Ok(mut message) => {
                        message.len_at = Some(at.wrapping_add(MSGHDR_LEN));
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

/// One `struct msghdr` at `at`, with its name.
fn read_header(pid: u32, at: u64) -> Result<Outgoing, i32> {
    let header = seccomp::read_memory(pid, at, usize::try_from(MSGHDR_LEN).unwrap_or(56))
        .map_err(|_| libc::EFAULT)?;
    let word =
        |offset: usize| u64::from_ne_bytes(header[offset..offset + 8].try_into().unwrap_or([0; 8]));
    let name_len = i32::from_ne_bytes(header[8..12].try_into().unwrap_or([0; 4]));
    Ok(Outgoing {
        name: read_name(pid, word(0), name_len, false)?,
        data: Data::Vector {
            at: word(16),
            count: word(24),
        },
        control: (word(32), word(40)),
        len_at: None,
    })
}

impl Outgoing {
    /// The message's buffers, as (address, length) in the caller's memory.
    fn buffers(&self, pid: u32) -> Result<Vec<(u64, u64)>, i32> {
        let (at, count) = match self.data {
            Data::Buffer { at, len } => return Ok(vec![(at, len)]),
            Data::Vector { at, count } => (at, count),
        };
        if count > MAX_IOV {
            return Err(libc::EMSGSIZE);
        }
        if count == 0 {
            return Ok(Vec::new());
        }
        let vectors = seccomp::read_memory(pid, at, usize::try_from(count * 16).unwrap_or(0))
            .map_err(|_| libc::EFAULT)?;
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
        Ok(buffers)
    }

    /// Its ancillary data as the caller wrote it (checked: see `check_control`), and how
    /// many fds it passes.
    fn read_control(&self, pid: u32) -> Result<(Vec<u8>, usize), i32> {
        let (at, len) = self.control;
        if at == 0 || len == 0 {
            return Ok((Vec::new(), 0));
        }
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > MAX_CONTROL {
            return Err(libc::ENOBUFS);
        }
        let raw = seccomp::read_memory(pid, at, len).map_err(|_| libc::EFAULT)?;
        let fds = check_control(&raw)?;
        Ok((raw, fds))
    }
}

/// `len` bytes of the buffers' concatenation from `offset` on.
fn read_range(pid: u32, buffers: &[(u64, u64)], offset: usize, len: usize) -> Result<Vec<u8>, i32> {
    let mut data = Vec::with_capacity(len);
    let mut skip = offset as u64;
    for &(at, size) in buffers {
        if data.len() == len {
            break;
        }
        if skip >= size {
            skip -= size;
            continue;
        }
        let room = (len - data.len()) as u64;
        let take = (size - skip).min(room);
        let start = at.wrapping_add(skip);
        skip = 0;
        let take = usize::try_from(take).map_err(|_| libc::EINVAL)?;
        data.extend(seccomp::read_memory(pid, start, take).map_err(|_| libc::EFAULT)?);
    }
    Ok(data)
}

/// `struct cmsghdr`: cmsg_len (size_t), cmsg_level, cmsg_type; data 8-aligned after it.
const CMSG_HEADER: usize = 16;

fn aligned(len: usize) -> usize {
    (len + 7) & !7
}

/// What ancillary data netbox sends for CMD: the kinds any program may send. The kernel
/// checks a send's privileges against the thread that makes it, netbox's, which holds
/// every capability over the sandbox's namespaces; so a kind that needs one (a packet
/// mark, a priority, IPv6 extension headers, IP options) is refused (EPERM), as it would
/// be from CMD, and so is any kind not known here.
fn allowed_control(level: i32, kind: i32) -> bool {
    /// linux/net_tstamp.h, linux/udp.h and asm-generic/socket.h numbers libc may lack.
    const SCM_TIMESTAMPING_OLD: i32 = 37;
    const SCM_TXTIME: i32 = 61;
    const SCM_TIMESTAMPING_NEW: i32 = 65;
    const UDP_SEGMENT: i32 = 103;
    match level {
        libc::SOL_SOCKET => matches!(
            kind,
            libc::SCM_RIGHTS
                | libc::SCM_CREDENTIALS
                | SCM_TIMESTAMPING_OLD
                | SCM_TXTIME
                | SCM_TIMESTAMPING_NEW
        ),
        libc::IPPROTO_IP => matches!(kind, libc::IP_TOS | libc::IP_TTL | libc::IP_PKTINFO),
        libc::IPPROTO_IPV6 => matches!(
            kind,
            libc::IPV6_PKTINFO | libc::IPV6_HOPLIMIT | libc::IPV6_TCLASS | libc::IPV6_DONTFRAG
        ),
        libc::SOL_UDP => kind == UDP_SEGMENT,
        _ => false,
    }
}

/// One header of ancillary data: level, kind, data.
type ControlMessage<'a> = (i32, i32, &'a [u8]);

/// Each header of the ancillary data.
fn control_messages(raw: &[u8]) -> Result<Vec<ControlMessage<'_>>, i32> {
    let mut out = Vec::new();
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
        out.push((level, kind, &raw[at + CMSG_HEADER..at + len]));
        at += aligned(len);
    }
    Ok(out)
}

/// Checks the ancillary data before anything of it is acted on: its kinds (see
/// `allowed_control`) and the fds it passes, at most the kernel's `SCM_MAX_FD`. Returns
/// how many fds it passes.
fn check_control(raw: &[u8]) -> Result<usize, i32> {
    let mut fds = 0;
    for (level, kind, data) in control_messages(raw)? {
        if !allowed_control(level, kind) {
            return Err(libc::EPERM);
        }
        if (level, kind) == (libc::SOL_SOCKET, libc::SCM_RIGHTS) {
            fds += data.len() / 4;
        }
    }
    if fds > MAX_PASSED_FDS {
        return Err(libc::EINVAL);
    }
    Ok(fds)
}

/// The ancillary data with each `SCM_RIGHTS` fd replaced by netbox's copy of the caller's
/// (held in the second value), `SCM_CREDENTIALS` left out, and the rest as it was.
fn translate_control(pid: u32, raw: &[u8]) -> Result<(Vec<u8>, Vec<OwnedFd>), i32> {
    let mut out = Vec::new();
    let mut passed = Vec::new();
    for (level, kind, data) in control_messages(raw)? {
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
            _ => {
                out.extend_from_slice(&((CMSG_HEADER + data.len()) as u64).to_ne_bytes());
                out.extend_from_slice(&level.to_ne_bytes());
                out.extend_from_slice(&kind.to_ne_bytes());
                out.extend_from_slice(data);
            }
        }
        out.resize(start + aligned(out.len() - start), 0);
    }
    Ok((out, passed))
}

/// Sends the messages on `socket` (the caller's, copied); the caller's answer. What is
/// read from the caller is used only once `caller_waits` says the caller is still the
/// one waiting (its pid not yet another process's); `budget`, if any, bounds the bytes
/// held.
pub fn send(
    socket: &OwnedFd,
    send: &Send,
    budget: Option<&Arc<Budget>>,
    caller_waits: &dyn Fn() -> bool,
) -> Result<i64, i32> {
    let stream = nix::sys::socket::getsockopt(socket, nix::sys::socket::sockopt::SockType)
        .is_ok_and(|t| t == nix::sys::socket::SockType::Stream);
    let sndbuf =
        nix::sys::socket::getsockopt(socket, nix::sys::socket::sockopt::SndBuf).unwrap_or(0);
    let flags = (send.flags | libc::MSG_NOSIGNAL) & !MSG_ZEROCOPY;
    let one = OneSend {
        socket,
        pid: send.pid,
        flags,
        budget,
        caller_waits,
    };
    let mut sent = 0i64;
    for message in &send.messages {
        let result = if stream {
            one.stream(message)
        } else {
            one.datagram(message, sndbuf.clamp(DATAGRAM_FLOOR, MAX_DATA))
        };
        match result {
            Ok(bytes) => {
                if !send.many {
                    return Ok(i64::try_from(bytes).unwrap_or(i64::MAX));
                }
                // Written only while the caller waits: its pid could otherwise be
                // another process's by now.
                if let Some(at) = message.len_at.filter(|_| caller_waits()) {
                    let len = u32::try_from(bytes).unwrap_or(u32::MAX);
                    let _ = seccomp::write_memory(send.pid, at, &len.to_ne_bytes());
                }
                sent += 1;
            }
            Err(errno) => {
                if errno == libc::EPIPE && send.flags & libc::MSG_NOSIGNAL == 0 && caller_waits() {
                    raise_sigpipe(send.pid);
                }
                return if sent > 0 { Ok(sent) } else { Err(errno) };
            }
        }
    }
    Ok(sent)
}

/// A message's ancillary data as netbox sends it, with the copies of the fds it passes
/// and what they hold of the budget (given back when dropped).
struct Control {
    bytes: Vec<u8>,
    /// Held open until sent: `bytes` names them by number.
    _passed: Vec<OwnedFd>,
    _held: Option<Held>,
}

/// What sending one message needs.
struct OneSend<'a> {
    socket: &'a OwnedFd,
    pid: u32,
    flags: i32,
    budget: Option<&'a Arc<Budget>>,
    caller_waits: &'a dyn Fn() -> bool,
}

impl OneSend<'_> {
    /// Bytes and fds taken from the budget (none without one); ENOENT if the caller is
    /// gone.
    fn hold(&self, bytes: usize, fds: usize) -> Result<Option<Held>, i32> {
        match self.budget {
            None => Ok(None),
            Some(budget) => budget
                .take(Amount { bytes, fds }, self.caller_waits)
                .map(Some)
                .ok_or(libc::ENOENT),
        }
    }

    /// The message's ancillary data with the fds it passes copied, the copies held
    /// against the budget first.
    fn control(&self, message: &Outgoing) -> Result<Control, i32> {
        let (raw, fds) = message.read_control(self.pid)?;
        if raw.is_empty() {
            return Ok(Control {
                bytes: raw,
                _passed: Vec::new(),
                _held: None,
            });
        }
        let held = self.hold(0, fds)?;
        let (bytes, passed) = translate_control(self.pid, &raw)?;
        Ok(Control {
            bytes,
            _passed: passed,
            _held: held,
        })
    }

    /// A stream's message: up to `MAX_DATA` bytes, a `CHUNK` at a time, the ancillary
    /// data (and the fds it passes, closed right after) with the first; a piece sent in
    /// part, or an error after some were sent, ends it with the bytes sent.
    fn stream(&self, message: &Outgoing) -> Result<usize, i32> {
        let buffers = message.buffers(self.pid)?;
        let total: u64 = buffers.iter().map(|(_, len)| len).sum();
        let want = usize::try_from(total).unwrap_or(usize::MAX).min(MAX_DATA);
        let mut control = Some(self.control(message)?);
        let mut done = 0;
        loop {
            let take = (want - done).min(CHUNK);
            let held = self.hold(take, 0);
            let result = held.and_then(|_held| {
                let data = read_range(self.pid, &buffers, done, take)?;
                if !(self.caller_waits)() {
                    return Err(libc::ENOENT);
                }
                let bytes: &[u8] = control.as_ref().map_or(&[], |c| &c.bytes);
                crate::sys::socket::sendmsg_raw(
                    self.socket.as_fd(),
                    &message.name,
                    &data,
                    bytes,
                    self.flags,
                )
            });
            // The fds it passed go with the first piece: closed (and given back) now.
            control.take();
            match result {
                Ok(bytes) => {
                    done += bytes;
                    if bytes < take || done >= want {
                        return Ok(done);
                    }
                }
                Err(_) if done > 0 => return Ok(done),
                Err(errno) => return Err(errno),
            }
        }
    }

    /// A datagram: whole, or EMSGSIZE unread past `limit`.
    fn datagram(&self, message: &Outgoing, limit: usize) -> Result<usize, i32> {
        let buffers = message.buffers(self.pid)?;
        let total: u64 = buffers.iter().map(|(_, len)| len).sum();
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        if total > limit {
            return Err(libc::EMSGSIZE);
        }
        let control = self.control(message)?;
        let _held = self.hold(total, 0)?;
        let data = read_range(self.pid, &buffers, 0, total)?;
        if !(self.caller_waits)() {
            return Err(libc::ENOENT);
        }
        let sent = crate::sys::socket::sendmsg_raw(
            self.socket.as_fd(),
            &message.name,
            &data,
            &control.bytes,
            self.flags,
        );
        drop(control);
        sent
    }
}

/// SIGPIPE in the caller's thread, as the kernel raises it for a send on a closed pipe.
fn raise_sigpipe(tid: u32) {
    if let Some((tgid, _)) = crate::supervise::writejudge::thread_group(tid) {
        let _ = crate::sys::process::tgkill(tgid, tid, nix::sys::signal::Signal::SIGPIPE);
    }
}
