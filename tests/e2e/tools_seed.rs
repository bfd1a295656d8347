//! What netbox copies or sets for a tool inside the sandbox carries nothing `--hide` hides
//! and no credential: cargo's settings seeded into netbox's `CARGO_HOME` (without their
//! tokens, and not at all when hidden; another workspace's home, like every other cache
//! in netbox's cache home, is out of the sandbox's view), npm's,
//! pip's and maven's settings (never copied: read in place, where the cover holds), and
//! netbox's own Java and maven options under `--clean-env` (built from nothing).

use std::path::{Path, PathBuf};

use crate::support::{stderr, stdout, Run, TestDir};
use crate::tools::{cargo_registry, cargo_runs};

/// The registry token the user's cargo settings hold.
const TOKEN: &str = "cio-token-5b1e77c2";

/// A cargo configuration with registries, source replacement and tokens.
fn cargo_config(index: &str) -> String {
    format!(
        "[registry]\ntoken = \"{TOKEN}\"\n\n\
         [registries.corp]\nindex = \"https://corp.test/index.git\"\ntoken = \"{TOKEN}-corp\"\n\n\
         [source.crates-io]\nreplace-with = \"mirror\"\n\n\
         [source.mirror]\nregistry = \"{index}\"\n\n[net]\nretry = 0\n"
    )
}

/// A user's home outside /tmp (the sandbox sees it, read-only, as it would a real one),
/// with `~/.cargo/config.toml` holding `config`; its `~/.cache` is netbox's cache home.
fn home_with_cargo(name: &str, config: &str) -> TestDir {
    let home = TestDir::outside_tmp(name);
    std::fs::create_dir_all(home.join(".cargo")).unwrap();
    home.write(".cargo/config.toml", config);
    home
}

/// A run with `home` as HOME (its `.cargo` as CARGO_HOME, its `.cache` as the cache home).
fn as_user(dir: &TestDir, home: &Path) -> Run {
    Run::new(dir)
        .env("HOME", home.display().to_string())
        .env("CARGO_HOME", home.join(".cargo").display().to_string())
        .env("XDG_CACHE_HOME", home.join(".cache").display().to_string())
}

/// Every file below `dir` (on the host) whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                todo.push(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path);
                }
            }
        }
    }
    found
}

/// In the sandbox: the seeded settings, every file under CARGO_HOME and netbox's caches
/// that holds the token (`grep=1`: none), then a value planted there and found the same
/// way (the grep's control).
const LOOK: &str = "cat \"$CARGO_HOME/config.toml\" 2>&1; echo '--'; \
                    grep -rl -e \"$TOKEN\" \"$CARGO_HOME\" \"$XDG_CACHE_HOME/netbox\"; echo \"grep=$?\"; \
                    echo planted-b4c1 > \"$CARGO_HOME/planted\"; \
                    grep -rl planted-b4c1 \"$CARGO_HOME\"; echo \"home=$CARGO_HOME\"";

