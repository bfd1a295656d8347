//! The syscalls the seccomp filter hands to netbox, in one table: each call's number, its
//! name, when the filter notifies it, and what it acts on. The filter's lists
//! (`seccomp`), the write judge's argument reader (`supervise::writejudge`, whose match over
//! [`Call`] has no catch-all arm, so a call added here without a reader does not compile),
//! the test for calls on an open file, and the names in the logs are all read from it.

/// A notified syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Openat,
    Openat2,
    Mkdirat,
    Mknodat,
    Unlinkat,
    Renameat,
    Renameat2,
    Linkat,
    Symlinkat,
    Truncate,
    Fchmod,
    Fchmodat,
    Fchmodat2,
    Fchown,
    Fchownat,
    Utimensat,
    Setxattr,
    Lsetxattr,
    Fsetxattr,
    Removexattr,
    Lremovexattr,
    Fremovexattr,
    Setxattrat,
    Removexattrat,
    #[cfg(target_arch = "x86_64")]
    Open,
    #[cfg(target_arch = "x86_64")]
    Creat,
    #[cfg(target_arch = "x86_64")]
    Mkdir,
    #[cfg(target_arch = "x86_64")]
    Mknod,
    #[cfg(target_arch = "x86_64")]
    Unlink,
    #[cfg(target_arch = "x86_64")]
    Rmdir,
    #[cfg(target_arch = "x86_64")]
    Rename,
    #[cfg(target_arch = "x86_64")]
    Link,
    #[cfg(target_arch = "x86_64")]
    Symlink,
    #[cfg(target_arch = "x86_64")]
    Chmod,
    #[cfg(target_arch = "x86_64")]
    Chown,
    #[cfg(target_arch = "x86_64")]
    Lchown,
    #[cfg(target_arch = "x86_64")]
    Utime,
    #[cfg(target_arch = "x86_64")]
    Utimes,
    #[cfg(target_arch = "x86_64")]
    Futimesat,
    Connect,
    Sendto,
    Sendmsg,
    Sendmmsg,
}

/// When the filter notifies a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Whatever its arguments.
    Always,
    /// Only with a write-intent bit in this (32-bit) flags argument: an open for reading
    /// is the hot path.
    WriteFlags(u32),
    /// Only when this pointer argument is not NULL: sendto without an address is the plain
    /// `send` of a connected socket, the hot path.
    NotNull(u32),
}

/// What a call acts on, which says who reads its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acts {
    /// Names (a path, with or without a directory fd): read by the write judge.
    Names,
    /// The file open on args[0]: judged by that file's mount.
    OpenFile,
    /// An address to connect or send to (behind a pointer): read by netwatch.
    Address,
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Notified {
    pub call: Call,
    pub nr: i64,
    pub name: &'static str,
    pub when: When,
    pub acts: Acts,
}

/// setxattrat(2) and removexattrat(2) (Linux 6.13; one number on every architecture,
/// not in libc yet).
pub const SYS_SETXATTRAT: i64 = 463;
pub const SYS_REMOVEXATTRAT: i64 = 466;

const fn row(call: Call, nr: i64, name: &'static str, when: When, acts: Acts) -> Notified {
    Notified {
        call,
        nr,
        name,
        when,
        acts,
    }
}

use Acts::{Address, Names, OpenFile};
use When::{Always, NotNull, WriteFlags};

