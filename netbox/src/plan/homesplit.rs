//! A writable root that is, or holds, a home directory (`--allow-home-write`; refused
//! without it, config.rs). A home is where code that runs later, outside the sandbox,
//! lives: shell and login files, desktop autostart, systemd user units and tmpfiles,
//! tools' configurations and caches, directories on PATH, and files programs look up in
//! home or in parent directories (`~/node_modules`, `~/.bash_aliases`). No list of such
//! places is complete, so a writable home is built the other way round:
//! - home's own top level stays read-only: nothing new appears there, nothing there is
//!   renamed or removed;
//! - each existing, not hidden entry of home (`~/projects`, `~/notes.txt`) that the caller
//!   may write becomes a writable root of its own, but for those that hold code or that
//!   code is reached through: one holding a directory on the caller's `PATH` or a place the
//!   environment names for configuration, data or toolchains (`XDG_CONFIG_HOME`,
//!   `CARGO_HOME`, `GOPATH`, ...; as named and as resolved), `~/bin`, `~/go`,
//!   `~/node_modules`, and one that a symlink elsewhere in home leads into (dotfiles kept in
//!   `~/dotfiles` and linked from `~/.bashrc` or `~/.config/nvim`);
//! - hidden entries stay read-only but for known data: shell and REPL histories, a few
//!   entries of `~/.local/state` (shells', less's, Python's histories), `~/.local/share`'s
//!   Trash, npm's logs;
//! - a symlink, socket or FIFO in home, or an entry whose name is not UTF-8, is never made
//!   writable;
//! - a root above home (`/home`, or a workspace holding it): everything in it beside the
//!   path down to home is writable as before, and the directories on that path keep
//!   their own entries (nothing new appears beside home).
//!
//! More can be made writable with `--write PATH` (a place the run needs, such as
//! `~/.config/tool`); the places under home that run code stay pinned even then
//! (protect/home.rs).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Hidden files at the top of home that are data: histories, written by the programs
/// that keep them.
const HIDDEN_DATA: &[&str] = &[
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".node_repl_history",
    ".lesshst",
    ".viminfo",
    ".psql_history",
    ".sqlite_history",
    ".mysql_history",
    ".rediscli_history",
    ".wget-hsts",
    ".sudo_as_admin_successful",
];

/// A hidden directory under home whose entries (`only` these, or all; but `except`
/// these) are data, each made writable.
struct DataDir {
    dir: &'static str,
    only: Option<&'static [&'static str]>,
    except: &'static [&'static str],
}

const HIDDEN_DATA_DIRS: &[DataDir] = &[
    // Not all of it: nix profiles, home-manager's session variables, mise's trusted
    // configs and fnm's shell links live here too, and decide what runs.
    DataDir {
        dir: ".local/state",
        only: Some(&["bash", "less", "lesshst", "python", "wireplumber"]),
        except: &[],
    },
    // Not `_cacache`: its index (packuments, their headers) is not checked against
    // whoever wrote it, and a later install would trust it.
    DataDir {
        dir: ".npm",
        only: Some(&["_logs"]),
        except: &[],
    },
];

/// Not hidden, yet holding code that runs later: never made writable.
const NOT_HIDDEN_CODE: &[&str] = &[
    "bin",
    "go",
    "node_modules",
    "R",
    "perl5",
    // Launchers a desktop runs, and strict snaps' own dotfile trees.
    "Desktop",
    "snap",
];

/// The caller's home directories, canonical: `$HOME` and the account's home in the
/// password database (sshd, systemd and the desktop go by the latter), where they exist.
pub fn homes() -> Vec<PathBuf> {
    let from_env = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    let uid = nix::unistd::getuid();
    let from_passwd = passwd_file_home(uid)
        .or_else(|| {
            nix::unistd::User::from_uid(uid)
                .ok()
                .flatten()
                .map(|u| u.dir)
        })
        .filter(|h| h.is_absolute());
    let mut homes: Vec<PathBuf> = [from_env, from_passwd]
        .into_iter()
        .flatten()
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .filter(|h| h != Path::new("/") && h.is_dir())
        .collect();
    homes.dedup();
    homes
}

/// The account's home as `/etc/passwd` gives it, read directly: getpwuid(3) loads the
/// NSS modules first (libnss_systemd here: ~140 µs measured, every start), which an
/// account listed in the file does not need. Accounts found elsewhere (LDAP, systemd-homed)
/// go through getpwuid.
fn passwd_file_home(uid: nix::unistd::Uid) -> Option<PathBuf> {
    let wanted = uid.as_raw().to_string();
    passwd_file_field(|f| f[2] == wanted)
}

