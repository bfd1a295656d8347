//! Denied writes, on record. The mounts refuse writes silently; the sandbox's pid 1
//! installs a seccomp filter that hands every write-intent syscall to a listener
//! (sys/seccomp.rs), and passes the listener to netbox. Here one thread answers each
//! notification: it reads the path from the caller's memory, asks the sandbox's own view
//! of the filesystem (through /proc/PID/root, /proc/PID/cwd or /proc/PID/fd) whether the
//! mount that would take the write is read-only, and lets the syscall run (CONTINUE), so
//! the kernel's own EROFS decides. A write the mounts will refuse becomes a `write_denied`
//! record and a one-line notice; a write that will succeed is not logged.
//!
//! The verdict is only ever a log line: what was read from another process's memory can
//! change under us (seccomp_unotify(2)), so it never decides anything. pid 1's own probe
//! writes are kept apart and checked against what the probe expected, which proves the
//! whole chain (filter, listener, path reading, classification) before CMD runs.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bridge::EventLog;
use serde::Serialize;

use crate::probe::{Outcome, ProbeReport};
use crate::sys::seccomp::{self, Notification};

/// Longest path read from a caller (PATH_MAX).
const PATH_MAX: usize = 4096;

/// What the watcher knows of the run.
pub struct WatchContext {
    pub log: Arc<EventLog>,
    pub session: Arc<str>,
    /// Host pid of the sandbox's pid 1, whose writes are the probe's.
    pub pid1: u32,
    pub protected: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    /// Whether to announce each denial on stderr (once per path).
    pub notices: bool,
    /// Test builds: answer without looking, so the probe's check must fail.
    pub blind: bool,
    /// The sandbox's root (pid 1's), when every process in it must share it: without
    /// capabilities and without nested user namespaces none can chroot, pivot_root or
    /// unshare a mount namespace. Otherwise each caller's own root is opened.
    pub shared_root: Option<OwnedFd>,
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

/// What the watcher has seen so far.
#[derive(Default)]
struct Seen {
    /// pid 1's writes: path as the sandbox names it, and whether it was judged denied.
    probe: Mutex<Vec<(PathBuf, bool)>>,
    denied: AtomicU64,
    announced: Mutex<std::collections::HashSet<PathBuf>>,
}

/// The watcher thread and what it has seen.
pub struct WriteWatch {
    seen: Arc<Seen>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The `write_denied` record.
#[derive(Serialize)]
struct WriteDenied<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema_version: u32,
    ts: String,
    session: &'a str,
    /// The caller's pid as netbox sees it (the host's pid namespace).
    pid: u32,
    executable: String,
    syscall: &'static str,
    path: String,
    reason: &'static str,
}

impl WriteWatch {
    /// Starts answering the listener's notifications on a thread of its own.
    pub fn start(listener: OwnedFd, context: WatchContext) -> std::io::Result<WriteWatch> {
        let seen = Arc::new(Seen::default());
        seccomp::prefer_sync_wakeup(listener.as_fd());
        let thread = {
            let seen = Arc::clone(&seen);
            std::thread::Builder::new()
                .name("netbox-writewatch".into())
                .spawn(move || serve(&listener, &context, &seen))?
        };
        Ok(WriteWatch {
            seen,
            thread: Some(thread),
        })
    }

    /// Denied writes recorded so far.
    pub fn denied(&self) -> u64 {
        self.seen.denied.load(Ordering::Relaxed)
    }

    /// Checks the probe's writes against what the watcher saw of them and adds the result
    /// to the report as the "denied writes logged" check. The probe's writes are then
    /// forgotten, so the next probe (after --fetch's cut) is checked on its own.
    pub fn check_probe(&self, report: &mut ProbeReport) {
        let seen = std::mem::take(&mut *self.seen.probe.lock().unwrap_or_else(|e| e.into_inner()));
        let mut forbidden = Vec::new();
        let mut control = Vec::new();
        for write in std::mem::take(&mut report.watched_writes) {
            let judged = seen.iter().find(|(p, _)| *p == write.path).map(|(_, d)| *d);
            let result = match judged {
                Some(true) => "logged as denied",
                Some(false) => "not logged",
                None => "never seen",
            };
            // Judged against what the mounts did, not what they should have done: that is
            // the other checks' business.
            if write.refused {
                forbidden.push(Outcome {
                    attempt: format!("refused write to {} goes unlogged", write.path.display()),
                    ok: judged == Some(true),
                    result: result.into(),
                });
            } else {
                control.push(Outcome {
                    attempt: format!("write to {} is seen and not logged", write.path.display()),
                    ok: judged == Some(false),
                    result: result.into(),
                });
            }
        }
        // With no refused write to look for (none was tried), nothing is proven.
        report.add_check(crate::probe::check(
            "denied writes logged (seccomp)",
            forbidden,
            control,
        ));
    }

