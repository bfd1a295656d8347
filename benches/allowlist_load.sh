#!/usr/bin/env bash
# Allowlists of many names (blocklists, generated lists): how long `netbox bridge` takes to
# load one of N `"hN.example.test:443"` rules (start to "listening", median of 3), and what
# a decision costs with it: 300 CONNECTs to a host no rule names, each refused by the
# policy alone (nothing is dialed), timed by one client over fresh connections, against
# the same with a one-rule allowlist in the same run; and the bridge's memory per rule: its
# RSS over the one-rule bridge's, when it listens and once a decision has been made.
# KIND=nets lists N address rules instead (IPv4 /32 and /28, IPv6 /64, a third each),
# and the refused CONNECTs go to a NAT64 address, which is looked up in both families.
# Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin netbox
netbox="$PWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
work=$(mktemp -d /tmp/netbox-allowlist-bench.XXXXXX)
bridge=
trap 'kill $bridge 2>/dev/null || true; rm -rf "$work"' EXIT
sizes=${SIZES:-"5000 20000 100000 400000"}
kind=${KIND:-names}
case "$kind" in
names) refused_host=nowhere.example.test ;;
nets) refused_host="[64:ff9b::c000:207]" ;;
*) echo "KIND is names or nets, not $kind" >&2; exit 2 ;;
esac

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Starts a bridge on allowlist $1; sets `bridge` (its pid), `port`, and `took` (seconds
# to "listening").
start_bridge() {
    local err="$work/bridge.err" start end
    : > "$err"
    start=$(date +%s.%N)
    "$netbox" bridge --listen 127.0.0.1:0 --allowlist "$1" --quiet 2>"$err" &
    bridge=$!
    until grep -q "listening on" "$err"; do
        kill -0 "$bridge" 2>/dev/null || { cat "$err" >&2; exit 1; }
        sleep 0.005
    done
    end=$(date +%s.%N)
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$err" | head -n1)
    took=$(echo "$end - $start" | bc)
}

stop_bridge() { kill "$bridge"; wait "$bridge" 2>/dev/null || true; }

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$bridge/status"; }

# Microseconds per refused CONNECT, 300 of them, one connection each.
refusals() {
    python3 - "$1" "$refused_host" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
target = f"{sys.argv[2]}:443".encode()
def one():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
    head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 403") or head.startswith(b"HTTP/1.1 502"), head[:40]
    s.close()
for _ in range(20):
    one()
start = time.perf_counter()
for _ in range(300):
    one()
print(round((time.perf_counter() - start) / 300 * 1e6))
PY
}

case "$kind" in
names) printf 'allow = ["h0.example.test:443"]\n' > "$work/allow-1.toml" ;;
nets) printf 'allow = ["10.0.0.0/32:443"]\n' > "$work/allow-1.toml" ;;
esac
printf '%-8s %-8s %-9s %-24s %s\n' rules "file MB" "load (s)" "refused CONNECT (µs)" \
    "bytes per rule (listening, after a decision)"
for n in $sizes; do
    file="$work/allow-$n.toml"
    python3 -c "
import ipaddress, sys
n, kind = int(sys.argv[1]), sys.argv[3]
def rule(i):
    if kind == 'names':
        return f'h{i}.example.test:443'
    if i % 3 == 0:
        return f'{ipaddress.IPv4Address(0x0A000000 + i)}/32:443'
    if i % 3 == 1:
        return f'[fd00:{i >> 16:x}:{i & 0xffff:x}::/64]:443'
    return f'{ipaddress.IPv4Address(0x0B000000 + i * 16)}/28:443'
with open(sys.argv[2], 'w') as f:
    f.write('allow = [\n')
    for i in range(n):
        f.write(f'  \"{rule(i)}\",\n')
    f.write(']\n')" "$n" "$file" "$kind"
    loads=()
    for _ in 1 2 3; do
        start_bridge "$file"
        loads+=("$took")
        stop_bridge
    done
    start_bridge "$file"
    big_rss=$(rss_kib)
    big=$(refusals "$port")
    big_rss_used=$(rss_kib)
    stop_bridge
    start_bridge "$work/allow-1.toml"
    small_rss=$(rss_kib)
    small=$(refusals "$port")
    small_rss_used=$(rss_kib)
    stop_bridge
    per_rule() { echo "($1 - $2) * 1024 / $n" | bc; }
    printf '%-8s %-8s %-9s %-24s %s, %s\n' "$n" "$(du -m "$file" | cut -f1)" \
        "$(printf '%s\n' "${loads[@]}" | median)" "$big (1 rule: $small)" \
        "$(per_rule "$big_rss" "$small_rss")" "$(per_rule "$big_rss_used" "$small_rss_used")"
done
