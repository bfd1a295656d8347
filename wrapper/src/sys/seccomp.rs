//! seccomp user notification (seccomp(2), seccomp_unotify(2)): a classic-BPF filter that
//! hands write-intent syscalls and the ones that send to an address (connect, sendto with
//! an address, sendmsg, sendmmsg) to a listener fd, and the ioctls the supervisor answers
//! them with. Raw syscalls and `libc` constants: seccompiler has no notify action, and
//! libseccomp would need its C headers at build time.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::notified::{self, When};

/// `AUDIT_ARCH_*` of the architecture netbox is built for (linux/audit.h).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 syscalls on x86_64 carry this bit.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The other ABI a process of this architecture can call the kernel through (32-bit
/// compat: `int 0x80` on x86_64, AArch32 on aarch64), and its calls that connect or send
/// to an address (socketcall(2) included, which multiplexes them all). The filter refuses
/// them (`build`): netbox judges those calls where they name a Unix socket's path, and
/// reads their arguments in the native layout only.
#[cfg(target_arch = "x86_64")]
const COMPAT: (u32, &[u32]) = (0x4000_0003, &[102, 362, 369, 370, 345]);
#[cfg(target_arch = "aarch64")]
const COMPAT: (u32, &[u32]) = (0x4000_0028, &[283, 290, 296, 374]);

/// x32's connect, sendto, sendmsg and sendmmsg (without the x32 bit), refused likewise.
const X32_SENDS: [u32; 4] = [42, 44, 518, 538];

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (linux/seccomp.h, 6.6+; not in libc yet).
const SYNC_WAKE_UP: u64 = 1;

/// The open flags that mean "write": creating, truncating, or opening for writing.
pub const WRITE_INTENT: u32 =
    (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// Offsets into `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
fn arg_low(n: u32) -> u32 {
    // args[n] is a u64 at 16 + 8n; classic BPF loads 32 bits, the low half on little
    // endian, which is where open flags live.
    16 + 8 * n
}
fn arg_high(n: u32) -> u32 {
    arg_low(n) + 4
}

/// Syscalls notified whatever their arguments (`sys::notified`'s table).
pub fn always_notified() -> Vec<i64> {
    notified::TABLE
        .iter()
        .filter(|row| row.when == When::Always)
        .map(|row| row.nr)
        .collect()
}

/// Syscalls notified only with write intent in their flags: (syscall, flags argument).
fn notified_with_write_flags() -> Vec<(i64, u32)> {
    notified::TABLE
        .iter()
        .filter_map(|row| match row.when {
            When::WriteFlags(arg) => Some((row.nr, arg)),
            When::Always | When::NotNull(_) => None,
        })
        .collect()
}

/// Syscalls notified only when a pointer argument is not NULL: (syscall, argument).
fn notified_with_address() -> Vec<(i64, u32)> {
    notified::TABLE
        .iter()
        .filter_map(|row| match row.when {
            When::NotNull(arg) => Some((row.nr, arg)),
            When::Always | When::WriteFlags(_) => None,
        })
        .collect()
}

/// What decides a syscall notified only under a condition.
#[derive(Clone, Copy)]
enum Condition {
    /// Any write-intent bit in this (32-bit) flags argument.
    WriteFlags(u32),
    /// This (64-bit) pointer argument is not NULL: both halves are looked at, as an
    /// address above 4 GiB can have a zero low half.
    NotNull(u32),
}

fn conditional() -> Vec<(i64, Condition)> {
    notified_with_write_flags()
        .into_iter()
        .map(|(nr, arg)| (nr, Condition::WriteFlags(arg)))
        .chain(
            notified_with_address()
                .into_iter()
                .map(|(nr, arg)| (nr, Condition::NotNull(arg))),
        )
        .collect()
}

/// Where a conditional jump goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Next,
    Allow,
    Notify,
    /// Fail with ENOSYS.
    Deny,
    Label(usize),
}

/// A conditional jump's test of the accumulator against a constant.
#[derive(Clone, Copy, Debug)]
enum Test {
    Eq,
    Ge,
    /// Any of the constant's bits set.
    AnyBit,
}

/// One BPF instruction, with jumps still symbolic.
enum Insn {
    Load(u32),
    Jump {
        test: Test,
        k: u32,
        yes: Target,
        no: Target,
    },
    /// Return ALLOW here.
    Allow,
    Label(usize),
}

