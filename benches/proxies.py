"""Proxy overhead, side by side in one run: direct, netbox's bridge, and the proxies people
use where they are installed (tinyproxy, squid), against one local nginx on loopback.

Run by benches/proxies.sh (which builds the release netbox, the connect_latency bench and
the chart) as: python3 benches/proxies.py NETBOX CONNECT_LATENCY CHART [--quick]
[--proxy NAME=COMMAND ...] (COMMAND with {port}: another proxy, benchmarked the same way).

A full run writes its table and targets into benches/RESULTS.md (between the markers),
the figures to benches/proxies.json and the chart to benches/proxies.svg; --quick runs
every scenario once and briefly, and draws the chart in a temporary directory only, so
that CI keeps every part working without taking its noisy figures for results.

Each scenario runs every proxy in the same run, and direct beside it, so that only ratios
measured together are compared (these machines are shared and noisy). The columns:
direct; `netbox` (`netbox bridge` alone); `netbox tenants` (the same bridge serving 1,000
tenants, the client naming the first in every connection); `netbox --` (the whole path a
sandboxed command
takes: the client runs inside `netbox -- …` and uses the proxy netbox gives it); tinyproxy
and squid; `socat chain` (two socat relays joined by a Unix socket in front of netbox's
bridge, the way the Node-based sandbox runtime bridges its sandbox to its proxy: the
difference to `netbox` is the relays' cost); and any `--proxy`.

CPU is the proxy's own over the scenario: its processes' scheduler time, read with
clock_gettime on each one's CPU clock (exact, where /proc's utime and stime count 10 ms
ticks), plus what the children it reaped spent (socat forks one per connection). For
`netbox --`, netbox's whole process tree (wait4) less the client's own time (reported from
inside by benches/child_cpu.py) and less what `netbox -- true` costs.
"""

import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

TICKS = os.sysconf("SC_CLK_TCK")
BENCHES = os.path.dirname(os.path.abspath(__file__))
MARK_BEGIN = "<!-- benches/proxies.sh writes from here -->"
MARK_END = "<!-- benches/proxies.sh writes up to here -->"


def more_files(wanted):
    """Raises this process's open-file limit (its children inherit it) towards `wanted`;
    returns what it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limit in [(wanted, max(wanted, hard)), (min(wanted, hard), hard)]:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limit)
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """CPU time of a process (all its threads) and of the children it has reaped, in
    seconds."""
    # The process's CPU clock: MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) in the kernel,
    # which clock_getcpuclockid(3) would return (Python has no binding for it).
    own = time.clock_gettime(((~pid) << 3) | 2)
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # cutime and cstime: ticks, but summed exactly before they are rounded.
    return own + (int(fields[13]) + int(fields[14])) / TICKS


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_for_port(port, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Proxy:
    """A proxy under test: its name, where it listens, its processes (none for direct),
    and, for `netbox --`, the command that runs a client inside the sandbox."""

    def __init__(self, name, port, processes, sandbox=None, forks=False, auth=None):
        self.name, self.port, self.processes, self.sandbox = name, port, processes, sandbox
        # (user, token) a client names itself with (a bridge serving tenants).
        self.auth = auth
        # A proxy that forks a process per connection: its CPU is counted once it has
        # reaped them.
        self.forks = forks

    @property
    def process(self):
        """The first process: the one that must keep running (None for direct)."""
        return self.processes[0] if self.processes else None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def url(self):
        """The proxy as a client's proxy URL, with its credentials if it takes some."""
        user = f"{self.auth[0]}:{self.auth[1]}@" if self.auth else ""
        return f"http://{user}{self.address}"

    @property
    def authorization(self):
        """The Proxy-Authorization header value, if this proxy takes credentials."""
        if not self.auth:
            return None
        import base64
        return "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()

    def cpu(self):
        return sum(cpu_seconds(p.pid) for p in self.processes)

    def rss(self):
        return sum(rss_kib(p.pid) for p in self.processes)

    def run(self, command):
        """Runs a client command ({proxy} in it replaced by this proxy's address): its
        stdout, or None when it failed (said on stderr), and the CPU the proxy spent."""
        command = [c.replace("{proxy_url}", self.url).replace("{proxy}", self.address)
                   for c in command]
        if self.sandbox:
            return self.sandbox.run(command)
        before = self.cpu()
        done = subprocess.run(command, capture_output=True, text=True)
        if self.forks:
            time.sleep(0.5)
        spent = self.cpu() - before
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()[-1:] or ["no output"]
            print(f"{self.name}: {command[0]} failed: {said[0]}", file=sys.stderr)
            return None, spent
        return done.stdout, spent


