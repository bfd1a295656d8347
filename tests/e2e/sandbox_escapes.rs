//! Escape attempts that must fail, each beside a control that must succeed, so a test
//! cannot pass because everything fails.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use crate::support::{stderr, stdout, Run, TestDir};

fn git_workspace(dir: &TestDir) -> Run {
    let run = Run::new(dir);
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&run.workspace)
        .output()
        .expect("git is needed for these tests");
    assert!(out.status.success());
    std::fs::write(run.workspace.join("file"), "data\n").unwrap();
    run
}

#[test]
fn mount_tricks_fail_and_git_stays_read_only() {
    let dir = TestDir::new("mounts");
    let run = git_workspace(&dir);
    let out = run.sh("mount -o remount,rw / 2>/dev/null && echo REMOUNTED; \
         umount .git 2>/dev/null && echo UNMOUNTED; \
         umount -l .git 2>/dev/null && echo DETACHED; \
         mount -t tmpfs none .git 2>/dev/null && echo MOUNTED; \
         unshare -Urm sh -c 'umount .git' 2>/dev/null && echo NESTED_UNMOUNT; \
         echo hacked > .git/config 2>/dev/null && echo WROTE_CONFIG; \
         echo control > ok.txt && echo CONTROL_OK");
    let said = stdout(&out);
    assert_eq!(said, "CONTROL_OK\n", "{}", stderr(&out));
    assert!(!std::fs::read_to_string(run.workspace.join(".git/config"))
        .unwrap()
        .contains("hacked"));
}

#[test]
fn filesystem_tricks_fail() {
    let dir = TestDir::new("fstricks");
    let home_dir = TestDir::outside_tmp("home");
    let home = home_dir.path.clone();
    let run = git_workspace(&dir).env("HOME", home.display().to_string());
    let cases = [
        ("proc root", "echo x > /proc/self/root$HOME/escape"),
        ("proc cwd", "echo x > /proc/self/cwd/.git/config"),
        ("rename .git", "mv .git gitx"),
        ("remove .git", "rmdir .git || rm -rf .git/config"),
        ("hardlink into .git", "ln file .git/hl"),
        ("hardlink out of .git", "ln .git/config cfg"),
        ("symlink write", "ln -s .git/config lnk && echo x > lnk"),
        ("rename into .git", "mv file .git/file"),
        ("chmod .git", "chmod 777 .git/config"),
        ("write /etc", "echo x >> /etc/hostname"),
        ("sysctl", "echo 1 > /proc/sys/kernel/sysrq"),
        ("sysrq trigger", "echo h > /proc/sysrq-trigger"),
        ("mknod", "mknod dev c 1 3"),
    ];
    for (name, attempt) in cases {
        let out = run.sh(attempt);
        assert!(!out.status.success(), "{name} succeeded: {}", stderr(&out));
    }
    assert!(!home.join("escape").exists());
    assert!(run.workspace.join(".git/config").is_file());
    assert!(!run.workspace.join(".git/hl").exists());
    // Controls: the same kinds of operations on ordinary workspace files work.
    let out = run
        .sh("ln file hl && ln -s file sl && echo y >> sl && mv hl hl2 && chmod 600 hl2 && echo ok");
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
}

#[test]
fn host_loopback_tcp_and_udp_are_unreachable() {
    let dir = TestDir::new("loopback");
    let run = Run::new(&dir);
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    udp.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();

    let out = run.sh(&format!(
        "curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{tcp_port}/; echo tcp=$?; \
         echo probe > /dev/udp/127.0.0.1/{udp_port}; echo udp-sent"
    ));
    assert!(
        stdout(&out).contains("tcp=7"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    let mut buf = [0u8; 64];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "UDP from the sandbox reached the host"
    );

    // Controls: both listeners answer from outside.
    let mut client = std::net::TcpStream::connect(("127.0.0.1", tcp_port)).unwrap();
    let (mut server, _) = tcp.accept().unwrap();
    std::io::Write::write_all(&mut client, b"x").unwrap();
    let mut one = [0u8; 1];
    server.read_exact(&mut one).unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.send_to(b"control", ("127.0.0.1", udp_port)).unwrap();
    let (n, _) = udp.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"control");
}

