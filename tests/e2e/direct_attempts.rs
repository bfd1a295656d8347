//! Direct attempts on record: a connection or datagram CMD sends past
//! the proxy to where nothing of netbox's listens is one `direct_attempt` record and one
//! notice, with or without capture; traffic that stays in the sandbox (its own servers,
//! the proxy, the DNS stub, unix sockets, captured ports) is not. Everything runs in a
//! network namespace of the test's own (`unshare -rn`, loopback only): the documentation
//! addresses dialled here (192.0.2.0/24, 2001:db8::/32) lead nowhere even if a
//! regression let them out of the sandbox.

use serde_json::Value;

use crate::capture::run_in_own_netns;
use crate::support::{stderr, stdout, TestDir};

/// CMD's attempts, one line of output each, and its local traffic (controls, which must
/// work and must not be logged). Python, as a program that ignores the proxy settings.
const ATTEMPTS: &str = r#"
import socket, threading
def attempt(what, f):
    try:
        f()
        print(what, "sent")
    except OSError as e:
        print(what, e.errno)
def tcp(to):
    s = socket.socket(socket.AF_INET6 if ":" in to[0] else socket.AF_INET)
    s.settimeout(5)
    s.connect(to)
def udp_sendto(to):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"q", to)
def udp_sendmsg(to):
    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendmsg([b"q"], [], 0, to)
def udp_connect(to):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(to)
attempt("tcp out", lambda: tcp(("192.0.2.1", 8080)))
attempt("udp sendto out", lambda: udp_sendto(("192.0.2.1", 53)))
attempt("udp sendmsg out", lambda: udp_sendmsg(("2001:db8::1", 5353)))
attempt("tcp loopback, nothing there", lambda: tcp(("127.0.0.1", 5432)))
attempt("udp connect to a nameserver", lambda: udp_connect(("192.0.2.9", 53)))
# What libc lets through that Python does not: an AF_UNSPEC name, which an
# IPv4 UDP socket's send takes as AF_INET; and sendmmsg whose second header is on a page
# that cannot be read (the kernel still sends the first message).
import ctypes, mmap, struct
libc = ctypes.CDLL(None, use_errno=True)
def raw(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), "raw call")
def sockaddr(family, ip, port):
    return struct.pack("=H", family) + struct.pack(">H", port) + socket.inet_aton(ip) + bytes(8)
unspec = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
name = sockaddr(0, "192.0.2.7", 53)
attempt("udp sendto AF_UNSPEC", lambda: raw(libc.sendto(unspec.fileno(), b"q", 1, 0, name, 16)))
pages = mmap.mmap(-1, 2 * mmap.PAGESIZE)
base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
raw(libc.mprotect(ctypes.c_void_p(base + mmap.PAGESIZE), mmap.PAGESIZE, 0))
name_at = base + 64
ctypes.memmove(name_at, sockaddr(socket.AF_INET, "192.0.2.8", 53), 16)
payload = ctypes.create_string_buffer(b"q")
iov_at = base + 128
ctypes.memmove(iov_at, struct.pack("=QQ", ctypes.addressof(payload), 1), 16)
header_at = base + mmap.PAGESIZE - 64
ctypes.memmove(header_at, struct.pack("=QI4xQQQQi4xI4x", name_at, 16, iov_at, 1, 0, 0, 0, 0), 64)
mm = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt("udp sendmmsg, second header unreadable", lambda: raw(libc.sendmmsg(mm.fileno(), ctypes.c_void_p(header_at), 2, 0)))
# Controls: none of these is a direct attempt.
attempt("udp connect, sorting addresses", lambda: udp_connect(("192.0.2.9", 443)))
server = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=lambda: server.accept(), daemon=True).start()
attempt("tcp to its own server", lambda: tcp(server.getsockname()))
receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
receiver.bind(("127.0.0.1", 0))
attempt("udp to its own socket", lambda: udp_sendto(receiver.getsockname()))
print("received", receiver.recv(8))
attempt("tcp to the proxy", lambda: tcp(("127.0.0.1", 3128)))
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
a.sendmsg([b"x"])
print("unix", b.recv(8))
# A reply to a UDP socket connected to its sender reaches it.
client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
client.bind(("127.0.0.1", 0))
replier = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
replier.bind(("127.0.0.1", 0))
client.connect(replier.getsockname())
attempt("udp reply to a connected socket", lambda: replier.sendto(b"r", client.getsockname()))
print("reply", client.recv(8))
# Names the kernel refuses or ignores send nothing anywhere: an internet name on a unix
# socket (EINVAL), and one on a TCP socket already connected (to the proxy).
attempt("unix socket, internet name", lambda: raw(libc.sendto(a.fileno(), b"q", 1, 0, sockaddr(socket.AF_INET, "192.0.2.9", 9), 16)))
proxy = socket.create_connection(("127.0.0.1", 3128))
attempt("tcp sendto on a connected socket", lambda: raw(libc.sendto(proxy.fileno(), b"GET", 3, 0, sockaddr(socket.AF_INET, "192.0.2.9", 443), 16)))
"#;

