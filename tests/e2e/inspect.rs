//! Inspection: a tunnel an `[[http]]` rule covers is opened up by the bridge,
//! with a certificate from a session CA made in memory, which CMD trusts only through
//! the trust bundle netbox lays in the sandbox. Requests inside are judged by method,
//! path and Host; a refusal is a 403 inside TLS, and every request is logged. Every
//! refusal stands beside a control that passes, and clients run with no CA flag and no
//! CA variable of the test's.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::upstream::{pattern, HttpServer};
use crate::support::{sha256_hex, stderr, stdout, Run, TestDir};

/// A policy for `a.test` (pinned to loopback, where the server is) on the server's port,
/// a TLS port, with `http` as its `[[http]]` table's extra lines.
fn policy(port: u16, http: &str) -> String {
    format!(
        "allow = [\"127.0.0.1:{port}\"]\ntls_ports = [{port}]\n\
         [hosts]\n\"a.test\" = \"127.0.0.1\"\n\"b.test\" = \"127.0.0.1\"\n\
         [[http]]\nhost = \"a.test:{port}\"\n{http}"
    )
}

/// An inspecting run: the allowlist `policy`, the test CA trusted for upstreams.
fn inspecting(dir: &TestDir, server: &HttpServer, policy: &str) -> Run {
    let allow = dir.write("allow.toml", policy);
    Run::new(dir).args_from(&[
        "--allowlist",
        allow.to_str().unwrap(),
        "--upstream-ca",
        server.ca.as_ref().unwrap().to_str().unwrap(),
    ])
}

/// The run's records of requests inside inspected tunnels.
fn inspected(run: &Run) -> Vec<Value> {
    run.events()
        .into_iter()
        .filter(|e| e["type"] == "net" && e["proto"] == "inspected")
        .collect()
}

/// No CA variable reaches CMD from the test: what it trusts is netbox's doing.
const UNSET_CA_VARS: &str = "unset SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE \
                             NODE_EXTRA_CA_CERTS GIT_SSL_CAINFO PIP_CERT CARGO_HTTP_CAINFO";

