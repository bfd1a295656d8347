//! The connects and sends netbox makes for CMD (on copies of CMD's sockets) cost netbox a
//! bounded amount and end with their callers: one `sendmmsg` asking for gigabytes makes
//! netbox hold a few megabytes, not the gigabytes (memory outside `--memory`); a command
//! whose sends never end, and which then exits, leaves no worker of netbox's held, so
//! the probe after `--fetch`'s cut and the next command's connects go on; vsock, which
//! no network namespace confines, is refused and logged. Controls in each: the same
//! calls to a peer that reads get through whole, and on the host the vsock connect is not
//! refused the same way.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{stderr, stdout, Run, TestDir};

/// ctypes' view of sendmmsg and its structures, for a script to build on.
const SENDMMSG: &str = r#"
import ctypes, os, socket, threading, time, array
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]
class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]
def untouched(size):
    # Anonymous memory never written: reading it costs the command nothing.
    return libc.mmap(None, size, 1, 0x02 | 0x20 | 0x4000, -1, 0)
def fill(a):
    # A plain send (which netbox lets run) fills the stream's small buffer, so the next
    # send, which netbox makes, waits for a reader with one byte in hand.
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.setblocking(False)
    try:
        while True:
            a.send(b"x" * 4096)
    except BlockingIOError:
        pass
    a.setblocking(True)
def messages(buffers):
    vectors = [iovec(b, n) for b, n in buffers]
    m = (mmsghdr * len(buffers))()
    for i, v in enumerate(vectors):
        m[i].hdr.iov = ctypes.pointer(v)
        m[i].hdr.iovlen = 1
    return m, vectors
"#;