/// `--hide ~/.cargo/config.toml` (or `--hide ~/.cargo`) with `--allow-tool cargo`: the
/// hidden file is not copied into netbox's CARGO_HOME, so `cat $CARGO_HOME/config.toml`
/// and a grep of every file there find no token, and the start-up line says why the
/// settings are missing. Without --hide the settings are copied, registries and source
/// replacement kept, the tokens left out.
#[test]
fn a_hidden_cargo_config_is_not_copied_and_a_shown_one_loses_its_tokens() {
    TestDir::remove_leftovers_outside_tmp("seed-cargo-home");
    let home = home_with_cargo(
        "seed-cargo-home",
        &cargo_config("https://index.mirror.test/index.git"),
    );
    let dir = TestDir::new("seed-cargo");
    let config = home.join(".cargo/config.toml");
    let cargo_dir = home.join(".cargo");
    for hide in [Some(&config), Some(&cargo_dir), None] {
        let mut run = as_user(&dir, &home.path)
            .env("TOKEN", TOKEN)
            .args_from(&["--allow-tool", "cargo"]);
        if let Some(hidden) = hide {
            run = run.args_from(&["--hide", hidden.to_str().unwrap()]);
        }
        let out = run.sh(LOOK);
        let text = stdout(&out);
        assert!(out.status.success(), "{hide:?}: {}", stderr(&out));
        assert!(!text.contains(TOKEN), "{hide:?}: {text}");
        assert!(text.contains("grep=1\n"), "{hide:?}: {text}");
        // The grep's control: a value planted under CARGO_HOME is found.
        let home_in = text.lines().last().unwrap().trim_start_matches("home=");
        assert!(
            home_in.starts_with(&home.join(".cache/netbox/cargo").display().to_string()),
            "{text}"
        );
        assert!(text.contains(&format!("{home_in}/planted\n")), "{text}");
        let said = stderr(&out);
        match hide {
            Some(hidden) => {
                assert!(text.starts_with("cat: "), "{hide:?}: {text}");
                // Said of the file there is, not of `config`, which the user has none of.
                assert!(!said.contains(".cargo/config is hidden"), "{said}");
                assert!(
                    said.contains(&format!(
                        "cargo: {} is hidden (--hide {}): not copied into netbox's CARGO_HOME;",
                        config.display(),
                        hidden.display()
                    )),
                    "{said}"
                );
            }
            None => {
                // Positive control: the settings are there, but for the tokens.
                let copied: toml::Table = text.split("--\n").next().unwrap().parse().unwrap();
                assert_eq!(
                    copied["source"]["crates-io"]["replace-with"].as_str(),
                    Some("mirror")
                );
                assert_eq!(
                    copied["source"]["mirror"]["registry"].as_str(),
                    Some("https://index.mirror.test/index.git")
                );
                assert_eq!(
                    copied["registries"]["corp"]["index"].as_str(),
                    Some("https://corp.test/index.git")
                );
                assert_eq!(copied["net"]["retry"].as_integer(), Some(0));
                assert!(
                    said.contains("registry.token, registries.corp.token in"),
                    "{said}"
                );
            }
        }
        // And on the host: no copy of the token anywhere in netbox's caches.
        assert_eq!(
            files_holding(&home.join(".cache"), TOKEN),
            Vec::<PathBuf>::new()
        );
    }
    // The user's own file was never touched.
    assert!(std::fs::read_to_string(&config).unwrap().contains(TOKEN));
}

/// What the copy of cargo's settings leaves out besides cargo's own credential keys, by
/// the documented rule: `[env]` variables named as secrets, `--token`'s value in an
/// alias, a secret-named `NAME=VALUE` in a runner's arguments and in an index's query,
/// the user and password of every URL in a string (a password holding `#` too). And the
/// start-up line names cargo's indexes by their hosts: nothing of a URL's user, path or
/// query. Control: the rest is copied, a token in an index's path included (the rule does
/// not reach it, as documented), and the registries are allowed.
#[test]
fn cargos_copy_leaves_out_the_secrets_the_rule_names_and_the_start_up_line_names_hosts() {
    TestDir::remove_leftovers_outside_tmp("seed-cargo-rule");
    let settings = "[registries.hosted]\n\
        index = \"sparse+https://dl.hosted.test/PATHTOK-77/org/repo/cargo/\"\n\
        [registries.query]\n\
        index = \"sparse+https://index.corp.test/index/?private_token=SECRET-QUERY\"\n\
        [registries.frag]\n\
        index = \"sparse+https://u:SECRET#FRAG@index.frag.test/\"\n\
        [env]\n\
        GITHUB_TOKEN = \"SECRET-ENV\"\n\
        NPM_TOKEN = { value = \"SECRET-ENV-TABLE\", force = true }\n\
        MIRRORS = \"https://a:SECRET-FIRST@one.test/ https://b:SECRET-SECOND@two.test/\"\n\
        OPENSSL_DIR = \"/opt/kept-ssl\"\n\
        [alias]\n\
        pub = \"publish --registry query --token SECRET-ALIAS\"\n\
        [target.x86_64-unknown-linux-gnu]\n\
        runner = [\"env\", \"AWS_SECRET_ACCESS_KEY=SECRET-RUNNER\", \"sh\", \"-c\"]\n";
    let home = home_with_cargo("seed-cargo-rule", settings);
    let dir = TestDir::new("seed-cargo-rule-ws");
    let out = as_user(&dir, &home.path)
        .args_from(&["--allow-tool", "cargo"])
        .sh("cat \"$CARGO_HOME/config.toml\"");
    assert!(out.status.success(), "{}", stderr(&out));
    let (copy, said) = (stdout(&out), stderr(&out));
    for secret in [
        "SECRET-QUERY",
        "SECRET#FRAG",
        "SECRET-ENV",
        "SECRET-FIRST",
        "SECRET-SECOND",
        "SECRET-ALIAS",
        "SECRET-RUNNER",
    ] {
        assert!(!copy.contains(secret), "{secret} in the copy: {copy}");
        assert!(
            !said.contains(secret),
            "{secret} on the start-up line: {said}"
        );
    }
    assert!(!said.contains("PATHTOK"), "{said}");
    // Positive control: the rest is there, as the rule leaves it.
    for kept in [
        "sparse+https://index.corp.test/index/?private_token=",
        "sparse+https://index.frag.test/",
        "https://one.test/ https://two.test/",
        "/opt/kept-ssl",
        "--token ",
        "AWS_SECRET_ACCESS_KEY=",
        "dl.hosted.test/PATHTOK-77/",
    ] {
        assert!(copy.contains(kept), "{kept} missing: {copy}");
    }
    for host in ["dl.hosted.test", "index.corp.test"] {
        assert!(said.contains(host), "{host}: {said}");
    }
    assert!(said.contains("env.GITHUB_TOKEN, env.NPM_TOKEN"), "{said}");
}

