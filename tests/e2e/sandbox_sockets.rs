//! Unix sockets decided when CMD connects. A host socket file is connectable from any
//! mount, read-only ones too; netbox decides each connect (and each datagram sent to a
//! path) on the file it finds itself in the sandbox's root, and makes the connect itself:
//! the sandbox's own sockets connect, the ones `--allow-socket` names connect and are
//! logged, and every other is refused and logged, including one the host makes after the
//! run has started, and one a symlink is swapped onto while CMD connects in a loop.
//! Controls in each: the sandbox's own servers answer real clients (curl, ssh-add), and
//! the host's sockets answer from outside.

use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{stderr, stdout, Run, TestDir};

/// A client: connects (or sends a datagram) to each path given and prints one line per
/// path, `CONNECTED <what the server said>`, `SENT`, or `REFUSED <errno>`; `dgram-self`
/// binds a datagram socket at the path and sends to it.
const CLIENT: &str = r#"
import socket, sys
kind = sys.argv[1]
for path in sys.argv[2:]:
    try:
        if kind == "stream":
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(path)
            print("CONNECTED", s.recv(100).decode().strip())
        elif kind == "dgram":
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", path)
            print("SENT")
        else:
            # A datagram socket of the sandbox's own, bound here, sent to.
            receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            receiver.bind(path)
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", path)
            print("SENT", receiver.recv(8).decode())
    except OSError as e:
        print("REFUSED", e.errno)
"#;

/// An HTTP server on a Unix socket (argv[1]), serving the working directory.
const HTTP_ON_UNIX: &str = r#"
import http.server, socketserver, sys, os
class Handler(http.server.SimpleHTTPRequestHandler):
    def address_string(self):
        return "unix"
    def log_message(self, *args):
        pass
try:
    os.unlink(sys.argv[1])
except FileNotFoundError:
    pass
socketserver.UnixStreamServer(sys.argv[1], Handler).serve_forever()
"#;

/// A directory outside the sandbox's private /tmp, for the host's sockets: visible
/// (read-only) inside, as a user's runtime directory would be.
fn host_dir(name: &str) -> TestDir {
    TestDir::remove_leftovers_outside_tmp(name);
    TestDir::outside_tmp(name)
}

fn write_scripts(run: &Run) {
    std::fs::write(run.workspace.join("client.py"), CLIENT).unwrap();
    std::fs::write(run.workspace.join("http_unix.py"), HTTP_ON_UNIX).unwrap();
}

/// Waits until `path` exists (the sandbox got this far), failing after 20 s.
fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn unix_attempts(run: &Run) -> Vec<Value> {
    run.events()
        .into_iter()
        .filter(|e| e["type"] == "direct_attempt" && e["protocol"] == "unix")
        .collect()
}

#[test]
fn a_host_socket_made_after_start_is_refused_and_the_sandboxs_own_connect() {
    let dir = TestDir::new("late-socket");
    let host = host_dir("late-socket");
    let run = Run::new(&dir);
    write_scripts(&run);
    let stream_path = host.join("late.sock");
    let dgram_path = host.join("late.dgram");
    // The run starts first; the host's sockets appear once it is going, past any
    // start-up look at the host, and only then does CMD connect.
    let script = format!(
        "python3 http_unix.py \"$PWD/ws.sock\" & python3 http_unix.py /tmp/own.sock & \
         touch started; while [ ! -e go ]; do sleep 0.02; done; \
         for s in ws.sock /tmp/own.sock; do \
           for i in $(seq 50); do [ -S $s ] && break; sleep 0.05; done; \
           echo \"own $s: $(curl -sS --max-time 5 --unix-socket $s http://sandbox/client.py | head -c 14)\"; done; \
         python3 client.py stream {stream}; python3 client.py dgram {dgram}; \
         python3 client.py dgram-self /tmp/own.dgram; kill %1 %2",
        stream = stream_path.display(),
        dgram = dgram_path.display(),
    );
    let child = run
        .command(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&run.workspace.join("started"));
    let listener = UnixListener::bind(&stream_path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let datagrams = UnixDatagram::bind(&dgram_path).unwrap();
    datagrams.set_nonblocking(true).unwrap();
    std::fs::write(run.workspace.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let said = stdout(&out);
    // Controls: the sandbox's own HTTP servers answer curl, in the workspace and in /tmp;
    // its own datagram socket takes a datagram.
    assert!(
        said.contains("own ws.sock: \nimport socket"),
        "{said} {}",
        stderr(&out)
    );
    assert!(
        said.contains("own /tmp/own.sock: \nimport socket"),
        "{said}"
    );
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| !l.starts_with("own ") && !l.starts_with("import"))
        .collect();
    assert_eq!(
        lines,
        ["REFUSED 111", "REFUSED 111", "SENT x"],
        "{said} {}",
        stderr(&out)
    );
    assert!(
        listener.accept().is_err(),
        "the sandbox reached the host socket"
    );
    assert!(
        datagrams.recv(&mut [0u8; 8]).is_err(),
        "a datagram reached the host socket"
    );
    let attempts = unix_attempts(&run);
    let logged: Vec<(&str, &str)> = attempts
        .iter()
        .map(|a| {
            (
                a["syscall"].as_str().unwrap(),
                a["address"].as_str().unwrap(),
            )
        })
        .collect();
    let stream_shown = stream_path.display().to_string();
    let dgram_shown = dgram_path.display().to_string();
    assert_eq!(
        logged,
        [
            ("connect", stream_shown.as_str()),
            ("sendto", dgram_shown.as_str())
        ],
        "{attempts:?}"
    );
    assert!(attempts.iter().all(|a| a["reason"] == "host socket"));
    assert!(
        stderr(&out).contains(&format!(
            "refused a connection to the host socket {stream_shown}"
        )),
        "{}",
        stderr(&out)
    );
    // Control: the host's sockets answer from outside.
    let _client = std::os::unix::net::UnixStream::connect(&stream_path).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(listener.accept().is_ok());
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"x", &dgram_path)
        .unwrap();
    assert!(datagrams.recv(&mut [0u8; 8]).is_ok());
}