class Sandbox:
    """`netbox -- CLIENT`: the client runs inside the sandbox with the proxy netbox gives
    it, allowed to reach the upstreams; its workspace is `ws`."""

    # The proxy every sandbox is given (http_proxy inside).
    INSIDE = 3128

    def __init__(self, netbox, work, ws, upstreams):
        self.argv = [os.path.abspath(netbox), "--quiet", "--no-tty", "--log",
                     os.path.join(work, "sandbox.jsonl"), "--workspace", ws]
        for port in upstreams:
            self.argv += ["--allow", f"127.0.0.1:{port}"]
        # In the workspace: the sandbox's /tmp is its own, and the checkout may be in the
        # host's.
        wrapper = os.path.join(ws, "child_cpu.py")
        shutil.copy(os.path.join(BENCHES, "child_cpu.py"), wrapper)
        self.argv += ["--", sys.executable, wrapper]
        self.ws = ws
        self.baseline = None

    def run(self, command):
        """Like Proxy.run for a client inside the sandbox; the CPU is netbox's own, less
        what `netbox -- true` costs."""
        if self.baseline is None:
            costs = [c for c in (self.cost(["true"])[1] for _ in range(5)) if c is not None]
            if not costs:
                return None, None
            self.baseline = min(costs)
        out, spent = self.cost(command)
        return out, None if spent is None else max(spent - self.baseline, 0.0)

    def cost(self, command):
        """(stdout or None, netbox's CPU for this run without the client's)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        process = subprocess.Popen(self.argv + command, cwd=self.ws, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        out, err = process.communicate()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        tree = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        client = re.findall(r"^child-cpu ([\d.]+)$", err, re.M)
        if process.returncode != 0 or not client:
            said = [line for line in err.splitlines() if not line.startswith("child-cpu")]
            print(f"netbox --: {command[0]} failed: {(said[-1:] or ['no output'])[0]}",
                  file=sys.stderr)
            return None, None
        return out, tree - float(client[-1])


def start_nginx(work, big_mib):
    port = free_port()
    with open(os.path.join(work, "big.bin"), "wb") as f:
        f.truncate(big_mib << 20)
    # 1 KiB: the forward path's requests and connect_latency's (small.txt).
    kib = os.urandom(1024)
    for name in ["1k.bin", "small.txt"]:
        with open(os.path.join(work, name), "wb") as f:
            f.write(kib)
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  client_body_temp_path {work}; proxy_temp_path {work}; fastcgi_temp_path {work};
  uwsgi_temp_path {work}; scgi_temp_path {work};
  server {{ listen 127.0.0.1:{port}; root {work}; }}
}}
""")
    process = subprocess.Popen(["nginx", "-c", conf, "-e", f"{work}/nginx-error.log"])
    if not wait_for_port(port):
        sys.exit("benches/proxies.py: nginx did not start")
    return port, process


def start_netbox(netbox, work, upstream, holder):
    port = free_port()
    process = subprocess.Popen(
        [netbox, "bridge", "--listen", f"127.0.0.1:{port}", "--allow", f"127.0.0.1:{upstream}",
         "--allow", f"127.0.0.1:{holder}",
         "--quiet", "--log", f"{work}/netbox.jsonl", "--max-connections", "30000"],
        stderr=subprocess.DEVNULL)
    return Proxy("netbox", port, [process]) if wait_for_port(port) else None


TENANTS = 1000


def start_netbox_tenants(netbox, work, upstream, holder):
    """netbox's bridge serving 1,000 tenants, each under its own allowlist and token; the
    bench's client is the first. The same bridge as `netbox` with identity checks on: the
    difference is what naming a tenant costs, and its idle RSS what 1,000 tenants hold."""
    import hashlib
    port = free_port()
    allow = os.path.join(work, "tenant.toml")
    with open(allow, "w") as f:
        f.write(f'allow = ["127.0.0.1:{upstream}", "127.0.0.1:{holder}"]\n')
    lines = []
    for i in range(TENANTS):
        digest = hashlib.sha256(f"token-{i}".encode()).hexdigest()
        # The first takes every place the bench needs; the rest an equal share.
        budget = "max_connections = 30000\n" if i == 0 else ""
        lines.append(f'[tenants.tenant-{i}]\nallowlist = ["tenant.toml"]\n'
                     f'secrets = ["sha256:{digest}"]\n{budget}')
    tenants = os.path.join(work, "tenants.toml")
    with open(tenants, "w") as f:
        f.write("\n".join(lines))
    process = subprocess.Popen(
        [netbox, "bridge", "--listen", f"127.0.0.1:{port}", "--tenants", tenants,
         "--quiet", "--log", f"{work}/netbox-tenants.jsonl", "--max-connections", "30000"],
        stderr=subprocess.DEVNULL)
    proxy = Proxy("netbox tenants", port, [process], auth=("tenant-0", "token-0"))
    return proxy if wait_for_port(port, 30) else None


