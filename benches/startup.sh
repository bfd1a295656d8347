#!/usr/bin/env bash
# Start-up cost of a sandboxed run, side by side with bubblewrap in one hyperfine run:
#   netbox -- true            (namespaces, mounts, bridge, capture, live probe, CMD, teardown)
#   netbox --no-capture -- true
#   bwrap --unshare-all ... true
# Budget: netbox within 1.1x bwrap, and capture within 10% of a run without it. Needs hyperfine and bubblewrap
# (apt-get install hyperfine bubblewrap).
# Then the same two, alternating, with the host at ~100, ~1,000 and ~4,000 processes
# (idle ones started for it; HOST_PROCESSES="100 1000 4000"): netbox looks at no other
# process at start-up, so its growth beyond bwrap's own must stay under 1 ms.
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
netbox="$OLDPWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
bwrap_cmd="bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp true"
plain="$netbox --no-capture --quiet --log $work/plain.jsonl -- true"
hyperfine -N -w 20 -r "${RUNS:-300}" --style basic \
    "$netbox --quiet --log $work/events.jsonl -- true" "$plain" "$bwrap_cmd"
# The same commands again, alternating run by run (benches/alternate.py says why).
alternate="python3 $OLDPWD/benches/alternate.py"
echo "== alternating, ${RUNS:-300} runs each"
read -r nb_ms plain_ms bwrap_ms <<<"$($alternate "${RUNS:-300}" "$netbox --quiet --log $work/events.jsonl -- true" "$plain" "$bwrap_cmd")"
echo "netbox $nb_ms ms, netbox --no-capture $plain_ms ms, bwrap $bwrap_ms ms"
awk -v n="$nb_ms" -v p="$plain_ms" -v b="$bwrap_ms" \
    'BEGIN { printf "netbox x%.3f bwrap (budget 1.1); capture x%.3f (budget 1.1)\n", n / b, n / p }'
echo "== probe cost (from the event log, microseconds)"
grep -o '"duration_us":[0-9]*' "$work/events.jsonl" | cut -d: -f2 | sort -n \
    | awk '{a[NR]=$1} END {printf "probe median %d us, p90 %d us over %d runs\n", a[int((NR+1)/2)], a[int(NR*0.9)], NR}'

echo "== start-up as the host's process count grows (alternating, ${COUNT_RUNS:-60} runs each)"
for target in ${HOST_PROCESSES:-100 1000 4000}; do
    now=$(ls -d /proc/[0-9]* | wc -l)
    idle=()
    for _ in $(seq $((target - now))); do
        sleep 600 & idle+=($!)
    done
    read -r nb_ms bwrap_ms <<<"$($alternate "${COUNT_RUNS:-60}" "$netbox --quiet --log $work/count.jsonl -- true" "$bwrap_cmd")"
    processes=$(ls -d /proc/[0-9]* | wc -l)
    awk -v c="$processes" -v n="$nb_ms" -v b="$bwrap_ms" \
        'BEGIN { printf "%5d processes: netbox %.2f ms, bwrap %.2f ms, netbox - bwrap %.2f ms\n", c, n, b, n - b }'
    if [ ${#idle[@]} -gt 0 ]; then kill "${idle[@]}" 2>/dev/null; wait "${idle[@]}" 2>/dev/null || true; fi
done

# --allow-tool: pip and npm answer about their settings by starting an interpreter; an
# answer is remembered while nothing it depends on changes. Budget: +20 ms a run with
# unchanged settings. The first run is shown apart: it asks both tools, unless an earlier
# run's answers (in /dev/shm/netbox-UID) still stand.
if command -v npm >/dev/null && command -v pip >/dev/null; then
    echo "== --allow-tool pip --allow-tool npm, settings unchanged (alternating, ${TOOL_RUNS:-30} runs each)"
    tools="$netbox --quiet --log $work/tools.jsonl --allow-tool pip --allow-tool npm -- true"
    first_start=$(date +%s%N)
    $tools 2>/dev/null
    echo "first run: $(( ($(date +%s%N) - first_start) / 1000000 )) ms"
    read -r tools_ms plain2_ms <<<"$($alternate "${TOOL_RUNS:-30}" "$tools" "$netbox --quiet --log $work/plain2.jsonl -- true")"
    awk -v t="$tools_ms" -v p="$plain2_ms" \
        'BEGIN { printf "with both tools %.2f ms, without %.2f ms: +%.2f ms (budget +20)\n", t, p, t - p }'
fi
