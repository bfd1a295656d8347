//! Watches the pinned paths from outside the sandbox.
//!
//! A read-only bind pins a directory entry, not a name: if a process on the host removes
//! or replaces a pinned entry (`git clean`, an editor's save-by-rename, `git checkout`), the
//! kernel detaches the sandbox's mount on it, and the name is writable inside again. CMD
//! itself cannot do that (a mountpoint is EBUSY/EROFS from inside), so any such change
//! comes from the host; netbox watches the parent directories of every pinned path with
//! inotify(7) and stops the run when one of those names changes.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

/// The watch over every pinned path.
pub struct PinWatch {
    inotify: Inotify,
    ready: AsyncFd<OwnedFd>,
    names: HashMap<WatchDescriptor, (PathBuf, HashSet<OsString>)>,
}

impl PinWatch {
    /// Starts watching; must run inside the tokio runtime.
    pub fn new(pinned: &[PathBuf]) -> io::Result<PinWatch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let mut by_dir: HashMap<PathBuf, HashSet<OsString>> = HashMap::new();
        for path in pinned {
            if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
                by_dir
                    .entry(dir.to_owned())
                    .or_default()
                    .insert(name.to_owned());
            }
        }
        let mask = AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_ONLYDIR;
        let mut names = HashMap::new();
        for (dir, set) in by_dir {
            let wd = inotify.add_watch(&dir, mask)?;
            names.insert(wd, (dir, set));
        }
        let ready = crate::sys::fd::register_readable(inotify.as_fd().try_clone_to_owned()?)?;
        Ok(PinWatch {
            inotify,
            ready,
            names,
        })
    }

    /// Resolves with the first pinned path that changed on the host.
    pub async fn changed(&self) -> PathBuf {
        loop {
            let Ok(mut ready) = self.ready.readable().await else {
                return std::future::pending().await;
            };
            match self.inotify.read_events() {
                Ok(events) => {
                    for event in events {
                        let Some((dir, set)) = self.names.get(&event.wd) else {
                            continue;
                        };
                        if let Some(name) = event.name.filter(|n| set.contains(n)) {
                            return dir.join(name);
                        }
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                Err(_) => return std::future::pending().await,
            }
        }
    }
}
