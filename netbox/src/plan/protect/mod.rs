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
//!
//! Here the walk over the roots (`Found`) and what it records; the repositories it meets
//! and their submodules are `repositories`, the code git runs in them `code`, and the paths
//! checked before anything is pinned `paths`.

mod code;
mod envcode;
pub mod gitcode;
pub mod gitconfig;
mod gitindex;
mod home;
mod paths;
mod placeholders;
pub mod recheck;
mod repositories;
pub mod sources;

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::WrapperError;
use crate::paths::exact_text::text_of;
use gitconfig::{CodePath, ConfigSet};
use paths::shared_git_configs;
pub use paths::{gitfile_target, pointed_path, read_git_pointer, refuse_symlinks_in_roots};
use placeholders::EMPTY_CONFIG;
pub use repositories::common_dir_of;
use repositories::is_git_directory;
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
    #[serde(with = "bridge::log::path_json::exact")]
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
    #[serde(with = "bridge::log::path_json::exact::option")]
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
    #[serde(with = "bridge::log::path_json::exact::list")]
    pub dirs: Vec<PathBuf>,
    /// Git directories whose top is writable (a bare repository that is a writable
    /// root): their top, and their data directories whole.
    #[serde(with = "bridge::log::path_json::exact::list")]
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
    /// The writable roots a home was split into (homesplit/): a repository at the top
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
    /// Other names of the writable roots that lie outside every one (a bind mount shows a
    /// root, or a part of it, elsewhere too), each with what it shows by the root's own
    /// name: `(other, own)`. What is found by path there (the repository a root lies in, a
    /// hooks directory a config names by that path) is pinned at the own name.
    pub other_names: &'a [(PathBuf, PathBuf)],
}

/// Lists every protected path inside the writable roots, reading the filesystem (to find
/// which exist, what `.git` files point at, what git's configuration names, and which
/// submodules each index records) but changing nothing.
pub fn protected_paths(input: &ProtectInput<'_>) -> Result<Protection, WrapperError> {
    choose(input, Needs::Untold)
}

