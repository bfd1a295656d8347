#!/usr/bin/env bash
# A small Debian root for the container tests (tests/e2e/containers.rs) and for parsing
# deploy/apparmor with AppArmor 4's parser (deploy/check.sh), made once per machine with
# debootstrap from the Debian mirror this machine's apt uses, and imported into podman as
# localhost/netbox-test:trixie. Prints the root's path. Needs root.
set -euo pipefail
cache=${NETBOX_TEST_CACHE:-/var/cache/netbox-test}
root=$cache/rootfs-trixie
image=localhost/netbox-test:trixie
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -e "$root/.complete" ]; then
    # The mirror of this machine's own Debian sources (the suite it runs), if one is named.
    mirror=$(python3 - <<'PY'
import glob, re
codename = open("/etc/os-release").read()
codename = (re.search(r"^VERSION_CODENAME=(\S+)", codename, re.M) or [None, ""])[1]
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
        if codename in fields.get("Suites", "").split() and "main" in fields.get("Components", "").split():
            print(fields.get("URIs", "").split()[0]); raise SystemExit
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        for line in open(path):
            words = line.split()
            if len(words) >= 4 and words[0] == "deb" and words[2] == codename and "main" in words[3:]:
                print(words[1]); raise SystemExit
    except FileNotFoundError:
        pass
PY
)
    rm -rf "$root.tmp"
    if ! debootstrap --variant=minbase --include=python3,curl,git,ca-certificates,apparmor \
        trixie "$root.tmp" ${mirror:+"$mirror"} >"$cache/debootstrap.log" 2>&1; then
        tail -5 "$cache/debootstrap.log" >&2
        echo "tests/container-image.sh: debootstrap failed (log: $cache/debootstrap.log)" >&2
        exit 1
    fi
    touch "$root.tmp/.complete"
    rm -rf "$root"
    mv "$root.tmp" "$root"
    podman image rm -f "$image" >/dev/null 2>&1 || true
fi
if command -v podman >/dev/null && ! podman image exists "$image" 2>/dev/null; then
    tar -C "$root" --exclude=./.complete -c . | podman import -q - "$image" >/dev/null
fi
echo "$root"
