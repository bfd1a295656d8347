//! What git runs or reads as code, for every repository netbox meets in a writable root:
//! pinned for the ones in reach (the workspace's, a `--write` root's, a home entry's under
//! `--allow-home-write`, each submodule's), whichever configuration names it (the
//! repository's own, or the global one's relative paths, which git takes against every
//! work tree), and reported after the run for the ones netbox does not pin (a nested
//! repository, a linked worktree's git directory). Each attack as an outside review wrote
//! it, with a control that shows the attack works where netbox is not in the way.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{stderr, stdout, Run, TestDir};

/// git on the host, as the user runs it later: `home`'s global config, no system one.
fn host_git(home: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "user.email=t@netbox.test", "-c", "user.name=t"])
        .args(["-c", "protocol.file.allow=always"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL")
        .output()
        .expect("git is needed for these tests")
}

/// [`host_git`] that must succeed.
fn git_ok(home: &Path, dir: &Path, args: &[&str]) -> String {
    let out = host_git(home, dir, args);
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// A test directory with an empty home in it (`dir/home`), for HOME.
fn with_home(name: &str) -> (TestDir, PathBuf) {
    let dir = TestDir::new(name);
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    (dir, home)
}

/// A run in `dir`'s workspace with `home` as HOME.
fn run_with_home(dir: &TestDir, home: &Path) -> Run {
    Run::new(dir).env("HOME", home.display().to_string())
}

/// A repository at `dir` with one commit.
fn repository(home: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git_ok(home, dir, &["init", "-q"]);
    std::fs::write(dir.join("README"), "hello\n").unwrap();
    git_ok(home, dir, &["add", "README"]);
    git_ok(home, dir, &["commit", "-qm", "one"]);
}

/// A shell script that runs `touch MARK` (and fails, as a hook that stops git would).
fn marking(mark: &Path) -> String {
    format!("#!/bin/sh\\ntouch {}\\nexit 1\\n", mark.display())
}

fn executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn git_metadata_records(run: &Run) -> Vec<Value> {
    run.events()
        .into_iter()
        .filter(|e| e["type"] == "git_metadata_created")
        .collect()
}

/// The global config's relative paths are taken against the work tree of every
/// repository: `core.hooksPath = .githooks` (a team's "run each repository's committed
/// hooks") and `core.fsmonitor = ./.fsmon` must not let CMD plant a hook or a monitor
/// the host's next `git commit` or `git status` runs.
#[test]
fn the_global_configs_relative_paths_are_pinned_in_the_workspace() {
    let (dir, home) = with_home("git-global-relative");
    std::fs::write(
        home.join(".gitconfig"),
        "[core]\n\thooksPath = .githooks\n\tfsmonitor = ./.fsmon\n",
    )
    .unwrap();
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("HOME", home.display().to_string());
    repository(&home, &run.workspace);
    let (hook_mark, fsmon_mark) = (dir.join("HOOK_RAN"), dir.join("FSMONITOR_RAN"));
    let attack = format!(
        "mkdir -p .githooks 2>/dev/null; \
         printf '{hook}' > .githooks/pre-commit 2>/dev/null && chmod +x .githooks/pre-commit && echo HOOK; \
         printf '{fsmon}' > .fsmon 2>/dev/null && chmod +x .fsmon && echo FSMONITOR; \
         echo x > control && echo CONTROL",
        hook = marking(&hook_mark),
        fsmon = marking(&fsmon_mark),
    );
    let out = run.sh(&attack);
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    // The host's next commit and status run nothing CMD wrote.
    host_git(&home, &run.workspace, &["add", "control"]);
    host_git(&home, &run.workspace, &["commit", "-qm", "after"]);
    host_git(&home, &run.workspace, &["status", "--short"]);
    assert!(!hook_mark.exists() && !fsmon_mark.exists());
    // Control: the same script outside netbox plants both, and git runs them.
    let out = Command::new("bash")
        .args(["-c", &attack])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out),
        "HOOK\nFSMONITOR\nCONTROL\n",
        "{}",
        stderr(&out)
    );
    host_git(
        &home,
        &run.workspace,
        &["commit", "-qm", "again", "--allow-empty"],
    );
    assert!(
        hook_mark.exists(),
        "the planted hook runs at the next commit"
    );
    assert!(
        fsmon_mark.exists(),
        "the planted monitor runs at the next status"
    );
}

