//! Test helpers: a per-test directory, the real `netbox bridge` process, real local
//! upstream servers on 127.0.0.1 (HTTP, TLS with a CA made per test, a raw TCP sink), and
//! real clients (curl, raw sockets). Nothing here talks to anything but loopback.

pub mod credentialed;
pub mod screen;
pub mod upstream;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The netbox binary under test: `NETBOX_BIN` if set (the unprivileged run copies it),
/// else the one cargo built for this test.
pub fn netbox_bin() -> PathBuf {
    std::env::var_os("NETBOX_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_netbox")))
}

/// A directory unique to one test, removed when dropped.
pub struct TestDir {
    pub path: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        TestDir::new_in(&std::env::temp_dir(), name)
    }

    /// A directory under `/var/tmp`: outside the sandbox's private /tmp, so it is visible
    /// (read-only) inside, as a home directory would be.
    pub fn outside_tmp(name: &str) -> TestDir {
        TestDir::new_in(Path::new("/var/tmp"), name)
    }

    /// Removes the `outside_tmp(name)` directories of test processes that are gone: a test
    /// keeps its directory when something may still use it after the test ends.
    pub fn remove_leftovers_outside_tmp(name: &str) {
        for entry in std::fs::read_dir("/var/tmp")
            .into_iter()
            .flatten()
            .flatten()
        {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let pid = file_name
                .strip_prefix("netbox-e2e-")
                .filter(|rest| rest.ends_with(&format!("-{name}")))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// `base/netbox-e2e-PID-N-NAME`, unique to this test.
    fn new_in(base: &Path, name: &str) -> TestDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = base.join(format!("netbox-e2e-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TestDir { path }
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A running `netbox bridge`.
pub struct Bridge {
    child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Bridge {
    /// Starts a bridge on 127.0.0.1 with `allowlist` as its only policy file.
    pub fn start(dir: &TestDir, allowlist: &str, extra: &[&str]) -> Bridge {
        let policy = dir.write("allow.toml", allowlist);
        let mut args: Vec<String> = vec!["--allowlist".into(), policy.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Bridge::start_args(dir, &args)
    }

    pub fn start_args(dir: &TestDir, args: &[String]) -> Bridge {
        Bridge::start_under(dir, &[], args)
    }

    /// [`Bridge::start_args`], the bridge started by `launcher` (a program and its
    /// arguments, `prlimit --nofile=N:N` say) when it is not empty.
    pub fn start_under(dir: &TestDir, launcher: &[&str], args: &[String]) -> Bridge {
        let log = dir.join("events.jsonl");
        let mut command = match launcher.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(netbox_bin());
                command
            }
            None => Command::new(netbox_bin()),
        };
        let mut child = command
            .arg("bridge")
            .args(["--listen", "127.0.0.1:0", "--log"])
            .arg(&log)
            // DNS questions, if any, go to a loopback port where nothing answers.
            .args(["--dns", "127.0.0.1:9", "--session", "e2e"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn netbox bridge");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(rest) = line.split("listening on ").nth(1) {
                        let addr = rest.split(' ').next().unwrap_or("").to_owned();
                        let _ = tx.send(addr);
                    }
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let addr = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(addr) => addr.parse().expect("listen address"),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().unwrap();
                panic!(
                    "bridge did not start ({status}): {:?}",
                    lines.lock().unwrap()
                );
            }
        };
        Bridge {
            child,
            addr,
            log,
            stderr: lines,
        }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// All events logged so far (attempts; not the policy records), waiting briefly for
    /// `at_least` of them.
    pub fn events(&self, at_least: usize) -> Vec<Value> {
        self.records_waiting(at_least, |r| {
            !r["type"].as_str().unwrap_or("").starts_with("policy_")
        })
    }

    /// Every record logged so far, of every type.
    pub fn records(&self) -> Vec<Value> {
        self.records_waiting(0, |_| true)
    }

    fn records_waiting(&self, at_least: usize, wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            // The bridge may be writing a line as it is read: only whole lines count.
            let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
            let events: Vec<Value> = whole
                .lines()
                .map(read_typed_record)
                .filter(|r| wanted(r))
                .collect();
            if events.len() >= at_least || Instant::now() > deadline {
                return events;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The one event for `host`, waiting for it to be written.
    pub fn event_for(&self, host: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found: Vec<Value> = self
                .events(0)
                .into_iter()
                .filter(|e| e["host"] == host)
                .collect();
            if found.len() == 1 {
                return found.into_iter().next().unwrap();
            }
            assert!(found.len() < 2, "more than one event for {host}: {found:?}");
            assert!(Instant::now() < deadline, "no event for {host}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The address on the first stderr line that `line_has` picks, after `said` (`admin
    /// on `, `listening on `), waiting for the bridge to say it.
    fn said_address(&self, line_has: &str, said: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self.stderr().iter().find_map(|l| {
                l.contains(line_has)
                    .then(|| l.split(said).nth(1))
                    .flatten()
                    .and_then(|rest| rest.split(' ').next())
                    .map(str::to_owned)
            });
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "never said {line_has:?}: {:?}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Where the admin listener (`--admin`) is.
    pub fn admin_addr(&self) -> String {
        self.said_address("admin on ", "admin on ")
    }

    /// Where `tenant`'s own listener (its `listen` in the tenants file) is.
    pub fn own_listener(&self, tenant: &str) -> String {
        self.said_address(&format!("session e2e/{tenant},"), "listening on ")
    }

    /// The bridge process's resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
            .expect("VmRSS")
    }

    /// Kills the bridge outright (SIGKILL), as a machine that dies would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the bridge process is still running.
    pub fn is_alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Bridge {
    /// Stops the bridge as a service manager would (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proxy settings a test's own environment may carry, which no test run inherits.
pub const PROXY_VARS: [&str; 8] = [
    "http_proxy",
    "https_proxy",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// A `netbox -- CMD` run in a workspace, with its own event log.
pub struct Run {
    pub workspace: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl Run {
    /// A run whose workspace is `dir/ws` (created) and whose log is `dir/events.jsonl`.
    pub fn new(dir: &TestDir) -> Run {
        let workspace = dir.join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        Run {
            workspace,
            log: dir.join("events.jsonl"),
            args: Vec::new(),
            envs: Vec::new(),
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Run {
        self.args.push(arg.into());
        self
    }

    pub fn args_from(mut self, args: &[&str]) -> Run {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Puts the event log somewhere else (it may not lie inside a writable root).
    pub fn log_at(mut self, path: PathBuf) -> Run {
        self.log = path;
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Run {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// The netbox command line for `bash -c SCRIPT`, ready to spawn.
    pub fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new(netbox_bin());
        cmd.arg("--log")
            .arg(&self.log)
            .args(&self.args)
            .args(["--", "bash", "-c", script])
            .current_dir(&self.workspace)
            .stdin(Stdio::null());
        for var in PROXY_VARS {
            cmd.env_remove(var);
        }
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `bash -c SCRIPT` in the sandbox and waits.
    pub fn sh(&self, script: &str) -> Output {
        self.command(script).output().expect("run netbox")
    }

    /// Runs `argv` itself (no shell: CMD's program is `argv[0]`) in the sandbox and waits.
    pub fn argv(&self, argv: &[&str]) -> Output {
        let cmd = self.command("");
        let args: Vec<std::ffi::OsString> = cmd.get_args().map(ToOwned::to_owned).collect();
        let before = args.iter().position(|a| a == "--").unwrap_or(args.len());
        let mut direct = Command::new(netbox_bin());
        direct
            .args(&args[..before])
            .arg("--")
            .args(argv)
            .current_dir(&self.workspace)
            .stdin(Stdio::null());
        for var in PROXY_VARS {
            direct.env_remove(var);
        }
        for (k, v) in &self.envs {
            direct.env(k, v);
        }
        direct.output().expect("run netbox")
    }

    /// The run's first probe record (with --fetch there is a second, "cut", after it).
    pub fn probe(&self) -> Value {
        self.events()
            .into_iter()
            .find(|e| e["type"] == "probe")
            .expect("a probe record in the event log")
    }

    /// Every record in the run's event log.
    pub fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(read_typed_record)
            .collect()
    }
}

/// Whether a `net` record is the live probe's own attempt: its canary name, or the
/// addresses its capture row dials.
pub fn is_probe_attempt(record: &Value) -> bool {
    let host = record["host"].as_str().unwrap_or("");
    host.ends_with(".invalid") || host == "198.18.0.0" || host == "2001:2::"
}

/// One line of a real event log, which must read back as the type that wrote it (the
/// schema in bridge::log::records, as `netbox log` and `netbox learn` read it): a writer and
/// its reader that drift apart fail every test that reads a log.
pub fn read_typed_record(line: &str) -> Value {
    use bridge::log::Record;
    let record = bridge::log::read_record(line.as_bytes());
    assert!(
        !matches!(
            record,
            Record::Other(..) | Record::Unreadable | Record::Newer(_)
        ),
        "a record netbox cannot read back by its type: {line}"
    );
    serde_json::from_str(line).expect("every log line is JSON")
}

/// Runs curl with no proxy settings inherited from the environment.
pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "60"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("run curl")
}

/// Waits up to 10 s for `path` to exist; fails the test with `why` if it never does.
pub fn wait_for_path(path: &Path, why: &str) {
    wait_for_path_within(path, why, Duration::from_secs(10));
}

/// The same, for work whose time depends on the machine's load (a flood): this is no
/// timing test.
pub fn wait_for_path_within(path: &Path, why: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{why}: {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Sends raw bytes to the bridge and returns everything it answers until it closes,
/// plus how the close looked (`true` for a reset).
pub fn raw_exchange(addr: SocketAddr, request: &[u8]) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    // The bridge may reset before reading everything; that is an answer too.
    let _ = stream.write_all(request);
    read_until_close(&mut stream)
}

/// Reads until EOF or error; returns the text and whether it ended in a reset.
pub fn read_until_close(stream: &mut impl Read) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&got).into_owned(), true)
            }
            Err(e) => panic!("read failed: {e} after {:?}", String::from_utf8_lossy(&got)),
        }
    }
}

/// Reads an HTTP response head (through the blank line) from a stream.
pub fn read_head(stream: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Opens a CONNECT tunnel through the bridge; panics unless it answers 200.
pub fn connect_tunnel(bridge: SocketAddr, target: &str) -> TcpStream {
    let mut stream = TcpStream::connect(bridge).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut stream);
    assert!(head.starts_with("HTTP/1.1 200"), "CONNECT {target}: {head}");
    stream
}

/// Sends a CONNECT through the bridge naming a tenant with Basic `user:secret`: the
/// answer's `HTTP/1.1 NNN` and the stream, whatever the answer was.
pub fn connect_as(
    bridge: SocketAddr,
    target: &str,
    user: &str,
    secret: &str,
) -> (String, TcpStream) {
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"));
    let mut stream = TcpStream::connect(bridge).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {basic}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut stream);
    (head.chars().take(12).collect(), stream)
}

/// A shared bridge (`--tenants`) of team-a and team-b, each named by its secret and held
/// to the allowlist the caller wrote at `a.toml` and `b.toml` in `dir`.
pub fn start_two_tenants(dir: &TestDir, secret_a: &str, secret_b: &str) -> Bridge {
    let tenants = dir.write(
        "tenants.toml",
        &format!(
            "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"sha256:{}\"]\n\
             [tenants.team-b]\nallowlist = [\"b.toml\"]\nsecrets = [\"sha256:{}\"]\n",
            sha256_hex(secret_a.as_bytes()),
            sha256_hex(secret_b.as_bytes())
        ),
    );
    Bridge::start_args(dir, &["--tenants".into(), tenants.display().to_string()])
}

/// Hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(data);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn file_sha256(path: &Path) -> String {
    sha256_hex(&std::fs::read(path).unwrap())
}

/// A bare repository at `dir/bare` (a path under `dir`) with one commit, whose README
/// says `readme`, laid out for git's dumb HTTP protocol too (`update-server-info`).
pub fn bare_repo(dir: &Path, bare: &str, readme: &str) -> PathBuf {
    let src = dir.join(format!("{bare}.src"));
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q"]);
    std::fs::write(src.join("README"), readme).unwrap();
    git(&src, &["add", "README"]);
    git(&src, &["commit", "-q", "-m", "one"]);
    git(
        dir,
        &["clone", "-q", "--bare", &format!("{bare}.src"), bare],
    );
    let at = dir.join(bare);
    git(&at, &["update-server-info"]);
    at
}

/// Runs git with an identity and local file transport allowed; panics unless it works.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.email=t@netbox.test", "-c", "user.name=t"])
        .args([
            "-c",
            "protocol.file.allow=always",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is needed for these tests");
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out)
}
