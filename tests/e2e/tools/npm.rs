//! npm: a local registry that npm's own configuration names, and nothing else.

use std::process::Command;

use crate::support::upstream::HttpServer;
use crate::support::{stderr, stdout, Run, TestDir};

/// A package `demo-pkg@1.0.0` in an npm registry laid out under `root`, served at
/// `https://npm.test:PORT/`: its packument and its tarball (with its integrity).
fn npm_registry(dir: &TestDir) -> HttpServer {
    let root = dir.join("registry");
    let server = HttpServer::start_tls_files(&dir.path, &["npm.test"], root.clone());
    npm_package(dir, &root, &format!("https://npm.test:{}", server.port()));
    server
}

/// `demo-pkg@1.0.0` laid out under `root` for a registry at `url` (no trailing `/`): its
/// packument and its tarball, with its integrity.
pub(crate) fn npm_package(dir: &TestDir, root: &std::path::Path, url: &str) {
    std::fs::create_dir_all(root.join("demo-pkg/-")).unwrap();
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
    std::fs::write(
        root.join("demo-pkg/index.json"),
        format!(
            r#"{{"name":"demo-pkg","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"demo-pkg","version":"1.0.0","main":"index.js","dist":{{"tarball":"{url}/demo-pkg/-/demo-pkg-1.0.0.tgz","integrity":"{integrity}"}}}}}}}}"#
        ),
    )
    .unwrap();
}

/// A project that depends on `demo-pkg`, with its registry served and pinned.
struct NpmProject {
    registry: HttpServer,
    pins: std::path::PathBuf,
    run: Run,
    /// The test CA inside the workspace: the host's /tmp is not in the sandbox.
    ca: std::path::PathBuf,
    /// The registry as the user's setting (the environment): one a workspace file named
    /// would not be taken as internal (an earlier command may have written it).
    registry_url: String,
}

fn npm_project(dir: &TestDir) -> NpmProject {
    let registry = npm_registry(dir);
    let pins = dir.write("pins.toml", "[hosts]\n\"npm.test\" = \"127.0.0.1\"\n");
    let run = Run::new(dir);
    std::fs::write(
        run.workspace.join("package.json"),
        r#"{"name":"app","version":"1.0.0","dependencies":{"demo-pkg":"1.0.0"}}"#,
    )
    .unwrap();
    let ca = run.workspace.join("test-ca.pem");
    std::fs::copy(registry.ca.as_ref().unwrap(), &ca).unwrap();
    let registry_url = format!("https://npm.test:{}/", registry.port());
    NpmProject {
        registry,
        pins,
        run,
        ca,
        registry_url,
    }
}

#[test]
fn npm_installs_from_the_registry_its_configuration_names_and_nothing_else() {
    let dir = TestDir::new("tool-npm");
    // The server serves while the binding lives.
    let NpmProject {
        registry: _registry,
        pins,
        run,
        ca,
        registry_url,
    } = npm_project(&dir);
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

    // With --allow-tool npm and no flag for the status, a refusal (here: the registry's
    // address is not public, and no --private-ok) ends npm at once too: netbox answers
    // 403, which npm does not retry as it does a 502 for a minute, and says so.
    let started = std::time::Instant::now();
    // A cache of its own: from the first install's, npm could answer with no request.
    let out = Run::new(&dir)
        .args_from(&["--allowlist", pins.to_str().unwrap(), "--allow-tool", "npm"])
        .env(
            "XDG_CACHE_HOME",
            dir.join("cache-home-403").display().to_string(),
        )
        .env("npm_config_registry", registry_url.clone())
        .env("npm_config_cafile", ca.display().to_string())
        .log_at(dir.join("npm-403.jsonl"))
        .sh(install);
    let took = started.elapsed();
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        took < std::time::Duration::from_secs(8),
        "npm took {took:?}"
    );
    assert!(
        stderr(&out).contains("refusals are 403 in this run: npm retries a 502"),
        "{}",
        stderr(&out)
    );
    // The first refusal names the one flag that opens every tool's registry, before the
    // flag for its one host: a user who takes the first advice fixes every host at once.
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.contains("a registry of --allow-tool npm"))
        .unwrap_or_else(|| panic!("no refusal naming the tool: {err}"));
    let private_ok = line.find("--private-ok lets every --allow-tool registry");
    let one_host = line.find("--allow-private");
    assert!(
        matches!((private_ok, one_host), (Some(a), Some(b)) if a < b),
        "{line}"
    );
}

