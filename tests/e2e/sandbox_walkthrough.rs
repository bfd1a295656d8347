//! The reference walkthrough's three boundaries, with their verbatim errors, and the
//! positive controls that show the sandbox still does its job (workspace writes, an allowed
//! HTTPS registry).

use crate::support::upstream::HttpServer;
use crate::support::{git, stderr, stdout, Run, TestDir};

#[test]
fn write_to_home_is_read_only_and_workspace_is_writable() {
    let dir = TestDir::new("home");
    let home_dir = TestDir::outside_tmp("home");
    let home = home_dir.path.clone();
    let run = Run::new(&dir).env("HOME", home.display().to_string());
    let out = run.sh("echo pwned > $HOME/sandbox_escape_probe.txt");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sandbox_escape_probe.txt: Read-only file system"),
        "{}",
        stderr(&out)
    );
    assert!(!home.join("sandbox_escape_probe.txt").exists());

    // Positive control: the workspace and the temp root are writable.
    let out = run.sh("echo kept > result.txt && echo tmp > $TMPDIR/t && cat $TMPDIR/t");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "tmp\n");
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("result.txt")).unwrap(),
        "kept\n"
    );
}

#[test]
fn git_config_is_read_only_inside_the_workspace() {
    let dir = TestDir::new("gitconfig");
    let run = Run::new(&dir);
    git(&run.workspace, &["init", "-q"]);
    let before = std::fs::read(run.workspace.join(".git/config")).unwrap();
    let out = run.sh("echo hacked > .git/config");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Read-only file system"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read(run.workspace.join(".git/config")).unwrap(),
        before
    );
    // Positive control: the rest of the workspace is writable, in the same run.
    let out = run.sh("echo hacked > .git/config; echo fine > notes.txt");
    assert!(out.status.success());
    assert!(run.workspace.join("notes.txt").exists());
}

#[test]
fn git_init_cannot_create_a_git_dir_or_plant_hooks() {
    let dir = TestDir::new("gitinit");
    let run = Run::new(&dir);
    let out = run.sh(
        "git init -q; mkdir -p .git/hooks; echo 'echo owned' > .git/hooks/pre-commit; \
         echo status=$?",
    );
    assert!(stdout(&out).contains("status=1"), "{}", stdout(&out));
    // Nothing persisted: no .git at all once netbox is done (its placeholder is removed).
    assert!(!run.workspace.join(".git").exists());
    // Positive control: git itself works here when a repository exists.
    git(&run.workspace, &["init", "-q"]);
    let out = run.sh("git status --short >/dev/null && echo ok");
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
}

#[test]
fn blocked_host_gets_a_502_and_a_deny_line() {
    let dir = TestDir::new("blocked");
    let run = Run::new(&dir);
    let out = run.sh("curl -sS --max-time 8 https://blocked.test");
    assert_eq!(out.status.code(), Some(56), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("curl: (56) CONNECT tunnel failed, response 502"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("netbox: blocked CONNECT blocked.test:443 (not on allowlist)"));
    let events = run.events();
    let deny: Vec<_> = events
        .iter()
        .filter(|e| e["host"] == "blocked.test")
        .collect();
    assert_eq!(deny.len(), 1, "{events:?}");
    assert_eq!(deny[0]["decision"], "deny");
    assert_eq!(deny[0]["reason"], "not_allowed");
}

#[test]
fn allowed_registry_over_https_works_inside() {
    let dir = TestDir::new("registry");
    let run = Run::new(&dir);
    // The CA lives in the workspace: the sandbox sees only that part of the test's /tmp.
    let tls = HttpServer::start_tls(&run.workspace, &["registry.test"]);
    let p = tls.port();
    let allow = dir.write(
        "allow.toml",
        &format!(
            "allow = [\"registry.test:{p}\", \"127.0.0.1:{p}\"]\n[hosts]\n\"registry.test\" = \"127.0.0.1\"\n"
        ),
    );
    let run = run.arg("--allowlist").arg(allow.display().to_string());
    let out = run.sh(&format!(
        "curl -sS --max-time 8 --cacert ca.pem https://registry.test:{p}/hello"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello from upstream\n");
    let events = run.events();
    let allowed: Vec<_> = events
        .iter()
        .filter(|e| e["host"] == "registry.test")
        .collect();
    assert_eq!(allowed.len(), 1, "{events:?}");
    assert_eq!(allowed[0]["decision"], "allow");
}

/// The README's first command, twice at once: each run of the walkthrough has a directory
/// of its own (neither aborts on the other's files), uses the netbox it is given rather
/// than building one, and shows every boundary refused.
#[test]
fn two_walkthroughs_at_once_do_not_meet() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/contained-execution/run.sh");
    let start = || {
        std::process::Command::new("bash")
            .arg(&script)
            .env("NETBOX", crate::support::netbox_bin())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    let mut dirs = Vec::new();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let said = stdout(&out);
        assert!(out.status.success(), "{said}\n{}", stderr(&out));
        assert!(said.contains("== using $NETBOX"), "{said}");
        assert!(!said.contains("building netbox"), "{said}");
        assert!(said.contains("no file created in"), "{said}");
        assert!(said.contains(".git/config unchanged"), "{said}");
        assert!(said.contains("\"host\":\"blocked.test\""), "{said}");
        let dir = said
            .rsplit("the project is in ")
            .next()
            .and_then(|rest| rest.strip_suffix(".\n"))
            .unwrap_or_else(|| panic!("{said}"))
            .to_owned();
        dirs.push(dir);
    }
    assert_ne!(dirs[0], dirs[1]);
    for dir in &dirs {
        let parent = std::path::Path::new(dir).parent().unwrap();
        let _ = std::fs::remove_dir_all(parent);
    }
}
