//! Code planted through git metadata: a submodule's `.git` is pinned
//! like the top one, `--allow-git-writes` keeps the index and submodules read-only (and
//! the host's own `git commit` meanwhile does not stop the run), and
//! the git metadata a run does create is reported when it ends, or by the next run when
//! netbox was killed first. Each with its control.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{git, stderr, stdout, wait_for_path, Run, TestDir};

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
    // A file:// URL: a plain path would hard-link the submodule's objects to the
    // upstream's, which --allow-git-writes refuses.
    git(
        &run.workspace,
        &[
            "submodule",
            "add",
            "-q",
            &format!("file://{}", upstream.display()),
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
         export GIT_INDEX_FILE=/tmp/index && git read-tree HEAD && \
         blob=$(git hash-object -w lib/../.gitmodules) && tree=$(git write-tree) && \
         commit=$(git -c user.email=t@netbox.test -c user.name=t commit-tree $tree -p HEAD -m inside) && \
         git update-ref refs/heads/inside $commit && echo COMMITTED",
    );
    // Control: objects and refs are writable, so a commit made with plumbing (and an
    // index of its own) lands on a branch HEAD does not name.
    assert_eq!(stdout(&out), "COMMITTED\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read(run.workspace.join(".git/index")).unwrap(),
        index
    );
    assert!(git(&run.workspace, &["log", "--oneline", "inside"]).contains("inside"));
    for gone in [
        ".git/modules/other",
        ".git/worktrees",
        ".git/config.worktree",
    ] {
        assert!(!run.workspace.join(gone).exists(), "{gone} left behind");
    }
}

