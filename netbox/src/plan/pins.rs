//! The pins, watched from inside the sandbox while CMD runs.
//!
//! A read-only bind pins a directory entry, not a name: if a process on the host removes
//! or replaces a pinned entry (`git clean`, an editor's save-by-rename, `git checkout`), the
//! kernel detaches the sandbox's mount on it and the name is writable inside again. CMD
//! cannot cause that itself (a mountpoint is EBUSY/EROFS from inside, every directory
//! between a root and a pin is a mountpoint too, so none can be renamed away, and CMD
//! cannot mount), so pid 1 watches its own mount table: `/proc/self/mountinfo` polls readable with
//! POLLPRI on every change to the namespace's mounts (proc(5)), and then each pinned path
//! must still be a mount of its own (its mount id differs from its parent directory's,
//! statx STATX_MNT_ID). When one is not, the run stops: pid 1 exits, and the kernel kills
//! everything in the namespace. Event-driven, inside the sandbox, and free to tear down
//! (an inotify watch from outside costs an SRCU grace period on close: 4–18 ms measured).
//!
//! The parts of a git directory left writable on top of its pin (`--allow-git-writes`:
//! `objects/`, `FETCH_HEAD`) are not watched: a host that replaces one detaches only the
//! writable bind, and the pin's read-only entry shows in its place.

use std::path::{Path, PathBuf};

use crate::sys::mountid::mount_id;

/// The paths that must stay mounts of their own.
pub struct Pins {
    paths: Vec<PathBuf>,
}

impl Pins {
    pub fn new(paths: Vec<PathBuf>) -> Pins {
        Pins { paths }
    }

    /// The outermost pinned path that is no longer a mount of its own, if any: a pin
    /// inside another (`.git/refs/replace` in `.git`) goes with it, and the one the host
    /// removed is the one to name.
    pub fn lost(&self) -> Option<&Path> {
        self.paths
            .iter()
            .filter(|path| !is_own_mount(path))
            .min_by_key(|path| path.components().count())
            .map(PathBuf::as_path)
    }
}

fn is_own_mount(path: &Path) -> bool {
    let Some(parent) = path.parent() else {
        return true;
    };
    match (mount_id(path), mount_id(parent)) {
        (Ok(own), Ok(above)) => own != above,
        _ => false,
    }
}
