//! The caller's view of a path: read from its memory, resolved in its own root and
//! working directory, through the magic links of /proc as the kernel follows them.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::args::{int_arg, Op, PathArg, PATH_MAX};
use super::kernel_order::{name_too_long_for_its_directory, refused_for_its_name};
use super::lookup::{open_in_sandbox, resolve_in_sandbox, RESOLVE_BENEATH, RESOLVE_IN_ROOT};
use super::{fd_link, is_futimesat, Verdict};
use crate::sys::notified::{self};
use crate::sys::seccomp::{self, Notification};

/// What a path argument turns out to be, once read from the caller.
pub(super) enum Target {
    /// The file open on one of the caller's fds, or its working directory (a NULL path, or
    /// an empty one with `AT_EMPTY_PATH`): its /proc link.
    OpenFile(PathBuf),
    Name(NamedPath),
    /// An empty path without `AT_EMPTY_PATH`: the call fails with ENOENT before anything.
    Empty,
}

/// A path argument as the caller wrote it and as the sandbox names it.
pub(super) struct NamedPath {
    pub(super) op: Op,
    /// As written: its shape (a trailing "/", a final ".") matters to the kernel.
    pub(super) raw: Vec<u8>,
    /// Absolute, in the sandbox's view, through /proc's magic links (but for link's
    /// existing file).
    pub(super) named: PathBuf,
}

impl NamedPath {
    /// Whether the call writes this name (link's existing file it only looks up).
    pub(super) fn is_written(&self) -> bool {
        !matches!(self.op, Op::LinkSource { .. })
    }

    pub(super) fn refused_for_its_shape(&self) -> bool {
        refused_for_its_name(self.op, &self.raw)
    }

    /// A final name longer than NAME_MAX, where the directory's filesystem refuses it at
    /// lookup (ENAMETOOLONG), which every call but unlink, rmdir and rename's ends makes
    /// before the mount is asked. sysfs, cgroupfs and FUSE do not refuse it there (they
    /// answer EROFS), so only the filesystems known to are trusted to.
    pub(super) fn final_name_too_long(&self, root: &OwnedFd) -> bool {
        if matches!(self.op, Op::Remove { .. } | Op::RenameTo) {
            return false;
        }
        name_too_long_for_its_directory(root, &self.named)
    }

    pub(super) fn trailing_slash(&self) -> bool {
        self.raw.ends_with(b"/")
    }

    /// link's existing file, missing: only if the lookup says so itself, or it lies
    /// behind pid 1's links (EACCES). An fd's own link (`/proc/self/fd/N`, `/dev/fd/N`:
    /// how an O_TMPFILE is linked into place) leads where netbox cannot follow from
    /// outside: taken as found.
    pub(super) fn is_missing_link_source(&self, root: &OwnedFd) -> bool {
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
    pub(super) fn not_denied(&self) -> Verdict {
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
pub(super) struct Caller<'a> {
    pub(super) n: &'a Notification,
    pub(super) root: &'a OwnedFd,
    /// openat2's resolve flags (0 for every other call).
    pub(super) resolve: u64,
    /// The caller's working directory, read once even for both names of a rename.
    pub(super) cwd: std::cell::OnceCell<Option<PathBuf>>,
}

impl<'a> Caller<'a> {
    pub(super) fn new(n: &'a Notification, root: &'a OwnedFd, resolve: u64) -> Caller<'a> {
        Caller {
            n,
            root,
            resolve,
            cwd: std::cell::OnceCell::new(),
        }
    }

    pub(super) fn fd_link_of_arg(&self, index: usize) -> PathBuf {
        fd_link(self.n.pid, int_arg(self.n.args[index]))
    }

    /// Reads one path argument; `None` if there is nothing to judge (unreadable, or no
    /// path and no file meant).
    pub(super) fn read(&self, arg: PathArg) -> Option<Target> {
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
pub(super) const MAX_MAGIC_LINKS: usize = 8;

/// `named`, with a leading `/proc/self|thread-self|PID/{root,cwd,fd/N}` or
/// `/dev/{fd/N,stdin,stdout,stderr}` replaced by where that link leads (as the sandbox
/// names it), repeatedly; unchanged where it names no such link or the link leads to no
/// path (a pipe, a socket).
pub(super) fn through_magic_links(
    named: PathBuf,
    pid: u32,
    root: &OwnedFd,
    follow_final: bool,
) -> PathBuf {
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
// Whole: one walk of /proc's magic links, a case per kind of link, sharing the walk's state.
pub(super) fn magic_link_target(
    path: &Path,
    pid: u32,
    root: &OwnedFd,
    follow_final: bool,
) -> Option<PathBuf> {
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
    Some(crate::paths::join_below(&target, &rest))
}

/// The thread group of the thread `pid` (the host's number): its leader as the host
/// numbers it, and as the sandbox does (`Tgid:`, and the last of `NStgid:`).
pub fn thread_group(pid: u32) -> Option<(u32, u32)> {
    // Lossy: CMD names itself (its `Name:` line, from /proc/self/comm) in any bytes, and
    // a name that is not UTF-8 must not hide its refused writes from the log.
    let status = std::fs::read(format!("/proc/{pid}/status")).ok()?;
    let status = String::from_utf8_lossy(&status);
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let host = field("Tgid:")?.trim().parse().ok()?;
    let inner = field("NStgid:")?.split_whitespace().last()?.parse().ok()?;
    Some((host, inner))
}

/// Whether a magic link is the last name of `path`, as the kernel walks it: nothing past
/// it (`rest`, what follows it, is empty), not even a "/" or "/." (which Path drops, and
/// which make the walk go through the link).
pub(super) fn ends_at_link(path: &Path, rest: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    rest.as_os_str().is_empty() && !bytes.ends_with(b"/") && !bytes.ends_with(b"/.")
}

/// Whether `path` is a magic link and nothing past it: `/proc/PID/{root,cwd,fd/N}` (also
/// `self`, `thread-self`, a task's) or `/dev/fd/N`, `/dev/stdin`...
pub(super) fn names_a_magic_link(path: &Path) -> bool {
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
pub(super) fn through_pid1_links(path: &Path, follow_final: bool) -> bool {
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
pub(super) fn lexically_normal(path: &Path) -> PathBuf {
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
