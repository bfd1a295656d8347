//! Secrets the sandbox never holds: CMD gets a placeholder in the variable a `[[secret]]`
//! (or `--secret`) names, and the bridge puts the real value in its place only in requests
//! to the secret's hosts. Real clients against a local server that answers the real
//! credential alone; a placeholder sent to another host is refused (403) and logged; what
//! the sandbox can read is searched for the value beside a control value that must be
//! found.

use std::path::Path;

use serde_json::Value;

use crate::support::credentialed::CredentialedServer;
use crate::support::{stderr, stdout, Run, TestDir};

/// A value no one guesses, different per test.
fn real_token(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("real-{tag}-{nanos:x}-{}", std::process::id())
}

/// An allowlist for `a.test` and `b.test` on the server's port (both pinned to loopback,
/// where the one server answers both names), a TLS port, with `extra` after it.
fn allowlist(port: u16, extra: &str) -> String {
    format!(
        "allow_private = [\"a.test:{port}\", \"b.test:{port}\"]\ntls_ports = [{port}]\n\
         [hosts]\n\"a.test\" = \"127.0.0.1\"\n\"b.test\" = \"127.0.0.1\"\n{extra}"
    )
}

/// A secret `name` read from the variable `var`, going to `a.test` on `port` alone.
fn secret_table(name: &str, var: &str, port: u16) -> String {
    format!("[[secret]]\nname = \"{name}\"\nfrom = \"env:{var}\"\nhosts = [\"a.test:{port}\"]\n")
}

/// A run under `policy`, trusting the server's CA for upstreams, with `var` set to `value`
/// in netbox's environment.
fn run_with(
    dir: &TestDir,
    server: &CredentialedServer,
    policy: &str,
    var: &str,
    value: &str,
) -> Run {
    let allow = dir.write("allow.toml", policy);
    Run::new(dir)
        .args_from(&[
            "--allowlist",
            allow.to_str().unwrap(),
            "--upstream-ca",
            server.ca.to_str().unwrap(),
        ])
        .env(var, value)
}

fn records(run: &Run, proto: &str) -> Vec<Value> {
    run.events()
        .into_iter()
        .filter(|e| e["type"] == "net" && e["proto"] == proto)
        .collect()
}

/// Whether `needle` is anywhere in the files under `dir` (read as bytes).
fn found_under(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path.display().to_string());
                }
            }
        }
    }
    found
}

