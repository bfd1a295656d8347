#!/usr/bin/env bash
# Proxy overhead, side by side in one run: direct, netbox's bridge, and tinyproxy and
# squid where installed, against one local nginx (loopback only). Scenarios: a big
# download through a CONNECT tunnel (MB/s, CPU per GiB), new connections (CONNECT + 1 KiB
# GET: median, p90, CPU per connection), 1 KiB requests through the forward path with wrk
# (req/s, p50, p99, CPU per request), idle RSS. Prints a markdown table with ratios to
# direct; --quick runs each scenario once and briefly.
# Needs nginx and curl; wrk, tinyproxy and squid are used where installed
# (apt-get install nginx-light curl wrk tinyproxy squid).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in nginx curl python3; do
    command -v "$tool" >/dev/null || { echo "benches/proxies.sh: '$tool' is missing (apt-get install nginx-light curl python3)" >&2; exit 1; }
done
source benches/release_bins.sh
exec python3 benches/proxies.py "$netbox" "$latency_bin" "$@"
