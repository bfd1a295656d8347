#!/usr/bin/env bash
# Not in CI: a machine whose package registries resolve to private addresses (as on a
# split-horizon or company network), made inside a network and mount namespace of its own,
# then COMMAND run in it. Needs root (for the namespace), openssl, python3, dpkg-deb, tar.
#
# In the namespace:
#   - its loopback interface holds 10.77.0.1-6 too; /etc/hosts names them, /etc/resolv.conf names no
#     server that answers (nothing resolves by DNS);
#   - one HTTPS server (a test CA) answers each name from a directory of its own: a pip
#     index and its files host, an npm registry, a sparse cargo index and its download
#     host, a flat apt repository, each with one package;
#   - the environment that COMMAND gets points each tool at them, as a user's settings
#     would: PIP_INDEX_URL (and the CA), npm's registry (and the CA), a cargo source replacement in the
#     directory above the workspaces, an APT_CONFIG.
# COMMAND gets SPLIT_WORK (a directory for its workspaces, whose parent holds the cargo
# settings), and PIP_PKG, NPM_PKG, CARGO_PKG, APT_PKG (what each registry holds).
#   sudo bash tests/split-horizon.sh -- bash tests/first-tries.sh
set -euo pipefail
if [ "${1:-}" != --inside ]; then
    [ "$(id -u)" = 0 ] || { echo "split-horizon.sh needs root (a network namespace)" >&2; exit 1; }
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || { echo "usage: split-horizon.sh -- COMMAND..." >&2; exit 2; }
    exec unshare --net --mount --propagation private --fork -- bash "$0" --inside "$@"
fi
shift
top=$(mktemp -d /var/tmp/netbox-split.XXXXXX)
chmod 755 "$top"
server_pid=
cleanup() {
    [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
    rm -rf "$top"
}
trap cleanup EXIT

declare -A address=(
    [pypi.mirror.test]=10.77.0.1 [files.mirror.test]=10.77.0.2 [npm.mirror.test]=10.77.0.3
    [index.crates.test]=10.77.0.4 [dl.crates.test]=10.77.0.5 [apt.mirror.test]=10.77.0.6
)
ip link set lo up
for host in "${!address[@]}"; do
    ip addr add "${address[$host]}/32" dev lo
done
{
    echo "127.0.0.1 localhost"
    for host in "${!address[@]}"; do echo "${address[$host]} $host"; done
} > "$top/hosts"
echo "nameserver 127.0.0.1" > "$top/resolv.conf"
mount --bind "$top/hosts" /etc/hosts
mount --bind "$top/resolv.conf" /etc/resolv.conf

# A CA, and one certificate for every name.
tls="$top/tls"
mkdir -p "$tls"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=split-horizon-ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
sans=$(printf 'DNS:%s,' "${!address[@]}")
openssl req -newkey rsa:2048 -nodes -subj /CN=registries -keyout "$tls/server.key" \
    -out "$tls/server.csr" 2>/dev/null
openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
    -CAcreateserial -days 2 -out "$tls/server.pem" \
    -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "${sans%,}") 2>/dev/null
chmod 644 "$tls/ca.pem"

www="$top/www"
sha256() { sha256sum "$1" | cut -d' ' -f1; }

