#!/usr/bin/env bash
# Not in CI: how many tries each package manager takes through netbox for a user who does
# only what netbox's messages say. Meant for a machine whose registries resolve to
# non-public addresses (split-horizon DNS, a mirror inside a company), where a first try
# is refused. Each client starts with `--allow-tool TOOL` alone; after a failed try, the
# script adds the first flag netbox's stderr names (`--private-ok`, `--allow-private
# HOST:PORT`, `--allow-tool TOOL`, `--refusal-status CODE`) and tries again, four tries at
# most. Then once more from scratch with a defaults file that says `private_ok = true`.
# Needs pip, npm, cargo (apt-get as root), a release build (cargo build --release), and
# network access to the registries this machine's tools are configured for; or, anywhere,
# run it inside tests/split-horizon.sh, which makes such a machine with local registries.
#   bash tests/first-tries.sh              # as the current user
#   sudo bash tests/first-tries.sh nobody  # also as a second user (its own HOME)
#   sudo bash tests/split-horizon.sh -- bash tests/first-tries.sh nobody
set -uo pipefail
second_user=${1:-}
cd "$(dirname "$0")/.."
netbox=${NETBOX_BIN:-"$PWD/target/$(rustc -vV | sed -n 's/^host: //p')/release/netbox"}
[ -x "$netbox" ] || { echo "build netbox first: cargo build --release" >&2; exit 1; }
if [ -n "${SPLIT_WORK:-}" ]; then
    # Inside split-horizon.sh: its registries, its packages, its settings.
    work=$SPLIT_WORK
    tool_env=(PIP_INDEX_URL="$PIP_INDEX_URL" PIP_CERT="$PIP_CERT"
        PIP_TRUSTED_HOST="pypi.mirror.test files.mirror.test"
        NPM_CONFIG_REGISTRY="$NPM_CONFIG_REGISTRY" NPM_CONFIG_CAFILE="$NPM_CONFIG_CAFILE"
        APT_CONFIG="$APT_CONFIG")
else
    work=$(mktemp -d /var/tmp/netbox-tries.XXXXXX)
    chmod 755 "$work"
    trap 'rm -rf "$work"' EXIT
    tool_env=()
fi
pip_pkg=${PIP_PKG:-six} npm_pkg=${NPM_PKG:-is-number} npm_version=1.0.0
cargo_pkg=${CARGO_PKG:-itoa} apt_pkg=${APT_PKG:-hello}
[ -n "${NPM_PKG:-}" ] || npm_version=7.0.0

# One workspace per client, each with what its client installs.
setup() {
    local ws=$1
    mkdir -p "$ws/src"
    printf '[package]\nname = "tries"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n%s = "1"\n' "$cargo_pkg" > "$ws/Cargo.toml"
    echo 'fn main() {}' > "$ws/src/main.rs"
    printf '{"name":"tries","version":"1.0.0","dependencies":{"%s":"%s"}}\n' "$npm_pkg" "$npm_version" > "$ws/package.json"
}

# The flag netbox's stderr tells the user to add, if any: the first one it names
# (`--allow-tool pip (…)` followed by a parenthesis cites where a rule came from).
next_flag() {
    grep -v '^netbox: sandbox' "$1" \
        | grep -oP -- '--private-ok|--allow-private [^ ,;)"]+|--allow-tool [a-z]++(?! \()|--refusal-status [0-9]+' \
        | head -n 1
}

# tries CLIENT TOOL [--config] -- CMD...: prints "CLIENT TRIES FLAGS".
tries() {
    local client=$1 tool=$2 config=$3; shift 4
    local ws="$work/$RUN_AS-$client${config:+-config}" flags=(--allow-tool "$tool") n rc err
    setup "$ws"
    local env=(HOME="$HOME_OF_RUN" PATH="$PATH_OF_RUN" "${tool_env[@]}")
    if [ -n "$config" ]; then
        mkdir -p "$ws.config/netbox"
        echo 'private_ok = true' > "$ws.config/netbox/config.toml"
        chmod 600 "$ws.config/netbox/config.toml"
        env+=(XDG_CONFIG_HOME="$ws.config")
    fi
    [ "$RUN_AS" = root ] || chown -R "$RUN_AS" "$ws" "$ws.config" 2>/dev/null
    local started=$SECONDS
    for n in 1 2 3 4; do
        err="$ws.err.$n"
        (cd "$ws" && as_user env -i "${env[@]}" "$netbox" "${flags[@]}" -- "$@") >/dev/null 2>"$err"
        rc=$?
        if [ "$rc" = 0 ]; then
            printf '%-8s %-6s %-7s %s try/tries, %3d s  %s\n' "$client" "$RUN_AS" "${config:+config}" "$n" \
                $((SECONDS - started)) "${flags[*]}"
            return
        fi
        local flag
        flag=$(next_flag "$err")
        if [ -z "$flag" ] || [[ " ${flags[*]} " == *" $flag "* ]]; then
            printf '%-8s %-6s %-7s failed after %s: %s\n' "$client" "$RUN_AS" "${config:+config}" "$n" \
                "$(grep -v '^netbox: sandbox' "$err" | grep -m1 -e 'netbox:' -e 'rror' || tail -n 1 "$err")"
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
        # pip's status is not the test: pyenv's shim fails an install it cannot rehash.
        tries pip pip "$config" -- sh -c 'python3 -m pip install --quiet --target deps "$1";
            test -d "deps/$1"' sh "$pip_pkg"
        tries npm npm "$config" -- npm install --no-audit --no-fund
        if as_user env -i PATH="$PATH_OF_RUN" HOME="$HOME_OF_RUN" cargo --version >/dev/null 2>&1; then
            tries cargo cargo "$config" -- cargo fetch
        else
            printf '%-8s %-6s %-7s not runnable by this user\n' cargo "$RUN_AS" "${config:+config}"
        fi
        if [ "$RUN_AS" = root ]; then
            # Its lists and downloads in the workspace: the host's are read-only inside.
            tries apt apt "$config" -- sh -c 'mkdir -p s/lists/partial c/archives/partial &&
                apt-get -qq -o Dir::State="$PWD/s" -o Dir::Cache="$PWD/c" update &&
                apt-get -qq -o Dir::State="$PWD/s" -o Dir::Cache="$PWD/c" download "$1"' sh "$apt_pkg"
        fi
    done
}

echo "client   user   config  result   flags"
RUN_AS=$(id -un) HOME_OF_RUN=$HOME PATH_OF_RUN=$PATH all_clients
if [ -n "$second_user" ]; then
    home="$work/home-$second_user"
    mkdir -p "$home" && chown "$second_user" "$home"
    # Another account cannot run what lies in root's home (pyenv, rustup).
    RUN_AS=$second_user HOME_OF_RUN=$home PATH_OF_RUN=/usr/local/bin:/usr/bin:/bin all_clients
fi
