//! A writable root that is, or holds, a home directory (`--allow-home-write`; refused
//! without it, config.rs). A home is where code that runs later, outside the sandbox,
//! lives: shell and login files, desktop autostart, systemd user units and tmpfiles,
//! tools' configurations and caches, directories on PATH, and files programs look up in
//! home or in parent directories (`~/node_modules`, `~/.bash_aliases`). No list of such
//! places is complete, so a writable home is built the other way round:
//! - home's own top level stays read-only: nothing new appears there, nothing there is
//!   renamed or removed;
//! - each existing, not hidden entry of home (`~/projects`, `~/notes.txt`) becomes a
//!   writable root of its own, but for those that hold code: directories on the caller's
//!   `PATH`, the places the environment names for configuration, data and toolchains
//!   (`XDG_CONFIG_HOME`, `CARGO_HOME`, `GOPATH`, ...), `~/bin`, `~/go`, `~/node_modules`;
//!   one of those deeper inside a writable entry is pinned read-only there;
//! - hidden entries stay read-only but for known data: shell and REPL histories, the
//!   entries of `~/.local/state` (but nvim's trust database and netbox's own logs),
//!   `~/.local/share/Trash`, npm's content-addressed cache and logs;
//! - a symlink, socket or FIFO in home is never made writable (a link's target could be
//!   anywhere);
//! - a root above home (`/home`, or a workspace holding it): everything in it beside the
//!   path down to home is writable as before, and the directories on that path keep
//!   their own entries (nothing new appears beside home).
//!
//! More can be made writable with `--write PATH` (a place the run needs, such as
//! `~/.config/tool`); the places under home that run code stay pinned even then
//! (protect/home.rs).

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
    DataDir {
        dir: ".local/state",
        only: None,
        except: &["nvim", "netbox"],
    },
    DataDir {
        dir: ".local/share",
        only: Some(&["Trash", "recently-used.xbel"]),
        except: &[],
    },
    DataDir {
        dir: ".npm",
        only: Some(&["_cacache", "_logs"]),
        except: &[],
    },
];

/// Not hidden, yet holding code that runs later: never made writable.
const NOT_HIDDEN_CODE: &[&str] = &["bin", "go", "node_modules"];

/// Environment variables naming directories (or, for some, files) that hold code or
/// configuration: where one lies under home, it is not made writable.
const CODE_LOCATIONS: &[&str] = &[
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "ZDOTDIR",
    "GIT_CONFIG_GLOBAL",
    "PYTHONUSERBASE",
    "PYTHONSTARTUP",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "GOPATH",
    "GOBIN",
    "npm_config_prefix",
    "NPM_CONFIG_PREFIX",
    "PNPM_HOME",
    "VOLTA_HOME",
    "BUN_INSTALL",
    "DENO_INSTALL",
    "PYENV_ROOT",
    "NVM_DIR",
    "SDKMAN_DIR",
    "GEM_HOME",
    "PIPX_HOME",
    "PIPX_BIN_DIR",
];

/// The caller's home directories, canonical: `$HOME` and the account's home in the
/// password database (sshd, systemd and the desktop go by the latter), where they exist.
pub fn homes() -> Vec<PathBuf> {
    let from_env = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    let from_passwd = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
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

/// The places the environment names for code under `home`, canonical where they exist.
pub fn code_locations(home: &Path) -> Vec<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let named = CODE_LOCATIONS
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from);
    let defaults = NOT_HIDDEN_CODE.iter().map(|n| home.join(n));
    let mut found: Vec<PathBuf> = path_dirs
        .into_iter()
        .chain(named)
        .filter(|p| p.is_absolute())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .chain(defaults)
        .filter(|p| p.starts_with(home) && p != home)
        .collect();
    found.sort();
    found.dedup();
    found
}

/// What a root holding a home becomes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// The writable roots in its place.
    pub roots: Vec<PathBuf>,
    /// Places that hold code inside those roots, to pin read-only.
    pub pins: Vec<PathBuf>,
}

/// Splits the writable root `root`, which is `home` or holds it, into the writable roots
/// the rules above allow. `code` are the places under home that hold code
/// ([`code_locations`]).
pub fn split(root: &Path, home: &Path, code: &[PathBuf]) -> std::io::Result<Split> {
    let mut split = Split::default();
    // Above home: everything beside the path down to it.
    for dir in home.ancestors().skip(1) {
        if !dir.starts_with(root) {
            break;
        }
        let toward_home = home
            .strip_prefix(dir)
            .ok()
            .and_then(|rest| rest.components().next())
            .map(|c| c.as_os_str().to_owned());
        for entry in entries(dir)? {
            if Some(entry.as_os_str()) != toward_home.as_deref().map(OsStr::new) {
                split.add(dir.join(entry));
            }
        }
    }
    // Home itself.
    for name in entries(home)? {
        let path = home.join(&name);
        let hidden = name.as_encoded_bytes().starts_with(b".");
        if code.iter().any(|c| c == &path) {
            continue;
        }
        if !hidden {
            split.add(path);
        } else if HIDDEN_DATA.iter().any(|d| OsStr::new(d) == name) {
            split.add_file(path);
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
                split.add(dir.join(name));
            }
        }
    }
    // Code places inside a writable entry (a PATH directory in ~/tools/bin, say).
    split.pins = code
        .iter()
        .filter(|c| split.roots.iter().any(|r| c.starts_with(r) && *c != r))
        .cloned()
        .collect();
    split.roots.sort();
    Ok(split)
}

impl Split {
    /// A directory or a regular file, never a symlink, socket or FIFO.
    fn add(&mut self, path: PathBuf) {
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if meta.is_dir() || meta.is_file() {
                self.roots.push(path);
            }
        }
    }

    fn add_file(&mut self, path: PathBuf) {
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            self.roots.push(path);
        }
    }
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

    #[test]
    fn home_keeps_its_top_level_hidden_entries_and_code_places() {
        let base = std::env::temp_dir().join(format!("netbox-homesplit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let home = base.join("me");
        for dir in [
            "projects/app",
            "tools/bin",
            "bin",
            ".config/autostart",
            ".local/state/app",
            ".local/state/nvim",
            ".local/share/Trash",
            ".local/share/applications",
            ".npm/_cacache",
            ".npm/_npx",
        ] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
        }
        for file in ["notes.txt", ".bashrc", ".bash_history"] {
            std::fs::write(home.join(file), "").unwrap();
        }
        std::os::unix::fs::symlink("projects", home.join("link")).unwrap();
        std::fs::create_dir_all(base.join("other")).unwrap();
        let code = vec![home.join("bin"), home.join("tools/bin")];
        let got = split(&base, &home, &code).unwrap();
        let rel: Vec<String> = got
            .roots
            .iter()
            .map(|r| r.strip_prefix(&base).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "me/.bash_history",
                "me/.local/share/Trash",
                "me/.local/state/app",
                "me/.npm/_cacache",
                "me/notes.txt",
                "me/projects",
                "me/tools",
                "other",
            ]
        );
        assert_eq!(got.pins, vec![home.join("tools/bin")]);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
