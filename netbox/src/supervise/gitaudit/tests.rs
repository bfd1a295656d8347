use super::*;

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("netbox-gitaudit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A git directory's shape (what git's is_git_directory() looks for) with a config.
fn git_dir_at(dir: &Path) {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(dir.join("config"), "[core]\n").unwrap();
}

/// Waits past a tick of the coarse clock, so that what follows is stamped later than
/// what came before.
fn next_tick() -> Stamp {
    std::thread::sleep(Duration::from_millis(30));
    let stamp = Stamp::now();
    std::thread::sleep(Duration::from_millis(30));
    stamp
}

fn found(report: &Report) -> Vec<(String, Kind, How)> {
    report
        .findings
        .iter()
        .map(|f| {
            (
                f.path.file_name().unwrap().to_string_lossy().into_owned(),
                f.kind,
                f.how,
            )
        })
        .collect()
}

#[test]
fn new_and_changed_git_metadata_is_found_and_old_or_pinned_is_not() {
    let root = tempdir("walk");
    // Before the run: a nested repository, a second one CMD will change, a pinned one,
    // a bare repository, and a gitdir file.
    git_dir_at(&root.join("old/.git"));
    git_dir_at(&root.join("edited/.git"));
    git_dir_at(&root.join("pinned/.git"));
    git_dir_at(&root.join("archive.git"));
    std::fs::create_dir_all(root.join("wt")).unwrap();
    std::fs::write(root.join("wt/.git"), "gitdir: ../archive.git\n").unwrap();
    let since = next_tick();
    // During it: new ones of every kind, a hook added to an old one, a pinned one
    // touched, and ordinary git activity in the old one (a lock file come and gone).
    git_dir_at(&root.join("vendor/lib/.git"));
    git_dir_at(&root.join("deep/er/bare"));
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/.git"), "gitdir: ../archive.git\n").unwrap();
    std::fs::create_dir_all(root.join("link")).unwrap();
    std::os::unix::fs::symlink("../old/.git", root.join("link/.git")).unwrap();
    std::fs::write(root.join("edited/.git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    std::fs::write(root.join("pinned/.git/config"), "[core]\n\tfsmonitor = x\n").unwrap();
    std::fs::write(root.join("old/.git/index.lock"), "").unwrap();
    std::fs::remove_file(root.join("old/.git/index.lock")).unwrap();
    std::fs::create_dir_all(root.join("plain/dir")).unwrap();
    let scope = Scope {
        roots: vec![root.clone()],
        skip: vec![root.join("pinned/.git")],
        watch: Vec::new(),
        git_data: Default::default(),
        since,
    };
    let report = audit(&scope, &|| false);
    assert!(report.complete(), "{report:?}");
    assert_eq!(
        found(&report),
        vec![
            ("bare".into(), Kind::BareRepository, How::Created),
            (".git".into(), Kind::GitDir, How::Changed),
            (".git".into(), Kind::GitSymlink, How::Created),
            (".git".into(), Kind::GitdirFile, How::Created),
            (".git".into(), Kind::GitDir, How::Created),
        ]
    );
    let paths: Vec<&Path> = report.findings.iter().map(|f| f.path.as_path()).collect();
    assert_eq!(paths[1], root.join("edited/.git"));
    assert_eq!(paths[4], root.join("vendor/lib/.git"));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_cancelled_audit_says_so() {
    let root = tempdir("cancel");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    let scope = Scope {
        roots: vec![root.clone()],
        skip: Vec::new(),
        watch: Vec::new(),
        git_data: Default::default(),
        since: Stamp::now(),
    };
    let report = audit(&scope, &|| true);
    assert_eq!(report.stopped, Some(Stopped::Cancelled));
    assert!(!report.complete());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn every_hook_and_every_redirect_of_an_unpinned_repository_is_found() {
    use crate::plan::protect::gitcode::{GIT_DIR_PARTS, HOOKS};
    let root = tempdir("hooks");
    let mut cases: Vec<(String, PathBuf)> = Vec::new();
    for hook in HOOKS {
        let repo = root.join(format!("hook-{hook}/.git"));
        git_dir_at(&repo);
        cases.push((format!("hooks/{hook}"), repo));
    }
    for part in GIT_DIR_PARTS {
        let repo = root.join(format!("part-{}/.git", part.replace('/', "-")));
        git_dir_at(&repo);
        std::fs::create_dir_all(repo.join("info")).unwrap();
        std::fs::create_dir_all(repo.join("objects/info")).unwrap();
        cases.push(((*part).to_owned(), repo));
    }
    // Control: a repository with nothing written to it.
    git_dir_at(&root.join("untouched/.git"));
    let since = next_tick();
    for (part, repo) in &cases {
        let path = repo.join(part);
        if path.is_dir() {
            std::fs::write(path.join("x"), "").unwrap();
        } else {
            std::fs::write(&path, "[core]\n").unwrap();
        }
    }
    let scope = Scope {
        roots: vec![root.clone()],
        skip: Vec::new(),
        watch: Vec::new(),
        git_data: Default::default(),
        since,
    };
    let report = audit(&scope, &|| false);
    for (part, repo) in &cases {
        assert!(
            report
                .findings
                .iter()
                .any(|f| &f.path == repo && f.how == How::Changed),
            "{part}: {report:?}"
        );
    }
    assert_eq!(report.findings.len(), cases.len(), "{report:?}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_linked_worktree_and_what_a_config_names_are_found() {
    let root = tempdir("linked");
    // A nested repository with a linked worktree, and husky's hooks path.
    git_dir_at(&root.join("app/.git"));
    std::fs::write(
        root.join("app/.git/config"),
        "[core]\n\thooksPath = .husky/_\n\tfsmonitor = ./tools/fsmon\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("app/.husky/_")).unwrap();
    std::fs::write(root.join("app/.husky/_/pre-commit"), "").unwrap();
    std::fs::create_dir_all(root.join("app/tools")).unwrap();
    let linked = root.join("app/.git/worktrees/feature");
    std::fs::create_dir_all(&linked).unwrap();
    std::fs::write(linked.join("HEAD"), "ref: refs/heads/feature\n").unwrap();
    std::fs::write(linked.join("commondir"), "../..\n").unwrap();
    std::fs::write(
        linked.join("gitdir"),
        root.join("feature/.git").display().to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("feature")).unwrap();
    std::fs::write(
        root.join("feature/.git"),
        format!("gitdir: {}\n", linked.display()),
    )
    .unwrap();
    let since = next_tick();
    // The redirect, a rewritten hook, and a program made where the config names one.
    std::fs::write(linked.join("commondir"), "../../../evil\n").unwrap();
    std::fs::write(root.join("app/.husky/_/pre-commit"), "#!/bin/sh\n").unwrap();
    std::fs::write(root.join("app/tools/fsmon"), "#!/bin/sh\n").unwrap();
    // Control: a file no setting names.
    std::fs::write(root.join("app/tools/other"), "").unwrap();
    let scope = Scope {
        roots: vec![root.clone()],
        skip: Vec::new(),
        watch: Vec::new(),
        git_data: Default::default(),
        since,
    };
    let report = audit(&scope, &|| false);
    let named = |path: PathBuf, setting: &str| {
        report.findings.iter().any(|f| {
            f.path == path
                && f.kind == Kind::CodePath
                && f.named_by.as_ref().is_some_and(|(_, s)| s == setting)
        })
    };
    assert!(
        report.findings.iter().any(|f| f.path == linked),
        "{report:?}"
    );
    assert!(
        named(root.join("app/.husky/_/pre-commit"), "core.hookspath"),
        "{report:?}"
    );
    assert!(
        named(root.join("app/tools/fsmon"), "core.fsmonitor"),
        "{report:?}"
    );
    assert!(
        !report.findings.iter().any(|f| f.path.ends_with("other")),
        "{report:?}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn entries_git_never_makes_are_removed_when_new_and_reported_when_old() {
    use std::os::unix::fs::symlink;
    let root = tempdir("foreign");
    let data = root.join("ws/.git/logs");
    std::fs::create_dir_all(data.join("refs/heads")).unwrap();
    let bare = root.join("b.git");
    git_dir_at(&bare);
    symlink("/dev/null", data.join("refs/old")).unwrap();
    symlink("../elsewhere", bare.join("hooks.old")).unwrap();
    let since = next_tick();
    symlink("/nowhere/.bashrc", data.join("HEAD")).unwrap();
    nix::unistd::mkfifo(&data.join("refs/heads/fifo"), Mode::S_IRWXU).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(bare.join("objects/sock")).unwrap();
    symlink("/nowhere/.bash_profile", bare.join("packed-refs")).unwrap();
    // A code part that is a link is judged by what it leads to, not here.
    std::fs::remove_dir(bare.join("hooks")).unwrap();
    symlink("../hooks-elsewhere", bare.join("hooks")).unwrap();
    // A regular file and a directory are git's own.
    std::fs::write(data.join("refs/heads/main"), "").unwrap();
    let scope = Scope {
        roots: Vec::new(),
        skip: Vec::new(),
        watch: Vec::new(),
        git_data: crate::plan::protect::GitData {
            dirs: vec![data.clone(), root.join("ws/.git/missing")],
            git_dirs: vec![bare.clone()],
        },
        since,
    };
    let report = audit(&scope, &|| false);
    let mut got: Vec<(String, foreign::Entry, How, bool)> = report
        .foreign
        .found
        .iter()
        .map(|f| {
            (
                f.path.strip_prefix(&root).unwrap().display().to_string(),
                f.entry,
                f.how,
                f.removed,
            )
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    use foreign::Entry::*;
    assert_eq!(
        got,
        [
            ("b.git/hooks.old".into(), Symlink, How::BeforeRun, false),
            ("b.git/objects/sock".into(), Socket, How::Created, true),
            ("b.git/packed-refs".into(), Symlink, How::Created, true),
            ("ws/.git/logs/HEAD".into(), Symlink, How::Created, true),
            (
                "ws/.git/logs/refs/heads/fifo".into(),
                Fifo,
                How::Created,
                true
            ),
            (
                "ws/.git/logs/refs/old".into(),
                Symlink,
                How::BeforeRun,
                false
            ),
        ]
    );
    assert!(report.complete(), "{report:?}");
    assert!(std::fs::symlink_metadata(data.join("HEAD")).is_err());
    assert!(std::fs::symlink_metadata(bare.join("packed-refs")).is_err());
    assert!(std::fs::symlink_metadata(data.join("refs/old")).is_ok());
    assert!(std::fs::symlink_metadata(bare.join("hooks")).is_ok());
    assert!(data.join("refs/heads/main").exists());
    std::fs::remove_dir_all(&root).unwrap();
}
