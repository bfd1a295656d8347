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
cargo bench --quiet --bench connect_latency --no-run 2>/dev/null
latency_bin=$(cargo bench --bench connect_latency --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*connect_latency[^"]*\)".*/\1/p' | tail -n1)
# Last: building a bench relinks the release netbox with the dev-dependencies' features;
# the one measured is the one users build.
cargo build --release --quiet --bin netbox
netbox="target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
exec python3 benches/proxies.py "$netbox" "$latency_bin" "$@"
