//! What git runs or reads as code, from its own documentation (git 2.47: git-config(1),
//! gitattributes(5), githooks(5), git(1) ENVIRONMENT, git-archive(1), git-send-email(1),
//! git-interpret-trailers(1), git-svn(1), gitrepository-layout(5)). One table, used for every repository netbox meets: to pin
//! what a pinned repository's configuration names (protect/mod.rs), and to audit what the
//! configuration of one it does not pin names (supervise/gitaudit).
//!
//! Left out on purpose, each because it names data, not code: `core.excludesFile`,
//! `commit.template`, `blame.ignoreRevsFile`, `mailmap.file`, `diff.orderFile`,
//! `fsck.skipList`, `gpg.ssh.allowedSignersFile` (whose signatures count, not what runs),
//! `sendemail.aliasesFile`, `trace2.*Target` (written, not run), `credential.helper`'s
//! store file aside. Tool names (`diff.tool`, `merge.tool`, `web.browser`) select a
//! `<tool>.cmd`/`.path` entry of the table or a program on PATH. Attributes
//! (gitattributes(5): `filter=`, `diff=`, `merge=`) only choose among drivers the
//! configuration defines, whose commands are in the table; an attributes file is pinned
//! where a setting names one (`core.attributesFile`).

use std::path::{Path, PathBuf};

use crate::paths::exact_text::path_of;

/// How git uses a setting's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// A command line: run by the shell (or exec'd when it has no shell syntax), from
    /// the top of the work tree. Every path in it is code.
    Command,
    /// A command line when the value starts with `!` (`submodule.<name>.update`);
    /// otherwise a mode.
    BangCommand,
    /// A URL, which runs a command when it uses the `ext::` transport (`ext::CMD ARGS`,
    /// git-remote-ext(1); allowed by `protocol.ext.allow`).
    ExtUrl,
    /// The same, in the subsection's name (`[url "ext::CMD"] insteadOf = ...`).
    ExtUrlSubsection,
    /// A directory whose files git runs by name (`core.hooksPath`; `GIT_EXEC_PATH`).
    HookDir,
    /// A directory copied into every repository git makes, hooks included.
    TemplateDir,
    /// A file read as more configuration, relative to the file that includes it.
    Include,
    /// A file of attributes, which choose the drivers that run.
    Attributes,
    /// Where the work tree is: where hooks and commands run, and what relative paths in
    /// every other setting are relative to (relative to the git directory).
    WorkTree,
}

/// One documented setting: its name as the documentation writes it (`<x>` for any
/// subsection, `*` for any key) and how git uses its value.
pub type Setting = (&'static str, Use);

/// Every setting whose value git runs or reads as code.
pub const SETTINGS: &[Setting] = &[
    // git-config(1), core.*
    ("core.fsmonitor", Use::Command),
    ("core.hooksPath", Use::HookDir),
    ("core.sshCommand", Use::Command),
    ("core.gitProxy", Use::Command),
    ("core.alternateRefsCommand", Use::Command),
    ("core.askPass", Use::Command),
    ("core.pager", Use::Command),
    ("core.editor", Use::Command),
    ("core.attributesFile", Use::Attributes),
    ("core.worktree", Use::WorkTree),
    // git-config(1), the rest, in its order.
    ("alias.*", Use::Command),
    ("browser.<tool>.cmd", Use::Command),
    ("browser.<tool>.path", Use::Command),
    ("credential.helper", Use::Command),
    ("credential.<url>.helper", Use::Command),
    ("diff.external", Use::Command),
    ("diff.<driver>.command", Use::Command),
    ("diff.<driver>.textconv", Use::Command),
    ("difftool.<tool>.cmd", Use::Command),
    ("difftool.<tool>.path", Use::Command),
    ("gc.recentObjectsHook", Use::Command),
    ("gpg.program", Use::Command),
    ("gpg.<format>.program", Use::Command),
    ("gpg.ssh.defaultKeyCommand", Use::Command),
    ("guitool.<name>.cmd", Use::Command),
    ("hook.<name>.command", Use::Command),
    ("imap.tunnel", Use::Command),
    ("include.path", Use::Include),
    ("includeIf.<condition>.path", Use::Include),
    ("init.templateDir", Use::TemplateDir),
    ("instaweb.browser", Use::Command),
    ("instaweb.httpd", Use::Command),
    ("instaweb.modulePath", Use::HookDir),
    ("interactive.diffFilter", Use::Command),
    ("man.<tool>.cmd", Use::Command),
    ("man.<tool>.path", Use::Command),
    ("merge.<driver>.driver", Use::Command),
    ("mergetool.<tool>.cmd", Use::Command),
    ("mergetool.<tool>.path", Use::Command),
    ("pager.*", Use::Command),
    ("remote.<name>.receivepack", Use::Command),
    ("remote.<name>.uploadpack", Use::Command),
    ("remote.<name>.url", Use::ExtUrl),
    ("remote.<name>.pushurl", Use::ExtUrl),
    ("sequence.editor", Use::Command),
    ("svn.authorsProg", Use::Command),
    ("trailer.<token>.command", Use::Command),
    ("trailer.<token>.cmd", Use::Command),
    ("submodule.<name>.update", Use::BangCommand),
    ("uploadpack.packObjectsHook", Use::Command),
    ("url.<base>.insteadOf", Use::ExtUrlSubsection),
    ("url.<base>.pushInsteadOf", Use::ExtUrlSubsection),
    // gitattributes(5): the drivers attributes choose.
    ("filter.<driver>.clean", Use::Command),
    ("filter.<driver>.smudge", Use::Command),
    ("filter.<driver>.process", Use::Command),
    // git-archive(1).
    ("tar.<format>.command", Use::Command),
    // git-lfs(1)'s settings, which git's own hooks and filters run: its custom transfer
    // agents and its extensions.
    ("lfs.customtransfer.<name>.path", Use::Command),
    ("lfs.extension.<name>.clean", Use::Command),
    ("lfs.extension.<name>.smudge", Use::Command),
    // git-send-email(1), also per identity.
    ("sendemail.sendmailCmd", Use::Command),
    ("sendemail.smtpServer", Use::Command),
    ("sendemail.toCmd", Use::Command),
    ("sendemail.ccCmd", Use::Command),
    ("sendemail.headerCmd", Use::Command),
    ("sendemail.<identity>.sendmailCmd", Use::Command),
    ("sendemail.<identity>.smtpServer", Use::Command),
    ("sendemail.<identity>.toCmd", Use::Command),
    ("sendemail.<identity>.ccCmd", Use::Command),
    ("sendemail.<identity>.headerCmd", Use::Command),
];

/// The environment variables git(1) runs or reads as code, each as the setting it stands
/// for (git falls back to `EDITOR`, `VISUAL`, `PAGER`, `SSH_ASKPASS`; `GIT_EXEC_PATH` is a
/// directory of programs, like a hooks directory).
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("GIT_EDITOR", "core.editor"),
    ("GIT_SEQUENCE_EDITOR", "sequence.editor"),
    ("VISUAL", "core.editor"),
    ("EDITOR", "core.editor"),
    ("GIT_PAGER", "core.pager"),
    ("PAGER", "core.pager"),
    ("GIT_SSH", "core.sshCommand"),
    ("GIT_SSH_COMMAND", "core.sshCommand"),
    ("GIT_ASKPASS", "core.askPass"),
    ("SSH_ASKPASS", "core.askPass"),
    ("GIT_EXTERNAL_DIFF", "diff.external"),
    ("GIT_PROXY_COMMAND", "core.gitProxy"),
    ("GIT_TEMPLATE_DIR", "init.templateDir"),
    ("GIT_EXEC_PATH", "core.hooksPath"),
];

