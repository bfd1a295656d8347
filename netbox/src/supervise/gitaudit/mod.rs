//! After a run: the git metadata the command left in the writable roots, which git run
//! later on the host would trust. The pins (protect/) keep every existing `.git` and
//! submodule read-only, but CMD can still make new ones: a `vendor/lib/.git` that the
//! user's next `git add -A` turns into a submodule (whose config `git status` then reads),
//! or a repository git finds when run in that directory. Nothing in a mount can stop
//! that, so netbox looks once CMD is gone and says what it found.
//!
//! What is found, walking each root without following symlinks: every `.git` entry
//! (a directory, a `gitdir:` file, a symlink) and every directory git would take for a
//! bare repository (`HEAD`, `objects` and `refs` in it: git's is_git_directory()). One is
//! reported when it was *created* during the run (its birth time, statx(2) STATX_BTIME, is
//! after the start: CMD cannot set a birth time) or *changed* (a `.git` file or symlink
//! whose change time is after the start; a git directory whose code-bearing parts, its
//! config, config.worktree, commondir, hooks/ or a hook, changed: rewriting a file or
//! renaming one into place sets its change time, which CMD cannot set back). A git
//! directory's own change time is not used: git changes it on every lock file, so any
//! git command run in a nested repository would be reported.
//!
//! Timestamps are compared with the coarse clock the kernel stamps files with
//! (CLOCK_REALTIME_COARSE), read at the start of the run. The walk is bounded in time
//! and directories, cancellable (Ctrl-C), and skips what the run pinned (it could not
//! change). A run that ends without its audit (netbox killed) leaves a record behind
//! (pending.rs), and the next run audits it.

pub mod foreign;
pub mod pending;
mod report;
mod repository;

pub use report::report;

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::dir::{Dir, Type};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

use crate::sys::mountid::times_at;

/// The longest an audit walks.
const TIME_LIMIT: Duration = Duration::from_secs(10);

/// The most directories an audit reads.
const MAX_DIRECTORIES: u64 = 1_000_000;

/// Directories deeper than this below a root are not read (each level holds an fd).
const MAX_DEPTH: usize = 256;

/// Unreadable directories named in the report (the rest are counted).
const MAX_UNREAD_PATHS: usize = 20;

/// A moment on the clock the kernel stamps files with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Stamp {
    pub secs: i64,
    pub nanos: u32,
}

/// When the run started: on the precise clock, and what the coarse clock read then.
static STARTED: std::sync::OnceLock<(Stamp, Stamp)> = std::sync::OnceLock::new();

/// Whether the command started while the coarse clock still read a time before the
/// run's precise start (netbox started within one tick): see [`since_for_audit`].
static STARTED_WITHIN_A_TICK: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Notes the run's start, as early as netbox can (main's first line).
pub fn note_start() {
    let _ = STARTED.set((
        Stamp::now(),
        Stamp::read(nix::time::ClockId::CLOCK_REALTIME_COARSE),
    ));
}

