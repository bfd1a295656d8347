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

/// A registry on 127.0.0.1:443 (HTTPS, the test's certificate) that writes each request to
/// `requests.log` as `HOST PATH` and answers a `config.json` naming `dl-LABEL.fetch.test`,
/// LABEL the first label of the name it was asked for.
const NAMED_REGISTRY: &str = r#"
import http.server, os, ssl, sys, threading
d = sys.argv[1]
log = open(os.path.join(d, "requests.log"), "a", buffering=1)
class Registry(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        host = self.headers.get("Host", "")
        log.write("%s %s\n" % (host, self.path))
        body = ('{"dl":"https://dl-%s.fetch.test/crates"}' % host.split(".")[0].lower()).encode()
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
print("serving", flush=True)
threading.Event().wait()
"#;

/// The `net` records of `proto` `fetch` in an event log.
fn fetch_records(log: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["type"] == "net" && r["proto"] == "fetch")
        .collect()
}

/// A workspace's `.cargo/config.toml` names registries at loopback that the user's own
/// allowlist lets those names reach (`allow_private`): in other spellings of a name the
/// allowlist pins (`INTERNAL.fetch.test`, `internal.fetch.test.`), and a name it does not
/// pin, found in /etc/hosts. netbox reads none of them at start-up (a workspace file's
/// registry is read only at a public address, and a pinned name not at all, whatever its
/// spelling), and the start-up line says why for each. Control: the user's own registry
/// (`CARGO_REGISTRIES_OWN_INDEX`) at the same loopback server, opened by the same kind of
/// rule, is read, the download host it names is allowed, and its fetch is in the event log.
#[test]
fn a_workspace_registry_is_read_at_no_address_the_users_rules_open() {
    let dir = TestDir::new("tools-fetch-private");
    let (ca, _, _) = tls_identity_files(
        &dir.path,
        &["internal.fetch.test", "hosts.fetch.test", "own.fetch.test"],
    );
    let registry = dir.write("registry.py", NAMED_REGISTRY);
    dir.write(
        "hosts",
        "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 hosts.fetch.test\n",
    );
    let allow = dir.write(
        "allow.toml",
        "allow_private = [\"internal.fetch.test:443\", \"hosts.fetch.test:443\", \
         \"own.fetch.test:443\"]\n\
         [hosts]\n\"internal.fetch.test\" = \"127.0.0.1\"\n\"own.fetch.test\" = \"127.0.0.1\"\n",
    );
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join(".cargo")).unwrap();
    std::fs::write(
        ws.join(".cargo/config.toml"),
        "[registries.upper]\nindex = \"sparse+https://INTERNAL.fetch.test/\"\n\
         [registries.dot]\nindex = \"sparse+https://internal.fetch.test./\"\n\
         [registries.hosts]\nindex = \"sparse+https://hosts.fetch.test/\"\n",
    )
    .unwrap();
    let cargo_home = dir.join("cargo-home");
    std::fs::create_dir_all(&cargo_home).unwrap();
    let script = format!(
        "set -e\n\
         ip link set lo up\n\
         mount --bind {d}/hosts /etc/hosts\n\
         python3 {registry} {d} > {d}/registry.out 2>&1 &\n\
         for i in $(seq 100); do grep -q serving {d}/registry.out 2>/dev/null && break; sleep 0.1; done\n\
         curl -sS --max-time 5 --cacert {ca} https://hosts.fetch.test/control > {d}/control.out\n\
         cd {ws}\n\
         set +e\n\
         \"$NETBOX\" --allowlist {allow} --allow-tool cargo --cache none \
         --log {d}/events.jsonl -- true\n\
         status=$?\n\
         kill %1\n\
         exit $status\n",
        d = dir.path.display(),
        registry = registry.display(),
        ca = ca.display(),
        ws = ws.display(),
        allow = allow.display(),
    );
    let out = Command::new("unshare")
        .args(["-rnm", "bash", "-c", &script])
        .current_dir(&dir.path)
        .env("NETBOX", netbox_bin())
        .env("CARGO_HOME", &cargo_home)
        .env("CARGO_HTTP_CAINFO", &ca)
        .env(
            "CARGO_REGISTRIES_OWN_INDEX",
            "sparse+https://own.fetch.test/",
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
    // Control: the host's resolver finds hosts.fetch.test at the loopback registry, which
    // answers there.
    let control = std::fs::read_to_string(dir.join("control.out")).unwrap();
    assert_eq!(control, r#"{"dl":"https://dl-hosts.fetch.test/crates"}"#);
    // netbox asked the user's registry alone.
    let asked: Vec<&str> = requests
        .lines()
        .filter(|l| !l.ends_with(" /control"))
        .collect();
    assert_eq!(asked, ["own.fetch.test /config.json"], "{said}");
    for workspace_named in ["dl-internal", "dl-hosts"] {
        assert!(!said.contains(workspace_named), "{said}");
    }
    for host in [
        "https://INTERNAL.fetch.test",
        "https://internal.fetch.test.",
    ] {
        assert!(
            said.contains(&format!(
                "the config.json of the index at {host} could not be read (its name is one \
                 the allowlist pins, and a workspace file names it)"
            )),
            "{host}: {said}"
        );
    }
    assert!(
        said.contains(
            "the config.json of the index at https://hosts.fetch.test could not be read \
             (hosts.fetch.test resolves to 127.0.0.1, a loopback address, and a registry a \
             workspace file names is read only at a public address)"
        ),
        "{said}"
    );
    // Positive control: the user's own registry was read, and what it names is allowed.
    assert!(
        said.contains("dl/api in the config.json of https://own.fetch.test"),
        "{said}"
    );
    // Both fetches netbox made are in the event log, as the run's session's.
    let session = std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["type"] == "session_start")
        .map(|r| r["session"].clone())
        .unwrap();
    let fetched = fetch_records(&dir.join("events.jsonl"));
    let seen: Vec<(&str, &str, &str)> = fetched
        .iter()
        .map(|r| {
            assert_eq!(r["session"], session, "{r}");
            (
                r["host"].as_str().unwrap_or(""),
                r["decision"].as_str().unwrap_or(""),
                r["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("hosts.fetch.test", "deny", "non_public_address"),
            ("own.fetch.test", "allow", "allowed_by_rule")
        ],
        "{fetched:?}"
    );
}

/// In a network namespace of the test's own: the registry of `NAMED_REGISTRY` on
/// 127.0.0.1:443, and `netbox bridge` on 127.0.0.1:PORT (a port found free) with the
/// test's allowlist, which names `tools = ["cargo"]`. Once it listens, a SIGHUP makes it
/// read its policy and ask the tools again; once it says so, it is stopped. Prints
/// `port PORT`, then each line the bridge said.
const BRIDGE_RELOAD: &str = r#"
import os, signal, socket, subprocess, sys, time
netbox, d = sys.argv[1], sys.argv[2]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
registry = subprocess.Popen(["python3", os.path.join(d, "registry.py"), d], stdout=subprocess.PIPE)
registry.stdout.readline()
free = socket.socket()
free.bind(("127.0.0.1", 0))
port = free.getsockname()[1]
free.close()
print("port", port, flush=True)
with open(os.path.join(d, "allow.toml"), "w") as f:
    f.write('tools = ["cargo"]\n'
            'allow_private = ["reg.fetch.test:%d", "other.fetch.test:443"]\n'
            '[hosts]\n"reg.fetch.test" = "127.0.0.1"\n"other.fetch.test" = "127.0.0.1"\n' % port)
env = dict(os.environ, CARGO_REGISTRIES_SELF_INDEX="sparse+https://reg.fetch.test:%d/" % port)
bridge = subprocess.Popen(
    [netbox, "bridge", "--listen", "127.0.0.1:%d" % port, "--log", os.path.join(d, "events.jsonl"),
     "--allowlist", os.path.join(d, "allow.toml")],
    cwd=os.path.join(d, "ws"), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE)
said = []
for line in bridge.stderr:
    said.append(line.decode("utf-8", "replace").rstrip())
    if "listening on " in said[-1]:
        bridge.send_signal(signal.SIGHUP)
    if "policies reloaded" in said[-1] or "reload refused" in said[-1]:
        break
bridge.terminate()
bridge.wait()
registry.terminate()
for line in said:
    print("said", line)
"#;

/// A standalone bridge asks its tools again at each reload, while it listens: a registry
/// the user's settings name at the bridge's own listener (a name pinned to 127.0.0.1 and
/// the listener's port, which the user's `allow_private` rule lets it reach) is not
/// fetched there, as a client's CONNECT to it would be refused, and the refusal is in the
/// event log. No connection comes in to the bridge at all. Control: the other registry
/// the user's settings name, at the loopback server, is read at start and again at the
/// reload, each read logged.
#[test]
fn a_reloading_bridge_fetches_nothing_from_its_own_listener() {
    let dir = TestDir::new("tools-fetch-reload");
    let (ca, _, _) = tls_identity_files(&dir.path, &["reg.fetch.test", "other.fetch.test"]);
    dir.write("registry.py", NAMED_REGISTRY);
    let driver = dir.write("bridge_reload.py", BRIDGE_RELOAD);
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
            "CARGO_REGISTRIES_OTHER_INDEX",
            "sparse+https://other.fetch.test/",
        )
        .output()
        .expect("unshare, ip and python3 are needed");
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert!(said.contains("policies reloaded (signal)"), "{said}");
    let port = said
        .lines()
        .find_map(|l| l.strip_prefix("port "))
        .unwrap()
        .to_owned();
    let log = dir.join("events.jsonl");
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // Nothing connected to the bridge: every network record is one of netbox's own fetches.
    let clients: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["type"] == "net" && r["proto"] != "fetch")
        .collect();
    assert!(clients.is_empty(), "{clients:?}\n{said}");
    let fetched = fetch_records(&log);
    let at = |host: &str| -> Vec<&serde_json::Value> {
        fetched.iter().filter(|r| r["host"] == host).collect()
    };
    // At start nothing listened there yet; at the reload, the listener is the bridge's.
    let own = at("reg.fetch.test");
    assert_eq!(own.len(), 2, "{fetched:?}");
    let refused = own[1];
    assert_eq!(refused["decision"], "deny", "{refused}");
    assert!(
        refused["detail"].as_str().is_some_and(|d| d.contains(&format!(
            "127.0.0.1:{port} is this bridge's own listener"
        ))),
        "{refused}"
    );
    assert_eq!(refused["dialed"], serde_json::Value::Null, "{refused}");
    // Control: the other registry was read at start and at the reload.
    let other = at("other.fetch.test");
    let decisions: Vec<&serde_json::Value> = other.iter().map(|r| &r["decision"]).collect();
    assert_eq!(decisions, ["allow", "allow"], "{fetched:?}");
    let requests = std::fs::read_to_string(dir.join("requests.log")).unwrap_or_default();
    assert_eq!(
        requests.lines().collect::<Vec<_>>(),
        [
            "other.fetch.test /config.json",
            "other.fetch.test /config.json"
        ],
        "{said}"
    );
}

