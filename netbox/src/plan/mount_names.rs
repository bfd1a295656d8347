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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::paths::join_below;

/// Where the sandbox has its own (`/run`, `/dev`, `/proc`) or the kernel's (`/sys`): a
/// host name there does not show in it.
const NOT_THE_HOSTS: &[&str] = &["/dev", "/proc", "/run", "/sys"];

/// Whether the host's `path` shows in the sandbox at all (to hide it there, say).
pub fn shows_in_sandbox(path: &Path) -> bool {
    !NOT_THE_HOSTS.iter().any(|n| path.starts_with(n))
}

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// The mount's id, as statx(2) gives it for a path on it.
    id: u64,
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
    by_id: HashMap<u64, usize>,
    /// Each filesystem's mounts by what of it they show, in order (a directory's
    /// subdirectories follow it): a place's other names are a few lookups.
    by_root: BTreeMap<(String, PathBuf), Vec<usize>>,
    /// Devices of which two mounts show overlapping parts: only their places have other
    /// names.
    overlapping: HashSet<String>,
}

/// Where else a place shows.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OtherNames {
    /// Paths that show the place whole.
    pub whole: Vec<PathBuf>,
    /// Mount points that show a part of it (a bind of one of its subdirectories), each
    /// with that part's name under the place's own.
    pub parts: Vec<(PathBuf, PathBuf)>,
}

