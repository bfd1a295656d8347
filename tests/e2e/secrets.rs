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

/// What a server hands back of a request (its reason phrase, a `Location`, a header, the
/// body, plain and in base64) comes back to CMD without the value, in the forms the bridge
/// itself made of it: the value, escaped in a URL, inside Basic credentials. TRACE to the
/// host is refused, and a value never goes in the clear: a host named without a port takes
/// it over TLS alone, and plain HTTP to it is refused as misdirected before anything is
/// dialed. An answer that came compressed, which cannot be searched, is not passed on.
#[test]
fn what_a_server_reflects_comes_back_without_the_value() {
    let dir = TestDir::new("secret-reflect");
    // Bytes a URL escapes, so the escaped form differs from the value.
    let token = format!("{}/t+k=n", real_token("reflect"));
    let escaped = token
        .replace('/', "%2F")
        .replace('+', "%2B")
        .replace('=', "%3D");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let server = CredentialedServer::start(&dir.path, &["a.test", "b.test"], root, &token);
    let p = server.port();
    // Named without a port: the TLS ports, here the server's by `tls_ports`.
    let secret =
        "[[secret]]\nname = \"API_TOKEN\"\nfrom = \"env:NB_TEST_REFLECT\"\nhosts = [\"a.test\"]\n";
    let run = run_with(
        &dir,
        &server,
        &allowlist(p, secret),
        "NB_TEST_REFLECT",
        &token,
    );
    let code = "curl -sS --max-time 8 -o /dev/null -w '%{http_code} %header{x-netbox-reason}\\n'";
    let out = run.sh(&format!(
        "curl -sS --max-time 8 -D h1 -o b1 -H \"Authorization: Bearer $API_TOKEN\" \
           \"https://a.test:{p}/reflect?token=$API_TOKEN&note=visible-control\"\n\
         curl -sS --max-time 8 -D h2 -o b2 -u \"user:$API_TOKEN\" https://a.test:{p}/reflect\n\
         curl -sS --max-time 8 -D h3 -o b3 \"https://b.test:{p}/reflect?note=visible-control\"\n\
         {code} -X TRACE https://a.test:{p}/reflect\n\
         {code} -H \"Authorization: Bearer $API_TOKEN\" http://a.test:{p}/reflect\n\
         {code} -H \"Authorization: Bearer $API_TOKEN\" http://a.test/reflect\n\
         {code} https://a.test:{p}/compressed\n\
         {code} https://b.test:{p}/compressed\n"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    let lines: Vec<&str> = printed.lines().collect();
    // A compressed answer from the secret's host cannot be searched: not passed on; from
    // another host it is (the control).
    assert_eq!(
        lines,
        [
            "403 http-rule",
            "403 secret-misdirected",
            "403 secret-misdirected",
            "502 upstream-not-trusted",
            "200 "
        ]
    );
    let ws = &run.workspace;
    let read = |f: &str| std::fs::read_to_string(ws.join(f)).unwrap();
    // Controls: the value went in (so the server had it to reflect), the server reflects
    // what it got, its own reason phrase included, where no secret goes.
    let seen = server.seen();
    assert!(
        seen.iter().any(|s| s.contains(&format!("Bearer {token}"))),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.contains(&format!("token={escaped}&"))),
        "{seen:?}"
    );
    let (h3, b3) = (read("h3"), read("b3"));
    assert!(h3.contains("\nHTTP/1.1 404 No such token"), "{h3}");
    assert!(b3.contains("visible-control"), "{b3}");
    let (h1, b1) = (read("h1"), read("b1"));
    assert!(
        b1.contains("visible-control") && h1.contains("visible-control"),
        "{h1}{b1}"
    );
    // No form of the value came back.
    let b64 = base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    let forms = [
        token.clone(),
        escaped.clone(),
        escaped.to_lowercase(),
        b64.encode(format!("user:{token}")),
    ];
    for (file, text) in [
        ("h1", &h1),
        ("b1", &b1),
        ("h2", &read("h2")),
        ("b2", &read("b2")),
    ] {
        for form in &forms {
            assert!(!text.contains(form.as_str()), "{file} holds {form}: {text}");
        }
        assert!(
            text.contains("***") || text.contains("netbox-secret-API_TOKEN-"),
            "{file}: {text}"
        );
    }
    // The reason phrase the server chose is gone where the value could be in it.
    assert!(h1.contains("\nHTTP/1.1 404 Not Found"), "{h1}");
    // The body's base64 of what came is masked (this is what it would have been).
    let reflected = b64.encode(format!(
        "Bearer {token} token={escaped}&note=visible-control"
    ));
    assert!(!b1.contains(&reflected), "{b1}");
    assert!(
        b1.lines()
            .any(|l| l.starts_with("base64: ") && l.contains('*')),
        "{b1}"
    );
    // The refusals say why; nothing plain went out with the value.
    let err = stderr(&out);
    assert!(err.contains("in the clear"), "{err}");
    assert!(err.contains("TRACE"), "{err}");
    for request in &seen {
        assert!(!request.contains("TRACE"), "{request}");
    }
    assert!(!err.contains(&token));
}

/// git over HTTPS: netbox gives git a credential helper for the secret's host that answers
/// with the placeholder; clone and push reach a server that takes the real token alone,
/// and a push to a host the secret does not go to is refused with the server's repository
/// untouched.
#[test]
fn git_clones_and_pushes_with_a_token_it_never_holds() {
    let dir = TestDir::new("secret-git");
    let token = real_token("git");
    let root = dir.join("repos");
    std::fs::create_dir_all(&root).unwrap();
    crate::support::bare_repo(&dir.path, "repos/app.git", "one\n");
    let server = CredentialedServer::start(&dir.path, &["a.test", "b.test"], root.clone(), &token);
    let p = server.port();
    let served_head = || crate::support::git(&root.join("app.git"), &["rev-parse", "HEAD"]);
    let before = served_head();
    let run = run_with(
        &dir,
        &server,
        &allowlist(p, &secret_table("GIT_TOKEN", "NB_TEST_GIT_TOKEN", p)),
        "NB_TEST_GIT_TOKEN",
        &token,
    )
    .arg("--inspect");
    let out = run.sh(&format!(
        "export GIT_TERMINAL_PROMPT=0\n\
         git clone -q https://a.test:{p}/app.git work && cd work && \
         git -c user.name=t -c user.email=t@t.test commit -q --allow-empty -m two && \
         git push -q origin HEAD 2>&1; echo \"push: $?\"\n\
         git -c user.name=t -c user.email=t@t.test commit -q --allow-empty -m three\n\
         git -c credential.helper= -c 'credential.helper=!f() {{ echo username=x; echo password=$GIT_TOKEN; }}; f' \
             push -q https://b.test:{p}/app.git HEAD 2>&1; echo \"other: $?\"\n"
    ));
    let text = stdout(&out);
    assert!(text.contains("push: 0\n"), "{text}{}", stderr(&out));
    assert!(
        text.contains("other: 128") || text.contains("other: 1\n"),
        "{text}"
    );
    assert!(text.contains("403"), "{text}");
    let after = served_head();
    assert_ne!(after, before, "the allowed push did not reach the server");
    let log = crate::support::git(&root.join("app.git"), &["log", "--format=%s"]);
    assert_eq!(log, "two\none\n", "the refused push reached the server");
    for request in server.seen() {
        assert!(!request.contains("netbox-secret-"), "{request}");
    }
    let records = records(&run, "inspected");
    assert!(
        records
            .iter()
            .any(|r| r["path"] == "/app.git/git-receive-pack"
                && r["status"] == 200
                && r["secrets"] == serde_json::json!(["GIT_TOKEN"])),
        "{records:#?}"
    );
    assert!(
        records
            .iter()
            .any(|r| r["host"] == "b.test" && r["reason"] == "secret_misdirected"),
        "{records:#?}"
    );
    assert!(!std::fs::read_to_string(&run.log).unwrap().contains(&token));
}

/// pip (credentials in its index URL), npm (`_authToken` in `.npmrc`) and cargo (a
/// registry token in its variable) install from one registry that takes the real token
/// alone, each with the placeholder only; the same client sent to another host with the
/// placeholder is refused as misdirected.
#[test]
fn package_managers_install_with_tokens_they_never_hold() {
    let dir = TestDir::new("secret-registries");
    let token = real_token("registry");
    let root = dir.join("registry");
    std::fs::create_dir_all(root.join("simple/demopkg")).unwrap();
    let server = CredentialedServer::start(&dir.path, &["a.test", "b.test"], root.clone(), &token);
    let p = server.port();
    let url = format!("https://a.test:{p}");
    // pip: a simple index whose page links the wheel on the same host.
    let wheel = crate::tools::build_wheel(&root);
    let sha = crate::support::file_sha256(&wheel);
    std::fs::write(
        root.join("simple/demopkg/index.json"),
        format!("<html><body><a href=\"{url}/demopkg-1.0-py3-none-any.whl#sha256={sha}\">demopkg-1.0-py3-none-any.whl</a></body></html>\n"),
    )
    .unwrap();
    // npm: demo-pkg's packument and tarball.
    crate::tools::npm_package(&dir, &root, &url);
    // cargo: a sparse index that requires authentication, its downloads on the same host.
    std::fs::create_dir_all(root.join("index")).unwrap();
    std::fs::write(
        root.join("index/config.json"),
        format!(r#"{{"dl":"{url}/crates","api":"{url}","auth-required":true}}"#),
    )
    .unwrap();
    crate::tools::cargo_crate(&dir, &root.join("index"), &root.join("crates"));

    let secrets = format!(
        "{}{}{}",
        secret_table("PIP_TOKEN", "NB_TEST_REGISTRY_TOKEN", p),
        secret_table("NPM_TOKEN", "NB_TEST_REGISTRY_TOKEN", p),
        secret_table("CARGO_REGISTRIES_PRIV_TOKEN", "NB_TEST_REGISTRY_TOKEN", p),
    );
    let run = run_with(
        &dir,
        &server,
        &allowlist(p, &secrets),
        "NB_TEST_REGISTRY_TOKEN",
        &token,
    )
    .arg("--inspect");
    let ws = run.workspace.clone();
    std::fs::write(
        ws.join(".npmrc"),
        format!("registry={url}/\n//a.test:{p}/:_authToken=${{NPM_TOKEN}}\n//b.test:{p}/:_authToken=${{NPM_TOKEN}}\n"),
    )
    .unwrap();
    // pip: its own status is not used (pyenv's shim fails an install when it cannot
    // rehash its read-only shims, after installing).
    let pip = |host: &str| {
        format!(
            "PIP_NO_CACHE_DIR=1 PIP_RETRIES=0 pip install --quiet --no-deps --target deps-{host} \
             --index-url \"https://user:$PIP_TOKEN@{host}:{p}/simple/\" demopkg >/dev/null 2>&1; \
             PYTHONPATH=deps-{host} python3 -c 'import demopkg; print(\"pip\", demopkg.GREETING)' 2>/dev/null \
             || echo 'pip failed'\n"
        )
    };
    let npm = |registry: &str| {
        format!(
            "npm install --no-audit --no-fund --cache \"$PWD/.npm-cache\" --fetch-retries=0 \
             --registry {registry}/ demo-pkg >/dev/null 2>&1; \
             node -e 'console.log(\"npm\", require(\"demo-pkg\"))' 2>/dev/null || echo 'npm failed'\n\
             rm -rf node_modules package.json package-lock.json\n"
        )
    };
    let out = run.sh(&format!(
        "{}{}{}{}",
        pip("a.test"),
        pip("b.test"),
        npm(&url),
        npm(&format!("https://b.test:{p}")),
    ));
    let text = stdout(&out);
    assert_eq!(
        text,
        "pip demopkg says hi\npip failed\nnpm demo says hi\nnpm failed\n",
        "{}",
        stderr(&out)
    );
    let misdirected = |what: &str| {
        records(&run, "inspected").iter().any(|r| {
            r["host"] == "b.test"
                && r["reason"] == "secret_misdirected"
                && r["detail"].as_str().unwrap_or("").contains(what)
        })
    };
    assert!(misdirected("PIP_TOKEN"), "{}", stderr(&out));
    assert!(misdirected("NPM_TOKEN"), "{}", stderr(&out));

    if crate::tools::cargo_runs() {
        let cargo_run = run_with(
            &dir,
            &server,
            &allowlist(p, &secrets),
            "NB_TEST_REGISTRY_TOKEN",
            &token,
        )
        .args_from(&["--env", &format!("CARGO_HOME={}/.cargo-home", ws.display())]);
        std::fs::create_dir_all(ws.join("app/src")).unwrap();
        std::fs::create_dir_all(ws.join(".cargo-home")).unwrap();
        std::fs::write(ws.join("app/src/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(
            ws.join("app/Cargo.toml"),
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\ndemo = { version = \"1\", registry = \"priv\" }\n",
        )
        .unwrap();
        std::fs::write(
            ws.join(".cargo-home/config.toml"),
            format!(
                "[registries.priv]\nindex = \"sparse+{url}/index/\"\n\n\
                 [registry]\nglobal-credential-providers = [\"cargo:token\"]\n\n[net]\nretry = 0\n"
            ),
        )
        .unwrap();
        let out = cargo_run.sh("cd app && cargo fetch --quiet && echo FETCHED");
        assert_eq!(stdout(&out), "FETCHED\n", "{}", stderr(&out));
        let swapped = records(&cargo_run, "inspected").iter().any(|r| {
            r["path"] == "/crates/demo/1.0.0/download"
                && r["status"] == 200
                && r["secrets"] == serde_json::json!(["CARGO_REGISTRIES_PRIV_TOKEN"])
        });
        assert!(swapped, "{}", stderr(&out));
    }
    for request in server.seen() {
        assert!(!request.contains("netbox-secret-"), "{request}");
        if request.starts_with("b.test") {
            assert!(!request.contains(&token), "{request}");
        }
    }
    assert_eq!(found_under(&ws, &token), Vec::<String>::new());
    assert!(!std::fs::read_to_string(&run.log).unwrap().contains(&token));
}

/// The live probe proves it: CMD holds each placeholder, the bridge refuses one sent to
/// the probe's canary, and netbox finds no value in what it gives CMD. A value given to
/// CMD anyway (typed on the command line, expanded by the host's shell, or passed under
/// another name) fails the probe, and CMD never starts.
#[test]
fn the_probe_proves_the_values_stay_outside_and_stops_a_run_that_leaks_one() {
    let dir = TestDir::new("secret-probe");
    let token = real_token("probe");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let server = CredentialedServer::start(&dir.path, &["a.test"], root, &token);
    let p = server.port();
    let policy = allowlist(p, &secret_table("API_TOKEN", "NB_TEST_PROBE_TOKEN", p));
    let run = || run_with(&dir, &server, &policy, "NB_TEST_PROBE_TOKEN", &token);
    let row = |run: &Run, name: &str| -> Value {
        let probe = run.probe();
        probe["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row {name:?} in {probe:#}"))
    };
    // Control: a run that leaks nothing passes both rows and runs CMD.
    let clean = run();
    let out = clean.sh("echo started");
    assert_eq!(stdout(&out), "started\n", "{}", stderr(&out));
    for name in [
        "secrets swapped in by the bridge alone",
        "secret values kept outside the sandbox",
    ] {
        let row = row(&clean, name);
        assert_eq!(row["passed"], true, "{row:#}");
        assert!(!row["forbidden"].as_array().unwrap().is_empty());
        assert!(!row["control"].as_array().unwrap().is_empty());
    }
    let canary = row(&clean, "secrets swapped in by the bridge alone");
    assert!(
        canary.to_string().contains("secret-misdirected"),
        "{canary:#}"
    );

    // The value on CMD's command line, and under another variable's name: refused.
    for (i, (leak, extra)) in [
        ("found in CMD's command line", Vec::new()),
        (
            "found in CMD's environment (ALSO)",
            vec!["--env".to_owned(), format!("ALSO=x{token}x")],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let leaky = run()
            .args_from(&extra.iter().map(String::as_str).collect::<Vec<_>>())
            .log_at(dir.join(&format!("leak-{i}.jsonl")));
        let script = if extra.is_empty() {
            format!("echo started # {token}")
        } else {
            "echo started".to_owned()
        };
        let out = leaky.sh(&script);
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert_eq!(stdout(&out), "", "CMD started");
        let err = stderr(&out);
        assert!(err.contains("API_TOKEN"), "{err}");
        assert!(!err.contains(&token), "the refusal shows the value: {err}");
        let row = row(&leaky, "secret values kept outside the sandbox");
        assert_eq!(row["passed"], false, "{row:#}");
        assert!(row.to_string().contains(leak), "{row:#}");
        assert!(!std::fs::read_to_string(&leaky.log)
            .unwrap()
            .contains(&token));
    }

    // The value left in a credential file CMD could read (the workspace's .npmrc) fails
    // the probe too, and hiding that file is the fix the row names.
    let npmrc = clean.workspace.join(".npmrc");
    std::fs::write(&npmrc, format!("//a.test/:_authToken={token}\n")).unwrap();
    let leaky = run().log_at(dir.join("leak-npmrc.jsonl"));
    let out = leaky.sh("echo started");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let row_text = row(&leaky, "secret values kept outside the sandbox").to_string();
    assert!(row_text.contains(".npmrc (hide it: --hide"), "{row_text}");
    let hidden = run()
        .args_from(&["--hide", npmrc.to_str().unwrap()])
        .log_at(dir.join("hidden-npmrc.jsonl"));
    let out = hidden.sh("wc -c < .npmrc");
    assert_eq!(stdout(&out), "0\n", "{}", stderr(&out));
}

/// `--secret NAME=file:PATH@HOST`: the file is read by netbox and hidden from CMD, which
/// reads it empty; the swap works as from a variable.
#[test]
fn a_secret_read_from_a_file_is_hidden_from_the_command() {
    let dir = TestDir::new("secret-file");
    let token = real_token("file");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), "hello\n").unwrap();
    let server = CredentialedServer::start(&dir.path, &["a.test"], root, &token);
    let p = server.port();
    let allow = dir.write("allow.toml", &allowlist(p, ""));
    let run = Run::new(&dir);
    // In the workspace, where CMD could otherwise read (and write) it.
    let secret_file = run.workspace.join("token.txt");
    std::fs::write(&secret_file, format!("{token}\n")).unwrap();
    let run = run.args_from(&[
        "--allowlist",
        allow.to_str().unwrap(),
        "--upstream-ca",
        server.ca.to_str().unwrap(),
        "--secret",
        &format!("API_TOKEN=file:{}@a.test:{p}", secret_file.display()),
    ]);
    let out = run.sh(&format!(
        "wc -c < {}\n\
         curl -sS --max-time 8 -o /dev/null -w '%{{http_code}}\\n' -H \"Authorization: Bearer $API_TOKEN\" https://a.test:{p}/hello.txt\n\
         curl -sS --max-time 8 -o /dev/null -w '%{{http_code}}\\n' https://a.test:{p}/hello.txt\n",
        secret_file.display()
    ));
    assert_eq!(stdout(&out), "0\n200\n401\n", "{}", stderr(&out));

    // Mistakes are one line each, before anything runs.
    let mistakes = [
        (
            format!("API_TOKEN=file:{}@a.test:{p}", dir.join("none").display()),
            "No such file",
        ),
        (format!("API_TOKEN@a.test:{p}"), "NB_TEST_UNSET"),
        (
            format!("API_TOKEN=env:NB_TEST_UNSET@a.test:{p}"),
            "is not set",
        ),
        ("API_TOKEN=env:X".to_owned(), "@HOST"),
        (format!("API_TOKEN=env:HOME@10.0.0.1:{p}"), "names"),
        (format!("API_TOKEN=env:HOME@c.test:{p}"), "does not allow"),
    ];
    // With no sandbox there is no bridge to swap: refused, not run with the value.
    let out = Run::new(&dir)
        .args_from(&[
            "--disable-sandbox",
            "--secret",
            &format!("API_TOKEN@a.test:{p}"),
        ])
        .sh("echo started");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("--disable-sandbox"),
        "{}",
        stderr(&out)
    );
    for (flag, said) in mistakes {
        let out = Run::new(&dir)
            .args_from(&["--allowlist", allow.to_str().unwrap(), "--secret", &flag])
            .sh("echo started");
        assert_eq!(out.status.code(), Some(125), "{flag}: {}", stderr(&out));
        assert_eq!(stdout(&out), "");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{flag}: {err}");
        let said = if said == "NB_TEST_UNSET" {
            "API_TOKEN is not set"
        } else {
            said
        };
        assert!(err.contains(said), "{flag}: {err}");
    }
}

/// `[[git]]`: a git host lets out pushes to the repositories its `push` lists alone, and
/// fetches of those `fetch` lists; a push elsewhere is refused at its first request,
/// before a byte of it goes upstream, and the server's repository is untouched, beside a
/// push the table allows (with a token swapped in, as a real host would need).
#[test]
fn pushes_go_only_to_the_repositories_a_git_table_lists() {
    let dir = TestDir::new("secret-git-scope");
    let token = real_token("scope");
    let root = dir.join("repos");
    std::fs::create_dir_all(root.join("org")).unwrap();
    std::fs::create_dir_all(root.join("else")).unwrap();
    for repo in ["org/app.git", "org/other.git", "else/lib.git"] {
        crate::support::bare_repo(&dir.path, &format!("repos/{repo}"), "one\n");
    }
    let server = CredentialedServer::start(&dir.path, &["a.test"], root.clone(), &token);
    let p = server.port();
    let log_of = |repo: &str| crate::support::git(&root.join(repo), &["log", "--format=%s"]);
    let policy = format!(
        "tls_ports = [{p}]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n\
         [[git]]\nhost = \"a.test:{p}\"\nfetch = [\"org/*\"]\npush = [\"org/app\"]\n{}",
        secret_table("GIT_TOKEN", "NB_TEST_SCOPE_TOKEN", p)
    );
    // The [[git]] table allows its host (by name: the pin is loopback, so the name must be
    // let reach it).
    let run = run_with(&dir, &server, &policy, "NB_TEST_SCOPE_TOKEN", &token)
        .args_from(&["--allow-private", &format!("a.test:{p}")]);
    let push = |repo: &str| {
        format!(
            "git clone -q https://a.test:{p}/{repo}.git w-{n} && cd w-{n} && \
             git -c user.name=t -c user.email=t@t.test commit -q --allow-empty -m two && \
             git push -q origin HEAD 2>&1 | tail -n 2; echo \"{repo}: ${{PIPESTATUS[0]}}\"; cd ..\n",
            n = repo.replace('/', "-")
        )
    };
    let out = run.sh(&format!(
        "export GIT_TERMINAL_PROMPT=0\n{}{}\
         git clone -q https://a.test:{p}/else/lib.git w-lib 2>&1 | tail -n 1; echo \"clone else/lib: ${{PIPESTATUS[0]}}\"\n\
         git -C w-org-app push -q https://a.test:{p}/org/other.git HEAD 2>&1 | tail -n 1; echo \"into other: ${{PIPESTATUS[0]}}\"\n\
         for q in %73ervice=git-receive-pack 'service=git-receive-pack&x=1' 'x=1&service=git-upload-pack'; do \
           curl -sS -o /dev/null -w \"refs $q: %{{http_code}}\\n\" -u \"netbox:$GIT_TOKEN\" \"https://a.test:{p}/org/other.git/info/refs?$q\"; done\n\
         curl -sS -o /dev/null -w \"refs plain: %{{http_code}}\\n\" -u \"netbox:$GIT_TOKEN\" \"https://a.test:{p}/org/other.git/info/refs?service=git-upload-pack\"\n",
        push("org/app"),
        push("org/other"),
    ));
    let text = stdout(&out);
    // Control: the listed repository takes the push.
    assert!(text.contains("org/app: 0\n"), "{text}{}", stderr(&out));
    assert_eq!(log_of("org/app.git"), "two\none\n");
    // Another repository of the same organisation: cloned (fetch allows org/*), never
    // pushed to, by its own remote or by a URL given to push.
    assert!(text.contains("403"), "{text}");
    assert!(!text.contains("org/other: 0\n"), "{text}");
    assert!(!text.contains("into other: 0\n"), "{text}");
    assert_eq!(
        log_of("org/other.git"),
        "one\n",
        "the refused push reached the server"
    );
    // The ref listing a push starts with, asked in a spelling git never sends (an
    // escaped or repeated parameter, another beside it), is refused; git's own is served.
    assert!(text.contains("refs plain: 200\n"), "{text}");
    for q in [
        "%73ervice=git-receive-pack",
        "service=git-receive-pack&x=1",
        "x=1&service=git-upload-pack",
    ] {
        assert!(text.contains(&format!("refs {q}: 403\n")), "{text}");
    }
    // A repository outside fetch is not even cloned.
    assert!(!text.contains("clone else/lib: 0\n"), "{text}");
    // Nothing of a refused push reached the server: no request to org/other's
    // receive-pack, and none to else/lib at all.
    for request in server.seen() {
        assert!(
            !request.contains("org/other.git/git-receive-pack"),
            "{request}"
        );
        assert!(
            !request.contains("service=git-receive-pack") || request.contains("org/app"),
            "{request}"
        );
        assert!(!request.contains("else/lib"), "{request}");
    }
    let refusals: Vec<Value> = records(&run, "inspected")
        .into_iter()
        .filter(|r| r["decision"] == "deny")
        .collect();
    assert!(
        refusals.iter().any(|r| r["detail"]
            .as_str()
            .unwrap_or("")
            .contains("a push of \"org/other\"")),
        "{refusals:#?}"
    );
}

/// `--ssh-agent`: CMD signs through the user's agent, while the private key in `~/.ssh`
/// reads empty; without the flag the agent is refused (the control that the flag is what
/// lets it through).
#[test]
fn the_ssh_agent_signs_while_the_keys_read_empty() {
    let dir = TestDir::outside_tmp("secret-ssh-agent");
    let home = dir.join("home");
    let ssh = home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = ssh.join("id_ed25519");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "netbox-test", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen is needed for this test");
    assert!(made.success());
    let key_len = std::fs::metadata(&key).unwrap().len();
    // Keys the agent does not hold, where ssh would still find them: a directory under
    // ~/.ssh, and a file outside it that the config names.
    std::fs::create_dir_all(ssh.join("work")).unwrap();
    std::fs::create_dir_all(home.join("keys")).unwrap();
    std::fs::copy(&key, ssh.join("work/deploy")).unwrap();
    std::fs::copy(&key, home.join("keys/named")).unwrap();
    std::fs::write(
        ssh.join("config"),
        "Host git.test\n  IdentityFile ~/keys/named\n",
    )
    .unwrap();
    // The agent's socket under the host's /tmp, which the sandbox does not see: netbox
    // reaches it on the host.
    let agent_dir = TestDir::new("secret-ssh-agent-socket");
    let socket = agent_dir.join("agent.sock");
    let mut agent = std::process::Command::new("ssh-agent")
        .args(["-D", "-a"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("ssh-agent is needed for this test");
    crate::support::wait_for_path(&socket, "the agent's socket");
    let added = std::process::Command::new("ssh-add")
        .arg(&key)
        .env("SSH_AUTH_SOCK", &socket)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(added.success());
    let script = "ssh-add -l 2>&1 | cut -d' ' -f3\n\
                  wc -c < ~/.ssh/id_ed25519\n\
                  cat ~/.ssh/work/deploy ~/keys/named | wc -c\n\
                  echo hello > msg && ssh-keygen -q -Y sign -U -f ~/.ssh/id_ed25519.pub -n file msg \
                  >/dev/null 2>&1 && echo signed || echo 'not signed'\n";
    let run = |flags: &[&str]| {
        Run::new(&dir)
            .args_from(flags)
            .env("HOME", home.display().to_string())
            .env("SSH_AUTH_SOCK", socket.display().to_string())
            .sh(script)
    };
    let out = run(&["--ssh-agent"]);
    let ws = dir.join("ws");
    assert_eq!(
        stdout(&out),
        "netbox-test\n0\n0\nsigned\n",
        "{}",
        stderr(&out)
    );
    // The signature is the key's: checked on the host.
    let checked = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'x %s\\n' \"$(cat {pub_key})\" > allowed && \
             ssh-keygen -q -Y verify -f allowed -I x -n file -s msg.sig < msg",
            pub_key = ssh.join("id_ed25519.pub").display()
        ))
        .current_dir(&ws)
        .status()
        .unwrap();
    assert!(checked.success(), "the signature does not verify");
    // Control: without the flag the agent is refused, and the key file is what it is.
    let out = run(&[]);
    let _ = agent.kill();
    let _ = agent.wait();
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_ne!(lines.first(), Some(&"netbox-test"), "{text}");
    assert_eq!(lines.get(1), Some(&key_len.to_string().as_str()), "{text}");
    assert_eq!(
        lines.get(2),
        Some(&(2 * key_len).to_string().as_str()),
        "{text}"
    );
    assert_eq!(lines.get(3), Some(&"not signed"), "{text}");
    // The probe proved the key hidden (the hidden-paths row) and the socket allowed.
    let hidden = Run::new(&dir).probe()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| {
            c["name"] == "hidden paths"
                && c["passed"] == true
                && c.to_string().contains("id_ed25519")
        });
    assert!(hidden, "{:#}", Run::new(&dir).probe());
}

