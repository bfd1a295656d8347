//! `netbox export`: hostile trees (symlinks, hard links, fifos, oversized files, a file that
//! changes while it is read) are refused one by one, and only plain regular files arrive;
//! a link a sandbox planted on the way of `--from` or `--to` is not followed.

use std::os::unix::fs::symlink;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

fn export(dir: &TestDir, extra: &[&str], paths: &[&str]) -> Output {
    Command::new(netbox_bin())
        .arg("export")
        .arg("--from")
        .arg(dir.join("out"))
        .arg("--to")
        .arg(dir.join("evidence"))
        .args(extra)
        .args(paths)
        .output()
        .unwrap()
}

fn setup(name: &str) -> TestDir {
    let dir = TestDir::new(name);
    std::fs::create_dir_all(dir.join("out/logs")).unwrap();
    std::fs::create_dir_all(dir.join("evidence")).unwrap();
    dir
}

#[test]
fn plain_files_are_copied_and_hostile_ones_refused() {
    let dir = setup("export");
    let out = dir.join("out");
    std::fs::write(out.join("report.txt"), "all good\n").unwrap();
    std::fs::write(out.join("logs/build.log"), "built\n").unwrap();
    symlink("/etc/passwd", out.join("passwd-link")).unwrap();
    symlink("/etc", out.join("etc-dir-link")).unwrap();
    std::fs::write(out.join("original.txt"), "shared\n").unwrap();
    std::fs::hard_link(out.join("original.txt"), out.join("hardlink.txt")).unwrap();
    nix::unistd::mkfifo(
        &out.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    std::fs::write(out.join("big.bin"), vec![7u8; 4096]).unwrap();

    let result = export(
        &dir,
        &["--max-bytes", "1024"],
        &[
            "report.txt",
            "logs/build.log",
            "passwd-link",
            "etc-dir-link/passwd",
            "hardlink.txt",
            "pipe",
            "big.bin",
            "../escape.txt",
            "/etc/passwd",
        ],
    );
    assert_eq!(result.status.code(), Some(1), "{}", stderr(&result));
    let said = stderr(&result);
    for line in [
        "exported report.txt (9 bytes)",
        "exported logs/build.log (6 bytes)",
        "refused passwd-link: it is a symbolic link, not a regular file",
        "refused etc-dir-link/passwd: etc-dir-link is not a plain directory",
        "refused hardlink.txt: it has 2 hard links",
        "refused pipe: it is a fifo, not a regular file",
        "refused big.bin: it is 4096 bytes, over --max-bytes 1024",
        "refused ../escape.txt: only plain relative paths",
        "refused /etc/passwd: only plain relative paths",
    ] {
        assert!(said.contains(line), "missing {line:?} in:\n{said}");
    }
    // Only the two plain files arrived.
    let evidence = dir.join("evidence");
    assert_eq!(
        std::fs::read_to_string(evidence.join("report.txt")).unwrap(),
        "all good\n"
    );
    assert_eq!(
        std::fs::read_to_string(evidence.join("logs/build.log")).unwrap(),
        "built\n"
    );
    let mut arrived: Vec<String> = walk(&evidence);
    arrived.sort();
    assert_eq!(
        arrived,
        vec!["logs/build.log".to_string(), "report.txt".to_string()]
    );

    // Nothing at the destination is overwritten, or followed.
    let again = export(&dir, &[], &["report.txt"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("the destination already exists"),
        "{}",
        stderr(&again)
    );
    std::fs::remove_file(evidence.join("report.txt")).unwrap();
    symlink(
        "/tmp/netbox-export-should-not-exist",
        evidence.join("report.txt"),
    )
    .unwrap();
    let through = export(&dir, &[], &["report.txt"]);
    assert_eq!(through.status.code(), Some(1));
    assert!(!std::path::Path::new("/tmp/netbox-export-should-not-exist").exists());
    // Control: a file not yet at the destination still exports, and `..` stays refused.
    std::fs::write(out.join("late.txt"), "late\n").unwrap();
    let fresh = export(&dir, &[], &["logs/../report.txt", "late.txt"]);
    let said = stderr(&fresh);
    assert!(said.contains("refused logs/../report.txt"), "{said}");
    assert!(said.contains("exported late.txt (5 bytes)"), "{said}");
    assert_eq!(
        std::fs::read_to_string(evidence.join("late.txt")).unwrap(),
        "late\n"
    );
    assert!(stdout(&fresh).is_empty());
}

#[test]
fn a_file_changed_while_read_is_refused() {
    let dir = setup("export-change");
    let path = dir.join("out/growing.log");
    std::fs::write(&path, "first\n").unwrap();
    let child = Command::new(netbox_bin())
        .arg("export")
        .arg("--from")
        .arg(dir.join("out"))
        .arg("--to")
        .arg(dir.join("evidence"))
        .arg("growing.log")
        .env("NETBOX_TEST_EXPORT_PAUSE_MS", "700")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(250));
    std::fs::write(&path, "first\nsecond, written while netbox reads\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused growing.log: it changed while being read")
            || stderr(&out).contains("refused growing.log: it grew while being read"),
        "{} (is netbox built with --features test-hooks?)",
        stderr(&out)
    );
    assert!(!dir.join("evidence/growing.log").exists());
    // Control: untouched, the same file exports.
    let out = export(&dir, &[], &["growing.log"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn walk(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            for inner in walk(&path) {
                found.push(format!("{}/{inner}", entry.file_name().to_string_lossy()));
            }
        } else {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// The names the sandbox chose are printed escaped, so an escape
/// sequence or a carriage return in one cannot forge or erase a line on the terminal.
#[test]
fn names_are_printed_escaped() {
    let dir = setup("export-names");
    let forged = "ok.txt\rexported shadow (1 bytes)\u{1b}[2K";
    std::fs::write(dir.join("out").join(forged), "x").unwrap();
    symlink(
        "/etc/passwd",
        dir.join("out").join("link\u{1b}]0;title\u{7}"),
    )
    .unwrap();
    let out = export(&dir, &[], &[forged, "link\u{1b}]0;title\u{7}"]);
    let said = stderr(&out);
    assert!(!said.contains('\u{1b}') && !said.contains('\r'), "{said:?}");
    assert!(
        said.contains("exported ok.txt\\rexported shadow (1 bytes)\\u{1b}[2K (1 bytes)"),
        "{said:?}"
    );
    assert!(
        said.contains("refused link\\u{1b}]0;title\\u{7}: it is a symbolic link"),
        "{said:?}"
    );
    // Control: the file itself arrived under its own name.
    assert_eq!(
        std::fs::read(dir.join("evidence").join(forged)).unwrap(),
        b"x"
    );
}

/// A sandboxed command plants `A -> DIR`, a directory elsewhere on the host (here under
/// the host's /tmp, which the sandbox cannot even see) holding a secret: `netbox export
/// --from A/B` refuses, naming the link and where it points, and copies nothing; so does
/// `--to A/B`, which would write into that directory. Control: with A a real directory,
/// the same `--from A/B` exports.
#[test]
fn a_link_planted_on_the_way_of_from_or_to_is_not_followed() {
    let dir = TestDir::new("export-from-link");
    let host = dir.join("host");
    std::fs::create_dir_all(host.join("B")).unwrap();
    std::fs::write(host.join("B/secret.txt"), "host secret\n").unwrap();
    let evidence = dir.join("evidence");
    std::fs::create_dir_all(&evidence).unwrap();
    let run = Run::new(&dir).arg("--quiet");
    let planted = run.sh(&format!(
        "ln -s {} A && mkdir -p out && echo report > out/report.txt && echo PLANTED",
        host.display()
    ));
    assert_eq!(stdout(&planted), "PLANTED\n", "{}", stderr(&planted));
    let export_in_workspace = |from: &str, to: &std::path::Path, path: &str| {
        Command::new(netbox_bin())
            .current_dir(&run.workspace)
            .args(["export", "--from", from, "--to"])
            .arg(to)
            .arg(path)
            .output()
            .unwrap()
    };

    let through = export_in_workspace("A/B", &evidence, "secret.txt");
    let said = stderr(&through);
    assert_eq!(through.status.code(), Some(125), "{said}");
    assert!(
        said.contains(&format!(
            "netbox: --from directory A/B: A is a symbolic link (to {}), which netbox export \
             does not follow",
            host.display()
        )),
        "{said}"
    );
    assert_eq!(
        said.lines().filter(|l| l.starts_with("netbox:")).count(),
        1,
        "{said}"
    );
    assert!(walk(&evidence).is_empty(), "copied: {:?}", walk(&evidence));
    // The same link named by an absolute path.
    let absolute = run.workspace.join("A/B");
    let through = export_in_workspace(&absolute.display().to_string(), &evidence, "secret.txt");
    assert_eq!(through.status.code(), Some(125), "{}", stderr(&through));
    assert!(
        stderr(&through).contains(&format!(
            "{} is a symbolic link",
            run.workspace.join("A").display()
        )),
        "{}",
        stderr(&through)
    );
    assert!(walk(&evidence).is_empty());
    // --to through it would write into the host's directory.
    let into = export_in_workspace("out", &run.workspace.join("A/B"), "report.txt");
    assert_eq!(into.status.code(), Some(125), "{}", stderr(&into));
    assert!(
        stderr(&into).contains("--to directory"),
        "{}",
        stderr(&into)
    );
    assert!(!host.join("B/report.txt").exists());

    // Control: A a real directory, the same export goes through.
    std::fs::remove_file(run.workspace.join("A")).unwrap();
    std::fs::create_dir_all(run.workspace.join("A/B")).unwrap();
    std::fs::write(run.workspace.join("A/B/secret.txt"), "workspace file\n").unwrap();
    let plain = export_in_workspace("A/B", &evidence, "secret.txt");
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    assert_eq!(
        std::fs::read_to_string(evidence.join("secret.txt")).unwrap(),
        "workspace file\n"
    );
}

/// A directory named is exported whole: every regular file under it, its directories
/// (empty ones too) made at `--to`, which is made if missing; every other entry (a link
/// to a file or to a directory, a hard link, a fifo) refused by name with why, and nothing
/// reached through a link.
#[test]
fn a_directory_tree_is_exported_entry_by_entry() {
    let dir = TestDir::new("export-tree");
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("site/css/empty")).unwrap();
    std::fs::write(out.join("site/index.html"), "<p>hi</p>\n").unwrap();
    std::fs::write(out.join("site/css/main.css"), "p{}\n").unwrap();
    std::fs::write(out.join("outside.txt"), "not named\n").unwrap();
    symlink("/etc/passwd", out.join("site/passwd")).unwrap();
    symlink("/etc", out.join("site/css/etc")).unwrap();
    std::fs::hard_link(out.join("outside.txt"), out.join("site/linked.txt")).unwrap();
    nix::unistd::mkfifo(
        &out.join("site/pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    // `--to` two levels that do not exist yet.
    let to = dir.join("evidence/run-1");
    let result = Command::new(netbox_bin())
        .arg("export")
        .arg("--from")
        .arg(&out)
        .arg("--to")
        .arg(&to)
        .arg("site")
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(1), "{}", stderr(&result));
    let said = stderr(&result);
    for line in [
        "created ",
        "refused site/passwd: it is a symbolic link, not a regular file",
        "refused site/css/etc: it is a symbolic link, not a regular file",
        "refused site/linked.txt: it has 2 hard links",
        "refused site/pipe: it is a fifo, not a regular file",
        "exported site/: 2 files (14 bytes), 3 directories, 4 refused",
    ] {
        assert!(said.contains(line), "missing {line:?} in:\n{said}");
    }
    // The hard link's refusal says why.
    assert!(said.contains("outside what the sandbox wrote"), "{said}");
    let mut arrived = walk(&to);
    arrived.sort();
    assert_eq!(arrived, ["site/css/main.css", "site/index.html"]);
    assert!(to.join("site/css/empty").is_dir());
    assert!(!to.join("site/css/etc").exists());
    assert!(!to.join("outside.txt").exists());
    // `.` is all of --from; what is already at --to is kept, never overwritten.
    let all = Command::new(netbox_bin())
        .arg("export")
        .arg("--from")
        .arg(&out)
        .arg("--to")
        .arg(&to)
        .arg(".")
        .output()
        .unwrap();
    let said = stderr(&all);
    assert!(
        said.contains("refused site/index.html: the destination already exists"),
        "{said}"
    );
    assert!(
        said.contains("refused outside.txt: it has 2 hard links"),
        "{said}"
    );
    assert!(!said.contains("created "), "{said}");
    // A --to that runs through a link is refused, not made.
    symlink(dir.join("elsewhere"), dir.join("evidence/link")).unwrap();
    let through = Command::new(netbox_bin())
        .arg("export")
        .arg("--from")
        .arg(&out)
        .arg("--to")
        .arg(dir.join("evidence/link/new"))
        .arg("site")
        .output()
        .unwrap();
    assert_eq!(through.status.code(), Some(125), "{}", stderr(&through));
    assert!(!dir.join("elsewhere").exists());
}
