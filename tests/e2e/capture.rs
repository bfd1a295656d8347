//! Capture (on unless `--no-capture`): programs that ignore the proxy
//! settings reach allowed hosts anyway, and nothing else. The test's servers listen on
//! ports 80 and 443, which an unprivileged test can only bind in a network namespace of
//! its own: the whole scenario (servers and `netbox -- CMD`) runs in one (`unshare -rn`,
//! loopback only), so nothing here can reach another machine. Each refusal stands beside
//! a control that passes.

use std::process::Command;

use serde_json::Value;

use crate::support::upstream::tls_identity_files;
use crate::support::{netbox_bin, read_typed_record, stderr, stdout, TestDir};

/// The servers, in the namespace: HTTPS for a.test and b.test on 127.0.0.1:443, plain
/// HTTP on 127.0.0.1:80 serving `served/` (a git repository laid out for the dumb
/// protocol among it), on 127.0.0.1:22 an SSH-like server that speaks first (its
/// banner) and writes the client's first line to `ssh-heard`, and on 127.0.0.1:8443 (a
/// port CMD could listen on itself) one that says `high port` and hangs up.
const SERVERS: &str = r#"
import http.server, ssl, sys, threading, os
root, cert, key = sys.argv[1], sys.argv[2], sys.argv[3]
os.chdir(root)
class Quiet(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
plain = http.server.ThreadingHTTPServer(("127.0.0.1", 80), Quiet)
tls = http.server.ThreadingHTTPServer(("127.0.0.1", 443), Quiet)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
tls.socket = context.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=tls.serve_forever, daemon=True).start()
import socket
ssh = socket.create_server(("127.0.0.1", 22))
def banner():
    while True:
        conn, _ = ssh.accept()
        conn.sendall(b"SSH-2.0-netbox-test\r\n")
        heard = conn.recv(200).split(b"\r\n")[0]
        with open(os.path.join(root, "..", "ssh-heard"), "wb") as f:
            f.write(heard)
        conn.close()
threading.Thread(target=banner, daemon=True).start()
high = socket.create_server(("127.0.0.1", 8443))
def greet():
    while True:
        conn, _ = high.accept()
        conn.sendall(b"high port\n")
        conn.close()
threading.Thread(target=greet, daemon=True).start()
print("serving", flush=True)
plain.serve_forever()
"#;

/// Runs `script` in the sandbox (capturing), every proxy variable unset inside, in a
/// network namespace of the test's own where the servers run. Returns the output and the
/// run's records.
fn captured_run(
    dir: &TestDir,
    allowlist: &str,
    script: &str,
) -> (std::process::Output, Vec<Value>) {
    captured_run_with(dir, allowlist, script, &[])
}

/// The same, with more environment for netbox.
fn captured_run_with(
    dir: &TestDir,
    allowlist: &str,
    script: &str,
    env: &[(&str, &str)],
) -> (std::process::Output, Vec<Value>) {
    run_in_own_netns(dir, "--quiet", allowlist, script, env)
}