/// netbox's cache home holds every workspace's caches, cargo's copy of the user's
/// settings among them: a sandbox sees none of it but its own run's caches. Workspace B's
/// run copies the user's cargo settings (a marker in them) into B's cargo home, and CMD
/// there sees it (the control). A later run in workspace A that hides `~/.cargo` finds
/// nothing of the hidden file anywhere in netbox's cache home: without `--allow-tool
/// cargo`, with it, and with `--cache none`; nor another workspace's npm cache. A's own
/// cache stays writable. And nothing B's CMD does to B's home (its settings rewritten, the
/// home made 0500) stops A's run.
#[test]
fn a_sandbox_sees_no_other_workspaces_caches_in_netboxs_cache_home() {
    TestDir::remove_leftovers_outside_tmp("seed-cache-cover");
    let settings = format!(
        "{}\n[alias]\nmarker = \"build --features hidden-marker-c3\"\n",
        cargo_config("https://index.mirror.test/index.git")
    );
    let home = home_with_cargo("seed-cache-cover", &settings);
    let cache = home.join(".cache/netbox");
    let (dir_a, dir_b) = (
        TestDir::new("seed-cache-cover-a"),
        TestDir::new("seed-cache-cover-b"),
    );
    // B: its copy of the user's settings, which its CMD sees and then spoils.
    let out = as_user(&dir_b, &home.path)
        .args_from(&["--quiet", "--allow-tool", "cargo"])
        .sh("grep -c hidden-marker-c3 \"$CARGO_HOME/config.toml\"; \
             printf 'a=1' > \"$CARGO_HOME/config.toml\"; chmod 500 \"$CARGO_HOME\"; \
             echo \"$CARGO_HOME\"");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("1\n"), "{text}");
    let home_b = PathBuf::from(text.lines().last().unwrap());
    assert!(home_b.starts_with(&cache), "{text}");
    // What B's CMD did to B's home does not stop A's run (as an unprivileged user, a 0500
    // home is one netbox could not clean).
    let out = as_user(&dir_a, &home.path)
        .args_from(&["--quiet", "--allow-tool", "cargo"])
        .sh("echo ran");
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    // Another workspace's npm cache, as its runs left it.
    let npm_other = cache.join("npm/00000000000000aa");
    std::fs::create_dir_all(&npm_other).unwrap();
    std::fs::write(npm_other.join("index-v5"), "hidden-marker-c3").unwrap();
    // B's copy as an older netbox left it: the settings whole (the hidden file's text).
    std::fs::set_permissions(&home_b, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::write(home_b.join("config.toml"), &settings).unwrap();
    std::fs::set_permissions(&home_b, std::os::unix::fs::PermissionsExt::from_mode(0o500)).unwrap();
    // Positive control: on the host, the marker is in B's copy and the npm cache.
    let holding = files_holding(&cache, "hidden-marker-c3");
    assert!(holding.contains(&home_b.join("config.toml")), "{holding:?}");
    assert!(holding.contains(&npm_other.join("index-v5")), "{holding:?}");
    let look = "grep -rl hidden-marker-c3 \"$XDG_CACHE_HOME/netbox\" ~/.cargo; echo \"grep=$?\"; \
                ls \"$XDG_CACHE_HOME/netbox\"; \
                touch \"$CARGO_HOME/w\" 2>/dev/null && echo own-writable";
    let hidden = home.join(".cargo").display().to_string();
    for (extra, listed) in [
        (&[][..], ""),
        (&["--allow-tool", "cargo"][..], "cargo\nown-writable\n"),
        (&["--allow-tool", "cargo", "--cache", "none"][..], ""),
    ] {
        let out = as_user(&dir_a, &home.path)
            .args_from(&["--quiet", "--hide", &hidden])
            .args_from(extra)
            .sh(look);
        assert_eq!(
            stdout(&out),
            format!("grep=1\n{listed}"),
            "{extra:?}: {}",
            stderr(&out)
        );
    }
    // B's home is as B's CMD left it.
    let mode = std::fs::metadata(&home_b).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o500
    );
    std::fs::set_permissions(&home_b, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
}