/// Under `--allow-home-write`, a repository at the top of a home entry keeps what a
/// workspace's keeps: husky's hooks path and a relative fsmonitor program, and its
/// submodules' `.git`.
#[test]
fn a_home_entrys_repository_is_pinned_like_the_workspaces() {
    let dir = TestDir::new("git-home-entry");
    let home = dir.join("home");
    let webapp = home.join("webapp");
    repository(&home, &dir.join("upstream"));
    repository(&home, &webapp);
    std::fs::create_dir_all(webapp.join(".husky/_")).unwrap();
    std::fs::create_dir_all(webapp.join("tools")).unwrap();
    std::fs::write(webapp.join(".husky/_/pre-commit"), "#!/bin/sh\n").unwrap();
    std::fs::write(webapp.join("tools/fsmon"), "#!/bin/sh\nexit 1\n").unwrap();
    git_ok(&home, &webapp, &["config", "core.hooksPath", ".husky/_"]);
    git_ok(
        &home,
        &webapp,
        &["config", "core.fsmonitor", "./tools/fsmon"],
    );
    let upstream = dir.join("upstream").display().to_string();
    git_ok(
        &home,
        &webapp,
        &["submodule", "add", "-q", &upstream, "sub"],
    );
    git_ok(&home, &webapp, &["add", "-A"]);
    git_ok(&home, &webapp, &["commit", "-qm", "app"]);
    let run = Run::new(&dir)
        .arg("--quiet")
        .args_from(&["--write", &home.display().to_string(), "--allow-home-write"])
        .env("HOME", home.display().to_string());
    let mark = dir.join("RAN");
    let out = run.sh(&format!(
        "cd \"$HOME/webapp\" || exit 9; \
         printf '{code}' > tools/fsmon 2>/dev/null && echo FSMONITOR; \
         printf '{code}' > .husky/_/pre-commit 2>/dev/null && echo HOOK; \
         mkdir -p evil 2>/dev/null; \
         echo 'gitdir: ../evil' > sub/.git 2>/dev/null && echo SUBMODULE; \
         echo x > notes.txt && echo CONTROL",
        code = marking(&mark),
    ));
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("warning"),
        "nothing was changed, so nothing is said: {}",
        stderr(&out)
    );
    host_git(&home, &webapp, &["status", "--short"]);
    host_git(&home, &webapp, &["add", "notes.txt"]);
    host_git(&home, &webapp, &["commit", "-qm", "notes"]);
    assert!(!mark.exists());
    assert!(std::fs::read_to_string(webapp.join("sub/.git"))
        .unwrap()
        .contains("modules/sub"));
}

/// A nested repository netbox does not pin, with a linked worktree beside it: CMD
/// points the worktree's `commondir` at a directory it built (objects, refs and a
/// config with a monitor: no HEAD, so no bare repository either). The host's next
/// `git status` there would run it: the run's end says so.
#[test]
fn a_linked_worktrees_redirect_is_reported() {
    let (dir, home) = with_home("git-linked-worktree");
    let run = run_with_home(&dir, &home);
    repository(&home, &run.workspace);
    let app = run.workspace.join("app");
    repository(&home, &app);
    git_ok(
        &home,
        &app,
        &["config", "extensions.worktreeConfig", "true"],
    );
    git_ok(&home, &app, &["worktree", "add", "-q", "../app-feature"]);
    let linked = std::fs::canonicalize(app.join(".git/worktrees/app-feature")).unwrap();
    // Control: a run that changes no git metadata says nothing.
    let out = run.sh("echo x > control");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert!(git_metadata_records(&run).is_empty());

    let mark = dir.join("RAN");
    for (file, what) in [
        ("commondir", "a redirect to a directory CMD built"),
        ("config.worktree", "a worktree's own config"),
    ] {
        let _ = std::fs::remove_file(&mark);
        // A log of its own: the log is appended to.
        let run = run_with_home(&dir, &home).log_at(dir.join(&format!("events-{file}.jsonl")));
        let out = run.sh(&format!(
            "mkdir -p evil/objects evil/refs && \
             printf '[core]\\n\\tfsmonitor = touch {mark}; false\\n' > evil/config && \
             case {file} in \
               commondir) echo \"$PWD/evil\" > app/.git/worktrees/app-feature/commondir;; \
               *) cp evil/config app/.git/worktrees/app-feature/config.worktree;; \
             esac && echo DONE",
            mark = mark.display(),
        ));
        assert_eq!(stdout(&out), "DONE\n", "{what}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("warning") && said.contains(&linked.display().to_string()),
            "{what}: {said}"
        );
        assert!(
            git_metadata_records(&run)
                .iter()
                .any(|r| r["path"] == linked.display().to_string()),
            "{what}"
        );
        // The attack is real: git there runs what CMD planted.
        host_git(
            &home,
            &run.workspace.join("app-feature"),
            &["status", "--short"],
        );
        assert!(mark.exists(), "{what}: git ran the planted monitor");
        git_ok(&home, &app, &["worktree", "repair"]);
        let _ = std::fs::remove_file(linked.join("config.worktree"));
        std::fs::write(linked.join("commondir"), "../..\n").unwrap();
    }
}

/// A nested repository's config names hooks outside `.git` (husky in `src/app`): a
/// rewritten hook there is reported, naming the file, the repository and the setting.
#[test]
fn a_nested_repositorys_hooks_path_is_audited() {
    let (dir, home) = with_home("git-nested-hooks");
    let run = run_with_home(&dir, &home);
    repository(&home, &run.workspace);
    let app = run.workspace.join("src/app");
    repository(&home, &app);
    std::fs::create_dir_all(app.join(".husky/_")).unwrap();
    std::fs::write(app.join(".husky/_/pre-commit"), "#!/bin/sh\n").unwrap();
    executable(&app.join(".husky/_/pre-commit"));
    git_ok(&home, &app, &["config", "core.hooksPath", ".husky/_"]);
    // Control: a run that leaves the hook alone says nothing.
    let out = run.sh("echo x > src/app/notes.txt");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));

    let mark = dir.join("RAN");
    let out = run.sh(&format!(
        "printf '{}' > src/app/.husky/_/pre-commit && echo HOOK",
        marking(&mark)
    ));
    assert_eq!(stdout(&out), "HOOK\n", "{}", stderr(&out));
    let hook = std::fs::canonicalize(app.join(".husky/_/pre-commit")).unwrap();
    let said = stderr(&out);
    assert!(
        said.contains(&hook.display().to_string()) && said.contains("core.hookspath"),
        "{said}"
    );
    let records = git_metadata_records(&run);
    let record = records
        .iter()
        .find(|r| r["path"] == hook.display().to_string())
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(record["kind"], "code_path");
    assert_eq!(record["setting"], "core.hookspath");
    assert!(record["repository"]
        .as_str()
        .unwrap()
        .ends_with("src/app/.git"));
    // The attack is real: the host's next commit there runs it.
    host_git(&home, &app, &["commit", "-qm", "x", "--allow-empty"]);
    assert!(mark.exists());
}

