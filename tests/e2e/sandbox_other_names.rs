//! A place by another name: a bind mount shows a directory at a second path, and what
//! netbox hides, pins or splits by path it does by every name the host's mounts give it
//! (plan/mount_names.rs). A hidden place stays hidden through a bind of its parent, a
//! read-only one stays read-only through a bind inside the workspace, and a writable root
//! that would reach home or a read-only place by another name is refused in one line.
//! Each with its control. Bind mounts need root: each test makes its own in a mount
//! namespace of its own (`unshare -m`), so nothing is left on the host.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::{netbox_bin, stderr, stdout, TestDir};

/// `setup` (mounts) run in a mount namespace of its own, then netbox from `cwd` with
/// `$HOME` at `home` and `args`, CMD being `script`. None when not root.
fn in_own_mounts(
    dir: &TestDir,
    setup: &str,
    cwd: &str,
    home: &str,
    args: &str,
    script: &str,
) -> Option<Output> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let log = if args.contains("--log") {
        String::new()
    } else {
        format!("--log {}", dir.join("events.jsonl").display())
    };
    let whole = format!(
        "{setup} && cd {cwd} && HOME={home} exec {netbox} --quiet {log} {args} \
         -- sh -c '{script}'",
        netbox = netbox_bin().display(),
    );
    Some(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &whole])
            .stdin(Stdio::null())
            .output()
            .expect("unshare is needed"),
    )
}

/// CMD tries to plant a pre-commit hook in the workspace's `hooks` (made if missing); the
/// control touches a file beside it.
const PLANT_A_HOOK: &str = "mkdir -p hooks 2>/dev/null; (echo evil > hooks/pre-commit) \
                            2>/dev/null && echo PLANTED; touch ok && echo CONTROL";

/// [`PLANT_A_HOOK`] planted nothing in the workspace `ws`, and its control wrote there.
fn assert_no_hook_planted(out: &Output, ws: &Path) {
    assert_eq!(stdout(out), "CONTROL\n", "{}", stderr(out));
    assert!(!ws.join("hooks/pre-commit").exists());
    assert!(ws.join("ok").exists());
}

#[test]
fn a_hidden_place_stays_hidden_by_another_name() {
    TestDir::remove_leftovers_outside_tmp("names-hidden");
    let dir = TestDir::outside_tmp("names-hidden");
    let home = dir.join("home");
    std::fs::create_dir_all(home.join("secret")).unwrap();
    std::fs::write(home.join("secret/key"), "KEY\n").unwrap();
    std::fs::write(home.join("public.txt"), "PUBLIC\n").unwrap();
    std::fs::create_dir_all(dir.join("alias")).unwrap();
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let (home_s, alias, ws) = (
        home.display().to_string(),
        dir.join("alias").display().to_string(),
        dir.join("ws").display().to_string(),
    );
    let script = format!(
        "cat {home_s}/secret/key {alias}/secret/key 2>/dev/null; \
         cat {alias}/public.txt; ls {alias}/secret"
    );
    let Some(out) = in_own_mounts(
        &dir,
        &format!("mount --bind {home_s} {alias}"),
        &ws,
        &home_s,
        &format!("--hide {home_s}/secret"),
        &script,
    ) else {
        return;
    };
    // Control: the rest of home reads through the other name.
    assert_eq!(stdout(&out), "PUBLIC\n", "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_read_only_place_stays_read_only_by_another_name() {
    TestDir::remove_leftovers_outside_tmp("names-pinned");
    let dir = TestDir::outside_tmp("names-pinned");
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("a/keep")).unwrap();
    std::fs::create_dir_all(ws.join("b")).unwrap();
    let ws_s = ws.display().to_string();
    let Some(out) = in_own_mounts(
        &dir,
        &format!("mount --bind {ws_s}/a {ws_s}/b"),
        &ws_s,
        &dir.path.display().to_string(),
        &format!("--ro {ws_s}/a/keep"),
        "touch b/keep/x 2>/dev/null && echo WROTE-ALIAS; \
         touch a/keep/y 2>/dev/null && echo WROTE-OWN; touch b/z && echo CONTROL",
    ) else {
        return;
    };
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(!ws.join("a/keep/x").exists());
    // The control's write went through the other name into the place itself.
    assert!(ws.join("a/z").exists());
}

