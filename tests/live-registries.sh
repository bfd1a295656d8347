#!/usr/bin/env bash
# Not in CI: runs real package managers through netbox against whatever registries this
# machine's tools are configured for, with --allow-tool alone, and prints what was
# allowed and how each client did. Needs network access to those registries, pip, npm
# and cargo, and a release build (cargo build --release).
#   bash tests/live-registries.sh [NETBOX OPTIONS...]   (e.g. --private-ok for a mirror
#   on a private address)
set -uo pipefail
extra=("$@")
cd "$(dirname "$0")/.."
netbox="$PWD/target/$(rustc -vV | sed -n 's/^host: //p')/release/netbox"
[ -x "$netbox" ] || { echo "build netbox first: cargo build --release" >&2; exit 1; }
work=$(mktemp -d /var/tmp/netbox-live.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws/src" "$work/logs"
cd "$work/ws"
printf '[package]\nname = "live"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nitoa = "1"\n' > Cargo.toml
echo 'fn main() {}' > src/main.rs
printf '{"name":"live","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}\n' > package.json

try() {
    local name=$1 tool=$2; shift 2
    local log="$work/logs/$name.jsonl" start end rc
    start=$(date +%s.%N)
    "$netbox" --log "$log" --allow-tool "$tool" "${extra[@]}" -- "$@" >/dev/null 2>"$work/logs/$name.err"
    rc=$?
    end=$(date +%s.%N)
    printf '%-13s exit %-3s %5.1fs  allowed: %s\n' "$name" "$rc" "$(echo "$end - $start" | bc)" \
        "$(python3 -c 'import json,sys
hosts = set()
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: continue
    if r.get("type") == "net" and r.get("decision") == "allow": hosts.add("%s:%s" % (r["host"], r["port"]))
print(" ".join(sorted(hosts)))' "$log")"
    grep -m1 '^netbox: sandbox' "$work/logs/$name.err" | sed 's/^/    /'
    [ "$rc" = 0 ] || tail -n 3 "$work/logs/$name.err" | sed 's/^/    /'
}

"$netbox" tools pip npm cargo
try pip-download pip pip download --no-deps --quiet -d /tmp/dl six
try npm-view npm npm view is-number version
try npm-install npm npm install --no-audit --no-fund --loglevel=error
try cargo-fetch cargo env CARGO_HOME="$work/ws/.cargo-home" cargo fetch --quiet
