//! What git configuration makes git run or read from elsewhere: a pinned config is only
//! safe if what it names is too. `core.hooksPath = .husky/_` makes the hooks the files in
//! that directory of the work tree; `include.path` and `includeIf.*.path` read another
//! file as config; and the settings whose value is a command (`core.fsmonitor`,
//! `filter.*.process`, `alias.x = !cmd`...) run what the paths in it name. Which settings
//! those are is gitcode.rs's table. A relative path is relative to the top of the work
//! tree of whichever repository git runs in, for the global and system files too, so
//! these are resolved per repository (protect/mod.rs).
//!
//! The parser reads git's config syntax (git-config(1) "CONFIGURATION FILE"): `[section]`
//! and `[section "subsection"]` headers (section and key names case-insensitive),
//! `key = value` with `;`/`#` comments, double quotes, backslash escapes and
//! continuation lines. Hand-written: no crate reads git's dialect.

use std::path::{Path, PathBuf};

use super::gitcode::{self, Use};
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

/// Includes followed, at most, from one file (each is a file read).
const MAX_INCLUDES: usize = 64;

/// A configuration as git reads it: a file's entries and those of the files it includes
/// (git-config(1) "Includes"; every include is followed, whatever its condition, since
/// the condition may hold for some repository), each with the directory a relative
/// include in it is relative to.
#[derive(Debug, Default)]
pub struct ConfigSet {
    entries: Vec<(Entry, PathBuf)>,
}

/// A path a configuration names for git to run or read as code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodePath {
    pub path: PathBuf,
    /// The shape a placeholder takes where it is missing: an empty directory for a
    /// directory of hooks or templates, an empty file (not executable) otherwise.
    pub leaf: Placeholder,
    /// Named as a path for certain; otherwise a word of a command's arguments with a `/`
    /// in it, which counts where its first component exists (gitcode.rs).
    pub certain: bool,
    /// The setting that names it, as documented (`core.fsmonitor`).
    pub setting: String,
}

impl ConfigSet {
    /// `config` and every file it includes (missing ones are skipped, as git does).
    pub fn read(config: &Path, home: Option<&Path>) -> ConfigSet {
        let mut set = ConfigSet::default();
        let mut queue = vec![(config.to_owned(), 0)];
        let mut files = 0;
        while let Some((file, depth)) = queue.pop() {
            files += 1;
            if files > MAX_INCLUDES {
                break;
            }
            let Some(entries) = read(&file) else {
                continue;
            };
            let dir = file.parent().unwrap_or(Path::new("/")).to_owned();
            for entry in entries {
                let include =
                    gitcode::use_of(&entry.section, entry.subsection.as_deref(), &entry.key)
                        == Some(Use::Include);
                if let (true, Some(value)) = (include, entry.value.as_deref()) {
                    let value = value.strip_prefix(":(optional)").unwrap_or(value);
                    if let Some(path) = gitcode::resolve(value, &dir, home) {
                        if depth < MAX_INCLUDE_DEPTH {
                            queue.push((path, depth + 1));
                        }
                    }
                }
                set.entries.push((entry, dir.clone()));
            }
        }
        set
    }

    /// The configuration git takes from the environment (git-config(1) ENVIRONMENT:
    /// `GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>`) and the variables
    /// git(1) runs as programs (gitcode::ENVIRONMENT), as read by `lookup`; relative paths
    /// in them are relative to where git runs, like a setting's.
    pub fn from_environment(lookup: &dyn Fn(&str) -> Option<String>) -> ConfigSet {
        let mut set = ConfigSet::default();
        let mut push = |name: &str, value: String| {
            let (head, key) = name.rsplit_once('.').unwrap_or((name, ""));
            let (section, subsection) = match head.split_once('.') {
                Some((s, sub)) => (s, Some(sub.to_owned())),
                None => (head, None),
            };
            set.entries.push((
                Entry {
                    section: section.to_ascii_lowercase(),
                    subsection,
                    key: key.to_ascii_lowercase(),
                    value: Some(value),
                },
                // An include given this way is relative to where git runs: no file's
                // directory; the empty path joins as that.
                PathBuf::new(),
            ));
        };
        let count = lookup("GIT_CONFIG_COUNT")
            .and_then(|c| c.trim().parse::<usize>().ok())
            .unwrap_or(0)
            .min(1024);
        for n in 0..count {
            if let (Some(key), Some(value)) = (
                lookup(&format!("GIT_CONFIG_KEY_{n}")),
                lookup(&format!("GIT_CONFIG_VALUE_{n}")),
            ) {
                push(&key, value);
            }
        }
        for (variable, setting) in gitcode::ENVIRONMENT {
            if let Some(value) = lookup(variable).filter(|v| !v.is_empty()) {
                push(setting, value);
            }
        }
        set
    }

