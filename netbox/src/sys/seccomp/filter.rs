//! The filter's program: every syscall of `sys::notified`'s table handed to the listener
//! under its condition (write flags, an address), foreign-architecture and x32 calls that
//! could go around it refused, everything else allowed; built as labelled instructions,
//! then assembled into classic BPF with its jumps resolved.

use super::notified::{self, When};

/// `AUDIT_ARCH_*` of the architecture netbox is built for (linux/audit.h).
#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_003E;

#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 syscalls on x86_64 carry this bit.
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The other ABI a process of this architecture can call the kernel through (32-bit
/// compat: `int 0x80` on x86_64, AArch32 on aarch64), and its calls that connect or send
/// to an address (socketcall(2) included, which multiplexes them all). The filter refuses
/// them (`build`): netbox judges those calls where they name a Unix socket's path, and
/// reads their arguments in the native layout only.
#[cfg(target_arch = "x86_64")]
pub(super) const COMPAT: (u32, &[u32]) = (0x4000_0003, &[102, 362, 369, 370, 345]);

#[cfg(target_arch = "aarch64")]
pub(super) const COMPAT: (u32, &[u32]) = (0x4000_0028, &[283, 290, 296, 374]);

/// x32's connect, sendto, sendmsg and sendmmsg (without the x32 bit), refused likewise.
pub(super) const X32_SENDS: [u32; 4] = [42, 44, 518, 538];

/// The open flags that mean "write": creating, truncating, or opening for writing.
pub const WRITE_INTENT: u32 =
    (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// Offsets into `struct seccomp_data`.
pub(super) const NR: u32 = 0;

pub(super) const ARCH: u32 = 4;

pub(super) fn arg_low(n: u32) -> u32 {
    // args[n] is a u64 at 16 + 8n; classic BPF loads 32 bits, the low half on little
    // endian, which is where open flags live.
    16 + 8 * n
}

pub(super) fn arg_high(n: u32) -> u32 {
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
pub(super) fn notified_with_write_flags() -> Vec<(i64, u32)> {
    notified::TABLE
        .iter()
        .filter_map(|row| match row.when {
            When::WriteFlags(arg) => Some((row.nr, arg)),
            When::Always | When::NotNull(_) => None,
        })
        .collect()
}

/// Syscalls notified only when a pointer argument is not NULL: (syscall, argument).
pub(super) fn notified_with_address() -> Vec<(i64, u32)> {
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
pub(super) enum Condition {
    /// Any write-intent bit in this (32-bit) flags argument.
    WriteFlags(u32),
    /// This (64-bit) pointer argument is not NULL: both halves are looked at, as an
    /// address above 4 GiB can have a zero low half.
    NotNull(u32),
}

pub(super) fn conditional() -> Vec<(i64, Condition)> {
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
pub(super) enum Target {
    Next,
    Allow,
    Notify,
    /// Fail with ENOSYS.
    Deny,
    Label(usize),
}

/// A conditional jump's test of the accumulator against a constant.
#[derive(Clone, Copy, Debug)]
pub(super) enum Test {
    Eq,
    Ge,
    /// Any of the constant's bits set.
    AnyBit,
}

/// One BPF instruction, with jumps still symbolic.
pub(super) enum Insn {
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
pub(super) const FOREIGN: usize = 1_000;

pub(super) const X32: usize = 1_001;

/// With the syscall number loaded: ENOSYS for each of `numbers`, ALLOW for the rest.
pub(super) fn refuse_these(numbers: impl Iterator<Item = u32>, program: &mut Vec<Insn>) {
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
pub(super) fn search(entries: &[(u32, Target)], program: &mut Vec<Insn>, next_label: &mut usize) {
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
pub(super) fn nr32(nr: i64) -> u32 {
    u32::try_from(nr).unwrap_or(u32::MAX)
}

// The BPF_* opcode parts are u32 constants in libc, each below 0x100 by definition.
#[allow(clippy::cast_possible_truncation)]
pub(super) fn assemble(program: &[Insn]) -> Vec<libc::sock_filter> {
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

#[cfg(test)]
mod tests {
    use super::super::{io_uring_denial, IO_URING};
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
