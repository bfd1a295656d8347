//! The run's life: the start-up line, the live probe (and its refusal when a control is
//! broken on purpose), exit statuses, signal forwarding, and death with netbox.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

#[test]
fn startup_line_probe_record_and_quiet() {
    let dir = TestDir::new("startup");
    let run = Run::new(&dir);
    let out = run.sh("echo ran");
    assert_eq!(stdout(&out), "ran\n");
    let first = stderr(&out).lines().next().unwrap_or("").to_owned();
    assert!(
        first.starts_with("netbox: sandbox normal | workspace "),
        "{first}"
    );
    assert!(
        first.contains("/tmp (private)") && first.contains("0 allow rules"),
        "{first}"
    );
    assert!(first.contains(&run.log.display().to_string()), "{first}");
    let events = run.events();
    let probe: Vec<_> = events.iter().filter(|e| e["type"] == "probe").collect();
    assert_eq!(probe.len(), 1, "{events:?}");
    assert_eq!(probe[0]["passed"], true);
    let names: Vec<&str> = probe[0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for want in [
        "read-only root",
        "protected paths",
        "network",
        "egress",
        "privileges",
    ] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "{want} missing: {names:?}"
        );
    }
    // The probe's canary is logged, but not announced.
    assert!(!stderr(&out).contains("canary"), "{}", stderr(&out));

    let quiet_dir = TestDir::new("quiet");
    let quiet = Run::new(&quiet_dir).arg("--quiet");
    let out = quiet.sh("curl -s --max-time 5 https://blocked.test; echo done");
    assert_eq!(stderr(&out), "");
    assert_eq!(stdout(&out), "done\n");
}

#[test]
fn broken_control_stops_cmd_before_it_runs() {
    for control in ["read-only-root", "capability-drop", "nested-userns"] {
        let dir = TestDir::new("broken");
        let run = Run::new(&dir).env("NETBOX_TEST_BREAK", control);
        let out = run.sh("touch ran-anyway");
        assert_eq!(out.status.code(), Some(125), "{control}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("netbox: live probe failed: "),
            "{control}: {} (is netbox built with --features test-hooks?)",
            stderr(&out)
        );
        assert!(
            !run.workspace.join("ran-anyway").exists(),
            "{control}: CMD ran"
        );
        let events = run.events();
        assert!(events
            .iter()
            .any(|e| e["type"] == "probe" && e["passed"] == false));
    }
    // Control: the same run without breakage starts CMD.
    let dir = TestDir::new("unbroken");
    let run = Run::new(&dir);
    let out = run.sh("touch ran");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(run.workspace.join("ran").exists());
}

