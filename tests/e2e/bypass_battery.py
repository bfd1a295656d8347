# The bypass battery: every spelling of a refused target a hostile client can send the
# bridge. Run by bypass_battery.rs inside a network namespace of the test's own (`unshare
# -rn`), whose only interface is loopback, so even a regression that dialed a NAT64 or
# 6to4 form could not send a packet off the machine.
#
# One upstream is allowed: 127.0.0.3:PORT (as registry.test, good.rebind.test and the
# literal). A tripwire listens on 127.0.0.1:PORT and [::1]:PORT, the same port, where
# every attack points, and on 100.128.0.1 and 2600:1::1, public addresses the namespace
# holds as a host holds its own; it must never accept a connection from the bridge. The DNS server
# here answers *.rebind.test with loopback in every form, garbage, silence, and an answer
# that flips between the allowed and the refused address on every question.
#
# Prints one line per attempt: `NAME refused DETAIL` or `NAME ALLOWED DETAIL` for an
# attack, `NAME ok` or `NAME FAILED DETAIL` for a control; then `tripwire N`, `upstream-port P`,
# `dns-questions NAME N` and `done`.
import ctypes, fcntl, os, socket, struct, subprocess, sys, threading, time

netbox, work = sys.argv[1], sys.argv[2]


def loopback_up():
    """`ip link set lo up`, without needing iproute2."""
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    req = struct.pack("16sH14x", b"lo", 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
    s.close()


loopback_up()
# Public addresses this "machine" (the namespace) holds, as a host holds its own: a
# connection there reaches its services as loopback would.
HOST_V4, HOST_V6 = "100.128.0.1", "2600:1::1"
subprocess.run(["ip", "addr", "add", HOST_V4 + "/32", "dev", "lo"], check=True)
subprocess.run(["ip", "-6", "addr", "add", HOST_V6 + "/128", "dev", "lo", "nodad"], check=True)
# And whole ranges delivered here by `local` routes (no address on an interface), with
# binds to any address allowed, so that a socket's bind says nothing about locality.
ROUTED_V4, ROUTED_V6 = "100.129.0.5", "2600:2::5"
subprocess.run(["ip", "route", "add", "local", "100.129.0.0/24", "dev", "lo"], check=True)
subprocess.run(["ip", "-6", "route", "add", "local", "2600:2::/64", "dev", "lo"], check=True)
for family in ("ipv4", "ipv6"):
    with open("/proc/sys/net/%s/ip_nonlocal_bind" % family, "w") as f:
        f.write("1")

# --- The tripwire and the allowed upstream, on one port number. ---------------------------
tripwire_hits = []
tripwire4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tripwire4.bind(("127.0.0.1", 0))
PORT = tripwire4.getsockname()[1]
tripwire6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
tripwire6.bind(("::1", PORT))
host4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
host4.bind((HOST_V4, PORT))
host6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
host6.bind((HOST_V6, PORT))
routed4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
routed4.bind((ROUTED_V4, PORT))
routed6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
routed6.bind((ROUTED_V6, PORT))
upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
upstream.bind(("127.0.0.3", PORT))
BODY = b"hello from upstream\n"


def serve_tripwire(listener):
    listener.listen(64)
    while True:
        conn, peer = listener.accept()
        tripwire_hits.append(peer)
        conn.close()


def serve_upstream(listener):
    listener.listen(64)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer_upstream, args=(conn,), daemon=True).start()


def answer_upstream(conn):
    conn.settimeout(10)
    head = b""
    try:
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY)
    except OSError:
        pass
    finally:
        conn.close()


for listener, serve in ((tripwire4, serve_tripwire), (tripwire6, serve_tripwire), (host4, serve_tripwire),
                         (host6, serve_tripwire), (routed4, serve_tripwire), (routed6, serve_tripwire),
                         (upstream, serve_upstream)):
    threading.Thread(target=serve, args=(listener,), daemon=True).start()