/// The home of the account named `user`, from `/etc/passwd` (no NSS modules loaded for a
/// name in a setting).
pub fn account_home(user: &str) -> Option<PathBuf> {
    passwd_file_field(|f| f[0] == user)
}

/// The home field of the first `/etc/passwd` line whose fields `matches`.
fn passwd_file_field(matches: impl Fn(&[&str]) -> bool) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() == 7 && matches(&fields)).then(|| PathBuf::from(fields[5]))
    })
}

/// The places the environment names for code under `home` (`PATH` directories and the
/// variables above, and `~/bin`, `~/go`, `~/node_modules`), each resolved as far as it
/// exists (a missing `~/tools/bin` under a symlinked home still counts), and also as named.
pub fn code_locations(home: &Path) -> Vec<PathBuf> {
    // Not only the variables above: any variable's value may name a program or a
    // directory under home that something runs (`EDITOR=~/apps/nvim.AppImage`,
    // `LESSOPEN="| ~/scripts/lesspipe.sh %s"`, `GIT_SSH_COMMAND`, `NODE_OPTIONS`). Each
    // value is split into words (`:`, spaces, `|`, `=`); a word that is an absolute
    // path, or `~`-prefixed, counts. Variables naming where netbox and the shell are, not
    // what runs, are left out.
    const NOT_CODE: &[&str] = &["PWD", "OLDPWD", "HOME", "TMPDIR", "MAIL", "LOGNAME", "USER"];
    let mut resolver = PrefixResolver::default();
    let mut named: Vec<PathBuf> = Vec::new();
    for (key, value) in std::env::vars_os() {
        if !NOT_CODE.iter().any(|n| key == *n) {
            let lookup = |name: &str| std::env::var(name).ok();
            named.extend(paths_in_with(
                &value.to_string_lossy(),
                home,
                &lookup,
                &mut resolver,
            ));
        }
    }
    named.extend(NOT_HIDDEN_CODE.iter().map(|n| home.join(n)));
    let mut found: Vec<PathBuf> = Vec::new();
    for path in named.into_iter().filter(|p| p.is_absolute()) {
        found.push(resolver.resolve(&path));
        found.push(path);
    }
    found.retain(|p| p.starts_with(home));
    found.sort();
    found.dedup();
    found
}

/// Every path `text` mentions that may lie under `home`, wherever it stands (after a
/// newline, in `$(~/x)`, after `-I` or `@`), with `$VAR` and `${VAR}` expanded from the
/// environment first (a command run through a shell would): each word's part from its
/// first `/` or `~`, resolved as far as it exists (another spelling of home, `//`, a
/// symlinked home all come to the same path). The caller keeps those under home.
/// Variables are looked up by `lookup`, paths resolved by `resolver`.
fn paths_in_with(
    text: &str,
    home: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    resolver: &mut PrefixResolver,
) -> Vec<PathBuf> {
    let text = expand_variables(text, lookup);
    let ends = |c: char| {
        c.is_whitespace()
            || c.is_control()
            || matches!(
                c,
                '"' | '\'' | ':' | ';' | '|' | ',' | ')' | '(' | '`' | '$' | '='
            )
    };
    let mut found = Vec::new();
    for word in text.split(ends).filter(|w| !w.is_empty()) {
        let Some(at) = word.find(['/', '~']) else {
            continue;
        };
        let path = &word[at..];
        if let Some(rest) = path.strip_prefix('~') {
            if rest.is_empty() || rest.starts_with('/') {
                found.push(home.join(rest.trim_start_matches('/')));
            } else {
                // `~user/…`: that account's home (from /etc/passwd: no NSS modules loaded
                // for a word in a variable).
                let (user, tail) = rest.split_once('/').unwrap_or((rest, ""));
                if let Some(dir) = account_home(user) {
                    found.push(resolver.resolve(&dir.join(tail)));
                }
            }
        } else {
            found.push(PathBuf::from(path));
            found.push(resolver.resolve(Path::new(path)));
        }
    }
    // Home's path followed by a name with spaces in it (`~/My Tools/pager`), or inside a
    // URL (`file://localhost/home/me/x`): the entry after home's path, to the next `/`.
    let mut spellings = vec![home.to_string_lossy().into_owned()];
    if let Some(raw) = std::env::var_os("HOME") {
        let raw = PathBuf::from(raw);
        if std::fs::canonicalize(&raw).is_ok_and(|r| r == home) {
            spellings.push(raw.to_string_lossy().into_owned());
        }
    }
    for spelling in spellings {
        let prefix = format!("{}/", spelling.trim_end_matches('/'));
        let mut rest = text.as_str();
        while let Some(at) = rest.find(&prefix) {
            let after = &rest[at + prefix.len()..];
            let end = after
                .find(|c: char| c == '/' || c.is_control() || matches!(c, '"' | '\''))
                .unwrap_or(after.len());
            if end > 0 {
                found.push(home.join(&after[..end]));
            }
            rest = &after[end..];
        }
    }
    found
}

