//! Code planted through git metadata (issue 20, finding 1): a submodule's `.git` is pinned
//! like the top one, `--allow-git-writes` keeps the index and submodules read-only, and
//! the git metadata a run does create is reported when it ends, or by the next run when
//! netbox was killed first. Each with its control.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{stderr, stdout, wait_for_path, Run, TestDir};

/// Runs git with an identity and local file transport allowed; panics unless it works.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.email=t@netbox.test", "-c", "user.name=t"])
        .args([
            "-c",
            "protocol.file.allow=always",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is needed for these tests");
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// A repository `super` in the workspace with one submodule, `lib`, checked out from a
/// repository beside the workspace; returns the workspace's run.
fn superproject(dir: &TestDir) -> Run {
    let upstream = dir.join("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q"]);
    std::fs::write(upstream.join("a.txt"), "a\n").unwrap();
    git(&upstream, &["add", "a.txt"]);
    git(&upstream, &["commit", "-qm", "sub"]);
    let run = Run::new(dir).arg("--quiet");
    git(&run.workspace, &["init", "-q"]);
    git(
        &run.workspace,
        &[
            "submodule",
            "add",
            "-q",
            &upstream.display().to_string(),
            "lib",
        ],
    );
    git(&run.workspace, &["commit", "-qm", "super"]);
    run
}

/// The marker a planted fsmonitor command would create, and the command itself.
fn planted(dir: &TestDir) -> (PathBuf, String) {
    let marker = dir.join("PWNED");
    let command = format!("touch {}; false", marker.display());
    (marker, command)
}

fn records<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn a_submodules_git_dir_cannot_be_replaced() {
    let dir = TestDir::new("submodule-gitfile");
    let run = superproject(&dir);
    let (marker, fsmonitor) = planted(&dir);
    let gitfile = std::fs::read_to_string(run.workspace.join("lib/.git")).unwrap();
    // The attack: swap lib/.git for a repository whose config runs a command on the next
    // `git status` in the superproject.
    let out = run.sh(&format!(
        "rm -f lib/.git 2>/dev/null && echo REMOVED; \
         mv lib/.git lib/.git-old 2>/dev/null && echo MOVED; \
         printf '[core]\\n\\tfsmonitor = {fsmonitor}\\n' >> .git/modules/lib/config 2>/dev/null && echo CONFIG; \
         echo x > lib/new.txt && echo CONTROL",
    ));
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("lib/.git")).unwrap(),
        gitfile
    );
    let events = run.events();
    let denied = records(&events, "write_denied");
    assert!(
        denied.iter().any(
            |d| d["path"].as_str().is_some_and(|p| p.ends_with("/lib/.git"))
                && d["reason"] == "protected path"
        ),
        "{denied:?}"
    );
    // The user's next git status in the superproject runs nothing.
    git(&run.workspace, &["status", "--short"]);
    assert!(!marker.exists(), "the planted command ran");
    // Control: the same status does run a submodule's fsmonitor, so the check above can fail.
    git(
        &run.workspace,
        &[
            "config",
            "-f",
            ".git/modules/lib/config",
            "core.fsmonitor",
            &fsmonitor,
        ],
    );
    std::fs::write(run.workspace.join("lib/a.txt"), "changed\n").unwrap();
    let _ = Command::new("git")
        .args(["status", "--short"])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert!(marker.exists(), "the control's fsmonitor did not run");
}

#[test]
fn a_workspace_inside_a_repository_keeps_its_submodules_pinned() {
    let dir = TestDir::new("submodule-below");
    let run = superproject(&dir);
    std::fs::create_dir(run.workspace.join("pkg")).unwrap();
    git(&run.workspace, &["mv", "lib", "pkg/lib"]);
    git(&run.workspace, &["commit", "-qm", "moved"]);
    // The workspace is pkg/, below the repository's top, where the user runs git status.
    let pkg = run.workspace.join("pkg");
    let inner = Run::new(&dir)
        .arg("--quiet")
        .arg("--workspace")
        .arg(pkg.display().to_string());
    let gitfile = std::fs::read_to_string(pkg.join("lib/.git")).unwrap();
    let out = inner
        .command("rm -f lib/.git 2>/dev/null && echo REMOVED; echo x > lib/new.txt && echo CONTROL")
        .current_dir(&pkg)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(pkg.join("lib/.git")).unwrap(),
        gitfile
    );
}

