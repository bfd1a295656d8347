//! Which paths stay read-only inside the writable roots: `.git` and the start-up files a
//! command could plant code in, every submodule's `.git`, plus `--protect` paths.
//!
//! Every repository netbox meets in a writable root (the workspace's, a `--write`
//! root's, the one a root lies in, one at the top of a home entry, each submodule's) goes
//! through one function, `pin_repository`: its git directory, and everything git would
//! later run or read as code for it, which gitcode.rs lists from git's documentation and
//! gitconfig.rs finds in its configuration and the shared one (system, global,
//! environment), relative paths taken against where git runs for that repository.
//! Repositories it does not pin (nested ones, new ones) are audited after the run
//! (supervise/gitaudit). What the pins were chosen from is kept (sources.rs), and they are
//! chosen again if it changes on the host during the run (recheck.rs).
//!
//! Measured on kernel 6.18 (2026-11-29): a read-only bind
//! over `.git` makes writes, unlinks and chmods inside it EROFS, renaming or removing the
//! mountpoint EBUSY, hard links across it EXDEV, and writes through symlinks or
//! `/proc/self/root` EROFS. What mounts cannot do on their own, handled here:
//! - a missing protected path could be created by CMD (`git init` and a hook, a new
//!   `.envrc`): netbox creates an empty placeholder first (placeholders.rs), pins it
//!   read-only, and removes it after the run;
//! - `.git` may be a `gitdir:` file (worktrees, submodules): the real git dir and its
//!   common dir are protected too when they lie inside a writable root;
//! - `git status` at the top of a repository enters every submodule (a gitlink in the
//!   index, gitindex.rs) whose `PATH/.git` is a repository and reads its config, which can
//!   name a command (`core.fsmonitor`): each gitlink's `.git` is pinned like the top one,
//!   recursively; where it is missing, the submodule's directory itself is pinned (an
//!   empty placeholder where that is missing too), since any `.git` placeholder would make
//!   git stop with "not a git repository" (git 2.47, measured);
//! - a protected path that is a symlink cannot be pinned (mounts follow symlinks, and the
//!   link itself could be replaced), so that is refused rather than half-protected; so is
//!   a submodule path that crosses a symlink (CMD could put a directory in its place).

pub mod gitcode;
pub mod gitconfig;
mod gitindex;
mod home;
mod placeholders;
pub mod recheck;
pub mod sources;

use std::collections::HashSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::WrapperError;
use gitcode::Role;
use gitconfig::{CodePath, ConfigSet};
use placeholders::EMPTY_CONFIG;
use sources::Sources;

pub use placeholders::{is_placeholder, remove_orphaned_placeholders, Placeholder, Placeholders};

/// Names protected at the top of every writable root: git's metadata and the files tools
/// run or load from a project directory.
const PROJECT_NAMES: &[&str] = &[".git", ".gitmodules", ".envrc", ".vscode", ".idea"];

/// Names tools read only from the home directory: protected where they exist at the top
/// of a root; where missing, given a placeholder only under home (home.rs; elsewhere
/// nothing would read a planted one, and each placeholder costs the host a mkdir and an
/// rmdir).
const HOME_NAMES: &[&str] = &[
    ".gitconfig",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
];

/// Submodules within submodules are followed this deep, and no further (netbox refuses
/// to run rather than leave deeper ones unpinned).
const MAX_SUBMODULE_DEPTH: usize = 8;

/// Gitlinks pinned at most in one run: each is a mount or two.
const MAX_GITLINKS: usize = 4096;

/// Every protected name.
pub fn protected_names() -> impl Iterator<Item = &'static str> {
    PROJECT_NAMES.iter().chain(HOME_NAMES).copied()
}

/// A path to pin read-only, or a part of one left writable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    pub path: PathBuf,
    /// Netbox creates (or adopts) it for the run and removes it after.
    pub placeholder: Option<Placeholder>,
    /// Left writable inside the read-only pin of its git directory (`objects/`, `refs/`,
    /// `FETCH_HEAD` under `--allow-git-writes`): bound writable on top of that pin. Not
    /// watched while CMD runs: a host that replaces it leaves the read-only pin's entry
    /// in its place, which is safe.
    pub writable: bool,
}

/// A path netbox could not pin (a link CMD could re-point, a path below a missing
/// directory, a file with another name in a writable root), checked when the run ends:
/// reported if the run made or changed it (supervise/gitaudit).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watched {
    pub path: PathBuf,
    /// What names it (`core.fsmonitor`, or why it could not be pinned).
    pub why: String,
    pub what: WatchedAs,
    /// What was there at the start: a path filled later (an old directory renamed into
    /// place keeps the old times of all it holds) is news whatever its times say.
    #[serde(default)]
    pub was: Option<Identity>,
}

/// How a watched path is looked at when the run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchedAs {
    /// The path itself (and links on the way to it).
    Path,
    /// A directory of programs (one on PATH): each entry made or changed.
    Programs,
    /// An environment a program runs from (a Python venv, a `node_modules`): anything
    /// in it made or changed.
    Tree,
}

/// A file's identity at the start of the run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    /// Where it pointed, if it was a link.
    pub link: Option<PathBuf>,
}

impl Identity {
    /// `path`'s, not following a final link; `None` where there is nothing.
    pub fn of(path: &Path) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            link: std::fs::read_link(path).ok(),
        })
    }
}

/// What protects the run: the paths pinned read-only, and those only watched.
#[derive(Debug, Default)]
pub struct Protection {
    pub pinned: Vec<Protected>,
    pub watched: Vec<Watched>,
    /// Where CMD can write git's data (supervise/gitaudit/foreign.rs sweeps them after
    /// the run for entries git never makes).
    pub git_data: GitData,
    /// What the pins were chosen from (checked again while the run goes on: recheck.rs).
    pub basis: Basis,
}

/// The places CMD can write a git directory's data.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GitData {
    /// Data directories left writable inside a pinned git directory (`objects/`, `refs/`,
    /// `logs/`, `reftable/`, `lfs/` under `--allow-git-writes`): all of each.
    pub dirs: Vec<PathBuf>,
    /// Git directories whose top is writable (a bare repository that is a writable
    /// root): their top, and their data directories whole.
    pub git_dirs: Vec<PathBuf>,
}

/// What the pins were chosen from, and what git's configuration named.
#[derive(Debug, Default)]
pub struct Basis {
    /// The files read: git config files (missing ones too), indexes, hooks directories.
    pub sources: Sources,
    /// Every path a setting, an index, a hook runner or a link in a hooks directory
    /// named, pinned or not (a path only watched, or missing under a home entry).
    pub named: HashSet<PathBuf>,
    /// The git directories of the repositories pinned.
    pub repositories: HashSet<PathBuf>,
    /// Each read-only pin made for something named, with what named it (only when asked
    /// for: [`pins_now`]).
    pub needs: Vec<(PathBuf, Naming)>,
}

/// What names a path that must stay read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    /// The repository it is named for; `None` for the shared configuration's paths that
    /// count wherever git runs.
    pub repository: Option<RepositoryName>,
    /// The setting (`core.hookspath`), or what else names it (`a submodule in the
    /// index`).
    pub setting: String,
    /// The path named (what is pinned may be its first missing directory).
    pub named: PathBuf,
}

/// A repository, as netbox keys it and as the user knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositoryName {
    pub git_dir: PathBuf,
    /// The top of its work tree, or a bare repository's own directory.
    pub shown: PathBuf,
}

/// What the protection needs to know about the run.
pub struct ProtectInput<'a> {
    /// The roots the user named (workspace, `--write`): protected names are looked for
    /// at the top of each.
    pub write_roots: &'a [PathBuf],
    /// Every writable root (a shared host `/tmp` too): pins matter only inside these.
    pub writable: &'a [PathBuf],
    /// The writable roots a home was split into (homesplit.rs): a repository at the top
    /// of each is pinned like the workspace's; the other protected names there are
    /// pinned where they exist (no placeholders are laid at the top of every entry of a
    /// home).
    pub home_entries: &'a [PathBuf],
    /// The caller's home directory (canonical), if known: where git's global config is.
    pub home: Option<&'a Path>,
    /// Every home of the caller's (`$HOME`, the password database's): the places there
    /// that run code are pinned wherever they lie in a writable root.
    pub homes: &'a [PathBuf],
    pub extra: &'a [PathBuf],
    pub allow_git_writes: bool,
}

/// Lists every protected path inside the writable roots, reading the filesystem (to find
/// which exist, what `.git` files point at, what git's configuration names, and which
/// submodules each index records) but changing nothing.
pub fn protected_paths(input: &ProtectInput<'_>) -> Result<Protection, WrapperError> {
    choose(input, Needs::Untold)
}

/// [`protected_paths`] as they would be chosen now, each pin made for something named
/// told with what named it (`basis.needs`): what recheck.rs compares with the pins the
/// run has.
pub fn pins_now(input: &ProtectInput<'_>) -> Result<Protection, WrapperError> {
    choose(input, Needs::Told)
}