# pip: an index whose page names its files host.
mkdir -p "$www/pypi.mirror.test/simple/demopkg" "$www/files.mirror.test"
python3 - "$www/files.mirror.test/demopkg-1.0-py3-none-any.whl" <<'PY'
import sys, zipfile
files = {
    "demopkg/__init__.py": "GREETING = 'demopkg says hi'\n",
    "demopkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demopkg\nVersion: 1.0\n",
    "demopkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = "".join(f"{name},,\n" for name in files) + "demopkg-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr("demopkg-1.0.dist-info/RECORD", record)
PY
wheel_sha=$(sha256 "$www/files.mirror.test/demopkg-1.0-py3-none-any.whl")
echo '<html><body><a href="/simple/demopkg/">demopkg</a></body></html>' \
    > "$www/pypi.mirror.test/simple/index"
echo "<html><body><a href=\"https://files.mirror.test/demopkg-1.0-py3-none-any.whl#sha256=$wheel_sha\">demopkg-1.0-py3-none-any.whl</a></body></html>" \
    > "$www/pypi.mirror.test/simple/demopkg/index"

# npm: a packument and its tarball.
mkdir -p "$top/npm-src/package" "$www/npm.mirror.test/demo-pkg/-"
echo '{"name":"demo-pkg","version":"1.0.0","main":"index.js"}' > "$top/npm-src/package/package.json"
echo "module.exports = 'demo says hi';" > "$top/npm-src/package/index.js"
tgz="$www/npm.mirror.test/demo-pkg/-/demo-pkg-1.0.0.tgz"
tar czf "$tgz" -C "$top/npm-src" package
integrity="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
printf '{"name":"demo-pkg","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":{"name":"demo-pkg","version":"1.0.0","main":"index.js","dist":{"tarball":"https://npm.mirror.test/demo-pkg/-/demo-pkg-1.0.0.tgz","integrity":"%s"}}}}\n' \
    "$integrity" > "$www/npm.mirror.test/demo-pkg/index"

# cargo: a sparse index whose config.json names the download host.
mkdir -p "$top/crate-src/demo-1.0.0/src" "$www/index.crates.test/de/mo" "$www/dl.crates.test/crates/demo/1.0.0"
printf '[package]\nname = "demo"\nversion = "1.0.0"\nedition = "2021"\n' > "$top/crate-src/demo-1.0.0/Cargo.toml"
echo 'pub fn hi() -> &'"'"'static str { "hi" }' > "$top/crate-src/demo-1.0.0/src/lib.rs"
crate="$www/dl.crates.test/crates/demo/1.0.0/download"
tar czf "$crate" -C "$top/crate-src" demo-1.0.0
echo '{"dl":"https://dl.crates.test/crates"}' > "$www/index.crates.test/config.json"
printf '{"name":"demo","vers":"1.0.0","deps":[],"cksum":"%s","features":{},"yanked":false}\n' \
    "$(sha256 "$crate")" > "$www/index.crates.test/de/mo/demo"

# apt: a flat repository with one package.
repo="$www/apt.mirror.test"
mkdir -p "$top/deb/DEBIAN" "$repo"
control="Package: netbox-demo
Version: 1.0
Architecture: all
Maintainer: test <test@example.test>
Description: demo"
echo "$control" > "$top/deb/DEBIAN/control"
dpkg-deb --root-owner-group -Zgzip --build "$top/deb" "$repo/netbox-demo_1.0_all.deb" >/dev/null
printf '%s\nFilename: ./netbox-demo_1.0_all.deb\nSize: %s\nSHA256: %s\n' "$control" \
    "$(stat -c %s "$repo/netbox-demo_1.0_all.deb")" "$(sha256 "$repo/netbox-demo_1.0_all.deb")" \
    > "$repo/Packages"
printf 'Suite: stable\nCodename: stable\nDate: Tue, 01 Dec 2026 00:00:00 UTC\nArchitectures: all amd64\nSHA256:\n %s %s Packages\n' \
    "$(sha256 "$repo/Packages")" "$(stat -c %s "$repo/Packages")" > "$repo/Release"
chmod -R a+rX "$top"

# One server on every address: the Host header picks the directory; a directory answers
# with its file named `index`.
python3 - "$www" "$tls/server.pem" "$tls/server.key" <<'PY' &
import http.server, os, ssl, sys
www, cert, key = sys.argv[1:4]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0]
        path = os.path.normpath(os.path.join(www, host, self.path.split("?")[0].lstrip("/")))
        if not path.startswith(os.path.join(www, host)):
            return self.send_error(404)
        if os.path.isdir(path):
            path = os.path.join(path, "index")
        if not os.path.isfile(path):
            return self.send_error(404)
        body = open(path, "rb").read()
        self.send_response(200)
        kind = "text/html" if path.endswith("index") and "/simple" in path else "application/octet-stream"
        if body.startswith(b"{"):
            kind = "application/json"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", 443), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
PY
server_pid=$!
for _ in $(seq 50); do
    curl -sf --cacert "$tls/ca.pem" https://index.crates.test/config.json >/dev/null && break
    sleep 0.1
done

# What a user's settings on such a machine say.
export SPLIT_WORK="$top/work/ws"
mkdir -p "$SPLIT_WORK" "$top/work/.cargo"
chmod -R 755 "$top/work"
printf '[source.crates-io]\nreplace-with = "mirror"\n\n[source.mirror]\nregistry = "sparse+https://index.crates.test/"\n\n[http]\ncainfo = "%s"\n' \
    "$tls/ca.pem" > "$top/work/.cargo/config.toml"
mkdir -p "$top/apt/none.d"
: > "$top/apt/status"
echo "deb [trusted=yes] https://apt.mirror.test/ ./" > "$top/apt/sources.list"
printf 'Dir::Etc::sourcelist "%s/sources.list";\nDir::Etc::sourceparts "%s/none.d";\nDir::State::status "%s/status";\nAcquire::https::CAInfo "%s";\nAcquire::Languages "none";\n' \
    "$top/apt" "$top/apt" "$top/apt" "$tls/ca.pem" > "$top/apt/apt.conf"
chmod -R a+rX "$top/apt" "$top/work/.cargo"
export PIP_INDEX_URL=https://pypi.mirror.test/simple/ PIP_CERT="$tls/ca.pem"
export NPM_CONFIG_REGISTRY=https://npm.mirror.test/ NPM_CONFIG_CAFILE="$tls/ca.pem"
export APT_CONFIG="$top/apt/apt.conf"
export PIP_PKG=demopkg NPM_PKG=demo-pkg CARGO_PKG=demo APT_PKG=netbox-demo
"$@"
