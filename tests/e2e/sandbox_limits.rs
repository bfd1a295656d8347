//! `--memory`, `--fsize`, `--pids` and `--cpus`: an allocation, a file or a fork past the
//! limit fails while one inside it works, CPU time is capped, the probe checks each limit
//! it was given, and a limit that is not really set (test hook) stops CMD before it runs.

use std::time::Duration;

use crate::support::{stderr, stdout, Run, TestDir};

#[test]
fn memory_limit_refuses_a_large_allocation_and_allows_a_small_one() {
    let dir = TestDir::new("memory");
    let run = Run::new(&dir).arg("--quiet").arg("--memory").arg("64M");
    let out = run.sh(
        "python3 -c 'b = bytearray(16 << 20); print(\"small ok\")' && \
         python3 -c 'b = bytearray(256 << 20); print(\"large ok\")'",
    );
    assert_eq!(stdout(&out), "small ok\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("MemoryError"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(1));
    let probe = run.probe();
    let limits = probe["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "resource limits")
        .expect("the probe checked the limit");
    assert_eq!(limits["passed"], true, "{limits}");
    if has_v1_controller("memory") && nix::unistd::getuid().is_root() {
        // As root, a memory cgroup holds the same limit for the sandbox as a whole.
        let cgroups = cgroup_check(&probe);
        assert!(
            cgroups
                .to_string()
                .contains("memory.limit_in_bytes reads 67108864"),
            "{cgroups}"
        );
    }

    // Control: without the limit the same large allocation works.
    let dir = TestDir::new("memory-control");
    let out = Run::new(&dir)
        .arg("--quiet")
        .sh("python3 -c 'b = bytearray(256 << 20); print(\"large ok\")'");
    assert_eq!(stdout(&out), "large ok\n", "{}", stderr(&out));
}

#[test]
fn file_size_limit_stops_a_file_at_the_limit() {
    let dir = TestDir::new("fsize");
    let run = Run::new(&dir).arg("--quiet").arg("--fsize").arg("1M");
    let out = run.sh("head -c 512K /dev/zero > small; echo small=$?; \
         head -c 2M /dev/zero > big; echo big=$?");
    let text = stdout(&out);
    assert!(text.contains("small=0"), "{text}");
    // The shell reports head killed by SIGXFSZ (128 + 25).
    assert!(text.contains("big=153"), "{text} {}", stderr(&out));
    assert_eq!(
        std::fs::metadata(run.workspace.join("small"))
            .unwrap()
            .len(),
        512 << 10
    );
    assert_eq!(
        std::fs::metadata(run.workspace.join("big")).unwrap().len(),
        1 << 20
    );
}

#[test]
fn a_limit_that_does_not_hold_stops_cmd() {
    let dir = TestDir::new("limits-broken");
    let run = Run::new(&dir)
        .arg("--fsize")
        .arg("1M")
        .env("NETBOX_TEST_BREAK", "limits");
    let out = run.sh("touch ran-anyway");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("live probe failed: resource limits"),
        "{}",
        stderr(&out)
    );
    assert!(!run.workspace.join("ran-anyway").exists());
    if nix::unistd::getuid().is_root() && has_v1_controller("cpu") {
        // A cgroup limit left unset is caught the same way.
        let run = Run::new(&dir)
            .arg("--cpus")
            .arg("1")
            .env("NETBOX_TEST_BREAK", "limits");
        let out = run.sh("touch ran-anyway");
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("live probe failed: cgroup limits"),
            "{}",
            stderr(&out)
        );
        assert!(!run.workspace.join("ran-anyway").exists());
    }
    // Control: the hook changes nothing for a run that asks for no limit.
    let dir = TestDir::new("limits-unasked");
    let run = Run::new(&dir).env("NETBOX_TEST_BREAK", "limits");
    let out = run.sh("touch ran");
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn bad_sizes_are_one_line_errors() {
    let cases = [
        ("--memory", "1M"),
        ("--memory", "lots"),
        ("--fsize", "0"),
        ("--cpus", "0"),
        ("--cpus", "4096"),
        ("--cpus", "half"),
    ];
    for (flag, value) in cases {
        let dir = TestDir::new("limits-bad");
        let out = Run::new(&dir).arg(flag).arg(value).sh("true");
        assert_eq!(out.status.code(), Some(125), "{flag} {value}");
        assert!(stderr(&out).contains(flag), "{}", stderr(&out));
    }
}

/// Forks children (each sleeping) until 40 or a refusal, and says which.
const FORK_UNTIL_REFUSED: &str = r#"
import os, time
n = 0
try:
    while n < 40:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
    print("started", n)
except OSError as e:
    print("refused after", n, e.errno)
"#;

/// Whether this process is in a cgroup v1 hierarchy with `controller`.
fn has_v1_controller(controller: &str) -> bool {
    std::fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == controller))
        })
}