/// Runs `script` in the sandbox, netbox given `flags`, every proxy variable unset inside,
/// in a network namespace of the test's own where the servers run.
pub fn run_in_own_netns(
    dir: &TestDir,
    flags: &str,
    allowlist: &str,
    script: &str,
    env: &[(&str, &str)],
) -> (std::process::Output, Vec<Value>) {
    let served = dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::write(served.join("hello"), "hello through capture\n").unwrap();
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // In the workspace, where CMD can read the CA (the sandbox's /tmp is its own).
    let (_, cert, key) = tls_identity_files(&ws, &["a.test", "b.test"]);
    let servers = dir.write("servers.py", SERVERS);
    let allow = dir.write("allow.toml", allowlist);
    let log = dir.join("events.jsonl");
    let unset = "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy \
                 NO_PROXY no_proxy npm_config_proxy npm_config_https_proxy PIP_PROXY \
                 CARGO_HTTP_PROXY GIT_HTTP_PROXY";
    let outer = format!(
        "set -e\nip link set lo up\n\
         python3 {servers} {served} {cert} {key} > {dir}/servers.out 2>&1 &\n\
         for i in $(seq 50); do grep -q serving {dir}/servers.out 2>/dev/null && break; sleep 0.1; done\n\
         cd {ws}\n\
         set +e\n\
         \"$NETBOX\" {flags} --allowlist {allow} --log {log} -- bash -c \"$CMD_SCRIPT\"\n\
         status=$?\n\
         kill %1\n\
         exit $status\n",
        servers = servers.display(),
        served = served.display(),
        cert = cert.display(),
        key = key.display(),
        dir = dir.path.display(),
        ws = ws.display(),
        allow = allow.display(),
        log = log.display(),
    );
    let out = Command::new("unshare")
        .args(["-rn", "bash", "-c", &outer])
        .env("NETBOX", netbox_bin())
        .env("CMD_SCRIPT", format!("{unset}\n{script}"))
        .envs(env.iter().copied())
        .output()
        .expect("unshare, ip and python3 are needed for the capture tests");
    let records = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(read_typed_record)
        .collect();
    (out, records)
}

/// The first probe's capture row.
fn capture_row(records: &[Value]) -> Value {
    records
        .iter()
        .filter(|r| r["type"] == "probe")
        .flat_map(|r| r["checks"].as_array().cloned().unwrap_or_default())
        .find(|c| c["name"] == "capture")
        .unwrap_or_else(|| panic!("no capture row in the probe: {records:#?}"))
}

fn allowlist(extra: &str) -> String {
    format!(
        "allow = [\"a.test:80,443\", \"127.0.0.1:80,443\"]\n{extra}\
         [hosts]\n\"a.test\" = \"127.0.0.1\"\n\"b.test\" = \"127.0.0.1\"\n"
    )
}