/// Called as the command is let start: notes whether the coarse clock has reached the
/// run's precise start yet.
pub fn command_starts() {
    if let Some((precise, _)) = STARTED.get() {
        if Stamp::read(nix::time::ClockId::CLOCK_REALTIME_COARSE) < *precise {
            STARTED_WITHIN_A_TICK.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// What the audit takes for the start. The kernel stamps a file from the coarse clock (the
/// last tick) or, with Linux 6.13's multigrain timestamps, from the precise one when its
/// times were just looked at; either way never later than the moment it was made. So a
/// file made before the precise start is stamped before it, and one made once the coarse
/// clock has passed it is stamped after it: the precise start, unless the command
/// started within that first tick. Then the coarse reading, so that nothing the command
/// made is missed (a file the user changed in the same few milliseconds before netbox
/// started could then be reported). Waiting out the tick instead cost ~2 ms a run.
fn since_for_audit(since: Stamp) -> Stamp {
    match STARTED.get() {
        Some((precise, coarse))
            if since == *precise
                && STARTED_WITHIN_A_TICK.load(std::sync::atomic::Ordering::Relaxed) =>
        {
            *coarse
        }
        _ => since,
    }
}

impl Stamp {
    /// Now, on the precise clock (see [`since_for_audit`] for why).
    pub fn now() -> Stamp {
        Stamp::read(nix::time::ClockId::CLOCK_REALTIME)
    }

    fn read(clock: nix::time::ClockId) -> Stamp {
        match nix::time::clock_gettime(clock) {
            Ok(t) => Stamp {
                secs: t.tv_sec(),
                nanos: u32::try_from(t.tv_nsec()).unwrap_or(0),
            },
            // Never fails on Linux; if it did, every file counts as new.
            Err(_) => Stamp { secs: 0, nanos: 0 },
        }
    }

    /// The run's start ([`note_start`]; now, if it was not noted), rounded down to the
    /// second where a root's filesystem keeps no
    /// birth times (ext4 with small inodes, FAT, many network and FUSE filesystems):
    /// those stamp files to the second, and a file made in the run's first second would
    /// look older than its start.
    pub fn now_for(roots: &[PathBuf]) -> Stamp {
        let now = STARTED
            .get()
            .map_or_else(Stamp::now, |(precise, _)| *precise);
        let coarse = roots
            .iter()
            .any(|r| crate::sys::mountid::times_of(r).is_ok_and(|t| t.birth.is_none()));
        if coarse {
            Stamp {
                secs: now.secs,
                nanos: 0,
            }
        } else {
            now
        }
    }

    fn of((secs, nanos): (i64, u32)) -> Stamp {
        Stamp { secs, nanos }
    }
}

/// What to audit: where, what to leave out, and since when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scope {
    #[serde(with = "bridge::log::path_json::exact::list")]
    pub roots: Vec<PathBuf>,
    /// Paths pinned read-only for the run: not entered, not reported.
    #[serde(with = "bridge::log::path_json::exact::list")]
    pub skip: Vec<PathBuf>,
    /// Paths that could not be pinned: reported if the run made or changed them.
    #[serde(default)]
    pub watch: Vec<crate::plan::protect::Watched>,
    /// Where CMD could write git's data: swept for entries git never makes (foreign.rs).
    #[serde(default)]
    pub git_data: crate::plan::protect::GitData,
    pub since: Stamp,
}

/// What a finding is, and how it came to be reported: the event log's own types.
pub use bridge::log::records::{GitMetadataHow as How, GitMetadataKind as Kind};

/// A finding's kind, for a person.
fn describe(kind: Kind) -> &'static str {
    match kind {
        Kind::GitDir => "a git directory",
        Kind::GitdirFile => "a gitdir file",
        Kind::GitSymlink => "a .git symlink",
        Kind::BareRepository => "a bare repository",
        Kind::LinkedGitDir => "a linked worktree's git directory",
        Kind::CodePath => "a path git runs or reads as code",
        Kind::ForeignEntry => "an entry git never makes",
    }
}

/// One piece of git metadata the run left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub path: PathBuf,
    pub kind: Kind,
    pub how: How,
    /// For a code path: the git directory whose configuration names it, and the setting.
    pub named_by: Option<(PathBuf, String)>,
}

/// Why an audit stopped before it had read everything (the event log's type).
pub use bridge::log::records::AuditStopped as Stopped;

/// What an audit found, and how much it read.
#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub directories: u64,
    /// Directories that could not be read, or lay too deep.
    pub unread: u64,
    /// The first few of them.
    pub unread_paths: Vec<PathBuf>,
    pub stopped: Option<Stopped>,
    /// Entries git never makes, found where CMD could write git's data.
    pub foreign: foreign::Swept,
    pub took: Duration,
}

impl Report {
    pub fn complete(&self) -> bool {
        self.stopped.is_none()
            && self.unread == 0
            && !self.foreign.stopped
            && self.foreign.unread.is_empty()
    }
}

