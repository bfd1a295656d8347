//! What `--allow-tool` reads at start-up from a registry (a sparse index's `config.json`),
//! on the host, before any sandbox exists, goes out as the bridge would let a sandboxed
//! client reach it: its resolver, its routing-table check for this machine's own
//! addresses, the policy's address rules. Each scenario runs in a network namespace of the
//! test's own (`unshare -rn`, loopback only), so no packet (a DNS question included) can
//! leave: the first's holds 100.128.0.1, a public address, as a host holds its own (a
//! service listening there is the machine's, as it would be on loopback), with the test's
//! `/etc/hosts` bound over the host's in a mount namespace of its own as the host
//! resolver's answer; the second's has a DNS server of the test's.

use std::process::Command;

use crate::support::upstream::tls_identity_files;
use crate::support::{netbox_bin, stderr, stdout, TestDir};

/// The registries, HTTPS on port 443 with one certificate for both names: on 100.128.0.1
/// (this machine's own public address) the workspace's, whose `config.json` names a host
/// to allow; on 127.0.0.1 the user's own. Each request is written to `requests.log` as
/// `ADDRESS PATH`.
const REGISTRIES: &str = r#"
import http.server, os, ssl, sys, threading
d = sys.argv[1]
log = open(os.path.join(d, "requests.log"), "a", buffering=1)
DOCUMENTS = {
    "100.128.0.1": b'{"dl":"https://stolen.fetch.test/crates"}',
    "127.0.0.1": b'{"dl":"https://dl.fetch.test/crates"}',
}
class Registry(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        address = self.server.server_address[0]
        log.write("%s %s\n" % (address, self.path))
        body = DOCUMENTS[address]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(os.path.join(d, "cert.pem"), os.path.join(d, "key.pem"))
for address in DOCUMENTS:
    server = http.server.ThreadingHTTPServer((address, 443), Registry)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("serving", flush=True)
threading.Event().wait()
"#;

/// A workspace's `.cargo/config.toml` replaces crates-io by a sparse registry whose name
/// the host's resolver gives this machine's own public address, where a service listens:
/// netbox must not read its `config.json` at start-up (the bridge would refuse a sandboxed
/// client that address), and the start-up line says why. Control: the user's own registry
/// (`CARGO_REGISTRIES_GOOD_INDEX`, `--private-ok`), pinned by the allowlist to a loopback
/// server with the test's CA, is read, and the download host its `config.json` names is
/// allowed.
#[test]
fn a_workspace_registry_at_this_machines_own_address_is_not_fetched_at_start_up() {
    let dir = TestDir::new("tools-fetch-self");
    let (ca, _, _) = tls_identity_files(&dir.path, &["self.fetch.test", "good.fetch.test"]);
    let registries = dir.write("registries.py", REGISTRIES);
    dir.write(
        "hosts",
        "127.0.0.1 localhost\n::1 localhost\n100.128.0.1 self.fetch.test\n",
    );
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"good.fetch.test\" = \"127.0.0.1\"\n",
    );
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join(".cargo")).unwrap();
    std::fs::write(
        ws.join(".cargo/config.toml"),
        "[source.crates-io]\nreplace-with = \"mirror\"\n\n\
         [source.mirror]\nregistry = \"sparse+https://self.fetch.test/\"\n",
    )
    .unwrap();
    let cargo_home = dir.join("cargo-home");
    std::fs::create_dir_all(&cargo_home).unwrap();
    let script = format!(
        "set -e\n\
         ip link set lo up\n\
         ip addr add 100.128.0.1/32 dev lo\n\
         mount --bind {d}/hosts /etc/hosts\n\
         python3 {registries} {d} > {d}/registries.out 2>&1 &\n\
         for i in $(seq 100); do grep -q serving {d}/registries.out 2>/dev/null && break; sleep 0.1; done\n\
         curl -sS --max-time 5 --cacert {ca} https://self.fetch.test/config.json > {d}/control.out\n\
         cd {ws}\n\
         set +e\n\
         \"$NETBOX\" --allowlist {pins} --allow-tool cargo --private-ok --cache none \
         --log {d}/events.jsonl -- true\n\
         status=$?\n\
         kill %1\n\
         exit $status\n",
        d = dir.path.display(),
        registries = registries.display(),
        ca = ca.display(),
        ws = ws.display(),
        pins = pins.display(),
    );
    let out = Command::new("unshare")
        .args(["-rnm", "bash", "-c", &script])
        .current_dir(&dir.path)
        .env("NETBOX", netbox_bin())
        .env("CARGO_HOME", &cargo_home)
        .env("CARGO_HTTP_CAINFO", &ca)
        .env(
            "CARGO_REGISTRIES_GOOD_INDEX",
            "sparse+https://good.fetch.test/",
        )
        .output()
        .expect("unshare, ip, mount, curl and python3 are needed");
    let said = stderr(&out);
    let requests = std::fs::read_to_string(dir.join("requests.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "{}{said}\nrequests:\n{requests}",
        stdout(&out)
    );
    // Control: the host's resolver finds the name at this machine's own address, and the
    // registry there answers.
    let control = std::fs::read_to_string(dir.join("control.out")).unwrap();
    assert_eq!(control, r#"{"dl":"https://stolen.fetch.test/crates"}"#);
    // netbox never asked it: the one request there is the control's.
    let at_self: Vec<&str> = requests
        .lines()
        .filter(|l| l.starts_with("100.128.0.1 "))
        .collect();
    assert_eq!(at_self, ["100.128.0.1 /config.json"], "{said}");
    assert!(!said.contains("stolen.fetch.test"), "{said}");
    // The start-up line says why.
    assert!(
        said.contains(
            "the config.json of the index at https://self.fetch.test could not be read \
             (refused as the bridge would refuse it: self.fetch.test resolves to 100.128.0.1, \
             a this machine's own address"
        ),
        "{said}"
    );
    // Positive control: the user's own registry was read, and what it names is allowed.
    assert!(
        requests.lines().any(|l| l == "127.0.0.1 /config.json"),
        "{requests}\n{said}"
    );
    assert!(
        said.contains("dl/api in the config.json of https://good.fetch.test"),
        "{said}"
    );
}

/// In a network namespace of the test's own: a DNS server that knows one name (its A
/// record 127.0.0.1) and writes down every question, the registry on 127.0.0.1:443, and
/// `netbox bridge --dns` at that server with `--allow-tool cargo`, stopped once it listens.
/// Prints `questions NAME...`, `requests PATH...` and each line the bridge said.
const BRIDGE_DNS: &str = r#"
import http.server, os, socket, ssl, struct, subprocess, sys, threading
netbox, d = sys.argv[1], sys.argv[2]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
questions, requests = [], []

def serve_dns(sock):
    while True:
        query, peer = sock.recvfrom(4096)
        i, labels = 12, []
        while query[i]:
            labels.append(query[i + 1 : i + 1 + query[i]].decode("latin-1"))
            i += 1 + query[i]
        qtype = struct.unpack(">H", query[i + 1 : i + 3])[0]
        name = ".".join(labels).lower()
        questions.append(name)
        answers = []
        if name == "reg.fetch.test" and qtype == 1:
            answers = [b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + socket.inet_aton("127.0.0.1")]
        flags = 0x8180 if name == "reg.fetch.test" else 0x8183
        sock.sendto(query[:2] + struct.pack(">HHHHH", flags, 1, len(answers), 0, 0)
                    + query[12 : i + 5] + b"".join(answers), peer)

dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns.bind(("127.0.0.1", 0))
threading.Thread(target=serve_dns, args=(dns,), daemon=True).start()

class Registry(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        requests.append(self.path)
        body = b'{"dl":"https://dl.fetch.test/crates"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(os.path.join(d, "cert.pem"), os.path.join(d, "key.pem"))
server = http.server.ThreadingHTTPServer(("127.0.0.1", 443), Registry)
server.socket = context.wrap_socket(server.socket, server_side=True)
threading.Thread(target=server.serve_forever, daemon=True).start()

bridge = subprocess.Popen(
    [netbox, "bridge", "--listen", "127.0.0.1:0", "--log", os.path.join(d, "events.jsonl"),
     "--dns", "127.0.0.1:%d" % dns.getsockname()[1], "--allowlist", os.path.join(d, "allow.toml"),
     "--allow-tool", "cargo", "--private-ok"],
    cwd=os.path.join(d, "ws"), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE)
said = []
for line in bridge.stderr:
    said.append(line.decode("utf-8", "replace").rstrip())
    if "listening on " in said[-1]:
        break
bridge.terminate()
bridge.wait()
print("questions", " ".join(sorted(set(questions))))
print("requests", " ".join(requests))
for line in said:
    print("said", line)
"#;

/// A standalone bridge told `--dns SERVER` looks every name up there, a registry's that
/// `--allow-tool` reads at start-up included (never with the host's resolver, which would
/// ask another server and read /etc/hosts): the test's DNS server is asked for the
/// registry's name, the registry at the address it answered is read, and the download host
/// its `config.json` names is allowed.
#[test]
fn a_bridge_looks_a_registrys_name_up_at_its_own_dns_servers() {
    let dir = TestDir::new("tools-fetch-dns");
    let (ca, _, _) = tls_identity_files(&dir.path, &["reg.fetch.test"]);
    let driver = dir.write("bridge_dns.py", BRIDGE_DNS);
    dir.write("allow.toml", "allow = []\n");
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let cargo_home = dir.join("cargo-home");
    std::fs::create_dir_all(&cargo_home).unwrap();
    let out = Command::new("unshare")
        .args(["-rn", "python3"])
        .arg(&driver)
        .arg(netbox_bin())
        .arg(&dir.path)
        .env("CARGO_HOME", &cargo_home)
        .env("CARGO_HTTP_CAINFO", &ca)
        .env(
            "CARGO_REGISTRIES_MIRROR_INDEX",
            "sparse+https://reg.fetch.test/",
        )
        .output()
        .expect("unshare, ip and python3 are needed");
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    let questions = said.lines().find_map(|l| l.strip_prefix("questions "));
    assert!(
        questions.is_some_and(|q| q.split(' ').any(|n| n == "reg.fetch.test")),
        "{said}"
    );
    assert!(said.lines().any(|l| l == "requests /config.json"), "{said}");
    assert!(
        said.contains(
            "netbox bridge: cargo: 2 hosts (CARGO_REGISTRIES_MIRROR_INDEX in the environment; \
             dl/api in the config.json of https://reg.fetch.test)"
        ),
        "{said}"
    );
}