def start_socat_chain(work, bridge):
    """Two socat relays joined by a Unix socket, in front of `bridge` (netbox's): the way
    the Node-based sandbox runtime carries its sandbox's connections to its proxy (a relay
    inside listening on TCP, one outside on a Unix socket). The bridge's CPU counts too,
    as it works for this row while it runs."""
    if not shutil.which("socat") or not bridge:
        return None
    port, unix = free_port(), os.path.join(work, "relay.sock")
    outside = subprocess.Popen(["socat", f"UNIX-LISTEN:{unix},fork",
                                f"TCP:127.0.0.1:{bridge.port},nodelay"],
                               stderr=subprocess.DEVNULL)
    inside = subprocess.Popen(["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr,"
                               "nodelay,backlog=4096", f"UNIX-CONNECT:{unix}"],
                              stderr=subprocess.DEVNULL)
    chain = Proxy("socat chain", port, [inside, outside, bridge.process], forks=True)
    chain.started = [inside, outside]
    return chain if wait_for_port(port) else None


def start_tinyproxy(work, upstream, holder):
    if not shutil.which("tinyproxy"):
        return None
    port = free_port()
    conf = os.path.join(work, "tinyproxy.conf")
    with open(conf, "w") as f:
        f.write(f"""User nobody
Group nogroup
Port {port}
Listen 127.0.0.1
Timeout 600
MaxClients 30000
LogLevel Critical
ConnectPort {upstream}
ConnectPort {holder}
Allow 127.0.0.1
""")
    process = subprocess.Popen(["tinyproxy", "-d", "-c", conf],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Proxy("tinyproxy", port, [process]) if wait_for_port(port) else None


def start_squid(work, upstream):
    if not shutil.which("squid"):
        return None
    port = free_port()
    os.chmod(work, 0o777)
    conf = os.path.join(work, "squid.conf")
    with open(conf, "w") as f:
        f.write(f"""http_port 127.0.0.1:{port}
http_access allow localhost
http_access deny all
cache deny all
access_log none
cache_store_log none
cache_log {work}/squid-cache.log
pid_filename {work}/squid.pid
coredump_dir {work}
shutdown_lifetime 0 seconds
max_filedescriptors 65536
""")
    process = subprocess.Popen(["squid", "-N", "-f", conf],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Proxy("squid", port, [process]) if wait_for_port(port, 20) else None


def curl_speed(p, url, tunnel=True):
    """Bytes per second of one download through `p` (direct when it has no process): a
    CONNECT tunnel, or the forward path; and the CPU it spent."""
    command = ["curl", "-s", "-S", "-o", "/dev/null", "-w", "%{speed_download}"]
    if p.processes or p.sandbox:
        command += (["-p"] if tunnel else []) + ["-x", "{proxy_url}"]
    out, spent = p.run(command + [url])
    return (float(out), spent) if out else (None, None)


def tunnel(proxies, upstream, big_mib, rounds, through_tunnel=True):
    """1 big download each, rounds alternating: MB/s medians, and CPU per GiB."""
    url = f"http://127.0.0.1:{upstream}/big.bin"
    curl_speed(proxies[0], url)
    speeds = {p.name: [] for p in proxies}
    cpu = {p.name: 0.0 for p in proxies}
    for _ in range(rounds):
        for p in proxies:
            speed, spent = curl_speed(p, url, through_tunnel)
            if speed is None:
                continue
            speeds[p.name].append(speed)
            cpu[p.name] = None if cpu[p.name] is None or spent is None else cpu[p.name] + spent
    gib = rounds * big_mib / 1024
    # Median, CPU per GiB, and the range of the rounds (lowest, highest), in MB/s.
    return {name: (statistics.median(s) / 1e6, None if cpu[name] is None else cpu[name] / gib,
                   min(s) / 1e6, max(s) / 1e6)
            for name, s in speeds.items() if len(s) == rounds}


LATENCY = re.compile(r"connect\+GET (direct|proxied): median ([\d.]+) us\s+mean ([\d.]+) us"
                     r"\s+p90 ([\d.]+) us\s+p99 ([\d.]+) us")


def new_connections(proxies, latency_bin, upstream, rounds):
    """connect + CONNECT + 1 KiB GET, each proxy against direct in its own alternating run
    (`netbox --` has no direct inside: it takes the direct figures of the run before):
    median, mean, p90 and p99 in microseconds as {"direct": …, "proxied": …}, and CPU per
    connection."""
    results, last_direct = {}, None
    for p in proxies:
        if not p.processes and not p.sandbox:
            continue
        client = latency_bin
        if p.sandbox:
            # From the workspace: the sandbox's /tmp is its own, and the build may be in
            # the host's.
            client = os.path.join(p.sandbox.ws, "connect_latency")
            shutil.copy(latency_bin, client)
        command = [client, f"127.0.0.1:{upstream}", "{proxy}", str(rounds)]
        command += ["--proxied-only"] if p.sandbox else []
        command += ["--proxy-auth", p.authorization] if p.auth else []
        out, spent = p.run(command)
        if out is None:
            continue
        figures = {kind: tuple(float(x) for x in rest) for kind, *rest in LATENCY.findall(out)}
        last_direct = figures.setdefault("direct", last_direct)
        if last_direct is None or "proxied" not in figures:
            continue
        # The bench warms up with 50 of each before it counts.
        figures["cpu"] = None if spent is None else spent / (rounds + 50) * 1e6
        results[p.name] = figures
    return results


def forward(proxies, upstream, seconds, work, ws):
    """wrk -t2 -c32 through the forward path (absolute-form requests): req/s, p50 and p99
    in ms, CPU per request in microseconds, and responses that were not 2xx/3xx."""
    if not shutil.which("wrk"):
        return {}
    # In the workspace, where a sandboxed wrk can read it too.
    script = os.path.join(ws, "proxy.lua")
    with open(script, "w") as f:
        f.write(f'wrk.path = "http://127.0.0.1:{upstream}/1k.bin"\n'
                f'wrk.headers["Host"] = "127.0.0.1:{upstream}"\n')
    results = {}
    for p in proxies:
        command = ["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency"]
        if p.auth:
            with_auth = os.path.join(ws, "proxy-auth.lua")
            with open(script) as f, open(with_auth, "w") as out:
                out.write(f.read() + f'wrk.headers["Proxy-Authorization"] = "{p.authorization}"\n')
            command += ["-s", with_auth, "http://{proxy}/"]
        elif p.processes or p.sandbox:
            command += ["-s", script, "http://{proxy}/"]
        else:
            command += [f"http://127.0.0.1:{upstream}/1k.bin"]
        out, spent = p.run(command)
        if out is None:
            continue
        rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        total = int(re.search(r"(\d+) requests in", out).group(1))
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

        def percentile(label):
            value, unit = re.search(rf"\s{label}\s+([\d.]+)(us|ms|s)", out).groups()
            return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
        results[p.name] = (rate, percentile("50%"), percentile("99%"),
                           None if spent is None else spent / max(total, 1) * 1e6,
                           int(errors.group(1)) if errors else 0)
    return results


HOLDER = """
import selectors, socket
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(4096)
print(listener.getsockname()[1], flush=True)
# Holds what it accepts until the other side closes, so that one proxy's tunnels are gone
# before the next proxy's come.
watched = selectors.DefaultSelector()
watched.register(listener, selectors.EVENT_READ)
while True:
    for key, _ in watched.select():
        if key.fileobj is listener:
            watched.register(listener.accept()[0], selectors.EVENT_READ)
            continue
        try:
            gone = not key.fileobj.recv(4096)
        except OSError:
            gone = True
        if gone:
            watched.unregister(key.fileobj)
            key.fileobj.close()
"""


def start_holder():
    """A server that accepts connections and holds them, for the idle tunnels: its process
    and port."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE,
                              text=True)
    return holder, int(holder.stdout.readline())


def idle_tunnels(proxies, count, port):
    """`count` CONNECT tunnels opened through each proxy to a server that accepts and holds
    them (at `port`), held, then closed: tunnels that failed, seconds to open and to close
    them all, and the proxy's RSS growth per tunnel in KiB."""
    results = {}
    for p in proxies:
        if not p.processes or p.sandbox or p.name == "socat chain":
            continue
        auth = f"Proxy-Authorization: {p.authorization}\r\n" if p.auth else ""
        request = f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n"
        before = p.rss()
        started = time.perf_counter()
        opened, failed = [], 0
        for _ in range(count):
            try:
                s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
                s.sendall(request.encode())
                opened.append(s)
            except OSError:
                failed += 1
        held = []
        for s in opened:
            try:
                answer = s.recv(256)
                if re.match(rb"HTTP/1\.[01] 200", answer):
                    held.append(s)
                    continue
            except OSError:
                pass
            failed += 1
            s.close()
        opening = time.perf_counter() - started
        time.sleep(1)
        grown = p.rss() - before
        started = time.perf_counter()
        for s in held:
            s.close()
        closing = time.perf_counter() - started
        results[p.name] = (failed, opening, closing, grown / max(len(held), 1))
        # Let the proxy see the closes before the next one is measured.
        time.sleep(2)
    return results


def startup(netbox, runs, work):
    """Start-up, alternating run by run (posix_spawn to reap, wall time): `true`,
    `unshare -Urn true`, bubblewrap where installed, and `netbox -- true`; medians in ms."""
    ws = os.path.join(work, "ws")
    os.makedirs(ws, exist_ok=True)
    commands = {"true": ["true"], "unshare -Urn": ["unshare", "-Urn", "true"]}
    if shutil.which("bwrap"):
        commands["bubblewrap"] = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind",
                                  "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs",
                                  "/tmp", "true"]
    commands["netbox --"] = [os.path.abspath(netbox), "--quiet", "--log",
                             os.path.join(work, "startup.jsonl"), "--", "true"]
    argv = {name: [shutil.which(c[0]) or c[0]] + c[1:] for name, c in commands.items()}
    times = {name: [] for name in argv}
    # netbox's workspace is its working directory: an empty one, as bubblewrap's is.
    here = os.getcwd()
    os.chdir(ws)
    try:
        return spawn_alternating(argv, times, runs)
    finally:
        os.chdir(here)


def spawn_alternating(argv, times, runs):
    for _ in range(runs + 3):
        for name, command in argv.items():
            started = time.perf_counter()
            pid = os.posix_spawn(command[0], command, os.environ)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                print(f"start-up: {name} failed", file=sys.stderr)
                return {}
            times[name].append(time.perf_counter() - started)
    # The first rounds warm the page cache.
    return {name: statistics.median(t[3:]) * 1000 for name, t in times.items()}


def ratio(value, base):
    return value / base if base else float("nan")


# Why a column has no figure in a row where the others have one.
NOT_RUN = {"netbox --": "the bridge's", "socat chain": "not run: a process per connection"}


def cpu_cell(name, seconds, spec):
    if name == "direct":
        return "—"
    return "not measured" if seconds is None else format(seconds, spec)


def scenarios(names, r):
    """The figures as rows: (label, {name: cell text}) for the table, and the ratios the
    chart draws: (label, better, target, {name: ratio})."""
    rows, chart = [], []
    def mbps(n, t):
        low, high = t[n][2:4]
        spread = f"; {low:,.0f}–{high:,.0f}" if high > low else ""
        if n == "direct":
            return f"{t[n][0]:,.0f}" + (f" ({spread[2:]})" if spread else "")
        return f"{t[n][0]:,.0f} ({ratio(t[n][0], t['direct'][0]):.2f}x{spread})"
    for key, label in [("tunnel", "1 big download through a CONNECT tunnel"),
                       ("forward_big", "1 big download through the forward path")]:
        t = r.get(key)
        if not t:
            continue
        rows.append((f"{label}, MB/s, median (x direct; range of the rounds)",
                     {n: mbps(n, t) for n in names if n in t}, key))
        rows.append((f"CPU per GiB, {label.split(' through ')[1]}, s",
                     {n: cpu_cell(n, t[n][1], ".2f") for n in names if n in t}, key))
        chart.append((f"{label.split(' through ')[1]}: MB/s", "higher",
                      0.9 if key == "tunnel" else None,
                      {n: ratio(t[n][0], t["direct"][0]) for n in names
                       if n in t and n != "direct"}))
    c = r.get("connect")
    if c:
        first = next(iter(c.values()))["direct"]
        def cell(n, show):
            if n == "direct":
                return show(first, None)
            return show(c[n]["proxied"], c[n]["direct"]) if n in c else "failed"
        # Each proxy's run has its own direct figures, but the ratios are all to the first
        # run's: a proxy that forks per connection (socat) slows the direct requests of
        # its own run, which would flatter it.
        rows.append(("new connection: CONNECT + 1 KiB GET, median us (x direct)",
                     {n: cell(n, lambda v, d: f"{v[0]:.0f}" if d is None else
                              f"{v[0]:.0f} ({v[0] / first[0]:.2f}x)") for n in names},
                     "connect"))
        rows.append(("new connection, mean / p90 / p99 us",
                     {n: cell(n, lambda v, d: f"{v[1]:.0f} / {v[2]:.0f} / {v[3]:.0f}")
                      for n in names}, "connect"))
        rows.append(("CPU per new connection, us",
                     {n: cpu_cell(n, c[n]["cpu"], ".0f") if n in c else cpu_cell(n, None, "")
                      for n in names}, "connect"))
        chart.append(("new connection: time", "lower", 1.8,
                      {n: v["proxied"][0] / first[0] for n, v in c.items()}))
    f = r.get("forward")
    if f:
        fd = f["direct"]
        rows.append(("1 KiB requests, forward path (wrk -t2 -c32), req/s (x direct)",
                     {n: f"{f[n][0]:,.0f}" if n == "direct" else
                      f"{f[n][0]:,.0f} ({ratio(f[n][0], fd[0]):.2f}x)" for n in names if n in f}, "forward"))
        rows.append(("forward path p50 / p99, ms",
                     {n: f"{f[n][1]:.2f} / {f[n][2]:.2f}" for n in names if n in f}, "forward"))
        rows.append(("CPU per forwarded request, us",
                     {n: cpu_cell(n, f[n][3], ".0f") for n in names if n in f}, "forward"))
        failed = {n: f[n][4] for n in names if n in f and f[n][4]}
        if failed:
            rows.append(("forward path: responses not 2xx/3xx",
                         {n: str(failed.get(n, 0)) for n in names}, "forward"))
        chart.append(("forward path: req/s", "higher", 0.5,
                      {n: ratio(f[n][0], fd[0]) for n in names if n in f and n != "direct"}))
        chart.append(("forward path: p99", "lower", 2.0,
                      {n: ratio(f[n][2], fd[2]) for n in names if n in f and n != "direct"}))
    i = r.get("idle_tunnels")
    if i:
        count = r["idle_tunnel_count"]
        i = dict(i, **{n: None for n in names if n not in i and n != "direct"})
        rows.append((f"{count:,} idle tunnels: failed, open s, close s",
                     {n: f"{v[0]}, {v[1]:.1f}, {v[2]:.1f}" if v else NOT_RUN.get(n, "—")
                      for n, v in i.items()}, "idle_tunnels"))
        rows.append(("RSS per idle tunnel, KiB",
                     {n: f"{v[3]:.1f}" if v else "—" for n, v in i.items()}, "idle_tunnels"))
    rows.append(("idle RSS, MiB", {n: f"{v / 1024:.1f}" for n, v in r["idle"].items()},
                 "idle"))
    if "netbox tenants" in r["idle"] and "netbox" in r["idle"]:
        per = (r["idle"]["netbox tenants"] - r["idle"]["netbox"]) / TENANTS
        rows.append((f"RSS per tenant ({TENANTS:,} loaded), KiB",
                     {"netbox tenants": f"{per:.1f}"}, "idle"))
    s = r.get("startup")
    if s:
        base = s.get("bubblewrap")
        rows.append(("start-up, ms: " + ", ".join(f"{k} {v:.2f}" for k, v in s.items()),
                     {"netbox": f"{s['netbox --']:.2f}" + (
                         f" ({s['netbox --'] / base:.2f}x bubblewrap)" if base else "")}, "startup"))
        if base:
            chart.append(("start-up: netbox -- true vs bubblewrap", "lower", 1.1,
                          {"netbox": s["netbox --"] / base}))
    return rows, chart


def targets(r):
    """Each target of the proxy benchmark, its figure from this run, and PASS or MISS."""
    out = []
    def check(what, figure, ok):
        out.append((what, figure, "PASS" if ok else "MISS"))
    f = r.get("forward", {})
    if "netbox" in f:
        x = ratio(f["netbox"][0], f["direct"][0])
        check("forward path ≥ 0.5x direct req/s", f"{x:.2f}x", x >= 0.5)
        x = ratio(f["netbox"][2], f["direct"][2])
        check("forward path p99 ≤ 2x direct", f"{x:.2f}x", x <= 2)
    c = r.get("connect", {})
    if "netbox" in c:
        x = c["netbox"]["proxied"][0] / c["netbox"]["direct"][0]
        check("new connection ≤ 1.8x direct", f"{x:.2f}x", x <= 1.8)
        if "tinyproxy" in c:
            check("CPU per new connection below tinyproxy's",
                  f"{c['netbox']['cpu']:.0f} vs {c['tinyproxy']['cpu']:.0f} us",
                  c["netbox"]["cpu"] < c["tinyproxy"]["cpu"])
    t = r.get("tunnel", {})
    if "netbox" in t:
        x = ratio(t["netbox"][0], t["direct"][0])
        check("tunnel ≥ 0.9x direct", f"{x:.2f}x", x >= 0.9)
        check("tunnel ≤ 0.3 CPU-s per GiB", f"{t['netbox'][1]:.2f} s", t["netbox"][1] <= 0.3)
    i = r.get("idle_tunnels", {})
    if "netbox" in i:
        failed, _, _, per = i["netbox"]
        check(f"{r['idle_tunnel_count']:,} tunnels, no error", f"{failed} failed", failed == 0)
        check("≤ 32 KiB bridge RSS per tunnel", f"{per:.1f} KiB", per <= 32)
    if "netbox" in r["idle"]:
        mib = r["idle"]["netbox"] / 1024
        check("idle RSS ≤ 8 MiB", f"{mib:.1f} MiB", mib <= 8)
    s = r.get("startup", {})
    if "bubblewrap" in s:
        x = s["netbox --"] / s["bubblewrap"]
        check("start-up ≤ 1.1x bubblewrap", f"{x:.2f}x", x <= 1.1)
    return out


def markdown(names, rows, loads):
    """The table: a row per figure, a column per proxy, and the machine's load average as
    the row's scenario started (a noisy row shows)."""
    header = ["scenario"] + names + ["load"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for label, cells, key in rows:
        load = f"{loads[key]:.2f}" if key in loads else ""
        lines.append("| " + " | ".join([label] + [cells.get(n, "") for n in names] +
                                       [load]) + " |")
    return "\n".join(lines)


def version(command):
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0].strip() if text else None


def machine():
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}"