/// git's documented settings whose value it runs or reads as code (git-config(1),
/// gitattributes(5), git-archive(1), git-send-email(1)), written from the documentation
/// and not from netbox's own table, each with a value naming `PATH` (a directory where
/// the setting names one).
const CODE_SETTINGS: &[(&str, &str, Shape)] = &[
    ("core.fsmonitor", "PATH", Shape::File),
    ("core.hooksPath", "PATH", Shape::Dir),
    ("core.sshCommand", "PATH -v", Shape::File),
    ("core.gitProxy", "PATH for example.test", Shape::File),
    ("core.alternateRefsCommand", "PATH", Shape::File),
    ("core.askPass", "PATH", Shape::File),
    ("core.pager", "PATH -R", Shape::File),
    ("core.editor", "PATH", Shape::File),
    ("core.attributesFile", "PATH", Shape::File),
    ("alias.x", "!PATH --flag", Shape::File),
    ("alias.y", "!sh PATH", Shape::File),
    ("alias.z", "-c core.fsmonitor=PATH status", Shape::File),
    ("browser.b.cmd", "PATH", Shape::File),
    ("browser.b.path", "PATH", Shape::File),
    ("credential.helper", "!PATH", Shape::File),
    ("credential.https://git.test.helper", "PATH", Shape::File),
    ("diff.external", "PATH", Shape::File),
    ("diff.d.command", "PATH", Shape::File),
    ("diff.d.textconv", "PATH", Shape::File),
    ("difftool.t.cmd", "PATH \"$LOCAL\" \"$REMOTE\"", Shape::File),
    ("difftool.t.path", "PATH", Shape::File),
    ("gc.recentObjectsHook", "PATH", Shape::File),
    ("gpg.program", "PATH", Shape::File),
    ("gpg.ssh.program", "PATH", Shape::File),
    ("gpg.ssh.defaultKeyCommand", "PATH", Shape::File),
    ("guitool.g.cmd", "PATH", Shape::File),
    ("imap.tunnel", "PATH", Shape::File),
    ("include.path", "ABSOLUTE", Shape::File),
    ("includeIf.gitdir:/.path", "ABSOLUTE", Shape::File),
    ("init.templateDir", "PATH", Shape::Dir),
    ("instaweb.httpd", "PATH", Shape::File),
    ("interactive.diffFilter", "PATH", Shape::File),
    ("man.m.cmd", "PATH", Shape::File),
    ("man.m.path", "PATH", Shape::File),
    ("merge.d.driver", "PATH %O %A %B", Shape::File),
    ("mergetool.t.cmd", "PATH \"$MERGED\"", Shape::File),
    ("mergetool.t.path", "PATH", Shape::File),
    ("pager.log", "PATH", Shape::File),
    ("remote.r.receivepack", "PATH", Shape::File),
    ("remote.r.uploadpack", "PATH", Shape::File),
    ("remote.r.url", "ext::PATH %S", Shape::File),
    ("sequence.editor", "PATH", Shape::File),
    ("trailer.t.command", "PATH", Shape::File),
    ("trailer.t.cmd", "PATH", Shape::File),
    ("submodule.lib.update", "!PATH", Shape::File),
    ("uploadpack.packObjectsHook", "PATH", Shape::File),
    ("url.ext::PATH.insteadOf", "nothing:", Shape::File),
    ("filter.f.clean", "PATH", Shape::File),
    ("filter.f.smudge", "PATH", Shape::File),
    ("filter.f.process", "PATH", Shape::File),
    ("tar.t.command", "PATH", Shape::File),
    ("lfs.customtransfer.agent.path", "PATH", Shape::File),
    ("lfs.extension.e.clean", "PATH %f", Shape::File),
    ("alias.s", "!ssh -F PATH host", Shape::File),
    ("sendemail.sendmailCmd", "PATH", Shape::File),
    ("sendemail.smtpServer", "PATH", Shape::File),
    ("sendemail.toCmd", "PATH", Shape::File),
    ("sendemail.ccCmd", "PATH", Shape::File),
    ("sendemail.headerCmd", "PATH", Shape::File),
];

/// githooks(5): every hook git runs.
const HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    File,
    Dir,
}

/// Writes every setting of the table into `config` (`git config -f`), the n-th naming
/// `WORKTREE/code/n`; returns the paths.
fn write_settings(home: &Path, config: &Path, worktree: &Path) -> Vec<(PathBuf, Shape)> {
    std::fs::create_dir_all(worktree.join("code")).unwrap();
    let config_arg = config.display().to_string();
    CODE_SETTINGS
        .iter()
        .enumerate()
        .map(|(n, (name, value, shape))| {
            let relative = format!("./code/{n}");
            let absolute = worktree.join(format!("code/{n}"));
            let value = value
                .replace("ABSOLUTE", &absolute.display().to_string())
                .replace("PATH", &relative);
            let name = name.replace("PATH", &relative);
            git_ok(
                home,
                worktree,
                &["config", "-f", &config_arg, &name, &value],
            );
            (absolute, *shape)
        })
        .collect()
}

/// A script that tries to plant code at each path, printing the ones it could write,
/// then `control` (a path no setting names).
fn plant_each(paths: &[(PathBuf, Shape)]) -> String {
    let mut script = String::new();
    for (path, shape) in paths {
        let p = path.display();
        match shape {
            Shape::File => script.push_str(&format!("echo x > '{p}' 2>/dev/null && echo '{p}'; ")),
            Shape::Dir => script.push_str(&format!(
                "mkdir -p '{p}/hooks' 2>/dev/null; echo x > '{p}/pre-commit' 2>/dev/null && echo '{p}'; \
                 echo x > '{p}/hooks/pre-commit' 2>/dev/null && echo '{p}'; "
            )),
        }
    }
    script.push_str("echo x > code/control && echo control");
    script
}

