//! git's configuration, index or hooks changed on the host while the run goes on: the
//! pins were chosen from them at the start and the mounts cannot grow, so a change that
//! makes a writable path code (husky's `prepare` setting `core.hooksPath .husky/_`, an
//! edit of the global config, a gitlink added to the index) stops the run with one line,
//! and what CMD did there first is reported when it ends. The user's own commit, or a
//! setting that names nothing writable, does not stop it. In the default mode and with
//! `--allow-git-writes`.

use serde_json::Value;

use crate::support::{git, stderr, stdout, wait_for_path, Run, TestDir};

/// The modes: the git directory pinned whole, or with its data writable.
const MODES: &[Option<&str>] = &[None, Some("--allow-git-writes")];

/// A run of `mode` on a workspace holding a repository with one commit.
fn repository_run(dir: &TestDir, mode: Option<&str>) -> Run {
    let mut run = Run::new(dir).arg("--quiet");
    if let Some(mode) = mode {
        run = run.arg(mode);
    }
    git(&run.workspace, &["init", "-q"]);
    git(
        &run.workspace,
        &["commit", "-q", "--allow-empty", "-m", "first"],
    );
    run
}

/// The line that stops the run.
fn stop_line(setting: &str, run: &Run, named: &str) -> String {
    format!(
        "netbox: {setting} for the repository {} now names {}/{named}, which the sandbox can write",
        run.workspace.display(),
        run.workspace.display()
    )
}

#[test]
fn a_hooks_path_the_host_sets_during_the_run_stops_it() {
    for mode in MODES {
        let dir = TestDir::new("gitchanges-hookspath");
        let run = repository_run(&dir, *mode);
        let marker = dir.join("PWNED");
        // The attack: CMD waits for the user's tooling to set a hooks path in the work
        // tree, then plants a pre-commit hook there for the user's next commit.
        let script = format!(
            "touch started; i=0; until git config core.hooksPath >/dev/null; do sleep 0.1; \
             i=$((i+1)); [ $i -gt 100 ] && exit 5; done; h=$(git config core.hooksPath); \
             mkdir -p \"$h\" && printf '#!/bin/sh\\ntouch {}\\n' > \"$h/pre-commit\" && \
             chmod +x \"$h/pre-commit\" && echo PLANTED",
            marker.display()
        );
        let child = run
            .command(&script)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_path(&run.workspace.join("started"), "CMD never started");
        // husky's `prepare`, at the user's `npm install` in another terminal.
        git(&run.workspace, &["config", "core.hooksPath", ".husky/_"]);
        let out = child.wait_with_output().unwrap();
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{mode:?}: {said}");
        assert!(
            said.contains(&stop_line("core.hookspath", &run, ".husky/_")),
            "{mode:?}: {said}"
        );
        assert!(said.contains("the run was stopped"), "{mode:?}: {said}");
        // CMD may have outrun the stop (it looks as often as netbox): then the check after
        // the run names what it made there.
        if stdout(&out).contains("PLANTED") {
            assert!(
                said.contains(&format!(
                    "warning: the command changed {}/.husky",
                    run.workspace.display()
                )) || said.contains(&format!(
                    "warning: the command created {}/.husky",
                    run.workspace.display()
                )),
                "{mode:?}: {said}"
            );
        } else {
            assert!(!run.workspace.join(".husky/_/pre-commit").exists());
        }
        assert!(!marker.exists(), "{mode:?}: the hook ran already");
        // The control: git on the host reads the new setting, and runs a hook there.
        std::fs::create_dir_all(run.workspace.join(".husky/_")).unwrap();
        let hook = run.workspace.join(".husky/_/pre-commit");
        std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        git(
            &run.workspace,
            &["commit", "-q", "--allow-empty", "-m", "user"],
        );
        assert!(marker.exists(), "{mode:?}: git ran no hook from .husky/_");
    }
}

