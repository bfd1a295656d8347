//! Faults, each beside a control without the fault: a side of a tunnel that resets (the
//! other side must see a reset, not a clean end), a panic in the bridge (the run stops:
//! the sandbox loses its network and never gains one), and netbox SIGKILLed at each phase
//! of a run (nothing left running, nothing changed on the host). An upstream that refuses
//! or stalls is in bridge_tunnel.rs, DNS that times out or answers garbage in
//! bypass_battery.rs, a log that cannot be written in log_bounds.rs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::{
    connect_tunnel, curl, read_until_close, stderr, stdout, Bridge, Run, TestDir,
};

/// Closes `stream` with a reset (SO_LINGER 0) instead of a FIN.
fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    nix::sys::socket::setsockopt(&stream.as_fd(), nix::sys::socket::sockopt::Linger, &linger)
        .unwrap();
    drop(stream);
}

const SENT_BEFORE_THE_END: usize = 1000;

/// An upstream that answers a 100,000-byte response with its first 1,000 bytes, then ends
/// the connection: with a reset when `resets`, else with a FIN after the whole body.
fn ending_upstream(resets: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let body_len = if resets { 100_000 } else { SENT_BEFORE_THE_END };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\n\r\n"
            );
            let _ = stream.write_all(&[b'x'; SENT_BEFORE_THE_END]);
            std::thread::sleep(Duration::from_millis(200));
            if resets {
                reset(stream);
            }
        }
    });
    port
}

fn policy(ports: &[u16]) -> String {
    let allow: Vec<String> = ports
        .iter()
        .flat_map(|p| [format!("\"up.test:{p}\""), format!("\"127.0.0.1:{p}\"")])
        .collect();
    format!(
        "allow = [{}]\n[hosts]\n\"up.test\" = \"127.0.0.1\"\n",
        allow.join(", ")
    )
}

/// What a client reading a tunnel to `port` through `bridge` sees at the end: (bytes
/// read, whether it ended in a reset).
fn read_tunnel(bridge: &Bridge, port: u16) -> (usize, bool) {
    let mut stream = connect_tunnel(bridge.addr, &format!("up.test:{port}"));
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: up.test\r\n\r\n")
        .unwrap();
    let (got, reset) = read_until_close(&mut stream);
    (got.len(), reset)
}