#[test]
fn exit_statuses_follow_the_shell() {
    let dir = TestDir::new("status");
    let run = Run::new(&dir).arg("--quiet");
    assert_eq!(run.sh("exit 7").status.code(), Some(7));
    assert_eq!(run.sh("kill -TERM $$").status.code(), Some(143));
    let out = std::process::Command::new(netbox_bin())
        .args(["--quiet", "--log"])
        .arg(&run.log)
        .args(["--", "no-such-command-netbox"])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("no-such-command-netbox: command not found"));
    std::fs::write(run.workspace.join("script.sh"), "#!/bin/sh\necho hi\n").unwrap();
    let out = std::process::Command::new(netbox_bin())
        .args(["--quiet", "--log"])
        .arg(&run.log)
        .args(["--", "./script.sh"])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    // Bad usage is netbox's own failure.
    let out = std::process::Command::new(netbox_bin())
        .args(["--"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
}

/// A mistake is one line that says what and how to fix it (no cause said twice, no hint
/// into a source tree), with a shell's status where a shell has one.
#[test]
fn mistakes_are_said_once_with_the_fix() {
    let dir = TestDir::new("mistakes");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::create_dir_all(run.workspace.join("sub")).unwrap();
    let netbox = |args: &[&str]| {
        Command::new(netbox_bin())
            .arg("--log")
            .arg(&run.log)
            .args(args)
            .current_dir(&run.workspace)
            .output()
            .unwrap()
    };
    // A directory as CMD: 126 and what a shell says. Control: a program runs.
    let out = netbox(&["--quiet", "--", "./sub"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert_eq!(stderr(&out), "netbox: cannot run ./sub: Is a directory\n");
    assert_eq!(netbox(&["--quiet", "--", "true"]).status.code(), Some(0));
    // An allowlist that cannot be read: its cause once, and a hint an installed netbox
    // can follow.
    let out = netbox(&["--allowlist", "/nonexistent-netbox.toml", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert!(err.contains("hint: `netbox docs allowlist`"), "{err}");
    let docs = Command::new(netbox_bin())
        .args(["docs", "allowlist"])
        .output()
        .unwrap();
    assert!(
        stdout(&docs).starts_with("# Allowlist files"),
        "{}",
        stderr(&docs)
    );
    // An unknown tool: the list of tools, and not the rules' syntax.
    let err = stderr(&netbox(&["--allow-tool", "nosuch", "--", "true"]));
    assert!(
        err.contains("unknown tool \"nosuch\"") && err.contains("netbox tools"),
        "{err}"
    );
    assert!(!err.contains("rules look like"), "{err}");
    // Another sandbox's flag: what netbox does instead, not clap's look-alike guess.
    for (flag, says) in [
        ("--bind-try", "--bind SRC DST"),
        ("--volume", "--write PATH"),
        ("--unshare-net", "empty namespace"),
    ] {
        let out = netbox(&[flag, "/a", "/b", "--", "true"]);
        assert_eq!(out.status.code(), Some(125));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("netbox has no {flag}")) && err.contains(says),
            "{err}"
        );
    }
    // A duration that is none says what one looks like.
    let err = stderr(&netbox(&["--timeout", "forever", "--", "true"]));
    assert!(err.contains("such as 30s, 5m or 1h30m"), "{err}");
    assert!(!err.contains("expected number"), "{err}");
}

#[test]
fn sigterm_is_forwarded_and_sigkill_leaves_nothing_behind() {
    let dir = TestDir::new("signals");
    let run = Run::new(&dir).arg("--quiet");
    let marker = format!("netbox-e2e-marker-{}", std::process::id());
    let mut child = run
        .command(&format!("sleep 300; : {marker}"))
        .spawn()
        .unwrap();
    wait_for_process(&marker, true);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    wait_for_process(&marker, false);

    let mut child = run
        .command(&format!("sleep 300 & sleep 300; : {marker}"))
        .spawn()
        .unwrap();
    wait_for_process(&marker, true);
    child.kill().unwrap();
    let _ = child.wait();
    wait_for_process(&marker, false);
}

/// Waits until a `bash` (CMD, inside the sandbox) whose command line contains `marker`
/// exists, or until no process at all with `marker` is left (netbox's own processes carry
/// it in their arguments too).
fn wait_for_process(marker: &str, present: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .any(|e| {
                let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline);
                cmdline.contains(marker) && (!present || cmdline.starts_with("bash\0"))
            });
        if found == present {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process with {marker} {}",
            if present {
                "never appeared"
            } else {
                "survived"
            }
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn disable_sandbox_says_so() {
    let dir = TestDir::new("yolo");
    let out = std::process::Command::new(netbox_bin())
        .args(["--yolo", "--", "sh", "-c", "echo outside; exit 3"])
        .current_dir(&dir.path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout(&out), "outside\n");
    assert!(
        stderr(&out).contains("netbox: sandbox disabled"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn timeout_kills_the_whole_sandbox_with_124() {
    let dir = TestDir::new("timeout");
    let marker = format!("netbox-e2e-timeout-{}", std::process::id());
    let run = Run::new(&dir).arg("--quiet").arg("--timeout").arg("1s");
    let started = Instant::now();
    let out = run.sh(&format!("sleep 10 & sleep 10; : {marker}"));
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(waited < Duration::from_secs(2), "took {waited:?}");
    assert!(
        stderr(&out).contains("netbox: timed out after 1s"),
        "{}",
        stderr(&out)
    );
    wait_for_process(&marker, false);
    // Control: a command that finishes in time keeps its own status (a limit a loaded
    // machine's start-up cannot reach).
    let in_time = Run::new(&dir).arg("--quiet").arg("--timeout").arg("60s");
    assert_eq!(in_time.sh("exit 3").status.code(), Some(3));
}

#[test]
fn clean_env_keeps_secrets_out_unless_passed() {
    let dir = TestDir::new("cleanenv");
    let env_file = dir.write("vars.env", "# for the build\nFROM_FILE=yes\n");
    let script = "echo \"secret=[$NETBOX_TEST_SECRET] file=[$FROM_FILE] given=[$GIVEN] home=[$HOME] proxy=[$HTTPS_PROXY]\"";
    // Default: the caller's environment is inherited (documented).
    let inherit = Run::new(&dir)
        .arg("--quiet")
        .env("NETBOX_TEST_SECRET", "s3cret");
    assert!(stdout(&inherit.sh(script)).contains("secret=[s3cret]"));
    // --clean-env: not inherited, but --env and --env-file still set what they name.
    let clean = Run::new(&dir)
        .arg("--quiet")
        .arg("--clean-env")
        .arg("--env")
        .arg("GIVEN=1")
        .arg("--env-file")
        .arg(env_file.display().to_string())
        .env("NETBOX_TEST_SECRET", "s3cret");
    let said = stdout(&clean.sh(script));
    assert_eq!(
        said,
        "secret=[] file=[yes] given=[1] home=[/tmp] proxy=[http://127.0.0.1:3128]\n"
    );
    // A bare --env KEY passes that one variable through.
    let pass = Run::new(&dir)
        .arg("--quiet")
        .arg("--clean-env")
        .arg("--env")
        .arg("NETBOX_TEST_SECRET")
        .env("NETBOX_TEST_SECRET", "s3cret");
    assert!(stdout(&pass.sh(script)).contains("secret=[s3cret]"));
    // A broken env file is refused with its line.
    let bad = dir.write("bad.env", "A=1\nnot a pair\n");
    let out = Run::new(&dir)
        .arg("--env-file")
        .arg(bad.display().to_string())
        .sh("true");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("bad.env:2: expected KEY=VALUE"),
        "{}",
        stderr(&out)
    );
}

/// `netbox verify` with the given extra environment; returns (status, stdout, stderr).
fn verify(dir: &TestDir, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(netbox_bin());
    cmd.arg("verify")
        .args(extra)
        .arg("--log")
        .arg(dir.join("events.jsonl"))
        .current_dir(dir.join("ws"))
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run netbox verify")
}

#[test]
fn verify_reports_every_control_and_fails_on_a_broken_one() {
    let dir = TestDir::new("verify");
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let out = verify(&dir, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(!table.contains("FAILS"), "{table}");
    assert!(table.contains("HOLDS"), "{table}");
    assert!(table.contains("read-only"), "{table}");
    // Rows say what must not and what must be possible, with no double negative.
    assert!(table.contains("ok  must not create /"), "{table}");
    assert!(table.contains("ok  must     "), "{table}");
    assert!(!table.contains("refused refused"), "{table}");

    let out = verify(&dir, &["--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON report");
    assert_eq!(report["passed"], true);
    let checks = report["checks"].as_array().unwrap();
    assert!(checks.len() >= 6, "{checks:?}");
    assert!(checks.iter().all(|c| c["passed"] == true));

    // A deliberately broken control is reported, named, and turns the exit status.
    let out = verify(&dir, &[], &[("NETBOX_TEST_BREAK", "read-only-root")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let table = stdout(&out);
    let failing: Vec<&str> = table.lines().filter(|l| l.starts_with("FAILS")).collect();
    assert_eq!(failing.len(), 1, "{table}");
    assert!(failing[0].contains("read-only"), "{table}");

    // It never vouches for an unsandboxed run, and runs no command.
    for extra in [&["--yolo"][..], &["--", "touch", "ran"][..]] {
        let out = verify(&dir, extra, &[]);
        assert_eq!(out.status.code(), Some(125), "{extra:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{extra:?}");
    }
    assert!(!dir.join("ws/ran").exists());
}

/// netbox and the sandbox keep to separate CPUs while it sets up (cpu.rs); CMD must get
/// every CPU netbox was allowed, as it would without netbox.
#[test]
fn cmd_gets_every_cpu_netbox_may_use() {
    let dir = TestDir::new("cpus");
    // This thread's: netbox is started from it.
    let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let want = own
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc/thread-self/status")
        .to_owned();
    let out = Run::new(&dir)
        .arg("--quiet")
        .sh("grep Cpus_allowed_list: /proc/self/status");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), want, "{}", stderr(&out));
}

/// netbox reaps its sandbox's pid 1 before it exits: nothing is left for the orphan
/// reaper, which in a container may be an init that never reaps (a zombie per run).
/// Control: the same watcher sees a process netbox's CMD leaves running on purpose
/// (a double-forked sleep outside any sandbox here: `--disable-sandbox`).
#[test]
fn no_zombie_is_left_to_the_orphan_reaper() {
    let dir = TestDir::new("zombies");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let log = dir.join("events.jsonl");
    let watcher = r#"
import ctypes, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
netbox, log, mode = sys.argv[1:4]
for _ in range(10):
    if mode == "sandbox":
        cmd = [netbox, "--quiet", "--log", log, "--", "true"]
    else:
        cmd = [netbox, "--disable-sandbox", "--", "sh", "-c", "(sleep 5 &) ; true"]
    subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
time.sleep(0.3)
mine = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    fields = stat.rsplit(")", 1)[1].split()
    if int(fields[1]) == os.getpid():
        mine += 1
print("orphans", mine)
"#;
    let netbox = netbox_bin();
    let run = |mode: &str| {
        let out = std::process::Command::new("python3")
            .args(["-c", watcher])
            .arg(&netbox)
            .arg(&log)
            .arg(mode)
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    assert_eq!(run("sandbox"), "orphans 0\n");
    // Control: orphans are seen when there are some.
    assert_eq!(run("control"), "orphans 10\n");
}

/// A run killed with SIGKILL leaves its placeholders; the next run that logs beside it,
/// in any workspace, removes them (with its check of git metadata). A directory of the
/// user's own (no mark) is kept.
#[test]
fn placeholders_of_a_killed_run_go_with_the_next_run_anywhere() {
    let dir = TestDir::new("killed-placeholders");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let first = Run::new(&dir)
        .arg("--quiet")
        .log_at(logs.join("first.jsonl"));
    std::fs::create_dir(first.workspace.join(".idea")).unwrap();
    let marker = format!("netbox-e2e-killed-{}", std::process::id());
    let mut child = first
        .command(&format!("sleep 300; : {marker}"))
        .spawn()
        .unwrap();
    wait_for_process(&marker, true);
    child.kill().unwrap();
    let _ = child.wait();
    wait_for_process(&marker, false);
    // Left behind: the placeholder of the missing .git.
    assert!(first.workspace.join(".git").is_dir());

    let elsewhere = TestDir::new("killed-placeholders-next");
    let next = Run::new(&elsewhere)
        .arg("--quiet")
        .log_at(logs.join("next.jsonl"));
    let out = next.sh("true");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !first.workspace.join(".git").exists(),
        "placeholder left behind"
    );
    assert!(!first.workspace.join(".envrc").exists());
    // Control: the user's own empty directory is not a placeholder.
    assert!(first.workspace.join(".idea").is_dir());
}

/// Mistakes on the command line get one clear line and a hint that fixes them: a
/// command given without `--`, a URL given as a rule. And `verify --help` offers no
/// option verify refuses.
#[test]
fn mistakes_get_the_command_they_meant() {
    let dir = TestDir::new("mistakes");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(netbox_bin())
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap()
    };
    let out = run(&["--quiet", "curl", "http://a.test/"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains(
            "hint: a command to run goes after `--`: netbox --quiet -- curl http://a.test/"
        ),
        "{}",
        stderr(&out)
    );
    let out = run(&["--allow", "https://registry.test/simple", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("did you mean registry.test:443?"),
        "{}",
        stderr(&out)
    );
    // Control: the same rule spelled as a rule is taken.
    let log = dir.join("events.jsonl").display().to_string();
    let out = run(&[
        "--quiet",
        "--log",
        &log,
        "--allow",
        "registry.test:443",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let help = stdout(&run(&["verify", "--help"]));
    for refused in ["--fetch", "--disable-sandbox", "<CMD>"] {
        assert!(!help.contains(refused), "{refused} in {help}");
    }
    assert!(help.contains("--allowlist"), "{help}");
}

/// With a private /tmp (the default), the host's /tmp is not there for CMD: a program
/// found there, or a --ro path there (which then does nothing), is said with the fix;
/// with --tmp host, the same run works (the control).
#[test]
fn what_lies_in_the_hosts_tmp_is_said_with_the_fix() {
    let tools = TestDir::new("host-tmp-tools");
    let bin = tools.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("nb-tmp-tool");
    std::fs::write(&tool, "#!/bin/sh\necho tool ran\n").unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dir = TestDir::outside_tmp("host-tmp-ws");
    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let netbox = |args: &[&str]| {
        Command::new(netbox_bin())
            .arg("--quiet")
            .arg("--log")
            .arg(dir.join("events.jsonl"))
            .args(args)
            .env("PATH", &path)
            .current_dir(&workspace)
            .output()
            .unwrap()
    };
    let by_path = netbox(&["--", "nb-tmp-tool"]);
    assert_eq!(by_path.status.code(), Some(127));
    let err = stderr(&by_path);
    assert!(
        err.contains("nb-tmp-tool (found at") && err.contains("give --tmp host"),
        "{err}"
    );
    // The control: with the host's /tmp, it runs, and nothing is said.
    let shared = netbox(&["--tmp", "host", "--", "nb-tmp-tool"]);
    assert_eq!(stdout(&shared), "tool ran\n", "{}", stderr(&shared));
    // With the host's /tmp writable, the check of git metadata walks all of it, where
    // other tests' (and other users') directories come and go: what it says of those is
    // not this test's, unless it names this test's own.
    let err = stderr(&shared);
    let own = tools.path.display().to_string();
    let said: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("netbox: warning: the check") || l.contains(&own))
        .collect();
    assert!(said.is_empty(), "{err}");
    // --ro of a path there does nothing: said, with the fix; the run goes on.
    let out = netbox(&["--ro", tool.to_str().unwrap(), "--", "true"]);
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("--ro ") && err.contains("so it does nothing"),
        "{err}"
    );
}

/// `--no-network`: the probe runs as ever and passes, the start-up line says there is no
/// network, a connection is refused and logged; a flag that would open a host beside it
/// is one line. Control: the same run with a rule for the host reaches it.
#[test]
fn no_network_is_an_empty_allowlist_said_as_such() {
    let server = crate::support::upstream::HttpServer::start();
    let p = server.port();
    let dir = TestDir::new("no-network");
    let get = format!("curl -sS -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{p}/hello");
    let run = Run::new(&dir).arg("--no-network");
    let out = run.sh(&get);
    assert_eq!(stdout(&out), "502\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("| no network (--no-network) |"),
        "{}",
        stderr(&out)
    );
    assert_eq!(run.probe()["passed"], true);
    assert!(run
        .events()
        .iter()
        .any(|e| e["type"] == "net" && e["port"] == p && e["decision"] == "deny"));
    let both = Run::new(&dir)
        .args_from(&["--no-network", "--allow", &format!("127.0.0.1:{p}")])
        .sh("true");
    assert_eq!(both.status.code(), Some(125));
    assert!(
        stderr(&both).contains("'--no-network' cannot be used with '--allow"),
        "{}",
        stderr(&both)
    );
    // Control: a rule for it, and it is reached.
    let open = Run::new(&dir)
        .args_from(&["--allow", &format!("127.0.0.1:{p}")])
        .log_at(dir.join("open.jsonl"))
        .sh(&get);
    assert_eq!(stdout(&open), "200\n", "{}", stderr(&open));
}

/// The user's defaults file (`$XDG_CONFIG_HOME/netbox/config.toml`): its allowlist, its
/// refusal status and a workspace table of its own apply to runs, `--no-config` leaves it
/// out, a file others could write (or a symlink) is refused, and the command line wins.
#[test]
fn the_users_defaults_file_fills_in_what_the_command_line_leaves_open() {
    use std::os::unix::fs::PermissionsExt;
    let server = crate::support::upstream::HttpServer::start();
    let p = server.port();
    let dir = TestDir::outside_tmp("user-config");
    let config = dir.join("config");
    std::fs::create_dir_all(config.join("netbox")).unwrap();
    let (a, b) = (dir.join("ws-a"), dir.join("ws-b"));
    for ws in [&a, &b] {
        std::fs::create_dir_all(ws).unwrap();
    }
    std::fs::write(
        config.join("netbox/a.toml"),
        format!("allow = [\"127.0.0.1:{p}\"]\n"),
    )
    .unwrap();
    let file = config.join("netbox/config.toml");
    std::fs::write(
        &file,
        format!(
            "refusal_status = 403\n[workspace.\"{}\"]\nallowlist = [\"a.toml\"]\n",
            a.display()
        ),
    )
    .unwrap();
    let get = format!("curl -sS -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{p}/hello");
    let netbox = |cwd: &std::path::Path, args: &[&str]| {
        Command::new(netbox_bin())
            .args(["--log"])
            .arg(dir.join("events.jsonl"))
            .args(args)
            .args(["--", "sh", "-c", &get])
            .env("XDG_CONFIG_HOME", &config)
            .current_dir(cwd)
            .output()
            .unwrap()
    };
    // In the workspace its table names: allowed, and the start-up line says where from.
    let out = netbox(&a, &[]);
    assert_eq!(stdout(&out), "200\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("defaults from {}", file.display())),
        "{}",
        stderr(&out)
    );
    // Elsewhere: only the top level (refused, with its 403).
    let out = netbox(&b, &[]);
    assert_eq!(stdout(&out), "403\n", "{}", stderr(&out));
    // The command line wins; --no-config leaves the file out (502, no rule).
    assert_eq!(stdout(&netbox(&b, &["--refusal-status", "502"])), "502\n");
    let out = netbox(&a, &["--no-config"]);
    assert_eq!(stdout(&out), "502\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains("defaults from"));
    // A file others could write: refused, CMD never runs.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = netbox(&a, &[]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("writable by you alone"),
        "{}",
        stderr(&out)
    );
    // A symlink to it: refused too.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let real = config.join("netbox/real.toml");
    std::fs::rename(&file, &real).unwrap();
    std::os::unix::fs::symlink(&real, &file).unwrap();
    let out = netbox(&a, &[]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
}