#[test]
fn programs_that_ignore_the_proxy_reach_allowed_hosts_and_nothing_else() {
    let dir = TestDir::new("capture");
    let ca = dir.join("ws/ca.pem");
    let script = format!(
        "curl -sS --max-time 8 --cacert {ca} https://a.test/hello\n\
         python3 -c \"import socket, ssl; c = ssl.create_default_context(cafile='{ca}'); \
         s = c.wrap_socket(socket.create_connection(('a.test', 443), timeout=8), server_hostname='a.test'); \
         s.sendall(b'GET /hello HTTP/1.0\\r\\nHost: a.test\\r\\n\\r\\n'); print(s.recv(4096).split(b'\\r\\n')[0].decode())\"\n\
         curl -sS --max-time 8 http://a.test/hello\n\
         getent hosts b.test > /dev/null; echo \"b.test lookup: $?\"\n\
         curl -sS --max-time 8 -o /dev/null http://b.test/hello 2>/dev/null; echo \"b.test: $?\"\n\
         curl -sS --max-time 8 -o /dev/null http://127.0.0.2/hello 2>/dev/null; echo \"127.0.0.2: $?\"\n\
         start=$(date +%s%N); curl -sS --max-time 8 -o /dev/null http://a.test:81/ 2>/dev/null; \
         echo \"port 81: $? in $(( ($(date +%s%N) - start) / 1000000 )) ms\"\n\
         curl -sS --max-time 8 -o /dev/null -w '%{{http_code}}' -H 'Host: b.test' http://a.test/hello; echo \" Host b.test\"\n\
         python3 -c \"import socket; s = socket.create_connection(('a.test', 80), timeout=8); \
         s.sendall(b'GET /hello HTTP/1.1\\r\\nHost: a.test\\r\\n\\r\\nGET /hello HTTP/1.1\\r\\nHost: b.test\\r\\n\\r\\n'); \
         import time; time.sleep(1); got = s.recv(65536); print(got.count(b' 200 OK'), got.count(b' 403 Forbidden'), 'kept alive')\"\n\
         python3 -c \"import socket, struct; q = bytes.fromhex('1234010000010000000000000161047465737400000100 01'.replace(' ', '')); \
         s = socket.create_connection(('127.0.0.53', 53), timeout=8); s.sendall(struct.pack('>H', len(q)) + q); \
         n = struct.unpack('>H', s.recv(2))[0]; r = s.recv(n); print('dns over tcp', r[3] & 15, r[-4:-2] == bytes([198, 18]))\"\n\
         curl -sS --max-time 8 -o /dev/null --cacert {ca} --connect-to b.test:443:a.test:443 \
         https://b.test/hello 2>/dev/null; echo \"SNI b.test: $?\"\n",
        ca = ca.display()
    );
    let (out, records) = captured_run(&dir, &allowlist(""), &script);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 11, "{text}{}", stderr(&out));
    // Controls: curl, Python's own socket and TLS, and plain HTTP, none using a proxy.
    assert_eq!(lines[0], "hello through capture", "{text}");
    assert_eq!(lines[1], "HTTP/1.1 200 OK", "{text}");
    assert_eq!(lines[2], "hello through capture", "{text}");
    // A name no rule allows does not resolve (getent: 2, not found), so curl fails to
    // resolve it (6); a loopback address is the sandbox's own, never captured: nothing
    // listens there, so it is refused (7; its record below shows the attempt logged).
    assert_eq!(lines[3], "b.test lookup: 2", "{text}");
    assert_eq!(lines[4], "b.test: 6", "{text}");
    assert_eq!(lines[5], "127.0.0.2: 7", "{text}");
    // A port with no listener refuses at once.
    let (code, took) = lines[6]
        .strip_prefix("port 81: ")
        .and_then(|r| r.split_once(" in "))
        .unwrap();
    assert_eq!(code, "7", "{text}");
    let ms: u64 = took.trim_end_matches(" ms").parse().unwrap();
    assert!(ms < 1000, "{text}");
    // Another host by the Host header, or by the ClientHello, through a.test's address.
    assert!(lines[7] == "403 Host b.test", "{text}");
    // A second request on the same connection is judged as the first was.
    assert_eq!(lines[8], "1 1 kept alive", "{text}");
    // The stub answers over TCP too, with the same session address.
    assert_eq!(lines[9], "dns over tcp 0 True", "{text}");
    assert!(
        lines[10] == "SNI b.test: 35" || lines[10] == "SNI b.test: 56",
        "{text}"
    );

    // The live probe proved capture before CMD ran.
    let capture_row = capture_row(&records);
    assert_eq!(capture_row["passed"], true, "{capture_row:#}");
    let net = |f: &dyn Fn(&Value) -> bool| {
        records
            .iter()
            .filter(|r| r["type"] == "net" && f(r))
            .count()
    };

    assert!(
        net(&|r| r["proto"] == "captured" && r["decision"] == "allow" && r["host"] == "a.test")
            >= 3
    );
    // Each lookup asks for A and AAAA, twice here: the name is one record.
    assert_eq!(
        net(&|r| r["proto"] == "dns" && r["host"] == "b.test"),
        1,
        "{records:#?}"
    );
    assert!(
        records.iter().any(|r| r["type"] == "direct_attempt"
            && r["address"] == "127.0.0.2"
            && r["port"] == 80
            && r["reason"] == "no listener"),
        "{records:#?}"
    );
    assert_eq!(net(&|r| r["host"] == "127.0.0.2"), 0, "{records:#?}");
    assert_eq!(net(&|r| r["reason"] == "host_mismatch"), 2, "{records:#?}");
    assert_eq!(
        net(&|r| r["reason"] == "server_name_mismatch"),
        1,
        "{records:#?}"
    );
}

