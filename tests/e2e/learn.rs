//! `netbox learn`: an allowlist from what a command tried (in learn mode, or from an
//! earlier session's refusals), which then lets the same command through in a normal run
//! while the network stays closed to everything else.

use std::process::Command;

use crate::support::upstream::HttpServer;
use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

/// Two local servers pinned as a.test and b.test, a third as private.test, and a base
/// allowlist that pins the names and opens their loopback ports to IP rules, but allows
/// no name.
struct Servers {
    a: HttpServer,
    b: HttpServer,
    private: HttpServer,
    base: String,
}

fn servers(dir: &TestDir) -> Servers {
    let (a, b, private) = (
        HttpServer::start(),
        HttpServer::start(),
        HttpServer::start(),
    );
    let base = dir.write(
        "base.toml",
        &format!(
            "allow = [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]\n[hosts]\n\"a.test\" = \"127.0.0.1\"\n\
             \"b.test\" = \"127.0.0.1\"\n\"private.test\" = \"127.0.0.1\"\n",
            a.port(),
            b.port()
        ),
    );
    Servers {
        a,
        b,
        private,
        base: base.display().to_string(),
    }
}

fn get(host: &str, port: u16) -> String {
    format!("curl -s -o /dev/null -w '{host} %{{http_code}}\\n' --max-time 8 http://{host}:{port}/hello")
}

