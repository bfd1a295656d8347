//! The bridge under test: its policy, its process, and how it is started and stopped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::knobs::Knobs;

pub(crate) struct Bridge {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    /// Its other listeners, in the order it said them (a tenant's own).
    pub(crate) others: Vec<SocketAddr>,
    pub(crate) log: PathBuf,
    /// stderr lines other than the listening line (notes, accept errors).
    pub(crate) said: Arc<Mutex<Vec<String>>>,
}

/// The policy every bridge here holds its clients to: up.test is pinned to loopback and
/// the IP rule opens loopback for that port, as the e2e tests do; denied.test is pinned
/// there too, so a wrong allow would reach it. Returns the file.
pub(crate) fn write_policy(dir: &Path, port: u16) -> PathBuf {
    let policy = format!(
        "allow = [\"up.test:{port}\", \"127.0.0.1:{port}\"]\ndeny = [\"denied.test\"]\n\
         [hosts]\n\"up.test\" = \"127.0.0.1\"\n\"denied.test\" = \"127.0.0.1\"\n"
    );
    let policy_file = dir.join("allow.toml");
    std::fs::write(&policy_file, policy).expect("write the allowlist");
    policy_file
}

/// The token of the shared bridge's one tenant in (e).
pub(crate) const TENANT_TOKEN: &str = "soak-tenant-Xq3Lm8Rv2Tn6Wd";

impl Bridge {
    pub(crate) fn start(k: &Knobs, dir: &Path, port: u16) -> Bridge {
        let policy_file = write_policy(dir, port);
        let args = [
            "--allowlist".into(),
            policy_file.display().to_string(),
            "--max-connections".into(),
            k.max_connections.to_string(),
            // Every attempt is checked against the log: no per-minute bound on refusals.
            "--log-refusals-per-minute".into(),
            "1000000000".into(),
        ];
        Bridge::spawn(k, dir, "events.jsonl", &args, 1)
    }

    /// A shared bridge of one tenant, `t`, named by [`TENANT_TOKEN`] on the shared
    /// listener and by a listener of its own, with `max_connections` places.
    pub(crate) fn start_shared(k: &Knobs, dir: &Path, port: u16, max_connections: usize) -> Bridge {
        write_policy(dir, port);
        let digest: String = {
            use sha2::Digest;
            let bytes = sha2::Sha256::digest(TENANT_TOKEN.as_bytes());
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        };
        let tenants = dir.join("tenants.toml");
        let text = format!(
            "[tenants.t]\nallowlist = [\"allow.toml\"]\nsecrets = [\"sha256:{digest}\"]\n\
             listen = [\"127.0.0.1:0\"]\n"
        );
        std::fs::write(&tenants, text).expect("write the tenants file");
        // The log's default bound on refusals, as a bridge facing a flood runs with: what
        // is measured is the tenants' service, not the log's (which is not checked here).
        let args = [
            "--tenants".into(),
            tenants.display().to_string(),
            "--max-connections".into(),
            max_connections.to_string(),
        ];
        Bridge::spawn(k, dir, "shared.jsonl", &args, 2)
    }

    /// Starts `netbox bridge` with `args` and waits for its `listeners` listening lines.
    pub(crate) fn spawn(
        k: &Knobs,
        dir: &Path,
        log: &str,
        args: &[String],
        listeners: usize,
    ) -> Bridge {
        let log = dir.join(log);
        let mut child = Command::new(&k.netbox)
            .arg("bridge")
            .args(["--listen", "127.0.0.1:0", "--quiet", "--session", "soak"])
            .args(args)
            .arg("--log")
            .arg(&log)
            // Nothing here is resolved; a question would go where nothing answers.
            .args(["--dns", "127.0.0.1:9"])
            .args(["--header-timeout", &format!("{}s", k.header_timeout_secs)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start netbox bridge");
        let stderr = child.stderr.take().expect("bridge stderr");
        let said = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::clone(&said);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                match line.split("listening on ").nth(1) {
                    Some(rest) => {
                        let _ = tx.send(rest.split(' ').next().unwrap_or("").to_owned());
                    }
                    None => lines.lock().expect("stderr lines").push(line),
                }
            }
        });
        let mut addrs: Vec<SocketAddr> = (0..listeners)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(10))
                    .unwrap_or_else(|_| panic!("the bridge did not start: {:?}", said.lock()))
                    .parse()
                    .expect("the bridge's address")
            })
            .collect();
        let addr = addrs.remove(0);
        Bridge {
            child,
            addr,
            others: addrs,
            log,
            said,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}
