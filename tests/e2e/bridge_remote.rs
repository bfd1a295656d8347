//! Going out through another proxy. `netbox --bridge URL -- CMD`: the sandbox, probe and
//! log stay here, while a separate `netbox bridge --tenants` process judges every
//! connection under the tenant the token names; the probe proves that bridge refuses the
//! canary, and fails closed when it cannot be reached, lets the canary through, or is not
//! a netbox bridge at all. `netbox bridge --upstream-proxy`: a bridge whose only way out is
//! a company proxy (tinyproxy, from Debian's packages, with Basic credentials), with
//! `--no-proxy` exceptions dialled directly.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::upstream::HttpServer;
use crate::support::{
    curl, is_probe_attempt, start_two_tenants, stderr, stdout, Bridge, Run, TestDir,
};

const SECRET_A: &str = "remote-a-Vn4Kq8Zt2Lm6Xp0R";
const SECRET_B: &str = "remote-b-Hc7Wd1Jy5Fs3Ge9T";

/// A shared bridge: team-a may reach a.test, team-b b.test, both pinned to the local
/// server at `port`; `extra_a` is more of team-a's allowlist, and team-a may also reach
/// liar.test at `liar_port` (pinned to loopback too).
fn tenants_bridge(dir: &TestDir, port: u16, extra_a: &str, liar_port: u16) -> Bridge {
    let a = format!("\"a.test:{port}\", \"liar.test:{liar_port}\"");
    let b = format!("\"b.test:{port}\"");
    for (file, rules, extra) in [("a.toml", a, extra_a), ("b.toml", b, "")] {
        dir.write(
            file,
            &format!(
                "allow_private = [{rules}]\n{extra}\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n\
                 \"b.test\" = \"127.0.0.1\"\n\"liar.test\" = \"127.0.0.1\"\n"
            ),
        );
    }
    start_two_tenants(dir, SECRET_A, SECRET_B)
}

/// A run sending its connections to `url`, with `token` in a file outside every writable
/// root and outside /tmp (so that CMD, which sees the host's /var/tmp, could name it).
fn remote_run(dir: &TestDir, url: &str, token: &str) -> (Run, TestDir) {
    let outside = TestDir::outside_tmp("remote-token");
    let file = outside.write("bridge-token", token);
    let run = Run::new(dir)
        .arg("--bridge")
        .arg(url)
        .arg("--bridge-token-file")
        .arg(file.display().to_string());
    (run, outside)
}

/// A server that answers every request with `403` and the headers a netbox bridge's
/// refusal carries: a server lying about who refused.
fn start_liar() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 403 Forbidden\r\nX-Netbox-Reason: policy\r\n\
                      Proxy-Status: netbox; error=http_request_denied; details=\"fake\"\r\n\
                      Content-Length: 5\r\nConnection: close\r\n\r\nlies\n",
                );
            });
        }
    });
    port
}

fn net_for<'a>(records: &'a [Value], host: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["type"] == "net" && r["host"] == host)
        .collect()
}