/// Every notified syscall.
pub const TABLE: &[Notified] = &[
    row(
        Call::Openat,
        libc::SYS_openat,
        "openat",
        WriteFlags(2),
        Names,
    ),
    row(Call::Openat2, libc::SYS_openat2, "openat2", Always, Names),
    row(Call::Mkdirat, libc::SYS_mkdirat, "mkdirat", Always, Names),
    row(Call::Mknodat, libc::SYS_mknodat, "mknodat", Always, Names),
    row(
        Call::Unlinkat,
        libc::SYS_unlinkat,
        "unlinkat",
        Always,
        Names,
    ),
    row(
        Call::Renameat,
        libc::SYS_renameat,
        "renameat",
        Always,
        Names,
    ),
    row(
        Call::Renameat2,
        libc::SYS_renameat2,
        "renameat2",
        Always,
        Names,
    ),
    row(Call::Linkat, libc::SYS_linkat, "linkat", Always, Names),
    row(
        Call::Symlinkat,
        libc::SYS_symlinkat,
        "symlinkat",
        Always,
        Names,
    ),
    row(
        Call::Truncate,
        libc::SYS_truncate,
        "truncate",
        Always,
        Names,
    ),
    row(Call::Fchmod, libc::SYS_fchmod, "fchmod", Always, OpenFile),
    row(
        Call::Fchmodat,
        libc::SYS_fchmodat,
        "fchmodat",
        Always,
        Names,
    ),
    row(
        Call::Fchmodat2,
        libc::SYS_fchmodat2,
        "fchmodat2",
        Always,
        Names,
    ),
    row(Call::Fchown, libc::SYS_fchown, "fchown", Always, OpenFile),
    row(
        Call::Fchownat,
        libc::SYS_fchownat,
        "fchownat",
        Always,
        Names,
    ),
    row(
        Call::Utimensat,
        libc::SYS_utimensat,
        "utimensat",
        Always,
        Names,
    ),
    row(
        Call::Setxattr,
        libc::SYS_setxattr,
        "setxattr",
        Always,
        Names,
    ),
    row(
        Call::Lsetxattr,
        libc::SYS_lsetxattr,
        "lsetxattr",
        Always,
        Names,
    ),
    row(
        Call::Fsetxattr,
        libc::SYS_fsetxattr,
        "fsetxattr",
        Always,
        OpenFile,
    ),
    row(
        Call::Removexattr,
        libc::SYS_removexattr,
        "removexattr",
        Always,
        Names,
    ),
    row(
        Call::Lremovexattr,
        libc::SYS_lremovexattr,
        "lremovexattr",
        Always,
        Names,
    ),
    row(
        Call::Fremovexattr,
        libc::SYS_fremovexattr,
        "fremovexattr",
        Always,
        OpenFile,
    ),
    row(
        Call::Setxattrat,
        SYS_SETXATTRAT,
        "setxattrat",
        Always,
        Names,
    ),
    row(
        Call::Removexattrat,
        SYS_REMOVEXATTRAT,
        "removexattrat",
        Always,
        Names,
    ),
    #[cfg(target_arch = "x86_64")]
    row(Call::Open, libc::SYS_open, "open", WriteFlags(1), Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Creat, libc::SYS_creat, "creat", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Mkdir, libc::SYS_mkdir, "mkdir", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Mknod, libc::SYS_mknod, "mknod", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Unlink, libc::SYS_unlink, "unlink", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Rmdir, libc::SYS_rmdir, "rmdir", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Rename, libc::SYS_rename, "rename", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Link, libc::SYS_link, "link", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Symlink, libc::SYS_symlink, "symlink", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Chmod, libc::SYS_chmod, "chmod", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Chown, libc::SYS_chown, "chown", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Lchown, libc::SYS_lchown, "lchown", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Utime, libc::SYS_utime, "utime", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(Call::Utimes, libc::SYS_utimes, "utimes", Always, Names),
    #[cfg(target_arch = "x86_64")]
    row(
        Call::Futimesat,
        libc::SYS_futimesat,
        "futimesat",
        Always,
        Names,
    ),
    // The address is behind a pointer (sendmsg's and sendmmsg's inside their headers),
    // which the filter cannot follow: netbox reads it and logs what goes anywhere but its
    // own listeners (netwatch.rs).
    row(Call::Connect, libc::SYS_connect, "connect", Always, Address),
    row(
        Call::Sendto,
        libc::SYS_sendto,
        "sendto",
        NotNull(4),
        Address,
    ),
    row(Call::Sendmsg, libc::SYS_sendmsg, "sendmsg", Always, Address),
    row(
        Call::Sendmmsg,
        libc::SYS_sendmmsg,
        "sendmmsg",
        Always,
        Address,
    ),
];

/// The row of syscall `nr`, if the filter notifies it.
pub fn of(nr: i64) -> Option<&'static Notified> {
    TABLE.iter().find(|row| row.nr == nr)
}

/// The name of syscall `nr` as the logs give it ("unknown" for one the filter never
/// notifies).
pub fn name(nr: i64) -> &'static str {
    of(nr).map_or("unknown", |row| row.name)
}

/// Whether syscall `nr` acts as `acts` says.
pub fn acts(nr: i64, acts: Acts) -> bool {
    of(nr).is_some_and(|row| row.acts == acts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_syscall_has_one_row_and_one_name() {
        for (i, row) in TABLE.iter().enumerate() {
            assert!(
                TABLE[i + 1..].iter().all(|other| other.nr != row.nr
                    && other.name != row.name
                    && other.call != row.call),
                "{} twice",
                row.name
            );
            assert_eq!(of(row.nr).unwrap().call, row.call);
        }
        assert_eq!(name(libc::SYS_getpid), "unknown");
        assert!(acts(libc::SYS_fchown, Acts::OpenFile));
        assert!(!acts(libc::SYS_fchownat, Acts::OpenFile));
    }
}
