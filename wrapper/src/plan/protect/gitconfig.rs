//! What git configuration makes git run or read from elsewhere: a pinned config is only
//! safe if what it names is too. `core.hooksPath = .husky/_` makes the hooks the files in
//! that directory of the work tree; `include.path` and `includeIf.*.path` read another
//! file as config; and the keys whose value is a command (`core.fsmonitor`,
//! `filter.*.process`, `alias.x = !cmd`...) run whatever their first word names. Each of
//! those that lies inside a writable root is pinned too (a placeholder where missing),
//! or CMD could rewrite it for git to run after the run (git-config(1)).
//!
//! The parser reads git's config syntax (git-config(1) "CONFIGURATION FILE"): `[section]`
//! and `[section "subsection"]` headers (section and key names case-insensitive),
//! `key = value` with `;`/`#` comments, double quotes, backslash escapes and
//! continuation lines. Hand-written: no crate reads git's dialect.

use std::path::{Path, PathBuf};

use super::placeholders::{Placeholder, EMPTY_CONFIG};

/// A config file larger than this is not read.
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Includes followed this deep (git's own limit is 10).
const MAX_INCLUDE_DEPTH: usize = 10;

/// One `section[.subsection].key = value` of a config file.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// Lowercase.
    pub section: String,
    pub subsection: Option<String>,
    /// Lowercase.
    pub key: String,
    /// `None` for a key with no `=` (a boolean true).
    pub value: Option<String>,
}

/// Parses config text; lines it cannot read are skipped (git would refuse the file, and
/// then run nothing from it).
pub fn parse(text: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut section = String::new();
    let mut subsection = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.trim_start().to_owned();
        if line.starts_with('[') {
            if let Some((name, sub)) = header(&line) {
                section = name;
                subsection = sub;
            }
            // A key may follow the header on the same line.
            match line.find(']') {
                Some(end) => line = line[end + 1..].trim_start().to_owned(),
                None => continue,
            }
        }
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        let name_end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(line.len());
        let key = line[..name_end].to_ascii_lowercase();
        let rest = line[name_end..].trim_start();
        if key.is_empty() {
            continue;
        }
        let value = match rest.strip_prefix('=') {
            Some(raw) => {
                // A value ending in an unquoted backslash continues on the next line.
                let mut raw = raw.to_owned();
                while raw.ends_with('\\') && !raw.ends_with("\\\\") {
                    raw.pop();
                    match lines.next() {
                        Some(next) => raw.push_str(next),
                        None => break,
                    }
                }
                Some(value(&raw))
            }
            None if rest.is_empty() || rest.starts_with(['#', ';']) => None,
            None => continue,
        };
        entries.push(Entry {
            section: section.clone(),
            subsection: subsection.clone(),
            key,
            value,
        });
    }
    entries
}

/// `[name]`, `[name "sub"]` or the old `[name.sub]`.
fn header(line: &str) -> Option<(String, Option<String>)> {
    let inner = &line[1..line.find(']')?];
    match inner.split_once(char::is_whitespace) {
        Some((name, sub)) => {
            let sub = sub.trim().strip_prefix('"')?.strip_suffix('"')?;
            let sub = sub.replace("\\\"", "\"").replace("\\\\", "\\");
            Some((name.to_ascii_lowercase(), Some(sub)))
        }
        None => match inner.split_once('.') {
            Some((name, sub)) => Some((name.to_ascii_lowercase(), Some(sub.to_ascii_lowercase()))),
            None => Some((inner.to_ascii_lowercase(), None)),
        },
    }
}

/// A raw value: comments cut where unquoted, quotes removed, escapes resolved, outer
/// whitespace trimmed (inner kept).
fn value(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => {
                    out.pop();
                }
                Some(other) => out.push(other),
                None => {}
            },
            ';' | '#' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_owned()
}

/// Reads a config file (`None` if it is missing, unreadable or too large).
pub fn read(path: &Path) -> Option<Vec<Entry>> {
    let text = crate::plan::read_small_file(path, MAX_CONFIG_BYTES).ok()?;
    Some(parse(&text))
}

/// The keys whose value is a command git runs (git-config(1)), by section, subsection
/// presence and key; `*` stands for any driver or alias name.
const COMMAND_KEYS: &[(&str, bool, &str)] = &[
    ("core", false, "fsmonitor"),
    ("core", false, "sshcommand"),
    ("core", false, "pager"),
    ("core", false, "editor"),
    ("core", false, "askpass"),
    ("sequence", false, "editor"),
    ("diff", false, "external"),
    ("gpg", false, "program"),
    ("gpg", true, "program"),
    ("credential", false, "helper"),
    ("credential", true, "helper"),
    ("filter", true, "clean"),
    ("filter", true, "smudge"),
    ("filter", true, "process"),
    ("diff", true, "command"),
    ("diff", true, "textconv"),
    ("merge", true, "driver"),
    ("alias", false, "*"),
    ("pager", false, "*"),
];

