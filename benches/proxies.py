"""Proxy overhead, side by side in one run: direct, netbox's bridge, and the proxies people
use where they are installed (tinyproxy, squid), against one local nginx on loopback.

Run by benches/proxies.sh (which builds the release netbox and the connect_latency bench)
as: python3 benches/proxies.py NETBOX CONNECT_LATENCY [--quick] [--proxy NAME=COMMAND ...]
(COMMAND with {port}: another proxy, benchmarked the same way).

Each scenario runs every proxy in the same run, and direct beside it, so that only ratios
measured together are compared (these machines are shared and noisy). CPU is the proxy
process's own (utime + stime from /proc/PID/stat, all its threads), over the scenario.
"""

import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


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
    """A proxy under test: its name, where it listens, its process (None for direct)."""

    def __init__(self, name, port, process):
        self.name, self.port, self.process = name, port, process

    @property
    def pid(self):
        return self.process.pid if self.process else None

    def cpu(self):
        return cpu_seconds(self.pid) if self.process else 0.0


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


def start_netbox(netbox, work, upstream):
    port = free_port()
    process = subprocess.Popen(
        [netbox, "bridge", "--listen", f"127.0.0.1:{port}", "--allow", f"127.0.0.1:{upstream}",
         "--quiet", "--log", f"{work}/netbox.jsonl"],
        stderr=subprocess.DEVNULL)
    return Proxy("netbox", port, process) if wait_for_port(port) else None


def start_tinyproxy(work, upstream):
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
MaxClients 4096
LogLevel Critical
ConnectPort {upstream}
Allow 127.0.0.1
""")
    process = subprocess.Popen(["tinyproxy", "-d", "-c", conf],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Proxy("tinyproxy", port, process) if wait_for_port(port) else None


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
""")
    process = subprocess.Popen(["squid", "-N", "-f", conf],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Proxy("squid", port, process) if wait_for_port(port, 20) else None


def curl_speed(url, proxy):
    """Bytes per second of one download, through a CONNECT tunnel when `proxy` is given."""
    command = ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}"]
    if proxy:
        command += ["-p", "-x", f"http://127.0.0.1:{proxy}"]
    out = subprocess.run(command + [url], capture_output=True, text=True, check=True)
    return float(out.stdout)


def tunnel(proxies, upstream, big_mib, rounds):
    """1 big download each, rounds alternating: MB/s medians, and CPU per GiB."""
    url = f"http://127.0.0.1:{upstream}/big.bin"
    curl_speed(url, None)
    speeds = {p.name: [] for p in proxies}
    cpu = {p.name: 0.0 for p in proxies}
    for _ in range(rounds):
        for p in proxies:
            before = p.cpu()
            speeds[p.name].append(curl_speed(url, p.port if p.process else None))
            cpu[p.name] += p.cpu() - before
    gib = rounds * big_mib / 1024
    return {name: (statistics.median(s) / 1e6, cpu[name] / gib) for name, s in speeds.items()}


def new_connections(proxies, latency_bin, upstream, rounds):
    """connect + CONNECT + 1 KiB GET, each proxy against direct in its own alternating run:
    medians and p90 in microseconds, the direct ones of each run, and CPU per connection."""
    results = {}
    for p in proxies:
        if not p.process:
            continue
        before = p.cpu()
        run = subprocess.run([latency_bin, f"127.0.0.1:{upstream}", f"127.0.0.1:{p.port}",
                              str(rounds)], capture_output=True, text=True)
        spent = p.cpu() - before
        if run.returncode != 0:
            failure = run.stderr.strip().splitlines()[-1:] or ["no output"]
            print(f"new connections through {p.name} failed: {failure[0]}", file=sys.stderr)
            continue
        out = run.stdout
        numbers = re.findall(r"median\s+([\d.]+) us\s+p90\s+([\d.]+) us", out)
        (dm, d90), (pm, p90) = [(float(a), float(b)) for a, b in numbers]
        # The bench warms up with 50 of each before it counts.
        results[p.name] = (dm, d90, pm, p90, spent / (rounds + 50) * 1e6)
    return results


def forward(proxies, upstream, seconds, work):
    """wrk -t2 -c32 through the forward path (absolute-form requests): req/s, p50 and p99
    in ms, and CPU per request in microseconds."""
    if not shutil.which("wrk"):
        return {}
    script = os.path.join(work, "proxy.lua")
    with open(script, "w") as f:
        f.write(f'wrk.path = "http://127.0.0.1:{upstream}/1k.bin"\n'
                f'wrk.headers["Host"] = "127.0.0.1:{upstream}"\n')
    results = {}
    for p in proxies:
        command = ["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency"]
        if p.process:
            command += ["-s", script, f"http://127.0.0.1:{p.port}/"]
        else:
            command += [f"http://127.0.0.1:{upstream}/1k.bin"]
        before = p.cpu()
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        spent = p.cpu() - before
        rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        total = int(re.search(r"(\d+) requests in", out).group(1))
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

        def percentile(label):
            value, unit = re.search(rf"\s{label}\s+([\d.]+)(us|ms|s)", out).groups()
            return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
        results[p.name] = (rate, percentile("50%"), percentile("99%"),
                           spent / max(total, 1) * 1e6, int(errors.group(1)) if errors else 0)
    return results


