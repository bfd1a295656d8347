//! A directory named to `netbox export`: its entries are listed through held directory
//! fds, walking down with O_NOFOLLOW, so no link is followed at any depth. Each regular
//! file found is then exported as a named file is (walked again from `--from`, with every
//! check); anything else is refused by name, with what it is.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::AtFlags;
use nix::sys::stat::{fstatat, SFlag};

/// Most entries listed under one directory named: a tree a sandbox wrote can be made as
/// large as its disk allows.
const MAX_ENTRIES: usize = 100_000;

/// Deepest directory listed, counted from the one named.
const MAX_DEPTH: usize = 64;

/// What a directory holds, by path relative to `--from`.
#[derive(Debug, Default)]
pub struct Listing {
    /// Directories, the named one first, each before what it holds.
    pub dirs: Vec<PathBuf>,
    /// Regular files: exported one by one.
    pub files: Vec<PathBuf>,
    /// Entries refused while listing, with why.
    pub refused: Vec<(PathBuf, String)>,
}

/// Lists the tree under `dir` (opened by the caller without following a link), which is
/// `base` relative to `--from`.
pub fn list(dir: OwnedFd, base: &Path) -> Listing {
    let mut listing = Listing::default();
    let mut pending = vec![(dir, base.to_owned(), 0)];
    let mut seen = 0;
    while let Some((fd, at, depth)) = pending.pop() {
        listing.dirs.push(at.clone());
        let names = match names_in(fd.try_clone()) {
            Ok(names) => names,
            Err(e) => {
                listing.refused.push((at, format!("cannot list it: {e}")));
                continue;
            }
        };
        for name in names {
            seen += 1;
            let path = at.join(&name);
            if seen > MAX_ENTRIES {
                listing.refused.push((
                    at.clone(),
                    format!("over {MAX_ENTRIES} entries: the rest of the tree is not listed"),
                ));
                return listing;
            }
            let kind = match fstatat(&fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) => SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()),
                Err(e) => {
                    listing
                        .refused
                        .push((path, format!("cannot look at it: {}", e.desc())));
                    continue;
                }
            };
            match kind {
                SFlag::S_IFREG => listing.files.push(path),
                SFlag::S_IFDIR if depth + 1 > MAX_DEPTH => listing.refused.push((
                    path,
                    format!("deeper than {MAX_DEPTH} directories: not listed"),
                )),
                SFlag::S_IFDIR => match super::open_dir_at(&fd, Path::new(&name)) {
                    Ok(sub) => pending.push((sub, path, depth + 1)),
                    Err(e) => listing
                        .refused
                        .push((path, format!("cannot open it: {}", e.desc()))),
                },
                _ => {
                    let what = super::kind_name(kind);
                    listing
                        .refused
                        .push((path, format!("it is {what}, not a regular file")));
                }
            }
        }
    }
    // Parents before children, and files in a stable order to report them by.
    listing.dirs.sort();
    listing.files.sort();
    listing.refused.sort();
    listing
}

/// The names in a directory, `.` and `..` left out.
fn names_in(fd: std::io::Result<OwnedFd>) -> Result<Vec<std::ffi::OsString>, String> {
    let fd = fd.map_err(|e| e.to_string())?;
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(|e| e.desc().to_owned())?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry.map_err(|e| e.desc().to_owned())?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name != "." && name != ".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}
