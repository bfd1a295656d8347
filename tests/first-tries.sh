#!/usr/bin/env bash
# Not in CI: how many tries each package manager takes through netbox for a user who does
# only what netbox's messages say. Meant for a machine whose registries resolve to
# non-public addresses (split-horizon DNS, a mirror inside a company), where a first try
# is refused. Each client starts with `--allow-tool TOOL` alone; after a failed try, the
# script adds the first flag netbox's stderr names (`--private-ok`, `--allow-private
# HOST:PORT`, `--allow-tool TOOL`, `--refusal-status CODE`) and tries again, four tries at
# most. Then once more from scratch with a defaults file that says `private_ok = true`.
# Needs pip, npm, cargo (apt-get as root), a release build (cargo build --release), and
# network access to the registries this machine's tools are configured for.
#   bash tests/first-tries.sh              # as the current user
#   sudo bash tests/first-tries.sh nobody  # also as a second user (its own HOME)
set -uo pipefail
second_user=${1:-}
cd "$(dirname "$0")/.."
netbox="$PWD/target/$(rustc -vV | sed -n 's/^host: //p')/release/netbox"
[ -x "$netbox" ] || { echo "build netbox first: cargo build --release" >&2; exit 1; }
work=$(mktemp -d /var/tmp/netbox-tries.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

# One workspace per client, each with what its client installs.
setup() {
    local ws=$1
    mkdir -p "$ws/src"
    printf '[package]\nname = "tries"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nitoa = "1"\n' > "$ws/Cargo.toml"
    echo 'fn main() {}' > "$ws/src/main.rs"
    printf '{"name":"tries","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}\n' > "$ws/package.json"
}

# The flag netbox's stderr tells the user to add, if any: the first one it names.
next_flag() {
    grep -oE -- '--private-ok|--allow-private [^ ,;)"]+|--allow-tool [a-z]+|--refusal-status [0-9]+' "$1" \
        | head -n 1
}

# tries CLIENT TOOL [--config] -- CMD...: prints "CLIENT TRIES FLAGS".
tries() {
    local client=$1 tool=$2 config=$3; shift 4
    local ws="$work/$RUN_AS-$client${config:+-config}" flags=(--allow-tool "$tool") n rc err
    setup "$ws"
    local env=(HOME="$HOME_OF_RUN" PATH="$PATH")
    if [ -n "$config" ]; then
        mkdir -p "$ws.config/netbox"
        echo 'private_ok = true' > "$ws.config/netbox/config.toml"
        chmod 600 "$ws.config/netbox/config.toml"
        env+=(XDG_CONFIG_HOME="$ws.config")
    fi
    [ "$RUN_AS" = root ] || chown -R "$RUN_AS" "$ws" "$ws.config" 2>/dev/null
    for n in 1 2 3 4; do
        err="$ws.err.$n"
        (cd "$ws" && as_user env -i "${env[@]}" "$netbox" "${flags[@]}" -- "$@") >/dev/null 2>"$err"
        rc=$?
        if [ "$rc" = 0 ]; then
            printf '%-8s %-6s %-7s %s try/tries  %s\n' "$client" "$RUN_AS" "${config:+config}" "$n" "${flags[*]}"
            return
        fi
        local flag
        flag=$(next_flag "$err")
        if [ -z "$flag" ] || [[ " ${flags[*]} " == *" $flag "* ]]; then
            printf '%-8s %-6s %-7s failed after %s: %s\n' "$client" "$RUN_AS" "${config:+config}" "$n" \
                "$(grep -m1 'netbox:' "$err")"
            return
        fi
        # shellcheck disable=SC2206 # a flag and its value
        flags+=($flag)
    done
    printf '%-8s %-6s %-7s failed after 4 tries: %s\n' "$client" "$RUN_AS" "${config:+config}" "${flags[*]}"
}

as_user() {
    if [ "$RUN_AS" = root ] || [ "$RUN_AS" = "$(id -un)" ]; then
        "$@"
    else
        setpriv --reuid="$RUN_AS" --regid="$(id -g "$RUN_AS")" --clear-groups "$@"
    fi
}

all_clients() {
    for config in "" config; do
        tries pip pip "$config" -- pip install --quiet --target deps six
        tries npm npm "$config" -- npm install --no-audit --no-fund
        tries cargo cargo "$config" -- cargo fetch
        if [ "$RUN_AS" = root ]; then
            tries apt apt "$config" -- apt-get download hello
        fi
    done
}

echo "client   user   config  result   flags"
RUN_AS=$(id -un) HOME_OF_RUN=$HOME all_clients
if [ -n "$second_user" ]; then
    home="$work/home-$second_user"
    mkdir -p "$home" && chown "$second_user" "$home"
    RUN_AS=$second_user HOME_OF_RUN=$home all_clients
fi