#[test]
fn an_upstream_reset_reaches_the_client_as_a_reset() {
    let dir = TestDir::new("upstream-reset");
    let resetting = ending_upstream(true);
    let clean = ending_upstream(false);
    let bridge = Bridge::start(&dir, &policy(&[resetting, clean]), &[]);

    // CONNECT: the client's read ends in a reset, as the upstream's did.
    let (got, was_reset) = read_tunnel(&bridge, resetting);
    assert!(
        was_reset,
        "the upstream's reset reached the client as a clean end"
    );
    // What the upstream sent before its reset arrived all the same.
    assert!(got >= SENT_BEFORE_THE_END, "{got} bytes");
    // Control: an upstream that ends cleanly ends cleanly for the client, every byte there.
    let (got, was_reset) = read_tunnel(&bridge, clean);
    assert!(!was_reset, "a clean end reached the client as a reset");
    assert!(got >= SENT_BEFORE_THE_END, "{got} bytes");

    // SOCKS5 likewise.
    for (port, want_reset) in [(resetting, true), (clean, false)] {
        let mut stream = TcpStream::connect(bridge.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(&[0x05, 0x01, 0x00]).unwrap();
        let mut choice = [0u8; 2];
        stream.read_exact(&mut choice).unwrap();
        let mut request = vec![0x05, 0x01, 0x00, 0x01, 127, 0, 0, 1];
        request.extend_from_slice(&port.to_be_bytes());
        stream.write_all(&request).unwrap();
        let mut reply = [0u8; 10];
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(reply[1], 0x00, "SOCKS5 reply to port {port}");
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: up.test\r\n\r\n")
            .unwrap();
        let (_, was_reset) = read_until_close(&mut stream);
        assert_eq!(was_reset, want_reset, "SOCKS5 to port {port}");
    }

    // A forwarded request: the client is told the response broke off (curl: 18, partial
    // file, or 56, receive failure), never given a short body as a success.
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        "-o",
        "/dev/null",
        &format!("http://up.test:{resetting}/"),
    ]);
    assert!(
        matches!(out.status.code(), Some(18 | 56)),
        "{:?} {}",
        out.status,
        stderr(&out)
    );
    let out = curl(&[
        "-x",
        &bridge.proxy_url(),
        "-o",
        "/dev/null",
        &format!("http://up.test:{clean}/"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));

    // The log says which side broke the tunnels.
    let events = bridge.events(6);
    let ends: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["proto"] != "http_forward")
        .map(|e| {
            (
                e["dialed"].as_str().unwrap_or(""),
                e["end"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let resetting_at = format!("127.0.0.1:{resetting}");
    assert!(
        ends.iter()
            .filter(|(dialed, _)| *dialed == resetting_at)
            .all(|(_, end)| *end == "upstream_error"),
        "{ends:?}"
    );
    assert!(
        ends.iter()
            .filter(|(dialed, _)| *dialed != resetting_at)
            .all(|(_, end)| *end == "closed"),
        "{ends:?}"
    );
}

/// A tunnel the bridge ends because nothing moved (an upstream that stalled mid-response)
/// ends in a reset too, for the client and for the upstream.
#[test]
fn a_tunnel_ended_idle_is_reset_on_both_sides() {
    let dir = TestDir::new("idle-reset");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (ended, endings) = mpsc::channel();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = [0u8; 512];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
            let _ = stream.write_all(&[b'x'; SENT_BEFORE_THE_END]);
            // Stall; then see how the bridge leaves.
            let end = match stream.read(&mut head) {
                Ok(0) => "eof",
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => "reset",
                _ => "other",
            };
            let _ = ended.send(end);
        }
    });
    let bridge = Bridge::start(&dir, &policy(&[port]), &["--idle-timeout", "1s"]);
    let (got, was_reset) = read_tunnel(&bridge, port);
    assert!(was_reset, "an idle tunnel ended cleanly after {got} bytes");
    assert!(got >= SENT_BEFORE_THE_END, "{got} bytes");
    assert_eq!(
        endings.recv_timeout(Duration::from_secs(10)).unwrap(),
        "reset"
    );
    assert_eq!(bridge.events(1)[0]["end"], "idle_timeout");
}

/// The other way: a client that resets its tunnel gets the upstream's connection reset.
#[test]
fn a_client_reset_reaches_the_upstream_as_a_reset() {
    let dir = TestDir::new("client-reset");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (ended, endings) = mpsc::channel();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 64];
            let end = loop {
                match stream.read(&mut buf) {
                    Ok(0) => break "eof",
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break "reset",
                    Err(_) => break "error",
                }
            };
            let _ = ended.send(end);
        }
    });
    let bridge = Bridge::start(&dir, &policy(&[port]), &[]);
    for (client_resets, want) in [(true, "reset"), (false, "eof")] {
        let mut stream = connect_tunnel(bridge.addr, &format!("up.test:{port}"));
        stream.write_all(b"hello").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        if client_resets {
            reset(stream);
        } else {
            drop(stream);
        }
        let end = endings.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(end, want, "client reset: {client_resets}");
    }
}

/// A panic in the bridge stops the run with 125 and takes CMD with it. Control: the same
/// request without the panic is refused (not on the allowlist) and CMD goes on.
#[test]
fn a_panic_in_the_bridge_stops_the_run() {
    let dir = TestDir::new("bridge-panic");
    let script = "curl -sS --max-time 5 -o /dev/null http://bridge-panic.test/; \
                  sleep 3; echo LATE > late.txt; echo LATE";
    let control = Run::new(&dir).arg("--quiet").sh(script);
    assert_eq!(control.status.code(), Some(0), "{}", stderr(&control));
    assert_eq!(stdout(&control), "LATE\n", "{}", stderr(&control));
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("NETBOX_TEST_BREAK", "bridge-panic");
    std::fs::remove_file(run.workspace.join("late.txt")).unwrap();

    let started = Instant::now();
    let out = run.sh(&format!(
        "{script} # marker-bridge-panic-{}",
        std::process::id()
    ));
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("netbox: internal error, the run was stopped:")
            && stderr(&out).contains("test hook: a request for bridge-panic.test"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() < Duration::from_secs(3), "CMD ran on");
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        !run.workspace.join("late.txt").exists(),
        "CMD outlived the panic"
    );
    assert!(!any_process_with(&format!(
        "marker-bridge-panic-{}",
        std::process::id()
    )));
}