/// Without the catch-all routes (a test build's deliberate breakage) nothing is captured:
/// the probe's capture row fails and CMD never runs. Control: the same run unbroken.
#[test]
fn the_probe_stops_a_run_whose_capture_does_not_hold() {
    let dir = TestDir::new("capture-broken");
    let (out, records) = captured_run_with(
        &dir,
        &allowlist(""),
        "echo CMD-RAN",
        &[("NETBOX_TEST_BREAK", "capture-routes")],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("CMD-RAN"));
    assert!(stderr(&out).contains("capture"), "{}", stderr(&out));
    assert_eq!(capture_row(&records)["passed"], false, "{records:#?}");
    let control = TestDir::new("capture-unbroken");
    let (out, _) = captured_run(&control, &allowlist(""), "echo CMD-RAN");
    assert_eq!(stdout(&out), "CMD-RAN\n", "{}", stderr(&out));
}

/// A capture namespace with a second interface up (a test build's deliberate breakage):
/// the probe's capture row sees it at the link's far end, and CMD never runs. Control:
/// every other attempt of the row still holds (and the previous test's unbroken run).
#[test]
fn the_probe_stops_a_run_whose_capture_link_leads_anywhere_else() {
    let dir = TestDir::new("capture-extra-link");
    let (out, records) = captured_run_with(
        &dir,
        &allowlist(""),
        "echo CMD-RAN",
        &[("NETBOX_TEST_BREAK", "capture-extra-link")],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("CMD-RAN"));
    let row = capture_row(&records);
    assert_eq!(row["passed"], false, "{row:#}");
    let failed: Vec<&Value> = row["forbidden"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["ok"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "{row:#}");
    assert!(
        failed[0]["result"]
            .as_str()
            .is_some_and(|r| r.contains("nb-extra")),
        "{row:#}"
    );
}

/// A protocol whose server speaks first, on an allowed port: nothing waits for the client
/// to say something (ssh, with its proxy setting turned off, reads the server's banner).
#[test]
fn ssh_reaches_an_allowed_server_without_a_proxy() {
    let dir = TestDir::new("capture-ssh");
    let (out, records) = captured_run(
        &dir,
        &allowlist("").replace(":80,443", ":22,80,443"),
        "ssh -v -o ProxyCommand=none -o BatchMode=yes -o StrictHostKeyChecking=no \
         -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 -p 22 a.test true 2>&1 \
         | grep -o 'remote software version netbox-test'",
    );
    assert_eq!(
        stdout(&out),
        "remote software version netbox-test\n",
        "{}",
        stderr(&out)
    );
    let heard = std::fs::read_to_string(dir.join("ssh-heard")).unwrap_or_default();
    assert!(heard.starts_with("SSH-2.0-"), "{heard:?}");
    assert!(
        records
            .iter()
            .any(|r| r["proto"] == "captured" && r["port"] == 22 && r["decision"] == "allow"),
        "{records:#?}"
    );
}

#[test]
fn git_clones_with_every_proxy_variable_unset() {
    let dir = TestDir::new("capture-git");
    crate::support::bare_repo(&dir.path, "served/app.git", "captured clone\n");
    let (out, _) = captured_run(
        &dir,
        &allowlist(""),
        "git clone -q http://a.test/app.git app && cat app/README",
    );
    assert_eq!(stdout(&out), "captured clone\n", "{}", stderr(&out));
    // Control: without the rule for a.test, the same clone cannot resolve the name.
    let other = TestDir::new("capture-git-denied");
    std::fs::create_dir_all(other.join("served")).unwrap();
    let (out, records) = captured_run(
        &other,
        "allow = [\"127.0.0.1:80\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n",
        "git clone -q http://a.test/app.git app 2>&1; echo \"clone: $?\"",
    );
    assert!(stdout(&out).ends_with("clone: 128\n"), "{}", stdout(&out));
    assert!(
        records
            .iter()
            .any(|r| r["proto"] == "dns" && r["host"] == "a.test"),
        "{records:#?}"
    );
}