/// githooks(5): every hook git runs from the hooks directory (all of them pinned with
/// it; listed for the tests that walk them).
#[cfg(test)]
pub const HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// gitrepository-layout(5): the files of a git directory that make git run code or go
/// elsewhere for its configuration, hooks or objects (relative to the git directory;
/// `commondir` names the directory the others are looked up in).
pub const GIT_DIR_PARTS: &[&str] = &[
    "config",
    "config.worktree",
    "commondir",
    "hooks",
    "info/attributes",
    "objects/info/alternates",
    // An interactive rebase's todo list holds `exec` lines `git rebase --continue` runs.
    "rebase-merge",
    "rebase-apply",
    // A cherry-pick or revert under way: its options name the merge strategy it runs.
    "sequencer",
];

/// How git uses `section[.subsection].key`, if it runs or reads it as code. Section and
/// key are lowercase (as the parser gives them); a subsection is matched by shape.
pub fn use_of(section: &str, subsection: Option<&str>, key: &str) -> Option<Use> {
    SETTINGS
        .iter()
        .find(|(name, _)| matches(name, section, subsection, key))
        .map(|(_, how)| *how)
}

/// A setting's name as git's command line and environment give it
/// (`section[.subsection].key`): the subsection is everything between the first dot and
/// the last.
pub fn split_name(name: &str) -> (&str, Option<&str>, &str) {
    let (head, key) = name.rsplit_once('.').unwrap_or((name, ""));
    match head.split_once('.') {
        Some((section, sub)) => (section, Some(sub), key),
        None => (head, None, key),
    }
}

/// Whether the documented `name` stands for `section[.subsection].key`.
fn matches(name: &str, section: &str, subsection: Option<&str>, key: &str) -> bool {
    let (head, last) = name.rsplit_once('.').unwrap_or((name, ""));
    let (doc_section, doc_sub) = match head.split_once('.') {
        Some((s, sub)) => (s, Some(sub)),
        None => (head, None),
    };
    if !doc_section.eq_ignore_ascii_case(section) {
        return false;
    }
    let sub_matches = match (doc_sub, subsection) {
        (None, None) => true,
        // `<name>` stands for any subsection, or any rest of one (git-lfs's
        // `customtransfer.<name>`).
        (Some(pattern), Some(sub)) if pattern.contains('<') => {
            let prefix = &pattern[..pattern.find('<').unwrap_or(0)];
            sub.len() > prefix.len() && sub.starts_with(prefix)
        }
        // A literal subsection (`gpg.ssh.defaultKeyCommand`): subsections are
        // case-sensitive in git.
        (Some(pattern), Some(sub)) => pattern == sub,
        _ => false,
    };
    sub_matches && (last == "*" || last.eq_ignore_ascii_case(key))
}

/// A path a setting names, and how sure netbox is that it is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub path: String,
    pub how: Use,
    /// A program a command line runs, or the script an interpreter there runs: where it
    /// is a directory, a program is nothing to run (skipped) but an interpreter's
    /// argument is (`node ./tool` runs `tool/index.js`).
    pub role: Role,
}

/// What a path is to git.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The whole value of a path setting.
    Value,
    /// A program a command line runs.
    Program,
    /// What an interpreter in a command line runs (`sh x`, `node ./tool`, `. ./env`).
    Script,
    /// A program named without a slash, which the shell looks up on PATH.
    Bare,
    /// Any other word of a command line (an argument): not read as code, but watched
    /// where it names a file in a writable root, so that a form the reader misreads is
    /// said rather than missed.
    Mentioned,
}