/// A real ssh-agent on the host, with one key, at `path`.
struct Agent {
    pid: u32,
}

impl Agent {
    fn start(dir: &Path, path: &Path) -> Agent {
        let out = std::process::Command::new("ssh-agent")
            .arg("-a")
            .arg(path)
            .arg("-s")
            .output()
            .expect("ssh-agent (openssh-client)");
        let text = String::from_utf8_lossy(&out.stdout);
        let pid = text
            .split("SSH_AGENT_PID=")
            .nth(1)
            .and_then(|rest| rest.split(';').next())
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("ssh-agent said {text}"));
        let key = dir.join("key");
        let made = std::process::Command::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "netbox-test-key",
                "-f",
            ])
            .arg(&key)
            .status()
            .unwrap();
        assert!(made.success());
        let added = std::process::Command::new("ssh-add")
            .arg("-q")
            .arg(&key)
            .env("SSH_AUTH_SOCK", path)
            .status()
            .unwrap();
        assert!(added.success());
        Agent { pid }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.pid.to_string())
            .status();
    }
}

#[test]
fn allow_socket_lets_exactly_the_named_agent_through_and_logs_it() {
    let dir = TestDir::new("allow-socket");
    let host = host_dir("allow-socket");
    let allowed = host.join("agent.sock");
    let other = host.join("other-agent.sock");
    let _agent = Agent::start(&dir.path, &allowed);
    let _other = Agent::start(&host.path, &other);
    let list = "ssh-add -l; echo rc=$?";
    // Named by the variable, as a user would: netbox expands it.
    let run = Run::new(&dir)
        .arg("--allow-socket")
        .arg("$SSH_AUTH_SOCK")
        .env("SSH_AUTH_SOCK", allowed.display().to_string());
    let out = run.sh(&format!("{list}; SSH_AUTH_SOCK={} {list}", other.display()));
    let said = stdout(&out);
    assert!(
        said.starts_with("256 SHA256:") && said.contains("netbox-test-key (ED25519)\nrc=0\n"),
        "{said} {}",
        stderr(&out)
    );
    assert!(said.ends_with("rc=2\n"), "the other agent answered: {said}");
    // The probe proved netbox lets it through, and refuses a socket from outside.
    let probe = run.probe();
    let row = probe["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "allowed sockets")
        .unwrap_or_else(|| panic!("no allowed sockets check: {probe:#}"));
    assert_eq!(row["passed"], true, "{row:#}");
    assert_eq!(row["forbidden"][0]["result"], "refused as a host socket");
    assert_eq!(
        row["control"][0]["attempt"],
        format!("connect to the allowed socket {}", allowed.display())
    );
    assert_eq!(row["control"][0]["result"], "let through");
    let used: Vec<Value> = run
        .events()
        .into_iter()
        .filter(|e| e["type"] == "socket_allowed")
        .collect();
    assert!(!used.is_empty(), "{:?}", run.events());
    assert!(used
        .iter()
        .all(|u| u["path"] == allowed.display().to_string()
            && u["result"] == "connected"
            && u["executable"].as_str().unwrap().ends_with("ssh-add")));
    // `netbox log` sums them up, and names the other agent as refused.
    let summary = std::process::Command::new(crate::support::netbox_bin())
        .arg("log")
        .arg(&run.log)
        .output()
        .unwrap();
    let summary = stdout(&summary);
    assert!(
        summary.contains("allowed sockets (--allow-socket)")
            && summary.contains(&format!("{}", allowed.display())),
        "{summary}"
    );
    // The same from an allowlist's `sockets = [...]`; without either, refused.
    let policy = dir.write(
        "sockets.toml",
        &format!("sockets = [\"{}\"]\n", allowed.display()),
    );
    let from_file = Run::new(&dir)
        .arg("--allowlist")
        .arg(policy.display().to_string())
        .env("SSH_AUTH_SOCK", allowed.display().to_string());
    assert!(stdout(&from_file.sh(list)).ends_with("rc=0\n"));
    let none = Run::new(&dir).env("SSH_AUTH_SOCK", allowed.display().to_string());
    assert!(stdout(&none.sh(list)).ends_with("rc=2\n"));
}

#[test]
fn allow_socket_mistakes_are_one_line_each() {
    let dir = TestDir::new("allow-socket-errors");
    let run = Run::new(&dir);
    let in_workspace = run.workspace.join("dev.sock");
    let _listener = UnixListener::bind(&in_workspace).unwrap();
    let plain_file = dir.write("not-a-socket", "");
    let cases: [(String, &str); 4] = [
        (
            "$NETBOX_TEST_UNSET_VARIABLE".into(),
            "NETBOX_TEST_UNSET_VARIABLE is not set",
        ),
        (
            in_workspace.display().to_string(),
            "lies in the writable root",
        ),
        (plain_file.display().to_string(), "is not a Unix socket"),
        (
            "/nonexistent/agent.sock".into(),
            "cannot be reached on the host",
        ),
    ];
    for (given, says) in cases {
        let out = Run::new(&dir)
            .arg("--allow-socket")
            .arg(given.clone())
            .sh("echo RAN");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{given}: {err}");
        assert!(!stdout(&out).contains("RAN"));
        assert!(
            err.contains(says) && err.lines().count() == 1,
            "{given}: {err}"
        );
    }
}

#[test]
fn a_symlink_swapped_while_cmd_connects_never_reaches_a_host_socket() {
    let dir = TestDir::new("socket-swap");
    let host = host_dir("socket-swap");
    let run = Run::new(&dir);
    write_scripts(&run);
    let host_path: PathBuf = host.join("target.sock");
    // The sandbox flips `link` between its own socket and the host's as fast as it can
    // while a client connects through `link` in a loop: each connect must reach the
    // sandbox's own server or nothing, never the host's.
    let racer = format!(
        r#"
import os, socket, threading, time, sys
own = os.path.abspath("own.sock")
srv = socket.socket(socket.AF_UNIX); srv.bind(own); srv.listen(128)
def serve():
    while True:
        c, _ = srv.accept(); c.close()
threading.Thread(target=serve, daemon=True).start()
open("started", "w").close()
while not os.path.exists("go"):
    time.sleep(0.02)
stop = False
def flip():
    while not stop:
        for target in (own, "{host}"):
            try:
                os.symlink(target, "link.new"); os.replace("link.new", "link")
            except OSError:
                pass
threading.Thread(target=flip, daemon=True).start()
reached = refused = 0
end = time.time() + 3
while time.time() < end:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(1)
    try:
        s.connect("link"); reached += 1
    except OSError:
        refused += 1
    s.close()
stop = True
print("reached", reached, "refused", refused)
"#,
        host = host_path.display()
    );
    std::fs::write(run.workspace.join("racer.py"), racer).unwrap();
    let child = run
        .command("python3 racer.py")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&run.workspace.join("started"));
    let listener = UnixListener::bind(&host_path).unwrap();
    listener.set_nonblocking(true).unwrap();
    // Accepted as they come, so a regression shows as a count, not as a full backlog.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let accepting = {
        let done = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            let mut reached = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok(_) => reached += 1,
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            while listener.accept().is_ok() {
                reached += 1;
            }
            reached
        })
    };
    std::fs::write(run.workspace.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let host_reached = accepting.join().unwrap();
    let said = stdout(&out);
    let counts: Vec<u64> = said
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(counts.len(), 2, "{said} {}", stderr(&out));
    // Control: both ways were taken, many times.
    assert!(counts[0] > 20 && counts[1] > 20, "{said}");
    assert_eq!(host_reached, 0, "the host socket was reached: {said}");
    assert!(!unix_attempts(&run).is_empty());
}