/// `$VAR` and `${VAR}` replaced by their values in the environment (unset: empty).
/// `${VAR:-word}` and the like: VAR's value, then the rest as it stands (its paths are
/// looked at too).
pub(crate) fn expand_variables(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => {
                    let body = &inner[..end];
                    let name_end = body
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(body.len());
                    // The operator's word stays in the text, as paths to look at.
                    out.push_str(&lookup(&body[..name_end]).unwrap_or_default());
                    if name_end < body.len() {
                        out.push(' ');
                        out.push_str(&body[name_end..]);
                        out.push(' ');
                    }
                    rest = &inner[end + 1..];
                    continue;
                }
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
            continue;
        }
        out.push_str(&lookup(name).unwrap_or_default());
        rest = &after[consumed..];
    }
    out.push_str(rest);
    out
}

/// `base` joined with `rest`, with no `/` after it for an empty rest.
fn join_rest(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(rest)
    }
}

/// `path` with its longest existing prefix resolved (symlinks and all), the rest as is.
pub fn resolve_existing_prefix(path: &Path) -> PathBuf {
    PrefixResolver::default().resolve(path)
}

/// [`resolve_existing_prefix`] for many paths in one look at the filesystem: each existing
/// prefix is canonicalized once. The places under a home share a few parents (`~`,
/// `~/.config`, `~/.local`), and canonicalizing reads every component's link again: ~250
/// readlinks a run otherwise.
#[derive(Debug, Default)]
pub struct PrefixResolver {
    /// Each prefix looked at: what it canonicalizes to, or `None` where it does not
    /// resolve (most of the paths asked about are missing, and share their missing
    /// parents: `~/.config/x/...`).
    seen: std::collections::HashMap<PathBuf, Option<PathBuf>>,
}

impl PrefixResolver {
    pub fn resolve(&mut self, path: &Path) -> PathBuf {
        // The longest prefix that resolves is found with one stat each, the kernel walking
        // it whole, and only that one is canonicalized: canonicalizing each shorter prefix
        // in turn read every component's link again (most of the paths asked about here
        // are missing, under a home with a few hundred of them: ~1,000 readlinks a run).
        for prefix in path.ancestors() {
            let real = match self.seen.get(prefix) {
                Some(known) => known.clone(),
                None => {
                    let real = std::fs::metadata(prefix)
                        .ok()
                        .and_then(|_| std::fs::canonicalize(prefix).ok());
                    self.seen.insert(prefix.to_owned(), real.clone());
                    real
                }
            };
            let Some(real) = real else {
                continue;
            };
            // Not `join` of an empty rest: that would end a file's path in `/`.
            return match path.strip_prefix(prefix) {
                Ok(rest) if !rest.as_os_str().is_empty() => real.join(rest),
                _ => real,
            };
        }
        path.to_owned()
    }
}

/// How deep the look for symlinks goes in each hidden directory, and how many entries it
/// reads at most: a home with more is refused rather than split half-seen.
const LINK_SCAN_DEPTH: usize = 8;
const LINK_SCAN_ENTRIES: usize = 500_000;

