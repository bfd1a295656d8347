#!/usr/bin/env bash
# What a secret's swap adds to a request, side by side in one run: inside one sandbox, one
# keep-alive HTTPS connection through the bridge (inspected, as a secret's host is), the
# same GET alternately with the secret's placeholder in its Authorization header (swapped
# by the bridge, and the response searched for the value) and with a token of the same
# length that is no placeholder (searched, not swapped). Medians of each, and their
# difference. A local HTTPS server on 127.0.0.1 answers every request with 2 bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin netbox
netbox="$PWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
work=$(mktemp -d /tmp/netbox-secret-bench.XXXXXX)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=netbox bench CA" -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench.test" \
    -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:bench.test\n' > ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile ext -out server.pem 2>/dev/null
python3 - <<'PY' &
import http.server, ssl
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        # One write: a head and a body written apart wait on the peer's delayed ACK.
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain("server.pem", "server.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
open("port", "w").write(str(server.server_address[1]))
server.serve_forever()
PY
server=$!
for _ in $(seq 50); do [ -s port ] && break; sleep 0.1; done
port=$(cat port)
cat > allow.toml <<EOF
allow_private = ["bench.test:$port"]
tls_ports = [$port]
[hosts]
"bench.test" = "127.0.0.1"
[[secret]]
name = "BENCH_TOKEN"
from = "env:BENCH_TOKEN_VALUE"
hosts = ["bench.test:$port"]
EOF
mkdir ws
cd ws
BENCH_TOKEN_VALUE=bench-real-token-0123456789abcdef "$netbox" --quiet --log ../events.jsonl \
    --allowlist ../allow.toml --upstream-ca ../ca.pem -- python3 - "$port" "${ROUNDS:-2000}" <<'PY'
import http.client, os, statistics, sys, time, urllib.parse
port, rounds = int(sys.argv[1]), int(sys.argv[2])
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
conn = http.client.HTTPSConnection(proxy.hostname, proxy.port)
conn.set_tunnel("bench.test", port)
placeholder = os.environ["BENCH_TOKEN"]
plain = "x" * len(placeholder)
times = {"swapped": [], "not swapped": []}
for i in range(rounds + 100):
    for name, token in (("swapped", placeholder), ("not swapped", plain)):
        start = time.perf_counter()
        conn.request("GET", "/", headers={"Authorization": "Bearer " + token})
        body = conn.getresponse().read()
        elapsed = time.perf_counter() - start
        assert body == b"ok"
        if i >= 100:
            times[name].append(elapsed)
medians = {name: statistics.median(t) * 1e6 for name, t in times.items()}
for name, median in medians.items():
    print(f"{name:12} median {median:8.1f} us over {rounds} requests")
print(f"added by the swap: {medians['swapped'] - medians['not swapped']:+.1f} us a request "
      f"({medians['swapped'] / medians['not swapped']:.3f}x)")
PY
