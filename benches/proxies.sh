#!/usr/bin/env bash
# Proxy overhead, side by side in one run, against one local nginx (loopback only): direct,
# netbox's bridge, the bridge serving 1,000 tenants (identity checks on), the whole
# `netbox -- CLIENT` path, and where installed tinyproxy, squid
# and a socat relay chain in front of the bridge (the Node-based sandbox runtime's way).
# Scenarios: start-up (true, unshare, bubblewrap, netbox -- true), a big download through
# a CONNECT tunnel and through the forward path (MB/s, CPU per GiB), new connections
# (CONNECT + 1 KiB GET: median, mean, p90, p99, CPU per connection), 1 KiB requests through
# the forward path with wrk (req/s, p50, p99, CPU per request), 10,000 idle tunnels
# (failures, RSS per tunnel), idle RSS. Prints a markdown table with ratios to direct, the
# machine's load as each scenario started, and PASS/MISS for each target; a full run writes
# benches/RESULTS.md's section, benches/proxies.json and the chart benches/proxies.svg.
# --quick runs each scenario once and briefly and writes nothing (CI runs it so the
# benches keep working). --proxy NAME='COMMAND {port}' adds a proxy of yours.
# Needs nginx and curl; wrk, tinyproxy, squid, socat and bubblewrap are used where
# installed (apt-get install nginx-light curl wrk tinyproxy squid socat bubblewrap).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in nginx curl python3; do
    command -v "$tool" >/dev/null || { echo "benches/proxies.sh: '$tool' is missing (apt-get install nginx-light curl python3)" >&2; exit 1; }
done
source benches/release_bins.sh
exec python3 benches/proxies.py "$netbox" "$latency_bin" "$chart_bin" "$@"
