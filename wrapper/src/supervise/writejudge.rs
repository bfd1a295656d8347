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

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sys::notified::{self, Call};
use crate::sys::seccomp::{self, Notification};

/// Longest path read from a caller (PATH_MAX).
const PATH_MAX: usize = 4096;
/// Longest name in a path (NAME_MAX).
const NAME_MAX: usize = 255;
/// openat2's resolve flags (linux/openat2.h).
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
/// Symlinks the kernel follows in one lookup (MAXSYMLINKS).
const MAX_SYMLINK_HOPS: usize = 40;
const RESOLVE_IN_ROOT: u64 = 0x10;

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

/// What a syscall does with a path.
#[derive(Clone, Copy, Debug)]
enum Op {
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
    fn follows_final(self) -> bool {
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
struct PathArg {
    dirfd: Option<usize>,
    path: usize,
    op: Op,
    empty_path: bool,
}

impl PathArg {
    /// The same, with `AT_EMPTY_PATH` read from the flags argument at `index`.
    fn empty_path_flag(self, n: &Notification, index: usize) -> PathArg {
        PathArg {
            empty_path: int_arg(n.args[index]) & libc::AT_EMPTY_PATH != 0,
            ..self
        }
    }
}

/// `AT_SYMLINK_NOFOLLOW` in the flags argument at `index`.
fn follows(n: &Notification, index: usize) -> bool {
    int_arg(n.args[index]) & libc::AT_SYMLINK_NOFOLLOW == 0
}

fn path_args(n: &Notification, openat2_flags: u64) -> Vec<PathArg> {
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
fn is_fd_syscall(nr: i64) -> bool {
    notified::acts(nr, notified::Acts::OpenFile)
}

/// Judges a notification. `root` is the sandbox's root, if netbox holds it for every
/// process (else the caller's own is opened). The steps follow the kernel's own order of
/// checks for the call as a whole; a call that fails before any read-only check still
/// gets a verdict (not denied) for each name, so the probe sees its controls.
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

/// What a path argument turns out to be, once read from the caller.
enum Target {
    /// The file open on one of the caller's fds, or its working directory (a NULL path, or
    /// an empty one with `AT_EMPTY_PATH`): its /proc link.
    OpenFile(PathBuf),
    Name(NamedPath),
    /// An empty path without `AT_EMPTY_PATH`: the call fails with ENOENT before anything.
    Empty,
}

/// A path argument as the caller wrote it and as the sandbox names it.
struct NamedPath {
    op: Op,
    /// As written: its shape (a trailing "/", a final ".") matters to the kernel.
    raw: Vec<u8>,
    /// Absolute, in the sandbox's view, through /proc's magic links (but for link's
    /// existing file).
    named: PathBuf,
}

impl NamedPath {
    /// Whether the call writes this name (link's existing file it only looks up).
    fn is_written(&self) -> bool {
        !matches!(self.op, Op::LinkSource { .. })
    }

    fn refused_for_its_shape(&self) -> bool {
        refused_for_its_name(self.op, &self.raw)
    }

    /// A final name longer than NAME_MAX, where the directory's filesystem refuses it at
    /// lookup (ENAMETOOLONG), which every call but unlink, rmdir and rename's ends makes
    /// before the mount is asked. sysfs, cgroupfs and FUSE do not refuse it there (they
    /// answer EROFS), so only the filesystems known to are trusted to.
    fn final_name_too_long(&self, root: &OwnedFd) -> bool {
        if matches!(self.op, Op::Remove { .. } | Op::RenameTo) {
            return false;
        }
        name_too_long_for_its_directory(root, &self.named)
    }

    fn trailing_slash(&self) -> bool {
        self.raw.ends_with(b"/")
    }

    /// link's existing file, missing: only if the lookup says so itself, or it lies
    /// behind pid 1's links (EACCES). An fd's own link (`/proc/self/fd/N`, `/dev/fd/N`:
    /// how an O_TMPFILE is linked into place) leads where netbox cannot follow from
    /// outside: taken as found.
    fn is_missing_link_source(&self, root: &OwnedFd) -> bool {
        let Op::LinkSource { follow } = self.op else {
            return false;
        };
        if through_pid1_links(&self.named, follow) {
            return true;
        }
        !names_a_magic_link(&self.named)
            && matches!(
                resolve_in_sandbox(root, &self.named, follow),
                Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR)
            )
    }

    /// Seen, and not a refused write.
    fn not_denied(&self) -> Verdict {
        Verdict {
            path: self.named.clone(),
            resolved: None,
            denied: false,
            busy: false,
        }
    }
}

/// The notified caller, whose arguments are read from its memory and whose relative
/// paths are named from its own working directory or directory fds.
struct Caller<'a> {
    n: &'a Notification,
    root: &'a OwnedFd,
    /// openat2's resolve flags (0 for every other call).
    resolve: u64,
    /// The caller's working directory, read once even for both names of a rename.
    cwd: std::cell::OnceCell<Option<PathBuf>>,
}

impl<'a> Caller<'a> {
    fn new(n: &'a Notification, root: &'a OwnedFd, resolve: u64) -> Caller<'a> {
        Caller {
            n,
            root,
            resolve,
            cwd: std::cell::OnceCell::new(),
        }
    }

    fn fd_link_of_arg(&self, index: usize) -> PathBuf {
        fd_link(self.n.pid, int_arg(self.n.args[index]))
    }