fn direct_attempts(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r["type"] == "direct_attempt")
        .collect()
}

/// The live probe's check of this log.
fn probe_check(records: &[Value]) -> Value {
    records
        .iter()
        .filter(|r| r["type"] == "probe")
        .flat_map(|r| r["checks"].as_array().cloned().unwrap_or_default())
        .find(|c| c["name"] == "direct attempts logged (seccomp)")
        .unwrap_or_else(|| panic!("no direct-attempt check in the probe: {records:#?}"))
}

#[test]
fn direct_attempts_are_logged_and_local_traffic_is_not() {
    let dir = TestDir::new("direct");
    // In the workspace: the sandbox's /tmp is its own.
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let script = dir.write("ws/attempts.py", ATTEMPTS);
    let (out, records) = run_in_own_netns(
        &dir,
        "--no-capture",
        "allow = [\"a.test\"]\n",
        &format!("python3 {}", script.display()),
        &[],
    );
    let text = stdout(&out);
    // The attempts failed as the namespace makes them (no route out: ENETUNREACH, 101;
    // nothing listening: ECONNREFUSED, 111; connecting a UDP socket sends nothing).
    for line in [
        "tcp out 101",
        "udp sendto out 101",
        "tcp loopback, nothing there 111",
        "udp connect to a nameserver 101",
        // Controls.
        "tcp to its own server sent",
        "udp to its own socket sent",
        "received b'q'",
        "tcp to the proxy sent",
        "unix b'x'",
        "udp sendto AF_UNSPEC 101",
        "udp sendmmsg, second header unreadable 101",
        "udp reply to a connected socket sent",
        "reply b'r'",
        "unix socket, internet name 22",
        "tcp sendto on a connected socket sent",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no {line:?} in:\n{text}{}",
            stderr(&out)
        );
    }
    let attempts = direct_attempts(&records);
    let seen: Vec<(String, String, String, u64, String)> = attempts
        .iter()
        .map(|r| {
            (
                r["syscall"].as_str().unwrap_or_default().to_owned(),
                r["protocol"].as_str().unwrap_or_default().to_owned(),
                r["address"].as_str().unwrap_or_default().to_owned(),
                r["port"].as_u64().unwrap_or_default(),
                r["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("connect", "tcp", "192.0.2.1", 8080, "no route out"),
        ("sendto", "udp", "192.0.2.1", 53, "no route out"),
        ("sendmsg", "udp", "2001:db8::1", 5353, "no route out"),
        ("connect", "tcp", "127.0.0.1", 5432, "no listener"),
        ("connect", "udp", "192.0.2.9", 53, "no route out"),
        ("sendto", "udp", "192.0.2.7", 53, "no route out"),
        ("sendmmsg", "udp", "192.0.2.8", 53, "no route out"),
    ];
    let expected: Vec<(String, String, String, u64, String)> = expected
        .iter()
        .map(|(s, p, a, port, r)| ((*s).into(), (*p).into(), (*a).into(), *port, (*r).into()))
        .collect();
    // Exactly these: the sandbox's own traffic, the proxy and unix sockets are not in it.
    assert_eq!(seen, expected, "{attempts:#?}");
    for attempt in &attempts {
        let program = attempt["executable"].as_str().unwrap_or_default();
        assert!(program.contains("python3"), "{attempt:#}");
    }
    // Each announced once, where the user sees it.
    let err = stderr(&out);
    assert!(
        err.contains("netbox: blocked direct tcp to 192.0.2.1:8080 by python3"),
        "{err}"
    );
    assert!(
        err.contains("(no listener: nothing in the sandbox listens there (the host's loopback is not reachable))"),
        "{err}"
    );
    assert_eq!(probe_check(&records)["passed"], true);
}

/// With capture, an allowed name on a port CMD could listen on itself (8443) is captured
/// at every address but the sandbox's own, and CMD may still listen there at every
/// address; another port of the same name is not captured, and the attempt is logged
/// with the name.
#[test]
fn captured_runs_name_the_host_an_attempt_was_for() {
    let dir = TestDir::new("direct-capture");
    let script = "python3 -c \"import socket\n\
                  for port in (8444, 443, 8443):\n    \
                      try:\n        c = socket.create_connection(('a.test', port), timeout=5); print(port, 'connected', c.recv(64) if port == 8443 else b''); c.close()\n    \
                      except OSError as e: print(port, e.errno)\n\
                  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'q', ('a.test', 443))\n\
                  s = socket.create_server(('::', 8443), family=socket.AF_INET6, dualstack_ipv6=True); print('CMD listens at every address on 8443 itself')\n\
                  c = socket.create_connection(('127.0.0.1', 8443), timeout=5); s.accept(); print('own server reached on loopback')\n\
                  c = socket.create_connection(('a.test', 8443), timeout=5); print('a.test still captured', c.recv(64))\n\
                  own = socket.create_server(('0.0.0.0', 9000))\n\
                  try:\n    socket.create_connection(('192.0.2.1', 9000), timeout=5); print('192.0.2.1 reached')\n\
                  except OSError as e: print('192.0.2.1:9000', e.errno)\n\
                  u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('0.0.0.0', 5353)); socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'm', ('127.0.0.1', 5353)); print('own udp', u.recv(8))\"";
    let (out, records) = run_in_own_netns(
        &dir,
        "--quiet",
        "allow = [\"a.test:443,8443\", \"127.0.0.1:443,8443\"]\n\
         [hosts]\n\"a.test\" = \"127.0.0.1\"\n",
        script,
        &[],
    );
    let text = stdout(&out);
    // 8444 is not allowed, and nothing listens there: refused at once. 443 and 8443 reach
    // the test's servers.
    assert!(text.contains("8444 111"), "{text}{}", stderr(&out));
    assert!(text.contains("443 connected b''"), "{text}{}", stderr(&out));
    assert!(
        text.contains("8443 connected b'high port\\n'"),
        "{text}{}",
        stderr(&out)
    );
    // Capture's listeners are in a namespace of their own: CMD listens at every address
    // on the port capture carries, reaches its server on its own addresses, and a.test's
    // address is captured all the same.
    assert!(
        text.contains("CMD listens at every address on 8443 itself"),
        "{text}{}",
        stderr(&out)
    );
    assert!(text.contains("own server reached on loopback"), "{text}");
    assert!(
        text.contains("a.test still captured b'high port\\n'"),
        "{text}"
    );
    // An address that is not the sandbox's is not served by CMD's own server: it is
    // routed to capture, which does not carry 9000 (refused at once, and logged).
    assert!(text.contains("192.0.2.1:9000 111"), "{text}");
    assert!(text.contains("own udp b'm'"), "{text}");
    assert!(
        records.iter().any(|r| r["type"] == "net"
            && r["proto"] == "captured"
            && r["host"] == "a.test"
            && r["port"] == 8443
            && r["decision"] == "allow"),
        "{records:#?}"
    );
    let attempts = direct_attempts(&records);
    assert!(
        attempts.iter().any(|r| r["name"] == "a.test"
            && r["port"] == 8444
            && r["protocol"] == "tcp"
            && r["reason"] == "port not captured"
            && r["address"]
                .as_str()
                .is_some_and(|a| a.starts_with("198.18."))),
        "{attempts:#?}"
    );
    assert!(
        attempts.iter().any(|r| r["name"] == "a.test"
            && r["port"] == 443
            && r["protocol"] == "udp"
            && r["reason"] == "udp not carried"),
        "{attempts:#?}"
    );
    assert!(
        attempts.iter().any(|r| r["address"] == "192.0.2.1"
            && r["port"] == 9000
            && r["reason"] == "port not captured"),
        "{attempts:#?}"
    );
    // The captured connections, the lookups through the stub and CMD's own loopback
    // traffic are not attempts.
    assert!(
        !attempts
            .iter()
            .any(|r| r["protocol"] == "tcp" && (r["port"] == 443 || r["port"] == 8443)),
        "{attempts:#?}"
    );
    assert!(!attempts.iter().any(|r| r["port"] == 53), "{attempts:#?}");
    assert!(!attempts.iter().any(|r| r["port"] == 5353), "{attempts:#?}");
    assert_eq!(probe_check(&records)["passed"], true);
}

/// Other spellings of the sandbox's own addresses (0.0.0.0, ::) reach CMD's own server,
/// unlogged, and one where nothing listens is logged as such; an IPv6 link-local address
/// goes to capture like any other address: refused at once on a port capture does not
/// carry (logged), taken and judged by the bridge on one it carries. The
/// allowlist names the proxy's own port too: CMD runs all the same.
#[test]
fn unspecified_and_link_local_addresses_are_judged_where_they_go() {
    let dir = TestDir::new("direct-spellings");
    let ipv6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let script = format!(
        "python3 -c \"import socket\n\
         def connect(family, to):\n    \
             s = socket.socket(family); s.settimeout(5)\n    \
             try:\n        s.connect(to); s.settimeout(2); got = s.recv(16); return 'connected ' + repr(got)\n    \
             except OSError as e: return str(e.errno)\n\
         own = socket.create_server(('0.0.0.0', 9999))\n\
         threading = __import__('threading')\n\
         threading.Thread(target=lambda: [own.accept()[0].sendall(b'own') for _ in range(2)], daemon=True).start()\n\
         print('0.0.0.0:9999', connect(socket.AF_INET, ('0.0.0.0', 9999)))\n\
         print('0.0.0.0:9998', connect(socket.AF_INET, ('0.0.0.0', 9998)))\n\
         tied = socket.socket(); tied.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b'lo'); tied.settimeout(1)\n\
         try:\n    tied.connect(('192.0.2.1', 8443)); print('tied to lo: connected')\n\
         except OSError as e: print('tied to lo:', e.errno)\n\
         print('224.0.0.1:8443', connect(socket.AF_INET, ('224.0.0.1', 8443)))\n\
         if {ipv6}:\n    \
             link = socket.if_nametoindex('nb-capture')\n    \
             print('fe80::1:9997', connect(socket.AF_INET6, ('fe80::1', 9997, 0, link)))\n    \
             print('fe80::1:8443', connect(socket.AF_INET6, ('fe80::1', 8443, 0, link)))\n\
         \"",
        ipv6 = if ipv6 { "True" } else { "False" },
    );
    let (out, records) = run_in_own_netns(
        &dir,
        "--quiet",
        "allow = [\"a.test:3128,8443\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n",
        &script,
        &[],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(text.contains("0.0.0.0:9999 connected b'own'"), "{text}");
    assert!(text.contains("0.0.0.0:9998 111"), "{text}");
    let attempts = direct_attempts(&records);
    assert!(!attempts.iter().any(|r| r["port"] == 9999), "{attempts:#?}");
    // Sent where nothing receives it: a socket tied to lo for an address capture would
    // take (it waits in vain), a multicast address (refused): logged as unroutable
    // not left to a bridge that never sees them.
    assert!(
        text.contains("tied to lo: None") || text.contains("tied to lo: 110"),
        "{text}"
    );
    assert!(text.contains("224.0.0.1:8443 101"), "{text}");
    for address in ["192.0.2.1", "224.0.0.1"] {
        assert!(
            attempts.iter().any(|r| r["address"] == address
                && r["port"] == 8443
                && r["reason"] == "unroutable"),
            "{address} in {attempts:#?}"
        );
    }
    assert!(
        attempts.iter().any(|r| r["address"] == "0.0.0.0"
            && r["port"] == 9998
            && r["reason"] == "no listener"),
        "{attempts:#?}"
    );
    if ipv6 {
        assert!(text.contains("fe80::1:9997 111"), "{text}");
        // Taken by capture, refused by the bridge (a reset, or nothing read).
        assert!(
            text.contains("fe80::1:8443 104") || text.contains("fe80::1:8443 connected b''"),
            "{text}"
        );
        assert!(
            attempts.iter().any(|r| r["address"] == "fe80::1"
                && r["port"] == 9997
                && r["reason"] == "port not captured"),
            "{attempts:#?}"
        );
        assert!(
            records.iter().any(|r| r["type"] == "net"
                && r["proto"] == "captured"
                && r["port"] == 8443
                && r["decision"] == "deny"),
            "{records:#?}"
        );
    }
}

/// A watcher that lets network calls through without looking (a test build's deliberate
/// breakage) fails the probe's check, and CMD never runs. Control: the first test.
#[test]
fn a_watcher_blind_to_direct_attempts_stops_cmd() {
    let dir = TestDir::new("direct-blind");
    let (out, records) = run_in_own_netns(
        &dir,
        "--quiet",
        "allow = [\"a.test\"]\n",
        "echo CMD-RAN",
        &[("NETBOX_TEST_BREAK", "net-watch")],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("CMD-RAN"));
    assert!(
        stderr(&out).contains("direct attempts logged"),
        "{}",
        stderr(&out)
    );
    assert_eq!(probe_check(&records)["passed"], false);
}
