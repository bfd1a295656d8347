#!/usr/bin/env bash
# The cost of the TLS check, or of inspection: tunnels through two bridges side
# by side in one run, against one local HTTPS server (Python's ssl, a certificate made
# here with openssl). Reports the median time of a new connection (CONNECT + TLS
# handshake + a 1-byte GET) through each, and the throughput of a 256 MiB download
# through each, alternating, and their ratios.
#   benches/tls_check.sh           the ClientHello check (tls_ports) against no check
#   benches/tls_check.sh inspect   inspection ([[http]]) against the ClientHello check
# Needs openssl and python3. Loopback only. ROUNDS (default 300) and BULK_ROUNDS (5).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-check}
rounds=${ROUNDS:-300}
bulk_rounds=${BULK_ROUNDS:-5}
for tool in openssl python3; do
    command -v "$tool" >/dev/null || { echo "benches/tls_check.sh: '$tool' is missing" >&2; exit 1; }
done
cargo build --release --quiet --bin netbox
netbox="$PWD/target/$(rustc -vV | sed -n 's/^host: //p')/release/netbox"

work=$(mktemp -d /tmp/netbox-tls-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# A CA and a.test's certificate signed by it (a verifier such as the inspector's refuses a
# self-signed CA certificate as a server's own).
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -days 1 -subj "/CN=bench CA" \
    -keyout "$work/ca-key.pem" -out "$work/ca.pem" 2>/dev/null
openssl req $ec -subj /CN=a.test -keyout "$work/key.pem" -out "$work/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:a.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    > "$work/leaf.ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
    -CAcreateserial -days 1 -extfile "$work/leaf.ext" -out "$work/cert.pem" 2>/dev/null

cat > "$work/server.py" <<'PY'
# GET /N answers N zero bytes over TLS, then closes.
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
print(listener.getsockname()[1], flush=True)
ZEROS = bytes(1 << 20)
def serve(conn):
    try:
        with ctx.wrap_socket(conn, server_side=True) as tls:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = tls.recv(4096)
                if not chunk:
                    return
                head += chunk
            n = int(head.split(b" ")[1][1:])
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % n)
            while n > 0:
                tls.sendall(ZEROS[:min(n, len(ZEROS))])
                n -= min(n, len(ZEROS))
    except OSError:
        pass
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
PY
python3 "$work/server.py" "$work/cert.pem" "$work/key.pem" > "$work/port" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")

start_bridge() { # NAME EXTRA-ALLOWLIST-LINES [FLAG...]; its address ends up in $work/NAME.addr
    local name=$1 extra=$2
    shift 2
    printf 'allow = ["a.test:%s", "127.0.0.1:%s"]\n%b[hosts]\n"a.test" = "127.0.0.1"\n' \
        "$port" "$port" "$extra" > "$work/$name.toml"
    "$netbox" bridge --listen 127.0.0.1:0 --quiet --allowlist "$work/$name.toml" \
        --log "$work/$name.jsonl" --log-refusals-per-minute 1000000 "$@" \
        > /dev/null 2> "$work/$name.err" &
    pids+=($!)
    for _ in $(seq 50); do grep -q "listening on" "$work/$name.err" 2>/dev/null && break; sleep 0.1; done
    sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$work/$name.err" > "$work/$name.addr"
}
case "$mode" in
    check)
        start_bridge checked "tls_ports = [$port]\n"
        start_bridge unchecked ""
        names=(checked unchecked)
        cas=("$work/ca.pem" "$work/ca.pem")
        ;;
    inspect)
        start_bridge inspected "tls_ports = [$port]\n[[http]]\nhost = \"a.test:$port\"\n" \
            --upstream-ca "$work/ca.pem" --ca-cert "$work/session-ca.pem"
        start_bridge checked "tls_ports = [$port]\n"
        names=(inspected checked)
        cas=("$work/session-ca.pem" "$work/ca.pem")
        ;;
    *) echo "benches/tls_check.sh: mode is check or inspect, not '$mode'" >&2; exit 2 ;;
esac

python3 - "$(cat "$work/${names[0]}.addr")" "$(cat "$work/${names[1]}.addr")" "${cas[@]}" \
    "$port" "$rounds" "$bulk_rounds" "${names[@]}" <<'PY'
import socket, ssl, statistics, sys, time
checked, unchecked = sys.argv[1], sys.argv[2]
ctxs = {checked: ssl.create_default_context(cafile=sys.argv[3]),
        unchecked: ssl.create_default_context(cafile=sys.argv[4])}
target = b"a.test:" + sys.argv[5].encode()
rounds, bulk_rounds = int(sys.argv[6]), int(sys.argv[7])
first, second = sys.argv[8], sys.argv[9]

def get(bridge, size):
    """Seconds for CONNECT, a TLS handshake and GET /size, read to the end."""
    host, port = bridge.rsplit(":", 1)
    start = time.perf_counter()
    raw = socket.create_connection((host, int(port)))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    raw.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
    head = b""
    while b"\r\n\r\n" not in head:
        head += raw.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    tls = ctxs[bridge].wrap_socket(raw, server_hostname="a.test")
    tls.sendall(b"GET /%d HTTP/1.1\r\nHost: a.test\r\n\r\n" % size)
    got = 0
    while True:
        chunk = tls.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)
    tls.close()
    assert got > size, got
    return time.perf_counter() - start

# Alternating, so that noise on this shared machine falls on both alike.
small = {checked: [], unchecked: []}
for _ in range(rounds):
    for bridge in (checked, unchecked):
        small[bridge].append(get(bridge, 1))
bulk = {checked: [], unchecked: []}
size = 256 << 20
for _ in range(bulk_rounds):
    for bridge in (checked, unchecked):
        bulk[bridge].append(size / get(bridge, size) / (1 << 20))
ms = lambda xs: statistics.median(xs) * 1000
print("new TLS connection (CONNECT + handshake + 1-byte GET), median of %d:" % rounds)
print("  %s %.3f ms   %s %.3f ms   difference %+.3f ms (%.3fx)" % (
    first, ms(small[checked]), second, ms(small[unchecked]),
    ms(small[checked]) - ms(small[unchecked]),
    ms(small[checked]) / ms(small[unchecked])))
print("256 MiB download, median of %d:" % bulk_rounds)
print("  %s %.0f MiB/s   %s %.0f MiB/s   ratio %.3f" % (
    first, statistics.median(bulk[checked]), second, statistics.median(bulk[unchecked]),
    statistics.median(bulk[checked]) / statistics.median(bulk[unchecked])))
PY
