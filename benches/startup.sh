#!/usr/bin/env bash
# Start-up cost of a sandboxed run, side by side with bubblewrap in one hyperfine run:
#   netbox -- true            (namespaces, mounts, bridge, live probe, CMD, teardown)
#   bwrap --unshare-all ... true
# Budget: netbox no slower than bwrap. Needs hyperfine and bubblewrap
# (apt-get install hyperfine bubblewrap).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in hyperfine bwrap; do
    command -v "$tool" >/dev/null || { echo "benches/startup.sh: '$tool' is missing (apt-get install hyperfine bubblewrap)" >&2; exit 1; }
done
cargo build --release --quiet --bin netbox
work=$(mktemp -d /tmp/netbox-startup.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/ws"
cd "$work/ws"
hyperfine -N -w 20 -r "${RUNS:-300}" --style basic \
    "$OLDPWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox --quiet --log $work/events.jsonl -- true" \
    "bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp true"
echo "== probe cost (from the event log, microseconds)"
grep -o '"duration_us":[0-9]*' "$work/events.jsonl" | cut -d: -f2 | sort -n \
    | awk '{a[NR]=$1} END {printf "probe median %d us, p90 %d us over %d runs\n", a[int((NR+1)/2)], a[int(NR*0.9)], NR}'
