//! git: the remote the workspace's own configuration names.

use std::process::Command;

use super::assert_refused_and_logged;
use crate::support::upstream::HttpServer;
use crate::support::{stderr, stdout, Run, TestDir};

/// `git clone` over HTTPS of a remote the workspace's own git configuration names (the
/// dumb HTTP protocol, served as files): `--allow-tool git` finds it. A workspace's
/// remotes are its own text, so they are never taken as internal: the test opens the
/// loopback address the name is pinned to with an address rule of the user's.
#[test]
fn git_clones_the_remote_the_workspace_names() {
    let dir = TestDir::new("tool-git");
    let root = dir.join("served");
    std::fs::create_dir_all(&root).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["forge.test"], root.clone());
    let port = server.port();
    // A bare repository with one commit, laid out for the dumb protocol.
    let git = |cwd: &std::path::Path, args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t.test"])
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    };
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("README"), "from the forge\n").unwrap();
    git(&src, &["add", "README"]);
    git(&src, &["commit", "-q", "-m", "one"]);
    git(
        &dir.path,
        &["clone", "-q", "--bare", "src", "served/app.git"],
    );
    git(&root.join("app.git"), &["update-server-info"]);

    let run = Run::new(&dir);
    git(&run.workspace, &["init", "-q"]);
    let url = format!("https://forge.test:{port}/app.git");
    git(&run.workspace, &["remote", "add", "origin", &url]);
    let ca = dir.join("ca-for-git.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let ca_in_ws = run.workspace.join("test-ca.pem");
    std::fs::copy(&ca, &ca_in_ws).unwrap();
    let pins = dir.write(
        "pins.toml",
        &format!("allow = [\"127.0.0.1:{port}\"]\n[hosts]\n\"forge.test\" = \"127.0.0.1\"\n"),
    );
    let clone = format!(
        "GIT_SSL_CAINFO={} git clone -q {url} cloned && cat cloned/README",
        ca_in_ws.display()
    );
    let with = |extra: &[&str]| {
        let mut args = vec!["--quiet", "--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir).args_from(&args)
    };
    let out = with(&["--allow-tool", "git"]).sh(&clone);
    assert_eq!(stdout(&out), "from the forge\n", "{}", stderr(&out));
    // Control: the address rule alone does not let the name through.
    std::fs::remove_dir_all(run.workspace.join("cloned")).unwrap();
    let out = with(&[]).sh(&clone);
    assert_ne!(stdout(&out), "from the forge\n", "{}", stderr(&out));
    assert_refused_and_logged(&dir, "forge.test", &out);
}
