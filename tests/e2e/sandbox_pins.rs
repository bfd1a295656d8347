//! What the user names on the command line stays what it names:
//! allowlists and env files inside the workspace are pinned for the run, a user-given
//! path through a symlink CMD could replace is refused, and `--hide` covers are pinned,
//! probed, and stop the run when lost. Each with its control.

use std::time::Duration;

use crate::support::{stderr, stdout, wait_for_path, Run, TestDir};

#[test]
fn policy_and_env_files_in_the_workspace_cannot_be_rewritten() {
    let dir = TestDir::new("policy-pinned");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::write(
        run.workspace.join("allow.toml"),
        "include = [\"base.toml\"]\nallow = [\"registry.test:443\"]\n",
    )
    .unwrap();
    std::fs::write(
        run.workspace.join("base.toml"),
        "allow = [\"mirror.test:443\"]\n",
    )
    .unwrap();
    std::fs::write(run.workspace.join("vars.env"), "MODE=ci\n").unwrap();
    let run = run.args_from(&["--allowlist", "allow.toml", "--env-file", "vars.env"]);
    let out = run.sh(
        "echo 'allow = [\"127.0.0.0/8:*\"]' > allow.toml 2>/dev/null && echo ALLOW; \
         echo 'allow = [\"127.0.0.0/8:*\"]' >> base.toml 2>/dev/null && echo BASE; \
         mv base.toml old.toml 2>/dev/null && echo MOVED; \
         echo 'LD_PRELOAD=/tmp/x.so' >> vars.env 2>/dev/null && echo ENV; \
         echo \"$MODE\" > control.txt && echo CONTROL",
    );
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("control.txt")).unwrap(),
        "ci\n"
    );
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("base.toml")).unwrap(),
        "allow = [\"mirror.test:443\"]\n"
    );
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("vars.env")).unwrap(),
        "MODE=ci\n"
    );
    let start = run
        .events()
        .into_iter()
        .find(|e| e["type"] == "session_start")
        .unwrap();
    let protected = start["protected"].to_string();
    for name in ["allow.toml", "base.toml", "vars.env"] {
        assert!(
            protected.contains(&format!("/ws/{name}\"")),
            "{name}: {protected}"
        );
    }
}

#[test]
fn user_given_paths_through_symlinks_in_the_workspace_are_refused() {
    let dir = TestDir::new("symlinked-args");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::create_dir(run.workspace.join("dotfiles")).unwrap();
    std::fs::write(run.workspace.join("dotfiles/npmrc"), "registry=x\n").unwrap();
    std::fs::write(run.workspace.join("dotfiles/allow.toml"), "allow = []\n").unwrap();
    std::os::unix::fs::symlink("dotfiles/npmrc", run.workspace.join(".npmrc")).unwrap();
    std::os::unix::fs::symlink("dotfiles", run.workspace.join("conf")).unwrap();
    for args in [
        &["--protect", ".npmrc"][..],
        &["--ro", ".npmrc"],
        &["--hide", "conf/npmrc"],
        &["--allowlist", "conf/allow.toml"],
        &["--env-file", "conf/npmrc"],
    ] {
        let out = Run::new(&dir)
            .arg("--quiet")
            .args_from(args)
            .sh("touch ran");
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            (said.contains("is a symlink inside the writable root")
                && said.contains("hint: name the file the link points to"))
                || (args[0] == "--hide" && said.contains("is a symlink, which the host")),
            "{args:?}: {said}"
        );
        assert!(!run.workspace.join("ran").exists());
    }
    // Control: the real path is pinned, and the link's replacement is what CMD may do.
    let workspace = run.workspace.clone();
    let out = run
        .args_from(&["--protect", "dotfiles/npmrc"])
        .sh("echo 'script-shell=/tmp/x' > dotfiles/npmrc 2>/dev/null && echo WROTE; rm .npmrc && echo x > .npmrc && echo RELINKED");
    assert_eq!(stdout(&out), "RELINKED\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(workspace.join("dotfiles/npmrc")).unwrap(),
        "registry=x\n"
    );
}