/// Not looked through for links: caches, toolchains and package stores (read-only here,
/// filled by their tools, which link within them), and the biggest data stores. A link
/// in them into a writable entry is not seen.
const LINK_SCAN_SKIP: &[&str] = &[
    ".cache",
    ".npm",
    ".rustup",
    ".cargo/registry",
    ".cargo/git",
    ".m2",
    ".gradle",
    ".pyenv/versions",
    ".nvm/versions",
    ".vscode/extensions",
    ".vscode-server",
    ".local/state/nix",
    ".local/share/Steam",
    ".local/share/flatpak",
    ".local/share/containers",
    ".local/share/Trash",
    ".local/share/baloo",
    // Package stores whose files are hard-linked into each project (pnpm, bun): their
    // other names are in every project, and each would be pinned.
    ".local/share/pnpm",
    ".pnpm-store",
    ".bun/install/cache",
    ".local/share/akonadi",
];

/// Looked through besides home's top level and its hidden directories (none).
const LINK_SCAN_LOCAL: &[&str] = &[];

/// Too much to look through for links into home.
#[derive(Debug)]
pub struct TooBig;

/// What the look through home's kept part (its hidden entries, and the top of the
/// entries holding code) finds of the ways into its other entries.
#[derive(Debug, Default)]
struct WaysIn {
    /// The entries of home that a symlink there leads into, or would if it existed (a
    /// link to a dotfiles repository not cloned yet): where dotfiles are kept.
    linked: Vec<std::ffi::OsString>,
    /// Files kept read-only with more than one name (hard links), by device and inode:
    /// how many names they have, and those seen in the kept part (the first one names the
    /// file in messages). A dotfile kept as a hard link in `~/dotfiles` is written
    /// through either name.
    kept_names: HashMap<(u64, u64), (u64, Vec<PathBuf>)>,
    /// Entries looked at so far, against [`LINK_SCAN_ENTRIES`].
    seen: usize,
}

/// How deep the look goes in an entry that holds code (`~/bin`): its programs, at its top.
/// Not deeper: toolchains there (`~/miniconda3`) link their packages into their
/// environments, and each such file whose other names were not all seen sends the look
/// through every other entry of home. (A directory the environment names for code is
/// looked at itself: [`WaysIn::count_kept`].)
const CODE_SCAN_DEPTH: usize = 1;

/// How many entries the look for a kept file's other names goes through, beside the look
/// for links: past it, the entries not yet looked through stay read-only.
const HARD_LINK_SEARCH_ENTRIES: usize = 200_000;

/// Looks through home's hidden part (and the entries `holds_code` names, not as deep) for
/// symlinks and hard links.
fn ways_in(home: &Path, holds_code: &dyn Fn(&OsStr) -> bool) -> Result<WaysIn, TooBig> {
    let mut found = WaysIn::default();
    let mut stack: Vec<(PathBuf, usize, usize)> = LINK_SCAN_LOCAL
        .iter()
        .map(|d| (home.join(d), 1, LINK_SCAN_DEPTH))
        .collect();
    stack.push((home.to_owned(), 0, LINK_SCAN_DEPTH));
    while let Some((dir, depth, max_depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            found.seen += 1;
            if found.seen > LINK_SCAN_ENTRIES {
                return Err(TooBig);
            }
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let at_top = depth == 0;
            let hidden = name.as_encoded_bytes().starts_with(b".");
            let code = at_top && !hidden && holds_code(&name);
            if kind.is_symlink() && (hidden || !at_top) {
                if let Some(top) = link_target(&entry.path())
                    .and_then(|t| t.strip_prefix(home).ok().map(Path::to_owned))
                    .and_then(|rest| rest.components().next().map(|c| c.as_os_str().to_owned()))
                {
                    found.linked.push(top);
                }
            } else if kind.is_dir() && depth < max_depth && (!at_top || hidden || code) {
                let path = entry.path();
                let skipped = LINK_SCAN_SKIP.iter().any(|s| path == home.join(s));
                if !skipped {
                    let max_depth = if code { CODE_SCAN_DEPTH } else { max_depth };
                    stack.push((path, depth + 1, max_depth));
                }
            } else if kind.is_file() && (hidden || !at_top) {
                found.count_kept(&entry.path());
            }
        }
    }
    Ok(found)
}

impl WaysIn {
    /// Counts `path`, a file kept read-only, if it has other names (once a path).
    fn count_kept(&mut self, path: &Path) {
        use std::os::unix::fs::MetadataExt;
        let Some(meta) = std::fs::symlink_metadata(path)
            .ok()
            .filter(|m| m.is_file() && m.nlink() > 1)
        else {
            return;
        };
        let (_, seen) = self
            .kept_names
            .entry((meta.dev(), meta.ino()))
            .or_insert((meta.nlink(), Vec::new()));
        if !seen.iter().any(|p| p == path) {
            seen.push(path.to_owned());
        }
    }