    /// Waits for the thread: it ends when every process that could be notified is gone.
    pub fn finish(mut self) -> u64 {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.denied()
    }
}

fn serve(listener: &OwnedFd, context: &WatchContext, seen: &Seen) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
            Ok(_) => {}
        }
        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
        if !revents.contains(PollFlags::POLLIN) {
            // POLLHUP: no process is left that the filter could stop.
            return;
        }
        match seccomp::receive(listener.as_fd()) {
            Ok(notification) => handle(listener, context, seen, &notification),
            // The caller died (ENOENT) or a signal interrupted us: go on.
            Err(_) => continue,
        }
    }
}

fn handle(listener: &OwnedFd, context: &WatchContext, seen: &Seen, n: &Notification) {
    let verdicts = if context.blind {
        Vec::new()
    } else {
        judge(n, context.shared_root.as_ref())
    };
    // Read while the caller still waits: once let go, a short-lived one is gone.
    let executable = if n.pid != context.pid1 && verdicts.iter().any(|v| v.denied) {
        std::fs::read_link(format!("/proc/{}/exe", n.pid))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    } else {
        String::new()
    };
    // Only what was read while the caller still waited is its own (its pid could be
    // reused after it died); then let the syscall run.
    let valid = seccomp::still_valid(listener.as_fd(), n.id);
    let _ = seccomp::let_it_run(listener.as_fd(), n.id);
    if !valid {
        return;
    }
    for verdict in verdicts {
        if n.pid == context.pid1 {
            if let Ok(mut probe) = seen.probe.lock() {
                probe.push((verdict.path.clone(), verdict.denied));
            }
            continue;
        }
        if verdict.denied {
            record(context, seen, n, &verdict, &executable);
        }
    }
}

/// One path a syscall writes, judged.
struct Verdict {
    /// As the sandbox names it (absolute).
    path: PathBuf,
    denied: bool,
}

/// Where a path argument is resolved from.
#[derive(Clone, Copy)]
enum Base {
    Cwd,
    Fd(u64),
}

/// Which mount takes the write: the parent directory's (a name is created, removed or
/// renamed) or the file's own (its contents or attributes change; the parent's if it
/// does not exist yet and is being created).
#[derive(Clone, Copy, PartialEq)]
enum Takes {
    Entry,
    Inode,
}

/// A path argument: the index of its pointer, and of its directory fd if there is one.
struct PathArg {
    dirfd: Option<usize>,
    path: usize,
    takes: Takes,
}