/// Whether the pins made for something named are listed with what named them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    Untold,
    Told,
}

fn choose(input: &ProtectInput<'_>, needs: Needs) -> Result<Protection, WrapperError> {
    let mut found = Found {
        out: Vec::new(),
        watched: Vec::new(),
        listed: HashSet::new(),
        writable: input.writable,
        home: input.home,
        allow_git_writes: input.allow_git_writes,
        gitlinks: 0,
        shared: shared_configs(input.home),
        repositories: HashSet::new(),
        git_data: GitData::default(),
        basis: Basis::default(),
        needs,
        repository: None,
        naming: None,
    };
    for set in &found.shared {
        found.basis.sources.extend(set.sources.clone());
    }
    // What the global and system configs (and git's environment) make every git run or
    // read wherever it runs: their absolute and `~` paths. Their relative paths are
    // relative to each repository's work tree: pinned with each (pin_repository).
    let everywhere = found.shared_codes(None)?;
    for code in everywhere {
        found.pin_code(&code, Lay::Placeholders)?;
    }
    // The shared files themselves, where one lies in a writable root
    // (`GIT_CONFIG_GLOBAL=./ci.gitconfig`).
    for config in shared_git_configs(input.home) {
        found.pin_named(&config, EMPTY_CONFIG, "git config file", Lay::Placeholders)?;
        // One with another name (a hard link from `~/dotfiles`) changes with it.
        found.watch_if_linked(&config);
    }
    let named = input.write_roots.iter().map(|r| (r, Lay::Placeholders));
    let entries = input.home_entries.iter().map(|r| (r, Lay::ExistingOnly));
    for (root, lay) in named.chain(entries).filter(|(r, _)| r.is_dir()) {
        let own_repository = found.top_names(root, lay)?;
        let enclosing = !own_repository && found.enclosing_repository(root)?;
        if !own_repository && !enclosing {
            // No repository yet: git run here (`git init`, `git clone`, or outside any
            // repository) takes relative paths from here.
            found.shared_relative(root, lay)?;
        }
    }
    // Directories on PATH in a writable root (an activated `.venv/bin`, a relative
    // `./node_modules/.bin`, an empty entry meaning the current directory): a program CMD
    // puts there runs when anything runs it by name (git's pager, your shell). Pinning
    // them would stop `pip install` and `npm install`; they are watched (a program git's
    // configuration runs from one by name is watched with its environment: gitconfig.rs).
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let dir = crate::plan::homesplit::resolve_existing_prefix(&cwd.join(dir));
        if found.writable.iter().any(|r| dir.starts_with(r)) {
            found.watch_as(&dir, "a directory on PATH", WatchedAs::Programs);
        }
    }
    // The places under home that run code later, wherever a writable root holds one
    // (`--write ~/.config`; a writable home itself is split so that none is: homesplit.rs).
    for home in input.homes {
        for (name, leaf) in home::CODE_PATHS {
            for path in home::places(home, name) {
                // Where it really is: `~/.config` may be a link into `~/dotfiles`.
                let path = crate::plan::homesplit::resolve_existing_prefix(&path);
                if found.writable(&path) {
                    found.pin_named(
                        &path,
                        *leaf,
                        "place under home that runs code",
                        Lay::Placeholders,
                    )?;
                }
            }
        }
    }
    for path in input.extra {
        let missing = std::fs::symlink_metadata(path).is_err();
        let placeholder = (missing || is_placeholder(path)).then_some(Placeholder::Dir);
        found.push(path.clone(), placeholder);
    }
    let mut basis = found.basis;
    basis.repositories = found.repositories;
    Ok(Protection {
        pinned: found.out,
        watched: found.watched,
        git_data: found.git_data,
        basis,
    })
}

/// The configuration every repository reads besides its own: the system and global files
/// (git-config(1) FILES), and what git takes from the environment.
pub fn shared_configs(home: Option<&Path>) -> Vec<ConfigSet> {
    let mut sets: Vec<ConfigSet> = shared_git_configs(home)
        .iter()
        .map(|config| ConfigSet::read(config, home))
        .collect();
    sets.push(ConfigSet::from_environment(&|name| {
        std::env::var(name).ok()
    }));
    sets
}

/// What `sets` name for git to run or read, relative paths against `run_dir`; a
/// configuration netbox cannot read stops the run (what it names would go unpinned).
fn codes_of(
    sets: &[ConfigSet],
    run_dir: Option<&Path>,
    home: Option<&Path>,
) -> Result<Vec<CodePath>, WrapperError> {
    let mut codes = Vec::new();
    for set in sets {
        codes.extend(
            set.code_paths(run_dir, home)
                .map_err(|u| WrapperError::GitConfig {
                    path: u.path,
                    reason: u.reason,
                })?,
        );
    }
    Ok(codes)
}

/// Whether a missing path gets a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lay {
    Placeholders,
    /// Only what exists is pinned (the top of each entry of a split home).
    ExistingOnly,
}

/// A repository, as git finds it.
struct Repository {
    /// Where its `.git` points (or the bare repository itself).
    git_dir: PathBuf,
    /// Where `commondir` points, or the git dir.
    common_dir: PathBuf,
    /// The top of its work tree; `None` for a bare repository.
    worktree: Option<PathBuf>,
}

fn path_error(path: PathBuf, source: std::io::Error) -> WrapperError {
    WrapperError::Path {
        path,
        what: "protected path",
        source,
    }
}

/// The protected paths found so far.
struct Found<'a> {
    out: Vec<Protected>,
    /// What could not be pinned, to check after the run.
    watched: Vec<Watched>,
    /// The paths in `out`.
    listed: HashSet<PathBuf>,
    writable: &'a [PathBuf],
    home: Option<&'a Path>,
    allow_git_writes: bool,
    /// Gitlinks seen so far, against `MAX_GITLINKS`.
    gitlinks: usize,
    /// The configuration every repository reads besides its own (shared_configs).
    shared: Vec<ConfigSet>,
    /// The git directories pinned so far: each once, however many roots lie in it.
    repositories: HashSet<PathBuf>,
    /// Where CMD can write git's data.
    git_data: GitData,
    basis: Basis,
    needs: Needs,
    /// The repository whose configuration, index and hooks are being read.
    repository: Option<RepositoryName>,
    /// What names the paths being pinned, if something does.
    naming: Option<Naming>,
}