/// The review of findings 3-5: a `--hide` name that is a symlink, even outside the
/// workspace, could be pointed at a new file by the host during the run; refused.
#[test]
fn a_hide_through_a_symlink_is_refused() {
    let dir = TestDir::new("hide-outside-link");
    let secrets = TestDir::outside_tmp("hide-outside-link");
    std::fs::create_dir_all(secrets.join("v1")).unwrap();
    std::fs::write(secrets.join("v1/secret"), "s3cret").unwrap();
    std::os::unix::fs::symlink("v1/secret", secrets.join("creds")).unwrap();
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--hide")
        .arg(secrets.join("creds").display().to_string());
    let out = run.sh("touch ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is a symlink, which the host could point elsewhere during the run"),
        "{}",
        stderr(&out)
    );
    assert!(!run.workspace.join("ran").exists());
    // Control: the real path is hidden.
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--hide")
        .arg(secrets.join("v1/secret").display().to_string());
    let out = run.sh(&format!(
        "cat {}; echo end",
        secrets.join("v1/secret").display()
    ));
    assert_eq!(stdout(&out), "end\n", "{}", stderr(&out));
}

/// The review: a symlink outside the workspace that leads through one inside it, and an
/// include reached by two routes, are refused like a link in the workspace itself.
#[test]
fn links_reached_from_outside_or_by_a_second_route_are_refused() {
    let dir = TestDir::new("links-routes");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::create_dir_all(run.workspace.join("real/a")).unwrap();
    std::fs::write(run.workspace.join("real/allow.toml"), "allow = []\n").unwrap();
    std::fs::write(run.workspace.join("real/a/inc.toml"), "allow = []\n").unwrap();
    std::os::unix::fs::symlink("real", run.workspace.join("lnk")).unwrap();
    std::os::unix::fs::symlink("a", run.workspace.join("real/alias")).unwrap();
    std::fs::write(
        run.workspace.join("real/top.toml"),
        "include = [\"a/inc.toml\", \"alias/inc.toml\"]\n",
    )
    .unwrap();
    let outside = TestDir::outside_tmp("links-routes");
    std::os::unix::fs::symlink(run.workspace.join("lnk"), outside.join("link")).unwrap();
    for allowlist in [
        outside.join("link/allow.toml").display().to_string(),
        "real/top.toml".to_owned(),
    ] {
        let out = Run::new(&dir)
            .arg("--quiet")
            .args_from(&["--allowlist", &allowlist])
            .sh("touch ran");
        assert_eq!(
            out.status.code(),
            Some(125),
            "{allowlist}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("is a symlink inside the writable root"),
            "{allowlist}: {}",
            stderr(&out)
        );
        assert!(!run.workspace.join("ran").exists());
    }
    // Control: the same file by its real path is accepted (and pinned).
    let out = run
        .args_from(&["--allowlist", "real/allow.toml"])
        .sh("echo x >> real/allow.toml 2>/dev/null && echo WROTE; echo ok");
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
}