#[test]
fn a_sandbox_goes_out_through_the_remote_bridge_under_its_tenant_policy() {
    let server = HttpServer::start();
    let port = server.port();
    let liar = start_liar();
    let remote_dir = TestDir::new("remote-bridge");
    let remote = tenants_bridge(&remote_dir, port, "", liar);
    let dir = TestDir::new("remote-run");
    let (run, token_dir) = remote_run(&dir, &remote.proxy_url(), SECRET_A);
    let token_file = token_dir.join("bridge-token");
    // The secret in two pieces, so that the command line (in the log) does not hold it.
    let (head, tail) = SECRET_A.split_at(9);
    let out = run.sh(&format!(
        "curl -sS http://a.test:{port}/hello; \
         curl -sS -p http://a.test:{port}/hello; \
         curl -sS -o /dev/null -w 'forward %{{http_code}}\\n' http://b.test:{port}/hello; \
         curl -sS -p -o /dev/null http://b.test:{port}/hello 2>&1 | grep -o 'response 502'; \
         curl -sS -D - -o /dev/null http://liar.test:{liar}/ | grep -ic '^x-netbox-reason'; \
         printf 'token file: %s bytes\\n' $(wc -c < {token}); \
         s={head}; env | grep -c -- \"${{s}}{tail}\" || true",
        token = token_file.display(),
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    // The tenant's own host both ways (forward path, CONNECT); the other tenant's refused
    // both ways; a server's claim to be a refusal stripped on the way; the token file
    // empty to CMD and the token in none of its environment.
    assert_eq!(
        stdout(&out),
        "hello from upstream\nhello from upstream\nforward 502\nresponse 502\n0\n\
         token file: 0 bytes\n0\n"
    );
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), SECRET_A);

    // Here: each attempt logged, relayed or refused by the bridge at the other end, which
    // is named; the token nowhere in the log.
    let local = run.events();
    let a = net_for(&local, "a.test");
    assert_eq!(a.len(), 2, "{a:?}");
    for record in &a {
        assert_eq!(record["decision"], "allow", "{record}");
        assert_eq!(record["reason"], "relayed", "{record}");
        assert_eq!(record["via"], remote.proxy_url(), "{record}");
        assert_eq!(record["dialed"], remote.addr.to_string(), "{record}");
    }
    // The lying server's 403 went through: logged as an answer, not as a refusal.
    let lied = net_for(&local, "liar.test");
    assert!(
        lied.len() == 1 && lied[0]["decision"] == "allow" && lied[0]["status"] == 403,
        "{lied:?}"
    );
    let b = net_for(&local, "b.test");
    assert_eq!(b.len(), 2, "{b:?}");
    for record in &b {
        assert_eq!(record["decision"], "deny", "{record}");
        assert_eq!(record["reason"], "not_allowed", "{record}");
        let detail = record["detail"].as_str().unwrap();
        assert!(detail.contains("refused by the bridge at"), "{detail}");
    }
    let text = std::fs::read_to_string(&run.log).unwrap();
    let leaked: Vec<&str> = text.lines().filter(|l| l.contains(SECRET_A)).collect();
    assert!(leaked.is_empty(), "{leaked:?}");
    let start = local.iter().find(|r| r["type"] == "session_start").unwrap();
    assert_eq!(start["bridge"], remote.proxy_url(), "{start}");
    let probe = run.probe();
    assert_eq!(probe["passed"], true, "{probe}");

    // There: the same attempts, judged under team-a's session, and the probe's canary
    // refused by policy.
    let there = remote.events(6);
    let session = |r: &&Value| r["session"] == "e2e/team-a";
    assert!(
        net_for(&there, "a.test").iter().all(session) && net_for(&there, "a.test").len() == 2,
        "{there:?}"
    );
    let refused = net_for(&there, "b.test");
    assert_eq!(refused.len(), 2, "{there:?}");
    assert!(refused
        .iter()
        .all(|r| session(r) && r["decision"] == "deny"));
    assert!(
        there
            .iter()
            .any(|r| is_probe_attempt(r) && r["reason"] == "not_allowed"),
        "{there:?}"
    );
}