#[test]
fn requests_in_an_inspected_tunnel_are_judged_by_method_path_and_host() {
    let dir = TestDir::new("inspect-rules");
    let server = HttpServer::start_tls(&dir.path, &["a.test", "b.test"]);
    let p = server.port();
    let run = inspecting(
        &dir,
        &server,
        &policy(
            p,
            "methods = [\"GET\", \"HEAD\"]\npaths = [\"/bytes/\", \"/hello\"]\n",
        ),
    );
    let code = "curl -sS --max-time 8 -o /dev/null -w '%{http_code} %header{x-netbox-reason}\\n'";
    let out = run.sh(&format!(
        "curl -sS --max-time 8 https://a.test:{p}/bytes/1048576 | sha256sum | cut -d' ' -f1\n\
         {code} https://a.test:{p}/hello\n\
         {code} -X POST --data x https://a.test:{p}/sha256\n\
         {code} https://a.test:{p}/headers\n\
         {code} https://a.test:{p}/bytes/../headers --path-as-is\n\
         {code} -H 'Host: b.test:{p}' https://a.test:{p}/hello\n         {code} -x \"$ALL_PROXY\" -X POST --data x https://a.test:{p}/sha256\n         {code} -x \"$ALL_PROXY\" https://a.test:{p}/hello\n"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    // Control: an allowed GET passes, byte for byte.
    assert_eq!(lines[0], sha256_hex(&pattern(1 << 20)), "{}", stderr(&out));
    assert_eq!(lines[1], "200 ");
    // POST is not among the methods; /headers not among the paths; a dot segment is not
    // guessed at; another Host is another site.
    assert_eq!(lines[2], "403 http-rule");
    assert_eq!(lines[3], "403 http-rule");
    assert_eq!(lines[4], "403 http-rule");
    assert_eq!(lines[5], "403 http-rule");
    // The same through SOCKS5, refused and allowed.
    assert_eq!(lines[6], "403 http-rule");
    assert_eq!(lines[7], "200 ");

    let records = inspected(&run);
    let find = |method: &str, path: &str| {
        records
            .iter()
            .find(|e| e["method"] == method && e["path"] == path)
            .unwrap_or_else(|| panic!("no record of {method} {path}: {records:#?}"))
            .clone()
    };
    let get = find("GET", "/bytes/1048576");
    assert_eq!(get["decision"], "allow");
    assert_eq!(get["status"], 200);
    assert_eq!(get["bytes_down"], 1 << 20);
    assert_eq!(get["host"], "a.test");
    let post = find("POST", "/sha256");
    assert_eq!(post["decision"], "deny");
    assert_eq!(post["reason"], "method_not_allowed");
    assert_eq!(post["status"], 403);
    assert_eq!(find("GET", "/headers")["reason"], "path_not_allowed");
    assert_eq!(
        find("GET", "/bytes/../headers")["reason"],
        "path_not_allowed"
    );
    let host = records
        .iter()
        .filter(|e| e["reason"] == "host_mismatch")
        .count();
    assert_eq!(host, 1, "{records:#?}");

    // `netbox log` counts the requests apart from the tunnels that carried them.
    let out = Command::new(crate::support::netbox_bin())
        .arg("log")
        .arg(&run.log)
        .output()
        .unwrap();
    let summary = stdout(&out);
    assert!(
        summary.contains("8 requests inspected, 5 refused"),
        "{summary}"
    );
}

#[test]
fn git_clones_over_an_inspected_tunnel_trusting_only_what_netbox_laid() {
    let dir = TestDir::new("inspect-git");
    let root = dir.join("served");
    std::fs::create_dir_all(&root).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["a.test"], root.clone());
    let p = server.port();
    crate::support::bare_repo(&dir.path, "served/app.git", "through the inspector\n");

    let run = inspecting(&dir, &server, &policy(p, "methods = [\"GET\"]\n"));
    // With the variables netbox sets, then with none (the store files alone).
    let out = run.sh(&format!(
        "git clone -q https://a.test:{p}/app.git one && cat one/README && \
         {UNSET_CA_VARS} && git clone -q https://a.test:{p}/app.git two && cat two/README"
    ));
    assert_eq!(
        stdout(&out),
        "through the inspector\nthrough the inspector\n",
        "{}",
        stderr(&out)
    );
    let records = inspected(&run);
    assert!(
        records
            .iter()
            .any(|e| e["method"] == "GET" && e["path"] == "/app.git/HEAD" && e["status"] == 200),
        "{records:#?}"
    );
    // Control: the same clone with TLS left alone (no inspection) needs the server's own
    // CA, which CMD does not have: the trust came from netbox's bundle.
    let plain = dir.write(
        "plain.toml",
        &format!(
            "allow = [\"a.test:{p}\", \"127.0.0.1:{p}\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n"
        ),
    );
    let out = Run::new(&dir)
        .args_from(&["--allowlist", plain.to_str().unwrap()])
        .sh(&format!("git clone -q https://a.test:{p}/app.git three"));
    assert!(!out.status.success(), "cloned without any trust");
    assert!(
        stderr(&out).to_lowercase().contains("certificate"),
        "{}",
        stderr(&out)
    );
}

/// git's smart protocol through inspection, against git's own server: a rule that lists
/// the fetch side's paths lets a clone through and refuses a push (a POST to
/// `git-receive-pack`), which leaves the server's repository as it was; the same push with
/// that path listed goes through, so the refusal was the rule's.
#[test]
fn git_may_clone_but_not_push_when_the_rule_lists_only_fetching() {
    let dir = TestDir::new("inspect-git-push");
    let root = dir.join("repos");
    std::fs::create_dir_all(&root).unwrap();
    let server = HttpServer::start_tls_git(&dir.path, &["a.test"], root.clone());
    let p = server.port();
    crate::support::bare_repo(&dir.path, "repos/app.git", "one\n");
    let served_head = || crate::support::git(&root.join("app.git"), &["rev-parse", "HEAD"]);
    let before = served_head();

    let fetch_only = "methods = [\"GET\", \"POST\"]\n\
                      paths = [\"/app.git/info/refs\", \"/app.git/git-upload-pack\"]\n";
    let push = format!(
        "git clone -q https://a.test:{p}/app.git work && cd work && \
         git -c user.name=t -c user.email=t@t.test commit -q --allow-empty -m two && \
         git push -q origin HEAD 2>&1; echo \"push: $?\""
    );
    let run = inspecting(&dir, &server, &policy(p, fetch_only));
    let out = run.sh(&push);
    let text = stdout(&out);
    assert!(text.contains("403"), "{text}{}", stderr(&out));
    assert!(
        text.ends_with("push: 1\n") || text.contains("push: 128"),
        "{text}"
    );
    assert_eq!(served_head(), before, "the refused push reached the server");
    let records = inspected(&run);
    assert!(
        records.iter().any(|e| e["method"] == "POST"
            && e["path"] == "/app.git/git-upload-pack"
            && e["status"] == 200),
        "{records:#?}"
    );
    assert!(
        records.iter().any(|e| e["method"] == "POST"
            && e["path"] == "/app.git/git-receive-pack"
            && e["reason"] == "path_not_allowed"),
        "{records:#?}"
    );

    // Control: with the push path listed, the same push goes through.
    std::fs::remove_dir_all(dir.join("ws")).unwrap();
    let with_push = "methods = [\"GET\", \"POST\"]\n\
                     paths = [\"/app.git/info/refs\", \"/app.git/git-upload-pack\", \
                     \"/app.git/git-receive-pack\"]\n";
    let out = inspecting(&dir, &server, &policy(p, with_push)).sh(&push);
    assert!(
        stdout(&out).ends_with("push: 0\n"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_ne!(served_head(), before);
}

#[test]
fn the_trust_bundle_is_laid_only_when_the_run_inspects() {
    let dir = TestDir::new("inspect-bundle");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let p = server.port();
    let store = "/etc/ssl/certs/ca-certificates.crt";
    let show = format!(
        "echo \"SSL_CERT_FILE=${{SSL_CERT_FILE:-unset}} GIT_SSL_CAINFO=${{GIT_SSL_CAINFO:-unset}}\"; \
         echo \"run=[$(ls /run/netbox 2>/dev/null | tr '\\n' ' ')]\"; head -n 1 {store}; sha256sum < {store} | cut -d' ' -f1; \
         echo x > /run/netbox/ca-bundle.pem 2>/dev/null && echo WRITABLE; \
         echo x > {store} 2>/dev/null && echo STORE-WRITABLE; true"
    );
    let host_store = std::fs::read(store).expect("the host has a Debian trust store");
    let cleaned = |run: Run| {
        let mut cmd = run.command(&show);
        for var in ["SSL_CERT_FILE", "GIT_SSL_CAINFO"] {
            cmd.env_remove(var);
        }
        cmd.output().unwrap()
    };

    let out = cleaned(inspecting(&dir, &server, &policy(p, "")));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "SSL_CERT_FILE=/run/netbox/ca-bundle.pem GIT_SSL_CAINFO=/run/netbox/ca-bundle.pem"
    );
    assert_eq!(lines[1], "run=[ca-bundle.pem resolv.conf ]");
    assert!(lines[2].starts_with("# netbox session CA"), "{text}");
    let bundle_sha = lines[3];
    assert_ne!(bundle_sha, sha256_hex(&host_store));
    assert!(!text.contains("WRITABLE"), "{text}");
    // The bundle is the session CA, the upstream CA given, then the host's roots whole.
    let bundle = inspecting(&dir, &server, &policy(p, ""))
        .sh(&format!("cat {store}"))
        .stdout;
    assert!(
        bundle.ends_with(&host_store),
        "the system roots are not all in"
    );
    let upstream_ca = std::fs::read_to_string(server.ca.as_ref().unwrap()).unwrap();
    assert!(String::from_utf8_lossy(&bundle).contains(upstream_ca.trim()));

    // Without inspection: nothing injected, the store is the host's.
    let plain = dir.write("plain.toml", "allow = [\"a.test\"]\n");
    let out = cleaned(Run::new(&dir).args_from(&["--allowlist", plain.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "SSL_CERT_FILE=unset GIT_SSL_CAINFO=unset");
    // The DNS stub's resolv.conf (capture) is there, no bundle.
    assert_eq!(lines[1], "run=[resolv.conf ]");
    let first_line = String::from_utf8_lossy(&host_store);
    assert_eq!(lines[2], first_line.lines().next().unwrap());
    assert_eq!(lines[3], sha256_hex(&host_store));
}

/// Every file under `dir` (not following symlinks), as bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut queue = vec![dir.to_owned()];
    while let Some(at) = queue.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                queue.push(path);
            } else if kind.is_file() {
                if let Ok(bytes) = std::fs::read(&path) {
                    found.push((path, bytes));
                }
            }
        }
    }
    found
}

