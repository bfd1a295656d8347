//! What pip and npm answered is used again by the next run only while nothing it depends
//! on changed: the settings files they read, their environment, their programs. And no
//! command can leave an answer for a later run.

use std::process::Command;

use crate::support::{netbox_bin, stderr, stdout, Run, TestDir};

const REMEMBERED: &str = "as an earlier run was told (its settings unchanged)";

/// Rewrites `file` with `text` of the same length, its modification time set back: only
/// its change time says it changed.
fn rewrite_in_place(file: &std::path::Path, text: &str) {
    let before = std::fs::metadata(file).unwrap();
    assert_eq!(before.len(), text.len() as u64);
    std::fs::write(file, text).unwrap();
    std::fs::File::options()
        .write(true)
        .open(file)
        .unwrap()
        .set_modified(before.modified().unwrap())
        .unwrap();
}

/// npm's user settings (a file of the user's, outside every root) name a registry: the
/// first run asks npm, the next is told what npm said; a rewrite of the file (same size,
/// same modification time), another variable, another file appearing each make npm be
/// asked again and its new answer used.
#[test]
fn npms_answer_is_used_again_only_while_its_settings_are_unchanged() {
    let dir = TestDir::new("remembered-npm");
    let settings = dir.write("npmrc", "registry=https://npm-a.test/\n");
    let cache = dir.join("cache-home").display().to_string();
    let run = |extra_env: &[(&str, &str)]| {
        let mut run = Run::new(&dir)
            .args_from(&["--allow-tool", "npm"])
            .env("NPM_CONFIG_USERCONFIG", settings.display().to_string())
            .env("XDG_CACHE_HOME", cache.clone());
        for (k, v) in extra_env {
            run = run.env(k, *v);
        }
        run.sh("true")
    };
    // What `netbox tools npm` finds, which asks the same way.
    let hosts = || {
        let out = Command::new(netbox_bin())
            .args(["tools", "npm"])
            .env("NPM_CONFIG_USERCONFIG", &settings)
            .current_dir(dir.join("ws"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let said = |out: &std::process::Output| {
        assert!(out.status.success(), "{}", stderr(out));
        stderr(out).contains(REMEMBERED)
    };
    assert!(!said(&run(&[])), "the first run asks npm");
    assert!(said(&run(&[])), "the second is told what npm said");
    assert!(hosts().contains("\"npm-a.test:443\""), "{}", hosts());

    // The same size, the modification time set back: asked again, and the new registry.
    rewrite_in_place(&settings, "registry=https://npm-b.test/\n");
    assert!(!said(&run(&[])));
    assert!(hosts().contains("\"npm-b.test:443\""), "{}", hosts());
    assert!(!hosts().contains("npm-a.test"), "{}", hosts());
    assert!(said(&run(&[])));

    // Another variable npm reads: another question.
    let other = [("npm_config_registry", "https://npm-c.test/")];
    assert!(!said(&run(&other)));
    assert!(said(&run(&other)));
    assert!(said(&run(&[])), "the first answer stands beside it");
}

/// A file pip reads that did not exist when pip answered appears: pip is asked again.
#[test]
fn a_pip_settings_file_that_appears_makes_pip_asked_again() {
    let dir = TestDir::new("remembered-pip");
    let config_home = dir.join("config");
    let run = || {
        let out = Run::new(&dir)
            .args_from(&["--allow-tool", "pip"])
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
            .env("XDG_CONFIG_HOME", config_home.display().to_string())
            .env("PIP_INDEX_URL", "")
            .sh("true");
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    let first = run();
    if first.contains("pip did not answer") {
        eprintln!("no pip for this user: nothing to test");
        return;
    }
    assert!(!first.contains(REMEMBERED), "{first}");
    assert!(run().contains(REMEMBERED));
    std::fs::create_dir_all(config_home.join("pip")).unwrap();
    std::fs::write(
        config_home.join("pip/pip.conf"),
        "[global]\nindex-url = https://pypi-mirror.test/simple/\n",
    )
    .unwrap();
    let after = run();
    assert!(!after.contains(REMEMBERED), "{after}");
    assert!(after.contains("index-url in pip's"), "{after}");
    assert!(run().contains(REMEMBERED));
}

/// The answers live where no sandbox shows them (the host's /dev/shm; every sandbox has
/// its own): a command can neither read one (an answer may hold a token a tool printed)
/// nor leave one for a later run, whatever it is given, and the directory can be given
/// to no command. Control: the host has the answer, and the command writes its workspace.
#[test]
fn no_command_sees_or_touches_the_answers() {
    use std::os::unix::fs::MetadataExt;
    let dir = TestDir::outside_tmp("remembered-unseen");
    let settings = dir.write("npmrc", "registry=https://npm-a.test/\n");
    let uid = std::fs::metadata(&dir.path).unwrap().uid();
    let answers = std::path::PathBuf::from(format!("/dev/shm/netbox-{uid}/tool-answers"));
    let with = |extra: &[&str]| {
        Run::new(&dir)
            .args_from(extra)
            .env("NPM_CONFIG_USERCONFIG", settings.display().to_string())
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    let out = with(&["--allow-tool", "npm"]).sh("true");
    assert!(out.status.success(), "{}", stderr(&out));
    let kept = std::fs::read_dir(&answers).unwrap().count();
    assert!(kept > 0, "no answer kept");
    let out = with(&["--allow-tool", "npm", "--tmp", "host"]).sh(&format!(
        "echo ok > written && cat written; \
         ls -A {0} 2>/dev/null && echo seen; \
         mkdir -p {0} 2>/dev/null && touch {0}/planted 2>/dev/null; true",
        answers.display()
    ));
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
    assert!(stderr(&out).contains(REMEMBERED), "{}", stderr(&out));
    assert!(!answers.join("planted").exists());
    for flags in [
        vec!["--write", answers.to_str().unwrap()],
        vec!["--bind", answers.to_str().unwrap(), "/tmp/x"],
        vec!["--ro-bind", answers.to_str().unwrap(), "/tmp/x"],
    ] {
        let mut all = vec!["--allow-tool", "npm"];
        all.extend(flags.iter().copied());
        let out = with(&all).sh("echo ran");
        assert_eq!(out.status.code(), Some(125), "{flags:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
        assert!(stdout(&out).is_empty());
    }
}
