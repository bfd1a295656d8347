//! After the run: git metadata created or changed below the top of a writable root.
//!
//! The top `.git` of each root is pinned read-only (protect.rs). Below it, mounts cannot
//! stop CMD from creating a `.git` in any directory, or from changing a nested
//! repository's or a checked-out submodule's, and git reads those: a `core.fsmonitor` or
//! a hook planted there runs in the user's next git command in that directory (for a
//! submodule, in `git status` at the top). So netbox looks once CMD is gone, and says so.
//!
//! Changes are found by ctime, which no process can set (utimensat sets only atime and
//! mtime) and which a rename into place updates: a `.git` entry, or a nested git
//! directory's `config`, `commondir`, `hooks/` or one of its hooks, changed since the run
//! started. The walk reads directories (their entries' types come with them) and stats
//! only git metadata: about one getdents per directory of the roots.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, SystemTime};

/// The files in a git directory that make git run code or look elsewhere.
const RUNS_CODE: &[&str] = &["config", "commondir", "hooks"];

/// Margin for file timestamps, which the kernel takes from a clock that can lag a precise
/// reading by a tick: a change just after the start must not look older than it.
const CLOCK_MARGIN: Duration = Duration::from_millis(50);

/// The moment from which a change counts as made during the run.
pub fn start_mark() -> SystemTime {
    SystemTime::now()
        .checked_sub(CLOCK_MARGIN)
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Threads that read directories side by side: most of the walk is syscalls, which two
/// threads overlap (measured: a 5,749-directory tree, 56,180 files: ~45 ms on one).
const WALKERS: usize = 2;

/// Directories read before a second walker is worth starting.
const ALONE: usize = 64;

/// Every piece of git metadata under `roots` changed at or after `since`, sorted. Paths
/// under `pinned` (read-only during the run, so changed, if at all, from the host) are not
/// looked at.
pub fn changed_git_metadata(
    roots: &[PathBuf],
    pinned: &[PathBuf],
    since: SystemTime,
) -> Vec<PathBuf> {
    let work = Work {
        state: Mutex::new(WorkState {
            dirs: roots.iter().filter(|r| r.is_dir()).cloned().collect(),
            busy: 0,
        }),
        more: Condvar::new(),
        found: Mutex::new(Vec::new()),
    };
    // A small tree is read here alone: starting a thread costs more than it would save.
    work.walk(pinned, since, Some(ALONE));
    let walk = || work.walk(pinned, since, None);
    std::thread::scope(|scope| {
        let left = !work
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .dirs
            .is_empty();
        for _ in 1..if left { WALKERS } else { 1 } {
            // Without another thread, this one walks it all.
            let _ = std::thread::Builder::new().spawn_scoped(scope, walk);
        }
        walk();
    });
    let mut found = work.found.into_inner().unwrap_or_else(|e| e.into_inner());
    found.sort();
    found
}

/// Directories still to read, shared by the walkers.
struct Work {
    state: Mutex<WorkState>,
    more: Condvar,
    found: Mutex<Vec<PathBuf>>,
}

struct WorkState {
    dirs: Vec<PathBuf>,
    /// Walkers reading a directory now (which may add more).
    busy: usize,
}

impl Work {
    /// Reads directories until none is left, or (alone) until `budget` have been read.
    fn walk(&self, pinned: &[PathBuf], since: SystemTime, mut budget: Option<usize>) {
        let is_pinned = |path: &Path| pinned.iter().any(|p| path.starts_with(p));
        let lock = || self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(left) = budget.as_mut() {
                if *left == 0 {
                    return;
                }
                *left -= 1;
            }
            let dir = {
                let mut state = lock();
                loop {
                    if let Some(dir) = state.dirs.pop() {
                        state.busy += 1;
                        break dir;
                    }
                    if state.busy == 0 {
                        // Nothing left and nobody to add more: wake the others to see it.
                        self.more.notify_all();
                        return;
                    }
                    state = self.more.wait(state).unwrap_or_else(|e| e.into_inner());
                }
            };
            let mut subdirs = Vec::new();
            let mut found = Vec::new();
            // Unreadable: CMD, as the same user, could not have written there either.
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                // Most entries are files that are not `.git`: nothing to build or compare.
                let is_git = entry.file_name() == ".git";
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if !is_git && !kind.is_dir() {
                    continue;
                }
                let path = entry.path();
                if is_pinned(&path) {
                    continue;
                }
                if is_git {
                    check_git_entry(&path, kind.is_dir(), since, &mut found);
                } else {
                    subdirs.push(path);
                }
            }
            if !found.is_empty() {
                self.found
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .append(&mut found);
            }
            let mut state = lock();
            state.busy -= 1;
            state.dirs.append(&mut subdirs);
            self.more.notify_all();
        }
    }
}

/// A `.git` entry: itself (created, replaced or rewritten), and if it is a git directory,
/// what in it runs code.
fn check_git_entry(git: &Path, is_dir: bool, since: SystemTime, found: &mut Vec<PathBuf>) {
    if changed_since(git, since) {
        found.push(git.to_owned());
        return;
    }
    if !is_dir {
        return;
    }
    for name in RUNS_CODE {
        let path = git.join(name);
        if changed_since(&path, since) {
            found.push(path);
        } else if *name == "hooks" {
            // A hook rewritten in place changes the file, not the directory.
            let hooks = std::fs::read_dir(&path).into_iter().flatten().flatten();
            found.extend(hooks.map(|h| h.path()).filter(|h| changed_since(h, since)));
        }
    }
}

/// Whether the inode at `path` (not following a symlink) changed at or after `since`.
fn changed_since(path: &Path, since: SystemTime) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let (Ok(secs), Ok(nanos)) = (
        u64::try_from(meta.ctime()),
        u32::try_from(meta.ctime_nsec()),
    ) else {
        return false;
    };
    SystemTime::UNIX_EPOCH + Duration::new(secs, nanos) >= since
}