impl Found<'_> {
    fn writable(&self, path: &Path) -> bool {
        self.writable.iter().any(|r| path.starts_with(r))
    }

    /// Adds a path to pin read-only, once, if it lies inside a writable root (elsewhere
    /// it is read-only already).
    fn push(&mut self, path: PathBuf, placeholder: Option<Placeholder>) {
        self.push_as(path, placeholder, false);
    }

    /// Adds a path, read-only or (`writable`) left writable inside its git directory's
    /// pin. One named both ways stays read-only (`core.hooksPath = .git/refs`).
    fn push_as(&mut self, path: PathBuf, placeholder: Option<Placeholder>, writable: bool) {
        if !self.writable(&path) {
            return;
        }
        if let (Needs::Told, Some(naming), false) = (self.needs, &self.naming, writable) {
            self.basis.needs.push((path.clone(), naming.clone()));
        }
        if !self.listed.insert(path.clone()) {
            if !writable {
                if let Some(listed) = self.out.iter_mut().find(|p| p.path == path) {
                    listed.writable = false;
                }
            }
            return;
        }
        self.watch_if_linked(&path);
        self.out.push(Protected {
            path,
            placeholder,
            writable,
        });
    }

    /// From here on, what is pinned is named by `setting` (for the repository being
    /// read, if any), and `named` counts as named. Returns what named pins before, to be
    /// put back.
    fn name(&mut self, setting: &str, named: &Path) -> Option<Naming> {
        self.basis.named.insert(named.to_owned());
        self.naming.replace(Naming {
            repository: self.repository.clone(),
            setting: setting.to_owned(),
            named: named.to_owned(),
        })
    }

    /// The same setting now names `named` too (what a link it led to leads to).
    fn name_further(&mut self, named: &Path) -> Option<Naming> {
        self.basis.named.insert(named.to_owned());
        let further = self.naming.as_ref().map(|n| Naming {
            named: named.to_owned(),
            ..n.clone()
        });
        std::mem::replace(&mut self.naming, further)
    }

    /// A regular file with more than one name: a mount pins this name, not the others
    /// (`ln scripts/pre-commit .git/hooks/`), so a write through another is only seen
    /// after the run, by the file's change time.
    fn watch_if_linked(&mut self, path: &Path) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.nlink() > 1) {
            self.watch(
                path,
                "a file with another name (a hard link) CMD could write",
            );
        }
    }

    fn watch(&mut self, path: &Path, why: &str) {
        self.watch_as(path, why, WatchedAs::Path);
    }

    fn watch_as(&mut self, path: &Path, why: &str, what: WatchedAs) {
        if !self
            .watched
            .iter()
            .any(|w| w.path == path && w.what == what)
        {
            self.watched.push(Watched {
                path: path.to_owned(),
                why: why.to_owned(),
                what,
                was: Identity::of(path),
            });
        }
    }

    /// The environment (a Python venv: an ancestor holding `pyvenv.cfg`; a
    /// `node_modules`) a program at `path` in a writable root runs from, watched whole:
    /// its modules run with it (a `.pth` file in `site-packages`, a package's code).
    fn watch_environment(&mut self, path: &Path, why: &str) {
        let Some(root) = self.writable.iter().find(|r| path.starts_with(r)).cloned() else {
            return;
        };
        for ancestor in path.ancestors().skip(1) {
            if !ancestor.starts_with(&root) || ancestor == root {
                break;
            }
            let node_modules = ancestor.file_name() == Some(std::ffi::OsStr::new("node_modules"));
            if node_modules || ancestor.join("pyvenv.cfg").is_file() {
                self.watch_as(ancestor, why, WatchedAs::Tree);
                return;
            }
        }
    }

    /// The protected names at the top of `root`; returns whether a repository is there
    /// (a `.git`, or the root itself a bare repository).
    fn top_names(&mut self, root: &Path, lay: Lay) -> Result<bool, WrapperError> {
        let mut repository = false;
        for name in protected_names() {
            let path = root.join(name);
            // Where it is read-only anyway (the top of a home split into its entries,
            // homesplit.rs), there is nothing to pin, a symlink included.
            if !self.writable(&path) {
                continue;
            }
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    // Missing: CMD must not be able to create it either, where it counts
                    // (under home, the list of places that run code says how).
                    if PROJECT_NAMES.contains(&name) && lay == Lay::Placeholders {
                        self.push(path, Some(Placeholder::Dir));
                    }
                    continue;
                }
                Err(source) => return Err(path_error(path, source)),
            };
            if !PROJECT_NAMES.contains(&name) && lay == Lay::ExistingOnly {
                // A home entry's own `.bashrc` is a file like any other: only home's
                // top-level one is read by a shell (and home's top stays read-only).
                continue;
            }
            if meta.file_type().is_symlink() {
                return Err(WrapperError::ProtectedSymlink { path });
            }
            if is_placeholder(&path) {
                self.push(path, Some(Placeholder::Dir));
            } else if name == ".git" {
                repository = true;
                self.git_entry(root, &path, &meta, 0)?;
            } else {
                self.push(path, None);
            }
        }
        if !repository && is_git_directory(root) {
            repository = true;
            self.pin_repository(
                Repository {
                    git_dir: root.to_owned(),
                    common_dir: common_dir_of(root),
                    worktree: None,
                },
                0,
            )?;
        }
        Ok(repository)
    }

    /// What the shared configuration's relative paths name at `dir`, where git run
    /// outside any repository (or in one made later) takes them from.
    fn shared_relative(&mut self, dir: &Path, lay: Lay) -> Result<(), WrapperError> {
        for code in self.shared_codes(Some(dir))? {
            self.pin_code(&code, lay)?;
        }
        Ok(())
    }

    /// What the shared configuration names, relative paths against `run_dir`.
    fn shared_codes(&self, run_dir: Option<&Path>) -> Result<Vec<CodePath>, WrapperError> {
        codes_of(&self.shared, run_dir, self.home)
    }

    fn pin_code(&mut self, code: &CodePath, lay: Lay) -> Result<(), WrapperError> {
        let outer = self.name(&code.setting, &code.path);
        let pinned = self.pin_code_path(code, lay);
        self.naming = outer;
        pinned
    }

    fn pin_code_path(&mut self, code: &CodePath, lay: Lay) -> Result<(), WrapperError> {
        // A word that can be no file's name (an awk program's text slipped through) is
        // no path at all.
        if !could_be_a_file(&code.path) {
            return Ok(());
        }
        // A setting naming a whole writable root (`core.hooksPath = .`): a root cannot
        // be pinned and still be written.
        let real = std::fs::canonicalize(&code.path).unwrap_or_else(|_| code.path.clone());
        if self.writable.iter().any(|r| r.starts_with(&real)) {
            if code.leaf == Placeholder::Dir {
                return Err(WrapperError::Usage(format!(
                    "{} names {}, which is (or holds) a writable root: netbox cannot keep git's \
                     hooks there read-only while CMD may write it; leave it out of the writable \
                     roots (--write only the directories CMD needs)",
                    code.setting,
                    code.path.display()
                )));
            }
            return Ok(());
        }
        // Found on PATH, or a word that names a file: watched, never pinned (a venv's
        // entry point, a file an argument names), with the environment it runs from.
        if matches!(code.role, Role::Bare | Role::Mentioned) {
            if self.writable(&real) {
                self.watch(&code.path, &code.setting);
                self.watch_environment(&real, &code.setting);
            }
            return Ok(());
        }
        // Named anywhere, a file with another name in a root changes with it.
        self.watch_if_linked(&code.path);
        if code.role != Role::Value {
            // A program or script: reached through a link in a root (a venv's
            // `python3`, a package manager's `node_modules/.bin` link), or below a
            // missing directory, it is watched rather than refused or given a
            // placeholder directory that would stop CMD's own work (`npm install`).
            self.watch_environment(&code.path, &code.setting);
            if refuse_symlinks_in_roots(&code.path, self.writable, "program").is_err() {
                self.watch(&code.path, &code.setting);
                return Ok(());
            }
            // Only the leaf missing: a placeholder file holds its place.
            let leaf_missing = code.path.parent().is_some_and(Path::is_dir);
            if !code.path.exists() && !leaf_missing {
                if self.writable(&real) {
                    self.watch(&code.path, &code.setting);
                }
                return Ok(());
            }
        }
        self.pin_named(&code.path, code.leaf, "path in git config", lay)?;
        if code.leaf == Placeholder::Dir {
            // A hooks or template directory: links in it lead git on to their targets.
            self.pin_link_targets(&real, 0)?;
            self.pin_link_targets(&real.join("hooks"), 0)?;
        }
        Ok(())
    }

    /// Pins the targets of the links in the pinned directory `dir` (a git directory's
    /// hooks, a hooks path): a link cannot change, but what it leads to in a writable
    /// root could (`.git/hooks/pre-commit -> ../../scripts/pre-commit`, a tracked file).
    fn pin_link_targets(&mut self, dir: &Path, depth: usize) -> Result<(), WrapperError> {
        // A link added there later leads git elsewhere.
        self.basis.sources.record(dir);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten().take(MAX_LINKS_LOOKED_AT) {
            if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
                // A hook with another name elsewhere (a hard link) is written there.
                self.watch_if_linked(&entry.path());
                continue;
            }
            let Ok(target) = std::fs::read_link(entry.path()) else {
                continue;
            };
            self.pin_link_target(&dir.join(target), depth)?;
        }
        Ok(())
    }

    /// Pins what a link in a pinned place leads to (`target`, as the link names it,
    /// relative to the link's directory), and what links in it lead to, a level or two.
    fn pin_link_target(&mut self, target: &Path, depth: usize) -> Result<(), WrapperError> {
        let outer = self.name_further(target);
        let pinned = self
            .pin_named(
                target,
                EMPTY_CONFIG,
                "target of a link git follows",
                Lay::Placeholders,
            )
            .and_then(|()| {
                if depth < 2 && target.is_dir() {
                    let real = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_owned());
                    self.pin_link_targets(&real, depth + 1)?;
                }
                Ok(())
            });
        self.naming = outer;
        pinned
    }

    /// The repository a root lies inside, if its top is above the root: `git status`
    /// there enters the submodules it records, those inside the root included. One whose
    /// index cannot be read is refused like the root's own: its submodules could not be
    /// pinned (and another user's git may read what this one cannot).
    /// Returns whether there is one.
    /// Above a root, a `.git` link is followed (CMD cannot change it), and a `.git`
    /// directory that is no repository is passed over, as git's own search does.
    fn enclosing_repository(&mut self, root: &Path) -> Result<bool, WrapperError> {
        for top in root.ancestors().skip(1) {
            let dot_git = top.join(".git");
            match std::fs::metadata(&dot_git) {
                Ok(meta) if meta.is_dir() && !is_git_directory(&dot_git) => continue,
                Ok(meta) => {
                    let dot_git = std::fs::canonicalize(&dot_git).unwrap_or(dot_git);
                    self.git_entry(top, &dot_git, &meta, 0)?;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(_) => return Ok(false),
            }
        }
        Ok(false)
    }

    /// A `.git` entry of the work tree `worktree`: the git dir it is or points at,
    /// pinned with all it names (pin_repository).
    fn git_entry(
        &mut self,
        worktree: &Path,
        dot_git: &Path,
        meta: &std::fs::Metadata,
        depth: usize,
    ) -> Result<(), WrapperError> {
        let (git_dir, common_dir) = if meta.is_file() {
            let dirs = git_dirs_of_gitfile(dot_git)?;
            self.push(dot_git.to_owned(), None);
            let git_dir = dirs[0].clone();
            let common = dirs.last().cloned().unwrap_or_else(|| git_dir.clone());
            (git_dir, common)
        } else if meta.is_dir() {
            (dot_git.to_owned(), common_dir_of(dot_git))
        } else {
            // Neither (a fifo, say): git takes it for no repository. Pinned as it is.
            self.push(dot_git.to_owned(), None);
            return Ok(());
        };
        self.pin_repository(
            Repository {
                git_dir,
                common_dir,
                worktree: Some(worktree.to_owned()),
            },
            depth,
        )
    }

    /// Everything git would later run or read as code for one repository, whichever
    /// way netbox met it (the workspace's, a `--write` root's, the one a root lies in, a
    /// home entry's, a submodule's): its git directory (all of it, or with
    /// `--allow-git-writes` the parts that run code or lead elsewhere), what its own
    /// configuration and the shared one name relative to where git runs for it (the work
    /// tree's top, `core.worktree`, or a bare repository's own directory), and the
    /// submodules its index records, each the same way.
    fn pin_repository(&mut self, repo: Repository, depth: usize) -> Result<(), WrapperError> {
        if !self.repositories.insert(repo.git_dir.clone()) {
            return Ok(());
        }
        let this = RepositoryName {
            git_dir: repo.git_dir.clone(),
            shown: repo
                .worktree
                .clone()
                .unwrap_or_else(|| repo.git_dir.clone()),
        };
        // Its git directory is named by what led here (a submodule's by the index that
        // records it); a top one's by itself, for what links in its hooks lead to.
        let outer_naming = self.naming.clone();
        if self.naming.is_none() {
            let hooks = repo.common_dir.join("hooks");
            self.basis.named.insert(hooks.clone());
            self.naming = Some(Naming {
                repository: Some(this.clone()),
                setting: "a link in its hooks directory".into(),
                named: hooks,
            });
        }
        // A bare repository that is a writable root itself keeps only its code-bearing
        // parts read-only: all of it would leave the root nothing writable (a push to
        // the branch HEAD names takes HEAD's lock at its top).
        let shape = match (&repo.worktree, self.allow_git_writes) {
            (None, _) => GitDirPin::Parts,
            (Some(_), false) => GitDirPin::Whole,
            (Some(_), true) => GitDirPin::WholeButData,
        };
        self.push_git_dir(&repo.git_dir, shape)?;
        if repo.common_dir != repo.git_dir {
            self.push_git_dir(&repo.common_dir, shape)?;
        }
        self.naming = None;
        let outer_repository = self.repository.replace(this);
        let own = [
            ConfigSet::read(&repo.common_dir.join("config"), self.home),
            ConfigSet::read(&repo.git_dir.join("config.worktree"), self.home),
        ];
        for set in &own {
            self.basis.sources.extend(set.sources.clone());
        }
        let run_dir = own
            .iter()
            .rev()
            .find_map(ConfigSet::worktree)
            .map(|w| {
                let at = repo.git_dir.join(w);
                std::fs::canonicalize(&at).unwrap_or(at)
            })
            .or_else(|| repo.worktree.clone())
            .unwrap_or_else(|| repo.git_dir.clone());
        let mut codes = self.shared_codes(Some(&run_dir))?;
        codes.extend(codes_of(&own, Some(&run_dir), self.home)?);
        for code in &codes {
            self.pin_code(code, Lay::Placeholders)?;
        }
        let hooks_paths: Vec<PathBuf> = codes
            .iter()
            .filter(|c| c.setting == "core.hookspath")
            .map(|c| c.path.clone())
            .collect();
        let hooks = match hooks_paths.last() {
            Some(path) => path.clone(),
            None => repo.common_dir.join("hooks"),
        };
        self.pin_hook_runners(&hooks, &run_dir)?;
        if repo.worktree.is_some() {
            self.submodules_of(&run_dir, &repo.git_dir, &repo.common_dir, depth)?;
        }
        self.repository = outer_repository;
        self.naming = outer_naming;
        Ok(())
    }

    /// Pins a path something names, wherever it lies in a writable root: refused if it
    /// reaches a symlink there; where it is missing, a placeholder at its first missing
    /// component (`leaf` for the path itself, else a directory), or nothing (`lay`).
    fn pin_named(
        &mut self,
        path: &Path,
        leaf: Placeholder,
        what: &'static str,
        lay: Lay,
    ) -> Result<(), WrapperError> {
        refuse_symlinks_in_roots(path, self.writable, what)?;
        let Some((real, missing_from)) = real_path(path) else {
            return Ok(());
        };
        match missing_from {
            None => {
                let placeholder = is_placeholder(&real).then_some(leaf);
                self.push(real, placeholder);
            }
            Some(_) if lay == Lay::ExistingOnly => {}
            Some(first_missing) if first_missing == real => self.push(real, Some(leaf)),
            Some(first_missing) => self.push(first_missing, Some(Placeholder::Dir)),
        }
        Ok(())
    }

    /// Pins what git would enter for each gitlink in `git_dir`'s index.
    fn submodules_of(
        &mut self,
        worktree: &Path,
        git_dir: &Path,
        common_dir: &Path,
        depth: usize,
    ) -> Result<(), WrapperError> {
        let index = git_dir.join("index");
        self.basis.sources.record(&index);
        let scan =
            gitindex::gitlinks(&index, gitindex::object_name_len(common_dir)).map_err(|e| {
                WrapperError::GitIndex {
                    path: index.clone(),
                    reason: e.to_string(),
                }
            })?;
        // A split index reads most of its entries from the shared one (read with it
        // above): it lies at the top of the git dir, read-only with it.
        let links = scan.gitlinks;
        if !links.is_empty() && depth >= MAX_SUBMODULE_DEPTH {
            return Err(WrapperError::GitIndex {
                path: index,
                reason: format!("submodules nest more than {MAX_SUBMODULE_DEPTH} deep"),
            });
        }
        for link in links {
            self.gitlinks += 1;
            if self.gitlinks > MAX_GITLINKS {
                return Err(WrapperError::GitIndex {
                    path: index,
                    reason: format!("more than {MAX_GITLINKS} submodules to pin"),
                });
            }
            let path = worktree.join(&link);
            if self.writable(&path) {
                let outer = self.name("a submodule in the index", &path);
                let pinned = self.submodule(worktree, &path, depth);
                self.naming = outer;
                pinned?;
            }
        }
        Ok(())
    }

    /// One submodule at `path` (inside `worktree`): its `.git` pinned and followed; if
    /// it has none, the directory itself pinned; if a component of the path is missing,
    /// a placeholder directory there.
    fn submodule(
        &mut self,
        worktree: &Path,
        path: &Path,
        depth: usize,
    ) -> Result<(), WrapperError> {
        let below = path.strip_prefix(worktree).unwrap_or(path);
        let mut at = worktree.to_owned();
        for component in below.components() {
            at.push(component);
            let meta = match std::fs::symlink_metadata(&at) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.push(at, Some(Placeholder::Dir));
                    return Ok(());
                }
                Err(source) => return Err(path_error(at, source)),
            };
            if meta.file_type().is_symlink() {
                return Err(WrapperError::SubmoduleSymlink {
                    path: at,
                    submodule: path.to_owned(),
                });
            }
            if !meta.is_dir() {
                // A file where git expects the submodule (or a directory on its way):
                // pinned, so that no directory can take its place.
                self.push(at, None);
                return Ok(());
            }
        }
        let dot_git = path.join(".git");
        match std::fs::symlink_metadata(&dot_git) {
            Ok(meta) if meta.file_type().is_symlink() => {
                Err(WrapperError::ProtectedSymlink { path: dot_git })
            }
            Ok(meta) => self.git_entry(path, &dot_git, &meta, depth + 1),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Not checked out: nothing of it may be written, a `.git` least of all.
                let placeholder = is_placeholder(path).then_some(Placeholder::Dir);
                self.push(path.to_owned(), placeholder);
                Ok(())
            }
            Err(source) => Err(path_error(dot_git, source)),
        }
    }

    /// What the hook runners a repository's hooks start read from its work tree: a hook
    /// is only as safe as what it runs. husky's hooks (`core.hooksPath = .husky/_`) run
    /// the scripts beside them in `.husky/`; pre-commit's read `.pre-commit-config.yaml`;
    /// lefthook's read `lefthook.yml` and its variants. Each is pinned (the configs with a
    /// placeholder where a runner would pick up a new one).
    fn pin_hook_runners(&mut self, hooks: &Path, run_dir: &Path) -> Result<(), WrapperError> {
        if hooks.file_name() == Some(std::ffi::OsStr::new("_")) {
            if let Some(parent) = hooks.parent() {
                let outer = self.name("husky's scripts beside its hooks", parent);
                let pinned = self
                    .pin_named(
                        parent,
                        Placeholder::Dir,
                        "hook runner's scripts",
                        Lay::Placeholders,
                    )
                    .and_then(|()| self.pin_link_targets(parent, 0));
                self.naming = outer;
                pinned?;
            }
        }
        // A hook installed later may be a runner's.
        self.basis.sources.record(hooks);
        let Ok(entries) = std::fs::read_dir(hooks) else {
            return Ok(());
        };
        let mut texts = String::new();
        for entry in entries.flatten().take(MAX_LINKS_LOOKED_AT) {
            let name = entry.file_name();
            if name.to_string_lossy().ends_with(".sample") {
                continue;
            }
            self.basis.sources.record(&entry.path());
            if let Ok(bytes) = bridge::small_file::read_small_bytes(&entry.path(), 64 << 10) {
                texts.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
        // pre-commit's hooks run `$INSTALL_PYTHON -mpre_commit`: the environment that
        // python belongs to (a project venv) runs as the hook.
        for line in texts.lines() {
            if let Some(python) = line.trim().strip_prefix("INSTALL_PYTHON=") {
                let python = Path::new(python.trim_matches(|c| c == '\'' || c == '"'));
                if python.is_absolute() {
                    self.watch_environment(python, "the python a hook runs");
                }
            }
        }
        for (runner, files) in HOOK_RUNNERS {
            if !texts.contains(runner) {
                continue;
            }
            let mut files: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
            // pre-commit installed with another config (`--config=ci/pre-commit.yaml`).
            files.extend(config_arguments(&texts));
            for file in files {
                let path = run_dir.join(file.trim_end_matches('/'));
                if path.symlink_metadata().is_ok() {
                    let outer = self.name(&format!("{runner}'s configuration"), &path);
                    let pinned = self.pin_named(
                        &path,
                        EMPTY_CONFIG,
                        "hook runner's configuration",
                        Lay::Placeholders,
                    );
                    self.naming = outer;
                    pinned?;
                } else if self.writable(&path) {
                    // Named all the same: one that appears later was looked for.
                    self.basis.named.insert(path.clone());
                    // One a runner would pick up if it appeared: said if CMD makes it.
                    self.watch(&path, &format!("a configuration {runner} reads"));
                }
            }
        }
        Ok(())
    }

    /// A git directory, pinned as `shape` says. A code-bearing part that is a link is
    /// followed to what it leads to (pinned too) where the directory's top is read-only,
    /// and refused where it is not (CMD could replace the link).
    fn push_git_dir(&mut self, dir: &Path, shape: GitDirPin) -> Result<(), WrapperError> {
        for part in CODE_PARTS {
            let path = dir.join(part);
            if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                self.watch_if_linked(&path);
                continue;
            }
            if shape == GitDirPin::Parts && self.writable(&path) {
                return Err(WrapperError::ProtectedSymlink { path });
            }
            if let Ok(target) = std::fs::read_link(&path) {
                self.pin_link_target(&dir.join(target), 0)?;
            }
        }
        // The hooks, wherever the hooks directory really is.
        let hooks = std::fs::canonicalize(dir.join("hooks")).unwrap_or_else(|_| dir.join("hooks"));
        self.pin_link_targets(&hooks, 0)?;
        match shape {
            GitDirPin::Whole => {
                self.push(dir.to_owned(), None);
                return Ok(());
            }
            GitDirPin::WholeButData => {
                self.push(dir.to_owned(), None);
                self.open_git_data(dir)?;
                return Ok(());
            }
            GitDirPin::Parts => {}
        }
        if self.writable(dir) {
            self.pin_bare_top(dir)?;
        }
        let index = match gitindex::object_name_len(&common_dir_of(dir)) {
            32 => placeholders::EMPTY_INDEX_SHA256,
            _ => placeholders::EMPTY_INDEX_SHA1,
        };
        // hooks and config run code, and so does config.worktree once config enables it;
        // info/attributes chooses which configured drivers run on which files; a commondir
        // would redirect git to another directory's config and hooks; a gitlink added to
        // the index, or a submodule's or worktree's git dir under modules/ or worktrees/,
        // makes git enter a directory CMD filled. Missing ones get placeholders, but
        // config: a repository without one is not a repository. (objects/info/alternates
        // is left writable with the objects: it names more objects, never code.)
        let info = dir.join("info");
        if std::fs::symlink_metadata(&info).is_err() || is_placeholder(&info) {
            self.push(info, Some(Placeholder::Dir));
        } else {
            let attributes = info.join("attributes");
            let placeholder = (std::fs::symlink_metadata(&attributes).is_err()
                || is_placeholder(&attributes))
            .then_some(placeholders::EMPTY_CONFIG);
            self.push(attributes, placeholder);
        }
        for (part, placeholder) in [
            ("hooks", Some(Placeholder::Dir)),
            ("config", None),
            ("config.worktree", Some(placeholders::EMPTY_CONFIG)),
            ("commondir", Some(placeholders::COMMONDIR)),
            ("index", Some(index)),
            ("modules", Some(Placeholder::Dir)),
            ("worktrees", Some(Placeholder::Dir)),
            // A rebase under way: its todo list's `exec` lines run at `git rebase
            // --continue`. Pinned where one is under way; a placeholder would make git
            // believe one is (a rebase CMD starts is reported after the run).
            ("rebase-merge", None),
            ("rebase-apply", None),
            // A cherry-pick under way: its options name the merge strategy it runs.
            ("sequencer", None),
            // lefthook's remote configurations (`remotes:`), fetched into the git dir.
            ("info/lefthook-remotes", None),
        ] {
            let path = dir.join(part);
            let exists = std::fs::symlink_metadata(&path).is_ok();
            if exists && !is_placeholder(&path) {
                self.push(path, None);
            } else if let Some(placeholder) = placeholder {
                self.push(path, Some(placeholder));
            }
        }
        Ok(())
    }

    /// What `git fetch`, `git commit-tree` and `git update-ref` write in a git directory
    /// pinned whole, left writable on top of its pin: the data directories that exist
    /// (an allow-list: one git adds later stays read-only), `logs/` made if missing (git
    /// would make it at the top), and `FETCH_HEAD`, which git writes in place (made
    /// empty if missing). A link stays read-only with the top (git writes through it,
    /// to what it leads to); so does a `FETCH_HEAD` with another name (a hard link to a
    /// hook would make the hook writable). Within `refs/`, `refs/replace/` stays
    /// read-only (a placeholder where missing): a replace ref makes git read CMD's object
    /// wherever the original is named, so `git diff` would not show CMD's change and a
    /// checkout would bring it back. A repository whose refs are a reftable (one file
    /// for every ref, replace refs too) keeps `refs/`, `reftable/` and `logs/` read-only:
    /// ref updates fail inside.
    fn open_git_data(&mut self, dir: &Path) -> Result<(), WrapperError> {
        let reftable = uses_reftable(dir);
        for name in GIT_DATA_DIRS {
            if reftable && matches!(*name, "refs" | "reftable" | "logs") {
                continue;
            }
            let path = dir.join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() && self.writable(&path) => {
                    refuse_hard_links(&path, dir)?;
                    let placeholder = is_placeholder(&path).then_some(Placeholder::Dir);
                    self.push_as(path.clone(), placeholder, true);
                    self.git_data.dirs.push(path);
                }
                Err(e) if e.kind() == ErrorKind::NotFound && *name == "logs" => {
                    self.push_as(path.clone(), Some(Placeholder::Dir), true);
                    self.git_data.dirs.push(path);
                }
                _ => {}
            }
        }
        let refs = dir.join("refs");
        if !reftable && self.listed.contains(&refs) {
            self.pin_named(
                &refs.join("replace"),
                Placeholder::Dir,
                "replace refs",
                Lay::Placeholders,
            )?;
        }
        self.open_fetch_head(dir);
        Ok(())
    }

    /// `FETCH_HEAD`, which git writes in place (never by rename), bound writable over
    /// itself (made empty if missing), so that no link can take its place; one with
    /// another name stays as it is.
    fn open_fetch_head(&mut self, dir: &Path) {
        use std::os::unix::fs::MetadataExt;
        let fetch_head = dir.join("FETCH_HEAD");
        match std::fs::symlink_metadata(&fetch_head) {
            Ok(meta) if meta.is_file() && meta.nlink() == 1 => {
                let placeholder = is_placeholder(&fetch_head).then_some(EMPTY_CONFIG);
                self.push_as(fetch_head, placeholder, true);
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.push_as(fetch_head, Some(EMPTY_CONFIG), true);
            }
            _ => {}
        }
    }

    /// The top of a git directory that is itself writable (a bare repository that is a
    /// writable root): the files at its top that git rewrites through a link (its lock
    /// file follows one: `git pack-refs` would write the packed refs, branch names CMD
    /// chose, into whatever `packed-refs` leads to) are pinned, with an empty placeholder
    /// where missing (an empty `packed-refs` or `shallow` reads as none), and `FETCH_HEAD`
    /// is bound writable over itself; whatever else CMD leaves there that git never
    /// makes (a link in `logs/`, a FIFO in `objects/`) is removed after the run.
    fn pin_bare_top(&mut self, dir: &Path) -> Result<(), WrapperError> {
        for (part, placeholder) in [
            ("HEAD", None),
            ("packed-refs", Some(EMPTY_CONFIG)),
            ("shallow", Some(EMPTY_CONFIG)),
        ] {
            let path = dir.join(part);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(WrapperError::ProtectedSymlink { path })
                }
                Ok(_) => {
                    let placeholder = placeholder.filter(|_| is_placeholder(&path));
                    self.push(path, placeholder);
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    if let Some(placeholder) = placeholder {
                        self.push(path, Some(placeholder));
                    }
                }
                Err(source) => return Err(path_error(path, source)),
            }
        }
        self.open_fetch_head(dir);
        for name in GIT_DATA_DIRS {
            let path = dir.join(name);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                refuse_hard_links(&path, dir)?;
            }
        }
        self.git_data.git_dirs.push(dir.to_owned());
        Ok(())
    }
}

