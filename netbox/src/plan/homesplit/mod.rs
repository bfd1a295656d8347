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
//! - a symlink, socket or FIFO in home is never made writable (an entry named in bytes
//!   that are not UTF-8 is judged as any other: the environment's values are read byte
//!   for byte, paths/exact_text.rs);
//! - a root above home (`/home`, or a workspace holding it): everything in it beside the
//!   path down to home is writable as before, and the directories on that path keep
//!   their own entries (nothing new appears beside home).
//!
//! More can be made writable with `--write PATH` (a place the run needs, such as
//! `~/.config/tool`); the places under home that run code stay pinned even then
//! (protect/home.rs).

mod ways_in;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::paths::exact_text::{path_of, text_of};
pub use ways_in::KeptFor;
use ways_in::{holds_any_hard_link, ways_in, TooBig, LINK_SCAN_ENTRIES};

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

/// The home field of the first `/etc/passwd` line whose fields `matches`. Read byte for
/// byte (paths/exact_text.rs): one line's name in Latin-1 (a GECOS field) must not make
/// every other account unknown, nor a home in those bytes another path.
fn passwd_file_field(matches: impl Fn(&[&str]) -> bool) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = std::fs::read("/etc/passwd").ok()?;
    let text = text_of(std::ffi::OsStr::from_bytes(&bytes));
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() == 7 && matches(&fields)).then(|| path_of(fields[5]))
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
            // Byte for byte: a value or a variable it names need not be UTF-8, and the
            // path found must be the entry's own name (paths/exact_text.rs).
            let lookup = |name: &str| std::env::var_os(name).map(|v| text_of(&v));
            named.extend(paths_in_with(
                &text_of(&value),
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
/// Variables are looked up by `lookup`, paths resolved by `resolver`. `text` and what
/// `lookup` gives are made by `text_of`, so that each path found has the bytes named.
fn paths_in_with(
    text: &str,
    home: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    resolver: &mut PrefixResolver,
) -> Vec<PathBuf> {
    let text = expand_variables(text, lookup);
    // ASCII only: a shell splits at its IFS, and a name may hold U+00A0 or U+0085.
    let ends = |c: char| {
        c.is_ascii_whitespace()
            || c.is_ascii_control()
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
                found.push(home.join(path_of(rest.trim_start_matches('/'))));
            } else {
                // `~user/…`: that account's home (from /etc/passwd: no NSS modules loaded
                // for a word in a variable).
                let (user, tail) = rest.split_once('/').unwrap_or((rest, ""));
                if let Some(dir) = account_home(user) {
                    found.push(resolver.resolve(&dir.join(path_of(tail))));
                }
            }
        } else {
            let path = path_of(path);
            found.push(resolver.resolve(&path));
            found.push(path);
        }
    }
    // Home's path followed by a name with spaces in it (`~/My Tools/pager`), or inside a
    // URL (`file://localhost/home/me/x`): the entry after home's path, to the next `/`.
    let mut spellings = vec![text_of(home.as_os_str())];
    if let Some(raw) = std::env::var_os("HOME") {
        if std::fs::canonicalize(&raw).is_ok_and(|r| r == home) {
            spellings.push(text_of(&raw));
        }
    }
    for spelling in spellings {
        let prefix = format!("{}/", spelling.trim_end_matches('/'));
        let mut rest = text.as_str();
        while let Some(at) = rest.find(&prefix) {
            let after = &rest[at + prefix.len()..];
            let end = after
                .find(|c: char| c == '/' || c.is_ascii_control() || matches!(c, '"' | '\''))
                .unwrap_or(after.len());
            if end > 0 {
                found.push(home.join(path_of(&after[..end])));
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
            return match path.strip_prefix(prefix) {
                Ok(rest) => crate::paths::join_below(&real, rest),
                Err(_) => real,
            };
        }
        path.to_owned()
    }
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
        Ok(rest) => crate::paths::join_below(real_home, rest),
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
    /// A directory or a regular file the caller may write; never a symlink, socket or
    /// FIFO.
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

/// Writable by the caller: one it cannot write would only fail the probe's check that
/// each writable root takes a write.
fn usable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
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

    proptest::proptest! {
        /// Whatever bytes the environment holds, looking through it for places under home
        /// never panics, and each place found under home is named by bytes the value held.
        #[test]
        fn no_value_stops_the_look_for_code_places(
            value in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(b"$(){}`'\":;|=~/ \n.ab".to_vec()),
                    proptest::prelude::any::<u8>(),
                ],
                0..48,
            ),
        ) {
            use std::os::unix::ffi::OsStrExt;
            let home = Path::new("/nonexistent-home");
            let text = text_of(std::ffi::OsStr::from_bytes(&value));
            // No variable set: every place found is then spelled in the value itself.
            let found = paths_in_with(&text, home, &|_| None, &mut PrefixResolver::default());
            for path in found.iter().filter(|p| p.starts_with(home)) {
                let rest = path.strip_prefix(home).unwrap().as_os_str().as_bytes();
                let held = rest.is_empty()
                    || value.windows(rest.len()).any(|w| w == rest);
                proptest::prop_assert!(held, "{path:?} from {value:?}");
            }
        }
    }

    fn paths_in(text: &str, home: &Path) -> Vec<PathBuf> {
        let lookup = |name: &str| std::env::var_os(name).map(|v| text_of(&v));
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
