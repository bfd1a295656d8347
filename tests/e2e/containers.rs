//! netbox inside a real container engine (podman, with runc), in a small Debian image made
//! with debootstrap from this machine's own Debian mirror (tests/container-image.sh), the
//! debug netbox copied in. Each row of the table below either runs, with the live probe
//! holding every control (`netbox verify`) and the walkthrough's boundaries in a real run,
//! or is refused with the one line that names the setting to change: never a bare EPERM
//! from a step. As root in the container and as uid 65534.
//!
//! Skipped, with a message, where podman cannot run containers (not root, no podman): CI
//! installs it (.ci/run).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{stderr, stdout, TestDir};

/// Docker's own default seccomp profile, as Debian ships it (golang-github-docker-docker-dev).
const DOCKER_DEFAULT: &str =
    "/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json";
const IMAGE: &str = "localhost/netbox-test:trixie";

/// What a row must show.
#[derive(Clone, Copy)]
enum Expect {
    /// The probe holds every control and the walkthrough's run does what it should.
    Runs,
    /// netbox refuses with exit 125, and its hint names this setting.
    Refuses(&'static str),
}

struct Row {
    name: &'static str,
    args: Vec<String>,
    user: Option<&'static str>,
    expect: Expect,
    /// netbox's own options for the row (`--cpus 1`).
    netbox: &'static [&'static str],
}

/// podman with the settings these machines need (crun refuses this kernel's hybrid
/// cgroups; the rlimits cannot be raised past the host's).
fn podman() -> Command {
    let mut command = Command::new("podman");
    command.args([
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--ulimit",
        "nofile=1024:4096",
        "--ulimit",
        "nproc=4096:4096",
        // Loopback only: everything the rows reach is inside the container.
        "--network",
        "none",
    ]);
    command
}

/// Whether podman can run a container here; why not, otherwise.
fn engine_ready() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("podman's containers need root here (rootless podman is not set up)".into());
    }
    match Command::new("podman").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Err("podman is not installed (apt-get install podman runc)".into()),
    }
    if Command::new("debootstrap")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err("debootstrap is not installed".into());
    }
    Ok(())
}

fn build_image() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/container-image.sh");
    let out = Command::new("bash").arg(&script).output().unwrap();
    assert!(out.status.success(), "the test image: {}", stderr(&out));
    PathBuf::from(stdout(&out).trim())
}

/// The walkthrough, inside: the home directory and the system are read-only, the workspace
/// and /tmp writable, `.git/config` read-only; an allowed HTTP server (started in the
/// container, reached by its name through the bridge) answers and another name is
/// refused with 502.
const WALKTHROUGH: &str = r#"set -u
cd /nb/ws
git init -q . 2>/dev/null
python3 -m http.server 8000 --bind 127.0.0.1 --directory /nb/site >/dev/null 2>&1 &
server=$!
for _ in $(seq 50); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8000))' 2>/dev/null && break; sleep 0.1; done
/nb/netbox --quiet --log /tmp/events.jsonl --allowlist /nb/allow.toml -- sh -c '
  (echo x > "$HOME/escape" ) 2>/dev/null && echo "home WRITTEN" || echo "home refused"
  (echo x > /etc/escape ) 2>/dev/null && echo "etc WRITTEN" || echo "etc refused"
  (echo x > .git/config ) 2>/dev/null && echo "git WRITTEN" || echo "git refused"
  echo kept > out.txt && echo tmp > /tmp/t && cat /tmp/t
  curl -s --max-time 10 http://files.test:8000/hello.txt
  curl -s -o /dev/null -w "%{http_code}\n" --max-time 10 http://other.test:8000/
'
echo "rc=$?"
kill $server
"#;

