//! The escape battery, grown by each feature: attempts a hostile CMD makes to reach out of
//! the sandbox through processes, the kernel's knobs, new namespaces, the mount API
//! (`open_tree`, `move_mount`, `fsopen`, `mount_setattr`, also from a nested user
//! namespace), writes through `/proc/1/root`, `/proc/self/root` and held directory fds, and
//! no_new_privs (setuid bits mean nothing inside), each with a control that must succeed,
//! run by a script inside the sandbox so each line is an attempt and its outcome. (Classic
//! mount(2), symlink, hardlink, socket, fd, terminal and io_uring attempts are in
//! sandbox_escapes.rs, sandbox_regressions.rs and sandbox_tty.rs.)

use crate::support::{stderr, stdout, Run, TestDir};

/// What every battery script starts with: `attempt` prints `NAME refused ERRNO`, `NAME
/// ALLOWED`, or `NAME ok` (`NAME FAILED ERRNO`) for a control.
const PRELUDE: &str = r#"
import ctypes, errno, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)

def attempt(name, call, control=False):
    try:
        r = call()
        if isinstance(r, int) and r < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        print(name, "ok" if control else "ALLOWED", flush=True)
    except OSError as e:
        print(name, "FAILED %d" % e.errno if control else "refused %d" % e.errno, flush=True)

"#;

/// Processes, the kernel's knobs, new namespaces (after PRELUDE).
const BATTERY: &str = r#"
host_pid = int(sys.argv[1])
NR = {"x86_64": {"pidfd_open": 434, "pidfd_getfd": 438, "unshare": 272},
      "aarch64": {"pidfd_open": 434, "pidfd_getfd": 438, "unshare": 97}}[os.uname().machine]
PTRACE_ATTACH, PTRACE_DETACH = 16, 17

class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def vm_write(pid):
    data = ctypes.create_string_buffer(b"x" * 8)
    local = Iovec(ctypes.addressof(data), 8)
    remote = Iovec(0x400000, 8)
    return libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)

def vm_read_self():
    data = ctypes.create_string_buffer(b"y" * 8)
    into = ctypes.create_string_buffer(8)
    local = Iovec(ctypes.addressof(into), 8)
    remote = Iovec(ctypes.addressof(data), 8)
    return libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) - 8

def pidfd_getfd(pid):
    pidfd = libc.syscall(NR["pidfd_open"], pid, 0)
    if pidfd < 0:
        return pidfd
    return libc.syscall(NR["pidfd_getfd"], pidfd, 0, 0)

child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)

# Processes: pid 1 (netbox's own, in the sandbox) and anything on the host.
attempt("ptrace-pid1", lambda: libc.ptrace(PTRACE_ATTACH, 1, 0, 0))
attempt("ptrace-own-child", lambda: (libc.ptrace(PTRACE_ATTACH, child, 0, 0), os.waitpid(child, 0), libc.ptrace(PTRACE_DETACH, child, 0, 0))[0], control=True)
attempt("process_vm_writev-pid1", lambda: vm_write(1))
attempt("process_vm_readv-self", vm_read_self, control=True)
attempt("pidfd_getfd-pid1", lambda: pidfd_getfd(1))
attempt("pidfd_getfd-own-child", lambda: pidfd_getfd(child), control=True)
attempt("signal-host-process", lambda: os.kill(host_pid, 0))
attempt("signal-every-process", lambda: os.kill(-1, 0), control=True)
attempt("signal-self", lambda: os.kill(os.getpid(), 0), control=True)