    /// Reads one path argument; `None` if there is nothing to judge (unreadable, or no
    /// path and no file meant).
    fn read(&self, arg: PathArg) -> Option<Target> {
        let n = self.n;
        // utimensat(fd, NULL, ...) and futimesat(fd, NULL, ...) change the file open on fd
        // (utimensat refuses AT_SYMLINK_NOFOLLOW with it: EINVAL); any other call fails on
        // a NULL path (EFAULT).
        if n.args[arg.path] == 0 {
            let nofollow = int_arg(n.args[3]) & libc::AT_SYMLINK_NOFOLLOW != 0;
            let open_file = (n.nr == libc::SYS_utimensat && !nofollow) || is_futimesat(n.nr);
            return Some(if open_file {
                Target::OpenFile(self.fd_link_of_arg(0))
            } else {
                Target::Empty
            });
        }
        let raw = seccomp::read_c_string(n.pid, n.args[arg.path], PATH_MAX).ok()?;
        let dirfd = arg.dirfd.map(|i| int_arg(n.args[i]));
        // An empty path with AT_EMPTY_PATH means the file open on dirfd (the working
        // directory for AT_FDCWD); without it, the call fails with ENOENT.
        if raw.is_empty() {
            if !arg.empty_path {
                return Some(Target::Empty);
            }
            return match (dirfd, arg.op) {
                // removexattrat does not take the working directory for it: EBADF.
                (Some(libc::AT_FDCWD), _) if n.nr == notified::SYS_REMOVEXATTRAT => {
                    Some(Target::Empty)
                }
                (Some(libc::AT_FDCWD), Op::Change { .. }) => Some(Target::OpenFile(PathBuf::from(
                    format!("/proc/{}/cwd", n.pid),
                ))),
                (Some(fd), Op::Change { .. }) => Some(Target::OpenFile(fd_link(n.pid, fd))),
                // linkat's existing file, open on the fd: found.
                _ => None,
            };
        }
        let mut written = Path::new(OsStr::from_bytes(&raw));
        // openat2 with RESOLVE_IN_ROOT takes dirfd for `/`; with RESOLVE_BENEATH an
        // absolute path fails (EXDEV).
        if written.is_absolute() && self.resolve & RESOLVE_IN_ROOT != 0 {
            let start = raw.iter().position(|b| *b != b'/').unwrap_or(raw.len());
            written = Path::new(OsStr::from_bytes(&raw[start..]));
        } else if written.is_absolute() && self.resolve & RESOLVE_BENEATH != 0 {
            return Some(Target::Empty);
        }
        // The path as the sandbox names it: readlink of its cwd or directory fd gives the
        // sandbox's own view.
        let named = if written.is_absolute() {
            written.to_owned()
        } else {
            let dir = match dirfd {
                Some(fd) if fd != libc::AT_FDCWD => std::fs::read_link(fd_link(n.pid, fd)).ok(),
                _ => self
                    .cwd
                    .get_or_init(|| std::fs::read_link(format!("/proc/{}/cwd", n.pid)).ok())
                    .clone(),
            };
            dir?.join(written)
        };
        // Through /proc's magic links (the caller's root, cwd, an fd; /dev/fd/N), which
        // the judge's own lookups do not follow: what they lead to, as the sandbox names
        // it; a final one only for a call that follows it (`lchown /proc/self/root`
        // changes the link). Not a magic link given to link as its existing file: an fd's
        // may name a file without a path (an O_TMPFILE published with linkat), and the
        // caller's own `/proc/self/...` cannot be looked up from outside; taken as found.
        let named = if matches!(arg.op, Op::LinkSource { .. }) && names_a_magic_link(&named) {
            named
        } else {
            let walked = through_magic_links(named, n.pid, self.root, arg.op.follows_final());
            // A final "/" is part of what the call asks (a directory), and the walk drops it.
            if raw.ends_with(b"/") && !walked.as_os_str().as_bytes().ends_with(b"/") {
                walked.join("")
            } else {
                walked
            }
        };
        Some(Target::Name(NamedPath {
            op: arg.op,
            raw,
            named,
        }))
    }
}

/// Magic links followed in one path at most (each leads to a path that could name
/// another).
const MAX_MAGIC_LINKS: usize = 8;

/// `named`, with a leading `/proc/self|thread-self|PID/{root,cwd,fd/N}` or
/// `/dev/{fd/N,stdin,stdout,stderr}` replaced by where that link leads (as the sandbox
/// names it), repeatedly; unchanged where it names no such link or the link leads to no
/// path (a pipe, a socket).
fn through_magic_links(named: PathBuf, pid: u32, root: &OwnedFd, follow_final: bool) -> PathBuf {
    let mut path = named;
    for _ in 0..MAX_MAGIC_LINKS {
        match magic_link_target(&path, pid, root, follow_final) {
            Some(next) => path = next,
            None => break,
        }
    }
    path
}

/// One step of [`through_magic_links`]; a link that is the path's last name only when
/// `follow_final`.
fn magic_link_target(path: &Path, pid: u32, root: &OwnedFd, follow_final: bool) -> Option<PathBuf> {
    // Inside /proc and /dev, ".." means its lexical parent (no symlink there but the
    // magic ones, which are what this step replaces): `/proc/self/../self/root`.
    let normal = lexically_normal(path);
    let mut parts = normal
        .strip_prefix("/")
        .ok()?
        .components()
        .map(|c| c.as_os_str());
    // Whose links: the calling thread's own, another /proc directory on the host (the
    // caller's process: `self` is the thread group's leader, whose working directory and
    // fds a thread that unshared its own may not share), or a process's (or one of its
    // threads') of the sandbox, as the sandbox's /proc names the directory.
    enum Whose {
        Caller,
        Host(PathBuf),
        Sandbox(PathBuf),
    }
    let is_number = |s: &OsStr| !s.is_empty() && s.as_bytes().iter().all(u8::is_ascii_digit);
    let (whose, link) = match parts.next()?.as_bytes() {
        b"dev" => {
            let fd = match parts.next()?.as_bytes() {
                b"fd" => parts.next()?.to_owned(),
                b"stdin" => "0".into(),
                b"stdout" => "1".into(),
                b"stderr" => "2".into(),
                _ => return None,
            };
            // /dev/fd is /proc/self/fd: the process's.
            let (host_tgid, _) = thread_group(pid)?;
            (
                Whose::Host(Path::new("/proc").join(host_tgid.to_string())),
                Path::new("fd").join(fd),
            )
        }
        b"proc" => {
            let who = parts.next()?;
            let mut whose = match who.as_bytes() {
                b"thread-self" => Whose::Caller,
                b"self" => Whose::Host(Path::new("/proc").join(thread_group(pid)?.0.to_string())),
                // pid 1 is netbox's and not dumpable: its links are EACCES to CMD.
                b"1" => return None,
                _ if is_number(who) => Whose::Sandbox(Path::new("/proc").join(who)),
                _ => return None,
            };
            let mut what = parts.next()?;
            // A thread's links (`/proc/PID/task/TID/...`, the TID as the sandbox numbers
            // it): through the sandbox's /proc.
            if what.as_bytes() == b"task" {
                let tid = parts.next()?;
                if !is_number(tid) {
                    return None;
                }
                let process = match whose {
                    Whose::Sandbox(dir) => dir,
                    Whose::Caller | Whose::Host(_) => {
                        Path::new("/proc").join(thread_group(pid)?.1.to_string())
                    }
                };
                whose = Whose::Sandbox(process.join("task").join(tid));
                what = parts.next()?;
            }
            let link = match what.as_bytes() {
                b"root" => PathBuf::from("root"),
                b"cwd" => PathBuf::from("cwd"),
                b"fd" => Path::new("fd").join(parts.next()?),
                _ => return None,
            };
            (whose, link)
        }
        _ => return None,
    };
    let rest: PathBuf = parts.collect();
    if !follow_final && ends_at_link(path, &rest) {
        return None;
    }
    let target = match whose {
        Whose::Caller => {
            std::fs::read_link(Path::new("/proc").join(pid.to_string()).join(&link)).ok()?
        }
        Whose::Host(dir) => std::fs::read_link(dir.join(&link)).ok()?,
        // CMD's own processes, which CMD may follow: read through the sandbox's own /proc
        // (readlink, which follows nothing).
        Whose::Sandbox(dir) => {
            let dir = open_in_sandbox(root, &dir, false)?;
            PathBuf::from(nix::fcntl::readlinkat(&dir, &link).ok()?)
        }
    };
    // "pipe:[N]", "socket:[N]", "anon_inode:...": no path to judge.
    if !target.is_absolute() {
        return None;
    }
    Some(if rest.as_os_str().is_empty() {
        target
    } else {
        target.join(rest)
    })
}

