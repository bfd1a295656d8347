#!/usr/bin/env bash
# Builds netbox and runs its egress bridge on a real example, entirely on this machine:
# a local web server pinned as registry.test is allowed, blocked.test is not, and every
# attempt lands in a JSON-lines event log.
set -euo pipefail
cd "$(dirname "$0")/../.."

for tool in cargo curl python3; do
    command -v "$tool" >/dev/null || { echo "run.sh: '$tool' is missing (Debian: apt-get install curl python3; Rust: rustup)" >&2; exit 1; }
done

echo "== building netbox (release)"
cargo build --release --quiet --bin netbox
netbox=$PWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox

work=$(mktemp -d /tmp/netbox-demo.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# A local "package registry": a directory served on a loopback port the kernel picks.
mkdir -p "$work/registry/simple"
echo "pretend-package 1.0" > "$work/registry/simple/index.txt"
python3 -m http.server 0 --bind 127.0.0.1 --directory "$work/registry" >"$work/http.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do port=$(sed -n 's/.* port \([0-9]*\).*/\1/p' "$work/http.log" | head -n1); [ -n "$port" ] && break; sleep 0.1; done
[ -n "${port:-}" ] || { echo "run.sh: the local web server did not start" >&2; exit 1; }

cat > "$work/allow.toml" <<TOML
# registry.test is this machine's web server; 127.0.0.1 is opened on purpose for it.
allow = ["registry.test:$port", "127.0.0.1:$port"]
[hosts]
"registry.test" = "127.0.0.1"
TOML
echo "== allowlist"; cat "$work/allow.toml"

"$netbox" bridge --listen 127.0.0.1:0 --allowlist "$work/allow.toml" --log "$work/events.jsonl" 2>"$work/bridge.err" &
pids+=($!)
for _ in $(seq 50); do proxy=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$work/bridge.err" | head -n1); [ -n "$proxy" ] && break; sleep 0.1; done
[ -n "${proxy:-}" ] || { cat "$work/bridge.err" >&2; exit 1; }

echo
echo "== allowed: curl -x http://$proxy http://registry.test:$port/simple/index.txt"
curl -sS -x "http://$proxy" "http://registry.test:$port/simple/index.txt"
echo
echo "== blocked: curl -x http://$proxy https://blocked.test/"
set +e
curl -sS --max-time 8 -x "http://$proxy" https://blocked.test/
echo "curl exit status: $?"
set -e
echo
echo "== what netbox said on stderr"
sed 1d "$work/bridge.err"
echo
echo "== event log ($work/events.jsonl)"
cat "$work/events.jsonl"