# --- The DNS server. -------------------------------------------------------------------
A, AAAA = 1, 28
v4 = socket.inet_aton
v6 = lambda text: socket.inet_pton(socket.AF_INET6, text)
RECORDS = {
    ("good.rebind.test", A): [v4("127.0.0.3")],
    ("loop.rebind.test", A): [v4("127.0.0.1")],
    ("zero.rebind.test", A): [v4("0.0.0.0")],
    ("zero6.rebind.test", AAAA): [v6("::")],
    ("teredo.rebind.test", AAAA): [v6("2001:0:4136:e378:8000:63bf:80ff:fffe")],
    ("self.rebind.test", A): [v4(HOST_V4)],
    ("self6.rebind.test", AAAA): [v6(HOST_V6)],
    ("routed.rebind.test", A): [v4(ROUTED_V4)],
    ("routed6.rebind.test", AAAA): [v6(ROUTED_V6)],
    ("selfnat64.rebind.test", AAAA): [v6("64:ff9b::6480:1")],
    ("mixed.rebind.test", A): [v4("127.0.0.3"), v4("127.0.0.1")],
    ("v6.rebind.test", AAAA): [v6("::1")],
    ("mapped.rebind.test", AAAA): [v6("::ffff:127.0.0.1")],
    ("nat64.rebind.test", AAAA): [v6("64:ff9b::7f00:1")],
    ("sixtofour.rebind.test", AAAA): [v6("2002:7f00:1::1")],
    ("compat.rebind.test", AAAA): [v6("::127.0.0.1")],
}
questions = {}
flips = [0]


def dns_answer(query):
    qid, i, labels = query[:2], 12, []
    while query[i]:
        labels.append(query[i + 1 : i + 1 + query[i]].decode("latin-1"))
        i += 1 + query[i]
    qtype = struct.unpack(">H", query[i + 1 : i + 3])[0]
    question = query[12 : i + 5]
    name = ".".join(labels).lower()
    questions[name] = questions.get(name, 0) + 1
    if name == "silent.rebind.test":
        return None
    if name == "garbage.rebind.test":
        return qid + os.urandom(37)
    if name == "flip.rebind.test" and qtype == A:
        flips[0] += 1
        rdatas = [v4("127.0.0.3" if flips[0] % 2 else "127.0.0.1")]
    else:
        rdatas = RECORDS.get((name, qtype), [])
    known = any(n == name for n, _ in RECORDS) or name == "flip.rebind.test"
    flags = 0x8180 if known else 0x8183  # NOERROR, or NXDOMAIN
    answers = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", qtype, 1, 0, len(r)) + r for r in rdatas)
    return qid + struct.pack(">HHHHH", flags, 1, len(rdatas), 0, 0) + question + answers


def serve_dns(sock):
    while True:
        query, peer = sock.recvfrom(4096)
        try:
            answer = dns_answer(query)
        except (IndexError, struct.error):
            continue
        if answer is not None:
            sock.sendto(answer, peer)


dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns.bind(("127.0.0.1", 0))
threading.Thread(target=serve_dns, args=(dns,), daemon=True).start()

# --- The bridge. -------------------------------------------------------------------------
with open(os.path.join(work, "allow.toml"), "w") as f:
    f.write(
        f'allow = ["registry.test:{PORT}", "*.rebind.test:{PORT}", "127.0.0.3:{PORT}", '
        f'"[64:ff9b::/96]:{PORT}", "[2002::/16]:{PORT}", "[2001::/32]:{PORT}", "[64:ff9b:1::/48]:{PORT}", '
        # 0.0.0.0 and :: are this machine (a connect to them reaches loopback): no rule
        # opens them, though these cover them.
        f'"0.0.0.0/8:{PORT}", "[::/128]:{PORT}"]\n'
        f'deny = ["evil.test"]\n'
        f'[hosts]\n"registry.test" = "127.0.0.3"\n"evil.test" = "127.0.0.1"\n'
    )
