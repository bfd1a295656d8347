//! README's "What you see" section, run as written: every `$ netbox …` command in its
//! examples runs with the real binary, and its output must be the output README shows,
//! line for line (in any order, since netbox and CMD write to the terminal concurrently).
//! Volatile parts are compared loosely: numbers and hex ids, the workspace and home
//! paths, and `…` in README, which stands for anything. A README that drifts from what
//! netbox prints fails here.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::upstream::HttpServer;
use crate::support::{netbox_bin, TestDir, PROXY_VARS};

const README: &str = include_str!("../../README.md");

/// The workspace and home README's examples show; the test's own are put in their place.
const README_WORKSPACE: &str = "/srv/demo/project";
const README_HOME: &str = "/root";
/// The port README's local registry listens on; the test's server has its own.
const README_PORT: &str = ":8080";

/// One `$ COMMAND` line of an example and the lines README shows after it.
struct Step {
    command: String,
    shown: Vec<String>,
}

#[test]
fn readme_examples_print_what_readme_shows() {
    let steps = what_you_see_steps();
    assert!(
        steps
            .iter()
            .filter(|s| s.command.starts_with("netbox "))
            .count()
            >= 4,
        "README's \"What you see\" lost its examples"
    );

    let dir = TestDir::new("readme");
    let home = TestDir::outside_tmp("readme-home");
    let workspace = dir.join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(netbox_bin(), bin.join("netbox")).unwrap();
    let registry_root = dir.join("registry");
    std::fs::create_dir_all(registry_root.join("simple")).unwrap();
    std::fs::write(
        registry_root.join("simple/index.json"),
        "<a href=\"demo/\">demo</a>\n",
    )
    .unwrap();
    let registry = HttpServer::start_files(registry_root);
    let port = format!(":{}", registry.port());

    let mut ran = 0;
    for step in &steps {
        if let Some(file) = step.command.strip_prefix("cat ") {
            // README shows a file: the test writes it as shown.
            let contents: String = step
                .shown
                .iter()
                .map(|l| format!("{}\n", l.replace(README_PORT, &port)))
                .collect();
            std::fs::write(workspace.join(file), contents).unwrap();
            continue;
        }
        assert!(
            step.command.starts_with("netbox "),
            "README example runs `{}`, which this test does not know how to run",
            step.command
        );
        let command = step.command.replace(README_PORT, &port);
        let out = run_as_shown(&command, &workspace, &home.path, &bin);
        let actual: Vec<String> = lines_apart(&out)
            .iter()
            .map(|l| normalise(&put_readme_paths(l, &workspace, &home.path)))
            .collect();
        let shown: Vec<String> = step.shown.iter().map(|l| normalise(l)).collect();
        let missing: Vec<&String> = shown
            .iter()
            .filter(|s| !actual.iter().any(|a| matches_shown(a, s)))
            .collect();
        let unshown: Vec<&String> = actual
            .iter()
            .filter(|a| !shown.iter().any(|s| matches_shown(a, s)))
            .collect();
        assert!(
            missing.is_empty() && unshown.is_empty(),
            "README's example `$ {}` no longer matches what netbox prints.\n\
             shown in README but not printed: {missing:#?}\n\
             printed but not shown in README: {unshown:#?}\n\
             full output:\n{out}",
            step.command
        );
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} README examples ran");
}

/// The `$ ` steps of the fenced blocks in README's "What you see" section.
fn what_you_see_steps() -> Vec<Step> {
    let section = README
        .split("\n## What you see\n")
        .nth(1)
        .expect("README has a \"## What you see\" section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_owned(),
                shown: Vec::new(),
            });
        } else {
            steps
                .last_mut()
                .expect("a README example block starts with a `$ ` command")
                .shown
                .push(line.to_owned());
        }
    }
    steps
}

/// Runs COMMAND with `sh` as a user would type it, in the workspace, with this test's
/// netbox first on PATH and its own home; stdout and stderr as one stream.
fn run_as_shown(command: &str, workspace: &Path, home: &Path, bin: &Path) -> String {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("exec 2>&1; {command}"))
        .current_dir(workspace)
        .env("PATH", path)
        .env("HOME", home)
        .stdin(Stdio::null());
    let xdg = ["XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"];
    for var in xdg.iter().chain(&PROXY_VARS) {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("run sh");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The output's lines, with netbox's own lines taken apart from CMD's: each of netbox's
/// lines is one write, but CMD (dash, say) may write one line in several, and netbox's
/// can land between them (`sh: 1: netbox: blocked write …\ncannot create …`), as on a
/// terminal. (No README example has CMD print "netbox: " itself.)
fn lines_apart(out: &str) -> Vec<String> {
    let mut ours = Vec::new();
    let mut theirs = String::new();
    let mut rest = out;
    while let Some(at) = rest.find("netbox: ") {
        theirs.push_str(&rest[..at]);
        let line_end = rest[at..].find('\n').map_or(rest.len(), |n| at + n + 1);
        ours.push(rest[at..line_end].trim_end_matches('\n').to_owned());
        rest = &rest[line_end..];
    }
    theirs.push_str(rest);
    ours.extend(theirs.lines().map(str::to_owned));
    ours
}

/// The test's workspace and home written as README's.
fn put_readme_paths(line: &str, workspace: &Path, home: &Path) -> String {
    line.replace(&workspace.display().to_string(), README_WORKSPACE)
        .replace(&home.display().to_string(), README_HOME)
}

/// Every run of hex digits that holds a digit (counts, sizes, times, ports, ids) as `N`,
/// and runs of blanks as one space (column widths follow the numbers).
fn normalise(line: &str) -> String {
    // A session id (`4263-4e50a2cfc2f0`): its pid half may be all letters (`bcf`).
    let is_hex = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_hexdigit());
    // A build from a checkout with changes says so (`commit 0123abcd-dirty`).
    let line = line.replace("-dirty)", ")");
    let line: String = line
        .split(' ')
        .map(|word| match word.split_once('-') {
            Some((pid, time)) if is_hex(pid) && is_hex(time) && time.len() >= 8 => "N-N",
            _ => word,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.chars().any(|c| c.is_ascii_digit()) {
            out.push('N');
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in line.chars() {
        if c.is_ascii_digit() || ('a'..='f').contains(&c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether an output line matches a README line, where `…` in README stands for anything.
fn matches_shown(actual: &str, shown: &str) -> bool {
    let parts: Vec<&str> = shown.split('…').collect();
    if parts.len() == 1 {
        return actual == shown;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || !actual[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}