/// Root is exempt from RLIMIT_NPROC, so netbox needs a pids cgroup (v1) for it.
fn root_without_pids_cgroup() -> bool {
    nix::unistd::getuid().is_root() && !has_v1_controller("pids")
}

/// The probe's "cgroup limits" check, which must have passed.
fn cgroup_check(probe: &serde_json::Value) -> serde_json::Value {
    let check = probe["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "cgroup limits")
        .unwrap_or_else(|| panic!("no cgroup limits check in {probe:#}"))
        .clone();
    assert_eq!(check["passed"], true, "{check:#}");
    check
}

/// Two busy loops of one second each, then the CPU seconds they used (bash's `times`).
const TWO_BUSY_SECONDS: &str = "for i in 1 2; do timeout 1 sh -c 'while :; do :; done' & done; \
                                wait; times";

fn children_cpu_seconds(times: &str) -> f64 {
    // "0m0.519s 0m0.001s" on the second line: user and system time of the children.
    let line = times.lines().nth(1).unwrap_or_else(|| panic!("{times}"));
    line.split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum()
}

#[test]
fn cpu_limit_caps_cpu_time() {
    let dir = TestDir::new("cpus");
    let run = Run::new(&dir).arg("--quiet").arg("--cpus").arg("0.5");
    let out = run.sh(TWO_BUSY_SECONDS);
    if !(nix::unistd::getuid().is_root() && has_v1_controller("cpu")) {
        // No cpu cgroup netbox may make, and no rlimit does this: said, never ignored.
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("--cpus cannot be enforced here"),
            "{}",
            stderr(&out)
        );
        // Nothing ran: the session log says it failed, and holds no probe.
        let events = run.events();
        assert!(events.iter().all(|e| e["type"] != "probe"), "{events:#?}");
        assert_eq!(events.last().unwrap()["outcome"], "failed", "{events:#?}");
        return;
    }
    assert!(out.status.success(), "{}", stderr(&out));
    // Half a CPU for a second: about 0.5 s, whatever two loops on two cores would take.
    let limited = children_cpu_seconds(&stdout(&out));
    assert!(limited < 0.65, "{limited} s under --cpus 0.5");
    let check = cgroup_check(&run.probe());
    assert!(
        check.to_string().contains("cpu.cfs_quota_us reads 50000"),
        "{check:#}"
    );

    // Control: without the limit the two loops use more than the bound the limited run
    // stayed under (two on two cores: up to 2; on a machine busy with other work,
    // measured down to 0.47, so up to five tries, a second apart).
    let dir = TestDir::new("cpus-control");
    let mut free = 0.0;
    for try_number in 0..5 {
        if try_number > 0 {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let out = Run::new(&dir).arg("--quiet").sh(TWO_BUSY_SECONDS);
        free = children_cpu_seconds(&stdout(&out));
        if free > 0.65 {
            break;
        }
    }
    assert!(free > 0.65, "{free} s without --cpus");
}

#[test]
fn process_limit_stops_a_fork_bomb_at_the_limit() {
    let dir = TestDir::new("pids");
    let run = Run::new(&dir).arg("--quiet").arg("--pids").arg("16");
    std::fs::write(run.workspace.join("fork.py"), FORK_UNTIL_REFUSED).unwrap();
    let out = run.sh("python3 fork.py");
    if root_without_pids_cgroup() {
        // Nothing can enforce it here, which must be said rather than ignored.
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("--pids cannot be enforced"),
            "{}",
            stderr(&out)
        );
        return;
    }
    // python is one of the 16; its 15 children start and the 16th fork is refused.
    assert_eq!(stdout(&out), "refused after 15 11\n", "{}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));

    // Control: without the limit all 40 start.
    let dir = TestDir::new("pids-control");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::write(run.workspace.join("fork.py"), FORK_UNTIL_REFUSED).unwrap();
    let out = run.sh("python3 fork.py");
    assert_eq!(stdout(&out), "started 40\n", "{}", stderr(&out));
}

/// From a nested user and cgroup namespace, mounts the pids hierarchy and lifts the
/// limit of the cgroup it finds itself in.
const LIFT_PIDS_MAX: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWCGROUP = 0x10000000, 0x00020000, 0x02000000
if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP) != 0:
    print("unshare failed")
