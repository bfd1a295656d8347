#!/usr/bin/env bash
# Cost of a connect to a Unix socket of the sandbox's own, now that netbox decides each
# one (supervise/unixsockets.rs) and makes it on a copy of the caller's socket: a loop of
# 10,000 connects (and closes) to a server in the sandbox's /tmp, in netbox and in
# bubblewrap, alternating three times. No budget: the figure is said in docs/running.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v bwrap >/dev/null || { echo "benches/unix_connect.sh: bwrap is missing (apt-get install bubblewrap)" >&2; exit 1; }
cargo build --release --quiet --bin netbox
netbox="$PWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
work=$(mktemp -d /tmp/netbox-unix-connect.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/ws"
cat > "$work/ws/loop.py" <<'PY'
import os, socket, threading, time
path = "/tmp/bench.sock"
server = socket.socket(socket.AF_UNIX); server.bind(path); server.listen(1024)
def serve():
    while True:
        c, _ = server.accept(); c.close()
threading.Thread(target=serve, daemon=True).start()
n = int(os.environ.get("CONNECTS", "10000"))
start = time.perf_counter()
for _ in range(n):
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.close()
print(f"{(time.perf_counter() - start) / n * 1e6:.1f}")
PY
cd "$work/ws"
for round in 1 2 3; do
    nb=$("$netbox" --quiet --log "$work/events.jsonl" -- python3 loop.py)
    bw=$(bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp \
        --bind "$work/ws" "$work/ws" --chdir "$work/ws" python3 loop.py)
    echo "round $round: netbox $nb us per connect, bwrap $bw us per connect"
done
