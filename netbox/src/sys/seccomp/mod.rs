//! seccomp user notification (seccomp(2), seccomp_unotify(2)): a classic-BPF filter that
//! hands write-intent syscalls and the ones that send to an address (connect, sendto with
//! an address, sendmsg, sendmmsg) to a listener fd, and the ioctls the supervisor answers
//! them with. Raw syscalls and `libc` constants: seccompiler has no notify action, and
//! libseccomp would need its C headers at build time.
//!
//! The filter's program is built in `filter`; here it is installed, and the notifications
//! it raises are received, read (the caller's memory) and answered.

mod filter;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::notified::{self};
pub use filter::build;
use filter::{NR, X32_SYSCALL_BIT};

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (linux/seccomp.h, 6.6+; not in libc yet).
const SYNC_WAKE_UP: u64 = 1;

/// Installs `filter` on the calling thread (and so on everything it starts from now on)
/// and returns the listener its notifications go to. Needs no_new_privs (or
/// CAP_SYS_ADMIN in the user namespace).
///
/// A notified task waits for the answer; by default a signal interrupts that wait and
/// the syscall fails with EINTR, which programs do not expect from open or mkdir. With
/// WAIT_KILLABLE_RECV (5.19+) only a fatal signal does, once netbox has the
/// notification; older kernels refuse the flag and get the default.
pub fn install_with_listener(filter: &[libc::sock_filter]) -> io::Result<OwnedFd> {
    let killable =
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    match install(filter, killable) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            install(filter, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)
        }
        result => result,
    }
}

fn install(filter: &[libc::sock_filter], flags: libc::c_ulong) -> io::Result<OwnedFd> {
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len()).map_err(|_| io::Error::other("filter too long"))?,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `filter`, which outlives the call; the kernel copies the
    // program and reads nothing else. The return value is a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("listener fd out of range"))?;
    // SAFETY: the kernel just created this fd for us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// io_uring_setup, io_uring_enter and io_uring_register: the same numbers on every ABI
/// the kernels netbox runs on have (x86_64, x32 with its bit, i386; aarch64, arm).
pub const IO_URING: [u32; 3] = [425, 426, 427];

/// A filter that fails io_uring's syscalls with ENOSYS on every ABI, as a kernel built
/// without io_uring would, so that programs fall back to ordinary syscalls: its
/// operations would bypass the denied-write log, and it is a large attack surface.
// The BPF_* opcode parts are u32 constants in libc, each below 0x100 by definition.
#[allow(clippy::cast_possible_truncation)]
pub fn io_uring_denial() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let numbers: Vec<u32> = IO_URING
        .iter()
        .chain(&IO_URING.map(|nr| nr | X32_SYSCALL_BIT))
        .copied()
        .collect();
    let mut filter = vec![libc::sock_filter {
        code: LD_W_ABS,
        jt: 0,
        jf: 0,
        k: NR,
    }];
    // Each comparison jumps to the last instruction (deny) or falls through; after them,
    // allow.
    let count = numbers.len();
    for (i, nr) in numbers.into_iter().enumerate() {
        filter.push(libc::sock_filter {
            code: JEQ_K,
            jt: u8::try_from(count - i).expect("a short filter"),
            jf: 0,
            k: nr,
        });
    }
    filter.push(libc::sock_filter {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    });
    filter.push(libc::sock_filter {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ERRNO | u32::try_from(libc::ENOSYS).unwrap_or(38),
    });
    filter
}

/// Installs a filter that hands nothing to a listener (on the calling thread, and so on
/// everything it starts from now on). Needs no_new_privs.
pub fn install_plain(filter: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len()).map_err(|_| io::Error::other("filter too long"))?,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `filter`, which outlives the call; the kernel copies the
    // program and reads nothing else. Without NEW_LISTENER it returns 0 or -1, no fd.
    let result = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &prog as *const libc::sock_fprog,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Tries to set up an io_uring instance of one entry (the probe's attempt).
pub fn try_io_uring_setup() -> io::Result<OwnedFd> {
    // struct io_uring_params: 120 bytes, zeroed (no flags), filled in by the kernel.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes the 120-byte params it is given, which live
    // until the call returns; it returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("io_uring fd out of range"))?;
    // SAFETY: the kernel just created this fd for us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One notified syscall.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    pub id: u64,
    /// The caller's pid in the listener's pid namespace.
    pub pid: u32,
    pub nr: i64,
    pub args: [u64; 6],
}

/// Asks the kernel to switch straight between the notified task and the answering thread
/// (6.6+). Measured here: about 10 us per notified call with it, 80-90 us without (two
/// cross-CPU wake-ups). Best effort; older kernels refuse it.
pub fn prefer_sync_wakeup(listener: BorrowedFd<'_>) {
    // SAFETY: the ioctl takes the flags by value and touches no memory of ours.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            SYNC_WAKE_UP,
        );
    }
}