def start_command(name, command, work):
    """A proxy of the user's: `command` run by the shell with {port} replaced by a free
    loopback port it must listen on; it must allow CONNECT and forwarding to 127.0.0.1.
    Its own process is the one measured: it must stay in the foreground."""
    port = free_port()
    process = subprocess.Popen(["sh", "-c", "exec " + command.replace("{port}", str(port))],
                               cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Proxy(name, port, [process]) if wait_for_port(port, 20) else None


USAGE = ("usage: benches/proxies.sh [--quick] [--proxy NAME='COMMAND {port}' ...]\n"
         "  --proxy: benchmark another proxy the same way; COMMAND, run by sh in the\n"
         "  foreground, must listen on 127.0.0.1:{port} and allow CONNECT and forwarding\n"
         "  to 127.0.0.1")


def arguments(args):
    """(quick, [(name, command)]) from the command line; exits with the usage on anything
    else."""
    quick, extra = False, []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--quick":
            quick = True
        elif arg == "--proxy" and rest and "=" in rest[0]:
            name, command = rest.pop(0).split("=", 1)
            if not name or "{port}" not in command:
                sys.exit(f"benches/proxies.sh: --proxy NAME=COMMAND needs a name and {{port}} in the command\n{USAGE}")
            extra.append((name, command))
        else:
            sys.exit(f"benches/proxies.sh: unknown argument {arg!r}\n{USAGE}")
    return quick, extra


def write_results(text, figures, chart_svg):
    """Puts the run's section into benches/RESULTS.md between the markers, and the figures
    and chart beside it."""
    path = os.path.join(BENCHES, "RESULTS.md")
    with open(path) as f:
        old = f.read()
    if MARK_BEGIN in old and MARK_END in old:
        head, rest = old.split(MARK_BEGIN, 1)
        tail = rest.split(MARK_END, 1)[1]
    else:
        head, tail = old.rstrip() + "\n\n", "\n"
    with open(path, "w") as f:
        f.write(head + MARK_BEGIN + "\n" + text + "\n" + MARK_END + tail)
    with open(os.path.join(BENCHES, "proxies.json"), "w") as f:
        json.dump(figures, f, indent=1)
        f.write("\n")
    shutil.copy(chart_svg, os.path.join(BENCHES, "proxies.svg"))


def main():
    netbox, latency_bin, chart_bin = sys.argv[1], sys.argv[2], sys.argv[3]
    quick, extra = arguments(sys.argv[4:])
    big_mib, rounds, connections, seconds, tunnels, runs = \
        (128, 1, 100, 2, 1000, 20) if quick else (1024, 3, 500, 10, 10000, 200)
    # Each idle tunnel is a socket here and in the holder, and two in each proxy, which
    # inherits this limit: a proxy at its limit refuses tunnels for want of descriptors.
    wanted = tunnels
    files = more_files(2 * tunnels + 1000)
    tunnels = min(tunnels, max(0, (files - 200) // 2))
    if tunnels < wanted:
        print(f"benches/proxies.py: the open-file limit here ({files}, which this user "
              f"cannot raise) holds {tunnels:,} idle tunnels in a proxy (two descriptors "
              f"each), not {wanted:,}", file=sys.stderr)
    work = tempfile.mkdtemp(prefix="netbox-proxies.")
    started = []
    try:
        upstream, nginx = start_nginx(work, big_mib)
        started.append(nginx)
        holder, holder_port = start_holder()
        started.append(holder)
        ws = os.path.join(work, "client-ws")
        os.makedirs(ws)
        proxies = [Proxy("direct", upstream, [])]
        skipped = []
        bridge = start_netbox(netbox, work, upstream, holder_port)
        sandbox = Sandbox(netbox, work, ws, [upstream])
        for name, start in [("netbox", lambda: bridge),
                            ("netbox --", lambda: Proxy("netbox --", Sandbox.INSIDE, [],
                                                        sandbox)),
                            ("netbox tenants", lambda: start_netbox_tenants(
                                netbox, work, upstream, holder_port)),
                            ("socat chain", lambda: start_socat_chain(work, bridge)),
                            ("tinyproxy", lambda: start_tinyproxy(work, upstream, holder_port)),
                            ("squid", lambda: start_squid(work, upstream))] + [
                                (name, lambda n=name, c=command: start_command(n, c, work))
                                for name, command in extra]:
            proxy = start()
            if proxy:
                proxies.append(proxy)
                started += getattr(proxy, "started", proxy.processes)
            else:
                skipped.append(name)
        time.sleep(0.5)
        r = {"idle": {p.name: p.rss() for p in proxies if p.processes}, "loads": {},
             "idle_tunnel_count": tunnels}
        r["loads"]["idle"] = os.getloadavg()[0]
        scenario_runs = [
            ("startup", lambda: startup(netbox, runs, work)),
            ("tunnel", lambda: tunnel(proxies, upstream, big_mib, rounds)),
            ("forward_big", lambda: tunnel(proxies, upstream, big_mib, rounds, False)),
            ("connect", lambda: new_connections(proxies, latency_bin, upstream, connections)),
            ("forward", lambda: forward(proxies, upstream, seconds, work, ws)),
            ("idle_tunnels", lambda: idle_tunnels(proxies, tunnels, holder_port)
             if tunnels else {}),
        ]
        for key, run in scenario_runs:
            r["loads"][key] = os.getloadavg()[0]
            r[key] = run()
        names = [p.name for p in proxies]
        rows, chart = scenarios(names, r)
        checked = targets(r)
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        netbox_version = version([netbox, "--version"]) or "netbox"
        peers = {name: version(command) for name, command in [
            ("nginx", ["nginx", "-v"]), ("tinyproxy", ["tinyproxy", "-v"]),
            ("squid", ["squid", "-v"]), ("bubblewrap", ["bwrap", "--version"]),
            ("curl", ["curl", "--version"]), ("wrk", ["wrk", "-v"])]}
        kind = "quick: one short round each" if quick else \
            f"{rounds} rounds of {big_mib} MiB, {connections} new connections, wrk {seconds} s"
        # Wrapped: the docs check holds every line of the docs to 400 characters.
        about = textwrap.fill(f"{machine()}; {kind}; {netbox_version}; "
                              + ", ".join(f"{v}" for v in peers.values() if v) + ".",
                              width=92, break_on_hyphens=False)
        lines = [f"### Proxy overhead, {when}", "", about, "",
                 markdown(names, rows, r["loads"]), "",
                 "| target | this run | |", "| --- | --- | --- |"]
        lines += [f"| {what} | {figure} | {verdict} |" for what, figure, verdict in checked]
        if skipped:
            lines += ["", "not installed or did not start: " + ", ".join(skipped)]
        if not r["forward"]:
            lines += ["", "forward path skipped: wrk is not installed"]
        text = "\n".join(lines)
        print(text)
        figures = {"title": "netbox's bridge beside other proxies, as a multiple of direct",
                   "subtitle": f"{when}; {machine()}; {kind}",
                   "proxies": [n for n in names if n != "direct"],
                   "scenarios": [{"name": label, "better": better, "target": target,
                                  "ratios": ratios} for label, better, target, ratios in chart],
                   "raw": {k: v for k, v in r.items()}}
        figures_path = os.path.join(work, "proxies.json")
        with open(figures_path, "w") as f:
            json.dump(figures, f, indent=1)
        svg = os.path.join(work, "proxies.svg")
        subprocess.run([chart_bin, figures_path, svg], check=True)
        if os.path.getsize(svg) < 1000:
            sys.exit("benches/proxies.py: the chart came out empty")
        if not quick:
            write_results(text, figures, svg)
            print("\nwritten: benches/RESULTS.md, benches/proxies.json, benches/proxies.svg")
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