fn path_args(nr: i64) -> Vec<PathArg> {
    use Takes::{Entry, Inode};
    let at = |dirfd, path, takes| PathArg {
        dirfd: Some(dirfd),
        path,
        takes,
    };
    #[cfg(target_arch = "x86_64")]
    let plain = |path, takes| PathArg {
        dirfd: None,
        path,
        takes,
    };
    match nr {
        libc::SYS_openat | libc::SYS_openat2 => vec![at(0, 1, Inode)],
        libc::SYS_mkdirat | libc::SYS_mknodat | libc::SYS_unlinkat => vec![at(0, 1, Entry)],
        libc::SYS_renameat | libc::SYS_renameat2 => vec![at(0, 1, Entry), at(2, 3, Entry)],
        libc::SYS_linkat => vec![at(2, 3, Entry)],
        libc::SYS_symlinkat => vec![at(1, 2, Entry)],
        libc::SYS_fchmodat | libc::SYS_fchmodat2 | libc::SYS_fchownat | libc::SYS_utimensat => {
            vec![at(0, 1, Inode)]
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open | libc::SYS_creat => vec![plain(0, Inode)],
        #[cfg(target_arch = "x86_64")]
        libc::SYS_mkdir | libc::SYS_mknod | libc::SYS_unlink | libc::SYS_rmdir => {
            vec![plain(0, Entry)]
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_rename => vec![plain(0, Entry), plain(1, Entry)],
        #[cfg(target_arch = "x86_64")]
        libc::SYS_link | libc::SYS_symlink => vec![plain(1, Entry)],
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chmod
        | libc::SYS_chown
        | libc::SYS_lchown
        | libc::SYS_utime
        | libc::SYS_utimes => {
            vec![plain(0, Inode)]
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_futimesat => vec![at(0, 1, Inode)],
        libc::SYS_truncate
        | libc::SYS_setxattr
        | libc::SYS_lsetxattr
        | libc::SYS_removexattr
        | libc::SYS_lremovexattr => vec![PathArg {
            dirfd: None,
            path: 0,
            takes: Inode,
        }],
        _ => Vec::new(),
    }
}

/// The fd-only syscalls: the file is the one open on args[0].
fn is_fd_syscall(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_fchmod | libc::SYS_fchown | libc::SYS_fsetxattr | libc::SYS_fremovexattr
    )
}

fn judge(n: &Notification, shared_root: Option<&OwnedFd>) -> Vec<Verdict> {
    let proc = PathBuf::from(format!("/proc/{}", n.pid));
    if is_fd_syscall(n.nr) {
        let fd = proc.join("fd").join(n.args[0].to_string());
        return match std::fs::read_link(&fd) {
            Ok(path) => vec![Verdict {
                denied: read_only(&fd) == Some(true),
                path,
            }],
            Err(_) => Vec::new(),
        };
    }
    if n.nr == libc::SYS_openat2 && !openat2_writes(n) {
        return Vec::new();
    }
    // The sandbox's root: paths are resolved inside it, so an absolute symlink or ".."
    // means there what it means to the caller, not what it would mean on the host.
    let own_root;
    let root = match shared_root {
        Some(root) => Some(root),
        None => {
            own_root = open_root(n.pid);
            own_root.as_ref()
        }
    };
    let mut verdicts = Vec::new();
    for arg in path_args(n.nr) {
        let Ok(raw) = seccomp::read_c_string(n.pid, n.args[arg.path], PATH_MAX) else {
            continue;
        };
        // utimensat(fd, NULL, ...) changes the file open on fd.
        if raw.is_empty() && n.nr == libc::SYS_utimensat {
            let fd = proc.join("fd").join(n.args[0].to_string());
            if let Ok(path) = std::fs::read_link(&fd) {
                verdicts.push(Verdict {
                    denied: read_only(&fd) == Some(true),
                    path,
                });
            }
            continue;
        }
        let written = Path::new(OsStr::from_bytes(&raw));
        let base = match arg.dirfd.map(|i| int_arg(n.args[i])) {
            Some(fd) if fd != libc::AT_FDCWD => Base::Fd(u64::try_from(fd).unwrap_or(u64::MAX)),
            _ => Base::Cwd,
        };
        // The path as the sandbox names it: readlink of its cwd or directory fd gives the
        // sandbox's own view.
        let named = if written.is_absolute() {
            written.to_owned()
        } else {
            let dir = match base {
                Base::Cwd => proc.join("cwd"),
                Base::Fd(fd) => proc.join("fd").join(fd.to_string()),
            };
            match std::fs::read_link(&dir) {
                Ok(dir) => dir.join(written),
                Err(_) => continue,
            }
        };
        let Some(root) = root else { continue };
        let denied = match arg.takes {
            Takes::Entry => parent_read_only(root, &named),
            Takes::Inode => match open_in_sandbox(root, &named) {
                // Opening a device, fifo or socket for writing is I/O, not a change to
                // the filesystem: a read-only mount allows it (/dev/null, /dev/tty).
                Some(fd) if is_open(n.nr) && is_special(&fd) => Some(false),
                Some(fd) => fd_read_only(&fd),
                // Not there yet: created in its parent.
                None => parent_read_only(root, &named),
            },
        };
        verdicts.push(Verdict {
            path: named,
            denied: denied == Some(true),
        });
    }
    verdicts
}

/// An `int` argument: the kernel reads the register's low 32 bits (AT_FDCWD is -100).
fn int_arg(raw: u64) -> i32 {
    i32::from_ne_bytes(u32::try_from(raw & 0xffff_ffff).unwrap_or(0).to_ne_bytes())
}

/// openat2's flags are in a struct the filter cannot read: look here, and let read-only
/// opens pass unjudged.
fn openat2_writes(n: &Notification) -> bool {
    let mut flags = [0u8; 8];
    let local = std::io::IoSliceMut::new(&mut flags);
    let remote = nix::sys::uio::RemoteIoVec {
        base: usize::try_from(n.args[2]).unwrap_or(0),
        len: 8,
    };
    let pid = nix::unistd::Pid::from_raw(n.pid as i32);
    match nix::sys::uio::process_vm_readv(pid, &mut [local], &[remote]) {
        Ok(8) => u64::from_ne_bytes(flags) & u64::from(seccomp::WRITE_INTENT) != 0,
        // Unreadable: judge it like any other.
        _ => true,
    }
}

fn is_open(nr: i64) -> bool {
    #[cfg(target_arch = "x86_64")]
    if nr == libc::SYS_open {
        return true;
    }
    nr == libc::SYS_openat || nr == libc::SYS_openat2
}

/// Opens (O_PATH) an absolute sandbox path inside the sandbox's root, following
/// symlinks as the caller would (RESOLVE_IN_ROOT keeps them inside that root).
fn open_in_sandbox(root: &OwnedFd, path: &Path) -> Option<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let inside = path.strip_prefix("/").unwrap_or(path);
    let inside = if inside.as_os_str().is_empty() {
        Path::new(".")
    } else {
        inside
    };
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(root, inside, how).ok()
}

/// Whether an open file is neither a regular file nor a directory.
fn is_special(fd: &OwnedFd) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|st| {
        let kind = st.st_mode & libc::S_IFMT;
        kind != libc::S_IFREG && kind != libc::S_IFDIR
    })
}