    /// Which of `entries` hold another name of a kept file, and which could not be looked
    /// through within [`HARD_LINK_SEARCH_ENTRIES`] (kept read-only too, with a file whose
    /// names were not all found). Looked through level by level, all entries at once (a
    /// dotfiles repository is shallow), until every such name is found.
    fn holding_hard_links(&self, entries: &[PathBuf]) -> (Vec<Option<KeptFor>>, Vec<PathBuf>) {
        use std::os::unix::fs::MetadataExt;
        // Each kept file's names still to find, and the name it is known by.
        let mut left: HashMap<(u64, u64), (u64, &Path)> = self
            .kept_names
            .iter()
            .filter(|(_, (all, seen))| *all > seen.len() as u64)
            .map(|(id, (all, seen))| (*id, (all - seen.len() as u64, seen[0].as_path())))
            .collect();
        let mut holds: Vec<Option<KeptFor>> = vec![None; entries.len()];
        // Every other name found, wherever it is.
        let mut links: Vec<PathBuf> = Vec::new();
        let mut level: Vec<(usize, PathBuf)> = entries.iter().cloned().enumerate().collect();
        let mut first = true;
        let mut looked = 0usize;
        while !level.is_empty() && !left.is_empty() {
            let mut next = Vec::new();
            for (at, path) in level {
                // An entry found to hold one is still looked through: each name in it
                // counts, or the look would go on for a name already found.
                if looked > HARD_LINK_SEARCH_ENTRIES {
                    if holds[at].is_none() {
                        let file = left.values().next().map(|(_, f)| f.to_path_buf());
                        holds[at] = file.map(KeptFor::NotLookedThrough);
                    }
                    continue;
                }
                let found: Vec<(PathBuf, std::fs::Metadata)> = if first {
                    // The entry itself (a file at home's top).
                    std::fs::symlink_metadata(&path)
                        .map(|m| vec![(path, m)])
                        .unwrap_or_default()
                } else {
                    let Ok(read) = std::fs::read_dir(&path) else {
                        continue;
                    };
                    read.flatten()
                        .filter_map(|e| {
                            let meta = std::fs::symlink_metadata(e.path()).ok()?;
                            Some((e.path(), meta))
                        })
                        .collect()
                };
                for (path, meta) in found {
                    looked += 1;
                    if meta.is_dir() {
                        next.push((at, path));
                    } else if meta.is_file() && meta.nlink() > 1 {
                        let id = (meta.dev(), meta.ino());
                        if let Some((names, file)) = left.get_mut(&id) {
                            if holds[at].is_none() {
                                holds[at] = Some(KeptFor::HardLink {
                                    file: file.to_path_buf(),
                                    name: path.clone(),
                                });
                            }
                            links.push(path.clone());
                            *names -= 1;
                            if *names == 0 {
                                left.remove(&id);
                            }
                        }
                    }
                }
            }
            level = next;
            first = false;
        }
        (holds, links)
    }
}

/// Why an entry of home that the caller may write stays read-only, to say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptFor {
    /// It holds `name`, another name (a hard link) of `file`, kept read-only.
    HardLink { file: PathBuf, name: PathBuf },
    /// It was not looked through for the other names of this file.
    NotLookedThrough(PathBuf),
}

/// Where a symlink leads, resolved as far as what it names exists (a dangling link's
/// target counts where it would be).
fn link_target(link: &Path) -> Option<PathBuf> {
    let target = std::fs::read_link(link).ok()?;
    let target = if target.is_absolute() {
        target
    } else {
        link.parent()?.join(target)
    };
    Some(resolve_existing_prefix(&target))
}

/// What a root holding a home becomes: the writable roots in its place.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub roots: Vec<PathBuf>,
    /// Entries kept read-only for a way into them that is not a path: to say.
    pub kept: Vec<(PathBuf, KeptFor)>,
    /// The other names (hard links) of kept files found in home's entries: pinned
    /// read-only wherever a root holds one (a workspace in such an entry is a root of its
    /// own).
    pub links: Vec<PathBuf>,
}