/// Go: a module proxy named with credentials in `GOPROXY` (go sends them as Basic),
/// which takes the real token alone; the same URL naming another host is refused.
#[test]
fn go_fetches_from_a_module_proxy_with_a_token_it_never_holds() {
    let dir = TestDir::new("secret-go");
    let token = real_token("go");
    let proxy = dir.join("proxy");
    crate::tools::go_module(&proxy);
    let server = CredentialedServer::start(&dir.path, &["a.test", "b.test"], proxy, &token);
    let p = server.port();
    let run = run_with(
        &dir,
        &server,
        &allowlist(p, &secret_table("GO_TOKEN", "NB_TEST_GO_TOKEN", p)),
        "NB_TEST_GO_TOKEN",
        &token,
    )
    .arg("--inspect");
    std::fs::write(
        run.workspace.join("go.mod"),
        "module app\n\ngo 1.19\n\nrequire demo.test/hello v1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        run.workspace.join("main.go"),
        "package main\n\nimport (\n\t\"fmt\"\n\n\t\"demo.test/hello\"\n)\n\n\
         func main() { fmt.Println(hello.Greeting) }\n",
    )
    .unwrap();
    let go = |host: &str| {
        format!(
            "rm -rf \"$PWD/.gomod\"; GOPROXY=\"https://user:$GO_TOKEN@{host}:{p}\" GOSUMDB=off \
             GOFLAGS=-mod=mod GOMODCACHE=\"$PWD/.gomod\" GOCACHE=\"$PWD/.gocache\" \
             GOPATH=\"$PWD/.gopath\" go run . 2>/dev/null || echo 'go failed'\n"
        )
    };
    let out = run.sh(&format!("{}{}", go("a.test"), go("b.test")));
    assert_eq!(
        stdout(&out),
        "hello from the proxy\ngo failed\n",
        "{}",
        stderr(&out)
    );
    assert!(
        records(&run, "inspected")
            .iter()
            .any(|r| r["host"] == "b.test" && r["reason"] == "secret_misdirected"),
        "{}",
        stderr(&out)
    );
    for request in server.seen() {
        assert!(!request.contains("netbox-secret-"), "{request}");
        if request.starts_with("b.test") {
            assert!(!request.contains(&token), "{request}");
        }
    }
}