/// A server on 100.128.0.2:443 that takes every connection and never answers, writing
/// `ACCEPT` to `accepted.log` for each.
const SILENT_REGISTRY: &str = r#"
import os, socket, sys, threading
d = sys.argv[1]
log = open(os.path.join(d, "accepted.log"), "a", buffering=1)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("100.128.0.2", 443))
server.listen(16)
print("serving", flush=True)
held = []
while True:
    connection, _ = server.accept()
    held.append(connection)
    log.write("ACCEPT\n")
"#;

/// A workspace's `.cargo/config.toml` names four sparse registries at a public address
/// (not this machine's: another network namespace of the test's, behind a veth pair) that
/// takes connections and never answers TLS. Each fetch may take 3 s; all of one start-up's
/// together 5 s, so netbox starts CMD within that (it took 4 x 3 s before), and the
/// start-up line says which were not asked. Control: the registry was reached (it accepted
/// the fetches that were made), and each fetch made is in the event log.
#[test]
fn the_fetches_of_a_start_up_share_one_deadline() {
    let dir = TestDir::new("tools-fetch-slow");
    let silent = dir.write("silent.py", SILENT_REGISTRY);
    dir.write(
        "hosts",
        "127.0.0.1 localhost\n::1 localhost\n100.128.0.2 a.fetch.test b.fetch.test \
         c.fetch.test d.fetch.test\n",
    );
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join(".cargo")).unwrap();
    let registries: String = ["a", "b", "c", "d"]
        .iter()
        .map(|r| format!("[registries.{r}]\nindex = \"sparse+https://{r}.fetch.test/\"\n"))
        .collect();
    std::fs::write(ws.join(".cargo/config.toml"), registries).unwrap();
    let cargo_home = dir.join("cargo-home");
    std::fs::create_dir_all(&cargo_home).unwrap();
    // The registry's namespace is a process of its own (`unshare -n`), to which one end of
    // the veth pair moves once it has written its pid.
    let script = format!(
        "set -e\n\
         ip link set lo up\n\
         mount --bind {d}/hosts /etc/hosts\n\
         ip link add nb0 type veth peer name reg0\n\
         unshare -n sh -c 'echo $$ > {d}/registry.pid\n\
           while ! ip link show reg0 > /dev/null 2>&1; do sleep 0.05; done\n\
           ip link set lo up; ip addr add 100.128.0.2/24 dev reg0; ip link set reg0 up\n\
           exec python3 {silent} {d}' > {d}/silent.out 2>&1 &\n\
         for i in $(seq 100); do [ -s {d}/registry.pid ] && break; sleep 0.05; done\n\
         ip link set reg0 netns $(cat {d}/registry.pid)\n\
         ip addr add 100.128.0.1/24 dev nb0\n\
         ip link set nb0 up\n\
         for i in $(seq 100); do grep -q serving {d}/silent.out 2>/dev/null && break; sleep 0.1; done\n\
         cd {ws}\n\
         set +e\n\
         started=$(date +%s%N)\n\
         \"$NETBOX\" --allow-tool cargo --cache none --log {d}/events.jsonl -- true\n\
         status=$?\n\
         echo \"took_ms $(( ($(date +%s%N) - started) / 1000000 ))\"\n\
         kill %1\n\
         exit $status\n",
        d = dir.path.display(),
        silent = silent.display(),
        ws = ws.display(),
    );
    let out = Command::new("unshare")
        .args(["-rnm", "bash", "-c", &script])
        .current_dir(&dir.path)
        .env("NETBOX", netbox_bin())
        .env("CARGO_HOME", &cargo_home)
        .output()
        .expect("unshare, ip, mount and python3 are needed");
    let said = stderr(&out);
    let printed = stdout(&out);
    assert!(out.status.success(), "{printed}{said}");
    let took_ms: u64 = printed
        .lines()
        .find_map(|l| l.strip_prefix("took_ms "))
        .and_then(|t| t.parse().ok())
        .unwrap();
    // 5 s of fetches, and the run itself; 12 s before.
    assert!(took_ms < 8_000, "netbox took {took_ms} ms: {said}");
    // Control: the fetches went out, to a registry that held them.
    let accepted = std::fs::read_to_string(dir.join("accepted.log")).unwrap_or_default();
    assert!(accepted.lines().count() >= 2, "{accepted}\n{said}");
    assert!(
        said.contains(
            "the config.json of the index at https://a.fetch.test could not be read (no \
             answer within 3s)"
        ),
        "{said}"
    );
    assert!(
        said.contains(
            "the config.json of the index at https://d.fetch.test could not be read (not \
             asked: the start-up's fetches took the 5s they may take together)"
        ),
        "{said}"
    );
    // What was asked is in the event log: every fetch made timed out after connecting.
    let fetched = fetch_records(&dir.join("events.jsonl"));
    assert_eq!(fetched.len(), accepted.lines().count(), "{fetched:?}");
    for record in &fetched {
        assert_eq!(record["reason"], "upstream_timeout", "{record}");
        assert_eq!(record["dialed"], "100.128.0.2:443", "{record}");
    }
}