/// Splits the writable root `root`, which is `home` or holds it, into the writable roots
/// the rules above allow. `code` are the places under home that hold code
/// ([`code_locations`]).
pub fn split(
    root: &Path,
    home: &Path,
    real_home: &Path,
    code: &[PathBuf],
) -> std::io::Result<Split> {
    let mut split = Split::default();
    // Above home: everything beside the path down to it (looked through for hard links
    // with home's own entries, below).
    let mut beside: Vec<PathBuf> = Vec::new();
    for dir in home.ancestors().skip(1) {
        if !dir.starts_with(root) {
            break;
        }
        let toward_home = home
            .strip_prefix(dir)
            .ok()
            .and_then(|rest| rest.components().next())
            .map(|c| c.as_os_str().to_owned());
        // A directory on the way this user cannot list (`/home` at 0711) has nothing
        // beside home to make writable.
        for entry in entries(dir).unwrap_or_default() {
            if Some(entry.as_os_str()) != toward_home.as_deref().map(OsStr::new) {
                beside.push(dir.join(entry));
            }
        }
    }
    // Home itself.
    let holds_code = |name: &OsStr| {
        code.iter().any(|c| {
            c.strip_prefix(home)
                .ok()
                .and_then(|rest| rest.components().next())
                .is_some_and(|top| top.as_os_str() == name)
        })
    };
    // Home itself on PATH: every file at its top is a command.
    let home_is_code = code.iter().any(|c| c == home);
    let too_big = |TooBig| {
        std::io::Error::other(format!(
            "more than {LINK_SCAN_ENTRIES} entries to look through for links to dotfiles; \
             --write the directories CMD needs instead"
        ))
    };
    // Looked through by home's own path (links name it so); entries are named as this
    // root gives them.
    let mut ways_in = ways_in(real_home, &holds_code).map_err(too_big)?;
    // The files of the places that hold code (`~/go/bin` on PATH), and home's own when it
    // is on PATH, are kept read-only too: by home's own path, as the look above names
    // them.
    let in_real_home = |path: &Path| match path.strip_prefix(home) {
        Ok(rest) => join_rest(real_home, rest),
        Err(_) => path.to_owned(),
    };
    let mut code_dirs: Vec<PathBuf> = code.iter().map(|c| in_real_home(c)).collect();
    code_dirs.retain(|c| c != real_home || home_is_code);
    for place in code_dirs {
        if place.is_file() {
            ways_in.count_kept(&place);
        } else if let Ok(names) = entries(&place) {
            for name in names {
                let path = place.join(&name);
                let top_of_home = place == real_home;
                if !top_of_home || !name.as_encoded_bytes().starts_with(b".") {
                    ways_in.count_kept(&path);
                }
            }
        }
    }
    let mut candidates: Vec<(PathBuf, bool)> = beside.into_iter().map(|p| (p, false)).collect();
    for name in entries(home)? {
        let path = home.join(&name);
        let hidden = name.as_encoded_bytes().starts_with(b".");
        if holds_code(&name) || ways_in.linked.contains(&name) {
            continue;
        }
        if !hidden {
            if home_is_code && !path.is_dir() {
                continue;
            }
            candidates.push((path, false));
        } else if HIDDEN_DATA.iter().any(|d| OsStr::new(d) == name) {
            candidates.push((path, true));
        }
    }
    for DataDir { dir, only, except } in HIDDEN_DATA_DIRS {
        let dir = home.join(dir);
        let Ok(names) = entries(&dir) else {
            continue;
        };
        for name in names {
            let listed = only.is_none_or(|only| only.iter().any(|o| OsStr::new(o) == name));
            let excluded = except.iter().any(|e| OsStr::new(e) == name);
            if listed && !excluded {
                candidates.push((dir.join(name), false));
            }
        }
    }
    // An entry holding another name of a file kept read-only would let CMD write it.
    // (A data entry's own files were counted as kept: one with other names is kept.)
    let is_data = |path: &Path| {
        path.strip_prefix(home)
            .is_ok_and(|rest| rest.as_os_str().as_encoded_bytes().starts_with(b"."))
    };
    let plain: Vec<PathBuf> = candidates
        .iter()
        .filter(|(path, _)| !is_data(path))
        .map(|(path, _)| path.clone())
        .collect();
    let (holding, links) = ways_in.holding_hard_links(&plain);
    split.links = links;
    for (path, file_only) in candidates {
        let kept_for = if is_data(&path) {
            holds_any_hard_link(&path).then(|| KeptFor::HardLink {
                file: path.clone(),
                name: path.clone(),
            })
        } else {
            plain
                .iter()
                .position(|p| *p == path)
                .and_then(|at| holding[at].clone())
        };
        if let Some(why) = kept_for {
            if usable(&path) {
                split.kept.push((path, why));
            }
            continue;
        }
        if file_only {
            split.add_file(path);
        } else {
            split.add(path);
        }
    }
    split.roots.sort();
    Ok(split)
}