#[test]
fn what_cmd_planted_before_the_host_named_it_is_reported() {
    for mode in MODES {
        let dir = TestDir::new("gitchanges-preplanted");
        let run = repository_run(&dir, *mode);
        // CMD lays husky's hooks before the user's `npm install` makes them the hooks,
        // and ends as soon as they are: no look of netbox's may fall in between.
        let child = run
            .command(
                "mkdir -p .husky/_ && printf '#!/bin/sh\\ntrue\\n' > .husky/_/pre-commit && \
                 touch started && until git config core.hooksPath >/dev/null; do :; done; \
                 echo DONE",
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_path(&run.workspace.join("started"), "CMD never started");
        git(&run.workspace, &["config", "core.hooksPath", ".husky/_"]);
        let out = child.wait_with_output().unwrap();
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{mode:?}: {said}");
        assert!(
            said.contains(&stop_line("core.hookspath", &run, ".husky/_")),
            "{mode:?}: {said}"
        );
        let husky = format!("{}/.husky", run.workspace.display());
        assert!(
            said.contains(&format!(
                "warning: the command changed {husky}/_ (core.hookspath"
            )),
            "{mode:?}: {said}"
        );
        let records: Vec<Value> = run
            .events()
            .into_iter()
            .filter(|e| e["type"] == "git_metadata_created")
            .collect();
        assert!(
            records.iter().any(|r| r["path"] == format!("{husky}/_")
                && r["setting"]
                    .as_str()
                    .is_some_and(|s| s.contains("set on the host during the run"))),
            "{mode:?}: {records:?}"
        );
    }
}

#[test]
fn a_commit_or_a_setting_naming_nothing_writable_does_not_stop_the_run() {
    for mode in MODES {
        let dir = TestDir::new("gitchanges-control");
        let run = repository_run(&dir, *mode);
        let outside = dir.join("hooks-outside");
        std::fs::create_dir_all(&outside).unwrap();
        let child = run
            .command(
                "touch started; for i in $(seq 300); do [ -e host-done ] && break; sleep 0.05; \
                 done; sleep 0.5; touch survived; sleep 30",
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_path(&run.workspace.join("started"), "CMD never started");
        // The user's own work meanwhile: a commit (the index replaced), settings that
        // name nothing CMD can write.
        std::fs::write(run.workspace.join("f.txt"), "1\n").unwrap();
        git(&run.workspace, &["add", "f.txt"]);
        git(&run.workspace, &["commit", "-q", "-m", "host"]);
        git(&run.workspace, &["config", "user.name", "someone"]);
        git(
            &run.workspace,
            &["config", "core.hooksPath", outside.to_str().unwrap()],
        );
        git(&run.workspace, &["config", "core.pager", "less -R"]);
        std::fs::write(run.workspace.join("host-done"), "").unwrap();
        wait_for_path(
            &run.workspace.join("survived"),
            "the run did not survive the user's commit and settings",
        );
        // The same run, watched all along, stops at a setting that names the work tree.
        git(&run.workspace, &["config", "core.hooksPath", ".githooks"]);
        let out = child.wait_with_output().unwrap();
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{mode:?}: {said}");
        assert!(
            said.contains(&stop_line("core.hookspath", &run, ".githooks")),
            "{mode:?}: {said}"
        );
    }
}

#[test]
fn the_global_config_edited_or_a_gitlink_added_during_the_run_stops_it() {
    let dir = TestDir::new("gitchanges-global");
    let global = dir.write("global.gitconfig", "[user]\n\tname = u\n");
    let run = repository_run(&dir, None).env("GIT_CONFIG_GLOBAL", global.to_str().unwrap());
    let child = run
        .command("touch started; sleep 30")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    // A relative hooks path in the global config counts in every repository.
    std::fs::write(
        &global,
        "[user]\n\tname = u\n[core]\n\thooksPath = .githooks\n",
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{said}");
    assert!(
        said.contains(&stop_line("core.hookspath", &run, ".githooks")),
        "{said}"
    );

    // A repository the user adds as a submodule: `git status` enters it and reads its
    // config, which CMD could write.
    for mode in MODES {
        let dir = TestDir::new("gitchanges-gitlink");
        let run = repository_run(&dir, *mode);
        let child = run
            .command("touch started; sleep 30")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_path(&run.workspace.join("started"), "CMD never started");
        let lib = run.workspace.join("lib");
        std::fs::create_dir(&lib).unwrap();
        git(&lib, &["init", "-q"]);
        git(&lib, &["commit", "-q", "--allow-empty", "-m", "lib"]);
        git(&run.workspace, &["add", "lib"]);
        let out = child.wait_with_output().unwrap();
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{mode:?}: {said}");
        assert!(
            said.contains(&format!(
                "{} at {}/lib/.git",
                stop_line("a submodule in the index", &run, "lib"),
                run.workspace.display()
            )),
            "{mode:?}: {said}"
        );
    }
}