/// The thread group of the thread `pid` (the host's number): its leader as the host
/// numbers it, and as the sandbox does (`Tgid:`, and the last of `NStgid:`).
pub fn thread_group(pid: u32) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let host = field("Tgid:")?.trim().parse().ok()?;
    let inner = field("NStgid:")?.split_whitespace().last()?.parse().ok()?;
    Some((host, inner))
}

/// Whether a magic link is the last name of `path`, as the kernel walks it: nothing past
/// it (`rest`, what follows it, is empty), not even a "/" or "/." (which Path drops, and
/// which make the walk go through the link).
fn ends_at_link(path: &Path, rest: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    rest.as_os_str().is_empty() && !bytes.ends_with(b"/") && !bytes.ends_with(b"/.")
}

/// Whether `path` is a magic link and nothing past it: `/proc/PID/{root,cwd,fd/N}` (also
/// `self`, `thread-self`, a task's) or `/dev/fd/N`, `/dev/stdin`...
fn names_a_magic_link(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    if bytes.ends_with(b"/") || bytes.ends_with(b"/.") {
        return false;
    }
    let normal = lexically_normal(path);
    let parts: Vec<&[u8]> = normal
        .components()
        .skip(1)
        .map(|c| c.as_os_str().as_bytes())
        .collect();
    let dir_link = |name: &[u8]| matches!(name, b"root" | b"cwd");
    match parts[..] {
        [b"dev", b"fd", _] | [b"dev", b"stdin" | b"stdout" | b"stderr"] => true,
        [b"proc", _, b"fd", _] | [b"proc", _, b"task", _, b"fd", _] => true,
        [b"proc", _, name] | [b"proc", _, b"task", _, name] => dir_link(name),
        _ => false,
    }
}

/// Whether the walk of `path` goes through pid 1's `root`, `cwd` or `fd` links (a final
/// one only when `follow_final`): pid 1 is netbox's and not dumpable, so they are EACCES to
/// every process in the sandbox.
fn through_pid1_links(path: &Path, follow_final: bool) -> bool {
    let normal = lexically_normal(path);
    let parts: Vec<&[u8]> = normal
        .components()
        .skip(1)
        .map(|c| c.as_os_str().as_bytes())
        .collect();
    let (link_at, name) = match parts[..] {
        [b"proc", b"1", b"task", _, name, ..] => (4, name),
        [b"proc", b"1", name, ..] => (2, name),
        _ => return false,
    };
    if !matches!(name, b"root" | b"cwd" | b"fd") {
        return false;
    }
    // The link itself: `fd/N`'s N is the link, not `fd`.
    let last = if name == b"fd" { link_at + 1 } else { link_at };
    let rest: PathBuf = parts
        .iter()
        .skip(last + 1)
        .map(|p| OsStr::from_bytes(p))
        .collect();
    follow_final || !ends_at_link(path, &rest)
}

/// For a path under /proc or /dev: its part up to the first magic link (`root`, `cwd`,
/// `fd/N`, `stdin`...) with `.` dropped and `..` taken as the lexical parent (no symlink
/// lies there but the magic ones), the rest as it is (past the link, `..` means what the
/// link's target makes it). Any other path as it is.
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    if !(path.starts_with("/proc") || path.starts_with("/dev")) {
        return path.to_owned();
    }
    let mut out = PathBuf::from("/");
    let mut components = path.components();
    while let Some(component) = components.next() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                let link = matches!(
                    name.as_bytes(),
                    b"root" | b"cwd" | b"fd" | b"stdin" | b"stdout" | b"stderr"
                );
                if link {
                    if name.as_bytes() == b"fd" {
                        out.extend(components.next());
                    }
                    out.extend(components);
                    return out;
                }
            }
            _ => {}
        }
    }
    out
}

/// renameat2's flags (0 for rename and renameat).
fn rename_flags(n: &Notification) -> u32 {
    if n.nr == libc::SYS_renameat2 {
        uint_arg(n.args[4])
    } else {
        0
    }
}