#[test]
fn inherited_file_descriptors_are_closed() {
    let dir = TestDir::new("fds");
    let run = Run::new(&dir);
    let outside = dir.join("outside.txt");
    // bash opens fd 5 on a file outside the sandbox and runs netbox with it inherited.
    let netbox = run.command("echo leaked >&5 && echo LEAKED");
    let program = format!("{:?}", netbox.get_program());
    let args: Vec<String> = netbox
        .get_args()
        .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', "'\\''")))
        .collect();
    let script = format!(
        "exec 5>>'{}'; {program} {}",
        outside.display(),
        args.join(" ")
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .current_dir(&run.workspace)
        .output()
        .unwrap();
    assert!(!stdout(&out).contains("LEAKED"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Bad file descriptor"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap_or_default(), "");
    // Control: without netbox the same fd works.
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            &format!("exec 5>>'{}'; echo leaked >&5", outside.display()),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "leaked\n");
}

#[test]
fn sandbox_has_only_loopback_and_proxy_settings() {
    let dir = TestDir::new("env");
    let run = Run::new(&dir).env("NO_PROXY", "localhost,127.0.0.1");
    let out = run.sh(
        "echo \"$HTTPS_PROXY|$http_proxy|$ALL_PROXY|[$NO_PROXY]|$TMPDIR\"; ls /sys/class/net 2>/dev/null | wc -l; \
         tail -n +2 /proc/net/route | awk '{print $1, $2, $3}' | tr '\\n' ';'; echo; hostname",
    );
    let said = stdout(&out);
    let mut lines = said.lines();
    assert_eq!(
        lines.next(),
        Some("http://127.0.0.1:3128|http://127.0.0.1:3128|socks5h://127.0.0.1:3128|[]|/tmp"),
        "{}",
        stderr(&out)
    );
    let _sysfs = lines.next();
    // One route: everything but loopback to capture's link, with no gateway (it leads to
    // netbox's listeners alone: the probe's capture row reads what is at its far end).
    assert_eq!(
        lines.next(),
        Some("nb-capture 00000000 00000000;"),
        "routes: {said}"
    );
    assert_eq!(lines.next(), Some("netbox"));
    // Without capture, none at all.
    let out = Run::new(&TestDir::new("env-no-capture"))
        .arg("--no-capture")
        .sh("tail -n +2 /proc/net/route | wc -l; ls /sys/class/net 2>/dev/null; ip -o link show up | wc -l");
    assert_eq!(stdout(&out).lines().next(), Some("0"), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().last(), Some("1"), "{}", stdout(&out));
}

#[test]
fn nested_user_namespaces_are_refused_unless_allowed() {
    let dir = TestDir::new("nested-userns");
    let run = Run::new(&dir).arg("--quiet");
    let out = run.sh("unshare -U true; echo status=$?");
    assert!(stdout(&out).contains("status=1"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("No space left on device"),
        "{}",
        stderr(&out)
    );
    let probe = run.probe();
    assert!(
        probe.to_string().contains("create a user namespace"),
        "the probe checked it: {probe}"
    );

    // Control: outside netbox the same command works, so the refusal above is netbox's.
    let outside = std::process::Command::new("unshare")
        .args(["-U", "true"])
        .output()
        .unwrap();
    assert!(outside.status.success(), "{}", stderr(&outside));

    let dir = TestDir::new("nested-userns-allowed");
    let run = Run::new(&dir).arg("--quiet").arg("--allow-nested-userns");
    let out = run.sh("unshare -U true; echo status=$?");
    if nix::unistd::getuid().is_root() {
        // As host root, CMD would own the host's cgroup files from a nested namespace.
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("--allow-nested-userns is refused when netbox runs as root"),
            "{}",
            stderr(&out)
        );
    } else {
        // Asked for, a nested user namespace works.
        assert_eq!(stdout(&out), "status=0\n", "{}", stderr(&out));
    }
}

/// Sets up an io_uring of one entry with Python's ctypes; prints the result and errno.
const IO_URING_SETUP: &str =
    "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); \
     p = ctypes.create_string_buffer(120); r = libc.syscall(425, 1, p); \
     print(\"ok\" if r >= 0 else \"errno %d\" % ctypes.get_errno())'";

#[test]
fn io_uring_is_refused_unless_allowed() {
    let dir = TestDir::new("io-uring");
    // Refused as by a kernel without io_uring, so runtimes fall back to plain syscalls.
    let run = Run::new(&dir);
    let out = run.sh(IO_URING_SETUP);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("errno {}\n", libc::ENOSYS));
    let probe = run.probe();
    let row = probe["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "io_uring refused")
        .expect("the probe's io_uring row");
    assert_eq!(row["passed"], true, "{row}");

    // Control: with --allow-io-uring, CMD gets what the host gives (the same call, run
    // here outside netbox), and the probe has no such row.
    let host = std::process::Command::new("sh")
        .args(["-c", IO_URING_SETUP])
        .output()
        .unwrap();
    let allowed = Run::new(&dir)
        .arg("--allow-io-uring")
        .log_at(dir.join("allowed.jsonl"));
    let out = allowed.sh(IO_URING_SETUP);
    assert_eq!(stdout(&out), stdout(&host), "{}", stderr(&out));
    assert!(
        allowed.probe()["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "io_uring refused"),
        "{}",
        allowed.probe()
    );

    // A build whose filter is left out on purpose: the probe catches it, CMD never runs.
    let broken = Run::new(&dir)
        .env("NETBOX_TEST_BREAK", "io-uring")
        .log_at(dir.join("broken.jsonl"));
    let out = broken.sh("echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("ran"));
    assert!(
        stderr(&out).contains("io_uring refused"),
        "{}",
        stderr(&out)
    );
}