/// The filter: for this architecture's native syscalls, notify the write-intent ones and
/// the ones that send to an address, and allow everything else in the kernel. Other ABIs
/// (x32, 32-bit compat) are refused the calls that connect or send to an address (ENOSYS,
/// as a kernel without that ABI's networking would answer), and allowed the rest unseen:
/// the mounts refuse their writes all the same; only the log would miss them.
///
/// The syscall number is found by binary search rather than one comparison after another:
/// the kernel runs the filter for every syscall number once when it is installed (to
/// cache the ones always allowed), and for every open in the sandbox, whose verdict
/// depends on its flags.
pub fn build() -> Vec<libc::sock_filter> {
    let mut program = vec![
        Insn::Load(ARCH),
        Insn::Jump {
            test: Test::Eq,
            k: AUDIT_ARCH,
            yes: Target::Next,
            no: Target::Label(FOREIGN),
        },
        Insn::Load(NR),
        Insn::Jump {
            test: Test::Ge,
            k: X32_SYSCALL_BIT,
            yes: Target::Label(X32),
            no: Target::Next,
        },
    ];
    let flagged = conditional();
    let mut entries: Vec<(u32, Target)> = always_notified()
        .into_iter()
        .map(|nr| (nr32(nr), Target::Notify))
        .chain(
            flagged
                .iter()
                .enumerate()
                .map(|(label, (nr, _))| (nr32(*nr), Target::Label(label))),
        )
        .collect();
    // A number in both lists is notified whatever its flags: that entry sorts first and
    // is the one kept.
    entries.sort_unstable_by_key(|(nr, target)| (*nr, matches!(target, Target::Label(_))));
    entries.dedup_by_key(|(nr, _)| *nr);
    let mut next_label = flagged.len().max(X32 + 1);
    search(&entries, &mut program, &mut next_label);
    program.push(Insn::Label(FOREIGN));
    program.push(Insn::Jump {
        test: Test::Eq,
        k: COMPAT.0,
        yes: Target::Next,
        no: Target::Allow,
    });
    program.push(Insn::Load(NR));
    refuse_these(COMPAT.1.iter().copied(), &mut program);
    program.push(Insn::Label(X32));
    refuse_these(
        X32_SENDS.iter().map(|nr| nr | X32_SYSCALL_BIT),
        &mut program,
    );
    for (label, (_, condition)) in flagged.iter().enumerate() {
        program.push(Insn::Label(label));
        match *condition {
            Condition::WriteFlags(arg) => {
                program.push(Insn::Load(arg_low(arg)));
                program.push(Insn::Jump {
                    test: Test::AnyBit,
                    k: WRITE_INTENT,
                    yes: Target::Notify,
                    no: Target::Allow,
                });
            }
            Condition::NotNull(arg) => {
                for half in [arg_low(arg), arg_high(arg)] {
                    program.push(Insn::Load(half));
                    program.push(Insn::Jump {
                        test: Test::AnyBit,
                        k: u32::MAX,
                        yes: Target::Notify,
                        no: Target::Next,
                    });
                }
                program.push(Insn::Allow);
            }
        }
    }
    assemble(&program)
}

/// Labels of the filter's two tails; the conditional syscalls' labels are numbered from 0
/// and the search's after all of them (`build`).
const FOREIGN: usize = 1_000;
const X32: usize = 1_001;

/// With the syscall number loaded: ENOSYS for each of `numbers`, ALLOW for the rest.
fn refuse_these(numbers: impl Iterator<Item = u32>, program: &mut Vec<Insn>) {
    for nr in numbers {
        program.push(Insn::Jump {
            test: Test::Eq,
            k: nr,
            yes: Target::Deny,
            no: Target::Next,
        });
    }
    program.push(Insn::Allow);
}

/// A binary search over `entries` (sorted by syscall number) for the accumulator: each
/// number found jumps to its target, any other returns ALLOW.
fn search(entries: &[(u32, Target)], program: &mut Vec<Insn>, next_label: &mut usize) {
    if entries.len() <= 3 {
        for (nr, target) in entries {
            program.push(Insn::Jump {
                test: Test::Eq,
                k: *nr,
                yes: *target,
                no: Target::Next,
            });
        }
        program.push(Insn::Allow);
        return;
    }
    let (lower, upper) = entries.split_at(entries.len() / 2);
    let upper_label = *next_label;
    *next_label += 1;
    program.push(Insn::Jump {
        test: Test::Ge,
        k: upper[0].0,
        yes: Target::Label(upper_label),
        no: Target::Next,
    });
    search(lower, program, next_label);
    program.push(Insn::Label(upper_label));
    search(upper, program, next_label);
}