/// The seeded settings still work: `cargo fetch` through source replacement to a local
/// sparse registry named in the user's own `~/.cargo/config.toml`, whose copy has no token.
#[test]
fn cargo_fetches_through_the_seeded_settings_without_their_token() {
    if !cargo_runs() {
        eprintln!("cargo is not runnable by this user: nothing to test");
        return;
    }
    // rustup finds its toolchains in RUSTUP_HOME, which follows HOME unless set.
    let rustup_home = std::env::var("RUSTUP_HOME")
        .unwrap_or_else(|_| format!("{}/.rustup", std::env::var("HOME").unwrap_or_default()));
    TestDir::remove_leftovers_outside_tmp("seed-cargo-fetch");
    let dir = TestDir::outside_tmp("seed-cargo-fetch");
    let server = cargo_registry(&dir);
    let port = server.port();
    let ca = dir.join("test-ca.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let settings = format!(
        "{}\n[http]\ncainfo = \"{}\"\n",
        cargo_config(&format!("sparse+https://index.test:{port}/")),
        ca.display()
    );
    TestDir::remove_leftovers_outside_tmp("seed-cargo-fetch-home");
    let home = home_with_cargo("seed-cargo-fetch-home", &settings);
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"index.test\" = \"127.0.0.1\"\n\"dl.test\" = \"127.0.0.1\"\n",
    );
    let run = Run::new(&dir);
    std::fs::create_dir_all(run.workspace.join("src")).unwrap();
    std::fs::write(run.workspace.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(
        run.workspace.join("Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\ndemo = \"1\"\n",
    )
    .unwrap();
    let out = as_user(&dir, &home.path)
        .env("RUSTUP_HOME", rustup_home)
        .env("TOKEN", TOKEN)
        .args_from(&[
            "--quiet",
            "--allowlist",
            pins.to_str().unwrap(),
            "--allow-tool",
            "cargo",
            "--private-ok",
        ])
        .sh("cargo fetch --quiet && echo FETCHED; grep -rl -e \"$TOKEN\" \"$CARGO_HOME\"; echo \"grep=$?\"");
    assert_eq!(stdout(&out), "FETCHED\ngrep=1\n", "{}", stderr(&out));
    assert_eq!(
        files_holding(&home.join(".cache"), TOKEN),
        Vec::<PathBuf>::new()
    );
}

/// `--clean-env` builds netbox's own Java and maven options from nothing: the caller's
/// JAVA_TOOL_OPTIONS and MAVEN_OPTS (a proxy password in them) do not reach CMD, while
/// netbox's proxy properties and maven's repository are there. Without it, the caller's
/// values stay before netbox's, as CMD inherits them anyway.
#[test]
fn clean_env_gives_cmd_netboxs_java_and_maven_options_only() {
    let dir = TestDir::new("seed-clean-env");
    let with = |extra: &[&str]| {
        Run::new(&dir)
            .env("JAVA_TOOL_OPTIONS", "-Dhttp.proxyPassword=s3cret-java")
            .env("MAVEN_OPTS", "-Dhttp.proxyPassword=s3cret-maven")
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
            .args_from(&["--quiet"])
            .args_from(extra)
            .sh("env")
    };
    let value = |env: &str, key: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    };
    for extra in [
        &["--clean-env"][..],
        &["--clean-env", "--allow-tool", "maven"],
    ] {
        let out = with(extra);
        assert!(out.status.success(), "{}", stderr(&out));
        let env = stdout(&out);
        assert!(!env.contains("s3cret"), "{extra:?}: {env}");
        // netbox's own values are there.
        let java = value(&env, "JAVA_TOOL_OPTIONS").unwrap();
        assert!(java.starts_with("-Dhttp.proxyHost=127.0.0.1 "), "{java}");
        if extra.contains(&"maven") {
            let maven = value(&env, "MAVEN_OPTS").unwrap();
            assert!(maven.starts_with("-Dmaven.repo.local="), "{maven}");
        } else {
            assert_eq!(value(&env, "MAVEN_OPTS"), None, "{env}");
        }
    }
    // Control: the caller's values reached netbox, and without --clean-env stay.
    let out = with(&["--allow-tool", "maven"]);
    let env = stdout(&out);
    let java = value(&env, "JAVA_TOOL_OPTIONS").unwrap();
    assert!(
        java.starts_with("-Dhttp.proxyPassword=s3cret-java -Dhttp.proxyHost="),
        "{java}"
    );
    let maven = value(&env, "MAVEN_OPTS").unwrap();
    assert!(
        maven.starts_with("-Dhttp.proxyPassword=s3cret-maven -Dmaven.repo.local="),
        "{maven}"
    );
}

