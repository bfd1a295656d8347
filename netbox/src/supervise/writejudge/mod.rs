//! Which notified write-intent syscalls the mounts will refuse (EROFS), judged from
//! outside the sandbox before the syscall runs: the caller's path is read from its
//! memory and resolved inside the sandbox's own root (openat2 RESOLVE_IN_ROOT from
//! /proc/PID/root), so symlinks and ".." mean there what they mean to the caller.
//!
//! The kernel checks some things before the mount's read-only flag, and a write refused
//! for those is not a refused write: a name that exists already (EEXIST: `mkdir -p`,
//! `O_CREAT|O_EXCL`), a file to change, open or link that does not (ENOENT), a rename
//! across mounts (EXDEV; a link across mounts into a read-only directory is EROFS, which
//! link checks first). (unlink, rmdir and rename check the mount first; a name that
//! is itself a mount point, like a pinned `.git`, is refused with EBUSY, and logged.) An
//! open that neither creates, truncates nor asks for write access writes nothing
//! (`O_RDONLY|O_CREAT` on an existing file, `O_PATH`), and opening a device, fifo or
//! socket for writing is I/O, not a change to the filesystem, and opening a file the
//! caller may not write (without O_TRUNC) is EACCES first, as truncating one is. A name
//! longer than NAME_MAX is ENAMETOOLONG first (but for unlink, rmdir and rename's final
//! names), a create in /proc of a name it does not have ENOENT, truncate of anything but
//! a regular file EISDIR or EINVAL, O_CREAT|O_DIRECTORY EINVAL (Linux 6.4 on), a rename
//! whose directory is missing ENOENT or ENOTDIR, and one onto a name of the other kind
//! ENOTDIR or EISDIR before a mount point at either end is EBUSY. Calls that act on a
//! symlink itself (lchown, AT_SYMLINK_NOFOLLOW, O_NOFOLLOW, link(2)) are judged on the
//! link, a magic one in /proc too. The differential fuzz test in
//! tests/e2e/sandbox_writelog.rs checks every one of these against the kernel.
//!
//! Here the judgement as a whole; reading the call's arguments is `args`, the caller's view
//! of a path `caller`, looking names up in the sandbox `lookup`, each operation's rule
//! `rules`, and the kernel's checks that come before the mount's `kernel_order`.

mod args;
mod caller;
mod kernel_order;
mod lookup;
mod rules;

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::sys::seccomp::Notification;
pub(crate) use args::{int_arg, uint_arg};
use args::{is_fd_syscall, openat2_how, path_args, rename_flags, Op};
pub use caller::thread_group;
use caller::{Caller, NamedPath, Target};
pub use lookup::open_root;
use lookup::{RESOLVE_BENEATH, RESOLVE_IN_ROOT};
use rules::{
    judge_confined_open, judge_open_file, judge_path, mount_point_verdict, rename_kinds_agree,
};

/// One path a syscall would write, judged.
#[derive(Debug)]
pub struct Verdict {
    /// As the caller named it, made absolute in the sandbox's view.
    pub path: PathBuf,
    /// Where that leads in the sandbox, symlinks resolved (for the reason).
    pub resolved: Option<PathBuf>,
    pub denied: bool,
    /// Refused because the name is a mount point of its own (EBUSY), not for a
    /// read-only mount.
    pub busy: bool,
}

