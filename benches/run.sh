#!/usr/bin/env bash
# Bridge benchmarks, each side by side with the direct path in the same run (these
# machines are shared and noisy, so only ratios measured together mean anything):
#   1. 1 GiB download from a local nginx: direct vs. through a CONNECT tunnel (budget >= 0.75x)
#   2. a new connection + small GET: direct vs. CONNECT + GET (budget <= 2x), with a raw
#      socket client and with curl processes (hyperfine, if installed)
#   3. idle bridge RSS (budget <= 8 MiB)
# Needs nginx and curl (apt-get install nginx curl; hyperfine optional). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}

for tool in nginx curl; do
    command -v "$tool" >/dev/null || { echo "benches/run.sh: '$tool' is missing (apt-get install $tool)" >&2; exit 1; }
done
source benches/release_bins.sh

work=$(mktemp -d /tmp/netbox-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nginx_port=$(free_port)
truncate -s 1G "$work/big.bin"
echo small > "$work/small.txt"
cat > "$work/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 100000;
  client_body_temp_path $work;
  proxy_temp_path $work;
  fastcgi_temp_path $work;
  uwsgi_temp_path $work;
  scgi_temp_path $work;
  server { listen 127.0.0.1:$nginx_port; root $work; }
}
CONF
nginx -c "$work/nginx.conf" -e "$work/nginx-error.log" &
pids+=($!)

"./$netbox" bridge --listen 127.0.0.1:0 --allow "127.0.0.1:$nginx_port" --quiet 2>"$work/bridge.err" &
bridge_pid=$!
pids+=($bridge_pid)
for _ in $(seq 50); do
    proxy=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$work/bridge.err" | head -n1)
    [ -n "$proxy" ] && curl -s -o /dev/null "http://127.0.0.1:$nginx_port/small.txt" && break
    sleep 0.1
done
sleep 1
idle_rss=$(awk '/VmRSS/ {print $2}' "/proc/$bridge_pid/status")

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
url="http://127.0.0.1:$nginx_port/big.bin"
echo "== 1 GiB download, $rounds rounds alternating (MB/s)"
: > "$work/direct"; : > "$work/proxied"
curl -s -o /dev/null "$url"   # warm the page cache
for _ in $(seq "$rounds"); do
    curl -s -o /dev/null -w '%{speed_download}\n' "$url" >> "$work/direct"
    curl -s -o /dev/null -w '%{speed_download}\n' -p -x "http://$proxy" "$url" >> "$work/proxied"
done
d=$(median < "$work/direct"); p=$(median < "$work/proxied")
awk -v d="$d" -v p="$p" 'BEGIN { printf "direct  median %7.0f MB/s\nproxied median %7.0f MB/s\nratio proxied/direct: %.2f (budget >= 0.75)\n", d/1e6, p/1e6, p/d }'

echo "== new connection + small GET, raw socket client"
"$latency_bin" "127.0.0.1:$nginx_port" "$proxy" 3000

if command -v hyperfine >/dev/null; then
    echo "== new connection + small GET, curl processes (hyperfine)"
    hyperfine -N -w 20 -r 300 --style basic \
        "curl -s -o /dev/null http://127.0.0.1:$nginx_port/small.txt" \
        "curl -s -o /dev/null -p -x http://$proxy http://127.0.0.1:$nginx_port/small.txt"
fi

echo "== idle bridge RSS"
echo "idle RSS: $((idle_rss / 1024)).$(( (idle_rss % 1024) * 10 / 1024 )) MiB (budget <= 8 MiB)"
