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

use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::gitcode::{self, Role, Use};
use super::placeholders::{Placeholder, EMPTY_CONFIG};
use super::sources::Sources;
use crate::paths::exact_text::{path_of, shown, text_of};

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

/// Parses config text the way git's own parser does (config.c): a byte-order mark is
/// skipped; a value runs to the end of its line, where a backslash right before the
/// newline continues it (but not inside a comment); `;` and `#` start a comment outside
/// double quotes; unquoted whitespace at either end is dropped. What git would refuse is
/// skipped (git would then run nothing from the file).
pub fn parse(text: &str) -> Vec<Entry> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // git reads CR LF as LF (config.c get_next_char), continuation lines included.
    let text = text.replace("\r\n", "\n");
    let mut chars = text.chars().peekable();
    let mut entries = Vec::new();
    let mut section = String::new();
    let mut subsection = None;
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None => break,
            Some('#' | ';') => skip_line(&mut chars),
            Some('[') => {
                chars.next();
                match header(&mut chars) {
                    Some((name, sub)) => {
                        section = name;
                        subsection = sub;
                    }
                    None => skip_line(&mut chars),
                }
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let mut key = String::new();
                while let Some(c) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '-') {
                    key.push(c.to_ascii_lowercase());
                }
                while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
                let value = match chars.peek() {
                    Some('=') => {
                        chars.next();
                        Some(value(&mut chars))
                    }
                    // A key alone: a boolean true.
                    None | Some('\n' | '\r' | '#' | ';') => {
                        skip_line(&mut chars);
                        None
                    }
                    Some(_) => {
                        skip_line(&mut chars);
                        continue;
                    }
                };
                entries.push(Entry {
                    section: section.clone(),
                    subsection: subsection.clone(),
                    key,
                    value,
                });
            }
            Some(_) => skip_line(&mut chars),
        }
    }
    entries
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn skip_line(chars: &mut Chars<'_>) {
    for c in chars.by_ref() {
        if c == '\n' {
            break;
        }
    }
}

/// After `[`: `name]`, `name "sub"]` (escapes in the quotes) or the old `name.sub]`.
fn header(chars: &mut Chars<'_>) -> Option<(String, Option<String>)> {
    let mut name = String::new();
    while let Some(c) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.') {
        name.push(c.to_ascii_lowercase());
    }
    match chars.next()? {
        ']' => Some(match name.split_once('.') {
            Some((section, sub)) => (section.to_owned(), Some(sub.to_owned())),
            None => (name, None),
        }),
        ' ' | '\t' => {
            while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
            if chars.next()? != '"' {
                return None;
            }
            let mut sub = String::new();
            loop {
                match chars.next()? {
                    '\\' => sub.push(chars.next()?),
                    '"' => break,
                    '\n' => return None,
                    c => sub.push(c),
                }
            }
            (chars.next()? == ']').then_some((name, Some(sub)))
        }
        _ => None,
    }
}

/// After `=`: the value, with its line (and the lines it continues onto) consumed.
fn value(chars: &mut Chars<'_>) -> String {
    let mut out = String::new();
    // Unquoted whitespace, kept only if something follows it.
    let mut space = String::new();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '\n' => break,
            '\\' => {
                let escaped = match chars.next() {
                    // A continuation: the value goes on on the next line.
                    Some('\n') => continue,
                    Some('n') => '\n',
                    Some('t') => '\t',
                    // A backspace character, as git's own parser writes it (not one taken
                    // back: `.hooksX\b` is a directory of that name to git).
                    Some('b') => '\u{8}',
                    Some(other) => other,
                    None => break,
                };
                out.push_str(&std::mem::take(&mut space));
                out.push(escaped);
            }
            '"' => quoted = !quoted,
            ';' | '#' if !quoted => {
                skip_line(chars);
                break;
            }
            ' ' | '\t' | '\r' if !quoted => {
                if !out.is_empty() {
                    space.push(c);
                }
            }
            c => {
                out.push_str(&std::mem::take(&mut space));
                out.push(c);
            }
        }
    }
    // Git keeps a value as a C string: it ends at a NUL byte (the line is read on).
    if let Some(nul) = out.find('\0') {
        out.truncate(nul);
    }
    out
}

/// Reads a config file: `Ok(None)` if it is missing (git skips it), an error if it is
/// there but cannot be read (netbox could not tell what it names). Bytes that are not
/// UTF-8 are read so that the paths named read back to them (paths/exact_text.rs): git
/// takes a value's bytes as they are. A character device (`/dev/null`, as in
/// `GIT_CONFIG_GLOBAL=/dev/null`) reads as empty.
pub fn read_file(path: &Path) -> std::io::Result<Option<Vec<Entry>>> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(None)
        }
        Err(e) => return Err(e),
        Ok(meta) if meta.file_type().is_char_device() => return Ok(Some(Vec::new())),
        Ok(_) => {}
    }
    let bytes = bridge::small_file::read_small_bytes(path, MAX_CONFIG_BYTES)?;
    Ok(Some(parse(&text_of(std::ffi::OsStr::from_bytes(&bytes)))))
}

