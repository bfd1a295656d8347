//! The sandbox's pid 1: it keeps no handler of netbox's for
//! faults, and CMD is found and started the way a shell would, from CMD's working
//! directory, by a child that builds nothing of its own before exec.

use crate::support::{stderr, stdout, Run, TestDir};

/// pid 1's caught and blocked signal masks, from its status.
const MASKS: &str = "awk '/^SigCgt|^SigBlk/ {print $2}' /proc/1/status";

#[test]
fn pid_1_catches_no_fault_signal() {
    let dir = TestDir::new("pid1-faults");
    let run = Run::new(&dir).arg("--quiet");
    let out = run.sh(MASKS);
    let said = stdout(&out);
    let masks: Vec<u64> = said
        .lines()
        .map(|l| u64::from_str_radix(l.trim(), 16).unwrap())
        .collect();
    assert_eq!(masks.len(), 2, "{said} {}", stderr(&out));
    let (blocked, caught) = (masks[0], masks[1]);
    // SIGBUS is 7 and SIGSEGV 11: bits 6 and 10.
    let faults = (1 << 6) | (1 << 10);
    assert_eq!(caught & faults, 0, "pid 1 catches {caught:x}");
    // Control: the masks are pid 1's (it blocks SIGCHLD, 17, which it reads from a
    // signalfd).
    assert_ne!(blocked & (1 << 16), 0, "{blocked:x}");
}

#[test]
fn cmd_is_found_from_its_working_directory_and_failures_are_said() {
    let dir = TestDir::new("pid1-path");
    let run = Run::new(&dir).arg("--quiet");
    std::fs::create_dir_all(run.workspace.join("bin")).unwrap();
    let tool = run.workspace.join("bin/mytool");
    std::fs::write(&tool, "#!/bin/sh\necho found it\n").unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("bin:{}", std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new(crate::support::netbox_bin())
        .args(["--quiet", "--log"])
        .arg(&run.log)
        .args(["--", "mytool"])
        .env("PATH", &path)
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "found it\n", "{}", stderr(&out));
    std::fs::write(run.workspace.join("data.txt"), "not a program\n").unwrap();
    for (cmd, code, said) in [
        (
            "no-such-tool",
            127,
            "netbox: no-such-tool: command not found",
        ),
        (
            "./data.txt",
            126,
            "netbox: cannot run ./data.txt: Permission denied",
        ),
    ] {
        let out = std::process::Command::new(crate::support::netbox_bin())
            .args(["--quiet", "--log"])
            .arg(&run.log)
            .args(["--", cmd])
            .current_dir(&run.workspace)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{cmd}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim_end(), said, "{cmd}");
    }
}