/// The forms a key could be written in: its DER, its private scalar, and their hex and
/// base64 (a PEM body's first line).
fn key_spellings(der: &[u8]) -> Vec<Vec<u8>> {
    use base64_like::encode;
    // ECPrivateKey (RFC 5915): version 1, then the 32-byte scalar as an octet string.
    let at = der
        .windows(5)
        .position(|w| w == [0x02, 0x01, 0x01, 0x04, 0x20])
        .expect("a P-256 PKCS#8 key")
        + 5;
    let scalar = der[at..at + 32].to_vec();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    vec![
        der.to_vec(),
        scalar.clone(),
        hex(der).into_bytes(),
        hex(&scalar).into_bytes(),
        encode(der).as_bytes()[..60].to_vec(),
        encode(&scalar).as_bytes()[..40].to_vec(),
    ]
}

/// Base64 (standard alphabet), written out: a test needs only the encoder.
mod base64_like {
    pub fn encode(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            }
            for _ in chunk.len()..3 {
                out.push('=');
            }
        }
        out
    }
}

/// Where any of `needles` occurs among `files`.
fn holders<'a>(files: &'a [(PathBuf, Vec<u8>)], needles: &[Vec<u8>]) -> Vec<&'a Path> {
    files
        .iter()
        .filter(|(_, bytes)| {
            needles
                .iter()
                .any(|n| bytes.windows(n.len()).any(|w| w == n.as_slice()))
        })
        .map(|(path, _)| path.as_path())
        .collect()
}

