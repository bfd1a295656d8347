#!/usr/bin/env bash
# The contained-execution walkthrough: make a scratch git repository in a fresh directory
# of its own (so two users, or two runs, never meet), run its build step inside netbox (the
# fingerprint comes back), then try the three boundaries: a write to $HOME, a write to
# .git/config, and a connection to a host that is not allowed. Each prints the error the
# command saw, verbatim, and the event-log line netbox wrote. Everything stays on this
# machine. netbox is $NETBOX if set, else the one installed on PATH, else built here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."

for tool in git curl; do
    command -v "$tool" >/dev/null || { echo "run.sh: '$tool' is missing (Debian: apt-get install git curl)" >&2; exit 1; }
done
if [ -n "${NETBOX:-}" ]; then
    netbox=$NETBOX
    echo "== using \$NETBOX: $netbox ($("$netbox" --version))"
elif command -v netbox >/dev/null; then
    netbox=$(command -v netbox)
    echo "== using the installed $netbox ($("$netbox" --version)); NETBOX=PATH picks another"
else
    command -v cargo >/dev/null || { echo "run.sh: no netbox installed and no 'cargo' to build one (Rust: rustup)" >&2; exit 1; }
    echo "== building netbox (release; the first build takes a few minutes, cargo shows its progress)"
    cargo build --release --bin netbox
    netbox=$PWD/target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox
fi

# A directory of this run's own: the project in it, the log beside it (a log may not lie
# in the workspace, which the command could rewrite).
work=$(mktemp -d "${TMPDIR:-/tmp}/netbox-demo.XXXXXX")
demo=$work/project
log=$work/events.jsonl
mkdir -p "$demo"
cp "$here/build_info.sh" "$demo/"
cd "$demo"
git init -q
git -c user.email=demo@sandbox.test -c user.name=demo add build_info.sh
git -c user.email=demo@sandbox.test -c user.name=demo commit -qm "scratch project"

show_log() { grep -F "$1" "$log" | tail -n 1 || echo "(no such record: nothing was tried there)"; }

echo
echo "== 1. the build step, inside netbox"
echo "\$ netbox --log $log -- ./build_info.sh"
"$netbox" --log "$log" -- ./build_info.sh
echo "-- the live probe that ran before it, as netbox log reads it"
"$netbox" log "$log" | grep -E '^  (probe|ended)' 

echo
echo "== 2. boundary: write to \$HOME"
echo "\$ netbox -- bash -c 'echo pwned > \$HOME/sandbox_escape_probe.txt'"
set +e
"$netbox" --quiet --log "$log" -- bash -c 'echo pwned > $HOME/sandbox_escape_probe.txt'
echo "exit status: $?"
set -e
[ -e "$HOME/sandbox_escape_probe.txt" ] && echo "!! file was created" || echo "no file created in $HOME"
echo "-- event log: the refused write"
show_log '"type":"write_denied"' 

echo
echo "== 3. boundary: write to .git/config"
echo "\$ netbox -- bash -c 'echo hacked > .git/config'"
before=$(sha256sum .git/config)
set +e
"$netbox" --quiet --log "$log" -- bash -c 'echo hacked > .git/config'
echo "exit status: $?"
set -e
[ "$before" = "$(sha256sum .git/config)" ] && echo ".git/config unchanged"
echo "-- event log: the refused write"
show_log '"type":"write_denied"' 

echo
echo "== 4. boundary: a host that is not allowed"
echo "\$ netbox -- curl -sS --max-time 8 https://blocked.test"
set +e
"$netbox" --log "$log" -- curl -sS --max-time 8 https://blocked.test
echo "exit status: $?"
set -e
echo "-- event log"
show_log '"host":"blocked.test"'

echo
echo "The whole event log is in $log (one JSON object per line); the project is in $demo."
