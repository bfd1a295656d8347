//! `--allow-tool`: the registries a package manager uses, found in its own
//! configuration at run time, are allowed, and nothing else; its cache goes to netbox's
//! own directory. Real clients against local registries served over HTTPS with a test CA,
//! their names pinned to loopback (and declared internal with `--private-ok`).
//!
//! Here: what asking a tool may never do (run the workspace's programs, open an address,
//! act on settings the workspace wrote); one file per client for its registry.

use std::process::Command;

mod apt;
mod cargo;
mod git;
mod go;
mod npm;
mod pip;
mod remembered;

pub(crate) use cargo::{cargo_crate, cargo_registry, cargo_runs};
pub(crate) use go::go_module;
pub(crate) use npm::npm_package;
pub(crate) use pip::{build_wheel, pip_registry};

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
    // From an npm script: the project's, not the user's. (Refused with 403: with
    // --allow-tool npm, a refusal's status is the one npm does not retry.)
    assert_eq!(run(&[("npm_lifecycle_event", "sandbox".to_owned())]), "403");
    // A user config file inside the workspace.
    let ws = dir.join("ws");
    std::fs::write(ws.join(".npmrc-user"), "").unwrap();
    let user = ws.join(".npmrc-user").display().to_string();
    assert_eq!(run(&[("npm_config_userconfig", user)]), "403");
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