/// Whether the repository whose git directory is `dir` keeps its refs in a reftable
/// (`reftable/` present, or `extensions.refStorage = reftable` in its config).
fn uses_reftable(dir: &Path) -> bool {
    let common = common_dir_of(dir);
    if dir.join("reftable").is_dir() || common.join("reftable").is_dir() {
        return true;
    }
    gitconfig::read(&common.join("config")).is_some_and(|entries| {
        entries.iter().any(|e| {
            e.section == "extensions"
                && e.subsection.is_none()
                && e.key == "refstorage"
                && e.value
                    .as_deref()
                    .is_some_and(|v| v.eq_ignore_ascii_case("reftable"))
        })
    })
}

/// Entries a check for hard links reads under one data directory, at most: a repository
/// of loose objects that large is refused rather than half-checked (`git gc` packs it).
const MAX_HARD_LINK_ENTRIES: usize = 200_000;

/// Refuses a data directory (`objects/`, `lfs/`, …) about to be left writable that holds
/// a regular file with more than one name: a local `git clone` hard-links its objects to
/// the source repository's, and CMD, owning the file, could `chmod u+w` it and rewrite
/// the object there too, outside every writable root (git does not check a loose
/// object's content against its name when it reads it). Nothing is followed.
fn refuse_hard_links(data: &Path, git_dir: &Path) -> Result<(), WrapperError> {
    use std::os::unix::fs::MetadataExt;
    let mut pending = vec![data.to_owned()];
    let mut seen = 0;
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| path_error(dir.clone(), source))?;
        for entry in entries {
            let entry = entry.map_err(|source| path_error(dir.clone(), source))?;
            seen += 1;
            if seen > MAX_HARD_LINK_ENTRIES {
                return Err(WrapperError::GitDataUnchecked {
                    path: data.to_owned(),
                    limit: MAX_HARD_LINK_ENTRIES,
                });
            }
            let path = entry.path();
            let meta = entry
                .metadata()
                .map_err(|source| path_error(path.clone(), source))?;
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() && meta.nlink() > 1 {
                return Err(WrapperError::GitDataHardLink {
                    path,
                    links: meta.nlink(),
                    repository: git_dir.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// How a git directory is pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitDirPin {
    /// All of it read-only.
    Whole,
    /// All of it read-only, with its data left writable on top (`--allow-git-writes`):
    /// a host `git commit` replaces files at its top (`index`, `config`), which would
    /// detach a pin on each, but never the directory itself.
    WholeButData,
    /// Only what runs code or leads git elsewhere (a bare repository that is a writable
    /// root itself).
    Parts,
}

/// The directories of a git directory that hold only data git writes as it fetches and
/// commits: objects, refs and their logs, a reftable, git-lfs's objects.
pub(crate) const GIT_DATA_DIRS: &[&str] = &["objects", "refs", "logs", "reftable", "lfs"];

/// The parts of a git directory whose link, if one is a link, git follows to code.
pub(crate) const CODE_PARTS: &[&str] = &[
    "hooks",
    "config",
    "config.worktree",
    "commondir",
    "index",
    "info",
    "modules",
    "worktrees",
];

/// Entries looked at in one directory for links and hook runners.
const MAX_LINKS_LOOKED_AT: usize = 4096;

/// Hook runners (a word their installed hooks hold) and the files in the work tree they
/// read what to run from (a trailing `/` for a directory).
const HOOK_RUNNERS: &[(&str, &[&str])] = &[
    (
        "pre-commit",
        &[".pre-commit-config.yaml", ".pre-commit-config.yml"],
    ),
    (
        "lefthook",
        &[
            "lefthook.yml",
            "lefthook.yaml",
            "lefthook.json",
            "lefthook.jsonc",
            "lefthook.toml",
            ".lefthook.yml",
            ".lefthook.yaml",
            ".lefthook.json",
            ".lefthook.jsonc",
            ".lefthook.toml",
            "lefthook-local.yml",
            "lefthook-local.yaml",
            "lefthook-local.json",
            "lefthook-local.jsonc",
            "lefthook-local.toml",
            ".lefthook-local.yml",
            ".lefthook-local.yaml",
            ".lefthook-local.json",
            ".lefthook-local.jsonc",
            ".lefthook-local.toml",
            ".config/lefthook.yml",
            ".config/lefthook.yaml",
            ".config/lefthook-local.yml",
            ".config/lefthook-local.yaml",
            ".lefthook/",
            ".lefthook-local/",
        ],
    ),
];

/// The files a hook names with `--config=FILE` or `--config FILE` (pre-commit's own
/// `pre-commit install -c FILE` writes them into its hooks).
fn config_arguments(text: &str) -> Vec<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '(' || c == ')')
        .filter(|w| !w.is_empty())
        .collect();
    let mut found = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let file = match word.strip_prefix("--config=") {
            Some(file) => Some(file),
            None if *word == "--config" => words.get(i + 1).copied(),
            None => None,
        };
        if let Some(file) = file.filter(|f| could_be_a_file(Path::new(f)) && !f.starts_with('$')) {
            found.push(file.to_owned());
        }
    }
    found
}