else:
    libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None)
    os.makedirs("/tmp/cg", exist_ok=True)
    if libc.mount(b"none", b"/tmp/cg", b"cgroup", 0, b"pids") == 0:
        open("/tmp/cg/pids.max", "w").write("max")
        print("lifted to", open("/tmp/cg/pids.max").read().strip())
    else:
        print("no pids hierarchy")
"#;

#[test]
fn process_limit_survives_an_attempt_to_lift_it() {
    if root_without_pids_cgroup() {
        return; // the refusal is checked by process_limit_stops_a_fork_bomb_at_the_limit
    }
    let dir = TestDir::new("pids-nested");
    let mut run = Run::new(&dir).arg("--quiet").arg("--pids").arg("8");
    if !nix::unistd::getuid().is_root() {
        // An ordinary user may allow nested namespaces; the rlimit binds regardless.
        run = run.arg("--allow-nested-userns");
    }
    std::fs::write(run.workspace.join("lift.py"), LIFT_PIDS_MAX).unwrap();
    std::fs::write(run.workspace.join("fork.py"), FORK_UNTIL_REFUSED).unwrap();
    let out = run.sh("python3 lift.py; exec python3 fork.py");
    let text = stdout(&out);
    if nix::unistd::getuid().is_root() {
        // As root there is no nested namespace to reach the hierarchy from.
        assert!(
            text.starts_with("unshare failed"),
            "{text} {}",
            stderr(&out)
        );
    }
    // The limit binds: python (exec'd in place of bash) and 7 children.
    assert!(
        text.ends_with("refused after 7 11\n"),
        "{text} {}",
        stderr(&out)
    );
}

/// CMD's flood: 39 symlinks chained to nothing in a read-only directory, opened with
/// O_CREAT by 4 processes for 3 s (each a notification the write watcher judges); then it
/// marks the end and waits, so netbox's threads can be read.
const CHAIN_FLOOD: &str = r#"
import multiprocessing, os, sys, time
d = os.getcwd() + "/links"
os.makedirs(d, exist_ok=True)
last = "/etc/nb-nothing"
for i in range(39):
    p = "%s/l%d" % (d, i)
    os.symlink(last, p)
    last = p
def loop(_):
    end = time.time() + 3
    while time.time() < end:
        try:
            os.open(last, os.O_WRONLY | os.O_CREAT)
        except OSError:
            pass
with multiprocessing.Pool(4) as pool:
    pool.map(loop, range(4))
open("flooded", "w").close()
time.sleep(1.5)
"#;

/// CMD's other flood: refused requests to the bridge from 4 processes for 3 s.
const BRIDGE_FLOOD: &str = r#"
import multiprocessing, socket, time
def loop(_):
    end = time.time() + 3
    while time.time() < end:
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n")
        try:
            s.recv(4096)
        except OSError:
            pass
        s.close()
