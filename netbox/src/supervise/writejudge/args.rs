//! Reading a notified call: which of its arguments name paths (a directory fd and a
//! pointer), what each asks of its path, and its flags. The table of notified calls
//! (`sys::notified`) says which calls there are; this says how each reads.

use crate::sys::notified::{self, Call};
use crate::sys::seccomp::Notification;

/// Longest path read from a caller (PATH_MAX).
pub(super) const PATH_MAX: usize = 4096;

/// What a syscall does with a path.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    /// Creates the name (mkdir, mknod, symlink, link's new name): EEXIST if it is there.
    /// `dir`: mkdir, the one create a trailing "/" does not turn into ENOENT.
    Create { dir: bool },
    /// Removes or moves away a name (unlink, rmdir, rename's old name). `dir`: whether the
    /// call removes a directory (rmdir, AT_REMOVEDIR) or not (unlink); `None` for rename,
    /// which takes either.
    Remove { dir: Option<bool> },
    /// rename's new name: created or replaced.
    RenameTo,
    /// Changes an existing file (chmod, chown, utimes, xattrs); ENOENT if absent.
    Change { follow: bool },
    /// truncate(2): only a regular file is written (a directory is EISDIR, anything else
    /// EINVAL, one the caller may not write EACCES, before the mount is asked).
    Truncate,
    /// open, openat, openat2, creat: it depends on the flags.
    Open { flags: u64 },
    /// link's existing file: not written, but if it is missing the link fails with ENOENT
    /// before anything else.
    LinkSource { follow: bool },
}

impl Op {
    /// Whether the call follows a final symlink (a final magic link too).
    pub(super) fn follows_final(self) -> bool {
        let has = |flags: u64, flag: i32| flags & u64::from(flag.unsigned_abs()) != 0;
        match self {
            Op::Create { .. } | Op::Remove { .. } | Op::RenameTo => false,
            Op::Change { follow } | Op::LinkSource { follow } => follow,
            Op::Truncate => true,
            Op::Open { flags } => {
                !(has(flags, libc::O_NOFOLLOW)
                    || (has(flags, libc::O_CREAT) && has(flags, libc::O_EXCL)))
            }
        }
    }
}

/// A path argument: its pointer's index, its directory fd's (if any), what is done, and
/// whether an empty path names the directory fd's own file (`AT_EMPTY_PATH`).
#[derive(Clone, Copy, Debug)]
pub(super) struct PathArg {
    pub(super) dirfd: Option<usize>,
    pub(super) path: usize,
    pub(super) op: Op,
    pub(super) empty_path: bool,
}

impl PathArg {
    /// The same, with `AT_EMPTY_PATH` read from the flags argument at `index`.
    pub(super) fn empty_path_flag(self, n: &Notification, index: usize) -> PathArg {
        PathArg {
            empty_path: int_arg(n.args[index]) & libc::AT_EMPTY_PATH != 0,
            ..self
        }
    }
}

/// `AT_SYMLINK_NOFOLLOW` in the flags argument at `index`.
pub(super) fn follows(n: &Notification, index: usize) -> bool {
    int_arg(n.args[index]) & libc::AT_SYMLINK_NOFOLLOW == 0
}