/// The same with stderr a pipe nobody reads, filled by CMD: the panic still stops the run
/// at once (the message is given up rather than waited on).
#[test]
fn a_panic_stops_the_run_even_when_stderr_is_full() {
    let dir = TestDir::new("bridge-panic-full-stderr");
    let run = Run::new(&dir)
        .arg("--quiet")
        .env("NETBOX_TEST_BREAK", "bridge-panic");
    // 65,536 bytes: a pipe's whole buffer.
    let mut child = run
        .command(
            "head -c 65536 /dev/zero >&2; \
             curl -s --max-time 5 -o /dev/null http://bridge-panic.test/; \
             sleep 3; echo LATE > late.txt",
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "netbox hung on a full stderr");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(125));
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        !run.workspace.join("late.txt").exists(),
        "CMD outlived the panic"
    );
}

fn any_process_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline).contains(marker)
    })
}

/// netbox SIGKILLed while pid 1 sets up the mounts, while `--fetch`'s CMD1 runs with the
/// network, and while CMD runs: each time nothing of the run is left running, the host's
/// mount table is as it was, and the next run clears the placeholder the killed one left.
#[test]
fn sigkill_at_each_phase_leaves_nothing_behind() {
    let mounts_before = host_mounts();
    for phase in ["mounts", "fetch", "cmd"] {
        let dir = TestDir::new(&format!("sigkill-{phase}"));
        let marker = format!("marker-sigkill-{phase}-{}", std::process::id());
        let mut run = Run::new(&dir).arg("--quiet");
        run = match phase {
            "mounts" => run.env("NETBOX_TEST_MOUNT_PAUSE_MS", "3000"),
            "fetch" => run
                .arg("--fetch")
                .arg(format!("sleep 300; : {marker}-fetch")),
            _ => run,
        };
        let mut child = run
            .command(&format!("sleep 300; : {marker}"))
            .spawn()
            .unwrap();
        // Until the phase is reached: pid 1 exists (a second process with the marker in
        // its arguments), CMD1 runs, or CMD runs.
        let reached = |cmdlines: &[String]| match phase {
            "mounts" => cmdlines.len() >= 2,
            "fetch" => cmdlines
                .iter()
                .any(|c| c.starts_with("/bin/sh\0-c\0") && c.contains("-fetch")),
            _ => cmdlines.iter().any(|c| c.starts_with("bash\0")),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !reached(&processes_with(&marker)) {
            assert!(Instant::now() < deadline, "{phase}: never reached");
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap();
        let _ = child.wait();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !processes_with(&marker).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{phase}: left running: {:?}",
                processes_with(&marker)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            host_mounts(),
            mounts_before,
            "{phase}: the host's mounts changed"
        );
        // The next run in the same workspace clears what the killed one left.
        let next = Run::new(&dir).arg("--quiet").sh("true");
        assert_eq!(next.status.code(), Some(0), "{phase}: {}", stderr(&next));
        assert!(
            !Run::new(&dir).workspace.join(".git").exists(),
            "{phase}: a placeholder was left"
        );
    }
}

/// Command lines (NUL-separated) of the processes whose arguments contain `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .filter(|c| c.contains(marker))
        .collect()
}

/// The mount points this process sees, in order.
fn host_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(4).unwrap_or("").to_owned())
        // A container engine's own (containers.rs runs podman meanwhile, which mounts
        // its storage once on first use): never netbox's.
        .filter(|at| !at.starts_with("/var/lib/containers/") && !at.starts_with("/run/containers/"))
        .collect()
}