impl Split {
    /// A directory or a regular file the caller may write, named in UTF-8; never a
    /// symlink, socket or FIFO.
    fn add(&mut self, path: PathBuf) {
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if (meta.is_dir() || meta.is_file()) && usable(&path) {
                self.roots.push(path);
            }
        }
    }

    fn add_file(&mut self, path: PathBuf) {
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) && usable(&path) {
            self.roots.push(path);
        }
    }
}

/// Whether a data entry of home's hidden part (a history, a small directory of them) is,
/// or holds, a file with more than one name: its names were counted as kept, so where the
/// others are is not known.
fn holds_any_hard_link(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // These are small (a few histories); one bigger than this is kept read-only.
    const MOST: usize = 10_000;
    let mut stack = vec![path.to_owned()];
    let mut seen = 0;
    while let Some(at) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            continue;
        };
        seen += 1;
        if seen > MOST || (meta.is_file() && meta.nlink() > 1) {
            return true;
        }
        if meta.is_dir() {
            match std::fs::read_dir(&at) {
                Ok(entries) => stack.extend(entries.flatten().map(|e| e.path())),
                Err(_) => return true,
            }
        }
    }
    false
}

/// Writable by the caller (one it cannot write would only fail the probe's check that
/// each writable root takes a write), and named in UTF-8 (the record of an unfinished run
/// holds its roots as text).
fn usable(path: &Path) -> bool {
    path.to_str().is_some() && nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

fn entries(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths_in(text: &str, home: &Path) -> Vec<PathBuf> {
        let lookup = |name: &str| std::env::var(name).ok();
        paths_in_with(text, home, &lookup, &mut PrefixResolver::default())
    }

    #[test]
    fn paths_are_found_anywhere_in_a_value() {
        let home = Path::new("/home/me");
        let got = paths_in(
            "a\n/home/me/tools/run.sh\t$(~/x) -I/home/me/inc @/home/me/args `~/y` a~b ~",
            home,
        );
        // A variable expanded as a shell would.
        let lookup = |name: &str| (name == "X").then(|| "/home/me/viavar".to_owned());
        let via = paths_in_with(
            "${X}/bin:$X/lib",
            home,
            &lookup,
            &mut PrefixResolver::default(),
        );
        assert!(
            via.contains(&PathBuf::from("/home/me/viavar/bin")),
            "{via:?}"
        );
        assert!(
            via.contains(&PathBuf::from("/home/me/viavar/lib")),
            "{via:?}"
        );
        let want: Vec<PathBuf> = [
            "/home/me/tools/run.sh",
            "/home/me/inc",
            "/home/me/args",
            "/home/me/x",
            "/home/me/y",
            "/home/me",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        for w in &want {
            assert!(got.contains(w), "{w:?} in {got:?}");
        }
        assert!(!got.iter().any(|p| p.ends_with("a~b")), "{got:?}");
    }

    #[test]
    fn an_existing_file_resolves_to_its_own_path_with_no_slash_after_it() {
        let base = std::env::temp_dir().join(format!("netbox-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("dotfiles")).unwrap();
        std::fs::write(base.join("dotfiles/pythonrc"), "").unwrap();
        std::os::unix::fs::symlink("dotfiles/pythonrc", base.join(".pythonrc")).unwrap();
        let real = std::fs::canonicalize(&base)
            .unwrap()
            .join("dotfiles/pythonrc");
        let got = resolve_existing_prefix(&base.join(".pythonrc"));
        assert_eq!(got.as_os_str(), real.as_os_str());
        assert!(std::fs::symlink_metadata(&got).is_ok_and(|m| m.is_file()));
        assert_eq!(
            resolve_existing_prefix(&base.join(".pythonrc/x")).as_os_str(),
            real.join("x").as_os_str()
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn an_entry_holding_another_name_of_a_kept_file_stays_read_only() {
        let base = std::env::temp_dir().join(format!("netbox-hardlink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let home = base.join("me");
        for dir in [
            "dotfiles/deep/er",
            "projects/app",
            "bin",
            "tools",
            ".config/app",
        ] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
        }
        for file in [".bashrc", ".config/app/init", "bin/tool", ".bash_history"] {
            std::fs::write(home.join(file), "").unwrap();
        }
        // Dotfiles kept as hard links in two entries, one deep; a program in `~/bin`
        // linked into a third; two names of one data file, both kept (a history).
        std::fs::hard_link(home.join(".bashrc"), home.join("dotfiles/bashrc")).unwrap();
        std::fs::hard_link(
            home.join(".config/app/init"),
            home.join("dotfiles/deep/er/init"),
        )
        .unwrap();
        std::fs::hard_link(home.join("bin/tool"), home.join("tools/tool")).unwrap();
        std::fs::write(home.join("notes.txt"), "").unwrap();
        std::fs::hard_link(home.join("notes.txt"), home.join("projects/app/notes")).unwrap();
        let code = vec![home.join("bin")];
        let got = split(&home, &home, &home, &code).unwrap();
        let rel: Vec<String> = got
            .roots
            .iter()
            .map(|r| r.strip_prefix(&home).unwrap().display().to_string())
            .collect();
        // Two names of one file in entries made writable: both writable, as they were.
        assert_eq!(rel, [".bash_history", "notes.txt", "projects"]);
        // A history with another name is kept.
        std::fs::hard_link(home.join(".bash_history"), home.join("projects/h")).unwrap();
        let got = split(&home, &home, &home, &code).unwrap();
        assert!(!got.roots.contains(&home.join(".bash_history")), "{got:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn code_places_homes_own_commands_and_entries_beside_home_are_searched_too() {
        let base = std::env::temp_dir().join(format!("netbox-hardlink2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let home = base.join("me");
        for dir in ["go/bin", "misc", "work", "shared"] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
        }
        std::fs::create_dir_all(base.join("beside")).unwrap();
        std::fs::write(home.join("go/bin/tool"), "").unwrap();
        std::fs::write(home.join("hometool"), "").unwrap();
        std::fs::write(home.join(".bashrc"), "").unwrap();
        std::fs::hard_link(home.join("go/bin/tool"), home.join("work/tool")).unwrap();
        std::fs::hard_link(home.join("hometool"), home.join("misc/h")).unwrap();
        std::fs::hard_link(home.join(".bashrc"), base.join("beside/bashrc")).unwrap();
        // `~/go/bin` on PATH, and home itself.
        let code = vec![home.clone(), home.join("go"), home.join("go/bin")];
        let got = split(&base, &home, &home, &code).unwrap();
        let rel: Vec<String> = got
            .roots
            .iter()
            .map(|r| r.strip_prefix(&base).unwrap().display().to_string())
            .collect();
        assert_eq!(rel, ["me/shared"]);
        let kept: Vec<String> = got
            .kept
            .iter()
            .map(|(r, _)| r.strip_prefix(&base).unwrap().display().to_string())
            .collect();
        assert_eq!(kept, ["beside", "me/misc", "me/work"]);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn home_keeps_its_top_level_hidden_entries_code_and_linked_dotfiles() {
        let base = std::env::temp_dir().join(format!("netbox-homesplit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let home = base.join("me");
        for dir in [
            "projects/app",
            "tools/bin",
            "bin",
            "dotfiles/nvim",
            ".config/autostart",
            ".local/state/bash",
            ".local/state/nix/profiles",
            ".local/share/Trash",
            ".local/share/applications",
            ".npm/_cacache",
            ".npm/_logs",
        ] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
        }
        for file in ["notes.txt", ".bashrc", ".bash_history", "dotfiles/zshrc"] {
            std::fs::write(home.join(file), "").unwrap();
        }
        std::os::unix::fs::symlink("projects", home.join("link")).unwrap();
        std::os::unix::fs::symlink("../dotfiles/nvim", home.join(".config/nvim")).unwrap();
        std::os::unix::fs::symlink("dotfiles/zshrc", home.join(".zshrc")).unwrap();
        std::fs::create_dir_all(base.join("other")).unwrap();
        let code = vec![home.join("bin"), home.join("tools/bin")];
        let got = split(&base, &home, &home, &code).unwrap();
        let rel: Vec<String> = got
            .roots
            .iter()
            .map(|r| r.strip_prefix(&base).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "me/.bash_history",
                "me/.local/state/bash",
                "me/.npm/_logs",
                "me/notes.txt",
                "me/projects",
                "other",
            ]
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
