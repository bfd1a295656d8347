//! Fetch-then-cut: `--fetch CMD1` runs with the allowlist, then CMD runs in the same
//! sandbox with the bridge closed, after a probe that proves nothing answers any more.

use serde_json::Value;

use crate::support::upstream::HttpServer;
use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

/// A local HTTP server pinned as `files.test`, and an allowlist for it.
fn files_server(dir: &TestDir) -> (HttpServer, String) {
    let server = HttpServer::start();
    let p = server.port();
    let allow = dir.write(
        "fetch.toml",
        &format!(
            "allow = [\"files.test:{p}\", \"127.0.0.1:{p}\"]\n[hosts]\n\"files.test\" = \"127.0.0.1\"\n"
        ),
    );
    (server, allow.display().to_string())
}

fn position(events: &[Value], what: impl Fn(&Value) -> bool, name: &str) -> usize {
    events
        .iter()
        .position(what)
        .unwrap_or_else(|| panic!("no {name} record in {events:#?}"))
}

#[test]
fn fetch_reaches_the_server_then_cmd_has_no_network() {
    let dir = TestDir::new("fetch");
    let (server, allow) = files_server(&dir);
    let p = server.port();
    let url = format!("http://files.test:{p}/hello");
    let run = Run::new(&dir)
        .arg("--fetch")
        .arg(format!(
            "curl -sS --max-time 8 -o fetched.txt {url} || exit 1; echo kept > /tmp/from-fetch; \
             sleep 30 >/dev/null 2>&1 & echo $! > leftover.pid"
        ))
        .arg("--fetch-allowlist")
        .arg(allow);
    let out = run.sh(&format!(
        "cat fetched.txt; \
         if kill -0 $(cat leftover.pid) 2>/dev/null; then echo leftover alive; fi; \
         cat /tmp/from-fetch; \
         curl -sS --max-time 8 {url}; echo curl=$?; \
         python3 -c \"import socket; socket.create_connection(('198.18.0.9', 443), timeout=5)\" \
         2>/dev/null; echo captured=$?"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    // CMD1's download and its private /tmp are there; the same request from CMD reaches
    // nothing: the proxy port refuses (curl 7), and so does capture (refused at once);
    // CMD1's leftover process is gone.
    assert_eq!(
        stdout(&out),
        "hello from upstream\nkept\ncurl=7\ncaptured=1\n",
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("allow rules for --fetch, none after"),
        "{}",
        stderr(&out)
    );

    let events = run.events();
    let probe_fetch = position(
        &events,
        |e| e["type"] == "probe" && e["phase"] == "fetch" && e["passed"] == true,
        "fetch probe",
    );
    let phase_fetch = position(
        &events,
        |e| e["type"] == "phase" && e["phase"] == "fetch",
        "fetch phase",
    );
    let allowed = position(
        &events,
        |e| e["host"] == "files.test" && e["decision"] == "allow",
        "allowed fetch",
    );
    let cut = position(
        &events,
        |e| e["type"] == "phase" && e["phase"] == "cut" && e["fetch_status"] == 0,
        "cut phase",
    );
    let probe_cut = position(
        &events,
        |e| e["type"] == "probe" && e["phase"] == "cut" && e["passed"] == true,
        "cut probe",
    );
    assert!(
        probe_fetch < phase_fetch && phase_fetch < allowed && allowed < cut && cut < probe_cut,
        "{events:#?}"
    );
    // Nothing reached the bridge after the cut: the one files.test record is CMD1's.
    let to_files = events.iter().filter(|e| e["host"] == "files.test").count();
    assert_eq!(to_files, 1, "{events:#?}");
    let cut_check = events[probe_cut]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "network cut")
        .expect("a network cut check")
        .clone();
    let refused_at = |addr: &str| {
        cut_check["forbidden"].as_array().unwrap().iter().any(|o| {
            o["attempt"] == format!("connect to the closed bridge port {addr}")
                && o["result"].as_str().unwrap().contains("refused")
        })
    };
    assert!(refused_at("127.0.0.1:3128"), "{cut_check:#}");
    assert!(
        cut_check["forbidden"].as_array().unwrap().iter().any(|o| {
            o["attempt"]
                .as_str()
                .is_some_and(|a| a.ends_with("which capture carried before the cut"))
                && o["ok"] == true
        }),
        "{cut_check:#}"
    );
    // CMD's tries after the cut are direct attempts, the proxy's port among them.
    let after_cut: Vec<&Value> = events[probe_cut..]
        .iter()
        .filter(|e| e["type"] == "direct_attempt" && e["reason"] == "network cut")
        .collect();
    for (address, port) in [("127.0.0.1", 3128), ("198.18.0.9", 443)] {
        assert!(
            after_cut
                .iter()
                .any(|e| e["address"] == address && e["port"] == port),
            "{address}:{port} in {after_cut:#?}"
        );
    }
    // Where loopback has IPv6, the bridge listened on ::1 as well, and must refuse there.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        assert!(refused_at("[::1]:3128"), "{cut_check:#}");
    }
}

#[test]
fn a_fetch_ended_by_a_signal_stops_before_cmd() {
    let dir = TestDir::new("fetch-signal");
    let run = Run::new(&dir).arg("--fetch").arg("kill -TERM $$");
    let out = run.sh("touch ran");
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(!run.workspace.join("ran").exists());
}

#[test]
fn a_failed_fetch_stops_before_cmd() {
    let dir = TestDir::new("fetch-fails");
    let run = Run::new(&dir).arg("--fetch").arg("touch fetched; exit 3");
    let out = run.sh("touch ran");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the --fetch command exited with status 3; CMD was not run"),
        "{}",
        stderr(&out)
    );
    // CMD1 did run (its file is there); CMD did not.
    assert!(run.workspace.join("fetched").exists());
    assert!(!run.workspace.join("ran").exists());
    let events = run.events();
    assert!(
        events.iter().any(|e| e["type"] == "phase"
            && e["phase"] == "fetch_failed"
            && e["fetch_status"] == 3),
        "{events:#?}"
    );
    assert!(!events.iter().any(|e| e["phase"] == "cut"), "{events:#?}");
}

#[test]
fn a_bridge_left_open_at_the_cut_stops_cmd() {
    let dir = TestDir::new("fetch-uncut");
    let run = Run::new(&dir)
        .arg("--fetch")
        .arg("touch fetched")
        .env("NETBOX_TEST_BREAK", "cut");
    let out = run.sh("touch ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("live probe failed: after --fetch: network cut"),
        "{} (is netbox built with --features test-hooks?)",
        stderr(&out)
    );
    assert!(run.workspace.join("fetched").exists());
    assert!(!run.workspace.join("ran").exists(), "CMD ran");
    let events = run.events();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "probe" && e["phase"] == "cut" && e["passed"] == false),
        "{events:#?}"
    );
    // Control: the same run without the breakage runs CMD.
    let dir = TestDir::new("fetch-cut");
    let run = Run::new(&dir).arg("--fetch").arg("touch fetched");
    let out = run.sh("touch ran");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(run.workspace.join("ran").exists());
}

#[test]
fn fetch_options_that_make_no_sense_are_refused() {
    let dir = TestDir::new("fetch-usage");
    let allow = dir.write("a.toml", "allow = []\n");
    let cases: [&[&str]; 3] = [
        &["--fetch-allowlist", allow.to_str().unwrap(), "--", "true"],
        &["--fetch", "true", "--yolo", "--", "true"],
        &["verify", "--fetch", "true"],
    ];
    for args in cases {
        let out = std::process::Command::new(netbox_bin())
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--fetch"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
