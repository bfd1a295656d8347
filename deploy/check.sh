#!/usr/bin/env bash
# deploy/ checked on a machine that runs no Kubernetes, no container engine and no systemd
# as init (our CI machines), with the real tools' own definitions:
#
# 1. the Kubernetes manifest against the Kubernetes API's schema (strict: an unknown or
#    misspelt field fails), the pod's hardening, and its ConfigMap loaded by the real
#    netbox; the Deployment runs the image's own command;
# 2. the systemd unit by `systemd-analyze verify` and `security` (exposure at most 2.0);
# 3. as root: the image's root (only what the Dockerfile's final stage holds) run as its
#    user with its command, in a network namespace of this script's own, answering
#    readiness, metrics, 407 and 502; and the bridge traced (strace) under the unit's
#    flags through tunnels, forwarded requests, a scrape, a reload and a drain, every
#    system call it made checked against the unit's SystemCallFilter.
#
# NETBOX_BIN names the binary (default: the debug build); DEPLOY_PYTHON a Python with the
# kubernetes-validate package (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
netbox=${NETBOX_BIN:-$PWD/target/$(rustc -vV | sed -n 's/^host: //p')/debug/netbox}
python=${DEPLOY_PYTHON:-python3}
work=$(mktemp -d /tmp/netbox-deploy.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
chmod 755 "$work"
say() { echo "deploy/check.sh: $*"; }

mkdir "$work/etc-netbox"
"$python" deploy/check.py kubernetes deploy/kubernetes/netbox-bridge.yaml "$work/etc-netbox"
"$python" deploy/check.py args deploy/kubernetes/netbox-bridge.yaml deploy/Dockerfile
"$python" deploy/check.py dockerfile deploy/Dockerfile
"$python" deploy/check.py sandbox-pod deploy/kubernetes/pod-sandboxed.yaml
"$python" deploy/check.py seccomp deploy/seccomp/netbox-podman.json deploy/seccomp/netbox-docker.json

# The AppArmor profile, parsed by AppArmor 4's own parser (the one Ubuntu 24.04 runs;
# Debian 12's is 3.0, which knows no `userns` rule), in the test image's Debian root. The
# control: the same profile with its rule misspelt must not parse.
if [ "$(id -u)" = 0 ] && command -v debootstrap >/dev/null; then
    root=$(bash tests/container-image.sh)
    cp deploy/apparmor/netbox "$root/tmp/netbox.apparmor"
    sed 's/^  userns,/  usernss,/' deploy/apparmor/netbox >"$root/tmp/broken.apparmor"
    chroot "$root" apparmor_parser -Q -K /tmp/netbox.apparmor 2>"$work/aa.err" \
        || { cat "$work/aa.err" >&2; say "deploy/apparmor/netbox does not parse"; exit 1; }
    if chroot "$root" apparmor_parser -Q -K /tmp/broken.apparmor 2>/dev/null; then
        say "apparmor_parser took a misspelt rule: the check proves nothing"; exit 1
    fi
    rm -f "$root/tmp/netbox.apparmor" "$root/tmp/broken.apparmor"
    say "apparmor: deploy/apparmor/netbox parses with $(chroot "$root" apparmor_parser --version | head -1)"
else
    say "apparmor: not checked (needs root and debootstrap for AppArmor 4's parser)"
fi

# The ConfigMap's policies, as the pod mounts them, loaded by the real binary.
"$netbox" bridge --listen 127.0.0.1:0 --tenants "$work/etc-netbox/tenants.toml" \
    --log "$work/load.jsonl" >"$work/load.out" 2>&1 &
loaded=$!
for _ in $(seq 100); do grep -q "listening on" "$work/load.out" && break; sleep 0.05; done
kill "$loaded" 2>/dev/null || true
wait "$loaded" 2>/dev/null || true
grep -q "listening on" "$work/load.out" || { cat "$work/load.out" >&2; say "the ConfigMap's policies do not load"; exit 1; }
say "kubernetes: the bridge loads the ConfigMap's tenants ($(grep -c 'tenant ' "$work/load.out") tenants)"

unit="$work/netbox-bridge.service"
sed "s|/usr/local/bin/netbox|$netbox|" deploy/systemd/netbox-bridge.service >"$unit"
systemd-analyze verify "$unit"
exposure=$(systemd-analyze security --offline=yes --threshold=20 "$unit" | tail -n 1)
say "systemd: verify passes; ${exposure#→ }"

if [ "$(id -u)" != 0 ]; then
    say "the image and system-call checks need root (chroot, a network namespace): skipped"
    exit 0
fi
command -v strace >/dev/null || { say "strace is missing (apt-get install strace)"; exit 1; }

# The image's root: exactly what the Dockerfile's final stage copies, and the ConfigMap
# where the pod mounts it.
root="$work/image"
install -D -m 755 "$netbox" "$root/netbox"
install -D -m 644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
install -d -m 755 "$root/etc/netbox"
install -m 644 "$work/etc-netbox/"* "$root/etc/netbox/"
mapfile -t image_command < <("$python" deploy/check.py command deploy/Dockerfile)

# A tenants file of the test's own for the traced run: a local server it may reach.
mkdir "$work/www"
head -c 4194304 /dev/urandom >"$work/www/blob"
cat >"$work/etc-netbox/local.toml" <<'EOF'
allow_private = ["files.test:8080"]
[hosts]
"files.test" = "127.0.0.1"
EOF
cat >"$work/etc-netbox/traced.toml" <<'EOF'
[tenants.local]
allowlist = ["local.toml"]
secrets = ["sha256:e5a4f0a9a3b23e05a8bd1ec55a3c9e2a1b6e1f2e8e1dbf7f2bd4a5dbd0f3b0d1"]
EOF
token=local-trace-token
digest=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
sed -i "s/sha256:[0-9a-f]*/sha256:$digest/" "$work/etc-netbox/traced.toml"
# The unit's own flags, its tenants file swapped for the test's.
read -r -a unit_args < <(sed -n 's|^ExecStart=[^ ]* ||p' deploy/systemd/netbox-bridge.service)
for i in "${!unit_args[@]}"; do
    [ "${unit_args[$i]}" = /etc/netbox/tenants.toml ] && unit_args[$i]="$work/etc-netbox/traced.toml"
done

export work root netbox token
unshare --net bash -s -- "${image_command[@]}" -- "${unit_args[@]}" <<'NETNS'
set -euo pipefail
say() { echo "deploy/check.sh: $*"; }
ip link set lo up
image=(); while [ "$1" != -- ]; do image+=("$1"); shift; done; shift
unit=("$@")
wait_for() { for _ in $(seq 200); do curl -s -o /dev/null "$1" && return 0; sleep 0.05; done; return 1; }

# The image, as its user, with its command.
chroot --userspec=65532:65532 "$root" "${image[@]}" >"$work/image.log" 2>&1 &
wait_for http://127.0.0.1:9090/ready || { cat "$work/image.log" >&2; say "the image's bridge did not start"; exit 1; }
ready=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9090/ready)
metrics=$(curl -s http://127.0.0.1:9090/metrics)
anonymous=$(curl -s -o /dev/null -w '%{http_code}' -x http://127.0.0.1:3128 http://git.corp.test/)
refused=$(curl -s -o /dev/null -w '%{http_code}' -x http://ci:replace-me-ci-token@127.0.0.1:3128 http://elsewhere.corp.test/)
grep -q 'session="[^"]*/team-a"' <<<"$metrics" || { say "the image's metrics name no tenant"; exit 1; }
[ "$ready $anonymous $refused" = "200 407 502" ] || { say "the image's bridge answered ready $ready, anonymous $anonymous, refused $refused (want 200 407 502)"; exit 1; }
grep -q '"session":"[^"]*/ci".*"host":"elsewhere.corp.test"' "$work/image.log" || { say "the image's bridge did not log the refusal on stdout"; exit 1; }
kill %1; wait %1 || true
say "image: its root alone, as 65532:65532, with its command: ready 200, no credentials 407, not allowed 502, logged on stdout"

# The unit's flags under strace, through everything the bridge does.
(cd "$work/www" && exec python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1) &
strace -f -qq -c -o "$work/strace.txt" "$netbox" "${unit[@]}" >"$work/unit.log" 2>&1 &
traced=$!
wait_for http://127.0.0.1:9090/ready || { cat "$work/unit.log" >&2; say "the traced bridge did not start"; exit 1; }
wait_for http://127.0.0.1:8080/blob
proxy="http://local:$token@127.0.0.1:3128"
for tunnel in -p ""; do
    got=$(curl -s $tunnel -x "$proxy" http://files.test:8080/blob | sha256sum)
    [ "$got" = "$(sha256sum <"$work/www/blob")" ] || { say "a download through the traced bridge (${tunnel:-forward}) came out wrong"; exit 1; }
done
curl -s -o /dev/null http://127.0.0.1:9090/metrics
kill -HUP "$(pgrep -f -n "$netbox bridge")"
sleep 0.3
curl -s -o /dev/null -x "$proxy" http://files.test:8080/blob
kill -TERM "$(pgrep -f -n "$netbox bridge")"
wait "$traced" || true
grep -q '"type":"policy_loaded".*"cause":"signal"' "$work/unit.log" || { say "the traced bridge did not reload"; exit 1; }
NETNS
python3 deploy/check.py syscalls deploy/systemd/netbox-bridge.service "$work/strace.txt"