/// The program a command value runs, when it names one by path (`./x`, `tools/x`,
/// `/abs/x`, `~/x`; `!cmd` for aliases and helpers): the first word. A bare name is
/// looked up on PATH, which the writable roots are not expected to be on.
fn program(value: &str) -> Option<&str> {
    let value = value.trim_start().trim_start_matches('!').trim_start();
    let first = value.split_whitespace().next()?;
    (first.contains('/') || first.starts_with('~')).then_some(first)
}

/// `~/x` against the home directory, a relative path against `base`.
fn resolve(path: &str, base: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if let Some(rest) = path.strip_prefix("~/") {
        return home.map(|h| h.join(rest));
    }
    Some(base.join(path))
}

/// The paths a config file (and what it includes) makes git run or read, with the
/// placeholder each gets where it is missing (an empty file for a config or a program,
/// an empty directory for a hooks directory). `worktree` is the top of the work tree git
/// runs hooks and commands from (`None` for the global and system files, whose commands
/// run from wherever git runs: only absolute and `~/` paths count there).
pub fn code_paths(
    config: &Path,
    worktree: Option<&Path>,
    home: Option<&Path>,
) -> Vec<(PathBuf, Placeholder)> {
    let mut found = Vec::new();
    let mut queue = vec![(config.to_owned(), 0)];
    while let Some((file, depth)) = queue.pop() {
        let Some(entries) = read(&file) else {
            continue;
        };
        let dir = file.parent().unwrap_or(Path::new("/")).to_owned();
        for entry in entries {
            let Some(value) = entry.value.as_deref() else {
                continue;
            };
            let includes = entry.key == "path"
                && (entry.section == "include"
                    || (entry.section == "includeif" && entry.subsection.is_some()));
            if includes {
                // Relative to the including file; missing ones are skipped by git, so a
                // placeholder (an empty config) keeps CMD from making one.
                if let Some(path) = resolve(value, &dir, home) {
                    if depth < MAX_INCLUDE_DEPTH {
                        queue.push((path.clone(), depth + 1));
                    }
                    found.push((path, EMPTY_CONFIG));
                }
                continue;
            }
            // Relative to the work tree, where git runs hooks and commands from; without
            // one (global and system files), only absolute and `~/` paths count.
            let from_worktree = |path: &str| match worktree {
                Some(base) => resolve(path, base, home),
                None if path.starts_with(['/', '~']) => resolve(path, Path::new("/"), home),
                None => None,
            };
            if entry.section == "core" && entry.key == "hookspath" {
                found.extend(from_worktree(value).map(|p| (p, Placeholder::Dir)));
                continue;
            }
            let runs = COMMAND_KEYS.iter().any(|(section, sub, key)| {
                entry.section == *section
                    && entry.subsection.is_some() == *sub
                    && (*key == "*" || entry.key == *key)
            });
            if let Some(program) = runs.then(|| program(value)).flatten() {
                // A placeholder for a missing one is an empty file, not executable.
                found.extend(from_worktree(program).map(|p| (p, EMPTY_CONFIG)));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_gits_dialect() {
        let text = "[core]\n\tfsmonitor = \"./tools/watch\" ; a comment\n\tbare\n\
                    [Extensions] objectFormat = sha256 # trailing\n\
                    [includeIf \"gitdir:~/work/\"]\n\tpath = ../shared.cfg\n\
                    [alias]\n\tx = !sh -c \\\n  'echo hi'\n\
                    [filter.lfs]\n\tprocess = git-lfs filter-process\n";
        let entries = parse(text);
        let get = |section: &str, key: &str| {
            entries
                .iter()
                .find(|e| e.section == section && e.key == key)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(get("core", "fsmonitor").as_deref(), Some("./tools/watch"));
        assert!(entries.iter().any(|e| e.key == "bare" && e.value.is_none()));
        assert_eq!(get("extensions", "objectformat").as_deref(), Some("sha256"));
        assert_eq!(get("includeif", "path").as_deref(), Some("../shared.cfg"));
        assert_eq!(get("alias", "x").as_deref(), Some("!sh -c   'echo hi'"));
        let lfs = entries.iter().find(|e| e.section == "filter").unwrap();
        assert_eq!(lfs.subsection.as_deref(), Some("lfs"));
    }

    #[test]
    fn finds_what_a_config_makes_git_run_or_read() {
        let dir = std::env::temp_dir().join(format!("netbox-gitconfig-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("repo/.git")).unwrap();
        let config = dir.join("repo/.git/config");
        std::fs::write(
            &config,
            "[core]\n\thooksPath = .husky/_\n\tfsmonitor = ./tools/watch\n\tpager = less\n\
             [include]\n\tpath = ../../more.cfg\n[alias]\n\tb = !./build.sh --fast\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("more.cfg"),
            "[diff \"x\"]\n\ttextconv = /opt/conv\n",
        )
        .unwrap();
        let worktree = dir.join("repo");
        let got = code_paths(&config, Some(&worktree), None);
        let paths: Vec<PathBuf> = got.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(
            paths,
            vec![
                worktree.join(".husky/_"),
                worktree.join("./tools/watch"),
                dir.join("repo/.git/../../more.cfg"),
                worktree.join("./build.sh"),
                PathBuf::from("/opt/conv"),
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
