//! One repository the walk met and netbox did not pin: what of it git runs or reads as
//! code, and whether the run created or changed any of it. That is its git directory's
//! own parts (gitcode::GIT_DIR_PARTS: config, config.worktree, commondir, hooks and each
//! hook, info/attributes, objects/info/alternates), the common directory its `commondir`
//! leads to (the same parts), and every path its configuration, its own and the shared
//! one (system, global, environment), names for git to run or read: included files,
//! a hooks path, programs, relative to where git runs for it (`core.worktree`, the work
//! tree's top, a linked worktree's own, or a bare repository's directory). The same
//! table decides what is pinned for the repositories netbox does pin (protect/gitcode.rs).
//!
//! Only what lies in a writable root and was not pinned is looked at: nothing else could
//! have been changed from inside. Something counts as the run's when it was born during
//! the run, or its change time is after the start (a rewrite, a rename into place, a new
//! link: CMD cannot set a change time back); a symlink on the way to it counts the same.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::plan::protect::gitcode::GIT_DIR_PARTS;
use crate::plan::protect::gitconfig::{CodePath, ConfigSet};
use crate::plan::protect::{Identity, Watched, WatchedAs};
use crate::sys::mountid::times_of;

use super::{How, Stamp};

/// Entries looked at in one directory a setting names (a hooks path, a template dir).
const MAX_DIR_ENTRIES: usize = 256;

/// Entries looked at in one watched directory of programs.
const MAX_WATCHED_ENTRIES: usize = 4096;

/// A watched environment is read this far, at most.
const MAX_TREE_ENTRIES: usize = 200_000;
const TREE_TIME: std::time::Duration = std::time::Duration::from_secs(3);

/// What the walk knows that a repository's check needs.
pub(super) struct Context<'a> {
    pub since: Stamp,
    pub roots: &'a [PathBuf],
    pub skip: &'a std::collections::HashSet<&'a Path>,
    pub shared: &'a [ConfigSet],
    pub home: Option<&'a Path>,
}

/// How the walk met the repository, which says where git runs for it.
pub(super) enum Shape<'a> {
    /// Through the `.git` entry (a directory, or a file or link leading to the git dir)
    /// of this work tree.
    Worktree(&'a Path),
    /// A linked worktree's git directory (`HEAD` and `commondir`): its `gitdir` file
    /// names the work tree's `.git`.
    Linked,
    /// A bare repository (or a submodule's git dir, whose `core.worktree` says where it
    /// runs).
    Bare,
}

/// What the run did to a repository.
#[derive(Debug, Default)]
pub(super) struct News {
    /// Its git directory (or the common directory it leads to) was made or had a part
    /// that runs code changed.
    pub git_dir: Option<How>,
    /// Paths its configuration names for git to run or read, made or changed, each with
    /// the setting that names it.
    pub code: Vec<(PathBuf, How, String)>,
    /// Configuration files that could not be read: what they name was not looked at.
    pub unread: Vec<PathBuf>,
}