with multiprocessing.Pool(4) as pool:
    pool.map(loop, range(4))
open("flooded", "w").close()
time.sleep(1.5)
"#;

/// Runs `script` (which writes `flooded` when its flood ends) in `run` (with --cpus) and
/// returns netbox's process and the seconds until the flood ended; `None` where --cpus
/// cannot be enforced (no cpu hierarchy netbox may write to, as an ordinary user here),
/// after checking it was refused, never silently unenforced.
fn flood_under_cpus(run: &Run, script: &str) -> Option<(std::process::Child, f64)> {
    std::fs::write(run.workspace.join("flood.py"), script).unwrap();
    let started = std::time::Instant::now();
    let mut child = run
        .command("python3 flood.py")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let flooded = run.workspace.join("flooded");
    while !flooded.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut said = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
            assert_eq!(status.code(), Some(125), "{said}");
            assert!(said.contains("--cpus cannot be enforced here"), "{said}");
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some((child, started.elapsed().as_secs_f64()))
}

/// Clock ticks (1/100 s) of the threads of `pid` named `name`.
fn thread_ticks(pid: u32, name: &str) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| stat.contains(&format!("({name})")))
        .map(|stat| cpu_ticks(&stat))
        .sum()
}

/// utime + stime (fields 14 and 15) of a /proc `stat` text, in clock ticks.
fn cpu_ticks(stat: &str) -> u64 {
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The bridge's work for CMD (refusing its requests) is done inside
/// CMD's `--cpus` quota too, once CMD runs.
#[test]
fn the_bridge_cannot_be_used_to_escape_cpus() {
    let dir = TestDir::new("cpus-bridge");
    let run = Run::new(&dir).args_from(&["--quiet", "--cpus", "0.1"]);
    let Some((mut child, wall)) = flood_under_cpus(&run, BRIDGE_FLOOD) else {
        return;
    };
    // netbox's main thread (its task id is its pid), which runs the bridge.
    let stat = std::fs::read_to_string(format!("/proc/{0}/task/{0}/stat", child.id())).unwrap();
    let bridge = cpu_ticks(&stat) as f64 / 100.0;
    assert!(child.wait().unwrap().success());
    assert!(
        bridge <= 0.1 * wall + 0.15,
        "the bridge used {bridge:.2} s of CPU in {wall:.2} s"
    );
    // Control: it did refuse CMD's requests.
    let refused = run
        .events()
        .iter()
        .filter(|e| e["type"] == "net" && e["host"] == "refused.test")
        .count();
    assert!(refused > 50, "{refused}");
}

/// The write watcher's work for CMD is done inside CMD's `--cpus`
/// quota (its thread joins the sandbox's cpu cgroup), and a long symlink chain is not
/// followed to its end on every call.
#[test]
fn the_write_watcher_cannot_be_used_to_escape_cpus() {
    let dir = TestDir::new("cpus-watcher");
    let run = Run::new(&dir).args_from(&["--quiet", "--cpus", "0.5"]);
    let Some((mut child, wall)) = flood_under_cpus(&run, CHAIN_FLOOD) else {
        return;
    };
    // Clock ticks of netbox's watcher thread (utime + stime, fields 14 and 15).
    let ticks = thread_ticks(child.id(), "netbox-writewat");
    assert!(child.wait().unwrap().success());
    let watcher = ticks as f64 / 100.0;
    // Half a CPU for CMD and the watcher together (before: the watcher alone used ~2.8 s
    // of CPU in 3 s, 15 times CMD's own).
    assert!(
        watcher <= 0.5 * wall + 0.3,
        "the watcher used {watcher:.2} s of CPU in {wall:.2} s"
    );
    // Control: the watcher did work for CMD (it judged the flood), and the probe says it
    // runs in the sandbox's cpu cgroup.
    assert!(watcher > 0.05, "{watcher}");
    let probe = run.probe().to_string();
    assert!(probe.contains("in the sandbox's cpu cgroup"), "{probe}");
}