#[test]
fn hidden_paths_are_probed_and_pinned() {
    let dir = TestDir::new("hide-pinned");
    let secrets = TestDir::outside_tmp("hide-pinned");
    std::fs::write(secrets.join("token"), "s3cret").unwrap();
    std::fs::create_dir(secrets.join("keys")).unwrap();
    std::fs::write(secrets.join("keys/id"), "private").unwrap();
    let token = secrets.join("token");
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--hide")
        .arg(token.display().to_string())
        .arg("--hide")
        .arg(secrets.join("keys").display().to_string());
    let probe = run.sh("true");
    assert!(probe.status.success(), "{}", stderr(&probe));
    let row = run.probe()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "hidden paths")
        .cloned()
        .expect("a hidden paths row");
    assert_eq!(row["passed"], true, "{row}");
    // One attempt for each path named here (netbox hides its own state too, which has
    // attempts of its own), and the search for one left uncovered.
    let named_here = row["forbidden"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            a["attempt"]
                .as_str()
                .is_some_and(|at| at.contains(&*secrets.path.to_string_lossy()))
        })
        .count();
    assert_eq!(named_here, 2, "{row}");
    assert!(row["forbidden"]
        .as_array()
        .unwrap()
        .iter()
        .any(
            |a| a["attempt"] == "find a hidden path that is not covered by a mount of its own"
                && a["result"] == "all covered"
        ));
    // A credential refresher replaces the token by a rename while the run goes on: the
    // cover falls with the old file, and the run must stop before CMD reads the new one.
    let child = run
        .command(&format!(
            "touch started; sleep 2; cat {} && echo READ; sleep 5; echo FINISHED",
            token.display()
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    std::fs::write(secrets.join("token.new"), "fresh-s3cret").unwrap();
    std::fs::rename(secrets.join("token.new"), &token).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("fresh"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("FINISHED"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("was removed or replaced on the host"),
        "{}",
        stderr(&out)
    );
    // It says what to do about it.
    assert!(stderr(&out).contains("--hide DIR"), "{}", stderr(&out));
    // Control: untouched, the same run finishes.
    std::thread::sleep(Duration::from_millis(10));
    let out = run.sh("echo FINISHED");
    assert_eq!(stdout(&out), "FINISHED\n", "{}", stderr(&out));
}

/// A `--hide` or `--ro` path under the host's /tmp, outside every root, is not in the
/// sandbox at all under its private /tmp: nothing to do there, no error, and the `--ro`
/// that does nothing is said. With the host's /tmp shared, the same path is hidden.
#[test]
fn hide_and_ro_under_a_private_tmp_need_nothing() {
    let dir = TestDir::new("hide-private-tmp");
    std::fs::create_dir_all(dir.join("secret")).unwrap();
    std::fs::write(dir.join("secret/key"), "SECRET\n").unwrap();
    std::fs::write(dir.join("notes"), "notes\n").unwrap();
    let secret = dir.join("secret").display().to_string();
    let notes = dir.join("notes").display().to_string();
    let script = format!("cat {secret}/key {notes} 2>&1; echo done");
    let private = Run::new(&dir)
        .args_from(&["--quiet", "--hide", &secret, "--ro", &notes])
        .sh(&script);
    assert_eq!(private.status.code(), Some(0), "{}", stderr(&private));
    assert!(!stdout(&private).contains("SECRET"), "{}", stdout(&private));
    // The --ro does nothing there, and netbox says so (a --hide of what CMD cannot see
    // needs no word).
    let said = stderr(&private);
    assert!(
        said.contains(&format!("--ro {notes}: under the host's /tmp")),
        "{said}"
    );
    assert!(!said.contains("--hide"), "{said}");
    assert!(stdout(&private).ends_with("done\n"));
    // Control: the host's /tmp, where the same --hide must cover it.
    let shared = Run::new(&dir)
        .args_from(&[
            "--quiet", "--tmp", "host", "--hide", &secret, "--ro", &notes,
        ])
        .log_at(std::path::PathBuf::from(format!(
            "/var/tmp/netbox-e2e-hide-private-tmp-{}.jsonl",
            std::process::id()
        )))
        .sh(&format!(
            "cat {secret}/key 2>&1; {{ echo x >> {notes}; }} 2>&1; echo done"
        ));
    let _ = std::fs::remove_file(format!(
        "/var/tmp/netbox-e2e-hide-private-tmp-{}.jsonl",
        std::process::id()
    ));
    assert_eq!(shared.status.code(), Some(0), "{}", stderr(&shared));
    let said = stdout(&shared);
    assert!(!said.contains("SECRET"), "{said}");
    assert!(said.contains("No such file"), "{said}");
    assert!(said.contains("Read-only file system"), "{said}");
    assert_eq!(
        std::fs::read_to_string(dir.join("notes")).unwrap(),
        "notes\n"
    );
}
