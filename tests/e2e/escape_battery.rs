//! The escape battery, grown by each feature: attempts a hostile CMD makes to reach out of
//! the sandbox through processes, the kernel's knobs and new namespaces, each with a
//! control that must succeed, run by one script inside the sandbox so each line is an
//! attempt and its outcome. (Filesystem, mount, socket, fd, terminal and io_uring attempts
//! are in sandbox_escapes.rs, sandbox_regressions.rs and sandbox_tty.rs.)

use crate::support::{stderr, stdout, Run, TestDir};

/// Prints `NAME refused ERRNO`, `NAME ALLOWED`, or `NAME ok` for a control.
const BATTERY: &str = r#"
import ctypes, errno, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
host_pid = int(sys.argv[1])
NR = {"x86_64": {"pidfd_open": 434, "pidfd_getfd": 438, "unshare": 272},
      "aarch64": {"pidfd_open": 434, "pidfd_getfd": 438, "unshare": 97}}[os.uname().machine]
PTRACE_ATTACH, PTRACE_DETACH = 16, 17

def attempt(name, call, control=False):
    try:
        r = call()
        if isinstance(r, int) and r < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        print(name, "ok" if control else "ALLOWED", flush=True)
    except OSError as e:
        print(name, "FAILED %d" % e.errno if control else "refused %d" % e.errno, flush=True)

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

#[test]
fn process_kernel_and_namespace_escapes_are_refused() {
    let dir = TestDir::new("escape-battery");
    // A process on the host, which CMD must not even see.
    let mut host = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let run = Run::new(&dir);
    std::fs::write(run.workspace.join("battery.py"), BATTERY).unwrap();
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