/// Whether `path` could name a file: no component longer than the kernel allows
/// (NAME_MAX, 255 bytes), and no control character (an awk program's text, a format
/// string that slipped through, is no path).
fn could_be_a_file(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.components().all(|c| {
        let bytes = c.as_os_str().as_bytes();
        bytes.len() <= 255 && !bytes.iter().any(|b| b.is_ascii_control())
    })
}

/// Refuses `path` (as the user named it) if resolving it meets a symlink inside a
/// writable root: CMD could point that link elsewhere, so what netbox pins (or reads next
/// time) would no longer be what the name leads to. Symlinks outside the roots are
/// followed, as the kernel would; a missing component ends the check (nothing beyond it
/// exists to be a link).
pub fn refuse_symlinks_in_roots(
    path: &Path,
    roots: &[PathBuf],
    what: &'static str,
) -> Result<(), WrapperError> {
    use std::path::Component;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    // What is left to resolve, last component first: a link's target is put back in
    // front, so every component met on the way is checked, as the kernel meets them.
    let mut left: Vec<std::ffi::OsString> = Vec::new();
    push_components(&mut left, &absolute);
    // Where resolution has got to: always a real path, no symlink in it.
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = left.pop() {
        match Path::new(&name).components().next() {
            Some(Component::ParentDir) => {
                at.pop();
                continue;
            }
            Some(Component::Normal(_)) => {}
            _ => continue,
        }
        let next = at.join(&name);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Some(root) = roots.iter().find(|r| next.starts_with(r)) {
                    return Err(WrapperError::SymlinkInRoot {
                        what,
                        path: path.to_owned(),
                        link: next,
                        root: root.clone(),
                    });
                }
                hops += 1;
                let Ok(target) = std::fs::read_link(&next) else {
                    return Ok(());
                };
                if hops > MAX_SYMLINK_HOPS {
                    // The kernel would give up too (ELOOP): nothing lies beyond.
                    return Ok(());
                }
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                push_components(&mut left, &target);
            }
            Ok(_) => at = next,
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

/// Symlinks followed in one path at most, as the kernel (MAXSYMLINKS).
const MAX_SYMLINK_HOPS: usize = 40;

/// Pushes `path`'s components so that the first is popped first (`.` dropped, `..` kept).
fn push_components(left: &mut Vec<std::ffi::OsString>, path: &Path) {
    use std::path::Component;
    let parts: Vec<std::ffi::OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    left.extend(parts.into_iter().rev());
}

/// The config files every repository reads besides its own (git-config(1) FILES): the
/// system one and the global ones, or the files `GIT_CONFIG_SYSTEM` and
/// `GIT_CONFIG_GLOBAL` name.
fn shared_git_configs(home: Option<&Path>) -> Vec<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let mut configs = Vec::new();
    // git reads it as a boolean: `false`, `no`, `off`, `0` or empty still read the file.
    let no_system = std::env::var("GIT_CONFIG_NOSYSTEM").is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "false" | "no" | "off" | "0"
        )
    });
    if !no_system {
        match from_env("GIT_CONFIG_SYSTEM") {
            Some(system) => configs.push(system),
            None => configs.extend(system_configs()),
        }
    }
    match from_env("GIT_CONFIG_GLOBAL") {
        Some(global) => configs.push(global),
        None => {
            let xdg = from_env("XDG_CONFIG_HOME")
                .filter(|p| p.is_absolute())
                .or_else(|| home.map(|h| h.join(".config")));
            configs.extend(xdg.map(|x| x.join("git/config")));
            configs.extend(home.map(|h| h.join(".gitconfig")));
        }
    }
    configs
}

