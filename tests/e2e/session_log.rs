//! The session log's frame (`session_start` first, `session_end` last, with counts) and
//! `netbox log`, on real logs: complete, still open, and cut short.

use std::process::Command;

use serde_json::Value;

use crate::support::upstream::HttpServer;
use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

fn netbox_log(args: &[&str]) -> std::process::Output {
    Command::new(netbox_bin())
        .arg("log")
        .args(args)
        .output()
        .expect("run netbox log")
}

#[test]
fn a_session_log_starts_and_ends_with_its_frame() {
    let dir = TestDir::new("session-frame");
    let server = HttpServer::start();
    let p = server.port();
    let allow = dir.write(
        "allow.toml",
        &format!("allow = [\"files.test:{p}\", \"127.0.0.1:{p}\"]\n[hosts]\n\"files.test\" = \"127.0.0.1\"\n"),
    );
    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--allowlist")
        .arg(allow.display().to_string());
    let out = run.sh(&format!(
        "curl -s http://files.test:{p}/hello >/dev/null; curl -s http://files.test:{p}/hello >/dev/null; \
         curl -s --max-time 8 https://blocked.test; echo x > /etc/nb-frame; exit 3"
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let events = run.events();
    let start = &events[0];
    assert_eq!(start["type"], "session_start", "{events:#?}");
    assert_eq!(start["mode"], "sandbox");
    assert_eq!(start["command"][0], "bash");
    assert_eq!(start["workspace"], run.workspace.display().to_string());
    assert_eq!(start["allow_rules"], 2);
    assert_eq!(start["policy_sha256"].as_str().unwrap().len(), 64);
    assert!(start["kernel"].as_str().unwrap().contains('.'));
    assert!(start["protected"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p.as_str().unwrap().ends_with("/.git")));
    let end = events.last().unwrap();
    assert_eq!(end["type"], "session_end", "{events:#?}");
    assert_eq!(end["outcome"], "exited");
    assert_eq!(end["status"], 3);
    // The probe's canary is not CMD's attempt.
    assert_eq!(end["net_allowed"], 2, "{end}");
    assert_eq!(end["net_denied"], 1, "{end}");
    assert_eq!(end["writes_denied"], 1, "{end}");
    assert!(events.iter().all(|e| e["session"] == start["session"]));

    // The same policy hashes the same; a different one does not.
    let again = Run::new(&dir)
        .arg("--quiet")
        .arg("--allowlist")
        .arg(allow.display().to_string())
        .log_at(dir.join("again.jsonl"));
    again.sh("true");
    assert_eq!(again.events()[0]["policy_sha256"], start["policy_sha256"]);
    let other = Run::new(&dir)
        .arg("--quiet")
        .arg("--allow")
        .arg("other.test")
        .log_at(dir.join("other.jsonl"));
    other.sh("true");
    assert_ne!(other.events()[0]["policy_sha256"], start["policy_sha256"]);

    // netbox log, for people and for machines.
    let log = run.log.display().to_string();
    let out = netbox_log(&[&log]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "probe  every control held",
        &format!("files.test:{p}"),
        "blocked.test:443",
        "(not on allowlist)",
        "/etc/nb-frame",
        "read-only root",
        "ended    exited with status 3",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    assert!(!text.contains("canary"), "{text}");
    // Every record a real run writes is one netbox log reads by its type.
    assert!(!text.contains("does not know"), "{text}");
    assert!(!text.contains("were not JSON records"), "{text}");
    let out = netbox_log(&["--json", &log]);
    let report: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let session = &report["sessions"][0];
    let files = session["network"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["host"] == "files.test")
        .unwrap();
    assert_eq!(files["allowed"], 2);
    assert!(files["bytes_down"].as_u64().unwrap() > 0);
    assert_eq!(session["refused_writes"][0]["path"], "/etc/nb-frame");
    assert_eq!(session["end"]["status"], 3);
}

#[test]
fn failed_probes_and_timeouts_are_recorded_as_such() {
    let dir = TestDir::new("session-outcomes");
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("NETBOX_TEST_BREAK", "read-only-root");
    assert_eq!(run.sh("true").status.code(), Some(125));
    let end = run.events().last().unwrap().clone();
    assert_eq!(end["outcome"], "probe_failed", "{end}");
    assert_eq!(end["status"], 125);
    assert!(
        end["error"].as_str().unwrap().contains("read-only root"),
        "{end}"
    );

    let run = Run::new(&dir)
        .arg("--quiet")
        .arg("--timeout")
        .arg("300ms")
        .log_at(dir.join("timeout.jsonl"));
    assert_eq!(run.sh("sleep 10").status.code(), Some(124));
    let end = run.events().last().unwrap().clone();
    assert_eq!(end["outcome"], "timed_out", "{end}");
}

#[test]
fn netbox_log_reads_logs_still_open_or_cut_short_and_finds_the_last() {
    let dir = TestDir::new("session-cut");
    let state = dir.join("state");
    // No --log: the default place, under XDG_STATE_HOME.
    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let out = Command::new(netbox_bin())
        .args(["--quiet", "--", "sh", "-c", "echo x > /etc/nb-last; true"])
        .env("XDG_STATE_HOME", &state)
        .current_dir(&workspace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let sessions = state.join("netbox/sessions");
    let out = Command::new(netbox_bin())
        .args(["log", "--last"])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("/etc/nb-last"), "{}", stdout(&out));

    // Cut in the middle of a line, and cut before session_end: read, said, no crash.
    // The session's log (beside it lies the directory of pending records).
    let log = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let bytes = std::fs::read(&log).unwrap();
    let last_line_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let cut = dir.join("cut.jsonl");
    std::fs::write(&cut, &bytes[..last_line_start + 10]).unwrap();
    let out = netbox_log(&[cut.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("not recorded: still running, or cut short"),
        "{text}"
    );
    assert!(text.contains("the last line is incomplete"), "{text}");
    assert!(text.contains("/etc/nb-last"), "{text}");
    let out = netbox_log(&["--json", cut.to_str().unwrap()]);
    let report: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(report["incomplete_last_line"], true);
    assert!(report["sessions"][0]["end"].is_null());

    // A run appending to a log cut short starts on a line of its own: its records are
    // whole and its session reads.
    let out = Command::new(netbox_bin())
        .args(["--quiet", "--log"])
        .arg(&cut)
        .args(["--", "true"])
        .current_dir(&workspace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = netbox_log(&["--json", cut.to_str().unwrap()]);
    let report: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(
        report["sessions"].as_array().unwrap().len(),
        2,
        "{report:#}"
    );
    assert_eq!(report["sessions"][1]["start"]["type"], "session_start");
    assert_eq!(report["sessions"][1]["end"]["outcome"], "exited");
    assert_eq!(report["unreadable_lines"], 1, "{report:#}");

    // Nothing to read: one clear line, 125.
    let out = netbox_log(&[]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("--last"), "{}", stderr(&out));
    let out = netbox_log(&[dir.join("missing.jsonl").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(125));
}

/// Session logs are the user's alone (0600 in a 0700 directory, so another user reads
/// none); `netbox log --last` is the newest run from this directory, `--list` lists and
/// filters them, and `--prune` removes the old ones.
#[test]
fn session_logs_are_private_listed_by_workspace_and_pruned() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new("session-list");
    let state = dir.join("state");
    let sessions = state.join("netbox/sessions");
    let (a, b) = (dir.join("ws-a"), dir.join("ws-b"));
    for ws in [&a, &b] {
        std::fs::create_dir_all(ws).unwrap();
    }
    let netbox = |cwd: &std::path::Path, args: &[&str]| {
        Command::new(netbox_bin())
            .args(args)
            .env("XDG_STATE_HOME", &state)
            .current_dir(cwd)
            .output()
            .unwrap()
    };
    assert!(netbox(&a, &["--quiet", "--", "sh", "-c", "echo from-a"])
        .status
        .success());
    assert_eq!(
        netbox(&a, &["--quiet", "--", "sh", "-c", "exit 3"])
            .status
            .code(),
        Some(3)
    );
    assert!(netbox(&b, &["--quiet", "--", "sh", "-c", "echo from-b"])
        .status
        .success());

    // Private: the directory 0700, each log 0600.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sessions), 0o700);
    let logs: Vec<_> = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(logs.len(), 3);
    for log in &logs {
        assert_eq!(mode(log), 0o600, "{}", log.display());
    }
    // Another user reads none of it; the control, a file of the same directory tree made
    // readable on purpose, it reads.
    if nix::unistd::geteuid().is_root() {
        let control = dir.join("readable");
        std::fs::write(&control, "control\n").unwrap();
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o755)).unwrap();
        for p in [&state, &state.join("netbox")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let as_nobody = |path: &std::path::Path| {
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
                .arg(path)
                .output()
                .unwrap()
        };
        assert!(as_nobody(&control).status.success(), "the control");
        let out = as_nobody(&logs[0]);
        assert!(!out.status.success(), "{}", stdout(&out));
    }

    // --last: the newest run from this directory, whichever ran after it elsewhere.
    let out = netbox(&a, &["log", "--last", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let command = report["sessions"][0]["start"]["command"].to_string();
    assert!(command.contains("exit 3"), "{command}");
    // From a directory no run came from: the newest of all, said as such.
    let out = netbox(&dir.path, &["log", "--last", "--json"]);
    assert!(
        stderr(&out).contains("no run from this directory"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("from-b"), "{}", stdout(&out));

    // --list and its filters.
    let lines = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["log", "--list"];
        all.extend_from_slice(args);
        let out = netbox(&a, &all);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).lines().map(str::to_owned).collect()
    };
    let every = lines(&[]);
    assert_eq!(every.len(), 3, "{every:#?}");
    assert!(every[0].contains("from-b"), "newest first: {every:#?}");
    let here = lines(&["--here"]);
    assert_eq!(here.len(), 2, "{here:#?}");
    assert!(here.iter().all(|l| l.contains("ws-a")), "{here:#?}");
    let failed = lines(&["--failed"]);
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert!(failed[0].contains("exit 3"), "{failed:#?}");
    assert_eq!(lines(&["--command", "from-b"]).len(), 1);
    assert_eq!(lines(&["--since", "1h"]).len(), 3);

    // --prune: a log older than --keep-days goes, the others stay.
    let old = sessions.join("old-session.jsonl");
    std::fs::copy(&logs[0], &old).unwrap();
    let touched = Command::new("touch")
        .args(["-d", "40 days ago"])
        .arg(&old)
        .status()
        .unwrap();
    assert!(touched.success());
    let out = netbox(&a, &["log", "--prune", "--keep-days", "30"]);
    assert!(
        stderr(&out).contains("removed 1 session log(s)"),
        "{}",
        stderr(&out)
    );
    assert!(!old.exists());
    assert_eq!(lines(&[]).len(), 3);
}

/// What stderr says of allowed traffic: a tunnel to where one already went is not said
/// again (the log has every one), and a forwarded request says its status, not `0 B up`.
#[test]
fn allowed_repeats_are_said_once_and_a_request_says_its_status() {
    let server = HttpServer::start();
    let p = server.port();
    let dir = TestDir::new("allowed-once");
    let run = Run::new(&dir).args_from(&["--allow", &format!("127.0.0.1:{p}")]);
    let url = format!("http://127.0.0.1:{p}/hello");
    let out = run.sh(&format!(
        "for i in 1 2 3; do curl -sS -p -o /dev/null {url}; done; curl -sS -o /dev/null {url}"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert_eq!(said.matches("netbox: allowed CONNECT").count(), 1, "{said}");
    let get = said
        .lines()
        .find(|l| l.starts_with("netbox: allowed GET"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(get.contains("(200, ") && !get.contains("B up"), "{get}");
    // The log has all four.
    let allowed = run
        .events()
        .into_iter()
        .filter(|e| e["type"] == "net" && e["decision"] == "allow" && e["port"] == p)
        .count();
    assert_eq!(allowed, 4);
}

/// `--show blocked` says what was refused (a connection, a write) and nothing else: no
/// start-up line, no allowed attempt; `--show all` (the control) says both. A blocked
/// write's line is on stderr before anything the command prints after the write.
#[test]
fn stderr_can_say_only_what_was_blocked_and_says_a_write_before_what_follows_it() {
    let dir = TestDir::new("show-blocked");
    let server = HttpServer::start();
    let p = server.port();
    let allow = dir.write(
        "allow.toml",
        &format!("allow_private = [\"files.test:{p}\"]\n[hosts]\n\"files.test\" = \"127.0.0.1\"\n"),
    );
    let script = format!(
        "curl -s http://files.test:{p}/hello >/dev/null\n\
         curl -s --max-time 8 http://blocked.test/ >/dev/null\n\
         for n in 1 2 3; do touch /etc/nb-show-$n 2>/dev/null; echo after-write-$n >&2; done\n"
    );
    let run = |show: &str| {
        Run::new(&dir)
            .args_from(&["--show", show, "--allowlist", allow.to_str().unwrap()])
            .sh(&script)
    };
    let all = stderr(&run("all"));
    assert!(all.contains("netbox: sandbox normal"), "{all}");
    assert!(
        all.contains("allowed") && all.contains("files.test"),
        "{all}"
    );
    let blocked = stderr(&run("blocked"));
    assert!(!blocked.contains("netbox: sandbox normal"), "{blocked}");
    assert!(!blocked.contains("files.test"), "{blocked}");
    assert!(blocked.contains("blocked.test"), "{blocked}");
    for n in 1..=3 {
        let write = blocked
            .find(&format!("blocked write /etc/nb-show-{n} "))
            .unwrap_or_else(|| panic!("no line for write {n}: {blocked}"));
        let after = blocked.find(&format!("after-write-{n}")).unwrap();
        assert!(
            write < after,
            "write {n} said after what followed it: {blocked}"
        );
    }
    // `none` says nothing of netbox's own; the command's lines stay.
    let none = stderr(&run("none"));
    assert!(!none.contains("netbox:"), "{none}");
    assert!(none.contains("after-write-3"), "{none}");
}
