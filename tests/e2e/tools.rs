//! `--allow-tool` (issue 12): the registries a package manager uses, found in its own
//! configuration at run time, are allowed, and nothing else; its cache goes to netbox's
//! own directory. Real clients against local registries served over HTTPS with a test CA,
//! their names pinned to loopback (and declared internal with `--private-ok`).

use std::process::Command;

use crate::support::upstream::HttpServer;
use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

/// The control each registry test ends with: the registry's host was refused and the
/// refusal logged (a `net` record with a deny decision).
fn assert_refused_and_logged(dir: &TestDir, host: &str, out: &std::process::Output) {
    let refused = Run::new(dir)
        .events()
        .into_iter()
        .any(|e| e["type"] == "net" && e["host"] == host && e["decision"] == "deny");
    assert!(refused, "no refusal of {host} logged: {}", stderr(out));
}

/// A package `demo-pkg@1.0.0` in an npm registry laid out under `root`, served at
/// `https://npm.test:PORT/`: its packument and its tarball (with its integrity).
fn npm_registry(dir: &TestDir) -> HttpServer {
    let root = dir.join("registry");
    std::fs::create_dir_all(root.join("demo-pkg/-")).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["npm.test"], root.clone());
    let package = dir.join("package-src/package");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(
        package.join("package.json"),
        r#"{"name":"demo-pkg","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(
        package.join("index.js"),
        "module.exports = 'demo says hi';\n",
    )
    .unwrap();
    let tarball = root.join("demo-pkg/-/demo-pkg-1.0.0.tgz");
    let packed = Command::new("tar")
        .arg("czf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir.join("package-src"))
        .arg("package")
        .status()
        .unwrap();
    assert!(packed.success());
    let integrity = Command::new("python3")
        .args([
            "-c",
            "import base64, hashlib, sys; \
             print('sha512-' + base64.b64encode(hashlib.sha512(open(sys.argv[1], 'rb').read()).digest()).decode())",
        ])
        .arg(&tarball)
        .output()
        .unwrap();
    let integrity = stdout(&integrity).trim().to_owned();
    let port = server.port();
    std::fs::write(
        root.join("demo-pkg/index.json"),
        format!(
            r#"{{"name":"demo-pkg","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"demo-pkg","version":"1.0.0","main":"index.js","dist":{{"tarball":"https://npm.test:{port}/demo-pkg/-/demo-pkg-1.0.0.tgz","integrity":"{integrity}"}}}}}}}}"#
        ),
    )
    .unwrap();
    server
}

#[test]
fn npm_installs_from_the_registry_its_configuration_names_and_nothing_else() {
    let dir = TestDir::new("tool-npm");
    let registry = npm_registry(&dir);
    let pins = dir.write("pins.toml", "[hosts]\n\"npm.test\" = \"127.0.0.1\"\n");
    let run = Run::new(&dir);
    std::fs::write(
        run.workspace.join("package.json"),
        r#"{"name":"app","version":"1.0.0","dependencies":{"demo-pkg":"1.0.0"}}"#,
    )
    .unwrap();
    // The test CA inside the workspace: the host's /tmp is not in the sandbox.
    let ca = run.workspace.join("test-ca.pem");
    std::fs::copy(registry.ca.as_ref().unwrap(), &ca).unwrap();
    // The registry is the user's setting (the environment): one a workspace file named
    // would not be taken as internal (an earlier command may have written it).
    let registry_url = format!("https://npm.test:{}/", registry.port());
    let cache_home = dir.join("cache-home");
    let with_tool = |extra: &[&str]| {
        let mut args = vec!["--quiet", "--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("XDG_CACHE_HOME", cache_home.display().to_string())
            .env("npm_config_registry", registry_url.clone())
            .env("npm_config_cafile", ca.display().to_string())
    };
    let install = "npm install --no-audit --no-fund --loglevel=error \
                   && node -e \"console.log(require('demo-pkg'))\"";
    let out = with_tool(&["--allow-tool", "npm", "--private-ok"]).sh(install);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("demo says hi"), "{}", stdout(&out));
    // Its cache is netbox's, not the home's, and it holds what was fetched.
    assert!(
        std::fs::read_dir(cache_home.join("netbox/npm"))
            .unwrap()
            .next()
            .is_some(),
        "npm's cache is empty"
    );

    // Control: without --allow-tool the registry is refused, and fast (403: npm gives up
    // at once), and logged.
    std::fs::remove_dir_all(run.workspace.join("node_modules")).unwrap();
    let started = std::time::Instant::now();
    let out = with_tool(&["--refusal-status", "403"]).sh(install);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let refused = Run::new(&dir)
        .events()
        .into_iter()
        .any(|e| e["type"] == "net" && e["host"] == "npm.test" && e["decision"] == "deny");
    assert!(refused, "no refusal of npm.test in the log");
    assert!(!run.workspace.join("node_modules/demo-pkg").exists());
}