fn run_row(row: &Row, stage: &Path) -> Result<String, String> {
    let mut verify = podman();
    verify.args(&row.args);
    if let Some(user) = row.user {
        verify.args(["--user", user]);
    }
    let volume = format!("{}:/nb", stage.display());
    verify.args(["-v", &volume, "-w", "/nb/ws", "-e", "HOME=/nb/home", IMAGE]);
    let mut walk = podman();
    walk.args(&row.args);
    if let Some(user) = row.user {
        walk.args(["--user", user]);
    }
    walk.args(["-v", &volume, "-w", "/nb/ws", "-e", "HOME=/nb/home", IMAGE]);
    verify.args(["/nb/netbox", "verify", "--log", "/tmp/events.jsonl"]);
    verify.args(row.netbox);
    let out: Output = verify.output().map_err(|e| format!("podman: {e}"))?;
    let said = format!("{}{}", stdout(&out), stderr(&out));
    match row.expect {
        Expect::Refuses(setting) => {
            // On the hint line, or (a limit refused before the sandbox is built) the
            // error's own.
            let line = said
                .lines()
                .find(|l| {
                    (l.starts_with("hint: ") || l.starts_with("netbox: ")) && l.contains(setting)
                })
                .unwrap_or("");
            if out.status.code() == Some(125) && !line.is_empty() {
                Ok(format!(
                    "refuses: {}",
                    line.trim_start_matches("hint: ")
                        .trim_start_matches("netbox: ")
                ))
            } else {
                Err(format!(
                    "expected a refusal naming {setting}, got exit {:?}: {said}",
                    out.status.code()
                ))
            }
        }
        Expect::Runs => {
            let holds = said.lines().filter(|l| l.starts_with("HOLDS")).count();
            let fails = said.lines().filter(|l| l.starts_with("FAILS")).count();
            if !out.status.success() || fails > 0 || holds == 0 {
                return Err(format!(
                    "netbox verify: exit {:?}: {said}",
                    out.status.code()
                ));
            }
            walk.args(["bash", "-c", WALKTHROUGH]);
            let out = walk.output().map_err(|e| format!("podman: {e}"))?;
            let want = "home refused\netc refused\ngit refused\ntmp\nhello from the container\n502\nrc=0\n";
            if stdout(&out) != want {
                return Err(format!(
                    "the walkthrough said {:?}, not {want:?}: {}",
                    stdout(&out),
                    stderr(&out)
                ));
            }
            let kept = std::fs::read_to_string(stage.join("ws/out.txt")).unwrap_or_default();
            if kept != "kept\n" {
                return Err(format!("the workspace write did not land ({kept:?})"));
            }
            Ok(format!("runs, probe holds ({holds} controls)"))
        }
    }
}

/// A fresh directory for one row: the binary, a workspace, a home, the site the allowed
/// server serves, and the allowlist naming it; all writable by uid 65534 too.
fn stage(dir: &TestDir, name: &str) -> PathBuf {
    let stage = dir.join(name);
    for sub in ["ws", "home", "site"] {
        std::fs::create_dir_all(stage.join(sub)).unwrap();
    }
    std::fs::copy(crate::support::netbox_bin(), stage.join("netbox")).unwrap();
    std::fs::write(stage.join("site/hello.txt"), "hello from the container\n").unwrap();
    std::fs::write(
        stage.join("allow.toml"),
        "allow = [\"files.test:8000\"]\nallow_private = [\"files.test:8000\"]\n[hosts]\n\"files.test\" = \"127.0.0.1\"\n",
    )
    .unwrap();
    Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&stage)
        .status()
        .unwrap();
    Command::new("chmod")
        .args(["755"])
        .arg(stage.join("netbox"))
        .status()
        .unwrap();
    stage
}