/// Walks every root of `scope`; stops early once `cancelled` says so (asked between
/// directories).
pub fn audit(scope: &Scope, cancelled: &dyn Fn() -> bool) -> Report {
    let started = Instant::now();
    let since = since_for_audit(scope.since);
    let skip: std::collections::HashSet<&Path> = scope.skip.iter().map(PathBuf::as_path).collect();
    // What every repository reads besides its own config: read now, as git would next.
    let home = crate::plan::config::home_dir();
    let shared = crate::plan::protect::shared_configs(home.as_deref());
    let mut walk = Walk {
        since,
        repositories: repository::Context {
            since,
            roots: &scope.roots,
            skip: &skip,
            shared: &shared,
            home: home.as_deref(),
        },
        skip: &skip,
        deadline: started + TIME_LIMIT,
        cancelled,
        report: Report::default(),
        reported: std::collections::HashSet::new(),
        git_dirs: Vec::new(),
    };
    for root in &scope.roots {
        if let Some(stop) = walk.should_stop() {
            walk.report.stopped = Some(stop);
            break;
        }
        walk.root(root);
        if walk.report.stopped.is_some() {
            break;
        }
    }
    for watched in &scope.watch {
        if let Some((how, why)) = walk.repositories.watched_news(watched) {
            if walk.reported.insert(watched.path.clone()) {
                walk.report.findings.push(Finding {
                    path: watched.path.clone(),
                    kind: Kind::CodePath,
                    how,
                    named_by: Some((PathBuf::new(), why)),
                });
            }
        }
    }
    // Then what CMD could write of git's data: the parts left writable, the git
    // directories whose top is writable, and the repositories the walk met unpinned.
    let met = std::mem::take(&mut walk.git_dirs);
    let mut report = walk.report;
    if report.stopped != Some(Stopped::Cancelled) {
        let mut sweep = foreign::Sweep {
            since,
            skip: &skip,
            swept: foreign::Swept::default(),
        };
        for dir in &scope.git_data.dirs {
            sweep.tree(dir);
        }
        let mut git_dirs: Vec<&PathBuf> = scope.git_data.git_dirs.iter().chain(&met).collect();
        git_dirs.sort();
        git_dirs.dedup();
        for dir in git_dirs {
            sweep.git_dir(dir);
        }
        report.foreign = sweep.swept;
        if report.foreign.stopped && report.stopped.is_none() {
            report.stopped = Some(Stopped::EntryLimit);
        }
    }
    report.findings.sort_by(|a, b| a.path.cmp(&b.path));
    report.took = started.elapsed();
    report
}

/// A directory being walked: its fd, its path, and the subdirectories still to enter.
struct Frame {
    dir: Dir,
    path: PathBuf,
    pending: Vec<OsString>,
}

struct Walk<'a> {
    since: Stamp,
    repositories: repository::Context<'a>,
    skip: &'a std::collections::HashSet<&'a Path>,
    deadline: Instant,
    cancelled: &'a dyn Fn() -> bool,
    report: Report,
    /// Paths reported so far: each once, however many repositories lead to it.
    reported: std::collections::HashSet<PathBuf>,
    /// The git directories met that netbox did not pin, in a root: swept after the walk.
    git_dirs: Vec<PathBuf>,
}