/// Judges a notification. `root` is the sandbox's root, if netbox holds it for every
/// process (else the caller's own is opened). The steps follow the kernel's own order of
/// checks for the call as a whole; a call that fails before any read-only check still
/// gets a verdict (not denied) for each name, so the probe sees its controls.
// Whole: the kernel's order for the call as a whole (open file, openat2's own refusals,
// each name, then the call's cross-name checks), which a split would hide.
pub fn judge(n: &Notification, shared_root: Option<&OwnedFd>) -> Vec<Verdict> {
    // Calls on an open file: judged by that file's mount.
    if is_fd_syscall(n.nr) {
        return judge_open_file(&fd_link(n.pid, int_arg(n.args[0])))
            .into_iter()
            .collect();
    }
    let (openat2_flags, resolve) = if n.nr == libc::SYS_openat2 {
        match openat2_how(n) {
            Some(how) => how,
            None => return Vec::new(),
        }
    } else {
        (0, 0)
    };
    let own_root;
    let root = match shared_root {
        Some(root) => root,
        None => match open_root(n.pid) {
            Some(root) => {
                own_root = root;
                &own_root
            }
            None => return Vec::new(),
        },
    };

    // openat2 confined to its directory: the kernel's own resolution, asked again.
    if resolve & (RESOLVE_IN_ROOT | RESOLVE_BENEATH) != 0 {
        return judge_confined_open(n, root, openat2_flags, resolve)
            .into_iter()
            .collect();
    }

    // 1. Each path argument, read from the caller and named as the sandbox names it.
    let caller = Caller::new(n, root, resolve);
    let mut verdicts = Vec::new();
    let mut names = Vec::new();
    let mut empty = false;
    for target in path_args(n, openat2_flags)
        .into_iter()
        .filter_map(|arg| caller.read(arg))
    {
        match target {
            Target::OpenFile(link) => verdicts.extend(judge_open_file(&link)),
            Target::Name(name) => names.push(name),
            Target::Empty => empty = true,
        }
    }
    let written = || names.iter().filter(|name| name.is_written());

    // 2. An empty name (ENOENT), or a name's shape (a final "." or "..", a trailing "/"),
    //    fails the call first.
    // 3. link looks its existing file up next: a missing one fails the call (ENOENT).
    if empty
        || names.iter().any(NamedPath::refused_for_its_shape)
        || names.iter().any(|name| name.final_name_too_long(root))
        || names.iter().any(|name| name.is_missing_link_source(root))
    {
        verdicts.extend(written().map(NamedPath::not_denied));
        return not_denied(verdicts);
    }

    // 4. Each name the call writes, where it lands (for a rename, with the mount of the
    //    directory that holds it).
    let renames = names.iter().any(|name| matches!(name.op, Op::RenameTo));
    let mut mounts = Vec::new();
    for name in written() {
        let (verdict, mount) = judge_path(root, &name.named, name.op, renames, n.pid);
        verdicts.push(verdict);
        mounts.push(mount);
    }
    if !renames {
        return verdicts;
    }

    // 5. rename looks both directories up first (one missing: ENOENT or ENOTDIR; behind
    //    pid 1's links: EACCES), then compares their mounts (EXDEV).
    if mounts.iter().any(Option::is_none) || matches!(&mounts[..], [Some(a), Some(b)] if a != b) {
        return not_denied(verdicts);
    }

    // 6. Past the mount, a mount point of its own at either end (a pinned `.envrc` an
    //    editor saves by rename, a `.git` moved away) is EBUSY, once the two names' kinds
    //    agree (`rename_kinds_agree`). The target is looked at only when the source is
    //    not such a mount point: nearly every rename in a build is onto a new name or a
    //    plain file.
    if verdicts.iter().any(|v| v.denied && !v.busy) {
        return verdicts;
    }
    if let [from, to] = &names[..] {
        let busy_source = verdicts.first().is_some_and(|v| v.busy);
        let busy_target = if busy_source {
            None
        } else {
            mount_point_verdict(root, &to.named)
        };
        if busy_source || busy_target.is_some() {
            if !rename_kinds_agree(root, from, to, rename_flags(n)) {
                return not_denied(verdicts);
            }
            verdicts.extend(busy_target);
        }
    }
    verdicts
}

/// The same verdicts, none denied: the call fails for another reason first.
fn not_denied(mut verdicts: Vec<Verdict>) -> Vec<Verdict> {
    for verdict in &mut verdicts {
        verdict.denied = false;
    }
    verdicts
}

/// futimesat(2), which only x86_64 has.
#[cfg(target_arch = "x86_64")]
fn is_futimesat(nr: i64) -> bool {
    nr == libc::SYS_futimesat
}

#[cfg(not(target_arch = "x86_64"))]
fn is_futimesat(_nr: i64) -> bool {
    false
}

/// `/proc/PID/fd/FD`: the caller's open file, from outside.
fn fd_link(pid: u32, fd: i32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/fd/{fd}"))
}

#[cfg(test)]
mod tests {
    use super::kernel_order::refused_for_its_name;
    use super::*;

    #[test]
    fn every_notified_call_has_its_reader() {
        use crate::sys::notified::{Acts, TABLE};
        for row in TABLE {
            let n = Notification {
                id: 0,
                pid: 0,
                nr: row.nr,
                args: [0; 6],
            };
            let names = path_args(&n, 0);
            match row.acts {
                Acts::Names => assert!(!names.is_empty(), "{}: no name read", row.name),
                Acts::OpenFile | Acts::Address => assert!(names.is_empty(), "{}", row.name),
            }
            assert_eq!(
                is_fd_syscall(row.nr),
                row.acts == Acts::OpenFile,
                "{}",
                row.name
            );
        }
        // A syscall the filter never notifies has no reader: nothing is read for it.
        let getpid = Notification {
            id: 0,
            pid: 0,
            nr: libc::SYS_getpid,
            args: [0; 6],
        };
        assert!(path_args(&getpid, 0).is_empty());
    }

    #[test]
    fn a_names_shape_can_refuse_before_the_mount_does() {
        let create = Op::Create { dir: false };
        let mkdir = Op::Create { dir: true };
        let open_create = Op::Open {
            flags: u64::from((libc::O_WRONLY | libc::O_CREAT).unsigned_abs()),
        };
        let open_write = Op::Open {
            flags: u64::from(libc::O_WRONLY.unsigned_abs()),
        };
        let remove = Op::Remove { dir: None };
        for (op, raw, refused) in [
            (create, &b"/etc/x"[..], false),
            (create, b"/etc/x/", true),
            (mkdir, b"/etc/x/", false),
            (mkdir, b"/etc/x//", false),
            (mkdir, b"/etc/x/.", true),
            (mkdir, b"..", true),
            (mkdir, b"/", true),
            (open_create, b"/etc/x/", true),
            (open_create, b"/etc/x/..", true),
            (open_create, b"/etc/x", false),
            (open_write, b"/etc/x/", false),
            (remove, b"/etc/x/", false),
            (remove, b"/etc/x/.", true),
            (Op::RenameTo, b"/etc/x/..", true),
            (Op::Change { follow: true }, b"/etc/.", false),
        ] {
            assert_eq!(
                refused_for_its_name(op, raw),
                refused,
                "{op:?} {}",
                String::from_utf8_lossy(raw)
            );
        }
    }
}