#[test]
fn inside_podman_each_setting_runs_with_the_probe_holding_or_names_its_fix() {
    if let Err(why) = engine_ready() {
        eprintln!("containers: skipped: {why}");
        return;
    }
    build_image();
    let dir = TestDir::new("containers");
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/seccomp");
    let seccomp = |file: &str| format!("seccomp={}", deploy.join(file).display());
    let opt = |v: &str| vec!["--security-opt".to_owned(), v.to_owned()];
    let unmasked = opt("systempaths=unconfined");
    let with = |a: Vec<String>, b: Vec<String>| a.into_iter().chain(b).collect::<Vec<_>>();
    let cap_drop = vec!["--cap-drop".to_owned(), "ALL".to_owned()];
    // The container's root in a user namespace of its own, as the documented setting
    // asks: unmasked, a root that is the host's could write the host's /proc/sys.
    let userns: Vec<String> = ["--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536"]
        .map(String::from)
        .to_vec();
    let mut rows = vec![
        Row {
            name: "podman's defaults, root",
            args: vec![],
            user: None,
            expect: Expect::Refuses("--security-opt systempaths=unconfined"),
            netbox: &[],
        },
        Row {
            name: "podman's defaults, uid 65534",
            args: vec![],
            user: Some("65534:65534"),
            expect: Expect::Refuses("--security-opt systempaths=unconfined"),
            netbox: &[],
        },
        Row {
            name: "--cap-drop ALL, systempaths=unconfined, root",
            args: with(cap_drop.clone(), unmasked.clone()),
            user: None,
            expect: Expect::Refuses("CAP_SETFCAP"),
            netbox: &[],
        },
        Row {
            name: "--cap-drop ALL, systempaths=unconfined, uid 65534",
            args: with(cap_drop.clone(), unmasked.clone()),
            user: Some("65534:65534"),
            expect: Expect::Runs,
            netbox: &[],
        },
        Row {
            name: "systempaths=unconfined in a user namespace (the documented setting), root",
            args: with(unmasked.clone(), userns.clone()),
            user: None,
            expect: Expect::Runs,
            netbox: &[],
        },
        Row {
            name: "systempaths=unconfined (the documented setting), uid 65534",
            args: unmasked.clone(),
            user: Some("65534:65534"),
            expect: Expect::Runs,
            netbox: &[],
        },
        Row {
            name: "deploy/seccomp/netbox-podman.json, systempaths=unconfined, uid 65534",
            args: with(opt(&seccomp("netbox-podman.json")), unmasked.clone()),
            user: Some("65534:65534"),
            expect: Expect::Runs,
            netbox: &[],
        },
        Row {
            name: "deploy/seccomp/netbox-docker.json, systempaths=unconfined, root in a user namespace",
            args: with(
                with(opt(&seccomp("netbox-docker.json")), unmasked.clone()),
                userns.clone(),
            ),
            user: None,
            expect: Expect::Runs,
            netbox: &[],
        },
        Row {
            name: "deploy/seccomp/netbox-docker.json, systempaths=unconfined, uid 65534",
            args: with(opt(&seccomp("netbox-docker.json")), unmasked.clone()),
            user: Some("65534:65534"),
            expect: Expect::Runs,
            netbox: &[],
        },
        Row {
            name: "--cpus 1 inside the container, systempaths=unconfined, root",
            args: unmasked.clone(),
            user: None,
            expect: Expect::Refuses("set them on the container (--cpus, --memory, --pids-limit)"),
            netbox: &["--cpus", "1"],
        },
    ];
    if Path::new(DOCKER_DEFAULT).exists() {
        for (name, user) in [
            (
                "Docker's default seccomp profile, systempaths=unconfined, root",
                None,
            ),
            (
                "Docker's default seccomp profile, systempaths=unconfined, uid 65534",
                Some("65534:65534"),
            ),
        ] {
            rows.push(Row {
                name,
                args: with(opt(&format!("seccomp={DOCKER_DEFAULT}")), unmasked.clone()),
                user,
                expect: Expect::Refuses("seccomp="),
                netbox: &[],
            });
        }
    } else {
        eprintln!(
            "containers: Docker's default profile is missing ({DOCKER_DEFAULT}: apt-get install \
             golang-github-docker-docker-dev): its rows are left out"
        );
    }
    let mut table = String::new();
    let mut failed = Vec::new();
    for (at, row) in rows.iter().enumerate() {
        let stage = stage(&dir, &format!("row{at}"));
        match run_row(row, &stage) {
            Ok(said) => table.push_str(&format!("| {} | {said} |\n", row.name)),
            Err(why) => {
                table.push_str(&format!("| {} | FAILED |\n", row.name));
                failed.push(format!("{}: {why}", row.name));
            }
        }
    }
    eprintln!("{table}");
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