pub(super) fn path_args(n: &Notification, openat2_flags: u64) -> Vec<PathArg> {
    let at = |dirfd, path, op| PathArg {
        dirfd: Some(dirfd),
        path,
        op,
        empty_path: false,
    };
    let plain = |path, op| PathArg {
        dirfd: None,
        path,
        op,
        empty_path: false,
    };
    let change = |follow| Op::Change { follow };
    let Some(row) = notified::of(n.nr) else {
        return Vec::new();
    };
    // Every call of the table, by name: one added there without a reader here does not
    // compile.
    match row.call {
        Call::Openat => vec![at(0, 1, Op::Open { flags: n.args[2] })],
        Call::Openat2 => vec![at(
            0,
            1,
            Op::Open {
                flags: openat2_flags,
            },
        )],
        Call::Mkdirat => vec![at(0, 1, Op::Create { dir: true })],
        Call::Mknodat => vec![at(0, 1, Op::Create { dir: false })],
        Call::Unlinkat => {
            let dir = int_arg(n.args[2]) & libc::AT_REMOVEDIR != 0;
            vec![at(0, 1, Op::Remove { dir: Some(dir) })]
        }
        Call::Renameat | Call::Renameat2 => {
            vec![at(0, 1, Op::Remove { dir: None }), at(2, 3, Op::RenameTo)]
        }
        Call::Linkat => {
            let follow = int_arg(n.args[4]) & libc::AT_SYMLINK_FOLLOW != 0;
            vec![
                at(0, 1, Op::LinkSource { follow }).empty_path_flag(n, 4),
                at(2, 3, Op::Create { dir: false }),
            ]
        }
        Call::Symlinkat => vec![at(1, 2, Op::Create { dir: false })],
        // fchmodat has no flags argument (fchmodat2 does).
        Call::Fchmodat => vec![at(0, 1, change(true))],
        Call::Fchmodat2 | Call::Utimensat => {
            vec![at(0, 1, change(follows(n, 3))).empty_path_flag(n, 3)]
        }
        Call::Fchownat => vec![at(0, 1, change(follows(n, 4))).empty_path_flag(n, 4)],
        Call::Setxattrat | Call::Removexattrat => {
            vec![at(0, 1, change(follows(n, 2))).empty_path_flag(n, 2)]
        }
        Call::Truncate => vec![plain(0, Op::Truncate)],
        Call::Setxattr | Call::Removexattr => vec![plain(0, change(true))],
        Call::Lsetxattr | Call::Lremovexattr => vec![plain(0, change(false))],
        #[cfg(target_arch = "x86_64")]
        Call::Open => vec![plain(0, Op::Open { flags: n.args[1] })],
        #[cfg(target_arch = "x86_64")]
        Call::Creat => {
            let flags = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC).unsigned_abs();
            vec![plain(
                0,
                Op::Open {
                    flags: u64::from(flags),
                },
            )]
        }
        #[cfg(target_arch = "x86_64")]
        Call::Mkdir => vec![plain(0, Op::Create { dir: true })],
        #[cfg(target_arch = "x86_64")]
        Call::Mknod => vec![plain(0, Op::Create { dir: false })],
        #[cfg(target_arch = "x86_64")]
        Call::Unlink => vec![plain(0, Op::Remove { dir: Some(false) })],
        #[cfg(target_arch = "x86_64")]
        Call::Rmdir => vec![plain(0, Op::Remove { dir: Some(true) })],
        #[cfg(target_arch = "x86_64")]
        Call::Rename => vec![plain(0, Op::Remove { dir: None }), plain(1, Op::RenameTo)],
        #[cfg(target_arch = "x86_64")]
        Call::Link => vec![
            plain(0, Op::LinkSource { follow: false }),
            plain(1, Op::Create { dir: false }),
        ],
        #[cfg(target_arch = "x86_64")]
        Call::Symlink => vec![plain(1, Op::Create { dir: false })],
        #[cfg(target_arch = "x86_64")]
        Call::Chmod | Call::Chown | Call::Utime | Call::Utimes => {
            vec![plain(0, change(true))]
        }
        #[cfg(target_arch = "x86_64")]
        Call::Lchown => vec![plain(0, change(false))],
        #[cfg(target_arch = "x86_64")]
        Call::Futimesat => vec![at(0, 1, change(true))],
        // Judged by the open file's mount (`judge`), not by a name.
        Call::Fchmod | Call::Fchown | Call::Fsetxattr | Call::Fremovexattr => Vec::new(),
        // Not writes: netwatch reads their addresses.
        Call::Connect | Call::Sendto | Call::Sendmsg | Call::Sendmmsg => Vec::new(),
    }
}

/// The syscalls that act on the file open on args[0].
pub(super) fn is_fd_syscall(nr: i64) -> bool {
    notified::acts(nr, notified::Acts::OpenFile)
}

/// renameat2's flags (0 for rename and renameat).
pub(super) fn rename_flags(n: &Notification) -> u32 {
    if n.nr == libc::SYS_renameat2 {
        uint_arg(n.args[4])
    } else {
        0
    }
}

/// An `int` argument: the kernel reads the register's low 32 bits (AT_FDCWD is -100).
pub(crate) fn int_arg(raw: u64) -> i32 {
    i32::from_ne_bytes(uint_arg(raw).to_ne_bytes())
}

/// An `unsigned int` argument (flags): the register's low 32 bits.
pub(crate) fn uint_arg(raw: u64) -> u32 {
    u32::try_from(raw & 0xffff_ffff).unwrap_or(0)
}

/// openat2's `struct open_how` (flags, mode, resolve), which the filter cannot read:
/// its flags and resolve flags; `None` if it is unreadable (then the kernel will fail the
/// call with EFAULT anyway).
pub(super) fn openat2_how(n: &Notification) -> Option<(u64, u64)> {
    let mut how = [0u8; 24];
    let local = std::io::IoSliceMut::new(&mut how);
    let remote = nix::sys::uio::RemoteIoVec {
        base: usize::try_from(n.args[2]).ok()?,
        len: 24,
    };
    let pid = nix::unistd::Pid::from_raw(i32::try_from(n.pid).ok()?);
    match nix::sys::uio::process_vm_readv(pid, &mut [local], &[remote]) {
        Ok(24) => Some((
            u64::from_ne_bytes(how[..8].try_into().ok()?),
            u64::from_ne_bytes(how[16..].try_into().ok()?),
        )),
        _ => None,
    }
}