#[test]
fn the_session_ca_key_is_on_no_disk() {
    let dir = TestDir::new("inspect-key");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let p = server.port();
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let run = inspecting(&dir, &server, &policy(p, ""))
        .env("NETBOX_TEST_BREAK", "show-ca-key")
        .env("XDG_STATE_HOME", state.display().to_string())
        .env("XDG_CACHE_HOME", state.display().to_string());
    // The run uses the CA, then leaves its private temp root and /run as a tar in the
    // workspace, where the search below reads them.
    let out = run.sh(&format!(
        "curl -sS --max-time 8 https://a.test:{p}/hello && \
         tar -cf snapshot.tar -C / tmp run 2>/dev/null; test -s snapshot.tar"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");
    let shown = stderr(&out)
        .lines()
        .find_map(|l| l.split("session CA key ").nth(1).map(str::to_owned))
        .expect("the test hook shows the key");
    let der: Vec<u8> = (0..shown.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&shown[i..i + 2], 16).unwrap())
        .collect();
    let needles = key_spellings(&der);

    // The workspace (with the temp root's snapshot), the log's directory, netbox's state
    // and cache directories.
    let files = files_under(&dir.path);
    assert!(
        files.iter().any(|(p, _)| p.ends_with("snapshot.tar")),
        "no snapshot"
    );
    assert_eq!(holders(&files, &needles), Vec::<&Path>::new());
    // Controls: the search reads the snapshot (the CA's certificate, public, is in it),
    // and finds a key where one is.
    let bundle_marker = b"# netbox session CA".to_vec();
    assert!(
        !holders(&files, &[bundle_marker]).is_empty(),
        "the snapshot does not hold the bundle: the search would miss a key there too"
    );
    let planted = dir.join("control");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("k"), shown.as_bytes()).unwrap();
    assert_eq!(holders(&files_under(&planted), &needles).len(), 1);
}