#[test]
fn a_token_goes_to_its_host_alone_and_never_into_the_sandbox() {
    let dir = TestDir::new("secret-curl");
    let token = real_token("curl");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), "hello with a token\n").unwrap();
    let server = CredentialedServer::start(&dir.path, &["a.test", "b.test"], root, &token);
    let p = server.port();
    let planted = real_token("planted");
    let run = run_with(
        &dir,
        &server,
        &allowlist(p, &secret_table("API_TOKEN", "NB_TEST_API_TOKEN", p)),
        "NB_TEST_API_TOKEN",
        &token,
    )
    // The control for the search below: a value given to CMD on purpose must be found.
    .args_from(&["--env", &format!("PLANTED={planted}")])
    // Every TLS tunnel read, so that a placeholder sent to b.test is seen (without it, a
    // tunnel to a host no secret goes to carries the placeholder unread: worthless there).
    .arg("--inspect");
    let code = "curl -sS --max-time 8 -o /dev/null -w '%{http_code} %header{x-netbox-reason}\\n'";
    let out = run.sh(&format!(
        "echo \"$API_TOKEN\"\n\
         {code} -H \"Authorization: Bearer $API_TOKEN\" https://a.test:{p}/hello.txt\n\
         {code} -u \"user:$API_TOKEN\" https://a.test:{p}/hello.txt\n\
         {code} \"https://a.test:{p}/hello.txt?token=$API_TOKEN\"\n\
         {code} https://a.test:{p}/hello.txt\n\
         {code} -H \"Authorization: Bearer $API_TOKEN\" https://b.test:{p}/hello.txt\n\
         {code} -u \"user:$API_TOKEN\" https://b.test:{p}/hello.txt\n\
         {code} \"https://b.test:{p}/hello.txt?token=$API_TOKEN\"\n\
         {code} -L -H \"Authorization: Bearer $API_TOKEN\" https://a.test:{p}/redirect/b.test:{p}/echo\n\
         {code} -L --location-trusted -u \"user:$API_TOKEN\" https://a.test:{p}/redirect/b.test:{p}/echo\n\
         curl -sS --max-time 8 -D echo.head -H \"Authorization: Bearer $API_TOKEN\" https://a.test:{p}/echo > echo.body\n\
         mkdir seen && cat /proc/self/environ > seen/environ && cat /proc/$$/cmdline > seen/cmdline\n\
         cat /proc/1/environ > seen/pid1-environ 2>/dev/null; cat /proc/1/cmdline > seen/pid1-cmdline 2>/dev/null\n\
         cp -r /run/netbox seen/run-netbox 2>/dev/null; true\n"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    let placeholder = &lines[0];
    assert!(
        placeholder.starts_with("netbox-secret-API_TOKEN-") && placeholder.len() > 40,
        "{placeholder}"
    );
    // Controls: with the placeholder as a bearer token, as a Basic password and in a query,
    // the request to the secret's host carries the real value; without it the server
    // refuses, so the 200s are the swap's doing.
    assert_eq!(lines[1], "200 ", "{}", stderr(&out));
    assert_eq!(lines[2], "200 ");
    assert_eq!(lines[3], "200 ");
    assert_eq!(lines[4], "401 ");
    // The same placeholder to another host, wherever it is, is refused by the bridge.
    assert_eq!(lines[5], "403 secret-misdirected");
    assert_eq!(lines[6], "403 secret-misdirected");
    assert_eq!(lines[7], "403 secret-misdirected");
    // A redirect to another host carries nothing: curl drops the header itself (the other
    // host asks for credentials), and when told to keep it, the bridge refuses it.
    assert_eq!(lines[8], "401 ");
    assert_eq!(lines[9], "403 secret-misdirected");
    // What reached the server: the real value, to a.test only; never a placeholder.
    let seen = server.seen();
    assert!(seen
        .iter()
        .any(|s| s.starts_with("a.test") && s.contains(&token)));
    for request in &seen {
        assert!(!request.contains("netbox-secret-"), "{request}");
        if !request.starts_with(&format!("a.test:{p} ")) {
            assert!(!request.contains(&token), "{request}");
        }
    }
    // The server's echo of the value comes back without it: the placeholder in a header,
    // asterisks of the same length in the body.
    let ws = &run.workspace;
    let head = std::fs::read_to_string(ws.join("echo.head")).unwrap();
    let body = std::fs::read_to_string(ws.join("echo.body")).unwrap();
    assert!(head.contains(&format!("Bearer {placeholder}")), "{head}");
    assert!(
        body.contains(&format!("Bearer {}", "*".repeat(token.len()))),
        "{body}"
    );
    assert!(!head.contains(&token) && !body.contains(&token));
    // The sandbox's environment, its command lines, pid 1's (unreadable), the files netbox
    // laid in /run: no value, but the control planted on purpose is found.
    let seen_dir = ws.join("seen");
    assert!(!found_under(&seen_dir, &planted).is_empty(), "the control");
    assert!(
        !found_under(&seen_dir, placeholder).is_empty(),
        "the placeholder"
    );
    assert_eq!(found_under(&seen_dir, &token), Vec::<String>::new());
    assert_eq!(found_under(ws, &token), Vec::<String>::new());
    // The log names the secret each swapped request used and each misdirected one, never
    // the value; stderr says the refusals.
    let inspected = records(&run, "inspected");
    let used = inspected
        .iter()
        .filter(|r| r["secrets"] == serde_json::json!(["API_TOKEN"]))
        .count();
    assert!(used >= 4, "{inspected:#?}");
    let misdirected: Vec<&Value> = inspected
        .iter()
        .filter(|r| r["reason"] == "secret_misdirected")
        .collect();
    assert_eq!(misdirected.len(), 4, "{inspected:#?}");
    for record in &misdirected {
        assert_eq!(record["host"], "b.test");
        assert!(record["detail"].as_str().unwrap().contains("API_TOKEN"));
    }
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(!log.contains(&token));
    assert!(!stderr(&out).contains(&token));
    assert!(stderr(&out).contains("API_TOKEN"), "{}", stderr(&out));
}