def table(proxies, tunnel_r, connect_r, forward_r, idle):
    names = [p.name for p in proxies]
    rows = []
    d = tunnel_r["direct"][0]
    rows.append(["1 big download through a CONNECT tunnel, MB/s (x direct)"] +
                [f"{tunnel_r[n][0]:,.0f}" if n == "direct" else
                 f"{tunnel_r[n][0]:,.0f} ({tunnel_r[n][0] / d:.2f}x)" for n in names])
    rows.append(["CPU per GiB tunnelled, s"] +
                ["—" if n == "direct" else f"{tunnel_r[n][1]:.2f}" for n in names])
    if connect_r:
        first = next(iter(connect_r.values()))
        def cell(n, show):
            if n == "direct":
                return show(first, True)
            return show(connect_r[n], False) if n in connect_r else "failed"
        rows.append(["new connection: CONNECT + 1 KiB GET, median us (x direct of its run)"] +
                    [cell(n, lambda r, d: f"{r[0]:.0f}" if d else
                          f"{r[2]:.0f} ({r[2] / r[0]:.2f}x)") for n in names])
        rows.append(["new connection, p90 us"] +
                    [cell(n, lambda r, d: f"{r[1]:.0f}" if d else f"{r[3]:.0f}")
                     for n in names])
        rows.append(["CPU per new connection, us"] +
                    [cell(n, lambda r, d: "—" if d else f"{r[4]:.0f}") for n in names])
    if forward_r:
        fd = forward_r["direct"][0]
        rows.append(["1 KiB requests, forward path (wrk -t2 -c32), req/s (x direct)"] +
                    [f"{forward_r[n][0]:,.0f}" if n == "direct" else
                     f"{forward_r[n][0]:,.0f} ({forward_r[n][0] / fd:.2f}x)" for n in names])
        rows.append(["forward path p50 / p99, ms"] +
                    [f"{forward_r[n][1]:.2f} / {forward_r[n][2]:.2f}" for n in names])
        rows.append(["CPU per forwarded request, us"] +
                    ["—" if n == "direct" else f"{forward_r[n][3]:.0f}" for n in names])
        failed = {n: forward_r[n][4] for n in names if forward_r[n][4]}
        if failed:
            rows.append(["forward path: responses not 2xx/3xx"] +
                        [str(failed.get(n, 0)) for n in names])
    rows.append(["idle RSS, MiB"] + ["—" if n == "direct" else f"{idle[n] / 1024:.1f}"
                                      for n in names])
    header = ["scenario"] + names
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def start_command(name, command, work):
    """A proxy of the user's: `command` run by the shell with {port} replaced by a free
    loopback port it must listen on; it must allow CONNECT and forwarding to 127.0.0.1.
    Its own process is the one measured: it must stay in the foreground."""
    port = free_port()
    process = subprocess.Popen(["sh", "-c", "exec " + command.replace("{port}", str(port))],
                               cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Proxy(name, port, process) if wait_for_port(port, 20) else None


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


def main():
    netbox, latency_bin = sys.argv[1], sys.argv[2]
    quick, extra = arguments(sys.argv[3:])
    big_mib, rounds, connections, seconds = (128, 1, 100, 2) if quick else (1024, 3, 500, 10)
    work = tempfile.mkdtemp(prefix="netbox-proxies.")
    started = []
    try:
        upstream, nginx = start_nginx(work, big_mib)
        started.append(nginx)
        proxies = [Proxy("direct", upstream, None)]
        skipped = []
        for name, start in [("netbox", lambda: start_netbox(netbox, work, upstream)),
                            ("tinyproxy", lambda: start_tinyproxy(work, upstream)),
                            ("squid", lambda: start_squid(work, upstream))] + [
                                (name, lambda n=name, c=command: start_command(n, c, work))
                                for name, command in extra]:
            proxy = start()
            if proxy:
                proxies.append(proxy)
                started.append(proxy.process)
            else:
                skipped.append(name)
        time.sleep(0.5)
        idle = {p.name: rss_kib(p.pid) for p in proxies if p.process}
        load = os.getloadavg()[0]
        tunnel_r = tunnel(proxies, upstream, big_mib, rounds)
        connect_r = new_connections(proxies, latency_bin, upstream, connections)
        forward_r = forward(proxies, upstream, seconds, work)
        print(table(proxies, tunnel_r, connect_r, forward_r, idle))
        print()
        print(f"{'quick: one short round each' if quick else f'{rounds} rounds of {big_mib} MiB'}"
              f"; load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
              f"{os.cpu_count()} CPUs")
        if skipped:
            print("not installed or did not start: " + ", ".join(skipped))
        if not forward_r:
            print("forward path skipped: wrk is not installed")
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