bridge = subprocess.Popen(
    [netbox, "bridge", "--listen", "127.0.0.1:0", "--log", os.path.join(work, "events.jsonl"),
     "--dns", "127.0.0.1:%d" % dns.getsockname()[1], "--session", "bypass",
     "--allowlist", os.path.join(work, "allow.toml")],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
bridge_addr = None
for line in bridge.stderr:
    line = line.decode("utf-8", "replace")
    if "listening on " in line:
        host, port = line.split("listening on ")[1].split()[0].rsplit(":", 1)
        bridge_addr = (host, int(port))
        break
if bridge_addr is None:
    print("bridge FAILED did not start", flush=True)
    sys.exit(1)
threading.Thread(target=lambda: [None for _ in bridge.stderr], daemon=True).start()


def exchange(request, then=b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
    """Sends `request`; returns the answer's status line, and what the tunnel gave back
    for `then` if the bridge answered 200 to a CONNECT."""
    s = socket.create_connection(bridge_addr, timeout=15)
    try:
        s.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        if request.startswith(b"CONNECT") and status.startswith("HTTP/1.1 200"):
            s.sendall(then)
            rest = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
            return status, rest
        return status, answer
    except (ConnectionResetError, socket.timeout) as e:
        return "reset" if isinstance(e, ConnectionResetError) else "timeout", b""
    finally:
        s.close()


attacks = controls = 0


def attack(name, request, allowed_if=lambda status, rest: status.startswith("HTTP/1.1 200")):
    global attacks
    attacks += 1
    before = len(tripwire_hits)
    status, rest = exchange(request)
    time.sleep(0.01)
    if allowed_if(status, rest) or len(tripwire_hits) != before:
        print(name, "ALLOWED", repr(status), "tripwire %d" % (len(tripwire_hits) - before), flush=True)
    else:
        print(name, "refused", repr(status), flush=True)


def control(name, request, want=BODY):
    global controls
    controls += 1
    status, rest = exchange(request)
    if status.startswith("HTTP/1.1 200") and rest.endswith(want):
        print(name, "ok", flush=True)
    else:
        print(name, "FAILED", repr(status), repr(rest[-80:]), flush=True)


def connect(authority, host=None):
    if isinstance(authority, str):
        authority = authority.encode("utf-8")
    host = authority if host is None else host
    return b"CONNECT " + authority + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"


def forward(url, host):
    return ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, host)).encode("utf-8")


P = PORT

# The tripwire counts: a control that it would see a dial.
socket.create_connection(("127.0.0.1", P), timeout=5).close()
socket.create_connection(("::1", P), timeout=5).close()
socket.create_connection((HOST_V4, P), timeout=5).close()
socket.create_connection((HOST_V6, P), timeout=5).close()
socket.create_connection((ROUTED_V4, P), timeout=5).close()
socket.create_connection((ROUTED_V6, P), timeout=5).close()
time.sleep(0.05)
print("tripwire-sees-a-dial", "ok" if len(tripwire_hits) == 6 else "FAILED %d" % len(tripwire_hits), flush=True)
del tripwire_hits[:]

# Controls: the allowed upstream by every legitimate way in.
control("connect-registry", connect("registry.test:%d" % P))
control("connect-registry-odd-case-dot", connect("REGISTRY.Test.:%d" % P))
control("connect-literal", connect("127.0.0.3:%d" % P))
control("connect-dns", connect("good.rebind.test:%d" % P))
control("forward-registry", forward("http://registry.test:%d/" % P, "registry.test:%d" % P))

# Every spelling of the tripwire's IPv4 address.
for spelling in ["127.0.0.1", "127.1", "127.0.1", "0x7f.0.0.1", "0x7f000001", "0X7F.0X0.0X0.0X1",
                 "0177.0.0.1", "017700000001", "2130706433", "127.000.000.001", "0x00007f000001",
                 "127.0.0.1.", "0.0.0.0", "0", "0.0.0.0.", "127.0.0.01"]:
    attack("ipv4 %s" % spelling, connect("%s:%d" % (spelling, P)))
    attack("forward ipv4 %s" % spelling, forward("http://%s:%d/" % (spelling, P), "%s:%d" % (spelling, P)))
# And of ::1, with the forms that embed 127.0.0.1 (the NAT64 and 6to4 prefixes are allowed
# by rule, so only the classification of what they embed stands in the way).
for spelling in ["[::1]", "[0:0:0:0:0:0:0:1]", "[::0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
                 "[0::ffff:127.0.0.1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]", "[64:ff9b::127.0.0.1]",
                 "[2002:7f00:1::1]", "[::1%25lo]", "[::1%lo]", "[fe80::1%25lo]", "[::]", "[::ffff:0:0]",
                 "[::ffff:0.0.0.0]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]", "[64:ff9b:1::7f00:1]"]:
    attack("ipv6 %s" % spelling, connect("%s:%d" % (spelling, P)))
    attack("forward ipv6 %s" % spelling, forward("http://%s:%d/" % (spelling, P), "%s:%d" % (spelling, P)))