/// `--allow-git-writes` pins the git directory whole and leaves only its data writable:
/// the user's own `git commit` and `git config` on the host, which replace `index` and
/// `config` by rename, do not stop the run (a pin on each file would be lost), and after
/// them CMD still cannot write either, nor a hook, nor move the data directories away.
/// Control: a fetch from a local repository, and a commit made with plumbing on a branch
/// of its own, land.
#[test]
fn host_commits_do_not_stop_a_run_with_allow_git_writes() {
    // Outside the private /tmp: the upstream repository is read inside.
    let dir = TestDir::outside_tmp("gitwrites-host-commits");
    let upstream = crate::support::bare_repo(&dir.path, "upstream.git", "upstream\n");
    let feature = dir.join("upstream.git.src");
    git(&feature, &["checkout", "-q", "-b", "feature"]);
    git(
        &feature,
        &["commit", "-q", "--allow-empty", "-m", "feature"],
    );
    git(
        &feature,
        &["push", "-q", upstream.to_str().unwrap(), "feature"],
    );
    let wanted = git(&feature, &["rev-parse", "HEAD"]);
    let run = Run::new(&dir).arg("--quiet").arg("--allow-git-writes");
    git(&run.workspace, &["init", "-q"]);
    git(
        &run.workspace,
        &["commit", "-q", "--allow-empty", "-m", "first"],
    );
    git(
        &run.workspace,
        &["remote", "add", "up", upstream.to_str().unwrap()],
    );
    let child = run
        .command(
            "touch started; for i in $(seq 300); do [ -e host-done ] && break; sleep 0.05; done; \
             echo x > .git/index 2>/dev/null && echo INDEX; \
             echo '[core] fsmonitor = touch PWNED' >> .git/config 2>/dev/null && echo CONFIG; \
             echo 'touch PWNED' > .git/hooks/x 2>/dev/null && echo HOOK; \
             echo x > .git/HEAD 2>/dev/null && echo HEAD; \
             mkdir .git/info/x 2>/dev/null && echo INFO; \
             mv .git/objects .git/o2 2>/dev/null && echo MOVED; \
             git fetch -q up && echo FETCHED; \
             c=$(git -c user.email=t@netbox.test -c user.name=t commit-tree HEAD^{tree} -p HEAD -m inside) && \
             git update-ref refs/heads/inside $c && echo COMMITTED",
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    // What a user does in another terminal meanwhile: each commit replaces the index by
    // rename, the config change the config.
    for n in 1..=3 {
        std::fs::write(run.workspace.join("f.txt"), format!("{n}\n")).unwrap();
        git(&run.workspace, &["add", "f.txt"]);
        git(
            &run.workspace,
            &["commit", "-q", "-m", &format!("host {n}")],
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    git(&run.workspace, &["config", "user.name", "someone"]);
    std::thread::sleep(Duration::from_secs(1));
    let index = std::fs::read(run.workspace.join(".git/index")).unwrap();
    let config = std::fs::read_to_string(run.workspace.join(".git/config")).unwrap();
    let host_head = git(&run.workspace, &["rev-parse", "HEAD"]);
    std::fs::write(run.workspace.join("host-done"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "FETCHED\nCOMMITTED\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read(run.workspace.join(".git/index")).unwrap(),
        index
    );
    assert_eq!(
        std::fs::read_to_string(run.workspace.join(".git/config")).unwrap(),
        config
    );
    assert!(!run.workspace.join(".git/hooks/x").exists());
    assert!(!run.workspace.join(".git/o2").exists());
    assert!(!run.workspace.join("PWNED").exists());
    // The control, seen on the host: the fetched branch, FETCH_HEAD written in place, and
    // the commit made inside on top of the host's last one.
    assert_eq!(git(&run.workspace, &["rev-parse", "up/feature"]), wanted);
    let fetch_head = std::fs::read_to_string(run.workspace.join(".git/FETCH_HEAD")).unwrap();
    assert!(fetch_head.contains(wanted.trim()), "{fetch_head}");
    assert_eq!(
        git(&run.workspace, &["rev-parse", "inside^"]),
        host_head,
        "the commit made inside"
    );
    // The data directories are mountpoints in a read-only directory: CMD can empty them
    // (as it could before) but not remove, move or replace them.
    let out = run.sh("rm -rf .git/refs 2>/dev/null && echo REMOVED; \
         mv .git/logs .git/l2 2>/dev/null && echo MOVED; \
         ln -s /tmp .git/reftable 2>/dev/null && echo LINKED; \
         test -d .git/refs && test -d .git/logs && echo STILL");
    assert_eq!(stdout(&out), "STILL\n", "{}", stderr(&out));
    assert!(run.workspace.join(".git/refs").is_dir());
}

/// Under `--allow-git-writes`, a part left writable that the host replaces (a
/// `FETCH_HEAD` saved by rename) falls back to the read-only git directory's entry, and
/// the run goes on; the git directory's own pin lost (the host removed `.git`, so CMD
/// could make a new one) still stops it.
#[test]
fn a_lost_writable_part_is_read_only_and_a_lost_git_dir_stops_the_run() {
    let dir = TestDir::new("gitwrites-lost");
    let run = Run::new(&dir).arg("--quiet").arg("--allow-git-writes");
    git(&run.workspace, &["init", "-q"]);
    git(
        &run.workspace,
        &["commit", "-q", "--allow-empty", "-m", "first"],
    );
    let wait = "touch started; for i in $(seq 300); do [ -e host-done ] && break; sleep 0.05; done";
    let child = run
        .command(&format!(
            "echo before >> .git/FETCH_HEAD && echo WRITABLE; {wait}; \
             echo after >> .git/FETCH_HEAD 2>/dev/null && echo STILL_WRITABLE; echo RAN_ON"
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    let fetch_head = run.workspace.join(".git/FETCH_HEAD");
    std::fs::write(run.workspace.join(".git/FETCH_HEAD.new"), "host\n").unwrap();
    std::fs::rename(run.workspace.join(".git/FETCH_HEAD.new"), &fetch_head).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(run.workspace.join("host-done"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "WRITABLE\nRAN_ON\n", "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&fetch_head).unwrap(), "host\n");

    std::fs::remove_file(run.workspace.join("started")).unwrap();
    std::fs::remove_file(run.workspace.join("host-done")).unwrap();
    let child = run
        .command(&format!(
            "{wait}; mkdir -p .git/hooks 2>/dev/null; echo 'touch PWNED' > .git/hooks/post-checkout 2>/dev/null && echo PLANTED; echo RAN_ON"
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    std::fs::remove_dir_all(run.workspace.join(".git")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(run.workspace.join("host-done"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    // `.git`'s pin, or one inside it that the host's removal reached first
    // (`.git/refs/replace`, pinned read-only within the writable `refs/`).
    let err = stderr(&out);
    let named = err
        .split("pinned path ")
        .nth(1)
        .and_then(|rest| rest.split(" was removed").next())
        .unwrap_or("");
    assert!(
        named.starts_with(&run.workspace.join(".git").display().to_string()),
        "{err}"
    );
    assert_eq!(stdout(&out), "", "{}", stderr(&out));
    assert!(!run.workspace.join(".git/hooks/post-checkout").exists());
}

/// Under `--allow-git-writes`, what the configuration names as code inside a part left
/// writable (an include file in `refs/`) stays read-only: its pin goes on after the
/// writable bind, and the directory it lies in cannot be moved away.
#[test]
fn code_named_inside_a_writable_part_stays_read_only() {
    let dir = TestDir::new("gitwrites-include");
    let run = Run::new(&dir).arg("--quiet").arg("--allow-git-writes");
    git(&run.workspace, &["init", "-q"]);
    std::fs::create_dir_all(run.workspace.join(".git/refs/conf")).unwrap();
    std::fs::write(run.workspace.join(".git/refs/conf/extra.inc"), "").unwrap();
    git(
        &run.workspace,
        &["config", "include.path", "refs/conf/extra.inc"],
    );
    let out = run.sh(
        "echo '[core] fsmonitor = touch PWNED' >> .git/refs/conf/extra.inc 2>/dev/null && echo INCLUDE; \
         mv .git/refs/conf .git/refs/conf2 2>/dev/null && echo MOVED; \
         echo x > .git/refs/conf/other 2>/dev/null && echo BESIDE; \
         echo x > .git/refs/other && echo CONTROL",
    );
    // The directory it lies in is an anchor (a mountpoint, writable).
    assert_eq!(stdout(&out), "BESIDE\nCONTROL\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.workspace.join(".git/refs/conf/extra.inc")).unwrap(),
        ""
    );
    // The git directory is skipped by the check after the run, but not its writable
    // parts: a repository made in one is reported.
    let out = run.sh("git init -q --bare .git/objects/hidden && echo MADE");
    assert_eq!(stdout(&out), "MADE\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("objects/hidden"), "{}", stderr(&out));
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

/// Three names at the top of the workspace (HEAD, objects,
/// refs) made the check take the whole workspace for a bare repository it did not enter.
#[test]
fn a_workspace_made_a_bare_repository_is_reported_and_still_walked() {
    let dir = TestDir::new("git-audit-bare-top");
    let run = superproject(&dir);
    // An existing nested repository (not a submodule), whose .git CMD hides one in.
    std::fs::create_dir_all(run.workspace.join("deps/proj")).unwrap();
    git(&run.workspace.join("deps/proj"), &["init", "-q"]);
    std::thread::sleep(Duration::from_millis(50));
    let out = run.sh(
        "touch HEAD && mkdir objects refs && mkdir -p vendor/lib && git init -q vendor/lib && \
         mkdir deps/proj/.git/stash && git init -q deps/proj/.git/stash && echo done",
    );
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    let events = run.events();
    let found: Vec<String> = records(&events, "git_metadata_created")
        .iter()
        .map(|r| {
            let path = r["path"].as_str().unwrap();
            let rel = path
                .strip_prefix(run.workspace.to_str().unwrap())
                .unwrap_or(path);
            format!(
                "{rel} {} {}",
                r["kind"].as_str().unwrap(),
                r["how"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            " bare_repository created".to_owned(),
            "/deps/proj/.git/stash/.git git_dir created".to_owned(),
            "/vendor/lib/.git git_dir created".to_owned(),
        ]
    );
}

/// The review: a split index (`core.splitIndex`) with replaced entries is read, its
/// shared part stays read-only under --allow-git-writes (with the top of the git
/// directory), and its gitlinks are pinned.
#[test]
fn a_split_index_is_read_and_its_shared_part_pinned() {
    let dir = TestDir::new("git-split-index");
    let run = superproject(&dir);
    git(&run.workspace, &["config", "core.splitIndex", "true"]);
    std::fs::write(run.workspace.join("f.txt"), "one\n").unwrap();
    git(&run.workspace, &["add", "f.txt"]);
    git(&run.workspace, &["commit", "-qm", "split"]);
    std::fs::write(run.workspace.join("f.txt"), "two\n").unwrap();
    git(&run.workspace, &["add", "f.txt"]);
    let shared: Vec<PathBuf> = std::fs::read_dir(run.workspace.join(".git"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("sharedindex.")
        })
        .collect();
    assert!(!shared.is_empty(), "git wrote no shared index");
    let run = run.arg("--allow-git-writes");
    let gitfile = std::fs::read_to_string(run.workspace.join("lib/.git")).unwrap();
    let out = run.sh(
        "for s in .git/sharedindex.*; do echo x >> $s 2>/dev/null && echo SHARED; done; \
         rm -f lib/.git 2>/dev/null && echo REMOVED; \
         git hash-object -w f.txt >/dev/null && echo OBJECTS",
    );
    assert_eq!(stdout(&out), "OBJECTS\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("lib/.git")).unwrap(),
        gitfile
    );
}

/// The review: what a pinned config names in the workspace (a relative hooks path, an
/// include, a program a command key runs) is pinned too, placeholders where missing.
#[test]
fn what_a_repository_config_names_in_the_workspace_is_pinned() {
    let dir = TestDir::new("git-config-targets");
    let run = superproject(&dir);
    std::fs::create_dir_all(run.workspace.join(".husky/_")).unwrap();
    std::fs::create_dir_all(run.workspace.join("tools")).unwrap();
    std::fs::write(run.workspace.join("tools/watch"), "#!/bin/sh\n").unwrap();
    for (key, value) in [
        ("core.hooksPath", ".husky/_"),
        ("include.path", "../.gitconfig-project"),
        ("core.fsmonitor", "./tools/watch"),
        ("alias.b", "!./build.sh --fast"),
    ] {
        git(&run.workspace, &["config", key, value]);
    }
    let out = run.sh("echo x > .husky/_/pre-commit 2>/dev/null && echo HOOK; \
         printf '[core]\\n\\tsshCommand = x\\n' > .gitconfig-project 2>/dev/null && echo INCLUDE; \
         echo 'touch owned' >> tools/watch 2>/dev/null && echo FSMONITOR; \
         echo 'touch owned' > build.sh 2>/dev/null && echo ALIAS; \
         echo x > tools/other && echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    for gone in [".gitconfig-project", "build.sh", ".husky/_/pre-commit"] {
        assert!(!run.workspace.join(gone).exists(), "{gone}");
    }
}

/// The review: a directory CMD made unreadable is said, not skipped as if read.
#[test]
fn a_directory_made_unreadable_is_reported_as_unread() {
    let dir = TestDir::new("git-audit-unreadable");
    let run = Run::new(&dir).arg("--quiet");
    let out = run.sh("mkdir -p hid/lib && git init -q hid/lib && chmod 100 hid && echo done");
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    let said = stderr(&out);
    let audit = run
        .events()
        .into_iter()
        .find(|e| e["type"] == "git_audit")
        .unwrap();
    if nix::unistd::geteuid().is_root() {
        // netbox as root reads it all the same (CAP_DAC_READ_SEARCH), and finds what it hid.
        assert!(
            said.contains(&format!(
                "created a git directory {}/hid/lib/.git",
                run.workspace.display()
            )),
            "{said}"
        );
    } else {
        assert!(
            said.contains(&format!(
                "the check for git metadata could not read {}/hid",
                run.workspace.display()
            )),
            "{said}"
        );
        assert_eq!(audit["complete"], false, "{audit}");
    }
    // So the directory can be removed with the test's.
    std::fs::set_permissions(
        run.workspace.join("hid"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // Control: a run that hides nothing reads everything.
    let out = run.sh("mkdir -p open/dir");
    assert!(!stderr(&out).contains("could not read"), "{}", stderr(&out));
}

/// The review: a record planted where records are kept cannot hang a later run (a fifo),
/// and one that is not netbox's shape is dropped.
#[test]
fn planted_records_cannot_hang_or_steer_the_next_run() {
    let dir = TestDir::new("git-audit-planted");
    let run = Run::new(&dir).arg("--quiet");
    let out = run.sh("true");
    assert!(out.status.success());
    let pending = std::fs::read_dir(&dir.path)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".netbox-pending-")
        })
        .expect("a record directory beside the log");
    nix::unistd::mkfifo(&pending.join("fifo.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let roots: Vec<String> = (0..100).map(|i| format!("\"/nowhere/{i}\"")).collect();
    std::fs::write(
        pending.join("many.json"),
        format!(
            "{{\"session\":\"planted\",\"scope\":{{\"roots\":[{}],\"skip\":[],\"since\":{{\"secs\":0,\"nanos\":0}}}}}}",
            roots.join(",")
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = run.sh("echo ran");
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(!stderr(&out).contains("planted"), "{}", stderr(&out));
    assert!(!pending.join("many.json").exists());
}

/// The review: netbox's own placeholders (a `commondir`, a `config.worktree` made for
/// the run) are not news about the repository.
#[test]
fn placeholders_are_not_reported_as_changes() {
    let dir = TestDir::new("git-audit-placeholders");
    let run = Run::new(&dir).arg("--quiet").arg("--allow-git-writes");
    git(&run.workspace, &["init", "-q"]);
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..4 {
        let out = run.sh("sleep 0.2");
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    }
    // Control: a hook CMD could write (it cannot: hooks/ is pinned) aside, a change to
    // the repository's code-bearing parts made during a run is reported.
    let out = run.sh("git init -q nested && echo x > nested/.git/hooks/pre-commit");
    assert!(
        stderr(&out).contains("created a git directory"),
        "{}",
        stderr(&out)
    );
}