#[test]
fn a_writable_root_reaching_home_or_elsewhere_by_a_mount_is_refused() {
    TestDir::remove_leftovers_outside_tmp("names-roots");
    let dir = TestDir::outside_tmp("names-roots");
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".config/app")).unwrap();
    for d in ["holds/alias", "disk/tmpfs", "ws"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let at = |p: &str| dir.join(p).display().to_string();
    let home_s = home.display().to_string();
    let setup = format!(
        "mount --bind {home_s} {alias} && mount -t tmpfs none {tmpfs}",
        alias = at("holds/alias"),
        tmpfs = at("disk/tmpfs"),
    );
    let run = |write: &str, script: &str| {
        in_own_mounts(
            &dir,
            &setup,
            &at("ws"),
            &home_s,
            &format!("--write {write}"),
            script,
        )
    };
    // A root holding home mounted again: refused, naming the mount and what it shows.
    let Some(out) = run(
        &at("holds"),
        &format!("touch {}/.planted", at("holds/alias")),
    ) else {
        return;
    };
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "holds {}, a mount that shows {home_s} there too",
            at("holds/alias")
        )),
        "{err}"
    );
    assert!(!home.join(".planted").exists());
    // A root inside that other name: refused, naming the path under home to use.
    let out = run(&at("holds/alias/.config"), "touch ~/.config/x").unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("reaches {home_s}/.config by another name")),
        "{err}"
    );
    assert!(err.lines().count() == 2, "one line and its hint: {err}");
    // By its own name the rules for home apply (a shared configuration directory).
    let out = run(&format!("{home_s}/.config"), "true").unwrap();
    assert!(
        stderr(&out).contains("settings or data of every program"),
        "{}",
        stderr(&out)
    );
    // With home itself a root (split), its other name is still no way in.
    let out = in_own_mounts(
        &dir,
        &setup,
        &home_s,
        &home_s,
        &format!("--allow-home-write --write {}/.config", at("holds/alias")),
        "true",
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("by another name"), "{}", stderr(&out));
    // Controls: a root holding a filesystem mounted only there, and one program's
    // directory through the other name's own path, are written.
    let out = run(
        &at("disk"),
        &format!("touch {}/x && echo DISK", at("disk/tmpfs")),
    )
    .unwrap();
    assert_eq!(stdout(&out), "DISK\n", "{}", stderr(&out));
    let out = run(
        &format!("{home_s}/.config/app"),
        "touch ~/.config/app/x && echo APP",
    )
    .unwrap();
    assert_eq!(stdout(&out), "APP\n", "{}", stderr(&out));
}

/// A workspace that is a repository's subdirectory by another name: the repository it
/// lies in is found through the name it has there, and the hooks directory its config
/// names (made if missing) stays read-only through the workspace's own name.
#[test]
fn a_repository_a_root_lies_in_by_another_name_keeps_its_code_pinned() {
    TestDir::remove_leftovers_outside_tmp("names-repo");
    let dir = TestDir::outside_tmp("names-repo");
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("sub")).unwrap();
    std::fs::create_dir_all(dir.join("alias")).unwrap();
    std::fs::create_dir_all(dir.join("home")).unwrap();
    crate::support::git(&repo, &["init", "-q"]);
    crate::support::git(&repo, &["config", "core.hooksPath", "sub/hooks"]);
    let (repo_s, alias) = (
        repo.display().to_string(),
        dir.join("alias").display().to_string(),
    );
    let Some(out) = in_own_mounts(
        &dir,
        &format!("mount --bind {repo_s}/sub {alias}"),
        &alias,
        &dir.join("home").display().to_string(),
        "",
        PLANT_A_HOOK,
    ) else {
        return;
    };
    assert_no_hook_planted(&out, &repo.join("sub"));
}

/// The mount the kernel shows at a point decides, not the table's order: a mount that
/// propagation lays beneath a bind of home (listed after it) does not hide that bind.
#[test]
fn a_bind_of_home_with_a_mount_laid_beneath_it_is_still_seen() {
    TestDir::remove_leftovers_outside_tmp("names-tucked");
    let dir = TestDir::outside_tmp("names-tucked");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".bashrc"), "# kept\n").unwrap();
    for d in ["p1/m", "w", "ws"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let at = |p: &str| dir.join(p).display().to_string();
    let setup = format!(
        "mount --bind {p1} {p1} && mount --make-shared {p1} && mount --bind {p1} {w} && \
         mount --make-slave {w} && mount --bind {home} {w}/m && mount -t tmpfs none {p1}/m",
        p1 = at("p1"),
        w = at("w"),
        home = home.display(),
    );
    let Some(out) = in_own_mounts(
        &dir,
        &setup,
        &at("ws"),
        &home.display().to_string(),
        &format!("--write {}", at("w")),
        &format!("echo evil >> {}/m/.bashrc", at("w")),
    ) else {
        return;
    };
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("a mount that shows"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# kept\n"
    );
}

