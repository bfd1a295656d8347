//! The other names the host's mounts give a place. A bind mount (or a second mount of one
//! filesystem) shows a directory at a second path: `mount --bind ~ /srv/alias` makes
//! `/srv/alias/.ssh` the same directory as `~/.ssh`. netbox decides what to hide, pin and
//! split by path, so each such control is laid at every other name too (the sandbox's
//! root is the host's tree, other names included), and a writable root that would reach
//! a place by another name is refused (config/roots.rs).
//!
//! Two mounts of one filesystem (one device in `/proc/self/mountinfo`) show the same
//! things where their roots in that filesystem overlap. Every name found is checked by
//! identity (device and inode), so a name another mount hides is not taken for one.
//! A host with no two overlapping mounts of one filesystem (most) costs one read of the
//! table.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// `major:minor`: which filesystem.
    device: String,
    /// What of that filesystem it shows.
    root: PathBuf,
    /// Where.
    point: PathBuf,
}

/// The host's mounts, as this process sees them.
#[derive(Debug, Default)]
pub struct MountTable {
    mounts: Vec<Mount>,
    /// Devices of which two mounts show overlapping parts: only their places have other
    /// names.
    overlapping: Vec<String>,
}

/// Where else a place shows.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OtherNames {
    /// Paths that show the place whole.
    pub whole: Vec<PathBuf>,
    /// Mount points that show a part of it (a bind of one of its subdirectories).
    pub parts: Vec<PathBuf>,
}

impl OtherNames {
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.whole.iter().chain(&self.parts)
    }
}

/// The host's mount table, read once a run: every decision of one start-up goes by the
/// same table (and it is read once, not by each).
pub fn host() -> Result<&'static MountTable, crate::error::WrapperError> {
    static TABLE: std::sync::OnceLock<Result<MountTable, (std::io::ErrorKind, String)>> =
        std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| MountTable::read().map_err(|e| (e.kind(), e.to_string())))
        .as_ref()
        .map_err(|(kind, text)| crate::error::WrapperError::Path {
            path: PathBuf::from("/proc/self/mountinfo"),
            what: "mount table",
            source: std::io::Error::new(*kind, text.clone()),
        })
}

impl MountTable {
    /// `/proc/self/mountinfo`, read now.
    pub fn read() -> std::io::Result<MountTable> {
        Ok(MountTable::parse(&std::fs::read_to_string(
            "/proc/self/mountinfo",
        )?))
    }

    fn parse(text: &str) -> MountTable {
        let mounts: Vec<Mount> = text
            .lines()
            .filter_map(|line| {
                // id parent major:minor root point options [optional...] - type source super
                let fields: Vec<&str> = line.split(' ').collect();
                let root = unescape(fields.get(3)?);
                // A bind of a removed directory shows nothing by any other name.
                if root.ends_with("//deleted") {
                    return None;
                }
                Some(Mount {
                    device: (*fields.get(2)?).to_owned(),
                    root: PathBuf::from(root),
                    point: PathBuf::from(unescape(fields.get(4)?)),
                })
            })
            .collect();
        let mut overlapping: Vec<String> = Vec::new();
        for (i, a) in mounts.iter().enumerate() {
            let overlaps = mounts[i + 1..].iter().any(|b| {
                a.device == b.device && (a.root.starts_with(&b.root) || b.root.starts_with(&a.root))
            });
            if overlaps && !overlapping.contains(&a.device) {
                overlapping.push(a.device.clone());
            }
        }
        MountTable {
            mounts,
            overlapping,
        }
    }

    /// The mount `path` (canonical) lies on: the one with the longest mount point that
    /// holds it, the last of those (mounted on top).
    fn mount_of(&self, path: &Path) -> Option<&Mount> {
        self.mounts
            .iter()
            .filter(|m| path.starts_with(&m.point))
            .max_by_key(|m| m.point.components().count())
    }

    /// The mounts whose mount points lie strictly inside `dir`.
    pub fn mount_points_inside<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = &'a Path> {
        self.mounts
            .iter()
            .filter(move |m| m.point.starts_with(dir) && m.point != dir)
            .map(|m| m.point.as_path())
    }

    /// Every other path that shows `path` (canonical; a file or a directory) whole, and
    /// every mount point that shows a part of it.
    pub fn other_names(&self, path: &Path) -> OtherNames {
        let mut names = OtherNames::default();
        if self.overlapping.is_empty() {
            return names;
        }
        let Some(own) = self.mount_of(path) else {
            return names;
        };
        if !self.overlapping.contains(&own.device) {
            return names;
        }
        let rest = path.strip_prefix(&own.point).unwrap_or(Path::new(""));
        let in_fs = own.root.join(rest);
        let id = identity(path);
        for other in self.mounts.iter().filter(|m| m.device == own.device) {
            if let Ok(below) = in_fs.strip_prefix(&other.root) {
                let name = join(&other.point, below);
                if name != path && id.is_some() && identity(&name) == id {
                    names.whole.push(name);
                }
            } else if let Ok(inside) = other.root.strip_prefix(&in_fs) {
                // A part of it shows at that mount point, unless that is its own name
                // or another mount covers it there.
                let on_top = self
                    .mount_of(&other.point)
                    .is_some_and(|top| std::ptr::eq(top, other));
                if on_top && other.point != join(path, inside) {
                    names.parts.push(other.point.clone());
                }
            }
        }
        names.whole.sort();
        names.whole.dedup();
        names.parts.sort();
        names.parts.dedup();
        names
    }
}

/// `base` joined with `rest`, with no `/` added after it for an empty rest.
fn join(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(rest)
    }
}

/// Device and inode, following no link at the end (a name that is a link shows nothing
/// of what it leads to).
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped_and_overlaps_found_per_device() {
        let table = MountTable::parse(
            "27 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             30 27 0:40 / /tmp rw - tmpfs tmpfs rw\n\
             31 27 8:1 /home/me /srv/my\\040home rw - ext4 /dev/sda1 rw\n\
             32 27 8:2 / /data rw - ext4 /dev/sda2 rw\n\
             33 27 8:1 /gone//deleted /srv/gone rw - ext4 /dev/sda1 rw\n",
        );
        assert_eq!(table.overlapping, ["8:1"]);
        assert_eq!(
            table.mount_of(Path::new("/srv/my home/x")).unwrap().point,
            Path::new("/srv/my home")
        );
        assert!(!table
            .mounts
            .iter()
            .any(|m| m.point == Path::new("/srv/gone")));
        assert_eq!(unescape(r"a\134b\011c\12"), "a\\b\tc\\12");
    }

    #[test]
    fn a_host_with_no_overlapping_mounts_gives_no_other_names() {
        let table = MountTable::read().unwrap();
        let here = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        if table.overlapping.is_empty() {
            assert_eq!(table.other_names(&here), OtherNames::default());
        }
    }
}
