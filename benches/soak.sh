#!/usr/bin/env bash
# Load and soak of `netbox bridge`, loopback only: benches/soak/
# starts its own upstream and bridge, runs idle -> load -> after -> slowloris, then a
# shared bridge (--tenants) under a flood of connections that name no tenant, prints a
# summary table (invariants ok/FAIL, targets PASS/MISS) and exits 1 if an invariant fails.
#
#   bash benches/soak.sh               # full run: 100,000 connections, 2,000 at once,
#                                      # 10,000 slowloris (about 2 minutes here)
#   CONNECTIONS=5000 CONCURRENCY=200 SLOW=500 HEADER_TIMEOUT=2 bash benches/soak.sh
#   bash benches/soak.sh --as-nobody   # as root: the same, as uid 65534
#
# Knobs (environment): CONNECTIONS, CONCURRENCY, DENY_EVERY (one in N denied, 4),
# SLOW (slowloris connections, 0 skips it), SLOW_SECS (2.5 x HEADER_TIMEOUT),
# HEADER_TIMEOUT (the bridge's --header-timeout in seconds, 10), MAX_CONNECTIONS (the
# bridge's --max-connections; by default room for SLOW and CONCURRENCY, so that what is
# measured is service, not the budget), FLOOD (connections of the flood on the shared
# bridge, SLOW; 0 skips it), FLOOD_SECS (1.5 x HEADER_TIMEOUT + 1). The full run needs
# an fd hard limit of about 11,000 (ulimit -Hn); the harness raises its soft limit itself.
set -euo pipefail
cd "$(dirname "$0")/.."

as_nobody=false
case "${1:-}" in
    --as-nobody) as_nobody=true ;;
    "") ;;
    *) echo "usage: benches/soak.sh [--as-nobody]" >&2; exit 2 ;;
esac

target_dir=${CARGO_TARGET_DIR:-target}
soak_bin=$(cargo bench --bench soak --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*\/soak-[^"]*\)".*/\1/p' | tail -n1)
[ -x "$soak_bin" ] || { echo "benches/soak.sh: cannot find the soak bench binary" >&2; exit 1; }
# After the bench: building it links release/netbox to a netbox built with the
# dev-dependencies' features; this puts the plain release build, the one users run, back.
cargo build --release --quiet --bin netbox
netbox_bin="$target_dir/$(rustc -vV | sed -n 's/^host: //p')/release/netbox"

knobs=()
for knob in CONNECTIONS CONCURRENCY DENY_EVERY SLOW SLOW_SECS HEADER_TIMEOUT MAX_CONNECTIONS FLOOD FLOOD_SECS; do
    [ -n "${!knob:-}" ] && knobs+=("$knob=${!knob}")
done

if ! $as_nobody; then
    exec env "${knobs[@]}" NETBOX_BIN="$(realpath "$netbox_bin")" "$soak_bin"
fi
[ "$(id -u)" = 0 ] || { echo "benches/soak.sh: --as-nobody needs root" >&2; exit 2; }
# The checkout may sit under a directory nobody cannot enter: run copies from /var/tmp.
stage=$(mktemp -d /var/tmp/netbox-soak.XXXXXX)
trap 'rm -rf "$stage"' EXIT
cp "$netbox_bin" "$stage/netbox"
cp "$soak_bin" "$stage/soak"
chmod 755 "$stage" "$stage/netbox" "$stage/soak"
cd "$stage"
env -i PATH="$PATH" HOME=/nonexistent TMPDIR=/tmp "${knobs[@]}" NETBOX_BIN="$stage/netbox" \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$stage/soak"