#[test]
fn the_probe_fails_closed_unless_the_remote_bridge_refuses_the_canary_itself() {
    let server = HttpServer::start();
    let port = server.port();
    // team-a's allowlist lets the canary through (it then fails to resolve there); team-b's
    // does not.
    let remote_dir = TestDir::new("remote-canary");
    let remote = tenants_bridge(
        &remote_dir,
        port,
        "allow = [\"netbox-probe-canary.invalid:443\"]",
        9,
    );
    let nobody_listens = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    // Not a proxy at all: a web server that answers 200 to anything, CONNECT included.
    let not_netbox = format!("http://{}", server.addr);
    let url = remote.proxy_url();
    let cases = [
        ("unreachable", nobody_listens.as_str(), SECRET_B),
        ("allows the canary", url.as_str(), SECRET_A),
        ("wrong token", url.as_str(), "not-a-tenant-token"),
        ("not a netbox bridge", not_netbox.as_str(), SECRET_B),
    ];
    for (case, url, token) in cases {
        let dir = TestDir::new("remote-canary-run");
        let (run, _token) = remote_run(&dir, url, token);
        let out = run.sh("touch ran");
        assert_eq!(out.status.code(), Some(125), "{case}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("live probe failed: egress policy (CONNECT netbox-probe-canary"),
            "{case}: {said}"
        );
        assert!(!run.workspace.join("ran").exists(), "{case}: CMD ran");
    }
    // A local deny rule refusing the canary would prove nothing of the bridge there: the
    // probe takes a canary the rules pass on, and with none left, nothing runs.
    let dir = TestDir::new("remote-canary-run");
    let (run, _token) = remote_run(&dir, &url, SECRET_A);
    let run = run.args_from(&["--deny", "*.invalid"]);
    let out = run.sh("touch ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("--deny rules cover the probe's .invalid canaries"));
    assert!(!run.workspace.join("ran").exists());
    // team-a lets only the first canary through: denying it here, the probe asks the
    // bridge about the second, which team-a's policy refuses, and passes.
    let (run, _token) = remote_run(&dir, &url, SECRET_A);
    let out = run
        .args_from(&["--deny", "netbox-probe-canary.invalid"])
        .sh("true");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(remote
        .events(1)
        .iter()
        .any(|r| r["host"] == "canary.netbox-probe.invalid" && r["reason"] == "not_allowed"));

    // The positive control: the same bridge, as the tenant whose policy refuses the
    // canary, passes, and CMD runs.
    let dir = TestDir::new("remote-canary-run");
    let (run, _token) = remote_run(&dir, &remote.proxy_url(), SECRET_B);
    let out = run.sh("touch ran");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(run.workspace.join("ran").exists());
}

#[test]
fn local_rules_do_not_go_with_a_remote_bridge() {
    let dir = TestDir::new("remote-usage");
    for extra in [
        vec!["--allow", "a.test"],
        vec!["--allow-private", "a.test:80"],
    ] {
        let (run, _token) = remote_run(&dir, "http://127.0.0.1:9", SECRET_A);
        let out = run.args_from(&extra).sh("true");
        assert_eq!(out.status.code(), Some(125));
        let said = stderr(&out);
        assert!(said.contains("does not go with --bridge"), "{said}");
        assert_eq!(said.lines().count(), 1, "{said}");
    }
    for (url, why) in [
        (
            "socks5://127.0.0.1:9",
            "give the proxy as http://HOST:PORT or https://HOST:PORT",
        ),
        (
            "http://user:pw@127.0.0.1:9",
            "credentials do not go in the URL",
        ),
    ] {
        let (run, _token) = remote_run(&dir, url, SECRET_A);
        let out = run.sh("true");
        assert_eq!(out.status.code(), Some(125));
        assert!(stderr(&out).contains(why), "{}", stderr(&out));
        assert!(!stderr(&out).contains("pw@"), "{}", stderr(&out));
    }
    // A token file CMD could replace for the next run (inside the workspace, or reached
    // through a link there) is refused.
    let run = Run::new(&dir);
    let inside = run.workspace.join("token");
    std::fs::write(&inside, SECRET_A).unwrap();
    let outside = TestDir::outside_tmp("remote-token");
    let target = outside.write("token", SECRET_A);
    let link = run.workspace.join("token-link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for file in [&inside, &link] {
        let out = Run::new(&dir)
            .args_from(&["--bridge", "http://127.0.0.1:9", "--bridge-token-file"])
            .arg(file.display().to_string())
            .sh("true");
        assert_eq!(out.status.code(), Some(125));
        let said = stderr(&out);
        assert!(said.contains("inside the writable root"), "{said}");
    }
    // Nor a file with a second name, which could lie anywhere, a root included.
    let linked = outside.write("linked-token", SECRET_A);
    std::fs::hard_link(&linked, outside.join("second-name")).unwrap();
    let out = Run::new(&dir)
        .args_from(&["--bridge", "http://127.0.0.1:9", "--bridge-token-file"])
        .arg(linked.display().to_string())
        .sh("true");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("has other names (hard links)"),
        "{}",
        stderr(&out)
    );
}

/// tinyproxy on loopback, asking for Basic credentials, logging each request to stdout.
struct CorpProxy {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl CorpProxy {
    fn start(dir: &TestDir) -> CorpProxy {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let conf = dir.write(
            "tinyproxy.conf",
            &format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\n\
                 BasicAuth corp s3cret-pass\nLogLevel Connect\n"
            ),
        );
        let mut child = Command::new("tinyproxy")
            .args(["-d", "-c"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("tinyproxy (apt-get install tinyproxy)");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "tinyproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        CorpProxy { child, port, lines }
    }

    /// The requests it was asked, as its log says them (`GET http://…`, `CONNECT …`).
    fn requests(&self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(200));
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.split("Request (file descriptor ").nth(1))
            .filter_map(|l| l.split_once("): ").map(|(_, r)| r.to_owned()))
            .collect()
    }
}

impl Drop for CorpProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_bridge_goes_out_through_a_company_proxy_and_dials_the_exceptions_itself() {
    let server = HttpServer::start();
    let direct = HttpServer::start();
    let (port, direct_port) = (server.port(), direct.port());
    let corp = CorpProxy::start(&TestDir::new("corp-proxy"));
    let dir = TestDir::new("chained-bridge");
    let credentials = dir.write("corp-credentials", "corp:s3cret-pass\n");
    let allowlist = format!(
        "allow = [\"d.test:{port}\"]\n\
         allow_private = [\"a.test:{port}\", \"c.test:{direct_port}\"]\n\
         [hosts]\n\"a.test\" = \"127.0.0.1\"\n\"c.test\" = \"127.0.0.1\"\n"
    );
    let bridge = Bridge::start(
        &dir,
        &allowlist,
        &[
            "--upstream-proxy",
            &format!("http://127.0.0.1:{}", corp.port),
            "--upstream-proxy-token-file",
            &credentials.display().to_string(),
            "--no-proxy",
            "c.test",
        ],
    );
    let proxy = bridge.proxy_url();
    let get = |url: &str, tunnel: bool| {
        let mut args = vec!["-sS", "-x", &proxy, url];
        if tunnel {
            args.push("-p");
        }
        let out = curl(&args);
        (out.status.success(), stdout(&out))
    };
    // Through the company proxy: plain HTTP in absolute form, and a tunnel, each for the
    // address the policy pins a.test to (the company proxy cannot know that name).
    let hello = (true, "hello from upstream\n".to_owned());
    assert_eq!(get(&format!("http://a.test:{port}/hello"), false), hello);
    assert_eq!(get(&format!("http://a.test:{port}/hello"), true), hello);
    // The exception, dialled directly.
    assert_eq!(
        get(&format!("http://c.test:{direct_port}/hello"), false),
        hello
    );
    // A name with no pin goes as it is, and the company proxy cannot resolve it: its own
    // failure, said as the upstream proxy's.
    let (ok, _) = get(&format!("http://d.test:{port}/hello"), true);
    assert!(!ok);
    // Not allowed here: never reaches the company proxy.
    let (ok, _) = get(&format!("http://e.test:{port}/hello"), true);
    assert!(!ok);

    let asked = corp.requests();
    let want = [
        format!("GET http://127.0.0.1:{port}/hello HTTP/1.1"),
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1"),
        format!("CONNECT d.test:{port} HTTP/1.1"),
    ];
    assert_eq!(asked, want, "{:?}", corp.lines.lock().unwrap());

    let via = format!("http://127.0.0.1:{}", corp.port);
    let events = bridge.events(5);
    let a = net_for(&events, "a.test");
    assert_eq!(a.len(), 2, "{events:?}");
    assert!(a
        .iter()
        .all(|r| r["via"] == via && r["decision"] == "allow"));
    let c = net_for(&events, "c.test");
    assert!(c.len() == 1 && c[0]["via"].is_null() && c[0]["decision"] == "allow");
    let d = net_for(&events, "d.test");
    assert!(
        d.len() == 1 && d[0]["reason"] == "upstream_proxy" && d[0]["via"] == via,
        "{d:?}"
    );
    let e = net_for(&events, "e.test");
    assert!(e.len() == 1 && e[0]["reason"] == "not_allowed" && e[0]["via"].is_null());
    let text = std::fs::read_to_string(&bridge.log).unwrap();
    assert!(!text.contains("s3cret"));

    // Credentials the company proxy refuses: its 407 is said as the upstream proxy's, not
    // passed on as if the client had to answer it.
    let wrong_dir = TestDir::new("chained-bridge-wrong");
    let wrong = wrong_dir.write("corp-credentials", "corp:wrong\n");
    let refused = Bridge::start(
        &wrong_dir,
        &allowlist,
        &[
            "--upstream-proxy",
            &via,
            "--upstream-proxy-token-file",
            &wrong.display().to_string(),
        ],
    );
    let out = curl(&[
        "-sS",
        "-p",
        "-x",
        &refused.proxy_url(),
        &format!("http://a.test:{port}/hello"),
    ]);
    assert!(stderr(&out).contains("response 502"), "{}", stderr(&out));
    let record = refused.event_for("a.test");
    assert_eq!(record["reason"], "upstream_proxy", "{record}");
    // tinyproxy says 401 where RFC 9110 has a proxy say 407.
    let detail = record["detail"].as_str().unwrap();
    assert!(detail.contains("answered 401"), "{record}");
}