/// `named` (a final "/" aside) as a mount point of its own: a rename onto it is EBUSY.
fn mount_point_verdict(root: &OwnedFd, named: &Path) -> Option<Verdict> {
    use crate::sys::mountid::fd_facts;
    let target_fd = open_in_sandbox(root, &without_final_slashes(named), false)?;
    let target = fd_facts(target_fd.as_fd()).ok()?;
    (target.mount_root == Some(true)).then(|| Verdict {
        path: named.to_owned(),
        resolved: fd_path(&target_fd),
        denied: true,
        busy: true,
    })
}

/// `path` without the "/"s that end it (but `/` itself).
fn without_final_slashes(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    let end = bytes.iter().rposition(|b| *b != b'/').map_or(1, |i| i + 1);
    PathBuf::from(OsStr::from_bytes(&bytes[..end.min(bytes.len())]))
}

/// Whether a rename of `from` onto `to` gets past the checks of the two names' kinds (then
/// a mount point at either end is EBUSY): the source exists; a name ending in "/" is a
/// directory's (for a plain rename, the source must be one if either end has the "/");
/// the target's name is not too long to look up; RENAME_NOREPLACE finds no target,
/// RENAME_EXCHANGE finds one; a target is of the source's kind (but for an exchange), and
/// it is not the source itself (a rename onto itself does nothing, and succeeds).
fn rename_kinds_agree(root: &OwnedFd, from: &NamedPath, to: &NamedPath, flags: u32) -> bool {
    use crate::sys::mountid::fd_facts;
    let entry = |name: &NamedPath| {
        let fd = open_in_sandbox(root, &without_final_slashes(&name.named), false)?;
        let facts = fd_facts(fd.as_fd()).ok()?;
        let stat = nix::sys::stat::fstat(&fd).ok()?;
        Some((facts.is_directory, (stat.st_dev, stat.st_ino)))
    };
    let Some((source_is_dir, source_id)) = entry(from) else {
        return false;
    };
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    if from.trailing_slash() && !source_is_dir {
        return false;
    }
    if !exchange && to.trailing_slash() && !source_is_dir {
        return false;
    }
    if name_too_long_for_its_directory(root, &to.named) {
        return false;
    }
    match entry(to) {
        None => !exchange,
        Some(_) if flags & libc::RENAME_NOREPLACE != 0 => false,
        Some((_, target_id)) if target_id == source_id => false,
        Some((target_is_dir, _)) if to.trailing_slash() && !target_is_dir => false,
        Some((target_is_dir, _)) => exchange || target_is_dir == source_is_dir,
    }
}

/// Whether the kernel refuses `op` on the name `raw` for its shape, before any read-only
/// check; `Path` would hide both cases (it drops a trailing "/" and a final "."):
/// - a final "." or ".." (or "/" alone): creating it is EEXIST, removing it EISDIR,
///   EINVAL, ENOTEMPTY or EBUSY, renaming to or from it EBUSY, opening it with O_CREAT
///   EISDIR;
/// - a trailing "/": creating anything but a directory is ENOENT (or EEXIST), and
///   opening with O_CREAT is EISDIR. (unlink, rmdir and rename check the mount first.)
/// - a directory on the way named longer than NAME_MAX: ENAMETOOLONG where the walk meets
///   it (a final name that long: `final_name_too_long`).
fn refused_for_its_name(op: Op, raw: &[u8]) -> bool {
    let end = raw.iter().rposition(|b| *b != b'/').map_or(0, |i| i + 1);
    let trimmed = &raw[..end];
    let trailing_slash = trimmed.len() < raw.len();
    let last = trimmed.rsplit(|b| *b == b'/').next().unwrap_or_default();
    let dots = matches!(last, b"" | b"." | b"..");
    let too_long = |name: &[u8]| name.len() > NAME_MAX;
    let directories = &trimmed[..trimmed.len() - last.len()];
    if directories.split(|b| *b == b'/').any(too_long) {
        return true;
    }
    let creates = |flags: u64| flags & u64::from(libc::O_CREAT.unsigned_abs()) != 0;
    match op {
        Op::Create { dir } => dots || (trailing_slash && !dir),
        Op::Remove { .. } | Op::RenameTo => dots,
        Op::Open { flags } => creates(flags) && (dots || trailing_slash),
        Op::Change { .. } | Op::Truncate | Op::LinkSource { .. } => false,
    }
}

/// Judges one name the call writes: a verdict, and (for the two ends of a rename) the
/// mount id of the directory that holds it. Every lookup is made only when needed: each
/// is a syscall on the notified caller's clock.
fn judge_path(
    root: &OwnedFd,
    named: &Path,
    op: Op,
    want_mount: bool,
    pid: u32,
) -> (Verdict, Option<u64>) {
    let place = Place::new(root, named);
    let parent_mount = if want_mount {
        place
            .parent()
            .and_then(|p| crate::sys::mountid::mount_id_of_fd(p.as_fd()).ok())
    } else {
        None
    };
    let found = match op {
        Op::Create { .. } => judge_create(&place),
        Op::Remove { dir } => judge_remove(&place, dir),
        Op::RenameTo => judge_rename_to(&place),
        Op::LinkSource { .. } => Found::ALLOWED,
        Op::Change { follow } => match open_in_sandbox(root, named, follow) {
            Some(file) => Found::on_read_only(&file),
            None => Found::ALLOWED,
        },
        // truncate checks the caller's permission to write before the mount (EACCES)
        // since Linux 6.14; before, the mount first.
        Op::Truncate => match open_in_sandbox(root, named, true) {
            Some(file) if is_kind(&file, libc::S_IFREG) => {
                if truncate_checks_permission_first() && refused_for_permission(pid, &file) {
                    Found::ALLOWED
                } else {
                    Found::on_read_only(&file)
                }
            }
            _ => Found::ALLOWED,
        },
        Op::Open { flags } => judge_open(&place, flags, pid),
    };
    let verdict = Verdict {
        path: named.to_owned(),
        resolved: found.resolved,
        denied: found.denied,
        busy: found.busy,
    };
    (verdict, parent_mount)
}

/// What judging one name found.
struct Found {
    denied: bool,
    /// Where the name leads, for the reason (when denied).
    resolved: Option<PathBuf>,
    /// Refused for being a mount point of its own (EBUSY).
    busy: bool,
}