    /// `core.worktree`, if set (the last one wins): relative to the git directory.
    pub fn worktree(&self) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(e, _)| e.section == "core" && e.subsection.is_none() && e.key == "worktree")
            .and_then(|(e, _)| e.value.as_deref())
    }

    /// What this configuration names for git to run or read as code: relative paths
    /// against `run_dir` (the top of the work tree, or the git directory of a bare
    /// repository: where git runs hooks and commands) and includes against their file's
    /// directory; with no `run_dir`, only absolute and `~` paths (and includes).
    pub fn code_paths(&self, run_dir: Option<&Path>, home: Option<&Path>) -> Vec<CodePath> {
        let lookup = |name: &str| std::env::var(name).ok();
        let mut found = Vec::new();
        for (entry, dir) in &self.entries {
            let Some(value) = entry.value.as_deref() else {
                continue;
            };
            let sub = entry.subsection.as_deref();
            let Some(how) = gitcode::use_of(&entry.section, sub, &entry.key) else {
                continue;
            };
            if how == Use::WorkTree {
                continue;
            }
            for named in gitcode::named_paths(how, value, sub, &lookup) {
                let absolute = named.path.starts_with(['/', '~']);
                let base = match (how, run_dir) {
                    (Use::Include, _) if !dir.as_os_str().is_empty() => dir.as_path(),
                    (_, Some(run_dir)) => run_dir,
                    (_, None) if absolute => Path::new("/"),
                    (_, None) => continue,
                };
                let Some(path) = gitcode::resolve(&named.path, base, home) else {
                    continue;
                };
                // An argument like `origin/main` names a file only where its first
                // component is there.
                if !named.certain {
                    let first = Path::new(&named.path).components().next();
                    if first.is_none_or(|c| base.join(c).symlink_metadata().is_err()) {
                        continue;
                    }
                }
                let leaf = match how {
                    Use::HookDir | Use::TemplateDir => Placeholder::Dir,
                    _ => EMPTY_CONFIG,
                };
                found.push(CodePath {
                    path,
                    leaf,
                    certain: named.certain,
                    setting: setting_name(entry),
                });
            }
        }
        found
    }
}

/// `section[.subsection].key`, as a person reads it.
fn setting_name(entry: &Entry) -> String {
    match &entry.subsection {
        Some(sub) => format!("{}.{sub}.{}", entry.section, entry.key),
        None => format!("{}.{}", entry.section, entry.key),
    }
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
             [include]\n\tpath = ../../more.cfg\n[alias]\n\tb = !./build.sh --fast\n\
             [user]\n\tname = tools/not-code\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("more.cfg"),
            "[diff \"x\"]\n\ttextconv = /opt/conv\n[interactive]\n\tdiffFilter = ./filt\n",
        )
        .unwrap();
        let worktree = dir.join("repo");
        let set = ConfigSet::read(&config, None);
        let paths = |run_dir: Option<&Path>| -> Vec<PathBuf> {
            set.code_paths(run_dir, None)
                .into_iter()
                .map(|c| c.path)
                .collect()
        };
        assert_eq!(
            paths(Some(&worktree)),
            vec![
                worktree.join(".husky/_"),
                worktree.join("./tools/watch"),
                dir.join("repo/.git/../../more.cfg"),
                worktree.join("./build.sh"),
                PathBuf::from("/opt/conv"),
                worktree.join("./filt"),
            ]
        );
        // With no work tree (a global file read for no repository): absolute paths and
        // includes only.
        assert_eq!(
            paths(None),
            vec![
                dir.join("repo/.git/../../more.cfg"),
                PathBuf::from("/opt/conv")
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_settings_from_the_environment() {
        let env = |name: &str| -> Option<String> {
            match name {
                "GIT_CONFIG_COUNT" => Some("2".into()),
                "GIT_CONFIG_KEY_0" => Some("core.hooksPath".into()),
                "GIT_CONFIG_VALUE_0" => Some(".githooks".into()),
                "GIT_CONFIG_KEY_1" => Some("diff.pdf.textconv".into()),
                "GIT_CONFIG_VALUE_1" => Some("./conv".into()),
                "GIT_SSH_COMMAND" => Some("./ssh-wrapper -v".into()),
                _ => None,
            }
        };
        let set = ConfigSet::from_environment(&env);
        let run_dir = Path::new("/w");
        let got: Vec<(PathBuf, String)> = set
            .code_paths(Some(run_dir), None)
            .into_iter()
            .map(|c| (c.path, c.setting))
            .collect();
        assert_eq!(
            got,
            vec![
                (run_dir.join(".githooks"), "core.hookspath".into()),
                (run_dir.join("./conv"), "diff.pdf.textconv".into()),
                (run_dir.join("./ssh-wrapper"), "core.sshcommand".into()),
            ]
        );
    }
}