/// Whether the mount an open file lies on is read-only.
fn fd_read_only(fd: &OwnedFd) -> Option<bool> {
    nix::sys::statvfs::fstatvfs(fd)
        .ok()
        .map(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// Whether the directory that would hold `path` is on a read-only mount.
fn parent_read_only(root: &OwnedFd, path: &Path) -> Option<bool> {
    fd_read_only(&open_in_sandbox(root, path.parent()?)?)
}

/// Whether the mount holding `path` (a /proc magic link to an open file) is read-only.
fn read_only(path: &Path) -> Option<bool> {
    nix::sys::statvfs::statvfs(path)
        .ok()
        .map(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

fn record(
    context: &WatchContext,
    seen: &Seen,
    n: &Notification,
    verdict: &Verdict,
    executable: &str,
) {
    seen.denied.fetch_add(1, Ordering::Relaxed);
    let reason = if context
        .protected
        .iter()
        .any(|p| verdict.path.starts_with(p))
    {
        "protected path"
    } else if context
        .read_only
        .iter()
        .any(|p| verdict.path.starts_with(p))
    {
        "read-only path"
    } else {
        "read-only root"
    };
    context.log.record_json(&WriteDenied {
        kind: "write_denied",
        schema_version: bridge::log::SCHEMA_VERSION,
        ts: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        session: &context.session,
        pid: n.pid,
        syscall: syscall_name(n.nr),
        executable: executable.to_owned(),
        path: verdict.path.display().to_string(),
        reason,
    });
    if context.notices {
        let first = seen
            .announced
            .lock()
            .map(|mut a| a.insert(verdict.path.clone()))
            .unwrap_or(false);
        if first {
            crate::say(&format!(
                "netbox: blocked write {} ({reason})",
                verdict.path.display()
            ));
        }
    }
}

fn syscall_name(nr: i64) -> &'static str {
    match nr {
        libc::SYS_openat => "openat",
        libc::SYS_openat2 => "openat2",
        libc::SYS_mkdirat => "mkdirat",
        libc::SYS_mknodat => "mknodat",
        libc::SYS_unlinkat => "unlinkat",
        libc::SYS_renameat => "renameat",
        libc::SYS_renameat2 => "renameat2",
        libc::SYS_linkat => "linkat",
        libc::SYS_symlinkat => "symlinkat",
        libc::SYS_truncate => "truncate",
        libc::SYS_fchmod => "fchmod",
        libc::SYS_fchmodat => "fchmodat",
        libc::SYS_fchmodat2 => "fchmodat2",
        libc::SYS_fchown => "fchown",
        libc::SYS_fchownat => "fchownat",
        libc::SYS_utimensat => "utimensat",
        libc::SYS_setxattr => "setxattr",
        libc::SYS_lsetxattr => "lsetxattr",
        libc::SYS_fsetxattr => "fsetxattr",
        libc::SYS_removexattr => "removexattr",
        libc::SYS_lremovexattr => "lremovexattr",
        libc::SYS_fremovexattr => "fremovexattr",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open => "open",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_creat => "creat",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_mkdir => "mkdir",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_mknod => "mknod",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_unlink => "unlink",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_rmdir => "rmdir",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_rename => "rename",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_link => "link",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_symlink => "symlink",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chmod => "chmod",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chown => "chown",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_lchown => "lchown",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_utime => "utime",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_utimes => "utimes",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_futimesat => "futimesat",
        _ => "unknown",
    }
}