/// `netbox learn --allow-tool npm --private-ok`: the registry, reached at its internal
/// address, is learned as an `allow_private` rule, so the file replays the install on its
/// own (no --allow-tool, no --private-ok) with no refusal. Control: a plain `allow` of the
/// same name, which is what learn used to write, is refused at that address.
#[test]
fn a_learned_internal_registry_replays_from_the_file_alone() {
    let dir = TestDir::new("tool-npm-learn");
    let NpmProject {
        registry,
        pins,
        run,
        ca,
        registry_url,
    } = npm_project(&dir);
    let cache = run.workspace.join(".npm-cache");
    let install = "npm install --no-audit --no-fund --loglevel=error \
                   && node -e \"console.log(require('demo-pkg'))\"";
    let learned = dir.join("learned.toml");
    let out = Command::new(crate::support::netbox_bin())
        .arg("learn")
        .arg("-o")
        .arg(&learned)
        .args(["--quiet", "--allowlist", pins.to_str().unwrap()])
        .args(["--allow-tool", "npm", "--private-ok", "--log"])
        .arg(dir.join("learn.jsonl"))
        .args(["--", "sh", "-c", install])
        .env("npm_config_registry", &registry_url)
        .env("npm_config_cafile", &ca)
        // netbox's own cache for the tool: a cache the workspace names is not asked.
        .env("XDG_CACHE_HOME", dir.join("cache-home"))
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("demo says hi"),
        "{}\n{}",
        stderr(&out),
        std::fs::read_to_string(dir.join("learn.jsonl")).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&learned).unwrap();
    let rule = format!("\"npm.test:{}\"", registry.port());
    assert!(
        text.lines()
            .skip_while(|l| !l.starts_with("allow_private"))
            .take_while(|l| *l != "]")
            .any(|l| l.contains(&rule)),
        "{text}"
    );

    // Replayed from the file alone.
    std::fs::remove_dir_all(run.workspace.join("node_modules")).unwrap();
    // Each replay with a cache of its own: from another's, npm could answer with no
    // request at all.
    let replay = |allowlist: &std::path::Path, log: &str| {
        let replay = Run::new(&dir)
            .args_from(&["--quiet", "--allowlist", pins.to_str().unwrap()])
            .args_from(&["--allowlist", allowlist.to_str().unwrap()])
            .env("npm_config_registry", registry_url.clone())
            .env("npm_config_cafile", ca.display().to_string())
            .env("npm_config_cache", cache.join(log).display().to_string())
            .env("npm_config_fetch_retries", "0")
            .log_at(dir.join(log));
        let out = replay.sh(install);
        let refused: Vec<serde_json::Value> = replay
            .events()
            .into_iter()
            .filter(|e| e["type"] == "net" && e["decision"] == "deny")
            .filter(|e| !crate::support::is_probe_attempt(e))
            .collect();
        (out, refused)
    };
    let (out, refused) = replay(&learned, "replay.jsonl");
    assert!(
        stdout(&out).contains("demo says hi"),
        "{}\n{text}",
        stderr(&out)
    );
    assert!(refused.is_empty(), "{refused:#?}");
    // Control: the same name as a plain allow rule is refused at its internal address.
    std::fs::remove_dir_all(run.workspace.join("node_modules")).unwrap();
    let plain = dir.write("plain.toml", &format!("allow = [{rule}]\n"));
    let (out, refused) = replay(&plain, "plain.jsonl");
    assert!(!stdout(&out).contains("demo says hi"), "{}", stdout(&out));
    assert!(
        refused.iter().any(|e| e["reason"] == "non_public_address"),
        "{refused:#?}"
    );
}