/// The paths a value of a setting used as `how` names (subsection for
/// [`Use::ExtUrlSubsection`]), with `$VAR`s expanded by `lookup`.
pub fn named_paths(
    how: Use,
    value: &str,
    subsection: Option<&str>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<Named> {
    let path_value = |v: &str| -> Vec<Named> {
        // `:(optional)` marks a path a newer git may skip when missing, which an older one
        // takes as part of the path itself: both count. `%(prefix)/` is git's own install
        // location, never a writable root. Not trimmed: the parser took off what git
        // does, and a value from the environment is git's as it stands (` .hk`).
        let mut spellings = vec![v];
        spellings.extend(v.strip_prefix(":(optional)"));
        spellings
            .into_iter()
            .filter(|v| !v.is_empty() && !v.starts_with("%(prefix)/"))
            .map(|v| Named {
                path: v.to_owned(),
                how,
                role: Role::Value,
            })
            .collect()
    };
    match how {
        Use::HookDir | Use::TemplateDir | Use::Include | Use::Attributes | Use::WorkTree => {
            path_value(value)
        }
        Use::Command => command_paths(value, how, lookup),
        Use::BangCommand => match value.trim_start().strip_prefix('!') {
            Some(command) => command_paths(command, how, lookup),
            None => Vec::new(),
        },
        Use::ExtUrl => ext_command(value)
            .map(|c| command_paths(c, how, lookup))
            .unwrap_or_default(),
        Use::ExtUrlSubsection => subsection
            .and_then(ext_command)
            .map(|c| command_paths(c, how, lookup))
            .unwrap_or_default(),
    }
}

/// The command of an `ext::` URL.
fn ext_command(url: &str) -> Option<&str> {
    let url = url.trim();
    let scheme = url.get(..5)?;
    scheme.eq_ignore_ascii_case("ext::").then(|| &url[5..])
}

/// How deep command strings inside command lines (`sh -c '...'`, `$(...)`, `eval`) are
/// followed.
const MAX_NESTING: usize = 4;

/// The paths a command line runs, read as a shell would after `$VAR` and `${VAR:-word}`
/// expansion: each simple command's program where it is named by path (a bare name is
/// looked up on PATH), and what it hands on to run:
/// - commands start at the line's start, after `;`, `&`, `|`, `(`, `{`, `` ` ``, `$(`
///   (inside double quotes too), after shell keywords (`if`, `then`, `do`, `!`, ...) and
///   `NAME=value` assignments;
/// - wrappers run the rest as a command (`env`, `exec`, `timeout DUR`, `nice -n N`,
///   `xargs`, `sudo`, `uv run`, `bundle exec`, `find -exec`); `eval`, `watch` and
///   `sh -c STRING` run a command string;
/// - interpreters run a script (`sh tools/x`, `node ./lint.js`, `python3.11 -u tool.py`,
///   `deno run x.ts`, `. ./env.sh`, `awk -f prog.awk`);
/// - a few programs read code from a named file (`ssh -F config`, `ssh -o
///   ProxyCommand=...`, `vim -u vimrc`);
/// - an alias's `-c key=value` (its git arguments, or after `git`) is that setting.
///
/// Other words (arguments, redirections: `git add .`, `cd src/app`, `> out/log`) are not
/// code.
fn command_paths(value: &str, how: Use, lookup: &dyn Fn(&str) -> Option<String>) -> Vec<Named> {
    let mut found = Vec::new();
    let line = value.trim_start();
    // Without `!`, an alias's value is git's arguments, split where git's split_cmdline
    // splits: at CR too, which no shell does. Read both ways: more is pinned, never less.
    if !line.starts_with('!') && line.contains('\r') {
        found.extend(command_paths(&value.replace('\r', " "), how, lookup));
    }
    // A `!` alias or helper runs a shell; without it an alias's value is git's arguments.
    let line = line.strip_prefix('!').unwrap_or(line);
    // Commands run from the top of the work tree, so the top is `.` to them.
    let line = line
        .replace("$(git rev-parse --show-toplevel)", ".")
        .replace("`git rev-parse --show-toplevel`", ".");
    // Variables the line sets itself (`D=./scripts; $D/x`), then the environment's.
    let local = assignments(&line);
    let lookup_both = |name: &str| {
        local
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .or_else(|| lookup(name))
    };
    read_line(
        &expand_shell(&line, &lookup_both),
        how,
        lookup,
        &mut found,
        0,
    );
    // One entry a path, in the strongest role it was met in (a word first met as an
    // argument may be the script an interpreter runs).
    let strength = |role: Role| match role {
        Role::Mentioned => 0,
        Role::Bare => 1,
        _ => 2,
    };
    let mut unique: Vec<Named> = Vec::new();
    for named in found {
        match unique.iter_mut().find(|u| u.path == named.path) {
            Some(u) if strength(named.role) > strength(u.role) => *u = named,
            Some(_) => {}
            None => unique.push(named),
        }
    }
    unique
}

/// `NAME=value` words a line sets (quotes dropped), in order.
fn assignments(line: &str) -> Vec<(String, String)> {
    shell_words(line)
        .into_iter()
        .filter_map(|w| match w {
            Word::Text(w) => {
                let (name, value) = w.split_once('=')?;
                is_name(name).then(|| (name.to_owned(), value.to_owned()))
            }
            Word::Operator => None,
        })
        .collect()
}

/// Reads every simple command of a command line.
fn read_line(
    line: &str,
    how: Use,
    lookup: &dyn Fn(&str) -> Option<String>,
    found: &mut Vec<Named>,
    depth: usize,
) {
    if depth > MAX_NESTING {
        return;
    }
    // Command substitutions, wherever they stand (inside double quotes too).
    for inner in substitutions(line) {
        read_line(inner, how, lookup, found, depth + 1);
    }
    let tokens = shell_words(line);
    // Where a `cd` earlier on the line went: relative paths after it are relative there.
    let mut cd: Option<String> = None;
    for command in tokens.split(|t| matches!(t, Word::Operator)) {
        let words: Vec<&str> = command
            .iter()
            .filter_map(|t| match t {
                Word::Text(w) => Some(w.as_str()),
                Word::Operator => None,
            })
            .collect();
        if let (Some(&("cd" | "pushd")), Some(dir)) = (words.first(), words.get(1)) {
            cd = Some(within(cd.as_deref(), dir));
            continue;
        }
        let start = found.len();
        read_words(&words, how, lookup, found, depth);
        if let Some(dir) = &cd {
            for named in &mut found[start..] {
                if !named.path.starts_with(['/', '~']) && named.role != Role::Bare {
                    named.path = within(Some(dir), &named.path);
                }
            }
        }
    }
}

/// `path` seen from the directory `dir` (relative to where the line runs), if any.
fn within(dir: Option<&str>, path: &str) -> String {
    match dir {
        Some(dir) if !path.starts_with(['/', '~']) => {
            format!("{}/{path}", dir.trim_end_matches('/'))
        }
        _ => path.to_owned(),
    }
}

/// Shell keywords after which a command starts.
const KEYWORDS: &[&str] = &[
    "if", "then", "elif", "else", "do", "while", "until", "!", "time", "{", "fi", "done",
];

/// Keywords whose next words are no command (`for x in a b`).
const NOT_COMMANDS: &[&str] = &["for", "case", "select", "function", "in", "esac"];

/// Reads one simple command (its words, without operators).
fn read_words(
    words: &[&str],
    how: Use,
    lookup: &dyn Fn(&str) -> Option<String>,
    found: &mut Vec<Named>,
    depth: usize,
) {
    let mut at = 0;
    while let Some(word) = words.get(at) {
        let assignment = word.split_once('=').is_some_and(|(name, _)| is_name(name));
        if !(KEYWORDS.contains(word) || assignment) {
            break;
        }
        at += 1;
    }
    let Some(program) = words.get(at).copied() else {
        return;
    };
    let rest = &words[at + 1..];
    if NOT_COMMANDS.contains(&program) {
        return;
    }
    // An alias without `!` is git's arguments (`-c core.fsmonitor=./x status`, `rebase
    // --exec ./check`): git's options that run commands count wherever they stand.
    git_settings(&words[at..], lookup, found);
    if program.starts_with('-') {
        return;
    }
    let push = |found: &mut Vec<Named>, path: &str, role: Role| {
        found.push(Named {
            path: path.to_owned(),
            how,
            role,
        })
    };
    if program.contains('/') || program.starts_with('~') {
        push(found, program, Role::Program);
    } else {
        push(found, program, Role::Bare);
    }
    // Every other word, watched where it names a file (a form misread below is said).
    for word in rest.iter().filter(|w| !w.starts_with('-')) {
        push(found, word, Role::Mentioned);
    }
    let base = program.rsplit('/').next().unwrap_or(program);
    let script = |found: &mut Vec<Named>, takes_value: &[&str], stops: &[&str]| {
        if let Some(script) = first_operand(rest, takes_value, stops) {
            push(found, script, Role::Script);
        }
    };
    match base {
        "env" | "exec" | "command" | "nohup" | "nice" | "ionice" | "stdbuf" | "setsid" | "chrt"
        | "taskset" | "sudo" | "doas" | "xargs" | "time" => {
            let takes_value: &[&str] = match base {
                "env" => &["-u", "-C", "--unset", "--chdir"],
                "exec" => &["-a"],
                "nice" => &["-n", "--adjustment"],
                "ionice" => &["-c", "-n", "-p"],
                "sudo" => &["-u", "-g", "-C", "-h", "-p", "-U", "-r", "-t", "-D"],
                "doas" => &["-u", "-C"],
                "xargs" => &[
                    "-I",
                    "-n",
                    "-P",
                    "-d",
                    "-L",
                    "-s",
                    "-E",
                    "-a",
                    "--delimiter",
                ],
                _ => &[],
            };
            let skip = options_end(rest, takes_value);
            // env -C DIR: the command runs there.
            if base == "env" {
                if let Some(i) = rest.iter().position(|w| *w == "-C" || *w == "--chdir") {
                    if let Some(dir) = rest.get(i + 1) {
                        let start = found.len();
                        read_words(rest.get(skip..).unwrap_or(&[]), how, lookup, found, depth);
                        for named in &mut found[start..] {
                            if !named.path.starts_with(['/', '~']) && named.role != Role::Bare {
                                named.path = within(Some(dir), &named.path);
                            }
                        }
                        return;
                    }
                }
            }
            // env -S STRING runs a command string.
            if base == "env" {
                if let Some(i) = rest.iter().position(|w| *w == "-S") {
                    if let Some(line) = rest.get(i + 1) {
                        read_line(line, how, lookup, found, depth + 1);
                    }
                }
            }
            // chrt PRIO, taskset MASK: one operand before the command.
            let skip = skip + usize::from(matches!(base, "chrt" | "taskset"));
            read_words(rest.get(skip..).unwrap_or(&[]), how, lookup, found, depth);
        }
        // Run the rest as a command, after their options (and, for some, `--`).
        "xvfb-run" | "dotenv" | "op" | "mise" | "rtx" | "direnv" | "nix-shell" | "devbox"
        | "with-contenv" | "catchsegv" | "strace" | "ltrace" | "valgrind" | "unbuffer" => {
            let rest = match rest.iter().position(|w| *w == "--") {
                Some(i) => &rest[i + 1..],
                // `op run`, `mise exec`, `direnv exec DIR`: their subcommand first.
                None => match rest.first() {
                    Some(&("run" | "exec")) if base == "direnv" => rest.get(2..).unwrap_or(&[]),
                    Some(&("run" | "exec" | "x")) => &rest[1..],
                    _ => &rest[options_end(rest, &[])..],
                },
            };
            read_words(rest, how, lookup, found, depth);
        }
        "trap" => {
            if let Some(line) = rest.first() {
                read_line(line, how, lookup, found, depth + 1);
            }
        }
        "just" => {
            for pair in rest.windows(2) {
                if matches!(pair[0], "--justfile" | "-f") {
                    push(found, pair[1], Role::Script);
                }
            }
        }
        "pwsh" | "powershell" => {
            for pair in rest.windows(2) {
                if pair[0].eq_ignore_ascii_case("-File") {
                    push(found, pair[1], Role::Script);
                }
            }
        }
        "tsx" | "ts-node" | "zx" | "esno" | "vite-node" => script(found, &[], &["-e", "--eval"]),
        "timeout" => {
            let skip = options_end(rest, &["-s", "-k", "--signal", "--kill-after"]);
            read_words(
                rest.get(skip + 1..).unwrap_or(&[]),
                how,
                lookup,
                found,
                depth,
            );
        }
        "watch" => {
            let skip = options_end(rest, &["-n", "--interval"]);
            let line = rest.get(skip..).unwrap_or(&[]).join(" ");
            read_line(&line, how, lookup, found, depth + 1);
        }
        "eval" => read_line(&rest.join(" "), how, lookup, found, depth + 1),
        "flock" => {
            let skip = options_end(rest, &["-w", "-E", "--timeout"]);
            match (rest.get(skip + 1), rest.get(skip + 2)) {
                (Some(&"-c"), Some(line)) => read_line(line, how, lookup, found, depth + 1),
                _ => read_words(
                    rest.get(skip + 1..).unwrap_or(&[]),
                    how,
                    lookup,
                    found,
                    depth,
                ),
            }
        }
        "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" | "bundle" | "npm" | "pnpm"
        | "yarn" => {
            let skip = options_end(rest, &["--directory", "--project", "-C"]);
            if matches!(rest.get(skip), Some(&("run" | "exec"))) {
                let after = options_end(&rest[skip + 1..], &["--with", "--python", "-p"]);
                read_words(
                    rest.get(skip + 1 + after..).unwrap_or(&[]),
                    how,
                    lookup,
                    found,
                    depth,
                );
            }
        }
        "npx" | "pnpx" | "bunx" => {
            if let Some(tool) = first_operand(rest, &["-p", "--package"], &[]) {
                if tool.contains('/') && !tool.starts_with('@') {
                    push(found, tool, Role::Program);
                }
            }
        }
        "find" => {
            for (i, word) in rest.iter().enumerate() {
                if matches!(*word, "-exec" | "-execdir" | "-ok" | "-okdir") {
                    let end = rest[i + 1..]
                        .iter()
                        .position(|w| *w == ";" || *w == "+")
                        .map_or(rest.len(), |e| i + 1 + e);
                    read_words(&rest[i + 1..end], how, lookup, found, depth);
                }
            }
        }
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "yash" | "fish" | "busybox" => {
            let rest = if base == "busybox" {
                rest.get(1..).unwrap_or(&[])
            } else {
                rest
            };
            // `-c`, alone or in a cluster (`-lc`, `-ec`): the first operand is a command
            // string. `--rcfile FILE` and `--init-file FILE` are read as code too.
            let options = options_end(rest, &["-o", "+o", "-O", "+O", "--rcfile", "--init-file"]);
            let command_string = rest[..options.min(rest.len())]
                .iter()
                .any(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'));
            for pair in rest.windows(2) {
                if matches!(pair[0], "--rcfile" | "--init-file") {
                    push(found, pair[1], Role::Script);
                }
            }
            match (command_string, rest.get(options)) {
                (true, Some(line)) => read_line(line, how, lookup, found, depth + 1),
                (false, Some(script)) => push(found, script, Role::Script),
                _ => {}
            }
        }
        "node" | "nodejs" => {
            // A preloaded module runs too.
            for pair in rest.windows(2) {
                if matches!(pair[0], "-r" | "--require" | "--import" | "--loader") {
                    push(found, pair[1], Role::Script);
                }
            }
            for word in rest {
                for option in ["--require=", "--import=", "--loader="] {
                    if let Some(module) = word.strip_prefix(option) {
                        push(found, module, Role::Script);
                    }
                }
            }
            script(
                found,
                &["-r", "--require", "--import", "--loader"],
                &["-e", "-p", "--eval", "--print"],
            )
        }
        "deno" | "bun" => {
            let skip = options_end(rest, &[]);
            let rest = match rest.get(skip) {
                Some(&("run" | "x")) => &rest[skip + 1..],
                _ => rest,
            };
            if let Some(script) = first_operand(rest, &[], &["-e", "--eval"]) {
                push(found, script, Role::Script);
            }
        }
        "perl" | "ruby" | "php" | "lua" | "tclsh" | "Rscript" => {
            script(found, &["-I", "-r", "-M"], &["-e", "-E"])
        }
        "awk" | "gawk" | "mawk" | "nawk" => {
            // Only `-f FILE` runs a file: the first operand is the program's text.
            for pair in rest.windows(2) {
                if pair[0] == "-f" || pair[0] == "--file" {
                    push(found, pair[1], Role::Script);
                }
            }
        }
        "." | "source" => {
            if let Some(script) = rest.first() {
                push(found, script, Role::Script);
            }
        }
        "ssh" => {
            for (i, word) in rest.iter().enumerate() {
                let option = match *word {
                    "-F" => rest.get(i + 1).copied(),
                    w if w.starts_with("-F") => Some(&w[2..]),
                    _ => None,
                };
                if let Some(file) = option {
                    push(found, file, Role::Script);
                }
                let setting = match *word {
                    "-o" => rest.get(i + 1).copied(),
                    w if w.starts_with("-o") => Some(&w[2..]),
                    _ => None,
                };
                if let Some((key, command)) = setting.and_then(|s| {
                    s.split_once('=')
                        .or_else(|| s.split_once(char::is_whitespace))
                }) {
                    if key.eq_ignore_ascii_case("ProxyCommand")
                        || key.eq_ignore_ascii_case("LocalCommand")
                    {
                        read_line(command, how, lookup, found, depth + 1);
                    }
                }
            }
        }
        "vi" | "vim" | "nvim" | "gvim" | "view" => {
            for pair in rest.windows(2) {
                if pair[0] == "-u" || pair[0] == "-S" {
                    push(found, pair[1], Role::Script);
                }
            }
        }
        base if is_python(base) => script(found, &["-W", "-X", "-Q"], &["-m", "-c"]),
        _ => {}
    }
}

/// `python`, `python3`, `python3.11`, `pypy3`...
fn is_python(base: &str) -> bool {
    ["python", "pypy"].iter().any(|p| {
        base.strip_prefix(p)
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// A shell variable name.
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a program's options end in `words`: past every `-x` (and the value of those in
/// `takes_value`), up to `--` (skipped) or the first operand.
fn options_end(words: &[&str], takes_value: &[&str]) -> usize {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        if *word == "--" {
            return i + 1;
        }
        if !word.starts_with('-') || *word == "-" {
            return i;
        }
        i += if takes_value.contains(word) { 2 } else { 1 };
    }
    i
}

/// The first operand after a program's options, unless one of `stops` comes first (its
/// code is in the arguments: `python -c`, `node -e`, `python -m module`).
fn first_operand<'a>(words: &[&'a str], takes_value: &[&str], stops: &[&str]) -> Option<&'a str> {
    let end = options_end(words, takes_value);
    if words[..end.min(words.len())]
        .iter()
        .any(|w| stops.contains(w))
    {
        return None;
    }
    words.get(end).copied()
}

/// `-c key=value` pairs among git's arguments, read as those settings.
fn git_settings(words: &[&str], lookup: &dyn Fn(&str) -> Option<String>, found: &mut Vec<Named>) {
    // Options of git's own commands that run a command line: `rebase --exec`, `-x`,
    // `difftool --extcmd`, `bisect run CMD...`.
    for (i, word) in words.iter().enumerate() {
        let command = match *word {
            "--exec" | "-x" | "--extcmd" => words.get(i + 1).copied(),
            w => w
                .strip_prefix("--exec=")
                .or_else(|| w.strip_prefix("--extcmd=")),
        };
        if let Some(command) = command {
            found.extend(named_paths(Use::Command, command, None, lookup));
        }
        if *word == "bisect" && words.get(i + 1) == Some(&"run") {
            let line = words[i + 2..].join(" ");
            found.extend(named_paths(Use::Command, &line, None, lookup));
        }
    }
    for pair in words.windows(2) {
        if pair[0] != "-c" {
            continue;
        }
        let Some((name, value)) = pair[1].split_once('=') else {
            continue;
        };
        let (section, sub, key) = split_name(name);
        if let Some(inner) = use_of(&section.to_ascii_lowercase(), sub, key) {
            found.extend(named_paths(inner, value, sub, lookup));
        }
    }
}

/// The insides of every `$(...)` and `` `...` `` in a line (outside single quotes).
fn substitutions(line: &str) -> Vec<&str> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    let mut single = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if !single => i += 1,
            b'\'' => single = !single,
            b'$' if !single && bytes.get(i + 1) == Some(&b'(') => {
                let start = i + 2;
                let mut depth = 1;
                let mut j = start;
                while j < bytes.len() && depth > 0 {
                    match bytes[j] {
                        b'(' => depth += 1,
                        b')' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                // Closed: up to the `)` (one byte, so a character boundary); left open:
                // the rest of the line, whatever character it ends in.
                let end = if depth == 0 { j - 1 } else { line.len() };
                found.push(&line[start..end]);
                i = j;
                continue;
            }
            b'`' if !single => {
                let start = i + 1;
                let end = line[start..].find('`').map_or(line.len(), |e| start + e);
                found.push(&line[start..end]);
                i = end + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// `$VAR`, `${VAR}` and `${VAR:-word}` (and `-`, `:=`, `=`, `:+`, `+`, `:?`, `?`)
/// expanded as a shell would, with `lookup`'s values; other `$` forms left as they are.
fn expand_shell(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(inner) = after.strip_prefix('{') {
            let Some(end) = inner.find('}') else {
                out.push('$');
                rest = after;
                continue;
            };
            let body = &inner[..end];
            let name_end = body
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(body.len());
            let value = lookup(&body[..name_end]);
            let op = &body[name_end..];
            let (colon, op) = match op.strip_prefix(':') {
                Some(op) => (true, op),
                None => (false, op),
            };
            let set = value.as_deref().is_some_and(|v| !(colon && v.is_empty()));
            let word = op.get(1..).unwrap_or("");
            let expanded = match op.chars().next() {
                None => value.unwrap_or_default(),
                Some('-' | '=') if !set => word.to_owned(),
                Some('+') => {
                    if set {
                        word.to_owned()
                    } else {
                        String::new()
                    }
                }
                _ => value.unwrap_or_default(),
            };
            out.push_str(&expanded);
            rest = &inner[end + 1..];
            continue;
        }
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if end == 0 {
            out.push('$');
            rest = after;
            continue;
        }
        out.push_str(&lookup(&after[..end]).unwrap_or_default());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A word of a command line, or an operator between commands.
enum Word {
    Text(String),
    Operator,
}

/// Splits a command line into words (quotes removed, backslash escapes kept as the
/// character, `$'...'` read as quoted) and the operators that start a new command.
/// Redirections and their targets are dropped (a file read or written, not run).
fn shell_words(line: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, words: &mut Vec<Word>| {
        if *in_word {
            words.push(Word::Text(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '$' if chars.peek() == Some(&'\'') => {
                chars.next();
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '\'' => break,
                        '\\' => word.extend(chars.next()),
                        q => word.push(q),
                    }
                }
            }
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        q => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '$' if chars.peek() == Some(&'(') => {
                chars.next();
                end_word(&mut word, &mut in_word, &mut words);
                words.push(Word::Operator);
            }
            ';' | '&' | '|' | '(' | ')' | '`' | '\n' => {
                end_word(&mut word, &mut in_word, &mut words);
                words.push(Word::Operator);
            }
            '<' | '>' => {
                // A redirection (`2>&1`'s `2` included) and its target.
                if word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end_word(&mut word, &mut in_word, &mut words);
                while chars
                    .next_if(|c| matches!(c, '<' | '>' | '&' | ' ' | '\t'))
                    .is_some()
                {}
                while chars
                    .next_if(|c| !matches!(c, ' ' | '\t' | '\n') && !";&|()".contains(*c))
                    .is_some()
                {}
            }
            // A shell splits words at its IFS (space and tab here; a newline ends the
            // command, above), not at every character called a space (a name may hold
            // U+00A0, a CR or a form feed).
            ' ' | '\t' => end_word(&mut word, &mut in_word, &mut words),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut words);
    words
}

/// `~/x` against `home`, `~user/x` against that account's home (from /etc/passwd), a
/// relative path against `base`. `path` is text of a value's bytes (paths/exact_text.rs):
/// the path made has those bytes.
pub fn resolve(path: &str, base: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if path == "~" {
        return home.map(Path::to_owned);
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return home.map(|h| h.join(path_of(rest)));
    }
    if let Some(rest) = path.strip_prefix('~') {
        let (user, tail) = rest.split_once('/').unwrap_or((rest, ""));
        return crate::plan::homesplit::account_home(user).map(|h| h.join(path_of(tail)));
    }
    Some(base.join(path_of(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_vars(_: &str) -> Option<String> {
        None
    }

    proptest::proptest! {
        /// Whatever bytes a setting, a hook runner's text or a variable holds (shell syntax
        /// cut anywhere, characters of every width, bytes that are not UTF-8 as
        /// paths/exact_text.rs reads them), reading what it names never panics: a hostile
        /// repository's config would otherwise stop every run in it.
        #[test]
        fn no_value_stops_the_readers(
            value in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(b"$()`'\"\\{}:;|&!~/ =-\n\t%.ab".to_vec()),
                    proptest::prelude::any::<u8>(),
                ],
                0..48,
            ),
            var in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
        ) {
            use std::os::unix::ffi::OsStrExt;
            let text = crate::paths::exact_text::text_of(std::ffi::OsStr::from_bytes(&value));
            let var = crate::paths::exact_text::text_of(std::ffi::OsStr::from_bytes(&var));
            let lookup = |_: &str| Some(var.clone());
            for how in [
                Use::Command,
                Use::BangCommand,
                Use::ExtUrl,
                Use::ExtUrlSubsection,
                Use::HookDir,
                Use::TemplateDir,
                Use::Include,
                Use::Attributes,
                Use::WorkTree,
            ] {
                for named in named_paths(how, &text, Some(&text), &lookup) {
                    let _ = resolve(&named.path, Path::new("/w"), Some(Path::new("/h")));
                }
            }
            let _ = substitutions(&text);
            let _ = expand_shell(&text, &lookup);
            let _ = super::super::gitconfig::parse(&text);
        }
    }

    #[test]
    fn documented_names_match_their_settings() {
        let cases = [
            ("core", None, "fsmonitor", Some(Use::Command)),
            ("core", None, "hookspath", Some(Use::HookDir)),
            ("core", Some("x"), "fsmonitor", None),
            ("alias", None, "anything", Some(Use::Command)),
            ("alias", Some("x"), "anything", None),
            ("diff", Some("pdf"), "textconv", Some(Use::Command)),
            ("diff", None, "textconv", None),
            ("diff", None, "external", Some(Use::Command)),
            ("gpg", Some("ssh"), "defaultkeycommand", Some(Use::Command)),
            ("gpg", Some("x509"), "program", Some(Use::Command)),
            (
                "lfs",
                Some("customtransfer.agent"),
                "path",
                Some(Use::Command),
            ),
            ("lfs", Some("customtransfer"), "path", None),
            ("gpg", None, "program", Some(Use::Command)),
            ("submodule", Some("lib"), "update", Some(Use::BangCommand)),
            ("includeif", Some("gitdir:~/w/"), "path", Some(Use::Include)),
            (
                "url",
                Some("ext::sh"),
                "insteadof",
                Some(Use::ExtUrlSubsection),
            ),
            ("user", None, "name", None),
            ("core", None, "excludesfile", None),
        ];
        for (section, sub, key, want) in cases {
            assert_eq!(use_of(section, sub, key), want, "{section}.{sub:?}.{key}");
        }
    }

    #[test]
    fn finds_the_paths_a_command_names() {
        // What is read as code (not the bare names and other words, which are watched).
        let paths = |value: &str| -> Vec<(String, Role)> {
            named_paths(Use::Command, value, None, &no_vars)
                .into_iter()
                .filter(|n| matches!(n.role, Role::Program | Role::Script))
                .map(|n| (n.path, n.role))
                .collect()
        };
        let none: Vec<(String, Role)> = Vec::new();
        assert_eq!(
            paths("./tools/fsmon"),
            [("./tools/fsmon".into(), Role::Program)]
        );
        assert_eq!(paths("fsmon"), none);
        assert_eq!(
            paths("!sh tools/x --out=./y; git log --format=%h/%s origin/main > out/log"),
            [("tools/x".into(), Role::Script)]
        );
        assert_eq!(paths("!git add . && git commit"), none);
        assert_eq!(paths("!cd src/app && npm test"), none);
        assert_eq!(
            paths("sh strip.sh"),
            [("strip.sh".into(), Role::Script)],
            "a script named without a slash"
        );
        assert_eq!(
            paths("!FOO=1 env -i BAR=2 ./run 'a b' | \"./two words\" x && $(./sub)"),
            [
                ("./sub".into(), Role::Program),
                ("./run".into(), Role::Program),
                ("./two words".into(), Role::Program),
            ]
        );
        assert_eq!(
            paths("!. ./env.sh; node --inspect ./lint.js; /usr/bin/python3 -u tool.py"),
            [
                ("./env.sh".into(), Role::Script),
                ("./lint.js".into(), Role::Script),
                ("/usr/bin/python3".into(), Role::Program),
                ("tool.py".into(), Role::Script)
            ]
        );
        // Every way a shell runs ./scripts/x that the review tried.
        let forms = [
            "!./scripts/x",
            "!sh -c ./scripts/x",
            "!bash -c './scripts/x'",
            "!sh -c 'cd . && ./scripts/x'",
            "!if true; then ./scripts/x; fi",
            "!true && ./scripts/x",
            "!for a in 1; do ./scripts/x; done",
            "!while false; do :; done; ! ./scripts/x",
            "!timeout 60 ./scripts/x",
            "!nice -n 10 ./scripts/x",
            "!env -u FOO ./scripts/x",
            "!git ls-files | xargs ./scripts/x",
            "!find . -maxdepth 0 -exec ./scripts/x {} ;",
            "!eval ./scripts/x",
            "!deno run scripts/x.ts",
            "!bun run scripts/x.ts",
            "!uv run scripts/x.py",
            "!python3.11 scripts/x.py",
            "!python3 -W ignore scripts/x.py",
            "!node -r ./scripts/x.ts y",
            "!${PY:-python3} scripts/x.py",
            "!${TOOL:-./scripts/x}",
            "!$'./scripts/x'",
            "!sudo ./scripts/x",
            "!npx ./scripts/x",
            "!watch ./scripts/x",
            "!exec 2>&1 ./scripts/x",
            "!cat foo 2>/dev/null | ./scripts/x",
            "!f() { ./scripts/x; }; f",
            "!busybox sh scripts/x",
            "!flock /tmp/l ./scripts/x",
            "!echo \"$(./scripts/x)\"",
            "!echo \"`./scripts/x`\"",
            "!exec 2>/dev/null; ./scripts/x",
            "!{ ./scripts/x; }",
            "!(./scripts/x)",
            "!command -p ./scripts/x",
            "!ssh -o ProxyCommand='./scripts/x %h' host",
            "!awk -f scripts/x.awk",
        ];
        for form in forms {
            assert!(
                paths(form).iter().any(|(p, _)| p.contains("scripts/x")),
                "{form}: {:?}",
                paths(form)
            );
        }
        // An awk program's text is no file.
        assert_eq!(paths("!git log | awk '{print $1}' | sort"), none);
        assert_eq!(
            paths("ssh -F ./ssh_config"),
            [("./ssh_config".into(), Role::Script)]
        );
        assert_eq!(
            paths("-c core.fsmonitor=./fsmon status"),
            [("./fsmon".into(), Role::Program)],
            "an alias's -c is read as that setting"
        );
        assert!(named_paths(Use::BangCommand, "rebase", None, &no_vars).is_empty());
        assert_eq!(
            named_paths(Use::BangCommand, "!./update.sh", None, &no_vars)[0].path,
            "./update.sh"
        );
        // After `cd`, relative paths are relative there; `-lc` is a command string; git's
        // own options that run commands; a variable the line sets.
        assert_eq!(
            paths("!cd tools && ./lint.sh"),
            [("tools/./lint.sh".into(), Role::Program)]
        );
        assert_eq!(
            paths("!env -C scripts ./x"),
            [("scripts/./x".into(), Role::Program)]
        );
        assert_eq!(paths("!bash -lc './x'"), [("./x".into(), Role::Program)]);
        assert_eq!(
            paths("rebase --exec ./check"),
            [("./check".into(), Role::Program)]
        );
        assert_eq!(
            paths("!git bisect run ./t.sh"),
            [("./t.sh".into(), Role::Program)]
        );
        assert_eq!(
            paths("!D=./scripts; $D/x"),
            [("./scripts/x".into(), Role::Program)]
        );
        assert_eq!(
            paths("!\"$(git rev-parse --show-toplevel)/bin/x\""),
            [("./bin/x".into(), Role::Program)]
        );
        assert_eq!(
            paths("!node --require=./hook.js y"),
            [
                ("y".into(), Role::Script),
                ("./hook.js".into(), Role::Script)
            ]
        );
        assert_eq!(paths("!mise exec -- ./x"), [("./x".into(), Role::Program)]);
        // Other words are there to watch.
        let words: Vec<Role> = named_paths(Use::Command, "!lint src/a.js", None, &no_vars)
            .into_iter()
            .map(|n| n.role)
            .collect();
        assert_eq!(words, [Role::Bare, Role::Mentioned]);
        assert!(named_paths(Use::ExtUrl, "ext::sh ./x %S", None, &no_vars)
            .iter()
            .any(|n| n.path == "./x" && n.role == Role::Script));
        assert!(named_paths(Use::ExtUrl, "https://git.test/x", None, &no_vars).is_empty());
        assert_eq!(
            named_paths(
                Use::ExtUrlSubsection,
                "https://",
                Some("ext::./run"),
                &no_vars
            )[0]
            .path,
            "./run"
        );
        assert!(named_paths(Use::HookDir, "%(prefix)/share/hooks", None, &no_vars).is_empty());
        // As a newer git reads it, and as git 2.47 does (a path that begins so).
        let optional: Vec<String> =
            named_paths(Use::Include, ":(optional)../x.cfg", None, &no_vars)
                .into_iter()
                .map(|n| n.path)
                .collect();
        assert_eq!(optional, [":(optional)../x.cfg", "../x.cfg"]);
    }

    #[test]
    fn words_and_pointers_are_cut_where_the_shell_and_git_cut_them() {
        for name in ["mon\u{c}x", "mon\rx", "mon\u{a0}x"] {
            let named = named_paths(
                Use::Command,
                &format!("./bin/{name} --flag"),
                None,
                &no_vars,
            );
            assert!(
                named.iter().any(|n| n.path == format!("./bin/{name}")),
                "{named:?}"
            );
        }
        // An alias without `!` is split by git at CR too: `-c core.fsmonitor=./bin/mon`.
        let named = named_paths(
            Use::Command,
            "-c core.fsmonitor=./bin/mon\rstatus",
            None,
            &no_vars,
        );
        assert!(named.iter().any(|n| n.path == "./bin/mon"), "{named:?}");
        use super::super::paths::{gitfile_target, pointed_path};
        assert_eq!(pointed_path("../../cd\0junk\n"), Path::new("../../cd"));
        // Line ends off the whole text first, then the NUL, as git does.
        assert_eq!(pointed_path("../gd\r\0junk\n"), Path::new("../gd\r"));
        assert_eq!(pointed_path("X\n\0"), Path::new("X\n"));
        assert_eq!(
            pointed_path("../modules/foo \r\n"),
            Path::new("../modules/foo ")
        );
        assert_eq!(
            gitfile_target("gitdir: ../gd\0junk\n"),
            Some(PathBuf::from("../gd"))
        );
        assert_eq!(
            gitfile_target("gitdir:  spaced\n"),
            Some(PathBuf::from(" spaced"))
        );
        assert_eq!(gitfile_target("not a gitfile\n"), None);
    }

    #[test]
    fn a_backspace_escape_is_a_character_and_a_nul_ends_the_value() {
        let entries = super::super::gitconfig::parse("[core]\n\thooksPath = .hooksX\\b\n");
        assert_eq!(entries[0].value.as_deref(), Some(".hooksX\u{8}"));
        let entries =
            super::super::gitconfig::parse("[core]\n\thooksPath = .hk\0zz\n[a]\n\tb = c\n");
        assert_eq!(entries[0].value.as_deref(), Some(".hk"));
        assert_eq!(entries[1].value.as_deref(), Some("c"));
    }
}