/// A syscall number as the filter compares it (they are all small; one that did not fit
/// would match nothing rather than something else).
fn nr32(nr: i64) -> u32 {
    u32::try_from(nr).unwrap_or(u32::MAX)
}

// The BPF_* opcode parts are u32 constants in libc, each below 0x100 by definition.
#[allow(clippy::cast_possible_truncation)]
fn assemble(program: &[Insn]) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    // Final layout: the instructions (labels take no room), then RET ALLOW, RET NOTIFY,
    // RET ERRNO(ENOSYS).
    let mut at = Vec::new();
    let mut labels = std::collections::HashMap::new();
    for insn in program {
        match insn {
            Insn::Label(l) => {
                labels.insert(*l, at.len());
            }
            _ => at.push(insn),
        }
    }
    let allow = at.len();
    let notify = allow + 1;
    let deny = allow + 2;
    // Jumps are relative to the next instruction and at most 255 forward; the filter is
    // a few dozen instructions.
    let rel = |from: usize, to: Target| {
        let to = match to {
            Target::Next => from + 1,
            Target::Allow => allow,
            Target::Notify => notify,
            Target::Deny => deny,
            Target::Label(label) => labels[&label],
        };
        u8::try_from(to - from - 1).expect("BPF jump in range")
    };
    let mut out = Vec::with_capacity(at.len() + 2);
    for (i, insn) in at.iter().enumerate() {
        out.push(match insn {
            Insn::Load(offset) => stmt(LD_W_ABS, *offset),
            Insn::Jump { test, k, yes, no } => libc::sock_filter {
                code: match test {
                    Test::Eq => JEQ_K,
                    Test::Ge => JGE_K,
                    Test::AnyBit => JSET_K,
                },
                jt: rel(i, *yes),
                jf: rel(i, *no),
                k: *k,
            },
            Insn::Allow => stmt(RET_K, libc::SECCOMP_RET_ALLOW),
            Insn::Label(_) => unreachable!("labels were removed"),
        });
    }
    out.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    out.push(stmt(RET_K, libc::SECCOMP_RET_USER_NOTIF));
    out.push(stmt(
        RET_K,
        libc::SECCOMP_RET_ERRNO | u32::try_from(libc::ENOSYS).unwrap_or(38),
    ));
    out
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic-BPF seccomp filter the way the kernel does, on one syscall.
    fn run(filter: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let word = |offset: u32| match offset {
            NR => nr,
            ARCH => arch,
            o if (16..64).contains(&o) => {
                let arg = args[usize::try_from((o - 16) / 8).unwrap()];
                let half = if (o - 16) % 8 == 0 { arg } else { arg >> 32 };
                u32::try_from(half & 0xffff_ffff).unwrap()
            }
            o => panic!("load of an unexpected offset {o}"),
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let insn = filter[pc];
            let class = u32::from(insn.code) & 0x07;
            if class == libc::BPF_RET {
                return insn.k;
            }
            if class == libc::BPF_LD {
                acc = word(insn.k);
                pc += 1;
                continue;
            }
            let taken = match u32::from(insn.code) & 0xf0 {
                op if op == libc::BPF_JEQ => acc == insn.k,
                op if op == libc::BPF_JGE => acc >= insn.k,
                op if op == libc::BPF_JSET => acc & insn.k != 0,
                op => panic!("unexpected jump {op:#x}"),
            };
            pc += 1 + usize::from(if taken { insn.jt } else { insn.jf });
        }
    }

    #[test]
    fn io_uring_denial_fails_exactly_io_uring_on_every_abi() {
        let filter = io_uring_denial();
        let enosys = libc::SECCOMP_RET_ERRNO | u32::try_from(libc::ENOSYS).unwrap();
        for nr in 0..1000 {
            let want = if IO_URING.contains(&nr) {
                enosys
            } else {
                libc::SECCOMP_RET_ALLOW
            };
            for arch in [AUDIT_ARCH, 0x4000_0003] {
                assert_eq!(run(&filter, arch, nr, [0; 6]), want, "syscall {nr}");
                assert_eq!(
                    run(&filter, arch, nr | X32_SYSCALL_BIT, [0; 6]),
                    want,
                    "x32 syscall {nr}"
                );
            }
        }
    }

    #[test]
    fn filter_notifies_sends_to_an_address_and_not_plain_sends() {
        let filter = build();
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        for nr in [libc::SYS_connect, libc::SYS_sendmsg, libc::SYS_sendmmsg] {
            assert_eq!(run(&filter, AUDIT_ARCH, nr32(nr), [0; 6]), notify, "{nr}");
        }
        let sendto = nr32(libc::SYS_sendto);
        let with_address =
            |address: u64| run(&filter, AUDIT_ARCH, sendto, [3, 1, 1, 0, address, 16]);
        assert_eq!(with_address(0), allow, "send on a connected socket");
        assert_eq!(with_address(0x7fff_1234_5678), notify);
        assert_eq!(with_address(0x7fff_0000_0000), notify, "a zero low half");
        assert_eq!(with_address(0x10), notify, "a zero high half");
        // Other ABIs cannot send to an address at all: refused, not notified.
        let enosys = libc::SECCOMP_RET_ERRNO | u32::try_from(libc::ENOSYS).unwrap();
        for &nr in COMPAT.1 {
            assert_eq!(run(&filter, COMPAT.0, nr, [3, 1, 1, 0, 16, 16]), enosys);
        }
        for nr in X32_SENDS {
            assert_eq!(
                run(&filter, AUDIT_ARCH, nr | X32_SYSCALL_BIT, [0; 6]),
                enosys
            );
        }
    }

    #[test]
    fn filter_notifies_exactly_the_write_intent_syscalls() {
        let filter = build();
        let n = filter.len();
        assert!(n < 120, "{n} instructions");
        // As the kernel checks at install: every jump lands inside the program, and the
        // last instruction returns.
        for (i, insn) in filter.iter().enumerate() {
            if u32::from(insn.code) & 0x07 == libc::BPF_JMP {
                assert!(i + 1 + usize::from(insn.jt.max(insn.jf)) < n, "jump at {i}");
            }
        }
        assert_eq!(u32::from(filter[n - 1].code) & 0x07, libc::BPF_RET);
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let always: Vec<u32> = always_notified().into_iter().map(nr32).collect();
        let flagged: Vec<(u32, u32)> = notified_with_write_flags()
            .into_iter()
            .map(|(nr, arg)| (nr32(nr), arg))
            .collect();
        let with_address: Vec<u32> = notified_with_address()
            .into_iter()
            .map(|(nr, _)| nr32(nr))
            .collect();
        for nr in 0..600 {
            let with_flags = |flags: u32| {
                let mut args = [0u64; 6];
                if let Some((_, arg)) = flagged.iter().find(|(n, _)| *n == nr) {
                    args[usize::try_from(*arg).unwrap()] = u64::from(flags);
                }
                run(&filter, AUDIT_ARCH, nr, args)
            };
            let write = WRITE_INTENT;
            if always.contains(&nr) {
                assert_eq!(with_flags(0), notify, "syscall {nr}");
            } else if flagged.iter().any(|(n, _)| *n == nr) {
                assert_eq!(with_flags(0), allow, "syscall {nr} read-only");
                for bit in [libc::O_WRONLY, libc::O_RDWR, libc::O_CREAT, libc::O_TRUNC] {
                    let bit = u32::try_from(bit).unwrap();
                    assert_eq!(write & bit, bit);
                    assert_eq!(with_flags(bit), notify, "syscall {nr} flags {bit:#x}");
                }
            } else if with_address.contains(&nr) {
                assert_eq!(with_flags(write), allow, "syscall {nr} without an address");
            } else {
                assert_eq!(with_flags(write), allow, "syscall {nr}");
                assert_eq!(
                    run(&filter, AUDIT_ARCH, nr, [u64::MAX; 6]),
                    allow,
                    "syscall {nr}"
                );
            }
            // Another ABI, and x32 numbers: never notified; refused where they connect
            // or send to an address.
            let enosys = libc::SECCOMP_RET_ERRNO | u32::try_from(libc::ENOSYS).unwrap();
            let compat = if COMPAT.1.contains(&nr) {
                enosys
            } else {
                allow
            };
            assert_eq!(run(&filter, COMPAT.0, nr, [0; 6]), compat, "compat {nr}");
            assert_eq!(run(&filter, 0x1234_5678, nr, [0; 6]), allow);
            let x32 = if X32_SENDS.contains(&nr) {
                enosys
            } else {
                allow
            };
            assert_eq!(
                run(&filter, AUDIT_ARCH, nr | X32_SYSCALL_BIT, [0; 6]),
                x32,
                "x32 {nr}"
            );
        }
    }
}