#[test]
fn a_learned_allowlist_lets_the_same_command_through_and_nothing_else() {
    let dir = TestDir::new("learn");
    let s = servers(&dir);
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let learned = dir.join("learned.toml");
    // A symlink where the file goes is replaced, never written through.
    let victim = dir.write("victim", "keep\n");
    std::os::unix::fs::symlink(&victim, &learned).unwrap();
    let script = format!(
        "{}; {}; {}",
        get("a.test", s.a.port()),
        get("a.test", s.a.port()),
        get("private.test", s.private.port())
    );
    let out = Command::new(netbox_bin())
        .arg("learn")
        .arg("-o")
        .arg(&learned)
        .args(["--allowlist", &s.base, "--log"])
        .arg(dir.join("learn.jsonl"))
        .args(["--", "sh", "-c", &script])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // In learn mode a.test got through; private.test stayed refused (its address).
    assert_eq!(
        stdout(&out),
        "a.test 200\na.test 200\nprivate.test 502\n",
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("netbox: sandbox learning"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    assert!(std::fs::symlink_metadata(&learned).unwrap().is_file());
    let text = std::fs::read_to_string(&learned).unwrap();
    let a_rule = format!("\"a.test:{}\", # 2 attempts", s.a.port());
    assert!(text.contains(&a_rule), "{text}");
    assert!(!text.contains("b.test"), "{text}");
    assert!(
        text.contains(&format!("    # \"private.test:{}\"", s.private.port())),
        "{text}"
    );

    // A normal run with it: a.test passes, b.test (never seen) is refused.
    let run = Run::new(&dir).arg("--quiet").args_from(&[
        "--allowlist",
        &s.base,
        "--allowlist",
        learned.to_str().unwrap(),
    ]);
    let out = run.sh(&format!(
        "{}; {}",
        get("a.test", s.a.port()),
        get("b.test", s.b.port())
    ));
    assert_eq!(stdout(&out), "a.test 200\nb.test 502\n", "{}", stderr(&out));
    // Control: without the learned file a.test is refused too.
    let run = Run::new(&dir)
        .arg("--quiet")
        .args_from(&["--allowlist", &s.base])
        .log_at(dir.join("closed.jsonl"));
    let out = run.sh(&get("a.test", s.a.port()));
    assert_eq!(stdout(&out), "a.test 502\n", "{}", stderr(&out));

    // The same allowlist from that refused session's log.
    let out = Command::new(netbox_bin())
        .args(["learn", "--from-log"])
        .arg(&run.log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let from_log = stdout(&out);
    assert!(
        from_log.contains(&format!("\"a.test:{}\", # 1 attempt", s.a.port())),
        "{from_log}"
    );
    assert!(!from_log.contains("canary"), "{from_log}");
}

#[test]
fn learn_refuses_what_makes_no_sense() {
    let dir = TestDir::new("learn-usage");
    let log = dir.write("x.jsonl", "");
    let cases: [&[&str]; 3] = [
        &["learn", "--from-log", log.to_str().unwrap(), "--", "true"],
        &["learn", "--yolo", "--", "true"],
        &["learn", "--fetch", "true", "--", "true"],
    ];
    for args in cases {
        let out = Command::new(netbox_bin()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{args:?}");
    }
}

/// What the learn run was given on its command line (an address opened with `--allow`, a
/// mirror on a private address allowed with `--allow-private`) goes into the learned
/// file, so replaying the file runs the same command with no refusal.
#[test]
fn a_learned_file_keeps_the_rules_it_was_given_and_replays_the_run() {
    let dir = TestDir::new("learn-given");
    let (mirror, direct) = (HttpServer::start(), HttpServer::start());
    let pins = dir.write("pins.toml", "[hosts]\n\"mirror.test\" = \"127.0.0.1\"\n");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let learned = dir.join("learned.toml");
    let script = format!(
        "{}; {}",
        get("mirror.test", mirror.port()),
        get("127.0.0.1", direct.port())
    );
    let out = Command::new(netbox_bin())
        .arg("learn")
        .arg("-o")
        .arg(&learned)
        .arg("--allowlist")
        .arg(&pins)
        .args([
            "--allow-private",
            &format!("mirror.test:{}", mirror.port()),
            "--allow",
            &format!("127.0.0.1:{}", direct.port()),
            "--log",
        ])
        .arg(dir.join("learn.jsonl"))
        .args(["--", "sh", "-c", &script])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = "mirror.test 200\n127.0.0.1 200\n";
    assert_eq!(stdout(&out), expected, "{}", stderr(&out));

    // Replayed with the pins and the learned file alone: the same, and no refusal.
    let replay = Run::new(&dir).arg("--quiet").args_from(&[
        "--allowlist",
        pins.to_str().unwrap(),
        "--allowlist",
        learned.to_str().unwrap(),
    ]);
    let out = replay.sh(&script);
    let text = std::fs::read_to_string(&learned).unwrap();
    assert_eq!(stdout(&out), expected, "{}\n{text}", stderr(&out));
    let refused: Vec<_> = replay
        .events()
        .into_iter()
        .filter(|e| e["type"] == "net" && e["decision"] == "deny")
        .filter(|e| !crate::support::is_probe_attempt(e))
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");

    // Control: the pins alone refuse both.
    let closed = Run::new(&dir)
        .arg("--quiet")
        .args_from(&["--allowlist", pins.to_str().unwrap()])
        .log_at(dir.join("closed.jsonl"));
    let out = closed.sh(&script);
    assert_eq!(
        stdout(&out),
        "mirror.test 502\n127.0.0.1 502\n",
        "{}",
        stderr(&out)
    );
}

/// `-o DIR/FILE` where a sandbox could write on DIR's way: an earlier run in the workspace
/// made `out` a link to a directory elsewhere on the host, and learn, asked to write
/// `ws/out/allow.toml`, must not write there. It is refused with one line naming the link
/// and where it points, and nothing is written anywhere. Control: with `out` a real
/// directory, the same learn writes the file there.
#[test]
fn learn_does_not_write_through_a_link_planted_on_the_way_of_its_output() {
    let dir = TestDir::new("learn-out-link");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let run = Run::new(&dir);
    let planted = run.sh(&format!("ln -s {} out", elsewhere.display()));
    assert!(planted.status.success(), "{}", stderr(&planted));
    let ws = dir.join("ws");
    assert!(std::fs::symlink_metadata(ws.join("out"))
        .unwrap()
        .file_type()
        .is_symlink());
    let learn = |output: &std::path::Path, cwd: &std::path::Path| {
        Command::new(netbox_bin())
            .arg("learn")
            .arg("--from-log")
            .arg(&run.log)
            .arg("-o")
            .arg(output)
            .current_dir(cwd)
            .output()
            .unwrap()
    };
    for (output, cwd) in [
        (ws.join("out/allow.toml"), dir.path.as_path()),
        (std::path::PathBuf::from("out/allow.toml"), ws.as_path()),
    ] {
        let out = learn(&output, cwd);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{output:?}: {said}");
        assert!(
            said.contains(&format!(
                "out is a symbolic link (to {}), which netbox learn does not follow",
                elsewhere.display()
            )),
            "{said}"
        );
        assert_eq!(
            said.lines().filter(|l| l.starts_with("netbox:")).count(),
            1,
            "{said}"
        );
        assert_eq!(
            std::fs::read_dir(&elsewhere).unwrap().count(),
            0,
            "learn wrote through the link"
        );
    }
    // Control: a real directory there takes the file.
    std::fs::remove_file(ws.join("out")).unwrap();
    std::fs::create_dir(ws.join("out")).unwrap();
    let out = learn(&ws.join("out/allow.toml"), &dir.path);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read_to_string(ws.join("out/allow.toml"))
        .unwrap()
        .contains("allow = ["));
}