#[test]
fn netbox_tools_says_what_it_would_allow_and_where_from() {
    let dir = TestDir::new("tool-list");
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join(".cargo")).unwrap();
    std::fs::write(
        ws.join(".cargo/config.toml"),
        "[source.crates-io]\nreplace-with = \"mirror\"\n[source.mirror]\nregistry = \"sparse+https://index.mirror.test:8443/\"\n",
    )
    .unwrap();
    std::fs::write(ws.join(".npmrc"), "registry=https://npm.mirror.test/\n").unwrap();
    std::fs::write(ws.join("package.json"), "{}").unwrap();
    let out = Command::new(netbox_bin())
        .args(["tools", "cargo", "npm"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("\"index.mirror.test:8443\", # cargo configuration"),
        "{text}"
    );
    assert!(
        text.contains("\"npm.mirror.test:443\", # registry in"),
        "{text}"
    );
    // The output is an allowlist.
    let parsed: toml::Table = text.parse().expect("valid TOML");
    assert!(parsed.contains_key("allow"));
    // An unknown tool is one clear line.
    let out = Command::new(netbox_bin())
        .args(["tools", "nosuchtool"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("unknown tool"), "{}", stderr(&out));
}

/// maven's and bundler's settings: the user's mirror stands in for maven's default
/// repository, the project's POM and Gemfile add theirs, and a settings file with a DTD
/// (entity expansion) is refused with a note.
#[test]
fn netbox_tools_reads_maven_and_bundler_settings() {
    let dir = TestDir::new("tool-list-jvm-ruby");
    let (ws, home) = (dir.join("ws"), dir.join("home"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(home.join(".m2")).unwrap();
    std::fs::write(
        home.join(".m2/settings.xml"),
        "<settings><mirrors><mirror><id>corp</id><mirrorOf>*</mirrorOf>\
         <url>https://maven.corp.test/all</url></mirror></mirrors></settings>\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("pom.xml"),
        "<project><repositories><repository><id>r</id><url>https://repo.project.test:8443/m2</url>\
         </repository></repositories><distributionManagement><repository><id>d</id>\
         <url>https://publish.project.test/</url></repository></distributionManagement></project>\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("Gemfile"),
        "source \"https://gems.project.test\"\ngem \"rake\"\n",
    )
    .unwrap();
    let tools = |home: &std::path::Path| {
        Command::new(netbox_bin())
            .args(["tools", "maven", "bundle"])
            .current_dir(&ws)
            .env("HOME", home)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let out = tools(&home);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "\"maven.corp.test:443\", # maven settings",
        "\"repo.project.test:8443\", # repository in",
        "# note: maven's default repository is mirrored in its settings",
        "\"gems.project.test:443\", # source in",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    assert!(!text.contains("publish.project.test"), "{text}");
    assert!(!text.contains("super POM"), "{text}");
    // A DTD in the user's settings: refused, said, and nothing of it taken.
    std::fs::write(
        home.join(".m2/settings.xml"),
        "<?xml version=\"1.0\"?><!DOCTYPE s [<!ENTITY u \"https://dtd.test/\">]>\
         <settings><mirrors><mirror><mirrorOf>*</mirrorOf><url>&u;</url></mirror></mirrors></settings>\n",
    )
    .unwrap();
    let out = tools(&home);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("# note: cannot read"), "{text}");
    assert!(!text.contains("dtd.test"), "{text}");
}

/// The tools are asked on the host, before the sandbox, about a workspace an earlier
/// command may have written: a program planted there (on a PATH entry inside it, or a
/// relative one) is never run, and Python never imports from it.
#[test]
fn asking_a_tool_never_runs_what_the_workspace_holds() {
    let dir = TestDir::new("tool-planted");
    let ws = dir.join("ws");
    let marker = dir.join("ran");
    std::fs::create_dir_all(ws.join("bin")).unwrap();
    // npm's `#!/usr/bin/env node` must not find a planted `node` either.
    for tool in ["npm", "pip", "git", "go", "node", "python3"] {
        let fake = ws.join("bin").join(tool);
        std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    // A module that would shadow pip's own for a Python run from the workspace.
    std::fs::create_dir_all(ws.join("pip")).unwrap();
    std::fs::write(
        ws.join("pip/__init__.py"),
        format!("open('{}', 'w').write('x')\n", marker.display()),
    )
    .unwrap();
    // Nor a sitecustomize the caller's PYTHONPATH would load.
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("src/sitecustomize.py"),
        format!("open('{}', 'w').write('x')\n", marker.display()),
    )
    .unwrap();
    let out = Command::new(netbox_bin())
        .args(["tools", "npm", "pip", "git", "go"])
        .current_dir(&ws)
        .env("PYTHONPATH", ws.join("src"))
        .env(
            "NODE_OPTIONS",
            format!("--require {}", ws.join("pip/__init__.py").display()),
        )
        .env(
            "PATH",
            format!(
                "bin:{}:/usr/local/bin:/usr/bin:/bin",
                ws.join("bin").display()
            ),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!marker.exists(), "a program from the workspace ran");
    // Control: the same fake, run the way netbox must not, leaves the marker.
    let ran = Command::new(ws.join("bin/npm")).status().unwrap();
    assert!(ran.success() && marker.exists());
}

/// Whether this user can run cargo: rustup's cargo lives in its installer's home
/// (/root/.cargo here), and another user may have none to run.
pub fn cargo_runs() -> bool {
    let usable = Command::new("cargo").arg("--version").output();
    usable.is_ok_and(|o| o.status.success())
}

/// A sparse cargo registry under `dir`, served at `https://index.test:PORT/`, holding the
/// crate `demo 1.0.0`, whose download is served from `https://dl.test:PORT/` as only the
/// index's own `config.json` says.
pub fn cargo_registry(dir: &TestDir) -> HttpServer {
    let root = dir.join("registry");
    std::fs::create_dir_all(root.join("de/mo")).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["index.test", "dl.test"], root.clone());
    let port = server.port();
    std::fs::write(
        root.join("config.json"),
        format!(r#"{{"dl":"https://dl.test:{port}/crates"}}"#),
    )
    .unwrap();
    let src = dir.join("crate-src/demo-1.0.0");
    std::fs::create_dir_all(src.join("src")).unwrap();
    std::fs::write(
        src.join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"1.0.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        src.join("src/lib.rs"),
        "pub fn hi() -> &'static str { \"hi\" }\n",
    )
    .unwrap();
    let download = root.join("crates/demo/1.0.0");
    std::fs::create_dir_all(&download).unwrap();
    let packed = Command::new("tar")
        .arg("czf")
        .arg(download.join("download"))
        .arg("-C")
        .arg(dir.join("crate-src"))
        .arg("demo-1.0.0")
        .status()
        .unwrap();
    assert!(packed.success());
    let cksum = crate::support::file_sha256(&download.join("download"));
    std::fs::write(
        root.join("de/mo/demo"),
        format!(
            "{{\"name\":\"demo\",\"vers\":\"1.0.0\",\"deps\":[],\"cksum\":\"{cksum}\",\"features\":{{}},\"yanked\":false}}\n"
        ),
    )
    .unwrap();
    server
}

/// `cargo fetch` from a local sparse registry set through source replacement in the
/// project's `.cargo/config.toml`, whose crates download from a second host that only
/// the index's own `config.json` names: `--allow-tool cargo` finds both.
#[test]
fn cargo_fetches_from_a_replaced_source_and_its_download_host() {
    // The test then has nothing to run; it runs as the user who installed cargo.
    if !cargo_runs() {
        eprintln!("cargo is not runnable by this user: nothing to test");
        return;
    }
    TestDir::remove_leftovers_outside_tmp("tool-cargo");
    // The registry is set above the workspace (where cargo looks too), outside /tmp so the
    // sandbox sees it: a workspace file would not be taken as internal.
    let dir = TestDir::outside_tmp("tool-cargo");
    let server = cargo_registry(&dir);
    let port = server.port();
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"index.test\" = \"127.0.0.1\"\n\"dl.test\" = \"127.0.0.1\"\n",
    );
    let run = Run::new(&dir);
    let ws = &run.workspace;
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(dir.join(".cargo")).unwrap();
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() { println!(\"{}\", demo::hi()); }\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ndemo = \"1\"\n",
    )
    .unwrap();
    // The CA outside every writable root: one in the workspace could have been planted
    // to forge the index's config.json (checked below).
    let ca = dir.join("test-ca.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let cargo_config = |ca: &std::path::Path| {
        format!(
            "[source.crates-io]\nreplace-with = \"local\"\n\n[source.local]\nregistry = \"sparse+https://index.test:{port}/\"\n\n\
             [http]\ncainfo = \"{}\"\n\n[net]\nretry = 0\n",
            ca.display()
        )
    };
    std::fs::write(dir.join(".cargo/config.toml"), cargo_config(&ca)).unwrap();
    let cache_home = dir.join("cache-home").display().to_string();
    let with = |extra: &[&str]| {
        let mut args = vec!["--quiet", "--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("XDG_CACHE_HOME", cache_home.clone())
    };
    let out =
        with(&["--allow-tool", "cargo", "--private-ok"]).sh("cargo fetch --quiet && echo FETCHED");
    assert_eq!(stdout(&out), "FETCHED\n", "{}", stderr(&out));
    let via_dl = Run::new(&dir).events().into_iter().any(|e| {
        e["type"] == "net"
            && e["host"] == "dl.test"
            && e["decision"] == "allow"
            && e["rule"]["file"]
                .as_str()
                .unwrap_or("")
                .contains("config.json")
    });
    assert!(
        via_dl,
        "the download host was not allowed by its config.json rule"
    );
    // The crate went to cargo's cache in netbox's directory, not the user's CARGO_HOME.
    let cached = std::fs::read_dir(dir.join("cache-home/netbox/cargo"))
        .unwrap()
        .flatten()
        .any(|e| e.path().join("registry/cache").is_dir());
    assert!(cached, "no registry cache in netbox's cargo home");

    // A CA in the workspace could have been planted to forge config.json: the download
    // host it names is allowed, but not trusted to reach a private address.
    let planted = ws.join("planted-ca.pem");
    std::fs::copy(&ca, &planted).unwrap();
    std::fs::write(dir.join(".cargo/config.toml"), cargo_config(&planted)).unwrap();
    let probe = format!(
        "curl -s -o /dev/null -w '%{{http_code}}' --cacert {} https://dl.test:{port}/config.json",
        ca.display()
    );
    let out = with(&["--allow-tool", "cargo", "--private-ok"]).sh(&probe);
    assert_eq!(stdout(&out), "000", "{}", stderr(&out));
    // Positive control: the same request with the CA outside the workspace.
    std::fs::write(dir.join(".cargo/config.toml"), cargo_config(&ca)).unwrap();
    let out = with(&["--allow-tool", "cargo", "--private-ok"]).sh(&probe);
    assert_eq!(stdout(&out), "200", "{}", stderr(&out));

    // Control: without --allow-tool (and a writable CARGO_HOME of its own), nothing is
    // fetched.
    let cargo_home = format!("CARGO_HOME={}/.cargo-home", ws.display());
    let out = with(&["--env", &cargo_home]).sh("cargo fetch --quiet && echo FETCHED");
    assert_ne!(stdout(&out), "FETCHED\n", "{}", stderr(&out));
    assert_refused_and_logged(&dir, "index.test", &out);
}

/// With `--allow-tool cargo`, CMD's `CARGO_HOME` is netbox's, writable, and holds the
/// user's own settings afresh at each run: what an earlier run wrote there as settings
/// or programs (a `rustc-wrapper`, credentials with a provider, a link, a `cargo-NAME`
/// in `bin/`) is gone by the next.
#[test]
fn cargos_home_of_netboxs_gets_the_users_settings_afresh_each_run() {
    let dir = TestDir::new("tool-cargo-home");
    let user = TestDir::outside_tmp("tool-cargo-user-home");
    user.write("config.toml", "[net]\nretry = 0\n");
    let with = || {
        Run::new(&dir)
            .args_from(&["--quiet", "--allow-tool", "cargo"])
            .env("CARGO_HOME", user.path.display().to_string())
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    let plant = "cat \"$CARGO_HOME/config.toml\"; \
                 printf '[build]\\nrustc-wrapper = \"/tmp/evil\"\\n' > \"$CARGO_HOME/config.toml\"; \
                 echo '[registry]' > \"$CARGO_HOME/credentials.toml\"; \
                 ln -s /etc/passwd \"$CARGO_HOME/config\"; \
                 mkdir \"$CARGO_HOME/bin\" && echo planted > \"$CARGO_HOME/bin/cargo-clippy\"; \
                 echo \"$CARGO_HOME\"";
    let out = with().sh(plant);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("[net]\nretry = 0\n"), "{text}");
    let home = text.lines().last().unwrap().to_owned();
    assert!(
        home.starts_with(&dir.join("cache-home/netbox/cargo").display().to_string()),
        "{home}"
    );
    // Positive control: the planting took (it would be read by a later run).
    assert!(std::path::Path::new(&home)
        .join("credentials.toml")
        .exists());
    let out = with().sh("cat \"$CARGO_HOME/config.toml\"; ls -A \"$CARGO_HOME\"");
    assert_eq!(
        stdout(&out),
        "[net]\nretry = 0\nconfig.toml\n",
        "{}",
        stderr(&out)
    );
    // The user's own settings were never touched.
    assert_eq!(
        std::fs::read_to_string(user.join("config.toml")).unwrap(),
        "[net]\nretry = 0\n"
    );
}

/// netbox's cache directory must be its own: one inside a writable root is refused (CMD
/// could swap it for a link, and netbox would write, and CMD be given, wherever that
/// leads), and a link found where it goes is refused, never followed.
#[test]
fn a_tool_cache_netbox_cannot_own_is_refused() {
    let dir = TestDir::new("tool-cache-own");
    let run = Run::new(&dir);
    let out = Run::new(&dir)
        .args_from(&["--allow-tool", "cargo"])
        .env(
            "XDG_CACHE_HOME",
            run.workspace.join(".cache").display().to_string(),
        )
        .sh("echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("would lie in the writable root"),
        "{}",
        stderr(&out)
    );
    let cache = dir.join("cache-home").display().to_string();
    let with = || {
        Run::new(&dir)
            .args_from(&["--quiet", "--allow-tool", "cargo"])
            .env("XDG_CACHE_HOME", cache.clone())
    };
    let out = with().sh("echo \"$CARGO_HOME\"");
    assert!(out.status.success(), "{}", stderr(&out));
    let home = std::path::PathBuf::from(stdout(&out).trim());
    // Swapped for a link, as a run given the cache's parent to write could.
    let victim = dir.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("credentials.toml"), "SECRET").unwrap();
    std::fs::remove_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&victim, &home).unwrap();
    let out = with().sh("echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert_ne!(stdout(&out), "ran\n");
    assert!(
        victim.join("credentials.toml").exists(),
        "followed the link"
    );
    // Positive control: with the link gone, the run goes ahead.
    std::fs::remove_file(&home).unwrap();
    let out = with().sh("echo ran");
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    // A run that makes its cache unreadable stops no later run.
    let out = with().sh("chmod 000 \"$CARGO_HOME\"");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = with().sh("echo ran");
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    // A cache home reached through a link (one an earlier run given its parent could
    // have planted) is refused, and nothing is made where it leads.
    std::os::unix::fs::symlink(&victim, dir.join("planted")).unwrap();
    let out = Run::new(&dir)
        .args_from(&["--allow-tool", "cargo"])
        .env(
            "XDG_CACHE_HOME",
            dir.join("planted/c").display().to_string(),
        )
        .sh("echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is reached through the link"),
        "{}",
        stderr(&out)
    );
    assert!(!victim.join("c").exists());
    // A directory above the cache is not netbox's: its mode is left as it is, even one
    // its owner may search but not read.
    let above = dir.join("above");
    std::fs::create_dir_all(&above).unwrap();
    let search_only = std::os::unix::fs::PermissionsExt::from_mode(0o311);
    std::fs::set_permissions(&above, search_only).unwrap();
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--allow-tool", "cargo"])
        .env("XDG_CACHE_HOME", above.join("c").display().to_string())
        .sh("echo ran");
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&above).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o311);
    std::fs::set_permissions(&above, PermissionsExt::from_mode(0o755)).unwrap();
}

