//! The paths a run mounts on, fixed once at start-up, so a path another process swaps
//! meanwhile changes nothing.
//!
//! netbox looks at paths on the host and the sandbox's pid 1 mounts them a little later. A
//! process that can rename a directory on the way (a second sandbox whose workspace holds
//! this one's, a host process) could swap it for a symlink in between and have the
//! writable mount, the placeholders and the pins land wherever the link leads. So:
//! - each writable root is opened once, following no symlink, and held for the run;
//! - whatever lies inside a root (placeholders, pins) is reached beneath that fd, anything
//!   else from `/`, again following no symlink;
//! - the identity (device, inode) of each path the sandbox mounts from or onto goes into
//!   the mount plan: pid 1 resolves the path again the same way and compares before it
//!   mounts (mounts.rs), and the probe checks each writable root once more from inside.
//!
//! What stays possible, and why it is no escape: whoever can rename a directory on a
//! root's path can write everything below it already, so swapping in another real
//! directory moves nothing the swapper could not touch anyway (and is still caught by the
//! identity check). A symlink, which could lead to what the swapper cannot write, is never
//! followed. netbox's choice of what to protect reads the tree as it is at the time.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::error::WrapperError;
use crate::sys::resolve::{self, FileId};

/// The run's writable roots, held open, and every identity recorded so far.
pub struct Resolved {
    roots: Vec<(PathBuf, OwnedFd)>,
    /// Everything identified, held open so no inode number is reused during the run.
    held: Vec<OwnedFd>,
    ids: BTreeMap<PathBuf, (FileId, bool)>,
}

impl Resolved {
    /// Opens each writable root (canonical paths: a symlink in one now means a swap).
    pub fn roots(write_roots: &[PathBuf]) -> Result<Resolved, WrapperError> {
        let mut resolved = Resolved {
            roots: Vec::new(),
            held: Vec::new(),
            ids: BTreeMap::new(),
        };
        for root in write_roots {
            let fd = resolve::open_exact(root).map_err(|e| changed(root, &e))?;
            resolved.record(root, &fd)?;
            resolved.roots.push((root.clone(), fd));
        }
        Ok(resolved)
    }

    /// Opens `path` as an `O_PATH` fd: beneath the innermost writable root that holds it,
    /// else from `/`; following no symlink either way.
    pub fn open(&self, path: &Path) -> std::io::Result<OwnedFd> {
        match self.root_of(path) {
            Some((root, fd)) => {
                resolve::open_beneath(fd.as_fd(), path.strip_prefix(root).unwrap_or(path))
            }
            None => resolve::open_exact(path),
        }
    }

    /// The directory that holds `path`, opened like [`Resolved::open`], and `path`'s last
    /// component: where a placeholder is made and removed.
    pub fn parent_of(&self, path: &Path) -> std::io::Result<(OwnedFd, OsString)> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::other("no parent directory"));
        };
        let dir = self.open(parent)?;
        if !resolve::is_dir(&dir)? {
            return Err(std::io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok((dir, name.to_owned()))
    }

    /// Resolves `path`, records its identity (once) and says whether it is a directory.
    pub fn identify(&mut self, path: &Path) -> Result<(FileId, bool), WrapperError> {
        if let Some(known) = self.ids.get(path) {
            return Ok(*known);
        }
        let fd = self.open(path).map_err(|e| changed(path, &e))?;
        let known = self.record(path, &fd)?;
        self.held.push(fd);
        Ok(known)
    }

    /// Whether `path`, already identified, is a directory (false if not identified).
    pub fn is_dir(&self, path: &Path) -> bool {
        self.ids.get(path).is_some_and(|(_, dir)| *dir)
    }

    /// Hands over every fd held, for the caller to close once the sandbox's checks are done
    /// (its mounts hold the inodes from then on). Closing them at exit instead would make
    /// netbox's the last reference to a removed placeholder, whose close waits for the disk
    /// (measured: ~0.25 ms a run, ext4 with `discard`).
    pub fn release(&mut self) -> Vec<OwnedFd> {
        let mut fds = std::mem::take(&mut self.held);
        fds.extend(
            std::mem::take(&mut self.roots)
                .into_iter()
                .map(|(_, fd)| fd),
        );
        fds
    }

    /// Every identity recorded, by host path.
    pub fn ids(&self) -> BTreeMap<PathBuf, FileId> {
        self.ids
            .iter()
            .map(|(p, (id, _))| (p.clone(), *id))
            .collect()
    }

    fn record(&mut self, path: &Path, fd: &OwnedFd) -> Result<(FileId, bool), WrapperError> {
        let found = FileId::of(fd)
            .and_then(|id| Ok((id, resolve::is_dir(fd)?)))
            .map_err(|e| changed(path, &e))?;
        self.ids.insert(path.to_owned(), found);
        Ok(found)
    }

    fn root_of(&self, path: &Path) -> Option<(&Path, &OwnedFd)> {
        self.roots
            .iter()
            .filter(|(root, _)| path.starts_with(root))
            .max_by_key(|(root, _)| root.components().count())
            .map(|(root, fd)| (root.as_path(), fd))
    }
}

fn changed(path: &Path, error: &std::io::Error) -> WrapperError {
    // Not a change at all: out of file descriptors (one per writable root is held).
    if error.raw_os_error() == Some(libc::EMFILE) {
        return WrapperError::Path {
            path: path.to_owned(),
            what: "writable root (too many open files: raise `ulimit -n`)",
            source: std::io::Error::from_raw_os_error(libc::EMFILE),
        };
    }
    WrapperError::PathChanged {
        path: path.to_owned(),
        reason: resolve::describe(error),
    }
}
