//! Denied writes on record: each write the mounts refuse becomes a `write_denied` record
//! and one notice on stderr; writes that succeed are not logged; and a watcher that does
//! not judge (test hook) stops CMD before it runs.

use serde_json::Value;

use crate::support::{stderr, stdout, Run, TestDir};

fn denied(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "write_denied")
        .collect()
}

#[test]
fn refused_writes_are_logged_and_still_refused() {
    let dir = TestDir::new("writelog");
    let run = Run::new(&dir);
    std::fs::create_dir(run.workspace.join(".git")).unwrap();
    std::fs::write(run.workspace.join(".git/config"), "original\n").unwrap();
    let ws = run.workspace.display().to_string();
    let out = run.sh(
        "echo x > /etc/netbox-probe; echo y > .git/config; mkdir /opt/nb; \
         curl -s --max-time 8 https://blocked.test; \
         echo z > written.txt; mkdir made; mv written.txt made/; rm -r made; \
         echo $TMPDIR > /tmp/t; echo done",
    );
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    let events = run.events();
    let writes = denied(&events);
    let got: Vec<(&str, &str, &str)> = writes
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap(),
                e["syscall"].as_str().unwrap(),
                e["reason"].as_str().unwrap(),
            )
        })
        .collect();
    // Exactly the three refused writes: the workspace and /tmp ones are not logged.
    assert_eq!(
        got,
        [
            ("/etc/netbox-probe", "openat", "read-only root"),
            (&*format!("{ws}/.git/config"), "openat", "protected path"),
            ("/opt/nb", "mkdir", "read-only root"),
        ],
        "{events:#?}"
    );
    for e in &writes {
        assert!(e["pid"].as_u64().unwrap() > 1, "{e}");
        assert!(e["executable"].as_str().unwrap().starts_with('/'), "{e}");
        assert_eq!(e["schema_version"], 1);
    }
    let net_denied = events
        .iter()
        .filter(|e| e["type"] == "net" && e["decision"] == "deny" && e["host"] == "blocked.test")
        .count();
    assert_eq!(net_denied, 1, "{events:#?}");
    // Still refused: the mounts decide, the log only watches.
    assert!(!std::path::Path::new("/etc/netbox-probe").exists());
    assert!(!std::path::Path::new("/opt/nb").exists());
    assert_eq!(
        std::fs::read_to_string(run.workspace.join(".git/config")).unwrap(),
        "original\n"
    );
    let err = stderr(&out);
    for line in [
        "netbox: blocked write /etc/netbox-probe (read-only root)",
        "netbox: blocked write /opt/nb (read-only root)",
        "netbox: blocked CONNECT blocked.test:443",
    ] {
        assert!(err.contains(line), "{line} missing: {err}");
    }
}

#[test]
fn every_kind_of_refused_write_is_logged_once_per_attempt_and_announced_once() {
    let dir = TestDir::new("writelog-kinds");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::write(run.workspace.join("file"), "x").unwrap();
    std::os::unix::fs::symlink("/etc", run.workspace.join("etc-link")).unwrap();
    let script = "\
        touch /etc/hostname; chmod 600 /etc/hostname; rm -f /etc/hostname; \
        ln -s x /etc/nb-link; ln file /etc/nb-hard; mv /etc/hostname /etc/nb-moved; \
        python3 -c 'import os; os.truncate(\"/etc/hostname\", 0)'; \
        python3 -c 'import os; os.setxattr(\"/etc/hostname\", \"user.nb\", b\"1\")'; \
        cd /usr && touch nb-relative; cd - >/dev/null; \
        touch etc-link/nb-through-link; \
        touch /etc/nb-twice; touch /etc/nb-twice; true";
    let out = run.sh(script);
    assert!(out.status.success(), "{}", stderr(&out));
    let events = run.events();
    let paths: Vec<String> = denied(&events)
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["syscall"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    let ws = run.workspace.display().to_string();
    for want in [
        "utimensat /etc/hostname".to_owned(),
        "fchmodat /etc/hostname".to_owned(),
        "unlinkat /etc/hostname".to_owned(),
        "symlinkat /etc/nb-link".to_owned(),
        "linkat /etc/nb-hard".to_owned(),
        "renameat2 /etc/hostname".to_owned(),
        "truncate /etc/hostname".to_owned(),
        "setxattr /etc/hostname".to_owned(),
        "openat /usr/nb-relative".to_owned(),
        format!("openat {ws}/etc-link/nb-through-link"),
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:#?}");
    }
    // One record per attempt, even for the same path (touch tries openat, then utimensat).
    let twice = paths
        .iter()
        .filter(|p| *p == "openat /etc/nb-twice")
        .count();
    assert_eq!(twice, 2, "{paths:#?}");
    // --quiet: on record, but not announced.
    assert!(!stderr(&out).contains("blocked write"), "{}", stderr(&out));

    // Announced once per path (and per refused connection) without --quiet; each
    // attempt is on record.
    let dir = TestDir::new("writelog-notice");
    let run = Run::new(&dir);
    let out = run.sh(
        "touch /etc/nb-twice; touch /etc/nb-twice; \
         curl -s --max-time 8 https://blocked.test; curl -s --max-time 8 https://blocked.test; true",
    );
    let count = |prefix: &str| {
        stderr(&out)
            .lines()
            .filter(|l| l.starts_with(prefix))
            .count()
    };
    assert_eq!(
        count("netbox: blocked write /etc/nb-twice"),
        1,
        "{}",
        stderr(&out)
    );
    assert_eq!(
        count("netbox: blocked CONNECT blocked.test:443"),
        1,
        "{}",
        stderr(&out)
    );
    let events = run.events();
    let refused = events
        .iter()
        .filter(|e| e["host"] == "blocked.test" && e["decision"] == "deny")
        .count();
    assert_eq!(refused, 2, "{events:#?}");
}

#[test]
fn a_watcher_that_does_not_judge_stops_cmd() {
    let dir = TestDir::new("writelog-blind");
    let run = Run::new(&dir).env("NETBOX_TEST_BREAK", "write-watch");
    let out = run.sh("touch ran-anyway");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("live probe failed: denied writes logged"),
        "{} (is netbox built with --features test-hooks?)",
        stderr(&out)
    );
    assert!(!run.workspace.join("ran-anyway").exists());
    // Control: the same run without the hook starts CMD, and the check held.
    let dir = TestDir::new("writelog-seeing");
    let run = Run::new(&dir);
    let out = run.sh("touch ran");
    assert!(out.status.success(), "{}", stderr(&out));
    let probe = run.probe();
    let check = probe["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "denied writes logged (seccomp)")
        .expect("the probe checked the write log")
        .clone();
    assert_eq!(check["passed"], true, "{check:#}");
}
