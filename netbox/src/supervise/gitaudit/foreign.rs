//! After the run: entries git never makes where CMD could write git's data. Git makes
//! only regular files and directories in `objects/`, `refs/`, `logs/`, `reftable/` and
//! `lfs/`, and at the top of a git directory; it follows a symlink there when it writes
//! (a reflog line appended to `logs/HEAD`, its lock file renamed onto what `packed-refs`
//! leads to), so a link CMD planted makes the user's next `git cherry-pick` or `git gc`
//! on the host write CMD's text (a commit subject, a branch name) into `~/.bashrc`; a
//! FIFO makes it hang. Each such entry in the parts CMD could write (the data
//! directories left writable under `--allow-git-writes`, the whole of a git directory
//! whose top is writable, and every repository the walk met that netbox did not pin)
//! is reported, and removed if the run made or changed it: nothing of the user's is
//! lost, since git makes none. One there before the run is reported and left. The names
//! at the top of a git directory whose link git follows to code (`hooks`, `config`, …)
//! are judged by what they lead to (repository.rs), not here.
//!
//! "Made or changed during the run": its birth time or its change time is after the
//! start (statx(2); a rename sets the change time, and CMD cannot set either back).
//! Removal is by name in the directory the walk holds open (unlinkat(2)), never by a
//! path that could lead elsewhere. The sweep reads at most `MAX_ENTRIES` entries.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::{Dir, Type};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::plan::protect::{CODE_PARTS, GIT_DATA_DIRS};
use crate::sys::mountid::times_at;

use super::{How, Stamp};

pub use bridge::log::records::ForeignEntry as Entry;

/// Entries the sweep reads at most, in all: past this it stops and says so (a huge
/// `objects/` must not hold up the end of a run. Measured 2026-12-04, debug build,
/// 99,840 loose objects: the whole check after the run took 195-202 ms).
pub const MAX_ENTRIES: u64 = 200_000;

/// Directories deeper than this below a swept directory are not read.
const MAX_DEPTH: usize = 64;

/// One entry git never makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    pub path: PathBuf,
    pub entry: Entry,
    /// Made or changed during the run; `BeforeRun` if it was there before.
    pub how: How,
    /// Netbox removed it (only what the run made or changed).
    pub removed: bool,
}

/// What the sweep found and how much it read.
#[derive(Debug, Default)]
pub struct Swept {
    pub found: Vec<Foreign>,
    pub entries: u64,
    /// It read `MAX_ENTRIES` entries and stopped.
    pub stopped: bool,
    /// Directories it could not read.
    pub unread: Vec<PathBuf>,
}

pub(super) struct Sweep<'a> {
    pub since: Stamp,
    pub skip: &'a std::collections::HashSet<&'a Path>,
    pub swept: Swept,
}

