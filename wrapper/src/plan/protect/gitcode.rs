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
];

/// How git uses `section[.subsection].key`, if it runs or reads it as code. Section and
/// key are lowercase (as the parser gives them); a subsection is matched by shape.
pub fn use_of(section: &str, subsection: Option<&str>, key: &str) -> Option<Use> {
    SETTINGS
        .iter()
        .find(|(name, _)| matches(name, section, subsection, key))
        .map(|(_, how)| *how)
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
        (Some(pattern), Some(_)) if pattern.starts_with('<') => true,
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
        // `:(optional)` marks a path git may skip when missing; `%(prefix)/` is git's own
        // install location, never a writable root.
        let v = v.strip_prefix(":(optional)").unwrap_or(v).trim();
        if v.is_empty() || v.starts_with("%(prefix)/") {
            return Vec::new();
        }
        vec![Named {
            path: v.to_owned(),
            how,
            role: Role::Value,
        }]
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

/// Programs that run the next word as a command (after their own options and
/// `NAME=value` assignments).
const WRAPPERS: &[&str] = &[
    "env", "exec", "command", "nohup", "time", "nice", "ionice", "stdbuf", "timeout", "setsid",
];

/// Interpreters whose first word that is not an option is a script they run.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "node", "nodejs", "deno", "bun", "python",
    "python2", "python3", "perl", "ruby", "php", "lua", "tclsh", "awk", "gawk", ".", "source",
];

/// The paths a command line runs: each command's program where it is named by path (a
/// bare name is looked up on PATH), and the script an interpreter runs (`sh tools/x`,
/// `node ./lint.js`, `. ./env.sh`), after `$VAR` expansion. Commands are found where a
/// shell finds them: at the start, after `;`, `&`, `|`, `(`, `{`, `` ` `` and `$(`, and
/// after `env`, `exec` and other wrappers and `NAME=value` assignments. Other words
/// (arguments, redirections: `git add .`, `> out/log`, `origin/main`) are not code. A
/// `-c key=value` in an alias's git arguments is read as that setting.
fn command_paths(value: &str, how: Use, lookup: &dyn Fn(&str) -> Option<String>) -> Vec<Named> {
    let expanded = crate::plan::homesplit::expand_variables(value, lookup);
    let mut found = Vec::new();
    let mut at_command = true;
    let mut wants_script = false;
    let mut words = shell_words(expanded.trim_start().trim_start_matches('!')).into_iter();
    while let Some(word) = words.next() {
        let Word::Text(word) = word else {
            // An operator: a new command starts.
            at_command = true;
            wants_script = false;
            continue;
        };
        if word == "-c" {
            // `git -c key=value`: the value is that setting's.
            if let Some(Word::Text(setting)) = words.next() {
                if let Some((name, value)) = setting.split_once('=') {
                    let (head, key) = name.rsplit_once('.').unwrap_or((name, ""));
                    let (section, sub) = match head.split_once('.') {
                        Some((s, sub)) => (s, Some(sub)),
                        None => (head, None),
                    };
                    if let Some(inner) = use_of(&section.to_ascii_lowercase(), sub, key) {
                        found.extend(named_paths(inner, value, sub, lookup));
                    }
                }
            }
            continue;
        }
        if word.starts_with('-') {
            continue;
        }
        let base = word.rsplit('/').next().unwrap_or(&word);
        if at_command {
            let assignment = word
                .split_once('=')
                .is_some_and(|(name, _)| !name.is_empty() && !name.contains('/'));
            if assignment || WRAPPERS.contains(&base) {
                continue;
            }
            if word.contains('/') || word.starts_with('~') {
                found.push(Named {
                    path: word.clone(),
                    how,
                    role: Role::Program,
                });
            }
            at_command = false;
            wants_script = INTERPRETERS.contains(&base);
        } else if wants_script {
            found.push(Named {
                path: word,
                how,
                role: Role::Script,
            });
            wants_script = false;
        }
    }
    found
}

/// A word of a command line, or an operator between commands.
enum Word {
    Text(String),
    Operator,
}

/// Splits a command line into words (quotes removed, backslash escapes kept as the
/// character) and the operators that start a new command.
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
            ';' | '&' | '|' | '(' | ')' | '{' | '}' | '`' | '\n' => {
                end_word(&mut word, &mut in_word, &mut words);
                words.push(Word::Operator);
            }
            '<' | '>' => {
                // A redirection's target is a file read or written, not run.
                end_word(&mut word, &mut in_word, &mut words);
                while chars
                    .next_if(|c| matches!(c, '<' | '>' | '&' | ' ' | '\t'))
                    .is_some()
                {}
                while chars
                    .next_if(|c| !c.is_whitespace() && !";&|()".contains(*c))
                    .is_some()
                {}
            }
            c if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut words),
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
/// relative path against `base`.
pub fn resolve(path: &str, base: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if path == "~" {
        return home.map(Path::to_owned);
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return home.map(|h| h.join(rest));
    }
    if let Some(rest) = path.strip_prefix('~') {
        let (user, tail) = rest.split_once('/').unwrap_or((rest, ""));
        return crate::plan::homesplit::account_home(user).map(|h| h.join(tail));
    }
    Some(base.join(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_vars(_: &str) -> Option<String> {
        None
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
        let paths = |value: &str| -> Vec<(String, Role)> {
            named_paths(Use::Command, value, None, &no_vars)
                .into_iter()
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
                ("./run".into(), Role::Program),
                ("./two words".into(), Role::Program),
                ("./sub".into(), Role::Program)
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
        assert_eq!(
            named_paths(Use::ExtUrl, "ext::sh ./x %S", None, &no_vars)[0].path,
            "./x"
        );
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
        assert_eq!(
            named_paths(Use::Include, ":(optional)../x.cfg", None, &no_vars)[0].path,
            "../x.cfg"
        );
    }
}