# The kernel's knobs.
attempt("core_pattern", lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/tmp/x"))
attempt("core_pattern-read", lambda: open("/proc/sys/kernel/core_pattern").read() and 0, control=True)
attempt("modprobe-path", lambda: open("/proc/sys/kernel/modprobe", "w").write("/tmp/x"))

# A way out through new namespaces or devices.
attempt("unshare-net", lambda: libc.syscall(NR["unshare"], 0x40000000))
attempt("tun-device", lambda: os.open("/dev/net/tun", os.O_RDWR))
attempt("raw-socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("packet-socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
attempt("netlink-route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0), control=True)
os.kill(child, signal.SIGKILL)
"#;

/// The mount API, writes through `/proc` and held directory fds, and no_new_privs, run in a
/// git workspace; with `nested` as the argument, from inside `unshare -Urm` (a run with
/// `--allow-nested-userns`), where CMD holds every capability over a mount namespace of its
/// own and the sandbox's mounts are locked.
const MOUNT_BATTERY: &str = r#"
# The same numbers on x86_64 and aarch64 (the mount API came after the tables merged).
OPEN_TREE, MOVE_MOUNT, FSOPEN, MOUNT_SETATTR = 428, 429, 430, 442
AT_FDCWD, OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH = -100, 1, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_RDONLY, PR_GET_NO_NEW_PRIVS = 4, 1, 39

class MountAttr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

def open_tree(path, flags):
    return libc.syscall(OPEN_TREE, AT_FDCWD, path.encode(), flags)

def make_writable(path):
    attr = MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
    return libc.syscall(MOUNT_SETATTR, AT_FDCWD, path.encode(), 0, ctypes.byref(attr), ctypes.sizeof(attr))

def append(path, dir_fd=None):
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND, dir_fd=dir_fd))

def clone_then_write(recursive_into):
    fd = open_tree(".", OPEN_TREE_CLONE | AT_RECURSIVE)
    if fd < 0:
        return fd
    os.makedirs(recursive_into, exist_ok=True)
    r = libc.syscall(MOVE_MOUNT, fd, b"", AT_FDCWD, recursive_into.encode(), MOVE_MOUNT_F_EMPTY_PATH)
    if r < 0:
        return r
    append(recursive_into + "/.git/config")

cwd = os.getcwd()
if sys.argv[1:] == ["nested"]:
    attempt("nested-clone-without-children", lambda: open_tree(".", OPEN_TREE_CLONE))
    attempt("nested-git-made-writable", lambda: make_writable(".git"))
    attempt("nested-clone-then-write-git", lambda: clone_then_write("/tmp/clone"))
    attempt("nested-clone-recursive", lambda: open_tree(".", OPEN_TREE_CLONE | AT_RECURSIVE), control=True)
    attempt("nested-tmpfs", lambda: libc.syscall(FSOPEN, b"tmpfs", 0), control=True)
    sys.exit(0)

git = os.open(".git", os.O_RDONLY | os.O_DIRECTORY)
os.makedirs("moved", exist_ok=True)
attempt("open_tree-clone-git", lambda: open_tree(".git", OPEN_TREE_CLONE))
attempt("open_tree-clone-recursive", lambda: open_tree(".", OPEN_TREE_CLONE | AT_RECURSIVE))
attempt("open_tree-path-only", lambda: open_tree(".git", 0), control=True)
attempt("fsopen-tmpfs", lambda: libc.syscall(FSOPEN, b"tmpfs", 0))
attempt("move_mount-git", lambda: libc.syscall(MOVE_MOUNT, AT_FDCWD, b".git", AT_FDCWD, b"moved", 0))
attempt("mount_setattr-git-writable", lambda: make_writable(".git"))
attempt("write-proc1-root", lambda: append("/proc/1/root%s/.git/config" % cwd))
attempt("write-proc-self-root", lambda: append("/proc/self/root%s/.git/config" % cwd))
attempt("write-dirfd", lambda: append("config", dir_fd=git))
attempt("write-proc-fd-dir", lambda: append("/proc/self/fd/%d/config" % git))
attempt("create-proc-fd-dir", lambda: os.close(os.open("/proc/self/fd/%d/hooks/pre-commit" % git, os.O_WRONLY | os.O_CREAT, 0o755)))
attempt("write-dirfd-workspace", lambda: os.close(os.open("ok.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=os.open(".", os.O_RDONLY))), control=True)
attempt("no_new_privs-set", lambda: 0 if libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 else -1, control=True)
"#;

/// One `NAME outcome` line per attempt of a battery's output, looked up by name.
fn outcomes(said: &str) -> impl Fn(&str) -> String + '_ {
    move |name: &str| {
        said.lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(n, _)| *n == name)
            .map(|(_, o)| o.to_owned())
            .unwrap_or_else(|| panic!("{name} missing:\n{said}"))
    }
}

fn git_workspace(dir: &TestDir, extra: &[&str]) -> Run {
    let run = Run::new(dir).args_from(extra);
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&run.workspace)
        .output()
        .expect("git is needed for these tests");
    assert!(out.status.success());
    std::fs::write(
        run.workspace.join("battery.py"),
        [PRELUDE, MOUNT_BATTERY].concat(),
    )
    .unwrap();
    run
}

#[test]
fn mount_api_proc_and_directory_fd_tricks_are_refused() {
    let dir = TestDir::new("escape-mount-api");
    let run = git_workspace(&dir, &[]);
    let config_before = std::fs::read(run.workspace.join(".git/config")).unwrap();
    let out = run.sh("python3 battery.py");
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    let outcome = outcomes(&said);
    let eperm = format!("refused {}", libc::EPERM);
    let erofs = format!("refused {}", libc::EROFS);
    let eacces = format!("refused {}", libc::EACCES);
    for name in [
        "open_tree-clone-git",
        "open_tree-clone-recursive",
        "fsopen-tmpfs",
        "move_mount-git",
        "mount_setattr-git-writable",
    ] {
        assert_eq!(outcome(name), eperm, "{name}\n{said}");
    }
    for name in [
        "write-proc-self-root",
        "write-dirfd",
        "write-proc-fd-dir",
        "create-proc-fd-dir",
    ] {
        assert_eq!(outcome(name), erofs, "{name}\n{said}");
    }
    // pid 1 is not dumpable: its root is not even reachable.
    let proc1 = outcome("write-proc1-root");
    assert!(proc1 == eacces || proc1 == erofs, "{proc1}\n{said}");
    for name in [
        "open_tree-path-only",
        "write-dirfd-workspace",
        "no_new_privs-set",
    ] {
        assert_eq!(outcome(name), "ok", "{name}\n{said}");
    }
    assert_eq!(
        std::fs::read(run.workspace.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!run.workspace.join(".git/hooks/pre-commit").exists());
}

/// With nested user namespaces allowed, CMD holds every capability over a mount namespace
/// of its own; the sandbox's mounts come into it locked, so neither a clone that would
/// leave `.git`'s pin behind, nor clearing its read-only flag, nor a writable copy works.
#[test]
fn mount_api_in_a_nested_user_namespace_cannot_unlock_git() {
    if nix::unistd::getuid().is_root() {
        // netbox refuses --allow-nested-userns as root (sandbox_escapes.rs checks that);
        // tests/run.sh runs this again as an unprivileged user.
        return;
    }
    let dir = TestDir::new("escape-mount-api-nested");
    let run = git_workspace(&dir, &["--allow-nested-userns"]);
    let config_before = std::fs::read(run.workspace.join(".git/config")).unwrap();
    let out = run.sh("unshare -Urm python3 battery.py nested");
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    let outcome = outcomes(&said);
    assert_eq!(
        outcome("nested-clone-without-children"),
        format!("refused {}", libc::EINVAL),
        "{said}"
    );
    assert_eq!(
        outcome("nested-git-made-writable"),
        format!("refused {}", libc::EPERM),
        "{said}"
    );
    assert_eq!(
        outcome("nested-clone-then-write-git"),
        format!("refused {}", libc::EROFS),
        "{said}"
    );
    assert_eq!(outcome("nested-clone-recursive"), "ok", "{said}");
    assert_eq!(outcome("nested-tmpfs"), "ok", "{said}");
    assert_eq!(
        std::fs::read(run.workspace.join(".git/config")).unwrap(),
        config_before
    );
}

#[test]
fn process_kernel_and_namespace_escapes_are_refused() {
    let dir = TestDir::new("escape-battery");
    // A process on the host, which CMD must not even see.
    let mut host = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let run = Run::new(&dir);
    std::fs::write(
        run.workspace.join("battery.py"),
        [PRELUDE, BATTERY].concat(),
    )
    .unwrap();
    let out = run.sh(&format!("python3 battery.py {}", host.id()));
    let said = stdout(&out);
    // And `kill -9 -1` from inside reaches no process of the host's.
    let killed_all = run.sh("kill -9 -1 2>/dev/null; echo survived");
    let host_alive = host.try_wait().unwrap().is_none();
    let _ = host.kill();
    let _ = host.wait();
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert_eq!(stdout(&killed_all), "survived\n", "{}", stderr(&killed_all));
    assert!(
        host_alive,
        "a host process died of kill -1 inside the sandbox"
    );
    let lines: Vec<(&str, &str)> = said.lines().filter_map(|l| l.split_once(' ')).collect();
    assert!(lines.len() >= 17, "{said}");
    let outcome = |name: &str| {
        lines
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, o)| *o)
            .unwrap_or_else(|| panic!("{name} missing:\n{said}"))
    };
    // Each refused, and for the right reason where the reason says something.
    for (name, errnos) in [
        ("ptrace-pid1", &[libc::EPERM][..]),
        ("process_vm_writev-pid1", &[libc::EPERM]),
        ("pidfd_getfd-pid1", &[libc::EPERM]),
        // Not in the sandbox's pid namespace: no such process.
        ("signal-host-process", &[libc::ESRCH]),
        ("core_pattern", &[libc::EROFS, libc::EACCES, libc::EPERM]),
        // (ENOENT: a kernel built without modules has no such knob.)
        (
            "modprobe-path",
            &[libc::EROFS, libc::EACCES, libc::EPERM, libc::ENOENT],
        ),
        ("unshare-net", &[libc::EPERM, libc::ENOSPC]),
        ("tun-device", &[libc::ENOENT, libc::EPERM, libc::EACCES]),
        ("raw-socket", &[libc::EPERM]),
        ("packet-socket", &[libc::EPERM]),
    ] {
        let got = outcome(name);
        assert!(
            errnos.iter().any(|e| got == format!("refused {e}")),
            "{name}: {got}\n{said}"
        );
    }
    // Controls: the same kinds of call on what is the sandbox's own work.
    for name in [
        "ptrace-own-child",
        "process_vm_readv-self",
        "pidfd_getfd-own-child",
        "signal-every-process",
        "signal-self",
        "core_pattern-read",
        "netlink-route",
    ] {
        assert_eq!(outcome(name), "ok", "{name}\n{said}");
    }
}