/// Every tool's discovery skips a settings file `--hide` hides, as the tool in the
/// sandbox does not see it: a registry that only the hidden file names is not allowed.
/// Each of pip's, npm's, go's, gem's and apt's settings names its own host (pinned to a
/// local server); CMD asks each through the bridge. Control: with nothing hidden, each
/// host answers (200). Hidden, each is refused, the refusal logged, and the start-up line
/// says which file was skipped.
#[test]
fn every_tool_skips_the_settings_hide_hides() {
    TestDir::remove_leftovers_outside_tmp("seed-hidden-discovery");
    let home = TestDir::outside_tmp("seed-hidden-discovery");
    let server = crate::support::upstream::HttpServer::start();
    let port = server.port();
    let url = |tool: &str| format!("http://{tool}.hid.test:{port}/");
    std::fs::create_dir_all(home.join(".config/pip")).unwrap();
    std::fs::create_dir_all(home.join(".config/go")).unwrap();
    std::fs::create_dir_all(home.join("apt")).unwrap();
    let files = [
        (
            "pip",
            home.write(
                ".config/pip/pip.conf",
                &format!("[global]\nindex-url = {}simple/\n", url("pip")),
            ),
        ),
        (
            "npm",
            home.write(".npmrc", &format!("registry={}\n", url("npm"))),
        ),
        (
            "go",
            home.write(".config/go/env", &format!("GOPROXY={}\n", url("go"))),
        ),
        (
            "gem",
            home.write(".gemrc", &format!(":sources:\n- {}\n", url("gem"))),
        ),
        (
            "apt",
            home.write("apt/sources.list", &format!("deb {} ./\n", url("apt"))),
        ),
    ];
    let apt_conf = home.write(
        "apt/apt.conf",
        &format!(
            "Dir::Etc::sourcelist \"{0}/apt/sources.list\";\nDir::Etc::sourceparts \"{0}/apt/none.d\";\n",
            home.path.display()
        ),
    );
    let pins: String = files
        .iter()
        .map(|(tool, _)| format!("\"{tool}.hid.test\" = \"127.0.0.1\"\n"))
        .collect();
    let dir = TestDir::new("seed-hidden-discovery-ws");
    let pins = dir.write("pins.toml", &format!("[hosts]\n{pins}"));
    let ask: String = files
        .iter()
        .map(|(tool, _)| {
            format!(
                "echo {tool} $(curl -s -o /dev/null -w '%{{http_code}}' --max-time 8 {}hello); ",
                url(tool)
            )
        })
        .collect();
    let run = |hide: bool| {
        let mut run = Run::new(&dir)
            .env("HOME", home.path.display().to_string())
            .env(
                "XDG_CONFIG_HOME",
                home.join(".config").display().to_string(),
            )
            .env("APT_CONFIG", apt_conf.display().to_string())
            .args_from(&["--allowlist", pins.to_str().unwrap(), "--private-ok"])
            .args_from(&["--cache", "none"]);
        for (tool, _) in &files {
            run = run.args_from(&["--allow-tool", tool]);
        }
        if hide {
            for hidden in [
                ".config/pip",
                ".npmrc",
                ".config/go",
                ".gemrc",
                "apt/sources.list",
            ] {
                run = run
                    .arg("--hide")
                    .arg(home.join(hidden).display().to_string());
            }
        }
        (run.sh(&ask), run)
    };
    // Control: each settings file's host is allowed and answers.
    let (out, _) = run(false);
    assert_eq!(
        stdout(&out),
        "pip 200\nnpm 200\ngo 200\ngem 200\napt 200\n",
        "{}",
        stderr(&out)
    );
    let (out, hidden_run) = run(true);
    let said = stderr(&out);
    let answers = stdout(&out);
    let events = hidden_run.events();
    let mut failed = Vec::new();
    for (tool, file) in &files {
        let host = format!("{tool}.hid.test");
        // Refused by the bridge (its refusal status: 403 with --allow-tool npm), not
        // answered by the server, and the refusal logged.
        let refused = events
            .iter()
            .any(|e| e["type"] == "net" && e["host"] == host.as_str() && e["decision"] == "deny");
        if !answers.contains(&format!("{tool} 403\n")) || !refused {
            failed.push(format!("{host} was not refused"));
        }
        if !said.contains(&format!("{} is hidden (--hide", file.display())) {
            failed.push(format!("{tool}: no note of {}", file.display()));
        }
    }
    assert!(failed.is_empty(), "{failed:?}\n{answers}\n{said}");
}