impl Walk<'_> {
    fn root(&mut self, root: &Path) {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if self.skip.contains(root) {
            return;
        }
        let Ok(dir) = Dir::open(root, flags, Mode::empty()) else {
            self.unread(root.to_owned());
            return;
        };
        let mut stack = Vec::new();
        if let Some(frame) = self.visit(dir, root.to_owned()) {
            stack.push(frame);
        }
        loop {
            let depth = stack.len();
            let Some(top) = stack.last_mut() else {
                break;
            };
            let Some(name) = top.pending.pop() else {
                stack.pop();
                continue;
            };
            if let Some(stop) = self.should_stop() {
                self.report.stopped = Some(stop);
                return;
            }
            let path = top.path.join(&name);
            if depth >= MAX_DEPTH {
                self.unread(path);
                continue;
            }
            match Dir::openat(top.dir.as_fd(), name.as_os_str(), flags, Mode::empty()) {
                Ok(dir) => {
                    if let Some(frame) = self.visit(dir, path) {
                        stack.push(frame);
                    }
                }
                // One this user may not read counts if it is this user's (CMD, as this
                // user, can make its own directories unreadable to hide what is in
                // them) or it changed during the run; others' (a shared /tmp) do not.
                Err(nix::errno::Errno::EACCES | nix::errno::Errno::EPERM) => {
                    let Ok(name) = std::ffi::CString::new(name.as_bytes()) else {
                        continue;
                    };
                    let counts = times_at(top.dir.as_fd(), &name).is_ok_and(|t| {
                        t.uid == nix::unistd::geteuid().as_raw()
                            || Stamp::of(t.change) >= self.since
                    });
                    if counts {
                        self.unread(path);
                    }
                }
                // Gone since it was listed, or replaced by a symlink: nothing to read.
                Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ELOOP) => {}
                Err(_) => self.unread(path),
            }
        }
    }

    fn unread(&mut self, path: PathBuf) {
        self.report.unread += 1;
        if self.report.unread_paths.len() < MAX_UNREAD_PATHS {
            self.report.unread_paths.push(path);
        }
    }

    pub(super) fn should_stop(&self) -> Option<Stopped> {
        crate::testhooks::pause(crate::testhooks::hooks().audit_pause);
        if (self.cancelled)() {
            Some(Stopped::Cancelled)
        } else if self.report.directories >= MAX_DIRECTORIES {
            Some(Stopped::DirectoryLimit)
        } else if Instant::now() >= self.deadline {
            Some(Stopped::TimeLimit)
        } else {
            None
        }
    }

    /// Reads one directory: reports its `.git` entry and whether it has become a bare
    /// repository; returns it with the subdirectories to enter. Git's own directories are
    /// entered too: a repository can hide in one (`.git/modules/x`, or anywhere in it) as
    /// well as anywhere else.
    fn visit(&mut self, mut dir: Dir, path: PathBuf) -> Option<Frame> {
        self.report.directories += 1;
        let mut subdirs = Vec::new();
        let mut git_entry = None;
        let mut marks = Vec::new();
        let mut entries = Vec::new();
        for entry in dir.iter() {
            match entry {
                Ok(entry) => entries.push((entry.file_name().to_owned(), entry.file_type())),
                Err(_) => {
                    self.unread(path.clone());
                    break;
                }
            }
        }
        for (name, kind) in entries {
            match name.to_bytes() {
                b"." | b".." => continue,
                b".git" => git_entry = Some(kind),
                b"HEAD" | b"objects" | b"refs" | b"commondir" => marks.push(name.clone()),
                _ => {}
            }
            let is_dir = match kind {
                Some(kind) => kind == Type::Directory,
                // The filesystem does not say: ask.
                None => times_at(dir.as_fd(), &name).is_ok_and(|t| t.is_directory),
            };
            if is_dir {
                subdirs.push(OsStr::from_bytes(name.to_bytes()).to_owned());
            }
        }
        if let Some(kind) = git_entry {
            self.dot_git(dir.as_fd(), &path, kind);
        }
        let is_dot_git = path.file_name() == Some(OsStr::new(".git"));
        let has = |mark: &[u8]| marks.iter().any(|m| m.to_bytes() == mark);
        let bare = has(b"HEAD") && has(b"objects") && has(b"refs");
        let linked = has(b"HEAD") && has(b"commondir") && !bare;
        if (bare || linked) && !is_dot_git && !self.skip.contains(path.as_path()) {
            // An old directory that HEAD, objects and refs (or commondir) made a
            // repository during the run is as new a repository as one made whole.
            let made_one = marks
                .iter()
                .any(|mark| times_at(dir.as_fd(), mark).is_ok_and(|t| self.after_start(t.birth)));
            let (kind, shape) = if bare {
                (Kind::BareRepository, repository::Shape::Bare)
            } else {
                (Kind::LinkedGitDir, repository::Shape::Linked)
            };
            if made_one {
                self.found(path.clone(), kind, How::Created);
            } else {
                self.repository(&path, kind, shape);
            }
        }
        subdirs.retain(|name| !self.skip.contains(path.join(name).as_path()));
        Some(Frame {
            dir,
            path,
            pending: subdirs,
        })
    }

    /// The `.git` entry of the directory open as `parent`.
    fn dot_git(&mut self, parent: BorrowedFd<'_>, parent_path: &Path, kind: Option<Type>) {
        let path = parent_path.join(".git");
        if self.skip.contains(path.as_path()) {
            return;
        }
        let Ok(times) = times_at(parent, c".git") else {
            self.unread(path);
            return;
        };
        let kind = match kind {
            Some(Type::Directory) => Kind::GitDir,
            Some(Type::Symlink) => Kind::GitSymlink,
            Some(_) => Kind::GitdirFile,
            None if times.is_directory => Kind::GitDir,
            None => match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => Kind::GitSymlink,
                _ => Kind::GitdirFile,
            },
        };
        let how = if self.after_start(times.birth) {
            Some(How::Created)
        } else if kind != Kind::GitDir {
            (Stamp::of(times.change) >= self.since).then_some(How::Changed)
        } else {
            // An older git directory in a directory made during the run was moved there.
            // (One moved into an older directory has its own change time after the start:
            // the repository's check says so where it holds code.)
            let into_new = times_at(parent, c"").is_ok_and(|t| self.after_start(t.birth));
            into_new.then_some(How::Changed)
        };
        if let Some(how) = how {
            self.found(path, kind, how);
            return;
        }
        // An old `.git`: what the repository behind it runs, as it is now.
        let git_dir = match kind {
            Kind::GitDir => Some(path.clone()),
            _ => repository::git_dir_behind(&path),
        };
        if let Some(git_dir) = git_dir {
            self.repository(
                &git_dir,
                Kind::GitDir,
                repository::Shape::Worktree(parent_path),
            );
        }
    }

    /// Reports what the run did to the repository whose git directory is `git_dir`.
    fn repository(&mut self, git_dir: &Path, kind: Kind, shape: repository::Shape<'_>) {
        self.met(git_dir);
        let news = self.repositories.news(git_dir, shape);
        for path in news.unread {
            self.unread(path);
        }
        if let Some(how) = news.git_dir {
            self.found(git_dir.to_owned(), kind, how);
        }
        for (path, how, setting) in news.code {
            if self.reported.insert(path.clone()) {
                self.report.findings.push(Finding {
                    path,
                    kind: Kind::CodePath,
                    how,
                    named_by: Some((git_dir.to_owned(), setting)),
                });
            }
        }
    }

    fn after_start(&self, birth: Option<(i64, u32)>) -> bool {
        birth.is_some_and(|b| Stamp::of(b) >= self.since)
    }

    /// A git directory met, to sweep if it lies in a root and was not pinned.
    fn met(&mut self, git_dir: &Path) {
        if self.repositories.inside(git_dir) && !self.git_dirs.iter().any(|d| d == git_dir) {
            self.git_dirs.push(git_dir.to_owned());
        }
    }

    fn found(&mut self, path: PathBuf, kind: Kind, how: How) {
        if matches!(
            kind,
            Kind::GitDir | Kind::BareRepository | Kind::LinkedGitDir
        ) {
            self.met(&path);
        }
        if self.reported.insert(path.clone()) {
            self.report.findings.push(Finding {
                path,
                kind,
                how,
                named_by: None,
            });
        }
    }
}

#[cfg(test)]
mod tests;