/// Each documented setting, in each place a repository can be that netbox pins: what it
/// names cannot be written; `code/control`, which nothing names, can.
#[test]
fn every_documented_code_setting_is_pinned_wherever_the_repository_is() {
    let (dir, home) = with_home("git-table-pinned");
    let ws = dir.join("ws");
    repository(&home, &ws);
    let upstream = dir.join("upstream");
    repository(&home, &upstream);
    // A file:// URL: a plain path would hard-link the submodule's objects to the
    // upstream's, which --allow-git-writes refuses.
    let upstream_arg = format!("file://{}", upstream.display());
    git_ok(
        &home,
        &ws,
        &["submodule", "add", "-q", &upstream_arg, "lib"],
    );
    git_ok(&home, &ws, &["commit", "-qm", "lib"]);
    let other = dir.join("other");
    repository(&home, &other);
    let entry = home.join("proj");
    repository(&home, &entry);

    struct Place {
        what: &'static str,
        worktree: PathBuf,
        config: PathBuf,
        args: Vec<String>,
    }
    let places = [
        Place {
            what: "the workspace's repository",
            worktree: ws.clone(),
            config: ws.join(".git/config"),
            args: vec![],
        },
        Place {
            what: "the global config, for the workspace's repository",
            worktree: ws.clone(),
            config: home.join(".gitconfig"),
            args: vec![],
        },
        Place {
            what: "the workspace's repository with --allow-git-writes",
            worktree: ws.clone(),
            config: ws.join(".git/config"),
            args: vec!["--allow-git-writes".into()],
        },
        Place {
            what: "a submodule's repository",
            worktree: ws.join("lib"),
            config: ws.join(".git/modules/lib/config"),
            args: vec![],
        },
        Place {
            what: "a --write root's repository",
            worktree: other.clone(),
            config: other.join(".git/config"),
            args: vec!["--write".into(), other.display().to_string()],
        },
        Place {
            what: "a home entry's repository under --allow-home-write",
            worktree: entry.clone(),
            config: entry.join(".git/config"),
            args: vec![
                "--write".into(),
                home.display().to_string(),
                "--allow-home-write".into(),
            ],
        },
    ];
    for place in &places {
        let before = std::fs::read(&place.config).unwrap_or_default();
        let paths = write_settings(&home, &place.config, &place.worktree);
        let mut run = Run::new(&dir)
            .arg("--quiet")
            .env("HOME", home.display().to_string());
        for arg in &place.args {
            run = run.arg(arg.clone());
        }
        let out = run.sh(&format!(
            "cd '{}' || exit 9; {}",
            place.worktree.display(),
            plant_each(&paths)
        ));
        assert_eq!(
            stdout(&out),
            "control\n",
            "{}: these could be written: {}",
            place.what,
            stderr(&out)
        );
        std::fs::write(&place.config, before).unwrap();
        let _ = std::fs::remove_dir_all(place.worktree.join("code"));
    }
    // Every hook, in the hooks directory of a repository whose data is writable
    // (`--allow-git-writes`).
    let hooks: String = HOOKS
        .iter()
        .map(|h| format!("echo x > .git/hooks/{h} 2>/dev/null && echo {h}; "))
        .collect();
    let out = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-git-writes")
        .env("HOME", home.display().to_string())
        .sh(&format!(
            "{hooks} echo x > .git/objects/control && echo control"
        ));
    assert_eq!(stdout(&out), "control\n", "{}", stderr(&out));
}

/// The same table in a nested repository netbox does not pin: every path CMD planted
/// is reported after the run, with the setting that names it.
#[test]
fn every_documented_code_setting_of_a_nested_repository_is_audited() {
    let (dir, home) = with_home("git-table-audited");
    let run = run_with_home(&dir, &home);
    repository(&home, &run.workspace);
    let nested = run.workspace.join("vendor/tool");
    repository(&home, &nested);
    let paths = write_settings(&home, &nested.join(".git/config"), &nested);
    let out = run.sh(&format!("cd vendor/tool && {}", plant_each(&paths)));
    assert!(out.status.success(), "{}", stderr(&out));
    let records = git_metadata_records(&run);
    for ((path, _), (name, _, _)) in paths.iter().zip(CODE_SETTINGS) {
        let path = std::fs::canonicalize(path).unwrap();
        assert!(
            records.iter().any(|r| r["path"]
                .as_str()
                .is_some_and(|p| Path::new(p).starts_with(&path))),
            "{name}: {} not reported",
            path.display()
        );
    }
    // Control: code/control, which no setting names, is not reported.
    let control = std::fs::canonicalize(nested.join("code/control")).unwrap();
    assert!(!records
        .iter()
        .any(|r| r["path"] == control.display().to_string()));
}