/// Refuses a writable root that is, or lies in, a path the sandbox keeps read-only (a
/// pin, `--protect`, `--ro`) or hides (`--hide`, or a path netbox hides): the read-only
/// mount would cover the root's, and the live probe would refuse the run without saying
/// why. A pin inside a root is what pins are for; a root inside a pin is a request that
/// cannot be met, unless a part of the pin left writable holds it (`.git/objects` under
/// `--allow-git-writes`): as the mounts do, the deepest path that holds the root decides.
pub fn refuse_roots_kept_read_only(
    roots: &[PathBuf],
    pinned: &[Protected],
    protect: &[PathBuf],
    read_only: &[PathBuf],
    hidden: &[PathBuf],
) -> Result<(), WrapperError> {
    use crate::error::KeptAs;
    let is_git = |p: &Path| p.components().any(|c| c.as_os_str() == ".git");
    let under_ro = |p: &Path| read_only.iter().any(|ro| p.starts_with(ro));
    // Each path that holds something in, with what it makes of it (`None`: writable). A
    // part of a pin left writable is not opened under a `--ro` (mounts/mod.rs).
    let holders = pinned
        .iter()
        .map(|p| {
            let kept_as = match () {
                () if p.writable && !under_ro(&p.path) => None,
                () if p.writable => Some(KeptAs::ReadOnly),
                () if protect.contains(&p.path) => Some(KeptAs::ProtectFlag),
                () if is_git(&p.path) => Some(KeptAs::GitData),
                () => Some(KeptAs::Protected),
            };
            (&p.path, kept_as)
        })
        .chain(read_only.iter().map(|p| (p, Some(KeptAs::ReadOnly))));
    let mut deepest: Vec<Option<(&PathBuf, Option<KeptAs>)>> = vec![None; roots.len()];
    for (holder, kept_as) in holders {
        for (root, found) in roots.iter().zip(deepest.iter_mut()) {
            let deeper = found
                .is_none_or(|(other, _)| holder.components().count() > other.components().count());
            if root.starts_with(holder) && deeper {
                *found = Some((holder, kept_as));
            }
        }
    }
    // Hides are laid last, over everything: one that holds a root decides, at any depth.
    let refused = roots.iter().zip(deepest).find_map(|(root, found)| {
        if let Some(hide) = hidden.iter().find(|h| root.starts_with(h)) {
            return Some((root, hide, KeptAs::Hidden));
        }
        let (kept, kept_as) = found?;
        Some((root, kept, kept_as?))
    });
    match refused {
        Some((root, kept, kept_as)) => Err(WrapperError::RootKeptReadOnly {
            root: root.clone(),
            seen_as: None,
            kept: kept.clone(),
            kept_as,
        }),
        None => Ok(()),
    }
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
    // Written by their other names too: what a path there needs is found there.
    let writable: Vec<PathBuf> = input
        .writable
        .iter()
        .cloned()
        .chain(input.other_names.iter().map(|(other, _)| other.clone()))
        .collect();
    let mut found = Found {
        out: Vec::new(),
        watched: Vec::new(),
        listed: HashSet::new(),
        writable: &writable,
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
        special: Vec::new(),
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
    // The repository a root lies in by another name (only that: what lies at the top of
    // the root was found by its own name).
    for (other, _) in input.other_names {
        if other.is_dir() {
            found.enclosing_repository(other)?;
        }
    }
    // Directories on PATH in a writable root (an activated `.venv/bin`, a relative
    // `./node_modules/.bin`, an empty entry meaning the current directory): a program CMD
    // puts there runs when anything runs it by name (git's pager, your shell). Pinning
    // them would stop `pip install` and `npm install`; they are watched (a program git's
    // configuration runs from one by name is watched with its environment: gitconfig.rs).
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    // One look at the filesystem for what follows: each existing prefix canonicalized once.
    let mut resolver = crate::plan::homesplit::PrefixResolver::default();
    for named in std::env::split_paths(&path).flat_map(|entry| paths::path_entry(&entry, &cwd)) {
        let dir = resolver.resolve(&named);
        if found.writable.iter().any(|r| dir.starts_with(r)) {
            found.watch_as(&dir, "a directory on PATH", WatchedAs::Programs);
            // An activated venv's `bin`: its python loads the rest of the venv.
            found.watch_environment(&dir, "a directory on PATH");
        }
        // Through a link inside a root, wherever it leads: CMD can put a directory of
        // its own in the link's place.
        if refuse_symlinks_in_roots(&named, found.writable, "PATH directory").is_err() {
            found.watch_as(&named, "a directory on PATH", WatchedAs::Programs);
        }
    }
    // The places under home that run code later, wherever a writable root holds one
    // (`--write ~/.config`; a writable home itself is split so that none is: homesplit/).
    for home in input.homes {
        for (name, leaf) in home::CODE_PATHS {
            for path in home::places(home, name) {
                // Where it really is: `~/.config` may be a link into `~/dotfiles`.
                let path = resolver.resolve(&path);
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
    // What the environment names for code under the homes, wherever it really lies.
    found.environment_named_code(input.homes, &mut resolver);
    for path in input.extra {
        let missing = std::fs::symlink_metadata(path).is_err();
        let placeholder = (missing || is_placeholder(path)).then_some(Placeholder::Dir);
        found.push(path.clone(), placeholder);
    }
    if !found.special.is_empty() {
        let named: Vec<String> = found
            .special
            .iter()
            .map(|p| crate::printable::printable(&p.to_string_lossy()))
            .collect();
        return Err(WrapperError::Usage(format!(
            "{} {} a FIFO, socket or device where netbox keeps a path read-only for git, and \
             a read-only mount does not stop writes to one: remove {}",
            named.join(", "),
            if named.len() == 1 { "is" } else { "are each" },
            if named.len() == 1 { "it" } else { "them" },
        )));
    }
    // What was found at a root's other name is laid at its own name: never a placeholder
    // or a pin outside the roots, where the sandbox is read-only anyway (and the other
    // name may be read-only on the host too).
    if !input.other_names.is_empty() {
        found.out = by_own_names(std::mem::take(&mut found.out), input);
        let in_a_root = |p: &Path| input.writable.iter().any(|r| p.starts_with(r));
        let paths = found
            .git_data
            .dirs
            .iter_mut()
            .chain(found.basis.needs.iter_mut().map(|(path, _)| path));
        for path in paths {
            if in_a_root(path) {
                continue;
            }
            if let Some(own) = own_name(path, input.other_names) {
                *path = own;
            }
        }
    }
    // A directory pinned read-only cannot change: watching it too would only say, of a
    // large one, that it was not read whole.
    let pinned = &found.out;
    found.watched.retain(|w| {
        w.what != WatchedAs::Programs || !pinned.iter().any(|p| p.path == w.path && !p.writable)
    });
    let mut basis = found.basis;
    basis.repositories = found.repositories;
    Ok(Protection {
        pinned: found.out,
        watched: found.watched,
        git_data: found.git_data,
        basis,
    })
}

/// `path`'s name under a root's own name, where it lies in one of the roots' `other_names`:
/// through the deepest that holds it (one bind of the workspace inside another shows the
/// path at its own place, which the outer one's mapping would miss).
fn own_name(path: &Path, other_names: &[(PathBuf, PathBuf)]) -> Option<PathBuf> {
    let (other, own) = other_names
        .iter()
        .filter(|(other, _)| path.starts_with(other))
        .max_by_key(|(other, _)| other.components().count())?;
    let rest = path.strip_prefix(other).ok()?;
    Some(crate::paths::join_below(own, rest))
}

/// `pins` with each found at a root's other name laid at its own name instead (the same
/// path pinned by both names once, read-only winning).
fn by_own_names(pins: Vec<Protected>, input: &ProtectInput<'_>) -> Vec<Protected> {
    let in_a_root = |p: &Path| input.writable.iter().any(|r| p.starts_with(r));
    let mut out: Vec<Protected> = Vec::with_capacity(pins.len());
    let mut at: HashMap<PathBuf, usize> = HashMap::with_capacity(pins.len());
    for mut pin in pins {
        if !in_a_root(&pin.path) {
            if let Some(own) = own_name(&pin.path, input.other_names) {
                pin.path = own;
            }
        }
        match at.get(&pin.path) {
            Some(&i) => {
                let known = &mut out[i];
                known.writable &= pin.writable;
                if known.placeholder.is_none() {
                    known.placeholder = pin.placeholder;
                }
            }
            None => {
                at.insert(pin.path.clone(), out.len());
                out.push(pin);
            }
        }
    }
    out
}

/// The configuration every repository reads besides its own: the system and global files
/// (git-config(1) FILES), and what git takes from the environment.
pub fn shared_configs(home: Option<&Path>) -> Vec<ConfigSet> {
    let mut sets: Vec<ConfigSet> = shared_git_configs(home)
        .iter()
        .map(|config| ConfigSet::read(config, home))
        .collect();
    // Byte for byte (paths/exact_text.rs): a variable that is not UTF-8 is no unset one.
    sets.push(ConfigSet::from_environment(&|name| {
        std::env::var_os(name).map(|v| text_of(&v))
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
    /// The paths to pin for git that are FIFOs, sockets or devices: no mount holds one.
    special: Vec<PathBuf>,
}

/// Whether `path` is a FIFO, a socket or a device file.
fn is_special_file(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        let kind = m.file_type();
        kind.is_fifo() || kind.is_socket() || kind.is_char_device() || kind.is_block_device()
    })
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
        // A FIFO, socket or device is written on a read-only mount all the same (the
        // kernel checks only regular files and directories). Where git would pass over
        // it to something else (a `.git` FIFO: the repository above) or read it as code
        // (what a setting names), the run stops; elsewhere it holds nothing once CMD's
        // processes are gone, and a stop would let CMD fail the user's next run: watched.
        if is_special_file(&path) {
            let for_git =
                path.file_name() == Some(std::ffi::OsStr::new(".git")) || self.naming.is_some();
            if for_git {
                self.special.push(path);
            } else {
                self.watch(
                    &path,
                    "a FIFO, socket or device where a path is kept read-only",
                );
            }
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
        // The root itself too (`--write $VIRTUAL_ENV`): a watch keeps nothing from CMD.
        for ancestor in path.ancestors().skip(1) {
            if !ancestor.starts_with(&root) {
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
            // homesplit/), there is nothing to pin, a symlink included.
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

#[cfg(test)]
mod tests {
    use super::paths::read_git_pointer;
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
            other_names: &[],
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
            other_names: &[],
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
        assert!(read_git_pointer(&ws.join("wt/.git")).is_err());
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
            other_names: &[],
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
            other_names: &[],
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