/// npm's, pip's and maven's settings are never copied: the tools read them in place, where
/// `--hide` covers them. With their settings hidden, nothing in CMD's environment, in
/// netbox's caches or anywhere under HOME holds their secrets; shown, the same grep finds
/// each (its control).
#[test]
fn hidden_npm_pip_and_maven_settings_reach_cmd_by_no_other_way() {
    TestDir::remove_leftovers_outside_tmp("seed-other-tools");
    let home = TestDir::outside_tmp("seed-other-tools");
    std::fs::create_dir_all(home.join(".config/pip")).unwrap();
    std::fs::create_dir_all(home.join(".m2")).unwrap();
    home.write(".npmrc", "//npm.test/:_authToken=npm-secret-91\n");
    home.write(
        ".config/pip/pip.conf",
        "[global]\nindex-url = https://u:pip-secret-92@pip.test/simple/\n",
    );
    home.write(
        ".m2/settings.xml",
        "<settings><servers><server><id>corp</id><password>mvn-secret-93</password>\
         </server></servers></settings>\n",
    );
    let dir = TestDir::new("seed-other-tools-ws");
    let look = "env | grep -c -e -secret-9; grep -rl -e -secret-9 \"$HOME\" | sort";
    let run = |hide: bool| {
        let mut run = Run::new(&dir)
            .env("HOME", home.path.display().to_string())
            .env("XDG_CACHE_HOME", home.join(".cache").display().to_string())
            .args_from(&[
                "--quiet",
                "--allow-tool",
                "npm",
                "--allow-tool",
                "pip",
                "--allow-tool",
                "maven",
            ]);
        if hide {
            for hidden in [".npmrc", ".config/pip", ".m2"] {
                run = run
                    .arg("--hide")
                    .arg(home.join(hidden).display().to_string());
            }
        }
        run.sh(look)
    };
    let out = run(true);
    assert_eq!(stdout(&out), "0\n", "{}", stderr(&out));
    let out = run(false);
    let listed: Vec<String> = [".config/pip/pip.conf", ".m2/settings.xml", ".npmrc"]
        .iter()
        .map(|f| home.join(f).display().to_string())
        .collect();
    assert_eq!(
        stdout(&out),
        format!("0\n{}\n", listed.join("\n")),
        "{}",
        stderr(&out)
    );
}