# Names: the denied one in every case and dot, suffix and prefix tricks, loopback's names,
# homographs of allowed names, and authorities with something smuggled in.
for name in ["evil.test", "EVIL.test", "evil.test.", "evil.test..", ".evil.test", "evil..test",
             "localhost", "localhost.", "LOCALHOST", "ip6-localhost", "registry.test.evil.test",
             "evilregistry.test", "registry.testevil.test", "registry-test", "rebind.test",
             "r\u0435gistry.test", "x.r\u0435bind.test", "registry.t\u0435st", "xn--rgistry-p8a.test",
             "xn--zz.test", "ev\u0456l.test", "evil\uff0etest", "evil\u3002test", "ＥＶＩＬ.test",
             "registry%2etest", "evil.test%2f", "127.0.0.1.rebind.test"]:
    attack("name %s" % name.encode("unicode_escape").decode(), connect("%s:%d" % (name, P)))
for authority in [b"registry.test@evil.test:%d", b"evil.test:%d@registry.test", b"evil.test#registry.test:%d",
                  b"evil.test\\@registry.test:%d", b"registry.test\x00.evil.test:%d", b"evil.test\x00:%d",
                  b"registry.test\t:%d", b"registry.test :%d", b"evil.test:%d\r\nX-Y: z",
                  b"registry.test:%d\r\nHost: evil.test", b"[registry.test]:%d", b"registry.test:%d:1",
                  b"127.0.0.1:%d#registry.test"]:
    authority = authority.replace(b"%d", str(P).encode())
    attack("authority %r" % authority, connect(authority, host=b"registry.test:%d" % P))
# Ports: a number past 65535 must not wrap onto an allowed port.
for port in [P + 65536, P + 2**32, -P]:
    attack("port %d" % port, connect("127.0.0.1:%d" % port))
    attack("registry port %d" % port, connect("registry.test:%d" % port), lambda s, r: s.startswith("HTTP/1.1 200"))
attack("port +P", connect("127.0.0.1:+%d" % P))
attack("port 0x", connect("127.0.0.1:0x%x" % P))

# Absolute URIs whose host a lax parser would misread.
for url in ["http://registry.test:{P}@127.0.0.1:{P}/",
            "http://127.0.0.1:{P}\\@registry.test:{P}/", "http://127.0.0.1:{P}?@registry.test:{P}/",
            "http://127.0.0.1:{P}/@registry.test:{P}/", "http://[::1]:{P}/", "http://evil.test:{P}/",
            "HTTP://127.0.0.1:{P}/", "http://127.0.0.1:{P}#registry.test:{P}/", "http://127.0.0.1:{P}#@registry.test:{P}/"]:
    url = url.format(P=P)
    attack("forward %s" % url, forward(url, "registry.test:%d" % P))
    host = url.split("//", 1)[1].split("/", 1)[0]
    attack("forward host-matched %s" % url, forward(url, host))

# A fragment ends the authority, for the bridge as for every URL parser: this one names
# registry.test, so it reaches registry.test's upstream and nothing else.
control("forward fragment after the host",
        forward("http://registry.test:%d#@127.0.0.1:%d/" % (P, P), "registry.test:%d" % P))