impl Found {
    const ALLOWED: Found = Found {
        denied: false,
        resolved: None,
        busy: false,
    };

    fn denied(resolved: Option<PathBuf>) -> Found {
        Found {
            denied: true,
            resolved,
            busy: false,
        }
    }

    /// Denied if `file` is on a read-only mount.
    fn on_read_only(file: &OwnedFd) -> Found {
        match fd_read_only(file) {
            Some(true) => Found::denied(fd_path(file)),
            _ => Found::ALLOWED,
        }
    }
}

/// A name in the sandbox, with its parent directory opened at most once, when first
/// needed.
struct Place<'a> {
    root: &'a OwnedFd,
    named: &'a Path,
    parent: std::cell::OnceCell<Option<OwnedFd>>,
}

impl<'a> Place<'a> {
    fn new(root: &'a OwnedFd, named: &'a Path) -> Place<'a> {
        Place {
            root,
            named,
            parent: std::cell::OnceCell::new(),
        }
    }

    fn parent(&self) -> Option<&OwnedFd> {
        self.parent
            .get_or_init(|| {
                self.named
                    .parent()
                    .and_then(|p| open_dir_in_sandbox(self.root, p))
            })
            .as_ref()
    }

    fn parent_read_only(&self) -> bool {
        self.parent().and_then(fd_read_only) == Some(true)
    }

    /// Whether creating a name that is not there is refused for the mount: the parent is
    /// read-only and not /proc's (/proc looks every name up itself, and one it does not
    /// have is ENOENT first: `mkdir /proc/sys/kernel/x`).
    fn parent_refuses_create(&self) -> bool {
        self.parent_read_only() && !self.parent().is_some_and(is_procfs)
    }

    /// Denied in the parent directory: where the name lands, for the reason.
    fn denied_in_parent(&self) -> Found {
        Found::denied(self.parent().and_then(|dir| landing(dir, self.named)))
    }

    /// The name itself, looked up beneath its parent.
    fn lookup(&self, follow: bool) -> Option<OwnedFd> {
        lookup(self.root, self.named, follow, self.parent())
    }
}

/// mkdir, mknod, symlink, link's new name: only a read-only directory refuses a create,
/// and then only a name that is not there (EEXIST first), so the name is looked up only
/// in a read-only directory.
fn judge_create(place: &Place) -> Found {
    if !place.parent_refuses_create() || place.lookup(false).is_some() {
        return Found::ALLOWED;
    }
    place.denied_in_parent()
}

/// unlink, rmdir, rename's old name: the mount is checked before the name is looked up;
/// then a name that is a mount point of its own (a pinned .git, a placeholder) cannot be
/// removed or moved away (EBUSY), once the call is of the right kind for it (unlink of a
/// directory is EISDIR first, rmdir of a file ENOTDIR).
fn judge_remove(place: &Place, dir: Option<bool>) -> Found {
    if place.parent_read_only() {
        return place.denied_in_parent();
    }
    // unlink of a name ending in "/" is ENOTDIR (or EISDIR) before a mount point is EBUSY.
    let trailing_slash = place.named.as_os_str().as_bytes().ends_with(b"/");
    match place.lookup(false) {
        Some(_) if trailing_slash && dir == Some(false) => Found::ALLOWED,
        Some(entry) if is_busy_mount_point(&entry, dir, place.parent()) => Found {
            denied: true,
            resolved: fd_path(&entry),
            busy: true,
        },
        _ => Found::ALLOWED,
    }
}

/// rename's new name: the mount first. Replacing a mount point is EBUSY too, but only
/// past type and flag checks on both ends: judged with both names at hand
/// (`rename_onto_mount_point`).
fn judge_rename_to(place: &Place) -> Found {
    if place.parent_read_only() {
        return place.denied_in_parent();
    }
    Found::ALLOWED
}

/// open, openat, openat2, creat: what the flags make of the name.
fn judge_open(place: &Place, flags: u64, pid: u32) -> Found {
    let has = |flag: i32| flags & u64::from(flag.unsigned_abs()) != 0;
    // O_PATH opens nothing for writing. O_CREAT with O_DIRECTORY (O_TMPFILE has it) is
    // EINVAL since Linux 6.4.
    if has(libc::O_PATH)
        || (has(libc::O_CREAT) && has(libc::O_DIRECTORY) && creat_directory_is_einval())
    {
        return Found::ALLOWED;
    }
    let writes = flags & u64::from(libc::O_ACCMODE.unsigned_abs()) != 0 || has(libc::O_TRUNC);
    // O_CREAT|O_EXCL does not follow a final symlink, nor does O_NOFOLLOW.
    let exclusive = has(libc::O_CREAT) && has(libc::O_EXCL);
    // An exclusive create is a create: refused only in a read-only directory.
    if exclusive && !place.parent_refuses_create() {
        return Found::ALLOWED;
    }
    let follow = !(has(libc::O_NOFOLLOW) || exclusive);
    // O_TMPFILE names a directory and creates an unnamed file in it: refused when that
    // directory's mount is read-only.
    let tmpfile = flags & u64::from(libc::O_TMPFILE.unsigned_abs())
        == u64::from(libc::O_TMPFILE.unsigned_abs());
    if tmpfile {
        // A trailing "/" or "/." follows a final symlink even with O_NOFOLLOW.
        let bytes = place.named.as_os_str().as_bytes();
        let follow = follow || bytes.ends_with(b"/") || bytes.ends_with(b"/.");
        // A name that is not a directory is ENOTDIR first.
        return match open_in_sandbox(place.root, place.named, follow) {
            Some(dir) if is_kind(&dir, libc::S_IFDIR) => Found::on_read_only(&dir),
            _ => Found::ALLOWED,
        };
    }
    // A final "/" wants a directory: anything else is ENOTDIR (`open(".envrc/")`), and a
    // directory opened for writing EISDIR.
    let wants_directory = place.named.as_os_str().as_bytes().ends_with(b"/");
    match place.lookup(follow) {
        Some(_) if exclusive || !writes => Found::ALLOWED,
        Some(_) if wants_directory => Found::ALLOWED,
        Some(file) => match Found::on_read_only(&file) {
            // Only a regular file is changed by it: opening anything else for writing is
            // refused for another reason first (a directory: EISDIR; a symlink with
            // O_NOFOLLOW: ELOOP) or is I/O, not a change to the filesystem (a device,
            // fifo or socket).
            found if found.denied && !is_kind(&file, libc::S_IFREG) => Found::ALLOWED,
            // Without O_TRUNC, the kernel checks the caller's permission to write the
            // file before the mount (may_open before the write access that says EROFS):
            // a file it may not write is EACCES, not a refused write.
            found if found.denied && !has(libc::O_TRUNC) && refused_for_permission(pid, &file) => {
                Found::ALLOWED
            }
            found => found,
        },
        // Following a final symlink to nothing, O_CREAT creates its target: where that
        // lands decides.
        None if has(libc::O_CREAT) && follow && is_symlink(place.root, place.named) => {
            match dangling_target(place.root, place.named) {
                Some(target) => {
                    let (denied, resolved) = create_verdict(place.root, &target);
                    Found {
                        denied,
                        resolved,
                        busy: false,
                    }
                }
                // A link to a name ending in "/" (EISDIR), or a chain too long to follow.
                None => Found::ALLOWED,
            }
        }
        None if has(libc::O_CREAT) && place.parent_refuses_create() => place.denied_in_parent(),
        None => Found::ALLOWED,
    }
}