#[test]
fn a_datagram_address_rewritten_while_sending_never_reaches_a_host_socket() {
    let dir = TestDir::new("dgram-swap");
    let host = host_dir("dgram-swap");
    let run = Run::new(&dir);
    let host_path = host.join("host.dgram");
    // One thread sends datagrams with libc's sendto from one sockaddr_un buffer while
    // another rewrites that buffer between the sandbox's own socket and the host's: each
    // datagram must reach the sandbox's own socket or nothing.
    let racer = format!(
        r#"
import ctypes, os, socket, threading, time
libc = ctypes.CDLL(None, use_errno=True)
own = os.path.abspath("own.dgram")
receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); receiver.bind(own)
receiver.setblocking(False)
open("started", "w").close()
while not os.path.exists("go"):
    time.sleep(0.02)
def address(path):
    return socket.AF_UNIX.to_bytes(2, "little") + path.encode() + b"\0" * (108 - len(path))
mine, theirs = address(own), address("{host}")
buffer = ctypes.create_string_buffer(mine, 110)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buffer, theirs, 110)
        ctypes.memmove(buffer, mine, 110)
threading.Thread(target=flip, daemon=True).start()
sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sender.setblocking(False)  # a full queue anywhere fails the send instead of waiting
sent = failed = received = 0
end = time.time() + 3
while time.time() < end:
    if libc.sendto(sender.fileno(), b"x", 1, 0, buffer, 110) == 1:
        sent += 1
    else:
        failed += 1
    try:
        while receiver.recv(8):
            received += 1
    except BlockingIOError:
        pass