#[test]
fn an_uninitialised_submodule_cannot_get_a_git_dir() {
    let dir = TestDir::new("submodule-uninit");
    let source = superproject(&dir);
    // A clone without --recursive: lib is an empty directory. Another, where lib is gone.
    let cloned = dir.join("clone");
    git(
        &dir.path,
        &[
            "clone",
            "-q",
            &source.workspace.display().to_string(),
            "clone",
        ],
    );
    assert!(std::fs::read_dir(cloned.join("lib"))
        .unwrap()
        .next()
        .is_none());
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--workspace")
        .arg(cloned.display().to_string());
    let out = run
        .command(
            "git init -q lib 2>/dev/null && echo INIT; mkdir lib/.git 2>/dev/null && echo MKDIR; \
             git status --short >/dev/null && echo STATUS_OK; echo x > top.txt && echo CONTROL",
        )
        .current_dir(&cloned)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "STATUS_OK\nCONTROL\n", "{}", stderr(&out));
    assert!(std::fs::read_dir(cloned.join("lib"))
        .unwrap()
        .next()
        .is_none());

    std::fs::remove_dir(cloned.join("lib")).unwrap();
    let out = run
        .command("mkdir -p lib/.git 2>/dev/null && echo MKDIR; ls -A lib | wc -l")
        .current_dir(&cloned)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "0\n", "{}", stderr(&out));
    // The placeholder that stood in for lib is gone again.
    assert!(!cloned.join("lib").exists());
}

#[test]
fn allow_git_writes_keeps_the_index_and_submodules_read_only() {
    let dir = TestDir::new("gitwrites-index");
    let run = superproject(&dir).arg("--allow-git-writes");
    let index = std::fs::read(run.workspace.join(".git/index")).unwrap();
    // The variant that needs no `git add` from the user: a gitlink written into the index.
    let out = run.sh(
        "git update-index --add --cacheinfo 160000,1ed07c15e9288a1f55775b0d310961bc7e9ecd7d,sub 2>/dev/null && echo GITLINK; \
         echo '[core] fsmonitor = x' >> .git/modules/lib/config 2>/dev/null && echo MODULE_CONFIG; \
         mkdir .git/modules/other 2>/dev/null && echo MODULE_DIR; \
         mkdir .git/worktrees 2>/dev/null && echo WORKTREES; \
         echo '[core] fsmonitor = x' > .git/config.worktree 2>/dev/null && echo CONFIG_WORKTREE; \
         blob=$(git hash-object -w lib/../.gitmodules) && tree=$(git write-tree) && \
         commit=$(git -c user.email=t@netbox.test -c user.name=t commit-tree $tree -p HEAD -m inside) && \
         git update-ref refs/heads/main $commit && echo COMMITTED",
    );
    // Control: objects and refs are writable, so a commit made with plumbing lands.
    assert_eq!(stdout(&out), "COMMITTED\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read(run.workspace.join(".git/index")).unwrap(),
        index
    );
    assert!(git(&run.workspace, &["log", "--oneline"]).contains("inside"));
    for gone in [
        ".git/modules/other",
        ".git/worktrees",
        ".git/config.worktree",
    ] {
        assert!(!run.workspace.join(gone).exists(), "{gone} left behind");
    }
}

