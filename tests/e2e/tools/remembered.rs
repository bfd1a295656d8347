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
    let state = dir.join("state").display().to_string();
    let cache = dir.join("cache-home").display().to_string();
    let run = |extra_env: &[(&str, &str)]| {
        let mut run = Run::new(&dir)
            .args_from(&["--allow-tool", "npm"])
            .env("NPM_CONFIG_USERCONFIG", settings.display().to_string())
            .env("XDG_STATE_HOME", state.clone())
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
            .env("XDG_STATE_HOME", &state)
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
            .env("XDG_STATE_HOME", dir.join("state").display().to_string())
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

/// A command given the directory the answers live in to write cannot leave one there,
/// nor read one (an answer may hold a token the tool printed): the directory is hidden in
/// its sandbox, as in every other, and that run neither reads nor writes it. Control: it
/// writes beside it.
#[test]
fn no_command_can_leave_an_answer_for_a_later_run() {
    let dir = TestDir::outside_tmp("remembered-pinned");
    let state = dir.join("state");
    let answers = state.join("netbox/tool-answers");
    std::fs::create_dir_all(&answers).unwrap();
    let settings = dir.write("npmrc", "registry=https://npm-a.test/\n");
    let with = |extra: &[&str]| {
        Run::new(&dir)
            .log_at(dir.join("elsewhere.jsonl"))
            .args_from(extra)
            .env("NPM_CONFIG_USERCONFIG", settings.display().to_string())
            .env("XDG_STATE_HOME", state.display().to_string())
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    // Remembered by a run that does not write there.
    let _ = with(&["--allow-tool", "npm"]).sh("true");
    let kept = std::fs::read_dir(&answers).unwrap().count();
    assert!(kept > 0, "no answer kept");
    let state_arg = state.join("netbox").display().to_string();
    let out = with(&["--allow-tool", "npm", "--write", &state_arg]).sh(&format!(
        "touch {0}/beside && echo beside; \
         ls -A {1} 2>/dev/null | grep -q . && echo read; \
         touch {1}/planted 2>/dev/null && echo planted; \
         for f in {1}/*; do echo x >> \"$f\" 2>/dev/null && echo changed; done; \
         rm -rf {1} 2>/dev/null && echo removed; true",
        state.join("netbox").display(),
        answers.display()
    ));
    assert_eq!(stdout(&out), "beside\n", "{}", stderr(&out));
    assert!(!stderr(&out).contains(REMEMBERED), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(&answers).unwrap().count(), kept);
}

/// A writable root that is the answers' directory, lies in it, or is an entry of it is
/// refused with one line, whatever names it: CMD would write answers for a later run.
/// Control: a workspace beside it runs.
#[test]
fn a_writable_root_in_the_answers_is_refused() {
    let dir = TestDir::outside_tmp("remembered-roots");
    let state = dir.join("state");
    let settings = dir.write("npmrc", "registry=https://npm-a.test/\n");
    let with = |extra: &[&str]| {
        Run::new(&dir)
            .args_from(extra)
            .env("NPM_CONFIG_USERCONFIG", settings.display().to_string())
            .env("XDG_STATE_HOME", state.display().to_string())
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    let out = with(&["--allow-tool", "npm"]).sh("echo ran");
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    let answers = state.join("netbox/tool-answers");
    let entry = std::fs::read_dir(&answers)
        .unwrap()
        .next()
        .expect("an answer kept")
        .unwrap()
        .path();
    // Another name for the directory: a link to it.
    let alias = dir.join("alias");
    std::os::unix::fs::symlink(&answers, &alias).unwrap();
    std::fs::create_dir_all(answers.join("sub")).unwrap();
    for root in [&answers, &entry, &answers.join("sub"), &alias] {
        let out = with(&["--allow-tool", "npm", "--write", root.to_str().unwrap()]).sh("echo ran");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{}: {err}", root.display());
        assert!(
            err.contains("remembers what package managers said"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(stdout(&out).is_empty());
    }
    // The directory as the workspace itself.
    let out = Command::new(netbox_bin())
        .args(["--", "true"])
        .env("XDG_STATE_HOME", &state)
        .current_dir(&answers)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
}