/// Links in a pinned git directory lead git on: `.git/hooks/pre-commit` a link to a
/// tracked `scripts/pre-commit` (a common layout), `.git/config` a link into the work
/// tree. What they lead to is pinned too.
#[test]
fn what_links_in_a_pinned_git_directory_lead_to_is_pinned() {
    let (dir, home) = with_home("git-links-in-git-dir");
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("HOME", home.display().to_string());
    repository(&home, &run.workspace);
    let ws = &run.workspace;
    std::fs::create_dir_all(ws.join("scripts")).unwrap();
    std::fs::write(ws.join("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
    executable(&ws.join("scripts/pre-commit"));
    std::os::unix::fs::symlink("../../scripts/pre-commit", ws.join(".git/hooks/pre-commit"))
        .unwrap();
    std::fs::create_dir_all(ws.join("meta")).unwrap();
    std::fs::rename(ws.join(".git/config"), ws.join("meta/git-config")).unwrap();
    std::os::unix::fs::symlink("../meta/git-config", ws.join(".git/config")).unwrap();
    let mark = dir.join("RAN");
    let out = run.sh(&format!(
        "printf '{}' > scripts/pre-commit 2>/dev/null && echo HOOK; \
         printf '[core]\\n\\tfsmonitor = touch {}\\n' >> meta/git-config 2>/dev/null && echo CONFIG; \
         echo x > scripts/other && echo CONTROL",
        marking(&mark),
        mark.display()
    ));
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    host_git(&home, ws, &["status", "--short"]);
    host_git(&home, ws, &["commit", "-qm", "x", "--allow-empty"]);
    assert!(!mark.exists());
}

/// A config git reads but netbox could not, or read wrongly (a Latin-1 name, a comment
/// ending in a backslash, a byte-order mark): what it names is pinned all the same, and
/// a path it names that netbox cannot spell stops the run.
#[test]
fn a_config_in_another_spelling_still_pins_what_it_names() {
    let (dir, home) = with_home("git-config-spellings");
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("HOME", home.display().to_string());
    repository(&home, &run.workspace);
    let config = run.workspace.join(".git/config");
    let original = std::fs::read(&config).unwrap();
    for (what, tail) in [
        (
            "Latin-1",
            &b"[user]\n\tname = Jos\xe9\n[core]\n\thooksPath = .githooks\n"[..],
        ),
        (
            "a comment ending in a backslash",
            &b"[core]\n\teditor = vim ; C:\\tools\\\n\thooksPath = .githooks\n"[..],
        ),
    ] {
        let mut text = original.clone();
        text.extend_from_slice(tail);
        std::fs::write(&config, &text).unwrap();
        let out = run.sh(
            "mkdir -p .githooks 2>/dev/null; echo x > .githooks/pre-commit 2>/dev/null && echo HOOK; \
             echo x > control && echo CONTROL",
        );
        assert_eq!(stdout(&out), "CONTROL\n", "{what}: {}", stderr(&out));
    }
    let mut text = b"\xef\xbb\xbf".to_vec();
    text.extend_from_slice(b"[core]\n\thooksPath = .githooks\n");
    text.extend_from_slice(&original);
    std::fs::write(&config, &text).unwrap();
    let out = run.sh("mkdir -p .githooks 2>/dev/null; echo x > .githooks/pre-commit 2>/dev/null && echo HOOK; echo CONTROL");
    assert_eq!(
        stdout(&out),
        "CONTROL\n",
        "a byte-order mark: {}",
        stderr(&out)
    );
    // A hooks path in bytes that are not UTF-8: git takes them as they are, and so is it
    // pinned (a placeholder where it is missing).
    let mut text = original.clone();
    text.extend_from_slice(b"[core]\n\thooksPath = .hooks\xe9\n");
    std::fs::write(&config, &text).unwrap();
    let out = run.sh(
        "mkdir -p $'.hooks\\xe9' 2>/dev/null; echo x > $'.hooks\\xe9/pre-commit' 2>/dev/null && echo HOOK; \
         echo CONTROL",
    );
    assert_eq!(stdout(&out), "CONTROL\n", "Latin-1 path: {}", stderr(&out));
    let latin = std::ffi::OsStr::from_bytes(b".hooks\xe9/pre-commit");
    assert!(!run.workspace.join(latin).exists());
}

/// A hostile repository ships a git directory as tracked files; CMD moves it in as a
/// nested `.git` and touches it (every time in it stays old). Reported, because the
/// directory changed and it runs code; git's own activity in a nested repository that
/// runs nothing is not.
#[test]
fn an_old_git_directory_moved_in_is_reported() {
    let (dir, home) = with_home("git-moved-in");
    let run = run_with_home(&dir, &home);
    repository(&home, &run.workspace);
    let fixture = run.workspace.join("test/fixture.git");
    std::fs::create_dir_all(&fixture).unwrap();
    git_ok(&home, &fixture, &["init", "-q", "--bare"]);
    let mark = dir.join("RAN");
    git_ok(&home, &fixture, &["config", "core.bare", "false"]);
    git_ok(
        &home,
        &fixture,
        &[
            "config",
            "core.fsmonitor",
            &format!("touch {}; false", mark.display()),
        ],
    );
    std::fs::remove_dir_all(fixture.join("hooks")).unwrap();
    repository(&home, &run.workspace.join("plain"));
    // Stamped before the run starts.
    std::thread::sleep(std::time::Duration::from_millis(50));
    // Control: git at work in a nested repository that runs nothing says nothing.
    let out = run
        .sh("git -C plain -c user.name=a -c user.email=a@b commit -qm x --allow-empty && echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run.sh("mkdir -p vendor/lib && mv test/fixture.git vendor/lib/.git && touch vendor/lib/.git && echo MOVED");
    assert_eq!(stdout(&out), "MOVED\n", "{}", stderr(&out));
    let moved = std::fs::canonicalize(run.workspace.join("vendor/lib/.git")).unwrap();
    assert!(
        stderr(&out).contains(&moved.display().to_string()),
        "{}",
        stderr(&out)
    );
}

/// husky's hooks (`core.hooksPath = .husky/_`) run the scripts beside them in `.husky/`:
/// pinned with them. (The project's own tools they run, such as `node_modules/.bin`, are
/// the project's to review: docs/git.md.)
#[test]
fn the_scripts_husky_runs_are_pinned_with_its_hooks() {
    let (dir, home) = with_home("git-husky");
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("HOME", home.display().to_string());
    repository(&home, &run.workspace);
    let ws = &run.workspace;
    std::fs::create_dir_all(ws.join(".husky/_")).unwrap();
    std::fs::write(
        ws.join(".husky/_/pre-commit"),
        "#!/bin/sh\n. \"$(dirname \"$0\")/h\"\n",
    )
    .unwrap();
    std::fs::write(ws.join(".husky/pre-commit"), "npm test\n").unwrap();
    git_ok(&home, ws, &["config", "core.hooksPath", ".husky/_"]);
    let out = run.sh(
        "echo 'touch /tmp/owned' > .husky/pre-commit 2>/dev/null && echo SCRIPT; \
         echo x > .husky/new 2>/dev/null && echo NEW; \
         mkdir -p node_modules/.bin && echo x > node_modules/.bin/tool && echo CONTROL",
    );
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(ws.join(".husky/pre-commit")).unwrap(),
        "npm test\n"
    );
}

/// `--allow-git-writes`: CMD cannot leave a rebase under way, whose todo list would run
/// `exec` lines at the next `git rebase --continue`: the top of the git directory is
/// read-only.
#[test]
fn a_rebase_cannot_be_left_under_way() {
    let (dir, home) = with_home("git-rebase-todo");
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-git-writes")
        .env("HOME", home.display().to_string());
    repository(&home, &run.workspace);
    let out = run.sh(
        "r=.git/rebase-merge; mkdir $r 2>/dev/null && echo 'exec touch /tmp/owned' > $r/git-rebase-todo && echo STAGED; \
         r=.git/rebase-apply; mkdir $r 2>/dev/null && echo STAGED; \
         echo x > .git/sequencer 2>/dev/null && echo STAGED; \
         echo x > .git/objects/control && echo CONTROL",
    );
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    for name in ["rebase-merge", "rebase-apply", "sequencer"] {
        assert!(!run.workspace.join(".git").join(name).exists(), "{name}");
    }
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

/// A directory on PATH inside the workspace (an activated `.venv/bin`, a relative
/// `./node_modules/.bin`): a program CMD puts there would run when git, or anything, runs
/// it by name (git's pager). Watched, not pinned (`pip install` and `npm install` write
/// there): said when the run ends. A relative entry whose directory is missing stops
/// nothing.
#[test]
fn a_path_directory_inside_the_workspace_is_watched() {
    let dir = TestDir::new("git-path-dir");
    let run = Run::new(&dir);
    let bin = run.workspace.join(".venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = format!(
        "{}:./node_modules/.bin:{}",
        bin.display(),
        std::env::var("PATH").unwrap()
    );
    let run = run.env("PATH", path);
    // Control: a run that leaves them alone says nothing.
    let out = run.sh("echo x > notes && echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    // CMD can install; the environment a directory on PATH runs from is said.
    let out = run.sh("mkdir -p node_modules && echo x > node_modules/x && echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("node_modules ("), "{}", stderr(&out));
    let out = Run::new(&dir)
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .log_at(dir.join("events-planted.jsonl"))
        .sh("echo x > .venv/bin/less && chmod +x .venv/bin/less && echo PLANTED");
    assert_eq!(stdout(&out), "PLANTED\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning") && stderr(&out).contains(".venv/bin"),
        "{}",
        stderr(&out)
    );
}

/// A directory on PATH reached through a link in the workspace (`tools -> /opt/tools`,
/// `tools/bin` on PATH): CMD can put a directory of its own in the link's place, which is
/// said when the run ends, wherever the link led.
#[test]
fn a_path_directory_through_a_link_in_the_workspace_is_watched_by_its_name() {
    let dir = TestDir::new("git-path-link");
    let run = Run::new(&dir);
    let elsewhere = dir.join("opt/tools/bin");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(dir.join("opt/tools"), run.workspace.join("tools")).unwrap();
    let path = format!(
        "{}:{}",
        run.workspace.join("tools/bin").display(),
        std::env::var("PATH").unwrap()
    );
    let run = run.env("PATH", path);
    // Control: a run that leaves it alone says nothing.
    let out = run.sh("echo x > notes && echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = Run::new(&dir)
        .env(
            "PATH",
            format!("{}/tools/bin:/usr/bin:/bin", dir.join("ws").display()),
        )
        .log_at(dir.join("events-swapped.jsonl"))
        .sh("rm tools && mkdir -p tools/bin && echo x > tools/bin/less && echo SWAPPED");
    assert_eq!(stdout(&out), "SWAPPED\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning") && stderr(&out).contains("tools/bin"),
        "{}",
        stderr(&out)
    );
}

/// An activated venv in a workspace outside home: a `.pth` file CMD puts in its
/// `site-packages` runs with the venv's python, so the venv is watched whole; a `PATH`
/// entry bash reads with `~+` (the current directory) is watched like a relative one; a
/// directory on PATH with more entries than the check reads is said to be unread.
#[test]
fn a_path_venv_a_tilde_entry_and_a_huge_path_directory_are_watched() {
    let dir = TestDir::new("git-path-venv");
    let run = Run::new(&dir);
    let venv = run.workspace.join(".venv");
    std::fs::create_dir_all(venv.join("lib/site-packages")).unwrap();
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", venv.join("bin/python")).unwrap();
    let tools = dir.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let path = format!("{}:~+/bin:/usr/bin:/bin", venv.join("bin").display());
    let run = run.env("PATH", path.as_str());
    // Control: a run that leaves them alone says nothing.
    let out = run.sh("echo x > notes && echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = Run::new(&dir)
        .env("PATH", path.as_str())
        .log_at(dir.join("events-planted.jsonl"))
        .sh("echo x > .venv/lib/site-packages/evil.pth && mkdir bin && echo x > bin/ls && echo PLANTED");
    assert_eq!(stdout(&out), "PLANTED\n", "{}", stderr(&out));
    let err = stderr(&out);
    let ws = dir.join("ws").display().to_string();
    for said in [format!("{ws}/.venv ("), format!("{ws}/bin (")] {
        assert!(
            err.lines()
                .any(|l| l.contains("warning") && l.contains(&said)),
            "{said}: {err}"
        );
    }
    // More programs than the check reads: a change past them would go unseen, so that
    // is said even when nothing was seen.
    let many = dir.join("ws/many");
    std::fs::create_dir_all(&many).unwrap();
    for i in 0..4100 {
        std::fs::write(many.join(format!("p{i}")), "").unwrap();
    }
    let out = Run::new(&dir)
        .env("PATH", format!("{}:/usr/bin:/bin", many.display()))
        .log_at(dir.join("events-many.jsonl"))
        .sh("echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("may have changed")
            && stderr(&out).contains("read only its first 4096"),
        "{}",
        stderr(&out)
    );
    // An entry with a `~` that dash and git take literally (`./~/bin`), and a venv that
    // is itself a writable root.
    let venv_root = dir.join("venv-root");
    std::fs::create_dir_all(venv_root.join("lib")).unwrap();
    std::fs::create_dir_all(venv_root.join("bin")).unwrap();
    std::fs::write(venv_root.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    let out = Run::new(&dir)
        .args_from(&["--write", &venv_root.display().to_string()])
        .env(
            "PATH",
            format!("~/bin:{}/bin:/usr/bin:/bin", venv_root.display()),
        )
        .log_at(dir.join("events-tilde.jsonl"))
        .sh(&format!(
            "mkdir -p './~/bin' && echo x > './~/bin/less' && echo x > {}/lib/evil.pth && echo OK",
            venv_root.display()
        ));
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
    for said in [
        format!("{ws}/~/bin ("),
        format!("{} (", venv_root.display()),
    ] {
        assert!(
            stderr(&out)
                .lines()
                .any(|l| l.contains("warning") && l.contains(&said)),
            "{said}: {}",
            stderr(&out)
        );
    }
}

/// A FIFO, socket or device where netbox would pin a path for git (a `.git` FIFO, which
/// git passes over for the repository above): a read-only mount does not stop writes to
/// one, so the run stops at once, saying which. Elsewhere (a `.envrc` FIFO CMD left) it
/// holds nothing once CMD is gone, and the run goes on: CMD cannot fail the next run.
#[test]
fn a_fifo_where_a_pin_belongs_stops_the_run() {
    let dir = TestDir::new("git-fifo-pin");
    let run = Run::new(&dir);
    let out = run.sh("mkfifo .bashrc && echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(Command::new("mkfifo")
        .arg(run.workspace.join(".envrc"))
        .status()
        .unwrap()
        .success());
    let out = run.sh("echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(Command::new("mkfifo")
        .arg(run.workspace.join(".git"))
        .status()
        .unwrap()
        .success());
    let started = std::time::Instant::now();
    let out = run.sh("echo RAN");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("is a FIFO, socket or device"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// The repository a workspace lies in, whose `.git` is a link (git follows it): pinned
/// like any other, its hooks path inside the workspace included.
#[test]
fn an_enclosing_repository_behind_a_link_is_pinned() {
    let (dir, home) = with_home("git-enclosing-link");
    let top = dir.join("top");
    repository(&home, &top);
    std::fs::rename(top.join(".git"), dir.join("top.git")).unwrap();
    std::os::unix::fs::symlink(dir.join("top.git"), top.join(".git")).unwrap();
    let frontend = top.join("frontend");
    std::fs::create_dir_all(frontend.join(".husky/_")).unwrap();
    std::fs::write(frontend.join(".husky/_/pre-commit"), "#!/bin/sh\n").unwrap();
    git_ok(
        &home,
        &top,
        &["config", "core.hooksPath", "frontend/.husky/_"],
    );
    let out = Command::new(crate::support::netbox_bin())
        .args(["--quiet", "--log"])
        .arg(dir.join("events.jsonl"))
        .args(["--", "sh", "-c"])
        .arg("echo x > .husky/_/pre-commit 2>/dev/null && echo HOOK; echo x > app.js && echo CONTROL")
        .current_dir(&frontend)
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
}

/// Common setups that must keep working: an alias collection full of awk programs (no
/// placeholder named after an awk program, no refusal), a filter that runs a venv's
/// python (a link inside the workspace: watched, not refused), a global alias that
/// runs `./node_modules/.bin/eslint` in a project with no `node_modules` yet (no
/// placeholder directory stopping `npm install`).
#[test]
fn common_configurations_do_not_stop_the_run_or_cmds_work() {
    let (dir, home) = with_home("git-common-setups");
    std::fs::write(
        home.join(".gitconfig"),
        "[alias]\n\
         \tchart = \"!f() { git log --format='%ad' | awk '{ a[$1]++ } END { for (k in a) print k, a[k] }'; }; f\"\n\
         \tlint = !./node_modules/.bin/eslint .\n",
    )
    .unwrap();
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("HOME", home.display().to_string());
    repository(&home, &run.workspace);
    let ws = &run.workspace;
    std::fs::create_dir_all(ws.join(".venv/bin")).unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", ws.join(".venv/bin/python3")).unwrap();
    let python = ws.join(".venv/bin/python3").display().to_string();
    git_ok(
        &home,
        ws,
        &[
            "config",
            "filter.strip.clean",
            &format!("\"{python}\" -m nbstripout"),
        ],
    );
    let before: Vec<_> = std::fs::read_dir(ws)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let out = run
        .sh("ls -A; mkdir -p node_modules/.bin && echo x > node_modules/.bin/eslint && echo NPM");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    // Only the placeholders every workspace gets; none named after an awk program or
    // node_modules.
    let usual = [".git", ".gitmodules", ".envrc", ".vscode", ".idea"];
    let strays: Vec<&str> = said
        .lines()
        .filter(|l| *l != "NPM" && !usual.contains(l))
        .filter(|l| !before.iter().any(|b| b.to_str() == Some(*l)))
        .collect();
    assert!(
        strays.is_empty(),
        "placeholders laid in the workspace: {strays:?}"
    );
    assert!(stdout(&out).ends_with("NPM\n"), "{}", stdout(&out));
    // The link the filter runs, re-pointed by CMD: reported.
    let out = run_with_home(&dir, &home)
        .log_at(dir.join("events-link.jsonl"))
        .sh("ln -sf /bin/sh .venv/bin/python3 && echo REPOINTED");
    assert_eq!(stdout(&out), "REPOINTED\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains(".venv/bin/python3"),
        "{}",
        stderr(&out)
    );
}

/// What netbox pins under one name but CMD can write under another (a hook hard-linked
/// to a tracked script), or only watches (a lefthook file a runner would pick up, a
/// cherry-pick left under way): reported when the run ends.
#[test]
fn what_can_only_be_watched_is_reported() {
    let (dir, home) = with_home("git-watched");
    let run = run_with_home(&dir, &home);
    repository(&home, &run.workspace);
    let ws = &run.workspace;
    std::fs::create_dir_all(ws.join("scripts")).unwrap();
    std::fs::write(ws.join("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
    std::fs::hard_link(
        ws.join("scripts/pre-commit"),
        ws.join(".git/hooks/pre-commit"),
    )
    .unwrap();
    std::fs::write(
        ws.join(".git/hooks/pre-push"),
        "#!/bin/sh\nlefthook run pre-push \"$@\"\n",
    )
    .unwrap();
    std::fs::write(ws.join("lefthook.yml"), "pre-push:\n").unwrap();
    // Control: a run that touches neither says nothing.
    let out = run.sh("echo x > notes");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    for (what, script, named) in [
        (
            "a hard link",
            "echo 'touch /tmp/owned' >> scripts/pre-commit",
            ".git/hooks/pre-commit",
        ),
        (
            "a lefthook file",
            "echo 'pre-push: {commands: {x: {run: touch /tmp/owned}}}' > lefthook-local.json",
            "lefthook-local.json",
        ),
    ] {
        let out = run_with_home(&dir, &home)
            .log_at(dir.join(&format!("events-{}.jsonl", named.replace('/', "-"))))
            .sh(script);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("warning") && stderr(&out).contains(named),
            "{what}: {}",
            stderr(&out)
        );
    }
}

/// A filter that runs a project venv's python (nbstripout's own install) runs that
/// environment's modules too: a `.pth` file CMD drops in `site-packages` runs at the
/// next `git add`. The environment is watched whole and said.
#[test]
fn the_environment_a_filter_runs_from_is_watched() {
    let (dir, home) = with_home("git-venv-filter");
    let run = run_with_home(&dir, &home);
    repository(&home, &run.workspace);
    let ws = &run.workspace;
    let venv = ws.join(".venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(venv.join("lib/python3/site-packages")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", venv.join("bin/python3")).unwrap();
    let python = venv.join("bin/python3").display().to_string();
    git_ok(
        &home,
        ws,
        &[
            "config",
            "filter.nb.clean",
            &format!("\"{python}\" -m nbstripout"),
        ],
    );
    // Control: a run that leaves the environment alone says nothing.
    let out = run.sh("echo x > notes");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run_with_home(&dir, &home)
        .log_at(dir.join("events-pth.jsonl"))
        .sh("echo 'import os' > .venv/lib/python3/site-packages/x.pth && echo PLANTED");
    assert_eq!(stdout(&out), "PLANTED\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning") && stderr(&out).contains(".venv"),
        "{}",
        stderr(&out)
    );
}

/// A path netbox watches because it is missing (`./node_modules/.bin/eslint` before an
/// install) filled by renaming in an older directory whose times are all old: said,
/// since it was missing at the start.
#[test]
fn a_watched_path_filled_by_a_rename_is_reported() {
    let (dir, home) = with_home("git-watched-rename");
    std::fs::write(
        home.join(".gitconfig"),
        "[alias]\n\tlint = !./node_modules/.bin/eslint .\n",
    )
    .unwrap();
    let run = run_with_home(&dir, &home);
    repository(&home, &run.workspace);
    // A run stages the program where nothing watches it.
    let out = run.sh(
        "mkdir -p .cache/x/.bin && echo 'touch /tmp/owned' > .cache/x/.bin/eslint && echo STAGED",
    );
    assert_eq!(stdout(&out), "STAGED\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run_with_home(&dir, &home)
        .log_at(dir.join("events-rename.jsonl"))
        .sh("mv .cache/x node_modules && echo MOVED");
    assert_eq!(stdout(&out), "MOVED\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning") && stderr(&out).contains("node_modules/.bin/eslint"),
        "{}",
        stderr(&out)
    );
}