#[test]
fn an_upstream_the_machine_does_not_trust_is_refused_inside_the_tunnel() {
    let dir = TestDir::new("inspect-untrusted");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let p = server.port();
    let allow = dir.write("allow.toml", &policy(p, ""));
    // No --upstream-ca: the test's CA is no root of this machine's.
    let run = Run::new(&dir).args_from(&["--allowlist", allow.to_str().unwrap()]);
    let mut cmd = run.command(&format!(
        "curl -sS --max-time 8 -o /dev/null -w '%{{http_code}} %header{{x-netbox-reason}}\\n' \
         https://a.test:{p}/hello"
    ));
    cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    let out = cmd.output().unwrap();
    assert_eq!(
        stdout(&out),
        "502 upstream-not-trusted\n",
        "{}",
        stderr(&out)
    );
    let refused = run
        .events()
        .into_iter()
        .find(|e| e["reason"] == "upstream_not_trusted")
        .unwrap_or_else(|| panic!("{:#?}", run.events()));
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("--upstream-ca"),
        "{refused}"
    );
    // Control: the same with the CA given passes.
    let out = inspecting(&dir, &server, &policy(p, ""))
        .sh(&format!("curl -sS --max-time 8 https://a.test:{p}/hello"));
    assert_eq!(stdout(&out), "hello from upstream\n", "{}", stderr(&out));
}

#[test]
fn plain_http_to_a_host_with_http_rules_is_judged_too() {
    let dir = TestDir::new("inspect-plain");
    let server = HttpServer::start();
    let p = server.port();
    let allow = dir.write(
        "allow.toml",
        &format!(
            "allow = [\"127.0.0.1:{p}\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n\
             [[http]]\nhost = \"a.test:{p}\"\nmethods = [\"GET\"]\n\
             [[http]]\nhost = \"a.test:{p}\"\nmethods = [\"POST\"]\npaths = [\"/headers\"]\n"
        ),
    );
    let run = Run::new(&dir).args_from(&["--allowlist", allow.to_str().unwrap()]);
    let code = "curl -sS --max-time 8 -o /dev/null -w '%{http_code}\\n'";
    // Forwarded, then through a CONNECT tunnel (-p): a tunnel on a port that is not TLS
    // is read as HTTP, or it would be the way around the rules.
    let out = run.sh(&format!(
        "{code} http://a.test:{p}/hello\n{code} -X POST --data x http://a.test:{p}/sha256\n\
         {code} -p http://a.test:{p}/hello\n{code} -p -X POST --data x http://a.test:{p}/sha256\n"
    ));
    assert_eq!(stdout(&out), "200\n403\n200\n403\n", "{}", stderr(&out));
    // A request with a body is the last on its upstream connection (forwarded
    // ones too), so a server that reads the body otherwise cannot find a request in it.
    let out = run.sh(&format!(
        "curl -sS --max-time 8 --data x http://a.test:{p}/headers | grep -i '^connection:'; \
         curl -sS --max-time 8 -p --data x http://a.test:{p}/headers | grep -i '^connection:'"
    ));
    assert_eq!(
        stdout(&out).to_lowercase().replace('\r', ""),
        "connection: close\nconnection: close\n",
        "{}",
        stderr(&out)
    );
    let refused = inspected(&run)
        .into_iter()
        .filter(|e| e["reason"] == "method_not_allowed")
        .count();
    assert!(refused >= 1, "{:#?}", run.events());
}

#[test]
fn a_tunnel_asking_tls_for_another_host_is_refused_before_any_certificate() {
    let dir = TestDir::new("inspect-sni");
    let server = HttpServer::start_tls(&dir.path, &["a.test", "b.test"]);
    let p = server.port();
    let run = inspecting(&dir, &server, &policy(p, ""));
    let out = run.sh(&format!(
        "curl -sS --max-time 8 https://a.test:{p}/hello; \
         curl -sS --max-time 8 --connect-to b.test:{p}:a.test:{p} https://b.test:{p}/hello \
         && echo REACHED"
    ));
    assert_eq!(stdout(&out), "hello from upstream\n", "{}", stderr(&out));
    assert!(
        run.events()
            .iter()
            .any(|e| e["reason"] == "server_name_mismatch"),
        "{:#?}",
        run.events()
    );
}