/// Other names the sandbox never shows (under /run, which it has its own of) are left
/// alone: a host with `/` bound under /run (toolbox, distrobox) runs. And what lies under
/// the private /tmp by its own name is still hidden by another name; a policy file the
/// workspace holds by another name is pinned there, and a log there refused.
#[test]
fn other_names_under_run_private_tmp_and_of_policy_files_are_handled() {
    TestDir::remove_leftovers_outside_tmp("names-misc");
    let dir = TestDir::outside_tmp("names-misc");
    let home = dir.join("home");
    for d in ["home", "ws", "alias-tmp", "alias-ws"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("ws/allow.toml"), "allow = []\n").unwrap();
    let at = |p: &str| dir.join(p).display().to_string();
    let secret = format!("/tmp/netbox-names-{}", std::process::id());
    let run_dir = format!("/run/netbox-names-{}", std::process::id());
    let setup = format!(
        "mkdir -p {run_dir} {secret} && mount --bind / {run_dir} && \
         echo SECRET > {secret}/key && mount --bind {secret} {alias_tmp} && \
         mount --bind {ws} {alias_ws}",
        alias_tmp = at("alias-tmp"),
        ws = at("ws"),
        alias_ws = at("alias-ws"),
    );
    let run = |args: &str, script: &str| {
        in_own_mounts(
            &dir,
            &setup,
            &at("ws"),
            &home.display().to_string(),
            args,
            script,
        )
    };
    let Some(out) = run(
        &format!(
            "--hide {secret}/key --allowlist {}/allow.toml",
            at("alias-ws")
        ),
        &format!(
            "cat {}/key 2>/dev/null; (echo evil > allow.toml) 2>/dev/null && echo REWROTE; \
             touch ok && echo CONTROL",
            at("alias-tmp")
        ),
    ) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&secret);
    let _ = std::fs::remove_dir(&run_dir);
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("ws/allow.toml")).unwrap(),
        "allow = []\n"
    );
    let out = run(&format!("--log {}/run.jsonl", at("alias-ws")), "true").unwrap();
    let _ = std::fs::remove_dir_all(&secret);
    let _ = std::fs::remove_dir(&run_dir);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is inside the writable root"),
        "{}",
        stderr(&out)
    );
}