impl Context<'_> {
    pub(super) fn inside(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
            && !path.ancestors().any(|a| self.skip.contains(a))
    }

    fn during_run(&self, stamp: Option<(i64, u32)>) -> bool {
        stamp.is_some_and(|(secs, nanos)| Stamp { secs, nanos } >= self.since)
    }

    /// Whether the run made (`Created`) or changed `path`; for a link, also what it
    /// leads to inside a root (git follows it).
    fn news_of(&self, path: &Path) -> Option<How> {
        let times = times_of(path).ok()?;
        if self.during_run(times.birth) {
            Some(How::Created)
        } else if self.during_run(Some(times.change)) {
            Some(How::Changed)
        } else if times.is_symlink {
            let target = std::fs::canonicalize(path).ok()?;
            self.inside(&target)
                .then(|| self.news_of(&target))
                .flatten()
        } else {
            None
        }
    }

    /// What the run did to a path netbox could only watch, if anything: how, and what
    /// to say of it (the reason it was watched, with a count for a directory).
    pub fn watched_news(&self, watched: &Watched) -> Option<(How, String)> {
        let path = &watched.path;
        let why = watched.why.clone();
        let now = Identity::of(path);
        // Filled, or replaced, since the start: news whatever its times say (an old
        // directory renamed into place keeps the times of all it holds).
        match (&watched.was, &now) {
            (None, Some(_)) => return Some((How::Created, why)),
            (Some(was), Some(now)) if was != now => return Some((How::Changed, why)),
            (_, None) => return None,
            _ => {}
        }
        match watched.what {
            WatchedAs::Path => {
                let mut at = PathBuf::new();
                for component in path.components() {
                    at.push(component);
                    let in_root = self.roots.iter().any(|r| at.starts_with(r)) && at != *path;
                    if in_root && times_of(&at).is_ok_and(|t| t.is_symlink) {
                        if let Some(how) = self.news_of(&at) {
                            return Some((how, why));
                        }
                    }
                }
                self.news_of(path).map(|how| (how, why))
            }
            WatchedAs::Programs => {
                let mut entries = std::fs::read_dir(path).into_iter().flatten().flatten();
                let changed = entries
                    .by_ref()
                    .take(MAX_WATCHED_ENTRIES)
                    .filter(|e| self.news_of(&e.path()).is_some())
                    .count();
                // Past the bound a change goes unseen: said, whatever was seen before it.
                let complete = entries.next().is_none();
                let read = format!("its first {MAX_WATCHED_ENTRIES} entries");
                counted_news(changed, complete, &read, |found| {
                    format!("{why}: {} in it made or changed", counted(found, "program"))
                })
            }
            WatchedAs::Tree => {
                let (changed, complete) = self.changed_in_tree(path);
                let read = format!(
                    "{MAX_TREE_ENTRIES} entries or {} s of it",
                    TREE_TIME.as_secs()
                );
                counted_news(changed, complete, &read, |found| {
                    format!(
                        "the environment {why} runs from: {} in it made or changed",
                        counted(found, "file")
                    )
                })
            }
        }
    }

    /// How many entries under `dir` the run made or changed, and whether all of it was
    /// read (bounded in entries and time: an environment can be large).
    fn changed_in_tree(&self, dir: &Path) -> (usize, bool) {
        let deadline = std::time::Instant::now() + TREE_TIME;
        let mut changed = 0;
        let mut seen = 0;
        let mut pending = vec![dir.to_owned()];
        while let Some(at) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&at) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > MAX_TREE_ENTRIES || std::time::Instant::now() > deadline {
                    return (changed, false);
                }
                let path = entry.path();
                let Ok(times) = times_of(&path) else {
                    continue;
                };
                if self.during_run(times.birth) || self.during_run(Some(times.change)) {
                    changed += 1;
                }
                if times.is_directory {
                    pending.push(path);
                }
            }
        }
        (changed, true)
    }

    /// The repository whose git directory is `git_dir`, met as `shape`.
    pub fn news(&self, git_dir: &Path, shape: Shape<'_>) -> News {
        let mut news = News::default();
        if self.inside(git_dir) {
            news.git_dir = self.git_dir_parts(git_dir, true);
        }
        let common = crate::plan::protect::common_dir_of(git_dir);
        if common != git_dir && self.inside(&common) {
            // The common dir `commondir` leads to holds the config and hooks: what changed
            // there changed this repository.
            news.git_dir = news
                .git_dir
                .or(self.git_dir_parts(&common, false).map(|_| How::Changed));
        }
        let own = [
            ConfigSet::read(&common.join("config"), self.home),
            ConfigSet::read(&git_dir.join("config.worktree"), self.home),
        ];
        let run_dir = own
            .iter()
            .rev()
            .find_map(ConfigSet::worktree)
            .map(|w| git_dir.join(crate::paths::exact_text::path_of(w)))
            .or_else(|| match shape {
                Shape::Worktree(top) => Some(top.to_owned()),
                Shape::Linked => linked_worktree(git_dir),
                Shape::Bare => None,
            })
            .unwrap_or_else(|| git_dir.to_owned());
        let run_dir = std::fs::canonicalize(&run_dir).unwrap_or(run_dir);
        let mut codes: Vec<CodePath> = Vec::new();
        for set in self.shared.iter().chain(&own) {
            match set.code_paths(Some(&run_dir), self.home) {
                Ok(found) => codes.extend(found),
                // What it names is unknown: said as unread.
                Err(unreadable) => news.unread.push(unreadable.path),
            }
        }
        for code in codes {
            for (path, how) in self.code_news(&code) {
                if !news.code.iter().any(|(p, _, _)| p == &path) {
                    news.code.push((path, how, code.setting.clone()));
                }
            }
        }
        news
    }

    /// Whether the git directory `dir` was made during the run (`new_counts`) or had a
    /// part that runs code made or changed.
    fn git_dir_parts(&self, dir: &Path, new_counts: bool) -> Option<How> {
        let times = times_of(dir).ok()?;
        if new_counts && self.during_run(times.birth) {
            return Some(How::Created);
        }
        // The directory itself changed during the run (an entry came or went, or it was
        // renamed into place: an old repository moved in as `.git` keeps the times of
        // everything in it) and it holds code git runs: said, since which of those it was
        // cannot be told (git itself changes it with every lock file).
        // Not for one whose code-bearing parts were pinned: nothing that runs could
        // change there (netbox's own placeholders change the directory).
        let pinned = self.skip.contains(dir.join("config").as_path());
        if !pinned && self.during_run(Some(times.change)) && runs_code(dir) {
            return Some(How::Changed);
        }
        let part_changed = GIT_DIR_PARTS.iter().any(|part| {
            let path = dir.join(part);
            !self.skip.contains(path.as_path()) && self.news_of(&path).is_some()
        });
        let hooks = dir.join("hooks");
        let hook_changed = self.inside(&hooks) && !self.entry_news(&hooks).is_empty();
        (part_changed || hook_changed).then_some(How::Changed)
    }

    /// What the run did to a path a setting names (and to every symlink on the way to
    /// it inside a root), and for a directory, to its entries.
    fn code_news(&self, code: &CodePath) -> Vec<(PathBuf, How)> {
        let path = &code.path;
        if !self.inside(path) {
            return Vec::new();
        }
        let mut found = Vec::new();
        // A link on the way, made or re-pointed during the run, sends git elsewhere.
        let mut at = PathBuf::new();
        for component in path.components() {
            at.push(component);
            if !self.inside(&at) || at == *path {
                continue;
            }
            match times_of(&at) {
                Ok(t) if t.is_symlink => {
                    if let Some(how) = self.news_of(&at) {
                        found.push((at.clone(), how));
                    }
                }
                Ok(t) if self.during_run(t.birth) => found.push((at.clone(), How::Created)),
                Ok(_) => {}
                // Missing: nothing beyond it for git to run.
                Err(_) => return found,
            }
        }
        if let Some(how) = self.news_of(path) {
            found.push((path.clone(), how));
        }
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            found.extend(self.entry_news(path));
        }
        found
    }

    /// The entries of the directory `dir` (and one level below: a template dir's
    /// `hooks/`) the run made or changed.
    fn entry_news(&self, dir: &Path) -> Vec<(PathBuf, How)> {
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return found;
        };
        for entry in entries.flatten().take(MAX_DIR_ENTRIES) {
            let path = entry.path();
            if self.skip.contains(path.as_path()) {
                continue;
            }
            if let Some(how) = self.news_of(&path) {
                found.push((path.clone(), how));
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let Ok(inner) = std::fs::read_dir(&path) else {
                    continue;
                };
                for inner in inner.flatten().take(MAX_DIR_ENTRIES) {
                    if let Some(how) = self.news_of(&inner.path()) {
                        found.push((inner.path(), how));
                    }
                }
            }
        }
        found
    }
}