/// The peak resident memory of process `pid`, in KiB (0 once it is gone).
fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn one_sendmmsg_asking_for_a_gigabyte_leaves_netbox_holding_megabytes() {
    let dir = TestDir::new("sends-memory");
    let run = Run::new(&dir);
    // Two threads each send 128 messages of 4 MiB (a gigabyte in all) on a stream whose
    // peer never reads: each send waits for ever, with what netbox read for it held.
    // Then the control: four 1 MiB messages to a peer that reads arrive whole, counted.
    let script = format!(
        r#"{SENDMMSG}
def stuck():
    a, b = socket.socketpair()
    stuck.keep.append((a, b))
    buf = untouched(4 << 20)
    m, v = messages([(buf, 4 << 20)] * 128)
    libc.sendmmsg(a.fileno(), m, 128, 0)
stuck.keep = []
for _ in range(2):
    threading.Thread(target=stuck, daemon=True).start()
time.sleep(4)
a, b = socket.socketpair()
data = [os.urandom(1 << 20) for _ in range(4)]
bufs = [ctypes.create_string_buffer(d, len(d)) for d in data]
got = bytearray()
def drain():
    while len(got) < 4 << 20:
        got.extend(b.recv(1 << 20))
reader = threading.Thread(target=drain); reader.start()
m, v = messages([(ctypes.addressof(x), 1 << 20) for x in bufs])
sent = libc.sendmmsg(a.fileno(), m, 4, 0)
reader.join()
print("CONTROL", sent, [m[i].len for i in range(4)], bytes(got) == b"".join(data), flush=True)
os._exit(0)
"#
    );
    let mut child = run
        .command(&format!("python3 - <<'EOF'\n{script}\nEOF"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netbox");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "netbox did not finish in 60 s");
        peak = peak.max(peak_kib(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        stdout(&out),
        "CONTROL 4 [1048576, 1048576, 1048576, 1048576] True\n",
        "{}",
        stderr(&out)
    );
    // Before: about 1 GiB (every message read before the first was sent).
    assert!(peak > 0, "netbox's memory was never read");
    assert!(
        peak < 128 * 1024,
        "netbox held {peak} KiB for sends that wait; {}",
        stderr(&out)
    );
}

#[test]
fn sends_that_never_end_do_not_outlive_fetchs_command_nor_stall_the_next() {
    let dir = TestDir::new("sends-stuck");
    // CMD1: more threads than netbox has workers, each sending on a stream whose peer
    // never reads, passing that peer along (so the send could never end by itself);
    // then CMD1 exits. The probe after the cut and CMD's own connects must go on.
    let fetch = format!(
        r#"python3 - <<'EOF'
{SENDMMSG}
import array
buf = untouched(1 << 20)
keep = []
def stuck():
    a, b = socket.socketpair()
    keep.append((a, b))
    fill(a)
    try:
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
    except OSError:
        pass
for _ in range(520):
    threading.Thread(target=stuck, daemon=True).start()
time.sleep(3)
print("CMD1 leaves", flush=True)
os._exit(0)
EOF"#
    );
    let run = Run::new(&dir).arg("--fetch").arg(fetch);
    let script = r#"python3 - <<'EOF'
import socket, threading
server = socket.socket(socket.AF_UNIX); server.bind("/tmp/own.sock"); server.listen(64)
def serve():
    while True:
        c, _ = server.accept(); c.sendall(b"hi"); c.close()
threading.Thread(target=serve, daemon=True).start()
said = []
for _ in range(50):
    s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect("/tmp/own.sock")
    said.append(s.recv(2)); s.close()
print("CMD", said == [b"hi"] * 50)
EOF"#;
    let mut child = run
        .command(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netbox");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("netbox still running after 60 s (CMD1's sends held it): {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "CMD1 leaves\nCMD True\n", "{}", stderr(&out));
}

#[test]
fn a_command_killed_while_its_sends_wait_frees_netboxs_workers() {
    let dir = TestDir::new("sends-killed");
    let run = Run::new(&dir);
    // A child holds more of netbox's workers than there are with sends that never end
    // (the peer never reads, and is passed along so it cannot close), and is killed; the
    // kernel would end those calls with it. Then the command's own connects must go on.
    let script = format!(
        r#"python3 - <<'EOF'
{SENDMMSG}
import array, signal, sys
child = os.fork()
if child == 0:
    keep = []
    def stuck():
        a, b = socket.socketpair()
        keep.append((a, b))
        fill(a)
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
    for _ in range(520):
        threading.Thread(target=stuck, daemon=True).start()
    time.sleep(60)
    os._exit(0)
time.sleep(4)
os.kill(child, signal.SIGKILL); os.waitpid(child, 0)
server = socket.socket(socket.AF_UNIX); server.bind("/tmp/own.sock"); server.listen(64)
def serve():
    while True:
        c, _ = server.accept(); c.sendall(b"hi"); c.close()
threading.Thread(target=serve, daemon=True).start()
said = []
started = time.monotonic()
for _ in range(50):
    s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect("/tmp/own.sock")
    said.append(s.recv(2)); s.close()
print("CMD", said == [b"hi"] * 50, time.monotonic() - started < 10, flush=True)
os._exit(0)
EOF"#
    );
    let mut child = run
        .command(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netbox");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("netbox still running after 60 s (a killed child's sends held it): {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "CMD True True\n", "{}", stderr(&out));
}

/// Connects to vsock context 1 (the machine itself), port 5999, with a 3 s timeout, and
/// prints `ERRNO n`, `TIMEOUT`, `CONNECTED` or `NOVSOCK` (no vsock in this kernel).
const VSOCK_CLIENT: &str = r#"
import errno, socket
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
except OSError:
    print("NOVSOCK")
    raise SystemExit
s.settimeout(3)
try:
    s.connect((1, 5999))
    print("CONNECTED")
except socket.timeout:
    print("TIMEOUT")
except OSError as e:
    print("ERRNO", e.errno)
"#;

#[test]
fn vsock_is_refused_and_logged() {
    let host = std::process::Command::new("python3")
        .args(["-c", VSOCK_CLIENT])
        .output()
        .unwrap();
    if stdout(&host) == "NOVSOCK\n" {
        eprintln!("this kernel has no vsock: nothing to refuse");
        return;
    }
    // Control: on the host the connect reaches a vsock transport, which answers otherwise.
    assert_ne!(stdout(&host), "ERRNO 101\n");
    let dir = TestDir::new("vsock");
    let run = Run::new(&dir);
    std::fs::write(run.workspace.join("vsock.py"), VSOCK_CLIENT).unwrap();
    let out = run.sh("python3 vsock.py");
    assert_eq!(stdout(&out), "ERRNO 101\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused a vsock connection to context 1"),
        "{}",
        stderr(&out)
    );
    let attempts: Vec<_> = run
        .events()
        .into_iter()
        .filter(|e| e["type"] == "direct_attempt" && e["protocol"] == "vsock")
        .collect();
    assert_eq!(attempts.len(), 1, "{attempts:#?}");
    assert_eq!(attempts[0]["address"], "cid 1");
    assert_eq!(attempts[0]["port"], 5999);
    assert_eq!(attempts[0]["syscall"], "connect");
}

/// Threads that hold netbox's workers with sends that never end (a plain send fills the
/// stream's small buffer first, so the send netbox makes waits for a reader): `pin(n, data)`
/// starts n of them, each sending `data` bytes.
const PINNERS: &str = r#"
import array, os, resource, socket, threading, time
keep = []
def fill(a):
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.setblocking(False)
    try:
        while True:
            a.send(b"x" * 4096)
    except BlockingIOError:
        pass
    a.setblocking(True)
def pinned(data, control=()):
    a, b = socket.socketpair()
    keep.append((a, b))
    fill(a)
    try:
        a.sendmsg([b"x" * data], list(control))
    except OSError:
        pass
def pin(n, data, control=()):
    for _ in range(n):
        threading.Thread(target=pinned, args=(data, control), daemon=True).start()
"#;

#[test]
fn fds_passed_in_sends_that_wait_cannot_exhaust_netboxs_descriptors() {
    let dir = TestDir::new("sends-fds");
    let host = TestDir::outside_tmp("sends-fds-host");
    let host_socket = host.join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&host_socket).unwrap();
    let run = Run::new(&dir);
    // A child takes the byte budget with sends of 256 KiB that wait, then sends passing
    // fd 0 250 times each (the kernel's bound is 253), enough together to fill netbox's
    // descriptor table. Meanwhile a connect to a host socket must still be refused and
    // logged, and the command's own connect answered (made, or refused with ENOBUFS: the
    // bound); once the child is gone, its calls end and its descriptors come back, and the
    // same connect is made.
    let script = format!(
        r#"python3 - <<'EOF'
{PINNERS}
import signal
child = os.fork()
if child == 0:
    pin(140, 256 << 10)
    time.sleep(3)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0] * 250))]
    pin(hard // 250 + 10, 1, rights)
    time.sleep(60)
    os._exit(0)
time.sleep(8)
p = "/tmp/own-check.sock"
l = socket.socket(socket.AF_UNIX); l.bind(p); l.listen()
def own():
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(p); return "made"
    except OSError as e:
        return "ENOBUFS" if e.errno == 105 else str(e.errno)
during = own()
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("{}"); print("HOST CONNECTED")
except OSError as e:
    print("HOST refused", e.errno)
os.kill(child, signal.SIGKILL); os.waitpid(child, 0)
time.sleep(1)
print("OWN during", "answered" if during in ("made", "ENOBUFS") else during, "after", own(), flush=True)
os._exit(0)
EOF"#,
        host_socket.display()
    );
    let mut child = run
        .command(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netbox");
    let started = Instant::now();
    let pid = child.id();
    let mut peak_fds = None;
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("netbox still running after 90 s: the command's calls were never answered");
        }
        // netbox's open descriptors (readable where the test may look: as root).
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            let open = fds.count();
            peak_fds = Some(peak_fds.unwrap_or(0).max(open));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if nix::unistd::geteuid().is_root() {
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let peak = peak_fds.expect("netbox's descriptors were never read");
        // Before: the table filled up (19,999 of 20,000), and netbox's own work failed.
        assert!(
            (peak as u64) < soft * 6 / 10,
            "netbox held {peak} descriptors of {soft}"
        );
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        stdout(&out),
        "HOST refused 111\nOWN during answered after made\n",
        "{}",
        stderr(&out)
    );
    let logged = run
        .events()
        .into_iter()
        .filter(|e| {
            e["type"] == "direct_attempt"
                && e["protocol"] == "unix"
                && e["address"] == host_socket.display().to_string()
        })
        .count();
    assert_eq!(logged, 1, "the refused host socket was not logged");
}

#[test]
fn calls_queued_behind_busy_workers_leave_netbox_holding_little() {
    let dir = TestDir::new("sends-queue");
    let run = Run::new(&dir);
    // Every worker is held by a send that never ends; then 2,000 threads each ask for a
    // sendmmsg of 1,024 messages with 128-byte names (one shared array: it costs the
    // command nothing). Before, every call was read and queued: ~240 KB each in netbox.
    let script = format!(
        r#"{SENDMMSG}
{PINNERS}
pin(520, 1)
time.sleep(3)
name = ctypes.create_string_buffer(b"\x01\x00" + b"\x00A" * 63, 128)
one = ctypes.create_string_buffer(b"x", 1)
m, v = messages([(ctypes.addressof(one), 1)] * 1024)
for i in range(1024):
    m[i].hdr.name = ctypes.addressof(name)
    m[i].hdr.namelen = 128
def queue():
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    keep.append(d)
    libc.sendmmsg(d.fileno(), m, 1024, 0)
for _ in range(2000):
    threading.Thread(target=queue, daemon=True).start()
time.sleep(4)
print("queued", flush=True)
os._exit(0)
"#
    );
    let mut child = run
        .command(&format!("python3 - <<'EOF'\n{script}\nEOF"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netbox");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "netbox did not finish in 90 s");
        peak = peak.max(peak_kib(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "queued\n", "{}", stderr(&out));
    assert!(peak > 0, "netbox's memory was never read");
    assert!(
        peak < 160 * 1024,
        "netbox held {peak} KiB for calls queued behind busy workers; {}",
        stderr(&out)
    );
}

#[test]
fn ancillary_data_needing_a_capability_is_refused_and_the_rest_sent() {
    let dir = TestDir::new("sends-cmsg");
    let run = Run::new(&dir);
    // SO_MARK needs CAP_NET_ADMIN: the command may not set it on its socket (the control),
    // nor through a message netbox sends for it (the kernel would check netbox's
    // capabilities); an IP_TOS one, which any program may send, arrives.
    let script = r#"
import socket
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
r.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, 7); print("setsockopt MARK set")
except OSError as e:
    print("setsockopt MARK", e.errno)
try:
    s.sendmsg([b"m"], [(socket.SOL_SOCKET, socket.SO_MARK, (7).to_bytes(4, "little"))], 0, r.getsockname())
    print("cmsg MARK sent")
except OSError as e:
    print("cmsg MARK", e.errno)
s.sendmsg([b"t"], [(socket.IPPROTO_IP, socket.IP_TOS, (0x10).to_bytes(4, "little"))], 0, r.getsockname())
data, anc, _, _ = r.recvmsg(8, 64)
print("TOS", data.decode(), anc[0][2][0] if anc else None)
"#;
    std::fs::write(run.workspace.join("cmsg.py"), script).unwrap();
    let out = run.sh("python3 cmsg.py");
    assert_eq!(
        stdout(&out),
        "setsockopt MARK 1\ncmsg MARK 1\nTOS t 16\n",
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_datagram_to_an_allowed_host_socket_is_logged_like_a_connect() {
    let dir = TestDir::new("sends-allowed-dgram");
    let host = TestDir::outside_tmp("sends-allowed-dgram-host");
    let path = host.join("agent.dgram");
    let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let run = Run::new(&dir)
        .arg("--allow-socket")
        .arg(path.display().to_string());
    let out = run.sh(&format!(
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b\"hello\", \"{}\")'",
        path.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let mut got = [0u8; 16];
    let n = receiver.recv(&mut got).unwrap();
    assert_eq!(&got[..n], b"hello");
    let used: Vec<serde_json::Value> = run
        .events()
        .into_iter()
        .filter(|e| e["type"] == "socket_allowed")
        .collect();
    assert_eq!(used.len(), 1, "{used:#?}");
    assert_eq!(used[0]["path"], path.display().to_string());
    assert_eq!(used[0]["result"], "sent");
    assert!(used[0]["executable"].as_str().unwrap().contains("python3"));
}