/// A read-only view of the workspace elsewhere (ostree's /sysroot shows all of /var) and
/// a part of it bound elsewhere: nothing is made at the other names, the run goes on, and
/// the part takes `git init` as any subdirectory does.
#[test]
fn read_only_views_and_bound_parts_of_the_workspace_change_nothing() {
    TestDir::remove_leftovers_outside_tmp("names-views");
    let dir = TestDir::outside_tmp("names-views");
    for d in ["home", "ws/sub", "view", "part"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let at = |p: &str| dir.join(p).display().to_string();
    let setup = format!(
        "mount --bind -o ro {ws} {view} && mount --bind {ws}/sub {part}",
        ws = at("ws"),
        view = at("view"),
        part = at("part"),
    );
    let Some(out) = in_own_mounts(
        &dir,
        &setup,
        &at("ws"),
        &at("home"),
        "",
        "cd sub && git init -q && echo > .envrc && echo DONE",
    ) else {
        return;
    };
    assert_eq!(stdout(&out), "DONE\n", "{}", stderr(&out));
    assert!(dir.join("ws/sub/.git").is_dir());
}

/// The workspace bound twice inside a repository, one bind inside the other: the hooks
/// directory the repository names through the inner one is pinned at the workspace's
/// own name for that bind, not mapped through the outer one.
#[test]
fn a_pin_found_through_nested_binds_is_laid_where_it_shows() {
    TestDir::remove_leftovers_outside_tmp("names-nested");
    let dir = TestDir::outside_tmp("names-nested");
    let repo = dir.join("srv");
    for d in ["srv/a", "ws/b", "home"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    crate::support::git(&repo, &["init", "-q"]);
    crate::support::git(&repo, &["config", "core.hooksPath", "a/b/hooks"]);
    let at = |p: &str| dir.join(p).display().to_string();
    let setup = format!(
        "mount --bind {ws} {srv}/a && mount --bind {ws} {srv}/a/b",
        ws = at("ws"),
        srv = at("srv"),
    );
    let Some(out) = in_own_mounts(&dir, &setup, &at("ws"), &at("home"), "", PLANT_A_HOOK) else {
        return;
    };
    assert_no_hook_planted(&out, &dir.join("ws"));
}

/// While such a run goes on, the repository names a new hooks directory under the one
/// already pinned at the workspace's own name: covered, so the run goes on (a new one
/// outside it stops the run, as by the workspace's own name).
#[test]
fn the_recheck_during_a_run_judges_by_the_roots_own_name() {
    TestDir::remove_leftovers_outside_tmp("names-recheck");
    let dir = TestDir::outside_tmp("names-recheck");
    let repo = dir.join("repo");
    for d in ["repo/sub", "alias", "home"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    crate::support::git(&repo, &["init", "-q"]);
    let at = |p: &str| dir.join(p).display().to_string();
    for (then, code) in [("sub/hooks/inner", Some(0)), ("sub/other", Some(125))] {
        crate::support::git(&repo, &["config", "core.hooksPath", "sub/hooks"]);
        let setup = format!(
            "mount --bind {repo}/sub {alias} && \
             {{ (sleep 1; git -C {repo} config core.hooksPath {then}) & }}",
            repo = at("repo"),
            alias = at("alias"),
        );
        let Some(out) = in_own_mounts(&dir, &setup, &at("alias"), &at("home"), "", "sleep 3")
        else {
            return;
        };
        assert_eq!(out.status.code(), code, "{then}: {}", stderr(&out));
    }
}

/// A hooks directory a repository names through another name of the workspace under
/// /run (which the sandbox has its own of, but the host's git goes by the host's): pinned
/// at the workspace's own name all the same.
#[test]
fn a_pin_named_through_a_name_under_run_is_laid_at_the_roots_own_name() {
    TestDir::remove_leftovers_outside_tmp("names-run");
    let dir = TestDir::outside_tmp("names-run");
    let repo = dir.join("srv");
    for d in ["srv/x", "ws", "home"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let run_dir = format!("/run/netbox-names-run-{}", std::process::id());
    crate::support::git(&repo, &["init", "-q"]);
    crate::support::git(
        &repo,
        &["config", "core.hooksPath", &format!("{run_dir}/hooks")],
    );
    let at = |p: &str| dir.join(p).display().to_string();
    let setup = format!(
        "mkdir -p {run_dir} && mount --bind {ws} {srv}/x && mount --bind {ws} {run_dir}",
        ws = at("ws"),
        srv = at("srv"),
    );
    let out = in_own_mounts(&dir, &setup, &at("ws"), &at("home"), "", PLANT_A_HOOK);
    let _ = std::fs::remove_dir(&run_dir);
    let Some(out) = out else {
        return;
    };
    assert_no_hook_planted(&out, &dir.join("ws"));
}

/// A workspace that shows, by another name, a directory lying in a hidden or read-only
/// path is refused in one line naming both, as it is by its own name; a control runs.
#[test]
fn a_root_showing_a_hidden_or_read_only_place_is_refused_in_one_line() {
    TestDir::remove_leftovers_outside_tmp("names-kept");
    let dir = TestDir::outside_tmp("names-kept");
    for d in ["secret/ws", "w", "home"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let at = |p: &str| dir.join(p).display().to_string();
    let setup = format!("mount --bind {} {}", at("secret/ws"), at("w"));
    let run =
        |args: &str, script: &str| in_own_mounts(&dir, &setup, &at("w"), &at("home"), args, script);
    for (flag, says) in [
        ("--hide", "which the sandbox hides"),
        ("--ro", "which --ro makes read-only"),
    ] {
        let Some(out) = run(&format!("{flag} {}", at("secret")), "true") else {
            return;
        };
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("it shows at {} too", at("secret/ws"))) && err.contains(says),
            "{err}"
        );
    }
    let out = run("", "touch x && echo CONTROL").unwrap();
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
}