/// `--upstream-ca` with nothing inspected would change nothing: said as a mistake.
#[test]
fn an_upstream_ca_without_inspection_is_a_usage_error() {
    let dir = TestDir::new("inspect-usage");
    let ca = dir.write("ca.pem", "not a certificate");
    let out = Command::new(crate::support::netbox_bin())
        .args(["--upstream-ca", ca.to_str().unwrap(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing is inspected"),
        "{}",
        stderr(&out)
    );
    let out = Command::new(crate::support::netbox_bin())
        .args([
            "--inspect",
            "--upstream-ca",
            ca.to_str().unwrap(),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no PEM certificate"),
        "{}",
        stderr(&out)
    );
}

/// The sandbox's trust bundle gets the certificates of `--upstream-ca`'s file and nothing
/// else of it: a private key kept in the same file stays outside. A CA file that `--hide`
/// hides is refused, as its certificates would be copied past the cover.
#[test]
fn only_the_certificates_of_an_upstream_ca_file_reach_the_sandbox() {
    let dir = TestDir::new("inspect-ca-copy");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let ca_pem = std::fs::read_to_string(server.ca.as_ref().unwrap()).unwrap();
    let key_pem = rcgen::KeyPair::generate().unwrap().serialize_pem();
    std::fs::create_dir_all(dir.join("secrets")).unwrap();
    let both = dir.write("secrets/ca-and-key.pem", &format!("{ca_pem}{key_pem}"));
    let with = |extra: &[&str]| {
        Run::new(&dir)
            .args_from(&[
                "--quiet",
                "--inspect",
                "--upstream-ca",
                both.to_str().unwrap(),
            ])
            .args_from(extra)
            .sh("cat /run/netbox/ca-bundle.pem")
    };
    let out = with(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bundle = stdout(&out);
    assert!(
        !bundle.contains("PRIVATE KEY"),
        "the key reached the sandbox"
    );
    let key_body: Vec<&str> = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert!(key_body.iter().all(|l| !bundle.contains(l)));
    // Positive control: the key was in the file, and the certificate reached the bundle.
    assert!(std::fs::read_to_string(&both)
        .unwrap()
        .contains(key_body[0]));
    for line in ca_pem.lines().filter(|l| !l.starts_with("-----")) {
        assert!(bundle.contains(line), "{line} missing from the bundle");
    }
    let secrets = dir.join("secrets");
    let out = with(&["--hide", secrets.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "--upstream-ca {} lies in what --hide {} hides",
            both.display(),
            secrets.display()
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_standalone_bridge_inspects_with_its_ca_written_for_clients() {
    let dir = TestDir::new("inspect-standalone");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let p = server.port();
    let cert = dir.join("session-ca.pem");
    let upstream_ca = server.ca.as_ref().unwrap().display().to_string();
    let bridge = crate::support::Bridge::start(
        &dir,
        &policy(p, "methods = [\"GET\"]\n"),
        &[
            "--upstream-ca",
            &upstream_ca,
            "--ca-cert",
            cert.to_str().unwrap(),
        ],
    );
    let written = std::fs::read_to_string(&cert).unwrap();
    assert!(
        written.starts_with("-----BEGIN CERTIFICATE-----"),
        "{written}"
    );
    assert!(!written.contains("PRIVATE"), "{written}");
    let proxy = bridge.proxy_url();
    let fetch = |extra: &[&str]| {
        let url = format!("https://a.test:{p}/hello");
        let mut args = vec![
            "-x",
            &proxy,
            "--cacert",
            cert.to_str().unwrap(),
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %header{x-netbox-reason}",
        ];
        args.extend_from_slice(extra);
        args.push(&url);
        stdout(&crate::support::curl(&args))
    };
    assert_eq!(fetch(&[]), "200 ");
    assert_eq!(fetch(&["-X", "DELETE"]), "403 http-rule");

    // An allowed request the upstream does not answer in time: 504 inside
    // the tunnel, recorded as allowed and timed out (it reached the upstream), not as a
    // refusal; the tunnel's own idleness does not cut it short first.
    let slow_dir = TestDir::new("inspect-standalone-slow");
    let slow = crate::support::Bridge::start(
        &slow_dir,
        &policy(p, ""),
        &[
            "--upstream-ca",
            &upstream_ca,
            "--ca-cert",
            cert.to_str().unwrap(),
            "--idle-timeout",
            "1s",
        ],
    );
    let out = crate::support::curl(&[
        "-x",
        &slow.proxy_url(),
        "--cacert",
        cert.to_str().unwrap(),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %header{x-netbox-reason}",
        &format!("https://a.test:{p}/sleep/2500"),
    ]);
    assert_eq!(stdout(&out), "504 upstream-timeout", "{}", stderr(&out));
    let timed_out = slow
        .events(2)
        .into_iter()
        .find(|e| e["proto"] == "inspected")
        .unwrap();
    assert_eq!(timed_out["decision"], "allow", "{timed_out}");
    assert_eq!(timed_out["end"], "idle_timeout", "{timed_out}");
    assert_eq!(timed_out["status"], 504, "{timed_out}");

    // Without --ca-cert there is nowhere to give clients the CA: refused at the start.
    let other = TestDir::new("inspect-standalone-nocert");
    let allow = other.write("allow.toml", &policy(p, ""));
    let out = Command::new(crate::support::netbox_bin())
        .args(["bridge", "--listen", "127.0.0.1:0", "--allowlist"])
        .arg(&allow)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("--ca-cert FILE"), "{}", stderr(&out));
}

/// The issue's own example: pip may only GET and HEAD under /simple/ on the index and
/// fetch wheels from its files host, through inspected tunnels, with no CA flag, no
/// `--trusted-host` and no CA variable of the test's. Python's own client is refused a
/// POST there.
#[test]
fn pip_installs_through_inspection_and_python_is_refused_a_post() {
    let dir = TestDir::new("inspect-pip");
    let (server, root, sha) = crate::tools::pip_registry(&dir);
    let p = server.port();
    std::fs::write(
        root.join("simple/demopkg/index.json"),
        format!(
            "<html><body><a href=\"https://files.mirror.test:{p}/demopkg-1.0-py3-none-any.whl#sha256={sha}\">demopkg-1.0-py3-none-any.whl</a></body></html>\n"
        ),
    )
    .unwrap();
    let allow = format!(
        "allow = [\"127.0.0.1:{p}\"]\ntls_ports = [{p}]\n\
         [hosts]\n\"pypi.mirror.test\" = \"127.0.0.1\"\n\"files.mirror.test\" = \"127.0.0.1\"\n\
         [[http]]\nhost = \"pypi.mirror.test:{p}\"\nmethods = [\"GET\", \"HEAD\"]\npaths = [\"/simple/\"]\n\
         [[http]]\nhost = \"files.mirror.test:{p}\"\nmethods = [\"GET\", \"HEAD\"]\npaths = [\"/*.whl\"]\n"
    );
    let run = inspecting(&dir, &server, &allow)
        .env(
            "PIP_INDEX_URL",
            format!("https://pypi.mirror.test:{p}/simple/"),
        )
        .env("PIP_RETRIES", "0")
        .env("PIP_FIND_LINKS", "")
        .env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    // pip's own status is not used: pyenv's shim fails the install when it cannot rehash
    // its read-only shims, after installing.
    let post = format!(
        "import urllib.request, urllib.error\n\
         try:\n    urllib.request.urlopen(urllib.request.Request('https://pypi.mirror.test:{p}/simple/', data=b'x'))\n\
         except urllib.error.HTTPError as e:\n    print(e.code, e.headers['x-netbox-reason'])\n"
    );
    let out = run.sh(&format!(
        "pip install --quiet --no-deps --target deps demopkg; \
         PYTHONPATH=deps python3 -c 'import demopkg; print(demopkg.GREETING)'; \
         python3 -c \"$(cat <<'PY'\n{post}PY\n)\""
    ));
    assert_eq!(
        stdout(&out),
        "demopkg says hi\n403 http-rule\n",
        "{}",
        stderr(&out)
    );
    let records = inspected(&run);
    for (host, path) in [
        ("pypi.mirror.test", "/simple/demopkg/"),
        ("files.mirror.test", "/demopkg-1.0-py3-none-any.whl"),
    ] {
        assert!(
            records.iter().any(|e| e["host"] == host
                && e["path"] == path
                && e["decision"] == "allow"
                && e["status"] == 200),
            "{host}{path}: {records:#?}"
        );
    }
}

/// What a server could read otherwise than the bridge judged it. A body on a
/// GET (a server that ignores it would take it for the next request) is refused; a
/// request with a body is the last on its upstream connection, so the client's next one
/// comes on a new tunnel; a `Connection: host` cannot strip the Host that was judged, and
/// an HTTP/1.0 request without one reaches the server with the tunnel's.
#[test]
fn a_request_cannot_hide_another_or_lose_its_host() {
    let dir = TestDir::new("inspect-framing");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let p = server.port();
    let run = inspecting(&dir, &server, &policy(p, ""));
    let code = "curl -sS --max-time 8 -o /dev/null -w '%{http_code} %header{x-netbox-reason}\\n'";
    let url = format!("https://a.test:{p}");
    let out = run.sh(&format!(
        "{code} -X GET --data 'GET /hidden HTTP/1.1' {url}/hello\n\
         {code} -X GET {url}/hello\n\
         curl -sS --max-time 8 -H 'Connection: host' {url}/headers | grep -i '^host:'\n\
         curl -sS --max-time 8 --http1.0 -H 'Host:' {url}/headers | grep -i '^host:'\n\
         curl -sS --max-time 8 -o /dev/null --data x {url}/sha256 --next -o /dev/null {url}/hello\n"
    ));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}{}", stderr(&out));
    assert_eq!(lines[0], "400 bad-request", "{text}{}", stderr(&out));
    // Control: the same GET without a body passes.
    assert_eq!(lines[1], "200 ");
    assert_eq!(lines[2].to_lowercase().trim(), format!("host: a.test:{p}"));
    assert_eq!(lines[3].to_lowercase().trim(), format!("host: a.test:{p}"));
    // The POST and the GET after it: two tunnels, where one would carry both otherwise.
    let tunnels: Vec<String> = run
        .events()
        .into_iter()
        .filter(|e| e["proto"] == "http_connect" && e["host"] == "a.test")
        .map(|e| format!("{} {} {}", e["decision"], e["end"], e["detail"]))
        .collect();
    assert_eq!(tunnels.len(), 6, "{tunnels:#?}");
}

/// A request the client leaves before its answer is still recorded (hyper
/// drops the request's handler; the record goes with it, written).
#[test]
fn a_request_whose_client_leaves_before_the_answer_is_recorded() {
    let dir = TestDir::new("inspect-left");
    let server = HttpServer::start_tls(&dir.path, &["a.test"]);
    let p = server.port();
    let run = inspecting(&dir, &server, &policy(p, ""));
    // Through the proxy by hand: CONNECT, TLS (trusting what the sandbox trusts), one
    // request for an answer that takes 1 s, and gone at once.
    let script = format!(
        "import os, socket, ssl, time\n\
         proxy = os.environ['HTTPS_PROXY'].rsplit(':', 1)\n\
         raw = socket.create_connection(('127.0.0.1', int(proxy[1])))\n\
         raw.sendall(b'CONNECT a.test:{p} HTTP/1.1\\r\\nHost: a.test:{p}\\r\\n\\r\\n')\n\
         head = b''\n\
         while not head.endswith(b'\\r\\n\\r\\n'):\n    head += raw.recv(1)\n\
         tls = ssl.create_default_context().wrap_socket(raw, server_hostname='a.test')\n\
         tls.sendall(b'GET /sleep/1000 HTTP/1.1\\r\\nHost: a.test:{p}\\r\\n\\r\\n')\n\
         time.sleep(0.2)\n\
         tls.close()\n\
         time.sleep(1.5)\n\
         print('left')\n"
    );
    let out = run.sh(&format!("python3 -c \"$(cat <<'PY'\n{script}PY\n)\""));
    assert_eq!(stdout(&out), "left\n", "{}", stderr(&out));
    let records = inspected(&run);
    let left = records
        .iter()
        .find(|e| e["path"] == "/sleep/1000")
        .unwrap_or_else(|| panic!("the request went unrecorded: {:#?}", run.events()));
    assert_eq!(left["end"], "client_error", "{left}");
    assert_eq!(left["decision"], "allow", "{left}");
}