/// `netbox --bridge URL --secret NAME`: the value lives in the tenant's policy at a shared
/// bridge (read there from a file), which inspects the secret's host with its own CA. The
/// run takes the placeholder and the CA from it at start; CMD's request to the secret's
/// host carries the real value past the bridge, a request elsewhere is refused there, and
/// neither the run's side nor CMD ever holds the value. A secret of the tenant's the run
/// did not name stays unknown to CMD, even by asking its own bridge.
#[test]
fn a_shared_bridge_swaps_in_a_secret_the_run_never_holds() {
    let remote_dir = TestDir::new("secret-remote-bridge");
    let token = real_token("remote");
    let root = remote_dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), "hello from behind the bridge\n").unwrap();
    let server = CredentialedServer::start(&remote_dir.path, &["a.test", "b.test"], root, &token);
    let p = server.port();
    let value_file = remote_dir.write("api-token", &format!("{token}\n"));
    let other_file = remote_dir.write("other-token", &real_token("other"));
    let secrets = format!(
        "[[secret]]\nname = \"API_TOKEN\"\nfrom = \"file:{}\"\nhosts = [\"a.test:{p}\"]\n\
         [[secret]]\nname = \"OTHER_TOKEN\"\nfrom = \"file:{}\"\nhosts = [\"a.test:{p}\"]\n",
        value_file.display(),
        other_file.display()
    );
    remote_dir.write("a.toml", &allowlist(p, &secrets));
    remote_dir.write("b.toml", &allowlist(p, ""));
    let ca_cert = remote_dir.join("bridge-ca.pem");
    let tenant_token = "remote-secret-tenant-Qz8Rw2Nv5Kt1";
    let tenants = remote_dir.write(
        "tenants.toml",
        &format!(
            "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"sha256:{}\"]\n\
             [tenants.team-b]\nallowlist = [\"b.toml\"]\nsecrets = [\"sha256:{}\"]\n",
            crate::support::sha256_hex(tenant_token.as_bytes()),
            crate::support::sha256_hex(b"remote-secret-tenant-b-Lw4Hs9")
        ),
    );
    let remote = crate::support::Bridge::start_args(
        &remote_dir,
        &[
            "--tenants".into(),
            tenants.display().to_string(),
            "--ca-cert".into(),
            ca_cert.display().to_string(),
            "--upstream-ca".into(),
            server.ca.display().to_string(),
        ],
    );

    let dir = TestDir::new("secret-remote-run");
    let outside = TestDir::outside_tmp("secret-remote-token");
    let token_file = outside.write("bridge-token", tenant_token);
    let run = |extra: &[&str]| {
        Run::new(&dir)
            .args_from(&[
                "--bridge",
                &remote.proxy_url(),
                "--bridge-token-file",
                token_file.to_str().unwrap(),
            ])
            .args_from(extra)
    };
    let planted = real_token("planted");
    let good = run(&[
        "--secret",
        "API_TOKEN",
        "--env",
        &format!("PLANTED={planted}"),
    ]);
    let code = "curl -sS --max-time 8 -o /dev/null -w '%{http_code} %header{x-netbox-reason}\\n'";
    let out = good.sh(&format!(
        "echo \"$API_TOKEN\"; echo \"other:${{OTHER_TOKEN:-unset}}\"\n\
         {code} -H \"Authorization: Bearer $API_TOKEN\" https://a.test:{p}/hello.txt\n\
         {code} https://a.test:{p}/hello.txt\n\
         {code} -H \"Authorization: Bearer $API_TOKEN\" http://b.test:{p}/hello.txt\n\
         curl -sS --max-time 8 http://netbox-bridge.invalid/; echo\n\
         curl -sS --max-time 8 -p -o /dev/null -w '%{{http_connect}}\\n' http://netbox-bridge.invalid/ 2>/dev/null\n\
         mkdir seen && cat /proc/self/environ > seen/environ && cp -r /run/netbox seen/run-netbox\n"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    let placeholder = &lines[0];
    assert!(
        placeholder.starts_with("netbox-secret-API_TOKEN-") && placeholder.len() > 40,
        "{placeholder}"
    );
    // Only the secret the run named.
    assert_eq!(lines[1], "other:unset");
    // Control: the placeholder reaches the server as the real value (and CMD trusted the
    // bridge's CA, or TLS would have failed); without it the server refuses.
    assert_eq!(lines[2], "200 ", "{}", stderr(&out));
    assert_eq!(lines[3], "401 ");
    // Elsewhere, the bridge at the other end refuses it, and says why.
    assert_eq!(lines[4], "403 secret-misdirected");
    // Its own bridge answers CMD for itself: none of the tenant's placeholders.
    let own: Value = serde_json::from_str(&lines[5]).unwrap();
    assert_eq!(own["secrets"], serde_json::json!([]), "{own}");
    assert!(!lines[5].contains("netbox-secret-"), "{}", lines[5]);
    // Through a tunnel, the name is refused outright.
    assert_eq!(lines[6], "400");
    // What reached the server: the real value, never a placeholder.
    let seen = server.seen();
    assert!(seen.iter().any(|s| s.contains(&token)), "{seen:?}");
    assert!(
        seen.iter().all(|s| !s.contains("netbox-secret-")),
        "{seen:?}"
    );
    // Nothing of the run's side holds the value: the sandbox's environment and /run (the
    // control planted on purpose is found), the workspace, the local log.
    let ws = &good.workspace;
    assert!(
        !found_under(&ws.join("seen"), &planted).is_empty(),
        "the control"
    );
    assert!(!found_under(&ws.join("seen"), placeholder).is_empty());
    assert_eq!(found_under(ws, &token), Vec::<String>::new());
    assert!(!std::fs::read_to_string(&good.log).unwrap().contains(&token));
    assert!(!stderr(&out).contains(&token));
    // The probe's row: the placeholder held, and refused when misdirected.
    let probe = good.probe();
    let row = probe["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "secrets swapped in by the bridge alone")
        .cloned()
        .unwrap_or_else(|| panic!("{probe:#}"));
    assert_eq!(row["passed"], true, "{row:#}");
    // There: the swap logged under the tenant, naming the secret, never its value.
    let there = remote.events(4);
    assert!(
        there.iter().any(|r| r["session"] == "e2e/team-a"
            && r["proto"] == "inspected"
            && r["secrets"] == serde_json::json!(["API_TOKEN"])
            && r["status"] == 200),
        "{there:#?}"
    );
    assert!(there
        .iter()
        .any(|r| r["reason"] == "secret_misdirected" && r["host"] == "b.test"));
    let remote_log = std::fs::read_to_string(remote_dir.join("events.jsonl")).unwrap();
    assert!(!remote_log.contains(&token));

    // CMD trusts the bridge's CA through the bundle netbox lays, which says whose it is.
    let bundle =
        std::fs::read_to_string(ws.join("seen/run-netbox/ca-bundle.pem")).unwrap_or_default();
    assert!(
        bundle.starts_with(&format!(
            "# netbox: the CA of the bridge at {}",
            remote.proxy_url()
        )),
        "{}",
        bundle.lines().next().unwrap_or("")
    );

    // A reload of the bridge keeps the placeholder of a secret it did not change: runs
    // holding it go on working.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(remote.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while remote
        .records()
        .iter()
        .filter(|r| r["type"] == "policy_loaded")
        .count()
        < 4
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            remote.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let again = run(&["--secret", "API_TOKEN"])
        .log_at(dir.join("again.jsonl"))
        .sh(&format!(
            "echo \"$API_TOKEN\"\n\
         {code} -H \"Authorization: Bearer $API_TOKEN\" https://a.test:{p}/hello.txt\n"
        ));
    assert_eq!(
        stdout(&again),
        format!("{placeholder}\n200 \n"),
        "{}",
        stderr(&again)
    );

    // A secret the tenant does not have: one line naming those it has, and CMD never runs.
    let missing = run(&["--secret", "NOPE"]).sh("echo started");
    assert_eq!(missing.status.code(), Some(125), "{}", stderr(&missing));
    assert_eq!(stdout(&missing), "");
    let err = stderr(&missing);
    assert!(
        err.contains("--secret NOPE") && err.contains("it holds API_TOKEN, OTHER_TOKEN"),
        "{err}"
    );
    // A value or hosts given here with --bridge: they are the bridge's to say.
    let local = run(&["--secret", "API_TOKEN@a.test"]).sh("echo started");
    assert_eq!(local.status.code(), Some(125), "{}", stderr(&local));
    assert!(
        stderr(&local).contains("name it alone"),
        "{}",
        stderr(&local)
    );
}