/// The system config of each git on `PATH`: `/etc/gitconfig` for a distribution's,
/// `PREFIX/etc/gitconfig` for one built or installed elsewhere (`/usr/local`, a home
/// manager's prefix), since git's is set when it is built.
fn system_configs() -> Vec<PathBuf> {
    let mut configs = vec![PathBuf::from("/etc/gitconfig")];
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).filter(|d| d.is_absolute()) {
        let Ok(git) = std::fs::canonicalize(dir.join("git")) else {
            continue;
        };
        if let Some(prefix) = git.parent().and_then(Path::parent) {
            let config = prefix.join("etc/gitconfig");
            if !configs.contains(&config) {
                configs.push(config);
            }
        }
    }
    configs
}

/// Where `path` leads, and its first missing component if it does not exist: the
/// longest existing ancestor resolved (symlinks outside the roots followed, as the
/// kernel would), the rest appended. Where the rest climbs with `..` (`build/../hooks`
/// with `build` missing), where it leads depends on what CMD makes `build`: only the
/// first missing component is known, and the path is left unresolved.
fn real_path(path: &Path) -> Option<(PathBuf, Option<PathBuf>)> {
    let absolute = std::path::absolute(path).ok()?;
    for ancestor in absolute.ancestors() {
        let Ok(real) = std::fs::canonicalize(ancestor) else {
            continue;
        };
        let rest = absolute.strip_prefix(ancestor).ok()?;
        if rest.as_os_str().is_empty() {
            return Some((real, None));
        }
        let mut components = rest.components();
        let first = real.join(components.next()?);
        if !rest
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            return Some((absolute.clone(), Some(first)));
        }
        return Some((real.join(rest), Some(first)));
    }
    None
}

