#!/usr/bin/env bash
# Cost of the seccomp user-notification filter every sandboxed command runs under (the
# denied-write log and the direct-attempt log), side by side in one run on these noisy
# machines:
# "Without the filter" is the same sandbox with the filter left out, which only a
# test-hooks build can do (NETBOX_TEST_BREAK=no-write-watch; built in its own target dir).
#   1. per notified syscall: open+close for writing (notified) vs for reading (not
#      notified), in one process, with the filter minus without. Budget: under 20 us.
#   2. 10,000 write(2) calls to a file in the workspace (budget: 5%).
#   3. 10,000 small files created in the workspace (each create is notified), reported
#      as it is.
#   4. a build: compileall of a copy of part of the standard library in the workspace
#      (every .py gets a .pyc; about three notified calls each) (budget: 5%). The worst
#      case we know: little work per notified call.
#   5. a C build: make -j2 of 48 generated .c files with gcc (each compile writes its
#      temporary files and its object; make's own writes) (budget: 5%), if gcc and make
#      are here.
#   6. per notified network call: sendmsg with no address (every sendmsg is notified;
#      the filter cannot see inside its header) minus send (never notified); sendto with
#      an address to a UDP socket in the sandbox (notified, its socket copied and a
#      sock_diag dump asked) minus send on a connected one; a TCP connection to a
#      listener in the sandbox (connect notified and judged the same way), per
#      connection, with the filter minus without. Reported as they are.
# Each workload times itself (start-up is benches/startup.sh's business). Needs python3.
# Nothing leaves the machine (no network at all).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin netbox --features netbox/test-hooks --target-dir target/bench-hooks
netbox="$PWD/target/bench-hooks/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
work=$(mktemp -d "${BENCH_DIR:-/tmp}/netbox-writewatch.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/ws"
cd "$work/ws"
runs=${RUNS:-10}
sandboxed="$netbox --quiet --log $work/events.jsonl --"
plain="env NETBOX_TEST_BREAK=no-write-watch $netbox --quiet --log $work/events.jsonl --"

cat > percall.py <<'PY'
import os, sys, time
n, path = 20000, "percall-target"
open(path, "w").close()
def per_call(flags):
    start = time.perf_counter()
    for _ in range(n):
        os.close(os.open(path, flags))
    return (time.perf_counter() - start) / n * 1e6
best = {}
for _ in range(5):
    for name, flags in (("read", os.O_RDONLY), ("write", os.O_WRONLY)):
        best[name] = min(best.get(name, 1e9), per_call(flags))
os.unlink(path)
print(best["write"] - best["read"])
PY
cat > percall_net.py <<'PY'
import socket, time
n = 20000
def per_call(f, count=n):
    start = time.perf_counter()
    for _ in range(count):
        f()
    return (time.perf_counter() - start) / count * 1e6
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("127.0.0.1", 0))
to = server.getsockname()
connected = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
connected.connect(to)
loose = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(128)
def connection():
    c = socket.create_connection(listener.getsockname())
    listener.accept()[0].close()
    c.close()
calls = {
    "send": lambda: (a.send(b"x"), b.recv(16)),
    "sendmsg": lambda: (a.sendmsg([b"x"]), b.recv(16)),
    "udp send": lambda: (connected.send(b"x"), server.recv(16)),
    "udp sendto": lambda: (loose.sendto(b"x", to), server.recv(16)),
}
best = {}
for _ in range(5):
    for name, f in calls.items():
        best[name] = min(best.get(name, 1e9), per_call(f))
    best["connection"] = min(best.get("connection", 1e9), per_call(connection, 2000))
print(best["sendmsg"] - best["send"], best["udp sendto"] - best["udp send"], best["connection"])
PY
# Each workload times itself, so the sandbox's start-up (benches/startup.sh) is not in
# the figures: what is compared is the same work with and without the filter.
cat > writes.py <<'PY'
import os, time
start = time.perf_counter()
with open("writes.out", "wb") as f:
    for _ in range(10000):
        os.write(f.fileno(), b"x" * 512)
print(time.perf_counter() - start)
os.unlink("writes.out")
PY
cat > files.py <<'PY'
import os, shutil, time
start = time.perf_counter()
os.mkdir("files.out")
for i in range(10000):
    with open(f"files.out/{i}", "w") as f:
        f.write("x")
print(time.perf_counter() - start)
shutil.rmtree("files.out")
PY
cat > build.py <<'PY'
import compileall, shutil, time, warnings
warnings.simplefilter("ignore")
for cache in __import__("pathlib").Path("src").rglob("__pycache__"):
    shutil.rmtree(cache)
