//! What a user of other command-line tools reaches for: completions for their shell and a
//! man page, made by netbox itself, read by the shell and by man.

use std::process::Command;

use crate::support::{netbox_bin, stderr, stdout, TestDir};

fn netbox(args: &[&str]) -> std::process::Output {
    Command::new(netbox_bin()).args(args).output().unwrap()
}

#[test]
fn completions_load_in_the_shell_and_the_man_page_reads() {
    let dir = TestDir::new("shell-docs");
    // bash: the script parses, and once sourced completes netbox's subcommands and flags.
    let out = netbox(&["completions", "bash"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = dir.write("netbox.bash", &stdout(&out));
    let checked = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(checked.status.success(), "{}", stderr(&checked));
    let loaded = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; complete -p netbox; COMP_WORDS=(netbox --all); COMP_CWORD=1; \
             COMP_LINE='netbox --all'; COMP_POINT=${{#COMP_LINE}}; _netbox netbox --all netbox; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .output()
        .unwrap();
    let said = stdout(&loaded);
    assert!(said.contains("netbox"), "{said}{}", stderr(&loaded));
    assert!(said.contains("--allow-tool"), "{said}");
    // zsh and fish: scripts of their own form (neither shell need be installed).
    assert!(stdout(&netbox(&["completions", "zsh"])).starts_with("#compdef netbox"));
    assert!(stdout(&netbox(&["completions", "fish"])).contains("complete -c netbox"));
    // A shell it does not know: clap's one line and netbox's status.
    assert_eq!(netbox(&["completions", "tcsh"]).status.code(), Some(125));

    // The man page: roff that man formats with no warning, naming the subcommands.
    let out = netbox(&["man"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = dir.write("netbox.1", &stdout(&out));
    let shown = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert_eq!(stderr(&shown), "", "man warned");
    let text = stdout(&shown);
    for word in ["netbox", "--allowlist", "completions", "bridge"] {
        assert!(text.contains(word), "{word} not in the page:\n{text}");
    }
}

/// `--version` names the commit the binary was built from, as the session log does.
#[test]
fn the_version_names_its_commit() {
    let out = netbox(&["--version"]);
    let said = stdout(&out);
    assert!(said.starts_with("netbox 0."), "{said}");
    let commit = said
        .split("(commit ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no commit in {said:?}"));
    // From a checkout, the commit's hex (with -dirty when it was changed); else unknown.
    let hex = commit.trim_end_matches("-dirty");
    assert!(
        commit == "unknown" || (hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit}"
    );
}