impl OtherNames {
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.whole.iter().chain(self.parts.iter().map(|(at, _)| at))
    }

    /// Each other name with what it shows by the place's own name: `(other, own)`.
    pub fn pairs(&self, own: &Path) -> Vec<(PathBuf, PathBuf)> {
        self.whole
            .iter()
            .map(|at| (at.clone(), own.to_owned()))
            .chain(self.parts.iter().cloned())
            .collect()
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
    /// `/proc/self/mountinfo`, read now (as bytes: a mount point need not be UTF-8).
    pub fn read() -> std::io::Result<MountTable> {
        Ok(MountTable::parse(&std::fs::read("/proc/self/mountinfo")?))
    }

    fn parse(text: &[u8]) -> MountTable {
        let mounts: Vec<Mount> = text
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                // id parent major:minor root point options [optional...] - type source super
                let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
                let root = unescape(fields.get(3)?);
                // A bind of a removed directory shows nothing by any other name.
                if root.ends_with(b"//deleted") {
                    return None;
                }
                Some(Mount {
                    id: std::str::from_utf8(fields.first()?).ok()?.parse().ok()?,
                    device: String::from_utf8(fields.get(2)?.to_vec()).ok()?,
                    root: PathBuf::from(OsString::from_vec(root)),
                    point: PathBuf::from(OsString::from_vec(unescape(fields.get(4)?))),
                })
            })
            .collect();
        let by_id = mounts.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
        let mut by_root: BTreeMap<(String, PathBuf), Vec<usize>> = BTreeMap::new();
        for (i, m) in mounts.iter().enumerate() {
            by_root
                .entry((m.device.clone(), m.root.clone()))
                .or_default()
                .push(i);
        }
        // Two that overlap are next to each other in this order, or share a root (the
        // directories between a root and one inside it come between them).
        let mut overlapping = HashSet::new();
        let mut previous: Option<&(String, PathBuf)> = None;
        for (key, at) in &by_root {
            let shared = at.len() > 1;
            let nested =
                previous.is_some_and(|(device, root)| *device == key.0 && key.1.starts_with(root));
            if shared || nested {
                overlapping.insert(key.0.clone());
            }
            previous = Some(key);
        }
        MountTable {
            mounts,
            by_id,
            by_root,
            overlapping,
        }
    }

    /// The mount `path` (canonical) is on, as the kernel says (a mount laid beneath
    /// another at one point is not the one there); for a missing path, its nearest
    /// existing directory's. By the table alone where the kernel's id is not in it (the
    /// table changed since).
    fn mount_of(&self, path: &Path) -> Option<&Mount> {
        let by_kernel = path
            .ancestors()
            .find_map(|p| crate::sys::mountid::mount_id(p).ok())
            .and_then(|id| self.by_id.get(&id))
            .map(|&i| &self.mounts[i])
            .filter(|m| path.starts_with(&m.point));
        by_kernel.or_else(|| {
            self.mounts
                .iter()
                .filter(|m| path.starts_with(&m.point))
                .max_by_key(|m| m.point.components().count())
        })
    }

    /// Whether `mount` is what shows at its mount point (not covered, not laid beneath
    /// another there).
    fn shows(&self, mount: &Mount) -> bool {
        crate::sys::mountid::mount_id(&mount.point).is_ok_and(|id| id == mount.id)
    }

    /// The mount points that lie strictly inside `dir`, of the mounts that show there.
    pub fn mount_points_inside<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = &'a Path> {
        self.mounts
            .iter()
            .filter(move |m| m.point.starts_with(dir) && m.point != dir && self.shows(m))
            .map(|m| m.point.as_path())
    }

    /// Every other path that shows `path` (canonical; a file or a directory) whole, and
    /// every mount point that shows a part of it (under /run too: the sandbox has its own
    /// there, but the host's programs go by the host's: [`shows_in_sandbox`]).
    pub fn other_names(&self, path: &Path) -> OtherNames {
        self.other_names_where(path, &|_| true)
    }

    /// [`Self::other_names`] that lie in one of `roots` (each checked only then: a
    /// directory bound at many places costs a look at each only where it matters).
    pub fn other_names_in(&self, path: &Path, roots: &[PathBuf]) -> OtherNames {
        self.other_names_where(path, &|name| roots.iter().any(|r| name.starts_with(r)))
    }

    fn other_names_where(&self, path: &Path, wanted: &dyn Fn(&Path) -> bool) -> OtherNames {
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
        let in_fs = join_below(&own.root, rest);
        let id = identity(path);
        // Mounts showing it whole: their root is it or holds it.
        for shown in in_fs.ancestors() {
            let Some(at) = self.by_root.get(&(own.device.clone(), shown.to_owned())) else {
                continue;
            };
            let below = in_fs.strip_prefix(shown).unwrap_or(Path::new(""));
            for &i in at {
                let name = join_below(&self.mounts[i].point, below);
                if name != path && wanted(&name) && id.is_some() && identity(&name) == id {
                    names.whole.push(name);
                }
            }
        }
        // Mounts showing a part of it: their root lies inside it.
        let inside = self
            .by_root
            .range((own.device.clone(), in_fs.clone())..)
            .skip_while(|((_, root), _)| *root == in_fs)
            .take_while(|((device, root), _)| *device == own.device && root.starts_with(&in_fs));
        for ((_, root), at) in inside {
            let own_name = join_below(path, root.strip_prefix(&in_fs).unwrap_or(Path::new("")));
            for &i in at {
                let other = &self.mounts[i];
                if other.point != own_name && wanted(&other.point) && self.shows(other) {
                    names.parts.push((other.point.clone(), own_name.clone()));
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

/// The name of `path` (canonical; a file, or the directory a file is to be made in: its
/// own name or another the host's mounts give it whole) that lies in one of `roots`, if
/// any: where CMD could write the file by that name.
pub fn name_in_roots(
    path: &Path,
    roots: &[PathBuf],
) -> Result<Option<PathBuf>, crate::error::WrapperError> {
    if roots.iter().any(|r| path.starts_with(r)) {
        return Ok(Some(path.to_owned()));
    }
    let names = host()?.other_names(path);
    let found = names
        .whole
        .iter()
        .find(|name| roots.iter().any(|r| name.starts_with(r)))
        .cloned();
    Ok(found)
}

/// How many other names a writable root may have: each is looked at for what needs
/// pinning (a host binding one directory at thousands of places would slow every run).
const MOST_OTHER_NAMES: usize = 64;

/// Each writable root's other names that lie outside every root, with what each shows by
/// the root's own name.
pub fn roots_other_names(
    roots: &[PathBuf],
) -> Result<Vec<(PathBuf, PathBuf)>, crate::error::WrapperError> {
    let table = host()?;
    let mut pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
    for root in roots {
        let names = table.other_names(root);
        let outside: Vec<(PathBuf, PathBuf)> = names
            .pairs(root)
            .into_iter()
            .filter(|(other, _)| !roots.iter().any(|r| other.starts_with(r)))
            .collect();
        if outside.len() > MOST_OTHER_NAMES {
            let shown = |p: &Path| crate::printable::printable(&p.to_string_lossy());
            let (other, own) = &outside[0];
            return Err(crate::error::WrapperError::Usage(format!(
                "the writable root {} (or a part of it) shows at {} other paths (bind \
                 mounts: {} shows {}, ...), more than the {MOST_OTHER_NAMES} netbox looks \
                 at; choose a root mounted at fewer places",
                shown(root),
                outside.len(),
                shown(other),
                shown(own),
            )));
        }
        pairs.extend(outside);
    }
    Ok(pairs)
}

/// Device and inode, following no link at the end (a name that is a link shows nothing
/// of what it leads to).
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped_and_overlaps_found_per_device() {
        let table = MountTable::parse(
            b"900027 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             900030 900027 0:40 / /tmp rw - tmpfs tmpfs rw\n\
             900031 900027 8:1 /home/me /srv/my\\040home rw - ext4 /dev/sda1 rw\n\
             900032 900027 8:2 / /data rw - ext4 /dev/sda2 rw\n\
             900034 900027 8:3 /@ /x rw - btrfs /dev/sda3 rw\n\
             900035 900027 8:3 /@home /y rw - btrfs /dev/sda3 rw\n\
             900036 900027 8:4 /a /p rw - ext4 /dev/sda4 rw\n\
             900037 900027 8:4 /a /q\\377 rw - ext4 /dev/sda4 rw\n\
             900033 900027 8:1 /gone//deleted /srv/gone rw - ext4 /dev/sda1 rw\n",
        );
        let mut overlapping: Vec<&String> = table.overlapping.iter().collect();
        overlapping.sort();
        // Not 8:3: `/@` does not hold `/@home`.
        assert_eq!(overlapping, ["8:1", "8:4"]);
        assert!(table
            .mounts
            .iter()
            .any(|m| m.point.as_os_str().as_encoded_bytes() == b"/q\xff"));
        assert_eq!(
            table.mount_of(Path::new("/srv/my home/x")).unwrap().point,
            Path::new("/srv/my home")
        );
        assert!(!table
            .mounts
            .iter()
            .any(|m| m.point == Path::new("/srv/gone")));
        assert_eq!(unescape(br"a\134b\011c\12"), b"a\\b\tc\\12");
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
