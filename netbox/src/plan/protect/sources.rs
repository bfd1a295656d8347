//! What the pins were chosen from, kept so that netbox can tell, while the run goes on,
//! when one of those files changes on the host (supervise/gitwatch.rs): each git config
//! file read (the shared ones, each repository's, their includes; missing ones too, since
//! git reads one that appears), each index read for its gitlinks, and each hooks
//! directory read for links and hook runners, with each entry read there.
//!
//! A file is stamped just before it is read: a change after the stamp, even one racing
//! the read, shows as another stamp. The stamp is what stat(2) says of the entry: its
//! device and inode (git and editors replace a file by rename), size, and modification
//! and change times (a write in place); for a link, also what it leads to. Checking one is
//! one stat call (two for a link).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One file as stat(2) saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stat {
    fn of(meta: &std::fs::Metadata) -> Stat {
        Stat {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// An entry as it was when it was read: `None` where nothing was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    /// The entry itself (a link, not what it leads to).
    entry: Stat,
    /// What a link leads to, if it leads anywhere.
    target: Option<Stat>,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let entry = std::fs::symlink_metadata(path).ok()?;
    let target = if entry.file_type().is_symlink() {
        std::fs::metadata(path).ok().map(|m| Stat::of(&m))
    } else {
        None
    };
    Some(FileStamp {
        entry: Stat::of(&entry),
        target,
    })
}

/// The files a choice of pins was made from, each as it was when read.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    files: Vec<(PathBuf, Option<FileStamp>)>,
    /// The paths in `files` (a run with thousands of submodules reads thousands).
    seen: std::collections::HashSet<PathBuf>,
}

impl Sources {
    /// Stamps `path`, about to be read (once: the first stamp is the one before the
    /// first read).
    pub fn record(&mut self, path: &Path) {
        if self.seen.insert(path.to_owned()) {
            self.files.push((path.to_owned(), stamp(path)));
        }
    }

    /// Takes in what another reading recorded.
    pub fn extend(&mut self, other: Sources) {
        for (path, stamp) in other.files {
            if self.seen.insert(path.clone()) {
                self.files.push((path, stamp));
            }
        }
    }

    /// The first file that is not as it was read, if any.
    pub fn changed(&self) -> Option<&Path> {
        self.files
            .iter()
            .find(|(path, was)| stamp(path) != *was)
            .map(|(path, _)| path.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_replaced_written_made_or_re_pointed_is_a_change() {
        let dir = std::env::temp_dir().join(format!("netbox-sources-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config");
        std::fs::write(&config, "[core]\n").unwrap();
        let missing = dir.join("config.worktree");
        std::fs::write(dir.join("a"), "").unwrap();
        std::fs::write(dir.join("b"), "").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink("a", &link).unwrap();
        let sources = |paths: &[&Path]| {
            let mut s = Sources::default();
            for p in paths {
                s.record(p);
            }
            s
        };
        let all = sources(&[&config, &missing, &link]);
        assert_eq!(all.changed(), None);
        // Replaced by rename, as git config does.
        std::fs::write(dir.join("config.lock"), "[core]\n").unwrap();
        std::fs::rename(dir.join("config.lock"), &config).unwrap();
        assert_eq!(all.changed(), Some(config.as_path()));
        // Written in place, one byte more.
        let s = sources(&[&config]);
        std::fs::write(&config, "[core]\n\n").unwrap();
        assert_eq!(s.changed(), Some(config.as_path()));
        // Made where there was nothing.
        let s = sources(&[&missing]);
        std::fs::write(&missing, "").unwrap();
        assert_eq!(s.changed(), Some(missing.as_path()));
        // A link pointed elsewhere.
        let s = sources(&[&link]);
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("b", &link).unwrap();
        assert_eq!(s.changed(), Some(link.as_path()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
