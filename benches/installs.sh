#!/usr/bin/env bash
# A package install through netbox against the same install direct, alternating, with
# each tool's own client against a local registry (tests/split-horizon.sh: names pinned
# to addresses inside a namespace of its own, a test CA). Needs root (the namespace),
# pip and npm. Each round: `pip install --target` and `npm install` of one package into a
# fresh directory, direct, then `netbox --allow-tool pip --allow-tool npm --private-ok`.
# Round 1 is listed apart: netbox asks each tool its settings once, then remembers them.
#   sudo bash benches/installs.sh            (ROUNDS=8 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != --inside ]; then
    for tool in pip3 npm; do
        command -v "$tool" >/dev/null || { echo "benches/installs.sh: '$tool' is missing (apt-get install python3-pip npm)" >&2; exit 1; }
    done
    cargo build --release --quiet --bin netbox
    netbox="$PWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
    # A clean environment, as a user's shell would give: the harness sets each tool's
    # registry and CA.
    exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" \
        ROUNDS="${ROUNDS:-8}" NETBOX="$netbox" bash tests/split-horizon.sh -- bash "$0" --inside
fi
netbox=$NETBOX
state=$(mktemp -d /var/tmp/netbox-installs.XXXXXX)
trap 'rm -rf "$state"' EXIT
cd "$SPLIT_WORK"
ms() { local s e; s=$(date +%s%N); "$@" >"$state/out" 2>&1 || { cat "$state/out" >&2; exit 1; }; e=$(date +%s%N); echo $(((e - s) / 1000000)); }
through() { "$netbox" --quiet --log "$state/events.jsonl" --allow-tool pip --allow-tool npm --private-ok -- "$@"; }
pip_install() { python3 -m pip install --quiet --no-cache-dir --target "$1" "$PIP_PKG"; }
npm_install() { mkdir "$1" && cd "$1" && npm install --no-audit --no-fund "$NPM_PKG"; }
export -f pip_install npm_install
for round in $(seq "$ROUNDS"); do
    rm -rf pd pn nd nn
    echo "$round pip $(ms bash -c 'pip_install pd') $(ms through bash -c 'pip_install pn')" \
        "npm $(ms bash -c 'npm_install nd') $(ms through bash -c 'npm_install nn')"
done | python3 -c '
import statistics, sys
rows = [line.split() for line in sys.stdin]
for line in rows:
    print("round %s: pip %s ms direct, %s ms through netbox; npm %s ms direct, %s ms through netbox" % (line[0], line[2], line[3], line[5], line[6]))
later = rows[1:]
if later:
    for name, d, n in (("pip", 2, 3), ("npm", 5, 6)):
        direct = statistics.median(int(r[d]) for r in later)
        sandboxed = statistics.median(int(r[n]) for r in later)
        print(f"{name} install, rounds 2-{len(rows)}, medians: {direct:.0f} ms direct, {sandboxed:.0f} ms through netbox: x{sandboxed / direct:.2f}")
'