#[test]
fn git_metadata_a_run_creates_is_reported() {
    let dir = TestDir::new("git-audit");
    let run = superproject(&dir);
    std::fs::create_dir_all(run.workspace.join("tools/old")).unwrap();
    git(&run.workspace.join("tools/old"), &["init", "-q"]);
    // Past a tick of the clock files are stamped with: made before the run, not during it.
    std::thread::sleep(Duration::from_millis(50));
    // Control first: a run that makes no git metadata, though it runs git in a nested
    // repository (lock files come and go in its .git), reports nothing.
    let out =
        run.sh("git -C tools/old status --short >/dev/null && mkdir -p src/a && echo ok > src/a/f");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let events = run.events();
    assert!(
        records(&events, "git_metadata_created").is_empty(),
        "{events:?}"
    );
    let audits = records(&events, "git_audit");
    assert_eq!(audits.len(), 1, "{events:?}");
    assert_eq!(audits[0]["complete"], true);
    assert_eq!(audits[0]["found"], 0);
    assert!(
        audits[0]["directories"].as_u64().unwrap() >= 4,
        "{}",
        audits[0]
    );

    let before = run.events().len();
    let out = run.sh("mkdir -p vendor/lib && git init -q vendor/lib && \
         git init -q --bare stash.git && \
         mkdir -p wt && echo 'gitdir: ../stash.git' > wt/.git && \
         echo '#!/bin/sh' > tools/old/.git/hooks/post-checkout && echo done");
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    let events: Vec<Value> = run.events().split_off(before);
    let found: Vec<(String, String, String)> = records(&events, "git_metadata_created")
        .iter()
        .map(|r| {
            let path = r["path"].as_str().unwrap();
            let relative = path
                .strip_prefix(&format!("{}/", run.workspace.display()))
                .unwrap_or(path);
            (
                relative.to_owned(),
                r["kind"].as_str().unwrap().to_owned(),
                r["how"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = |p: &str, k: &str, h: &str| (p.to_owned(), k.to_owned(), h.to_owned());
    assert_eq!(
        found,
        vec![
            want("stash.git", "bare_repository", "created"),
            want("tools/old/.git", "git_dir", "changed"),
            want("vendor/lib/.git", "git_dir", "created"),
            want("wt/.git", "gitdir_file", "created"),
        ]
    );
    let said = stderr(&out);
    assert!(
        said.contains(&format!(
            "netbox: warning: the command created a git directory {}/vendor/lib/.git",
            run.workspace.display()
        )),
        "{said}"
    );
    // The records come before the session's end.
    let end = events
        .iter()
        .position(|e| e["type"] == "session_end")
        .unwrap();
    let audit = events
        .iter()
        .position(|e| e["type"] == "git_audit")
        .unwrap();
    assert!(audit < end);
}

#[test]
fn a_killed_run_is_checked_by_the_next() {
    let dir = TestDir::new("git-audit-killed");
    let run = Run::new(&dir).arg("--quiet");
    let mut killed = run
        .command("mkdir -p planted/.git/hooks && touch started && sleep 30")
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    let first_session = run.events()[0]["session"].as_str().unwrap().to_owned();
    killed.kill().unwrap();
    let _ = killed.wait();
    assert!(run.events().iter().all(|e| e["type"] != "git_audit"));
    // The next run, whatever it does, checks what the killed one left.
    let out = run.sh("true");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "the run of session {first_session} (which ended without its check) created a git directory {}/planted/.git",
            run.workspace.display()
        )),
        "{}",
        stderr(&out)
    );
    let events = run.events();
    let found = records(&events, "git_metadata_created");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["audited_session"], first_session.as_str());
    // Checked once: a third run has nothing more to say.
    let out = run.sh("true");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn the_check_can_be_cancelled_and_is_finished_later() {
    let dir = TestDir::new("git-audit-cancel");
    let run = Run::new(&dir).arg("--quiet");
    for i in 0..20 {
        std::fs::create_dir_all(run.workspace.join(format!("d{i}"))).unwrap();
    }
    // Each directory takes 200 ms to check: Ctrl-C comes while it goes on.
    let child = run
        .command("mkdir -p d7/.git && touch ran")
        .env("NETBOX_TEST_AUDIT_PAUSE_MS", "200")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("ran"), "CMD never ran");
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("was cancelled"), "{}", stderr(&out));
    let audit = run
        .events()
        .into_iter()
        .find(|e| e["type"] == "git_audit")
        .unwrap();
    assert_eq!(audit["stopped"], "cancelled");
    // The next run finishes it.
    let out = run.sh("true");
    assert!(
        stderr(&out).contains(&format!(
            "created a git directory {}/d7/.git",
            run.workspace.display()
        )),
        "{}",
        stderr(&out)
    );
}