/// openat2 with RESOLVE_IN_ROOT or RESOLVE_BENEATH: the path is resolved with the
/// caller's directory fd as its root or its limit (absolute symlinks, `..`, an absolute
/// path: each means something else than from `/`), so it is resolved again the same way,
/// beneath the same directory as netbox opens it, with the same resolve flags: the kernel
/// applies the rules, not an imitation of them.
fn judge_confined_open(
    n: &Notification,
    root: &OwnedFd,
    flags: u64,
    resolve: u64,
) -> Option<Verdict> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let has = |flag: i32| flags & u64::from(flag.unsigned_abs()) != 0;
    let tmpfile = flags & u64::from(libc::O_TMPFILE.unsigned_abs())
        == u64::from(libc::O_TMPFILE.unsigned_abs());
    let writes = flags & u64::from(libc::O_ACCMODE.unsigned_abs()) != 0 || has(libc::O_TRUNC);
    if has(libc::O_PATH)
        || !(writes || has(libc::O_CREAT) || tmpfile)
        || (has(libc::O_CREAT) && has(libc::O_DIRECTORY) && creat_directory_is_einval())
    {
        return None;
    }
    let raw = seccomp::read_c_string(n.pid, n.args[1], PATH_MAX).ok()?;
    // An empty path is ENOENT (openat2 has no AT_EMPTY_PATH).
    if raw.is_empty() {
        return None;
    }
    let dirfd = int_arg(n.args[0]);
    let dir_path = if dirfd == libc::AT_FDCWD {
        std::fs::read_link(format!("/proc/{}/cwd", n.pid)).ok()?
    } else {
        std::fs::read_link(fd_link(n.pid, dirfd)).ok()?
    };
    let dir = open_dir_in_sandbox(root, &dir_path)?;
    let resolve_flags =
        ResolveFlag::from_bits_truncate(resolve) | ResolveFlag::RESOLVE_NO_MAGICLINKS;
    let exclusive = has(libc::O_CREAT) && has(libc::O_EXCL);
    let lookup = |path: &[u8], extra: OFlag| {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | extra)
            .resolve(resolve_flags);
        crate::sys::resolve::openat2(&dir, OsStr::from_bytes(path), how)
    };
    let named = dir_path.join(OsStr::from_bytes(&raw));
    let denied = |file: &OwnedFd| Verdict {
        path: named.clone(),
        resolved: fd_path(file),
        denied: true,
        busy: false,
    };
    if tmpfile {
        let target = lookup(&raw, OFlag::O_DIRECTORY).ok()?;
        return (fd_read_only(&target) == Some(true)).then(|| denied(&target));
    }
    let follow = if has(libc::O_NOFOLLOW) || exclusive {
        OFlag::O_NOFOLLOW
    } else {
        OFlag::empty()
    };
    match lookup(&raw, follow) {
        Ok(file) => {
            let changes = writes && !exclusive && is_kind(&file, libc::S_IFREG);
            let refused = changes
                && fd_read_only(&file) == Some(true)
                && (has(libc::O_TRUNC) || !refused_for_permission(n.pid, &file));
            refused.then(|| denied(&file))
        }
        Err(nix::errno::Errno::ENOENT) if has(libc::O_CREAT) => {
            // A dangling symlink as the final name: O_CREAT creates its target, so its
            // body is followed (beneath the same directory, by the same rules) to the
            // name that would be created (review 26).
            let mut raw = raw.clone();
            for hop in 0.. {
                match lookup(&raw, OFlag::O_NOFOLLOW) {
                    Ok(link) if is_kind(&link, libc::S_IFLNK) => {
                        if hop >= MAX_SYMLINK_HOPS || resolve & RESOLVE_NO_SYMLINKS != 0 {
                            return None; // ELOOP
                        }
                        let body = nix::fcntl::readlinkat(&link, "").ok()?;
                        let body = body.as_bytes().to_vec();
                        if body.is_empty() || body.ends_with(b"/") {
                            return None; // ENOENT, EISDIR
                        }
                        raw = if body.starts_with(b"/") {
                            if resolve & RESOLVE_BENEATH != 0 {
                                return None; // EXDEV
                            }
                            body
                        } else {
                            match raw.iter().rposition(|b| *b == b'/') {
                                Some(i) => [&raw[..=i], &body[..]].concat(),
                                None => body,
                            }
                        };
                    }
                    Ok(_) => return None,
                    Err(nix::errno::Errno::ENOENT) => break,
                    Err(_) => return None,
                }
            }
            let end = raw.iter().rposition(|b| *b == b'/');
            let parent: &[u8] = match end {
                Some(0) => b"/",
                Some(i) => &raw[..i],
                None => b".",
            };
            let parent = lookup(parent, OFlag::O_DIRECTORY).ok()?;
            let refused = fd_read_only(&parent) == Some(true) && !is_procfs(&parent);
            refused.then(|| denied(&parent))
        }
        Err(_) => None,
    }
}