# Smuggling: a second request to the tripwire hidden in the first one's framing, on a
# connection to the allowed upstream. Only the tripwire can tell: any answer is fine so
# long as nothing reaches it.
hidden = b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (P, P)
good = b"GET http://registry.test:%d/ HTTP/1.1\r\nHost: registry.test:%d\r\n" % (P, P)
never = lambda status, rest: False
for name, head in [
    ("duplicate content-length", b"Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % len(hidden)),
    ("content-length list", b"Content-Length: 0, %d\r\n\r\n" % len(hidden)),
    ("cl and te", b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (len(hidden) + 5)),
    ("te with space", b"Transfer-Encoding : chunked\r\nContent-Length: %d\r\n\r\n" % len(hidden)),
    ("te xchunked", b"Transfer-Encoding: xchunked\r\nContent-Length: 0\r\n\r\n"),
    ("te chunked, identity", b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n"),
    ("obs-fold host", b"X-A: b\r\n Host: 127.0.0.1:%d\r\n\r\n" % P),
    ("bare lf", b"Content-Length: 0\n\n"),
]:
    attack("smuggle %s" % name, good + head + hidden, never)
attack("smuggle after connect", connect("registry.test:%d" % P) + hidden, never)

# DNS: every loopback form an answer can take, garbage, silence, and rebinding.
for name in ["loop", "zero", "zero6", "teredo", "self", "self6", "routed", "routed6", "selfnat64", "v6", "mapped",
             "nat64", "sixtofour", "compat", "garbage", "silent", "missing"]:
    attack("dns %s" % name, connect("%s.rebind.test:%d" % (name, P)))
# An answer that mixes the opened address with the tripwire's: only the opened one may be
# dialed, so the tunnel may open, to the allowed upstream alone.
attack("dns mixed", connect("mixed.rebind.test:%d" % P), never)
flip_allowed = flip_refused = 0
for _ in range(8):
    before = len(tripwire_hits)
    status, rest = exchange(connect("flip.rebind.test:%d" % P))
    if len(tripwire_hits) != before:
        print("dns flip ALLOWED tripwire", flush=True)
    elif status.startswith("HTTP/1.1 200") and rest.endswith(BODY):
        flip_allowed += 1
    else:
        flip_refused += 1
attacks += 1
print("dns flip", "refused" if flip_allowed + flip_refused == 8 else "ALLOWED",
      "allowed %d refused %d" % (flip_allowed, flip_refused), flush=True)

# SOCKS5: odd address types and lengths.
def socks(address, port=P):
    s = socket.create_connection(bridge_addr, timeout=15)
    try:
        s.sendall(b"\x05\x01\x00")
        if s.recv(2) != b"\x05\x00":
            return "no-method", b""
        s.sendall(b"\x05\x01\x00" + address + struct.pack(">H", port))
        reply = s.recv(512)
        if reply[:2] != b"\x05\x00":
            return "reply %r" % reply[:2], b""
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        rest = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
        return "HTTP/1.1 200 socks", rest
    except (ConnectionResetError, socket.timeout, BrokenPipeError) as e:
        return type(e).__name__, b""
    finally:
        s.close()


def domain(name):
    return b"\x03" + bytes([len(name)]) + name


for label, address in [("ipv4 127.0.0.1", b"\x01" + v4("127.0.0.1")), ("ipv4 0.0.0.0", b"\x01" + v4("0.0.0.0")),
                       ("ipv6 ::1", b"\x04" + v6("::1")), ("ipv6 mapped", b"\x04" + v6("::ffff:127.0.0.1")),
                       ("ipv6 nat64", b"\x04" + v6("64:ff9b::7f00:1")), ("ipv6 ::", b"\x04" + v6("::")),
                       ("ipv6 mapped 0.0.0.0", b"\x04" + v6("::ffff:0.0.0.0")), ("domain evil.test", domain(b"evil.test")),
                       ("domain 127.0.0.1", domain(b"127.0.0.1")), ("domain 0x7f.1", domain(b"0x7f.1")),
                       ("domain [::1]", domain(b"[::1]")), ("domain ::1", domain(b"::1")),
                       ("domain localhost", domain(b"localhost")), ("domain nul", domain(b"registry.test\x00evil")),
                       ("domain empty", b"\x03\x00"), ("domain 255 bytes", domain(b"a" * 250 + b".test")),
                       ("domain loop.rebind.test", domain(b"loop.rebind.test")),
                       ("atyp 5", b"\x05" + v4("127.0.0.1")), ("atyp 0", b"\x00" + v4("127.0.0.1"))]:
    attacks += 1
    before = len(tripwire_hits)
    status, rest = socks(address)
    time.sleep(0.01)
    allowed = status.startswith("HTTP/1.1 200") or len(tripwire_hits) != before
    print("socks %s" % label, "ALLOWED" if allowed else "refused", status, flush=True)
for label, address in [("socks domain registry.test", domain(b"registry.test")),
                       ("socks ipv4 127.0.0.3", b"\x01" + v4("127.0.0.3"))]:
    controls += 1
    status, rest = socks(address)
    print(label, "ok" if rest.endswith(BODY) else "FAILED %s" % status, flush=True)

time.sleep(0.1)
bridge.terminate()
bridge.wait()
print("tripwire", len(tripwire_hits), flush=True)
print("upstream-port", P, flush=True)
for name in sorted(questions):
    print("dns-questions", name, questions[name], flush=True)
print("attacks", attacks, "controls", controls, flush=True)
print("done", flush=True)