const OPEN_DIR: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl Sweep<'_> {
    /// A git directory whose top CMD could write: its top (but the names that lead git
    /// to code), and its data directories whole.
    pub fn git_dir(&mut self, git_dir: &Path) {
        let mut dir = match Dir::open(git_dir, OPEN_DIR, Mode::empty()) {
            Ok(dir) => dir,
            // Gone (a placeholder removed when the run ended): nothing to sweep.
            Err(nix::errno::Errno::ENOENT) => return,
            Err(_) => {
                self.swept.unread.push(git_dir.to_owned());
                return;
            }
        };
        for (name, kind) in self.entries_of(&mut dir, git_dir) {
            let path = git_dir.join(OsStr::from_bytes(name.to_bytes()));
            let text = name.to_string_lossy();
            if CODE_PARTS.contains(&text.as_ref()) || self.skip.contains(path.as_path()) {
                continue;
            }
            if let Some(entry) = foreign(dir.as_fd(), &name, kind) {
                self.judge(dir.as_fd(), &name, path, entry);
            } else if GIT_DATA_DIRS.contains(&text.as_ref()) && is_dir(dir.as_fd(), &name, kind) {
                self.tree(&path);
            }
        }
    }

    /// A data directory, all of it.
    pub fn tree(&mut self, top: &Path) {
        if self.skip.contains(top) {
            return;
        }
        let dir = match Dir::open(top, OPEN_DIR, Mode::empty()) {
            Ok(dir) => dir,
            // Gone (a `logs/` made for the run and left empty is removed with the other
            // placeholders before the sweep): nothing to sweep.
            Err(nix::errno::Errno::ENOENT) => return,
            Err(_) => {
                self.swept.unread.push(top.to_owned());
                return;
            }
        };
        // Each level holds one directory open, and a subdirectory is opened only when
        // its turn comes (`objects/` has 256 of them).
        let mut stack: Vec<(Dir, PathBuf, Vec<CString>)> = Vec::new();
        self.enter(&mut stack, dir, top.to_owned());
        loop {
            let depth = stack.len();
            let Some((dir, path, pending)) = stack.last_mut() else {
                return;
            };
            if self.swept.stopped {
                return;
            }
            let Some(name) = pending.pop() else {
                stack.pop();
                continue;
            };
            let at = path.join(OsStr::from_bytes(name.to_bytes()));
            if depth >= MAX_DEPTH {
                self.swept.unread.push(at);
                continue;
            }
            match Dir::openat(dir.as_fd(), name.as_c_str(), OPEN_DIR, Mode::empty()) {
                Ok(inner) => self.enter(&mut stack, inner, at),
                // Gone since it was listed: nothing to read.
                Err(nix::errno::Errno::ENOENT) => {}
                Err(_) => self.swept.unread.push(at),
            }
        }
    }

    /// Reads one directory of a tree: judges what git never makes in it, and pushes it
    /// with the subdirectories still to enter.
    fn enter(
        &mut self,
        stack: &mut Vec<(Dir, PathBuf, Vec<CString>)>,
        mut dir: Dir,
        path: PathBuf,
    ) {
        let mut subdirs = Vec::new();
        for (name, kind) in self.entries_of(&mut dir, &path) {
            let at = path.join(OsStr::from_bytes(name.to_bytes()));
            if self.skip.contains(at.as_path()) {
                continue;
            }
            if let Some(entry) = foreign(dir.as_fd(), &name, kind) {
                self.judge(dir.as_fd(), &name, at, entry);
            } else if is_dir(dir.as_fd(), &name, kind) {
                subdirs.push(name);
            }
        }
        stack.push((dir, path, subdirs));
    }

    /// The entries of a directory, counted against the limit.
    fn entries_of(&mut self, dir: &mut Dir, path: &Path) -> Vec<(CString, Option<Type>)> {
        let mut out = Vec::new();
        for entry in dir.iter() {
            let Ok(entry) = entry else {
                self.swept.unread.push(path.to_owned());
                break;
            };
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            if self.swept.entries >= MAX_ENTRIES {
                self.swept.stopped = true;
                break;
            }
            self.swept.entries += 1;
            out.push((name.to_owned(), entry.file_type()));
        }
        out
    }

    /// Reports one, and removes it if the run made or changed it.
    fn judge(
        &mut self,
        dir: std::os::fd::BorrowedFd<'_>,
        name: &CStr,
        path: PathBuf,
        entry: Entry,
    ) {
        let during = |t: (i64, u32)| Stamp::of(t) >= self.since;
        let how = match times_at(dir, name) {
            Ok(t) if t.birth.is_some_and(during) => How::Created,
            Ok(t) if during(t.change) => How::Changed,
            Ok(_) => How::BeforeRun,
            // Gone since it was listed.
            Err(_) => return,
        };
        let removed = how != How::BeforeRun
            && nix::unistd::unlinkat(dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir).is_ok();
        self.swept.found.push(Foreign {
            path,
            entry,
            how,
            removed,
        });
    }
}

/// What an entry is, if git never makes one: the type the directory gave, or asked.
fn foreign(dir: std::os::fd::BorrowedFd<'_>, name: &CStr, kind: Option<Type>) -> Option<Entry> {
    use nix::sys::stat::SFlag;
    let kind = match kind {
        Some(kind) => kind,
        None => {
            let stat = nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .ok()?;
            match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFLNK => Type::Symlink,
                SFlag::S_IFIFO => Type::Fifo,
                SFlag::S_IFSOCK => Type::Socket,
                SFlag::S_IFCHR => Type::CharacterDevice,
                SFlag::S_IFBLK => Type::BlockDevice,
                _ => return None,
            }
        }
    };
    match kind {
        Type::Symlink => Some(Entry::Symlink),
        Type::Fifo => Some(Entry::Fifo),
        Type::Socket => Some(Entry::Socket),
        Type::CharacterDevice | Type::BlockDevice => Some(Entry::Device),
        Type::Directory | Type::File => None,
    }
}

fn is_dir(dir: std::os::fd::BorrowedFd<'_>, name: &CStr, kind: Option<Type>) -> bool {
    match kind {
        Some(kind) => kind == Type::Directory,
        None => times_at(dir, name).is_ok_and(|t| t.is_directory),
    }
}

/// Says what an entry is, for a person.
pub fn describe(entry: Entry) -> &'static str {
    match entry {
        Entry::Symlink => "a symlink",
        Entry::Fifo => "a FIFO",
        Entry::Socket => "a socket",
        Entry::Device => "a device file",
    }
}