/// A wheel `demopkg-1.0` (pure Python), built by hand: a zip with its module, METADATA,
/// WHEEL and RECORD.
/// A pip registry's static layout under `dir/index`, served over HTTPS for
/// `pypi.mirror.test` (the index) and `files.mirror.test` (its files), with one wheel
/// (`demopkg`) built in it: the server, the layout's root and the wheel's SHA-256. The
/// project's page is the caller's to write.
pub(crate) fn pip_registry(dir: &TestDir) -> (HttpServer, std::path::PathBuf, String) {
    let root = dir.join("index");
    std::fs::create_dir_all(root.join("simple/demopkg")).unwrap();
    let server = HttpServer::start_tls_files(
        &dir.path,
        &["pypi.mirror.test", "files.mirror.test"],
        root.clone(),
    );
    let wheel = build_wheel(&root);
    let sha = crate::support::file_sha256(&wheel);
    (server, root, sha)
}

fn build_wheel(dir: &std::path::Path) -> std::path::PathBuf {
    let wheel = dir.join("demopkg-1.0-py3-none-any.whl");
    let script = r#"
import sys, zipfile
out = sys.argv[1]
files = {
    "demopkg/__init__.py": "GREETING = 'demopkg says hi'\n",
    "demopkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demopkg\nVersion: 1.0\n",
    "demopkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = "".join(f"{name},,\n" for name in files) + "demopkg-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(out, "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr("demopkg-1.0.dist-info/RECORD", record)
"#;
    let built = Command::new("python3")
        .args(["-c", script])
        .arg(&wheel)
        .status()
        .unwrap();
    assert!(built.success());
    wheel
}

/// `pip install` from a local simple index that the user's pip configuration names
/// (`PIP_INDEX_URL`), whose files live on a second host that only the index's own pages
/// name: `--allow-tool pip` finds both.
#[test]
fn pip_installs_from_the_index_its_configuration_names_and_its_files_host() {
    let dir = TestDir::new("tool-pip");
    let (server, root, sha) = pip_registry(&dir);
    let port = server.port();
    // The file server answers a directory with its index.json: HTML pages here. No `pip`
    // project: netbox reads the first one the index lists.
    std::fs::write(
        root.join("simple/index.json"),
        "<html><body><a href=\"/simple/demopkg/\">demopkg</a></body></html>\n",
    )
    .unwrap();
    // A page may link anything: hosts on other ports (an index's files are on 443, 80 or
    // its own port) are not taken, and two file hosts at most.
    let odd: String = (0..50)
        .map(|i| format!("<a href=\"https://odd{i}.test:{}/x.whl\">x</a>", 22 + i))
        .collect();
    let more: String = (0..5)
        .map(|i| format!("<a href=\"https://cdn{i}.test/x.whl\">x</a>"))
        .collect();
    std::fs::write(
        root.join("simple/demopkg/index.json"),
        format!(
            "<html><body><a href=\"https://files.mirror.test:{port}/demopkg-1.0-py3-none-any.whl#sha256={sha}\">demopkg-1.0-py3-none-any.whl</a>{odd}{more}</body></html>\n"
        ),
    )
    .unwrap();
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"pypi.mirror.test\" = \"127.0.0.1\"\n\"files.mirror.test\" = \"127.0.0.1\"\n",
    );
    let run = Run::new(&dir);
    // The CA outside every writable root (one in the workspace could have been planted to
    // forge the index's pages: what they name would not be trusted with --private-ok).
    let ca_dir = TestDir::outside_tmp("tool-pip-ca");
    let ca = ca_dir.join("test-ca.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let index = format!("https://pypi.mirror.test:{port}/simple/");
    let with = |extra: &[&str]| {
        let mut args = vec!["--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("PIP_INDEX_URL", index.clone())
            .env("PIP_CERT", ca.display().to_string())
            .env("PIP_RETRIES", "0")
            .env("PIP_FIND_LINKS", "")
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    // TLS is not what is tested here (pip 23 did not take the test CA through a proxy):
    // the index is a trusted host. pip's own status is not used: pyenv's shim fails the
    // install when it cannot rehash its read-only shims, after installing.
    let install =
        "pip install --quiet --trusted-host pypi.mirror.test --trusted-host files.mirror.test \
                   --no-deps --target deps demopkg; \
                   PYTHONPATH=deps python3 -c 'import demopkg; print(demopkg.GREETING)'";
    let out = with(&["--allow-tool", "pip", "--private-ok"]).sh(install);
    assert_eq!(stdout(&out), "demopkg says hi\n", "{}", stderr(&out));
    // The start-up line says where the files host came from: the index, its files host
    // and one more (cdn0), none of the odd ports.
    assert!(
        stderr(&out).contains(&format!(
            "pip: 3 hosts (index-url in the environment (PIP_INDEX_URL); files on https://pypi.mirror.test:{port}/simple/demopkg/)"
        )),
        "{}",
        stderr(&out)
    );
    assert!(dir.join("cache-home/netbox/pip").is_dir());
    // A CA in the workspace could have been planted to forge the index's pages: the
    // files host they name is allowed, but not trusted to reach a private address.
    std::fs::remove_dir_all(run.workspace.join("deps")).unwrap();
    let planted_ca = run.workspace.join("planted-ca.pem");
    std::fs::copy(&ca, &planted_ca).unwrap();
    let out = with(&["--allow-tool", "pip", "--private-ok"])
        .env("PIP_CERT", planted_ca.display().to_string())
        .sh(install);
    assert_ne!(stdout(&out), "demopkg says hi\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("blocked CONNECT files.mirror.test"),
        "{}",
        stderr(&out)
    );
    // Control: without it, refused.
    let _ = std::fs::remove_dir_all(run.workspace.join("deps"));
    let out = with(&["--quiet"]).sh(install);
    assert_ne!(stdout(&out), "demopkg says hi\n", "{}", stderr(&out));
    assert_refused_and_logged(&dir, "pypi.mirror.test", &out);
}

/// A tool's configuration is text an earlier command may have written: what it names
/// becomes a rule only as a name with one port (never an address, a wildcard or every
/// port), and what is shown of it is escaped.
#[test]
fn planted_tool_configuration_opens_no_address_and_prints_no_control_characters() {
    let dir = TestDir::new("tool-hostile");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        ws.join(".npmrc"),
        "registry=http://127.0.0.1:*/\n@evil:registry=https://*.com:*/\n@x:registry=http://[::1]:1-65535/\n@ok:registry=https://npm.corp.test:8443/\n",
    )
    .unwrap();
    std::fs::write(ws.join("package.json"), "{}").unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    git(&["init", "-q"]);
    // A remote name git's porcelain would refuse, written into the config directly.
    let mut config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    config.push_str("[remote \"x\u{1b}[2J\"]\n\turl = https://forge.test/a.git\n");
    std::fs::write(ws.join(".git/config"), config).unwrap();
    let out = Command::new(netbox_bin())
        .args(["tools", "npm", "git"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rules: toml::Table = text.parse().expect("valid TOML");
    let allowed: Vec<&str> = rules["allow"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    // Control: the ordinary ones are there; none of the planted ones.
    for wanted in ["npm.corp.test:8443", "forge.test:443"] {
        assert!(allowed.contains(&wanted), "{wanted}: {text}");
    }
    for planted in ["127.0.0.1", "*", "[::1]", "localhost"] {
        assert!(
            !allowed.iter().any(|r| r.contains(planted)),
            "{planted}: {text}"
        );
    }
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

/// `git clone` over HTTPS of a remote the workspace's own git configuration names (the
/// dumb HTTP protocol, served as files): `--allow-tool git` finds it. A workspace's
/// remotes are its own text, so they are never taken as internal: the test opens the
/// loopback address the name is pinned to with an address rule of the user's.
#[test]
fn git_clones_the_remote_the_workspace_names() {
    let dir = TestDir::new("tool-git");
    let root = dir.join("served");
    std::fs::create_dir_all(&root).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["forge.test"], root.clone());
    let port = server.port();
    // A bare repository with one commit, laid out for the dumb protocol.
    let git = |cwd: &std::path::Path, args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t.test"])
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    };
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("README"), "from the forge\n").unwrap();
    git(&src, &["add", "README"]);
    git(&src, &["commit", "-q", "-m", "one"]);
    git(
        &dir.path,
        &["clone", "-q", "--bare", "src", "served/app.git"],
    );
    git(&root.join("app.git"), &["update-server-info"]);

    let run = Run::new(&dir);
    git(&run.workspace, &["init", "-q"]);
    let url = format!("https://forge.test:{port}/app.git");
    git(&run.workspace, &["remote", "add", "origin", &url]);
    let ca = dir.join("ca-for-git.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let ca_in_ws = run.workspace.join("test-ca.pem");
    std::fs::copy(&ca, &ca_in_ws).unwrap();
    let pins = dir.write(
        "pins.toml",
        &format!("allow = [\"127.0.0.1:{port}\"]\n[hosts]\n\"forge.test\" = \"127.0.0.1\"\n"),
    );
    let clone = format!(
        "GIT_SSL_CAINFO={} git clone -q {url} cloned && cat cloned/README",
        ca_in_ws.display()
    );
    let with = |extra: &[&str]| {
        let mut args = vec!["--quiet", "--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir).args_from(&args)
    };
    let out = with(&["--allow-tool", "git"]).sh(&clone);
    assert_eq!(stdout(&out), "from the forge\n", "{}", stderr(&out));
    // Control: the address rule alone does not let the name through.
    std::fs::remove_dir_all(run.workspace.join("cloned")).unwrap();
    let out = with(&[]).sh(&clone);
    assert_ne!(stdout(&out), "from the forge\n", "{}", stderr(&out));
    assert_refused_and_logged(&dir, "forge.test", &out);
}

/// `--private-ok` trusts only the user's own settings: not npm's environment when netbox
/// runs from an npm script (npm exports the project's .npmrc there), nor a cargo home in
/// the workspace. Control: the same registry from the user's environment reaches its
/// private address.
#[test]
fn private_ok_never_trusts_settings_the_workspace_could_have_written() {
    let dir = TestDir::new("tool-private-ok");
    let server = crate::support::upstream::HttpServer::start();
    let port = server.port();
    let pins = dir.write("pins.toml", "[hosts]\n\"intranet.test\" = \"127.0.0.1\"\n");
    let url = format!("http://intranet.test:{port}/hello");
    let fetch = format!("curl -s -o /dev/null -w '%{{http_code}}' {url}");
    let run = |env: &[(&str, String)]| {
        let mut run = Run::new(&dir).args_from(&[
            "--quiet",
            "--allowlist",
            pins.to_str().unwrap(),
            "--allow-tool",
            "npm",
            "--private-ok",
            "--cache",
            "none",
        ]);
        run = run.env(
            "npm_config_registry",
            format!("http://intranet.test:{port}/"),
        );
        for (k, v) in env {
            run = run.env(k, v.clone());
        }
        stdout(&run.sh(&fetch))
    };
    // Control: the user's own setting.
    assert_eq!(run(&[]), "200");
    // From an npm script: the project's, not the user's.
    assert_eq!(run(&[("npm_lifecycle_event", "sandbox".to_owned())]), "502");
    // A user config file inside the workspace.
    let ws = dir.join("ws");
    std::fs::write(ws.join(".npmrc-user"), "").unwrap();
    let user = ws.join(".npmrc-user").display().to_string();
    assert_eq!(run(&[("npm_config_userconfig", user)]), "502");
}

/// Settings the environment points into the workspace (written, maybe, by an earlier
/// command) are never acted on: git's trace target, pip's log file, pyenv's hooks would
/// make the host write files or run code while netbox asks the tool.
#[test]
fn settings_pointed_into_the_workspace_never_act_on_the_host() {
    let dir = TestDir::new("tool-redirected");
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("hooks/exec")).unwrap();
    let out = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(
        ws.join(".git/config"),
        "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = https://forge.test/a.git\n",
    )
    .unwrap();
    let victim = dir.join("victim");
    std::fs::write(
        ws.join("gitconfig"),
        format!("[trace2]\n\teventTarget = {}\n", victim.display()),
    )
    .unwrap();
    std::fs::write(
        ws.join("pip.conf"),
        format!("[global]\nlog = {}\n", victim.display()),
    )
    .unwrap();
    let hook_marker = dir.join("hook-ran");
    std::fs::write(
        ws.join("hooks/exec/x.bash"),
        format!("touch {}\n", hook_marker.display()),
    )
    .unwrap();
    let out = Command::new(netbox_bin())
        .args(["tools", "git", "pip"])
        .current_dir(&ws)
        .env("GIT_CONFIG_GLOBAL", ws.join("gitconfig"))
        .env("PIP_CONFIG_FILE", ws.join("pip.conf"))
        .env("PYENV_HOOK_PATH", ws.join("hooks"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !victim.exists(),
        "a tool wrote where workspace settings said"
    );
    assert!(!hook_marker.exists(), "a pyenv hook from the workspace ran");
    let text = stdout(&out);
    // Control: git's remote is still read; pip is said not to be asked.
    assert!(text.contains("forge.test:443"), "{text}");
    assert!(text.contains("not asked: PIP_CONFIG_FILE"), "{text}");
}

/// `apt-get update` and `apt-get download`, unprivileged, from a local repository that
/// apt's own configuration names (`APT_CONFIG`, whose sources list lies elsewhere than
/// /etc/apt): `--allow-tool apt` asks apt where its sources are and finds it.
#[test]
fn apt_downloads_from_the_repository_its_configuration_names() {
    let dir = TestDir::new("tool-apt");
    let repo = dir.join("repo");
    std::fs::create_dir_all(dir.join("pkg/DEBIAN")).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["apt-mirror.test"], repo.clone());
    let port = server.port();
    // A package, and a flat repository's index and release file for it.
    let control = "Package: netbox-demo\nVersion: 1.0\nArchitecture: all\n\
                   Maintainer: test <test@example.test>\nDescription: demo\n";
    std::fs::write(dir.join("pkg/DEBIAN/control"), control).unwrap();
    let deb = repo.join("netbox-demo_1.0_all.deb");
    let built = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zgzip", "--build"])
        .arg(dir.join("pkg"))
        .arg(&deb)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let packages = format!(
        "{control}Filename: ./netbox-demo_1.0_all.deb\nSize: {}\nSHA256: {}\n",
        std::fs::metadata(&deb).unwrap().len(),
        crate::support::file_sha256(&deb)
    );
    std::fs::write(repo.join("Packages"), &packages).unwrap();
    std::fs::write(
        repo.join("Release"),
        format!(
            "Suite: stable\nCodename: stable\nDate: Tue, 01 Dec 2026 00:00:00 UTC\n\
             Architectures: all amd64\nSHA256:\n {} {} Packages\n",
            crate::support::file_sha256(&repo.join("Packages")),
            packages.len()
        ),
    )
    .unwrap();
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"apt-mirror.test\" = \"127.0.0.1\"\n",
    );
    let run = Run::new(&dir);
    // apt's settings outside every writable root; its lists and downloads in the
    // workspace. As root, apt would switch to its own user, which the sandbox's user
    // namespace does not map: it stays who it is.
    let conf = TestDir::outside_tmp("tool-apt-conf");
    std::fs::copy(server.ca.as_ref().unwrap(), conf.join("ca.pem")).unwrap();
    conf.write(
        "sources.list",
        &format!("deb [trusted=yes] https://apt-mirror.test:{port}/ ./\n"),
    );
    conf.write("status", "");
    let ws = run.workspace.display().to_string();
    let at = conf.path.display().to_string();
    let apt_conf = conf.write(
        "apt.conf",
        &format!(
            "Dir::Etc::sourcelist \"{at}/sources.list\";\n\
             Dir::Etc::sourceparts \"{at}/none.d\";\n\
             Dir::State \"{ws}/apt/state\";\nDir::State::status \"{at}/status\";\n\
             Dir::Cache \"{ws}/apt/cache\";\nAcquire::https::CaInfo \"{at}/ca.pem\";\n\
             Acquire::Retries \"0\";\nDebug::NoLocking \"true\";\n\
             APT::Sandbox::User \"root\";\n"
        ),
    );
    let download = "mkdir -p apt/state/lists/partial apt/cache/archives/partial && \
                    apt-get -qq update && apt-get -qq download netbox-demo && ls *.deb";
    let with = |extra: &[&str]| {
        let mut args = vec!["--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("APT_CONFIG", apt_conf.display().to_string())
    };
    let out = with(&["--allow-tool", "apt", "--private-ok"]).sh(download);
    assert_eq!(
        stdout(&out),
        "netbox-demo_1.0_all.deb\n",
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!("apt source {at}/sources.list")),
        "{}",
        stderr(&out)
    );
    // Control: without it, refused.
    std::fs::remove_file(run.workspace.join("netbox-demo_1.0_all.deb")).unwrap();
    let _ = std::fs::remove_dir_all(run.workspace.join("apt"));
    let out = with(&[]).sh(download);
    assert_ne!(
        stdout(&out),
        "netbox-demo_1.0_all.deb\n",
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("blocked CONNECT apt-mirror.test"),
        "{}",
        stderr(&out)
    );
    assert_refused_and_logged(&dir, "apt-mirror.test", &out);
}

/// `go run` of a module that needs another from a local module proxy that go's own
/// settings name (`GOPROXY`): `--allow-tool go` asks `go env` and finds it; the module
/// and build caches go to netbox's cache directory.
#[test]
fn go_fetches_modules_from_the_proxy_its_settings_name() {
    let dir = TestDir::new("tool-go");
    let proxy = dir.join("proxy");
    let versions = proxy.join("demo.test/hello/@v");
    std::fs::create_dir_all(&versions).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["goproxy.test"], proxy.clone());
    let port = server.port();
    // The module proxy protocol, as files: a version list, its info, go.mod and zip.
    let go_mod = "module demo.test/hello\n\ngo 1.19\n";
    std::fs::write(versions.join("list"), "v1.0.0\n").unwrap();
    std::fs::write(
        versions.join("v1.0.0.info"),
        "{\"Version\":\"v1.0.0\",\"Time\":\"2026-12-01T00:00:00Z\"}",
    )
    .unwrap();
    std::fs::write(versions.join("v1.0.0.mod"), go_mod).unwrap();
    let zipped = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
             \x20   z.writestr('demo.test/hello@v1.0.0/go.mod', sys.argv[2])\n\
             \x20   z.writestr('demo.test/hello@v1.0.0/hello.go', 'package hello\\n\\nconst Greeting = \"hello from the proxy\"\\n')\n",
        ])
        .arg(versions.join("v1.0.0.zip"))
        .arg(go_mod)
        .status()
        .unwrap();
    assert!(zipped.success());
    let pins = dir.write("pins.toml", "[hosts]\n\"goproxy.test\" = \"127.0.0.1\"\n");
    let run = Run::new(&dir);
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
    let ca_dir = TestDir::outside_tmp("tool-go-ca");
    let ca = ca_dir.join("ca.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let with = |extra: &[&str]| {
        let mut args = vec!["--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("GOPROXY", format!("https://goproxy.test:{port}"))
            .env("GOSUMDB", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("SSL_CERT_FILE", ca.display().to_string())
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    let out = with(&["--allow-tool", "go", "--private-ok"]).sh("go run .");
    assert_eq!(stdout(&out), "hello from the proxy\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("GOPROXY (go env)"),
        "{}",
        stderr(&out)
    );
    assert!(dir.join("cache-home/netbox/go").is_dir());
    // Control: without it (and with caches of its own: netbox gives none), refused.
    let ws = run.workspace.display().to_string();
    let out = with(&[])
        .env("GOMODCACHE", format!("{ws}/mod"))
        .env("GOCACHE", format!("{ws}/build"))
        .sh("go run .");
    assert_ne!(stdout(&out), "hello from the proxy\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("blocked CONNECT goproxy.test"),
        "{}",
        stderr(&out)
    );
    assert_refused_and_logged(&dir, "goproxy.test", &out);
}

/// gem's sources are read from its settings, with nothing of ruby run: a plugin or a
/// newer psych planted in the user's gem directory (where a run given `--write` for it
/// could put one) never runs on the host, though `gem` and RubyGems themselves would run
/// them. A `GEMRC` path list with a part in the workspace is not asked at all.
#[test]
fn asking_gem_runs_no_plugin_and_no_settings_of_the_workspace() {
    let dir = TestDir::new("tool-gem");
    let (ws, home) = (dir.join("ws"), dir.join("home"));
    std::fs::create_dir_all(&ws).unwrap();
    let version = Command::new("ruby")
        .args(["-e", "print RbConfig::CONFIG['ruby_version']"])
        .output()
        .expect("ruby is installed (.ci/run installs it)");
    let version = stdout(&version);
    let marker = dir.join("plugin-ran");
    for gems in [".local/share/gem", ".gem"] {
        let plugins = home.join(gems).join("ruby").join(&version).join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::write(
            plugins.join("x_plugin.rb"),
            format!("File.write({:?}, 'ran')\n", marker.display().to_string()),
        )
        .unwrap();
    }
    // A newer psych (a default gem RubyGems loads to read its settings) in the user's gem
    // directory: its gemspec and library both run code.
    let psych_marker = dir.join("psych-ran");
    let mark = format!(
        "File.write({:?}, 'ran')\n",
        psych_marker.display().to_string()
    );
    for gems in [".local/share/gem", ".gem"] {
        let user_gems = home.join(gems).join("ruby").join(&version);
        std::fs::create_dir_all(user_gems.join("specifications")).unwrap();
        std::fs::create_dir_all(user_gems.join("gems/psych-99.0/lib")).unwrap();
        std::fs::write(
            user_gems.join("specifications/psych-99.0.gemspec"),
            format!(
                "{mark}Gem::Specification.new do |s|\n  s.name = 'psych'\n  s.version = '99.0'\n  \
                 s.require_paths = ['lib']\n  s.files = ['lib/psych.rb']\nend\n"
            ),
        )
        .unwrap();
        std::fs::write(user_gems.join("gems/psych-99.0/lib/psych.rb"), &mark).unwrap();
    }
    let gemrc = dir.write("gemrc", "---\n:sources:\n- https://gems.corp.test/\n");
    let tools = |gemrc: &str| {
        Command::new(netbox_bin())
            .args(["tools", "gem"])
            .current_dir(&ws)
            .env("HOME", &home)
            .env("GEMRC", gemrc)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let out = tools(&gemrc.display().to_string());
    assert!(out.status.success(), "{}", stderr(&out));
    // Positive control: the user's settings were read.
    assert!(
        stdout(&out).contains("\"gems.corp.test:443\", # sources in"),
        "{}",
        stdout(&out)
    );
    assert!(!marker.exists(), "a gem plugin ran on the host");
    assert!(!psych_marker.exists(), "a planted psych ran on the host");
    // Controls: `gem` itself would have run the plugin, and RubyGems with the user's gem
    // paths the planted psych.
    let ran = Command::new("gem")
        .args(["sources", "--list"])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(ran.status.success() && marker.exists());
    let _ = std::fs::remove_file(&psych_marker);
    let ran = Command::new("ruby")
        .args([
            "--disable-gems",
            "-e",
            "require 'rubygems'; Gem.configuration",
        ])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(psych_marker.exists(), "{}", stderr(&ran));
    // A GEMRC list with a part in the workspace.
    std::fs::write(
        ws.join(".gemrc"),
        "---\n:sources:\n- https://planted.test/\n",
    )
    .unwrap();
    let list = format!("{}:{}", gemrc.display(), ws.join(".gemrc").display());
    let out = tools(&list);
    let text = stdout(&out);
    assert!(text.contains("not asked: GEMRC="), "{text}");
    assert!(!text.contains("planted.test"), "{text}");
}