stop = True
print("sent", sent, "failed", failed, "received", received)
"#,
        host = host_path.display()
    );
    std::fs::write(run.workspace.join("racer.py"), racer).unwrap();
    let child = run
        .command("python3 racer.py")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&run.workspace.join("started"));
    let datagrams = UnixDatagram::bind(&host_path).unwrap();
    datagrams.set_nonblocking(true).unwrap();
    std::fs::write(run.workspace.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let said = stdout(&out);
    let counts: Vec<u64> = said
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(counts.len(), 3, "{said} {}", stderr(&out));
    // Control: datagrams reached the sandbox's own socket, many times.
    assert!(counts[2] > 100, "{said}");
    let mut host_received = 0;
    while datagrams.recv(&mut [0u8; 8]).is_ok() {
        host_received += 1;
    }
    assert_eq!(
        host_received, 0,
        "datagrams reached the host socket: {said}"
    );
}

#[test]
fn sends_made_by_netbox_keep_their_meaning() {
    let dir = TestDir::new("sends");
    let run = Run::new(&dir);
    std::fs::write(run.workspace.join("secret.txt"), "passed by fd").unwrap();
    // A file descriptor passed over a datagram socket of the sandbox's own (SCM_RIGHTS);
    // a 100 KiB datagram arrives whole; an 8 MiB stream sendmsg sends a prefix intact;
    // a send on a closed stream raises SIGPIPE in the sender and fails with EPIPE.
    let script = r#"
import array, os, signal, socket, threading, time
path = "/tmp/fd.dgram"
receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); receiver.bind(path)
sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
fd = os.open("secret.txt", os.O_RDONLY)
sender.sendmsg([b"fd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))], 0, path)
msg, ancdata, _, _ = receiver.recvmsg(16, socket.CMSG_SPACE(4))
passed = array.array("i", ancdata[0][2])[0]
print("FD", msg.decode(), os.read(passed, 100).decode())
big = os.urandom(100 * 1024)
receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
sender.sendto(big, path)
print("DGRAM", receiver.recv(200 * 1024) == big)
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
client = socket.create_connection(server.getsockname()); peer, _ = server.accept()
data = os.urandom(8 << 20)
got = bytearray()
def drain():
    while True:
        chunk = peer.recv(1 << 20)
        if not chunk:
            break
        got.extend(chunk)
reader = threading.Thread(target=drain); reader.start()
n = client.sendmsg([data])
client.close(); reader.join()
print("STREAM", n > 0, bytes(got) == data[:n])
raised = []
signal.signal(signal.SIGPIPE, lambda *a: raised.append(1))
a, b = socket.socketpair(); b.close()
try:
    a.sendmsg([b"x"])
except BrokenPipeError:
    time.sleep(0.05)  # Python runs a handler between bytecodes, not at once
    print("EPIPE", bool(raised))
"#;
    let out = run.sh(&format!("python3 - <<'EOF'\n{script}\nEOF"));
    assert_eq!(
        stdout(&out),
        "FD fd passed by fd\nDGRAM True\nSTREAM True True\nEPIPE True\n",
        "{}",
        stderr(&out)
    );
}