/// Takes the next pending notification (wait for POLLIN first: this blocks).
pub fn receive(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    // SAFETY: seccomp_notif is plain integers, for which all-zero is valid; the kernel
    // requires it zeroed.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `req` is a live, correctly sized seccomp_notif the kernel fills in.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut req as *mut libc::seccomp_notif,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Notification {
        id: req.id,
        pid: req.pid,
        nr: i64::from(req.data.nr),
        args: req.data.args,
    })
}

/// Answers the notified syscall without running it: it returns `result` (a value, or an
/// errno) as if the kernel had.
pub fn answer(listener: BorrowedFd<'_>, id: u64, result: Result<i64, i32>) -> io::Result<()> {
    let (val, error) = match result {
        Ok(val) => (val, 0),
        Err(errno) => (0, -errno.abs()),
    };
    respond(
        listener,
        libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags: 0,
        },
    )
}

/// Lets the notified syscall run as if it had not been stopped: the kernel (the mounts)
/// decides its outcome.
pub fn let_it_run(listener: BorrowedFd<'_>, id: u64) -> io::Result<()> {
    respond(
        listener,
        libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: u32::try_from(libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE).unwrap_or(1),
        },
    )
}

/// Sends one answer to a notification (SECCOMP_IOCTL_NOTIF_SEND).
fn respond(listener: BorrowedFd<'_>, mut resp: libc::seccomp_notif_resp) -> io::Result<()> {
    // SAFETY: `resp` is a live, correctly sized seccomp_notif_resp the kernel reads.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the notification is still pending: its task has not died (and its pid been
/// reused) since it was received, so what was read from /proc/PID was that task's.
pub fn still_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the ioctl reads one u64 from `id`, which is live for the call.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &mut id as *mut u64,
        ) == 0
    }
}

/// Reads exactly `len` bytes from another process's memory (process_vm_readv(2), as
/// `read_c_string`), for a fixed-size structure: a socket address, a message header.
pub fn read_memory(pid: u32, address: u64, len: usize) -> io::Result<Vec<u8>> {
    let out = read_up_to(pid, address, len)?;
    if out.len() != len {
        return Err(io::Error::other("a short read of the caller's memory"));
    }
    Ok(out)
}

/// One process_vm_readv(2) of `len` bytes, which reads up to the first page it cannot.
fn read_up_to(pid: u32, address: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; len];
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes `out`, live and writable for its length; `remote` is only
    // an address in the other process, which the kernel checks.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    out.truncate(usize::try_from(n).unwrap_or(0));
    Ok(out)
}

/// Writes `bytes` into another process's memory at `address` (process_vm_writev(2)): the
/// answer to a call netbox made for it that reports back through memory (sendmmsg's
/// msg_len).
pub fn write_memory(pid: u32, address: u64, bytes: &[u8]) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: `local` describes `bytes`, live for the call, which the kernel only reads;
    // `remote` is only an address in the other process, which the kernel checks.
    let n = unsafe { libc::process_vm_writev(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if usize::try_from(n).unwrap_or(0) != bytes.len() {
        return Err(io::Error::other("a short write of the caller's memory"));
    }
    Ok(())
}

/// Reads a NUL-terminated string of at most `max` bytes from another process's memory
/// (process_vm_readv(2): the same access check as ptrace). Reads page by page, so a string
/// ending just before an unmapped page is still read.
pub fn read_c_string(pid: u32, address: u64, max: usize) -> io::Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = address;
    while out.len() < max {
        let room = usize::try_from(PAGE - at % PAGE).unwrap_or(4096);
        let mut chunk = vec![0u8; room.min(max - out.len())];
        let local = libc::iovec {
            iov_base: chunk.as_mut_ptr().cast(),
            iov_len: chunk.len(),
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: chunk.len(),
        };
        // SAFETY: `local` describes `chunk`, live and writable for its length; `remote`
        // is only an address in the other process, which the kernel checks.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = usize::try_from(n).unwrap_or(0);
        if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(out);
        }
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
        at += n as u64;
    }
    Err(io::Error::other("path longer than PATH_MAX"))
}