/// Whether the git directory `dir` holds something git runs: a hook (not a `.sample`),
/// a `commondir` leading elsewhere, or a setting of the table in its config.
fn runs_code(dir: &Path) -> bool {
    let hook = std::fs::read_dir(dir.join("hooks")).is_ok_and(|entries| {
        entries
            .flatten()
            .take(MAX_DIR_ENTRIES)
            .any(|e| !e.file_name().to_string_lossy().ends_with(".sample"))
    });
    let setting =
        crate::plan::protect::gitconfig::read(&dir.join("config")).is_some_and(|entries| {
            entries.iter().any(|e| {
                crate::plan::protect::gitcode::use_of(&e.section, e.subsection.as_deref(), &e.key)
                    .is_some()
            })
        });
    let commondir = dir.join("commondir");
    let redirect = commondir.exists() && !crate::plan::protect::is_placeholder(&commondir);
    // An operation under way runs what its state names (`exec` lines, a strategy).
    let under_way = ["rebase-merge", "rebase-apply", "sequencer"]
        .iter()
        .any(|d| dir.join(d).exists());
    hook || setting || redirect || under_way
}

/// The work tree of a linked worktree's git directory: its `gitdir` file names the
/// work tree's `.git`.
fn linked_worktree(git_dir: &Path) -> Option<PathBuf> {
    let text = crate::plan::protect::read_git_pointer(&git_dir.join("gitdir")).ok()?;
    let dot_git = git_dir.join(crate::plan::protect::pointed_path(&text));
    (dot_git.file_name() == Some(OsStr::new(".git")))
        .then(|| dot_git.parent().map(Path::to_owned))
        .flatten()
}

/// The git directory a `.git` file (`gitdir: PATH`) or symlink at `dot_git` leads to.
pub(super) fn git_dir_behind(dot_git: &Path) -> Option<PathBuf> {
    let base = dot_git.parent()?;
    let target = match std::fs::read_link(dot_git) {
        Ok(target) => target,
        Err(_) => {
            let text = crate::plan::protect::read_git_pointer(dot_git).ok()?;
            crate::plan::protect::gitfile_target(&text)?
        }
    };
    let at = base.join(target);
    std::fs::canonicalize(&at).ok()
}

/// `n` of `what`, plural but for one.
fn counted(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// What a watch of a directory found: `changed` entries made or changed (said by `say`),
/// and whether it read all of it (`read` says how much it did where not: a change past
/// that is unseen, so that is said even where nothing was seen).
fn counted_news(
    changed: usize,
    complete: bool,
    read: &str,
    say: impl Fn(usize) -> String,
) -> Option<(How, String)> {
    let more = if complete {
        String::new()
    } else {
        format!(" (or more: netbox read only {read}, and a change past that is unseen)")
    };
    let how = if changed > 0 {
        How::Changed
    } else {
        How::Unread
    };
    (changed > 0 || !complete).then(|| (how, format!("{}{more}", say(changed))))
}