start = time.perf_counter()
compileall.compile_dir("src", quiet=2, force=True)
print(time.perf_counter() - start)
PY
# 48 translation units, each a few dozen small functions: a small C project's build.
mkdir csrc
for i in $(seq 48); do
    python3 - "$i" > "csrc/unit$i.c" <<'PY'
import sys
i = int(sys.argv[1])
print("#include <stdio.h>\n#include <string.h>")
for f in range(40):
    print(f"int unit{i}_f{f}(const char *s, int n) {{ int h = {f}; for (int k = 0; k < n; k++) h = h * 31 + s[k % (int)strlen(s)]; return h ^ {i}; }}")
PY
done
printf 'OBJS := $(patsubst %%.c,%%.o,$(wildcard *.c))\nall: $(OBJS)\n%%.o: %%.c\n\t$(CC) -O1 -c $< -o $@\n' > csrc/Makefile
cat > cbuild.py <<'PY'
import subprocess, time
start = time.perf_counter()
subprocess.run(["make", "-s", "-B", "-j2", "-C", "csrc"], check=True, stdout=subprocess.DEVNULL)
print(time.perf_counter() - start)
PY
stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
mkdir src
for pkg in email json http xml asyncio concurrent unittest logging urllib importlib \
           multiprocessing test/libregrtest encodings distutils lib2to3 pydoc_data; do
    [ -d "$stdlib/$pkg" ] && mkdir -p "src/$(dirname "$pkg")" && cp -r "$stdlib/$pkg" "src/$pkg"
done
find src -name __pycache__ -prune -exec rm -rf {} +

# Runs SCRIPT $runs times each way, alternating, and prints the medians and their ratio.
compare() {
    local script=$1 with=() without=()
    for _ in $(seq "$runs"); do
        with+=("$($sandboxed python3 "$script")")
        without+=("$($plain python3 "$script")")
    done
    python3 - "${with[*]}" "${without[*]}" <<'PY'
import statistics, sys
w = statistics.median(map(float, sys.argv[1].split()))
o = statistics.median(map(float, sys.argv[2].split()))
print(f"  median under netbox {w * 1000:.1f} ms, without the filter {o * 1000:.1f} ms: x{w / o:.3f}")
PY
}

echo "== 1. per notified call (microseconds; write-open minus read-open, 20000 each, best of 5)"
with=$($sandboxed python3 percall.py)
without=$($plain python3 percall.py)
python3 -c "w, o = $with, $without; print(f'  under netbox {w:.2f}, without the filter {o:.2f}: {w - o:.2f} us per notified call (budget 20)')"
echo "== 2. 10,000 write(2) calls to one file in the workspace (budget x1.05)"
compare writes.py
echo "== 3. 10,000 files created in the workspace (10,000 notified creates)"
compare files.py
echo "== 4. build: compileall of $(find src -name '*.py' | wc -l) .py files in the workspace (budget x1.05)"
compare build.py
if command -v gcc >/dev/null && command -v make >/dev/null; then
    echo "== 5. C build: make -j2 of $(find csrc -name '*.c' | wc -l) .c files with gcc in the workspace (budget x1.05)"
    compare cbuild.py
fi
echo "== 6. per notified network call (microseconds, best of 5)"
read -r msg_with udp_with conn_with <<<"$($sandboxed python3 percall_net.py)"
read -r msg_without udp_without conn_without <<<"$($plain python3 percall_net.py)"
python3 - "$msg_with" "$msg_without" "$udp_with" "$udp_without" "$conn_with" "$conn_without" <<'PY'
import sys
mw, mo, uw, uo, cw, co = map(float, sys.argv[1:])
print(f"  sendmsg minus send: under netbox {mw:.2f}, without the filter {mo:.2f}: {mw - mo:.2f} us per sendmsg")
print(f"  udp sendto minus send: under netbox {uw:.2f}, without the filter {uo:.2f}: {uw - uo:.2f} us per sendto with an address")
print(f"  tcp connection to a listener in the sandbox: under netbox {cw:.1f}, without the filter {co:.1f}: {cw - co:.1f} us more per connection")
PY
direct=$(grep -c '"type":"direct_attempt"' "$work/events.jsonl" || true)
echo "== direct_attempt records from all of the above (all traffic stayed in the sandbox): $direct"
[ "$direct" = 0 ] || { echo "benches/write_watch.sh: traffic inside the sandbox was logged as a direct attempt" >&2; exit 1; }
denied=$(grep -c '"type":"write_denied"' "$work/events.jsonl" || true)
echo "== write_denied records from all of the above (every write was inside the workspace): $denied"
[ "$denied" = 0 ] || { echo "benches/write_watch.sh: writes that succeeded were logged as refused" >&2; exit 1; }