/// The file open on a /proc/PID/fd link: its path and whether its mount is read-only.
fn judge_open_file(link: &Path) -> Option<Verdict> {
    let path = std::fs::read_link(link).ok()?;
    let denied = nix::sys::statvfs::statvfs(link)
        .is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    Some(Verdict {
        resolved: Some(path.clone()),
        path,
        denied,
        busy: false,
    })
}

/// Opens a process's root (O_PATH): the sandbox's `/`, from outside.
pub fn open_root(pid: u32) -> Option<OwnedFd> {
    nix::fcntl::open(
        format!("/proc/{pid}/root").as_str(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// Symlinks followed to find where an O_CREAT open through a chain of them lands: each
/// hop is a lookup from the root on the notified caller's clock (and netbox's CPU), so a
/// long chain is not followed to its end (the kernel follows 40) and its write, refused
/// or not, goes unlogged; a command opening one in a loop cannot make the watcher do
/// quadratic work.
const MAX_LINK_HOPS: usize = 8;

/// Where an O_CREAT open of `named` creates its file when `named` is a symlink (or a chain
/// of them, up to `MAX_LINK_HOPS`) that leads to nothing: the final target, as the
/// sandbox names it. `None` if `named` is not a symlink, or leads to something.
fn dangling_target(root: &OwnedFd, named: &Path) -> Option<PathBuf> {
    let mut path = named.to_owned();
    for _ in 0..MAX_LINK_HOPS {
        let entry = open_in_sandbox(root, &path, false)?;
        if !is_kind(&entry, libc::S_IFLNK) {
            return None;
        }
        // A relative target is read from the link's own directory.
        let target = PathBuf::from(nix::fcntl::readlinkat(&entry, "").ok()?);
        // One ending in "/" names a directory, which O_CREAT does not make (EISDIR).
        if target.as_os_str().as_bytes().ends_with(b"/") {
            return None;
        }
        path = if target.is_absolute() {
            target
        } else {
            path.parent()?.join(target)
        };
        if open_in_sandbox(root, &path, false).is_none() {
            return Some(path);
        }
    }
    None
}

/// The verdict on creating `path`: refused if its directory is on a read-only mount, and
/// then where it lands.
fn create_verdict(root: &OwnedFd, path: &Path) -> (bool, Option<PathBuf>) {
    let dir = path.parent().and_then(|p| open_dir_in_sandbox(root, p));
    match dir {
        Some(dir) if fd_read_only(&dir) == Some(true) => (true, landing(&dir, path)),
        _ => (false, None),
    }
}

/// Opens (O_PATH) an absolute sandbox path inside the sandbox's root, following a final
/// symlink or not; RESOLVE_IN_ROOT keeps every symlink inside that root.
fn open_in_sandbox(root: &OwnedFd, path: &Path, follow: bool) -> Option<OwnedFd> {
    resolve_in_sandbox(root, path, follow).ok()
}

/// Opens (O_PATH) a directory of the sandbox, following symlinks: `None` for anything
/// else (a name under a file is ENOTDIR to the kernel, not a place to write).
fn open_dir_in_sandbox(root: &OwnedFd, path: &Path) -> Option<OwnedFd> {
    open_in_sandbox(root, path, true).filter(|dir| is_kind(dir, libc::S_IFDIR))
}

/// [`open_in_sandbox`], with the reason it failed.
fn resolve_in_sandbox(root: &OwnedFd, path: &Path, follow: bool) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    // By bytes: Path::strip_prefix would drop a final "/", which makes the kernel want a
    // directory there (ENOTDIR for a file).
    let bytes = path.as_os_str().as_bytes();
    let start = bytes.iter().position(|b| *b != b'/').unwrap_or(bytes.len());
    let inside = if start == bytes.len() {
        Path::new(".")
    } else {
        Path::new(OsStr::from_bytes(&bytes[start..]))
    };
    let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if !follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    crate::sys::resolve::openat2(root, inside, how)
}

/// Opens (O_PATH) a name whose directory is open already: one step from there instead of
/// a walk from `/`, which is most of what a create in a deep directory costs. A final
/// symlink to follow is resolved from the root, as anything absolute in it must be.
fn lookup(root: &OwnedFd, named: &Path, follow: bool, parent: Option<&OwnedFd>) -> Option<OwnedFd> {
    use nix::fcntl::OFlag;
    // No file name (a path ending in ".."): resolve it whole.
    let (Some(parent), Some(name)) = (parent, named.file_name()) else {
        return open_in_sandbox(root, named, follow);
    };
    use nix::fcntl::{OpenHow, ResolveFlag};
    // A symlink to follow stops this one step (ELOOP) and is resolved from the root.
    let (flags, resolve) = if follow {
        (
            OFlag::O_PATH | OFlag::O_CLOEXEC,
            ResolveFlag::RESOLVE_NO_SYMLINKS,
        )
    } else {
        (
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
    };
    let how = OpenHow::new().flags(flags).resolve(resolve);
    match crate::sys::resolve::openat2(parent, name, how) {
        Ok(entry) => Some(entry),
        Err(nix::errno::Errno::ELOOP) => open_in_sandbox(root, named, true),
        Err(_) => None,
    }
}

/// Where `named` lands in the directory open as `dir`, in the sandbox's view.
fn landing(dir: &OwnedFd, named: &Path) -> Option<PathBuf> {
    Some(fd_path(dir)?.join(named.file_name()?))
}

/// Where an fd opened inside the sandbox leads, in the sandbox's view.
fn fd_path(fd: &OwnedFd) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// Whether removing or moving away `entry` fails with EBUSY: it is the root of a mount
/// other than its parent directory's, and the call is of the right kind for it
/// (`removes_dir`: rmdir or unlink; `None` for rename, which takes either).
fn is_busy_mount_point(
    entry: &OwnedFd,
    removes_dir: Option<bool>,
    parent: Option<&OwnedFd>,
) -> bool {
    use crate::sys::mountid::{fd_facts, mount_id_of_fd};
    let (Some(parent), Ok(facts)) = (parent, fd_facts(entry.as_fd())) else {
        return false;
    };
    if removes_dir.is_some_and(|dir| dir != facts.is_directory) {
        return false;
    }
    // A named entry that is a mount's root is on another mount than its directory;
    // kernels before 5.8 do not say so, and then the two mount ids are compared.
    match facts.mount_root {
        Some(root) => root,
        None => matches!(
            (facts.mount_id, mount_id_of_fd(parent.as_fd())),
            (Some(a), Ok(b)) if a != b
        ),
    }
}

/// Whether asking to write `file` fails the caller's permission check (EACCES) before
/// the mount is asked: its filesystem is not read-only as a whole (then that check itself
/// says EROFS) and the caller may not write the file.
fn refused_for_permission(pid: u32, file: &OwnedFd) -> bool {
    !caller_may_write(pid, file) && !superblock_read_only(pid, file)
}

/// Whether the filesystem `file` lies on is read-only itself, not only the mount (its
/// super options in the caller's mountinfo). Unknown counts as read-only: the write is
/// then taken for one the mount refuses.
fn superblock_read_only(pid: u32, file: &OwnedFd) -> bool {
    let Some(mount_id) = crate::sys::mountid::fd_facts(file.as_fd())
        .ok()
        .and_then(|f| f.mount_id)
    else {
        return true;
    };
    let Ok(mountinfo) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) else {
        return true;
    };
    let id = mount_id.to_string();
    mountinfo
        .lines()
        .find(|line| line.split(' ').next() == Some(id.as_str()))
        .and_then(|line| line.split(" - ").nth(1))
        .and_then(|after| after.split(' ').nth(2))
        .is_none_or(|options| options.split(',').any(|o| o == "ro"))
}

/// Whether truncate(2) checks the caller's permission before the mount: Linux 6.14 on.
fn truncate_checks_permission_first() -> bool {
    kernel_at_least(6, 14)
}

/// Whether the caller's credentials let it write the open file, by its mode bits (as the
/// kernel's generic_permission() decides for a caller without capabilities; ACLs aside).
/// A caller with any capability (root of a nested user namespace may override the bits
/// for files its namespace maps), or unknown credentials, counts as allowed: the write is
/// then taken for one the mount refuses.
fn caller_may_write(pid: u32, file: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(stat) = nix::sys::stat::fstat(file) else {
        return true;
    };
    // An access ACL can grant what the mode bits do not (and its mask limit the group
    // bits): not judged here, so the write counts as one the mount refused.
    let link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    if crate::sys::xattr::has_following(&link, "system.posix_acl_access") {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let capable = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .is_none_or(|caps| !caps.trim().trim_start_matches('0').is_empty());
    if capable {
        return true;
    }
    // The fourth id of Uid:/Gid: is the one file access is checked with (fsuid, fsgid).
    let fs_id = |field: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .split_whitespace()
            .nth(3)?
            .parse()
            .ok()
    };
    let (Some(uid), Some(gid)) = (fs_id("Uid:"), fs_id("Gid:")) else {
        return true;
    };
    let in_group = gid == stat.st_gid
        || status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|g| g.split_whitespace().any(|g| g.parse() == Ok(stat.st_gid)));
    let bit = if uid == stat.st_uid {
        libc::S_IWUSR
    } else if in_group {
        libc::S_IWGRP
    } else {
        libc::S_IWOTH
    };
    stat.st_mode & bit != 0
}

/// Whether `named`'s final name is longer than NAME_MAX and its directory's filesystem
/// refuses such a name when it looks it up (ENAMETOOLONG).
fn name_too_long_for_its_directory(root: &OwnedFd, named: &Path) -> bool {
    use nix::sys::statfs::{
        FsType, BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, OVERLAYFS_SUPER_MAGIC, TMPFS_MAGIC,
        XFS_SUPER_MAGIC,
    };
    if named.file_name().map_or(0, OsStr::len) <= NAME_MAX {
        return false;
    }
    let Some(dir) = named.parent().and_then(|p| open_dir_in_sandbox(root, p)) else {
        return false;
    };
    let checked: [FsType; 5] = [
        EXT4_SUPER_MAGIC,
        TMPFS_MAGIC,
        XFS_SUPER_MAGIC,
        BTRFS_SUPER_MAGIC,
        OVERLAYFS_SUPER_MAGIC,
    ];
    nix::sys::statfs::fstatfs(&dir).is_ok_and(|s| checked.contains(&s.filesystem_type()))
}

/// Whether `named` itself (its final name not followed) is a symlink.
fn is_symlink(root: &OwnedFd, named: &Path) -> bool {
    open_in_sandbox(root, &without_final_slashes(named), false)
        .is_some_and(|entry| is_kind(&entry, libc::S_IFLNK))
}

/// Whether an open file lies on a proc filesystem.
fn is_procfs(fd: &OwnedFd) -> bool {
    nix::sys::statfs::fstatfs(fd)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

/// Whether this kernel refuses open(O_CREAT|O_DIRECTORY) with EINVAL (Linux 6.4 on;
/// before, it could create a regular file).
fn creat_directory_is_einval() -> bool {
    kernel_at_least(6, 4)
}

/// Whether the running kernel is `major.minor` or later.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    static RELEASE: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    let running = *RELEASE.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut numbers = release.split('.').map(|part| {
            part.bytes()
                .take_while(u8::is_ascii_digit)
                .fold(0u32, |n, d| {
                    n.saturating_mul(10).saturating_add(u32::from(d - b'0'))
                })
        });
        (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
    });
    running >= (major, minor)
}

/// Whether an open file is of `kind` (an `S_IF*` file type).
fn is_kind(fd: &OwnedFd, kind: libc::mode_t) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == kind)
}

/// Whether the mount an open file lies on is read-only.
fn fd_read_only(fd: &OwnedFd) -> Option<bool> {
    nix::sys::statvfs::fstatvfs(fd)
        .ok()
        .map(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
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
fn openat2_how(n: &Notification) -> Option<(u64, u64)> {
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

#[cfg(test)]
mod tests {
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