/// A gitdir or commondir file's text (crate::plan::read_small_file: only a small regular
/// file, opened without blocking).
fn read_small_file(path: &Path) -> std::io::Result<String> {
    crate::plan::read_small_file(path, 64 << 10)
}

/// Whether `dir` is a git directory as git's is_git_directory() sees one (a bare
/// repository, where it is not a `.git`): `HEAD`, and `objects` and `refs` (here or in
/// its common dir).
fn is_git_directory(dir: &Path) -> bool {
    let common = common_dir_of(dir);
    dir.join("HEAD").is_file() && common.join("objects").is_dir() && common.join("refs").is_dir()
}

/// A git dir's common dir: where its `commondir` file points, or itself (also where that
/// is missing: there is nothing there to pin or look at).
pub fn common_dir_of(git_dir: &Path) -> PathBuf {
    read_small_file(&git_dir.join("commondir"))
        .ok()
        .and_then(|common| std::fs::canonicalize(git_dir.join(common.trim())).ok())
        .unwrap_or_else(|| git_dir.to_owned())
}

/// The git dir a `gitdir: PATH` file points at, and its common dir if it has one.
fn git_dirs_of_gitfile(gitfile: &Path) -> Result<Vec<PathBuf>, WrapperError> {
    let read_error = |source| WrapperError::Path {
        path: gitfile.to_owned(),
        what: "gitdir file",
        source,
    };
    let text = read_small_file(gitfile).map_err(read_error)?;
    let Some(target) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")) else {
        return Err(read_error(std::io::Error::new(
            ErrorKind::InvalidData,
            "not a `gitdir: PATH` file",
        )));
    };
    let base = gitfile.parent().unwrap_or(Path::new("/"));
    let git_dir = std::fs::canonicalize(base.join(target.trim())).map_err(read_error)?;
    let common = common_dir_of(&git_dir);
    let mut dirs = vec![git_dir.clone()];
    if common != git_dir {
        dirs.push(common);
    }
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protected paths of `roots`, with no home directory, no extras and .git locked.
    fn protected_in(roots: &[PathBuf]) -> Result<Vec<Protected>, WrapperError> {
        protected_paths(&ProtectInput {
            write_roots: roots,
            writable: roots,
            home_entries: &[],
            home: None,
            homes: &[],
            extra: &[],
            allow_git_writes: false,
        })
        .map(|p| p.pinned)
    }

    fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("netbox-protect-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn missing_git_gets_a_placeholder_and_existing_files_are_listed() {
        let ws = tempdir("plain");
        std::fs::write(ws.join(".bashrc"), "").unwrap();
        std::fs::create_dir(ws.join(".vscode")).unwrap();
        std::fs::write(ws.join(".vscode/settings.json"), "{}").unwrap();
        std::fs::create_dir(ws.join(".idea")).unwrap();
        let roots = [ws.clone()];
        let got = protected_in(&roots).unwrap();
        assert!(got.contains(&Protected {
            path: ws.join(".git"),
            placeholder: Some(Placeholder::Dir),
            writable: false,
        }));
        assert!(got.contains(&Protected {
            path: ws.join(".bashrc"),
            placeholder: None,
            writable: false,
        }));
        assert!(got.contains(&Protected {
            path: ws.join(".vscode"),
            placeholder: None,
            writable: false,
        }));
        // A user's own empty directory is protected, not taken for a placeholder...
        assert!(got.contains(&Protected {
            path: ws.join(".idea"),
            placeholder: None,
            writable: false,
        }));
        // ...while one carrying netbox's mark (a killed run's) is adopted as one.
        std::fs::create_dir(ws.join(".envrc")).unwrap();
        crate::sys::xattr::set(&ws.join(".envrc"), placeholders::PLACEHOLDER_XATTR, b"1").unwrap();
        let marked = protected_in(&roots).unwrap();
        assert!(marked.contains(&Protected {
            path: ws.join(".envrc"),
            placeholder: Some(Placeholder::Dir),
            writable: false,
        }));
        std::fs::remove_dir(ws.join(".envrc")).unwrap();
        // Missing home-only files get no placeholder outside the home directory...
        assert!(!got.iter().any(|p| p.path.ends_with(".zshrc")));
        // ...and do in it, each in its shape, with every other place that runs code.
        let got = protected_paths(&ProtectInput {
            write_roots: &roots,
            writable: &roots,
            home_entries: &[],
            home: Some(&ws),
            homes: std::slice::from_ref(&ws),
            extra: &[],
            allow_git_writes: false,
        })
        .map(|p| p.pinned)
        .unwrap();
        let shape = |name: &str| {
            got.iter()
                .find(|p| p.path == ws.join(name))
                .map(|p| p.placeholder)
        };
        assert_eq!(shape(".zshrc"), Some(Some(placeholders::EMPTY_CONFIG)));
        assert_eq!(
            shape(".bash_profile"),
            Some(Some(placeholders::BASH_PROFILE))
        );
        assert_eq!(shape(".ssh"), Some(Some(Placeholder::Dir)));
        assert_eq!(shape(".bashrc"), Some(None));
        // A missing parent is pinned whole.
        assert_eq!(shape(".local"), Some(Some(Placeholder::Dir)));
        assert_eq!(shape(".local/bin"), None);
        for (name, _) in home::CODE_PATHS {
            let path = ws.join(name);
            assert!(
                got.iter().any(|p| path.starts_with(&p.path)),
                "{name} is not pinned"
            );
        }
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn a_fifo_where_git_keeps_a_file_is_not_waited_on() {
        let ws = tempdir("fifo");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        let fifo = nix::sys::stat::Mode::from_bits_truncate(0o600);
        nix::unistd::mkfifo(&ws.join(".git/commondir"), fifo).unwrap();
        std::fs::create_dir_all(ws.join("wt")).unwrap();
        nix::unistd::mkfifo(&ws.join("wt/.git"), fifo).unwrap();
        // Would block forever on an ordinary open of either FIFO.
        let got = protected_in(std::slice::from_ref(&ws)).unwrap();
        assert!(got.iter().any(|p| p.path == ws.join(".git")));
        assert!(read_small_file(&ws.join("wt/.git")).is_err());
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn gitdir_file_protects_the_real_git_dir() {
        let ws = tempdir("gitfile");
        let real = ws.join("elsewhere/repo.git");
        std::fs::create_dir_all(real.join("worktrees/wt")).unwrap();
        std::fs::write(real.join("worktrees/wt/commondir"), "../..\n").unwrap();
        let wt = ws.join("wt");
        std::fs::create_dir(&wt).unwrap();
        std::fs::write(
            wt.join(".git"),
            "gitdir: ../elsewhere/repo.git/worktrees/wt\n",
        )
        .unwrap();
        let roots = [ws.clone()];
        let got = protected_in(&roots).unwrap();
        // The workspace root's own .git is missing, so it gets a placeholder.
        assert!(got
            .iter()
            .any(|p| p.path == ws.join(".git") && p.placeholder.is_some()));
        let roots = [wt.clone(), ws.join("elsewhere")];
        let got = protected_in(&roots).unwrap();
        let paths: Vec<_> = got.iter().map(|p| p.path.clone()).collect();
        assert!(paths.contains(&wt.join(".git")), "{paths:?}");
        assert!(paths.contains(&real.join("worktrees/wt")), "{paths:?}");
        assert!(paths.contains(&real), "{paths:?}");
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn symlinked_start_up_file_is_refused() {
        let ws = tempdir("symlink");
        std::os::unix::fs::symlink("/etc/hostname", ws.join(".profile")).unwrap();
        let roots = [ws.clone()];
        let err = protected_in(&roots).unwrap_err();
        assert!(matches!(err, WrapperError::ProtectedSymlink { .. }));
        std::fs::remove_dir_all(&ws).unwrap();
    }

    /// What `--allow-git-writes` pins in `ws`'s repository.
    fn protected_writing_git(ws: &Path) -> Vec<Protected> {
        let roots = [ws.to_owned()];
        protected_paths(&ProtectInput {
            write_roots: &roots,
            writable: &roots,
            home_entries: &[],
            home: None,
            homes: &[],
            extra: &[],
            allow_git_writes: true,
        })
        .map(|p| p.pinned)
        .unwrap()
    }

    #[test]
    fn allow_git_writes_pins_the_git_dir_whole_but_its_data() {
        let ws = tempdir("gitwrites");
        for dir in ["hooks", "objects", "refs/heads", "lfs", "unknown"] {
            std::fs::create_dir_all(ws.join(".git").join(dir)).unwrap();
        }
        std::fs::write(ws.join(".git/config"), "").unwrap();
        // A link where git keeps code: its top cannot change, so it is followed.
        std::fs::write(ws.join("shared.gitconfig"), "").unwrap();
        std::os::unix::fs::symlink("../shared.gitconfig", ws.join(".git/config.worktree")).unwrap();
        let got = protected_writing_git(&ws);
        let find = |name: &str| got.iter().find(|p| p.path == ws.join(name)).cloned();
        let read_only = |path: &str, placeholder| Protected {
            path: ws.join(path),
            placeholder,
            writable: false,
        };
        let writable = |path: &str, placeholder| Protected {
            path: ws.join(path),
            placeholder,
            writable: true,
        };
        assert_eq!(find(".git"), Some(read_only(".git", None)));
        assert_eq!(find(".git/objects"), Some(writable(".git/objects", None)));
        assert_eq!(find(".git/refs"), Some(writable(".git/refs", None)));
        assert_eq!(find(".git/lfs"), Some(writable(".git/lfs", None)));
        // Missing: logs/ and FETCH_HEAD made for the run; a reftable is not.
        assert_eq!(
            find(".git/logs"),
            Some(writable(".git/logs", Some(Placeholder::Dir)))
        );
        assert_eq!(
            find(".git/FETCH_HEAD"),
            Some(writable(".git/FETCH_HEAD", Some(EMPTY_CONFIG)))
        );
        assert_eq!(find(".git/reftable"), None);
        // Within refs/, replace refs stay read-only (a placeholder where missing).
        assert_eq!(
            find(".git/refs/replace"),
            Some(read_only(".git/refs/replace", Some(Placeholder::Dir)))
        );
        // Read-only with the top: what is not on the list, and every part that runs code
        // (no pin of its own for a host's rename to detach).
        for name in [".git/unknown", ".git/hooks", ".git/config", ".git/index"] {
            assert_eq!(find(name), None, "{name}");
        }
        assert_eq!(
            find("shared.gitconfig"),
            Some(read_only("shared.gitconfig", None))
        );

        // A data directory that is a link, or a FETCH_HEAD with another name, stays
        // read-only; a data directory the configuration names as code is read-only.
        std::fs::remove_dir_all(ws.join(".git/lfs")).unwrap();
        std::os::unix::fs::symlink("objects", ws.join(".git/lfs")).unwrap();
        std::fs::write(ws.join("notes"), "").unwrap();
        std::fs::hard_link(ws.join("notes"), ws.join(".git/FETCH_HEAD")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = .git/refs\n").unwrap();
        let got = protected_writing_git(&ws);
        let find = |name: &str| got.iter().find(|p| p.path == ws.join(name)).cloned();
        assert_eq!(find(".git/lfs"), None);
        assert_eq!(find(".git/FETCH_HEAD"), None);
        assert_eq!(find(".git/refs"), Some(read_only(".git/refs", None)));
        assert_eq!(find(".git/objects"), Some(writable(".git/objects", None)));
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn allow_git_writes_refuses_shared_objects_and_keeps_a_reftable_read_only() {
        let ws = tempdir("gitwrites-shared");
        for dir in ["objects/ab", "refs/heads"] {
            std::fs::create_dir_all(ws.join(".git").join(dir)).unwrap();
        }
        std::fs::write(ws.join(".git/config"), "").unwrap();
        std::fs::write(ws.join("elsewhere"), "x").unwrap();
        std::fs::hard_link(ws.join("elsewhere"), ws.join(".git/objects/ab/cdef")).unwrap();
        let input = ProtectInput {
            write_roots: std::slice::from_ref(&ws),
            writable: std::slice::from_ref(&ws),
            home_entries: &[],
            home: None,
            homes: &[],
            extra: &[],
            allow_git_writes: true,
        };
        match protected_paths(&input) {
            Err(WrapperError::GitDataHardLink { path, links, .. }) => {
                assert_eq!(path, ws.join(".git/objects/ab/cdef"));
                assert_eq!(links, 2);
            }
            other => panic!("{other:?}"),
        }
        // One name only: accepted.
        std::fs::remove_file(ws.join("elsewhere")).unwrap();
        assert!(protected_paths(&input).is_ok());
        // A reftable: refs/, reftable/ and logs/ stay read-only with the top.
        std::fs::write(
            ws.join(".git/config"),
            "[extensions]\n\trefStorage = reftable\n",
        )
        .unwrap();
        let got = protected_writing_git(&ws);
        let writable: Vec<_> = got.iter().filter(|p| p.writable).map(|p| &p.path).collect();
        assert_eq!(
            writable,
            [&ws.join(".git/objects"), &ws.join(".git/FETCH_HEAD")]
        );
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn a_bare_repository_root_keeps_its_code_parts_pinned() {
        let ws = tempdir("gitwrites-bare");
        for dir in ["hooks", "objects", "refs"] {
            std::fs::create_dir_all(ws.join(dir)).unwrap();
        }
        std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join("config"), "[core]\n\tbare = true\n").unwrap();
        let got = protected_writing_git(&ws);
        let paths: Vec<_> = got.iter().map(|p| p.path.clone()).collect();
        assert!(paths.contains(&ws.join("hooks")), "{paths:?}");
        assert!(paths.contains(&ws.join("config")), "{paths:?}");
        assert!(!paths.contains(&ws), "{paths:?}");
        // Only FETCH_HEAD is bound writable (over itself: no link can take its place).
        let writable: Vec<_> = got.iter().filter(|p| p.writable).collect();
        assert_eq!(
            writable,
            [&Protected {
                path: ws.join("FETCH_HEAD"),
                placeholder: Some(EMPTY_CONFIG),
                writable: true,
            }]
        );
        // What git rewrites through a link at the top is pinned: HEAD as it is, a
        // missing packed-refs or shallow as an empty placeholder.
        assert!(got.contains(&Protected {
            path: ws.join("HEAD"),
            placeholder: None,
            writable: false,
        }));
        for part in ["packed-refs", "shallow"] {
            assert!(got.contains(&Protected {
                path: ws.join(part),
                placeholder: Some(EMPTY_CONFIG),
                writable: false,
            }));
        }
        // A missing commondir gets a (file) placeholder: CMD must not create one.
        assert!(got.contains(&Protected {
            path: ws.join("commondir"),
            placeholder: Some(placeholders::COMMONDIR),
            writable: false,
        }));
        std::fs::remove_dir_all(&ws).unwrap();
    }
}