/// Reads a config file (`None` if it is missing or cannot be read).
pub fn read(path: &Path) -> Option<Vec<Entry>> {
    read_file(path).ok().flatten()
}

/// Includes followed, at most, from one file (each is a file read).
const MAX_INCLUDES: usize = 64;

/// A configuration as git reads it: a file's entries and those of the files it includes
/// (git-config(1) "Includes"; every include is followed, whatever its condition, since
/// the condition may hold for some repository), each with the file it is in (a relative
/// include is relative to that file's directory).
#[derive(Debug, Default)]
pub struct ConfigSet {
    entries: Vec<(Entry, PathBuf)>,
    /// The first file that is there but could not be read, and why: what it names is
    /// unknown, so nothing may be taken from this configuration as complete.
    unreadable: Option<(PathBuf, String)>,
    /// Every file read (or looked for), as it was just before: a change to one may
    /// change what this configuration names.
    pub sources: Sources,
}

/// What could not be told of a configuration: the file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub path: PathBuf,
    pub reason: String,
}

/// A path a configuration names for git to run or read as code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodePath {
    pub path: PathBuf,
    /// The shape a placeholder takes where it is missing: an empty directory for a
    /// directory of hooks or templates, an empty file (not executable) otherwise.
    pub leaf: Placeholder,
    /// The setting that names it, as documented (`core.fsmonitor`).
    pub setting: String,
    /// What it is to git: a setting's whole value, a program, or a script.
    pub role: Role,
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
                set.unreadable
                    .get_or_insert((file, format!("it includes more than {MAX_INCLUDES} files")));
                break;
            }
            set.sources.record(&file);
            let entries = match read_file(&file) {
                Ok(Some(entries)) => entries,
                Ok(None) => continue,
                Err(e) => {
                    set.unreadable.get_or_insert((file, e.to_string()));
                    continue;
                }
            };
            let dir = file.parent().unwrap_or(Path::new("/")).to_owned();
            for entry in entries {
                let include =
                    gitcode::use_of(&entry.section, entry.subsection.as_deref(), &entry.key)
                        == Some(Use::Include);
                if let (true, Some(value)) = (include, entry.value.as_deref()) {
                    // As a newer git reads `:(optional)`, and as an older one does (part of
                    // the path): both files count.
                    let mut spellings = vec![value];
                    spellings.extend(value.strip_prefix(":(optional)"));
                    for value in spellings {
                        if let Some(path) = gitcode::resolve(value, &dir, home) {
                            if depth < MAX_INCLUDE_DEPTH {
                                queue.push((path, depth + 1));
                            }
                        }
                    }
                }
                set.entries.push((entry, file.clone()));
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
        let mut pairs: Vec<(String, String)> = Vec::new();
        // `git -c` hands its settings to the programs it runs (netbox in a hook, say) as
        // GIT_CONFIG_PARAMETERS: `'key'='value'` pairs, shell-quoted.
        if let Some(parameters) = lookup("GIT_CONFIG_PARAMETERS") {
            pairs.extend(parameters_of(&parameters));
        }
        let count = lookup("GIT_CONFIG_COUNT")
            .and_then(|c| c.trim().parse::<usize>().ok())
            .unwrap_or(0)
            .min(1024);
        for n in 0..count {
            if let (Some(key), Some(value)) = (
                lookup(&format!("GIT_CONFIG_KEY_{n}")),
                lookup(&format!("GIT_CONFIG_VALUE_{n}")),
            ) {
                pairs.push((key, value));
            }
        }
        for (variable, setting) in gitcode::ENVIRONMENT {
            if let Some(value) = lookup(variable).filter(|v| !v.is_empty()) {
                pairs.push(((*setting).to_owned(), value));
            }
        }
        for (name, value) in pairs {
            let (section, subsection, key) = gitcode::split_name(&name);
            let entry = Entry {
                section: section.to_ascii_lowercase(),
                subsection: subsection.map(str::to_owned),
                key: key.to_ascii_lowercase(),
                value: Some(value),
            };
            let include = gitcode::use_of(&entry.section, entry.subsection.as_deref(), &entry.key)
                == Some(Use::Include);
            // `~/x` as git expands it, with the home netbox runs for.
            let home = lookup("HOME").map(|home| path_of(&home));
            let included = include
                .then_some(entry.value.as_deref())
                .flatten()
                .filter(|v| v.starts_with(['/', '~']))
                .and_then(|v| gitcode::resolve(v, Path::new("/"), home.as_deref()))
                .filter(|p| p.is_absolute() && p != Path::new("/"));
            // An include given this way is relative to where git runs: no file.
            set.entries.push((entry, PathBuf::new()));
            // What an absolute include holds counts as this configuration.
            if let Some(file) = included {
                let inner = ConfigSet::read(&file, home.as_deref());
                set.unreadable = set.unreadable.take().or(inner.unreadable);
                set.sources.extend(inner.sources);
                set.entries.extend(inner.entries);
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
    pub fn code_paths(
        &self,
        run_dir: Option<&Path>,
        home: Option<&Path>,
    ) -> Result<Vec<CodePath>, Unreadable> {
        if let Some((path, reason)) = &self.unreadable {
            return Err(Unreadable {
                path: path.clone(),
                reason: reason.clone(),
            });
        }
        // Byte for byte: a variable that is not UTF-8 is no unset one (it was, and what it
        // named went unpinned).
        let lookup = |name: &str| std::env::var_os(name).map(|v| text_of(&v));
        let mut found = Vec::new();
        for (entry, file) in &self.entries {
            let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
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
                let base = match (how, dir, run_dir) {
                    (Use::Include, Some(dir), _) => dir,
                    (_, _, Some(run_dir)) => run_dir,
                    (_, _, None) if absolute => Path::new("/"),
                    (_, _, None) => continue,
                };
                let Some(path) = gitcode::resolve(&named.path, base, home) else {
                    continue;
                };
                // A directory is no program to run (`!cd ./src && make`).
                if named.role == Role::Program && path.is_dir() {
                    continue;
                }
                // A bare name runs what PATH finds; only one found in a place CMD could
                // write matters (it is watched, like the words below).
                let path = match named.role {
                    Role::Bare => match on_path(&named.path) {
                        Some(found) => found,
                        None => continue,
                    },
                    Role::Mentioned if !path.is_file() => continue,
                    _ => path,
                };
                let leaf = match how {
                    Use::HookDir | Use::TemplateDir => Placeholder::Dir,
                    _ => EMPTY_CONFIG,
                };
                found.push(CodePath {
                    path,
                    leaf,
                    setting: setting_name(entry),
                    role: named.role,
                });
            }
        }
        Ok(found)
    }
}

/// The `'key'='value'` pairs of GIT_CONFIG_PARAMETERS (git's quoting: single quotes,
/// with `'\''` for a quote inside).
fn parameters_of(text: &str) -> Vec<(String, String)> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => word.extend(chars.next()),
            ' ' => words.push(std::mem::take(&mut word)),
            c => word.push(c),
        }
    }
    words.push(word);
    words
        .into_iter()
        .filter_map(|w| {
            let (key, value) = w.split_once('=')?;
            Some((key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Where PATH (netbox's own, as the shell that runs git would have it) finds `name`.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    let cwd = std::env::current_dir().ok()?;
    std::env::split_paths(&path)
        .map(|dir| cwd.join(dir).join(path_of(name)))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `section[.subsection].key`, as a person reads it.
fn setting_name(entry: &Entry) -> String {
    match &entry.subsection {
        // A subsection in bytes that are not UTF-8: shown as the log shows such bytes.
        Some(sub) => format!("{}.{}.{}", entry.section, shown(sub), entry.key),
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
    fn reads_what_git_reads_and_nothing_else() {
        let get = |text: &str, key: &str| -> Option<String> {
            parse(text)
                .into_iter()
                .find(|e| e.key == key)
                .and_then(|e| e.value)
        };
        // A backslash at the end of a comment continues nothing.
        let text = "[core]\n\teditor = vim ; C:\\tools\\\n\thooksPath = .githooks\n";
        assert_eq!(get(text, "hookspath").as_deref(), Some(".githooks"));
        assert_eq!(get(text, "editor").as_deref(), Some("vim"));
        // One outside a comment does.
        let text = "[core]\n\tpager = less \\\n  -R\n\tx = 1\n";
        assert_eq!(get(text, "pager").as_deref(), Some("less   -R"));
        assert_eq!(get(text, "x").as_deref(), Some("1"));
        // CR LF ends a line as LF does, after a continuation's backslash too.
        let text = "[core]\r\n\tfsmonitor = \\\r\n./tools/fsmon\r\n";
        assert_eq!(get(text, "fsmonitor").as_deref(), Some("./tools/fsmon"));
        // A byte-order mark before the first header.
        let text = "\u{feff}[core]\n\thooksPath = .githooks\n";
        let entries = parse(text);
        assert_eq!(entries[0].section, "core");
        // `;` and `#` inside quotes are the value's.
        assert_eq!(
            get("[alias]\n\tx = \"!a; b # c\" # d\n", "x").as_deref(),
            Some("!a; b # c")
        );
        // A header's subsection keeps its case and escapes; the old form is lowercased.
        let entries = parse("[Remote \"Or\\\"ig\"]\nurl=u\n[Diff.PDF]\ntextconv=t\n");
        assert_eq!(entries[0].subsection.as_deref(), Some("Or\"ig"));
        assert_eq!(entries[1].subsection.as_deref(), Some("pdf"));
    }

    #[test]
    fn a_config_netbox_cannot_read_fails_closed() {
        let dir = std::env::temp_dir().join(format!("netbox-gitconfig-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Latin-1 in a setting that names no path: read, the rest still counts.
        let latin = dir.join("latin");
        std::fs::write(
            &latin,
            b"[user]\n\tname = Jos\xe9\n[core]\n\thooksPath = .husky/_\n",
        )
        .unwrap();
        let codes = ConfigSet::read(&latin, None)
            .code_paths(Some(&dir), None)
            .unwrap();
        assert_eq!(codes[0].path, dir.join(".husky/_"));
        // In a path that counts: the path named is those very bytes (git takes them as
        // they are), and so is one an include names.
        let latin_path = dir.join("latin-path");
        std::fs::write(&latin_path, b"[core]\n\thooksPath = .hooks\xe9\n").unwrap();
        let codes = ConfigSet::read(&latin_path, None)
            .code_paths(Some(&dir), None)
            .unwrap();
        let hooks = dir.join(std::ffi::OsStr::from_bytes(b".hooks\xe9"));
        assert_eq!(codes[0].path, hooks);
        let included = dir.join(std::ffi::OsStr::from_bytes(b"inc\xe9.cfg"));
        std::fs::write(&included, b"[core]\n\tfsmonitor = ./m\xff\n").unwrap();
        let including = dir.join("including-latin");
        let mut text = b"[include]\n\tpath = ".to_vec();
        text.extend_from_slice(included.as_os_str().as_bytes());
        text.push(b'\n');
        std::fs::write(&including, text).unwrap();
        let codes = ConfigSet::read(&including, None)
            .code_paths(Some(&dir), None)
            .unwrap();
        assert!(
            codes
                .iter()
                .any(|c| c.path == dir.join(std::ffi::OsStr::from_bytes(b"m\xff"))),
            "{codes:?}"
        );
        // There but not a regular file (a FIFO), or an include that is: refused.
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(ConfigSet::read(&fifo, None).code_paths(None, None).is_err());
        let including = dir.join("including");
        std::fs::write(
            &including,
            format!("[include]\n\tpath = {}\n", fifo.display()),
        )
        .unwrap();
        assert!(ConfigSet::read(&including, None)
            .code_paths(None, None)
            .is_err());
        // Missing, or /dev/null: nothing to read, nothing refused.
        assert!(ConfigSet::read(&dir.join("missing"), None)
            .code_paths(None, None)
            .unwrap()
            .is_empty());
        assert!(ConfigSet::read(Path::new("/dev/null"), None)
            .code_paths(None, None)
            .unwrap()
            .is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
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
                .unwrap()
                .into_iter()
                .filter(|c| !matches!(c.role, Role::Bare | Role::Mentioned))
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
        // `git -c` handing its settings on, and an include given by the environment.
        let dir = std::env::temp_dir().join(format!("netbox-gitconfig-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let team = dir.join("team.gitconfig");
        std::fs::write(&team, "[core]\n\thooksPath = .team-hooks\n").unwrap();
        let team_value = team.display().to_string();
        let more = |name: &str| -> Option<String> {
            match name {
                "GIT_CONFIG_PARAMETERS" => Some("'alias.x'='!./x' 'core.pager'='./p -R'".into()),
                "GIT_CONFIG_COUNT" => Some("1".into()),
                "GIT_CONFIG_KEY_0" => Some("include.path".into()),
                "GIT_CONFIG_VALUE_0" => Some(team_value.clone()),
                _ => None,
            }
        };
        let got: Vec<PathBuf> = ConfigSet::from_environment(&more)
            .code_paths(Some(run_dir), None)
            .unwrap()
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert!(got.contains(&run_dir.join("./x")), "{got:?}");
        assert!(got.contains(&run_dir.join("./p")), "{got:?}");
        // git's quoting of a quote inside a value.
        assert_eq!(
            parameters_of("'user.name'='it'\\''s'"),
            [("user.name".to_owned(), "it's".to_owned())]
        );
        assert!(got.contains(&run_dir.join(".team-hooks")), "{got:?}");
        std::fs::remove_dir_all(&dir).unwrap();
        let got: Vec<(PathBuf, String)> = set
            .code_paths(Some(run_dir), None)
            .unwrap()
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
