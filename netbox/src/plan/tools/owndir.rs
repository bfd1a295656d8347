//! Directories of netbox's own that sandboxed runs may write (the tool caches), changed
//! from the host only through file descriptors: each step down is opened with
//! `O_NOFOLLOW`, checked to be this user's, and what is written or removed in it is named
//! relative to it. A run that can rename things in a parent (a concurrent sandbox given
//! `--write` over it) can then swap a name for a link, but not make netbox write, delete
//! or change modes anywhere else.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// A directory netbox owns: its path (what CMD is told) and the fd it was checked by.
#[derive(Debug)]
pub struct OwnDir {
    pub path: PathBuf,
    pub fd: OwnedFd,
}

/// How deep and how large a tree [`remove_at`] walks: a planted tree of millions of
/// entries must not hold up every later start.
const MAX_DEPTH: usize = 64;
const MAX_ENTRIES: usize = 100_000;

/// How many links the walk to a cache home follows at most.
const MAX_LINKS: usize = 8;

/// Opens the cache home `path` (absolute) from `/`, one component at a time without
/// following a link, making what is missing (0700). A link on the way is followed only
/// where it stands at the top of the user's home (`~/.cache` kept elsewhere), by its own
/// text, walked by the same rule: anywhere else an earlier run given its parent to write
/// could have planted it, to send the cache, and what netbox writes there, wherever it
/// liked. Returns the directory's real path and an `O_PATH` fd of it.
// Whole: one walk down from the home, a case per component, refusing at the first
// component netbox cannot own.
pub fn open_cache_home(
    path: &Path,
    home: Option<&Path>,
    home_named: Option<&Path>,
) -> io::Result<(PathBuf, OwnedFd)> {
    use std::path::Component;
    let home_id = home.and_then(|h| std::fs::metadata(h).ok()).map(|m| {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino())
    });
    let mut wanted: Vec<std::ffi::OsString> = Vec::new();
    for part in path.components() {
        match part {
            Component::Normal(name) => wanted.push(name.to_owned()),
            Component::RootDir | Component::CurDir => {}
            _ => {
                return Err(io::Error::other(format!(
                    "{} is not a plain absolute path",
                    path.display()
                )))
            }
        }
    }
    let mut links = 0;
    'walk: loop {
        // O_PATH all the way: the walk needs only search permission, and changes no
        // mode on the way (a directory above the cache is not netbox's to change).
        let path_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut fd = nix::fcntl::open("/", path_flags, Mode::empty())?;
        let mut real = PathBuf::from("/");
        for (i, name) in wanted.iter().enumerate() {
            let stat = match fstatat(fd.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) => Some(stat),
                Err(nix::errno::Errno::ENOENT) => None,
                Err(e) => return Err(e.into()),
            };
            let kind = stat.map(|s| SFlag::from_bits_truncate(s.st_mode) & SFlag::S_IFMT);
            if kind == Some(SFlag::S_IFLNK) {
                let here = fstat(fd.as_fd())?;
                let at_home_top = home_id == Some((here.st_dev, here.st_ino));
                if links == MAX_LINKS {
                    return Err(io::Error::other(format!(
                        "the cache home {} is reached through more than {MAX_LINKS} links (a loop?); \
                         give its real path (XDG_CACHE_HOME)",
                        path.display()
                    )));
                }
                if !at_home_top {
                    return Err(io::Error::other(format!(
                        "the cache home {} is reached through the link {}, which an earlier run \
                         could have planted; give its real path (XDG_CACHE_HOME)",
                        path.display(),
                        real.join(name).display()
                    )));
                }
                links += 1;
                // The link's own text, spliced in: what it leads through is walked by
                // the same rule (a second link anywhere but at home's top is refused).
                let target = nix::fcntl::readlinkat(fd.as_fd(), name.as_os_str())?;
                let target = PathBuf::from(target);
                let joined = if target.is_absolute() {
                    // Home named as $HOME spells it (`/home` itself a link): the real home.
                    match (home_named, home) {
                        (Some(named), Some(real_home)) => match target.strip_prefix(named) {
                            Ok(rest) => real_home.join(rest),
                            Err(_) => target,
                        },
                        _ => target,
                    }
                } else {
                    real.join(target)
                };
                let mut next: Vec<std::ffi::OsString> = Vec::new();
                for part in joined.components() {
                    match part {
                        Component::Normal(n) => next.push(n.to_owned()),
                        // `real` holds no link: `..` in a link's text is read as text.
                        Component::ParentDir => {
                            next.pop();
                        }
                        _ => {}
                    }
                }
                next.extend(wanted[i + 1..].iter().cloned());
                wanted = next;
                continue 'walk;
            }
            if kind.is_none() {
                match mkdirat(
                    fd.as_fd(),
                    name.as_os_str(),
                    Mode::from_bits_truncate(0o700),
                ) {
                    Err(nix::errno::Errno::EEXIST) | Ok(()) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            fd = openat(
                fd.as_fd(),
                name.as_os_str(),
                path_flags | OFlag::O_NOFOLLOW,
                Mode::empty(),
            )
            .map_err(|e| match e {
                nix::errno::Errno::ENOTDIR => {
                    io::Error::other(format!("{} is no directory", real.join(name).display()))
                }
                e => e.into(),
            })?;
            real.push(name);
        }
        return Ok((real, fd));
    }
}

/// Opens `name` in `dir` as a directory, following no link. One this user owns but may
/// not read (an earlier run made it 0000) is made 0700 first, through an `O_PATH` fd.
fn open_dir_nofollow(
    dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    shown: &Path,
) -> io::Result<OwnedFd> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    match openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(nix::errno::Errno::EACCES) => {
            let path_fd = openat(
                dir,
                name,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            let stat = fstat(path_fd.as_fd())?;
            if stat.st_uid != nix::unistd::geteuid().as_raw() {
                return Err(io::Error::other(format!(
                    "{} is not yours",
                    shown.display()
                )));
            }
            // fchmod refuses an O_PATH fd; its /proc name reaches the same directory.
            use std::os::fd::AsRawFd;
            let by_fd = format!("/proc/self/fd/{}", path_fd.as_raw_fd());
            std::fs::set_permissions(&by_fd, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
            Ok(openat(dir, name, flags, Mode::empty())?)
        }
        Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => Err(io::Error::other(
            format!("{} is a link or no directory: remove it", shown.display()),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Opens each of `parts` below the directory `base` (held by `base_fd`), made 0700 if
/// missing, each a directory of this user's reached without following a link, and each
/// made 0700 (a group- or other-writable one would let another user swap what is below
/// it). Also returns the device and inode of each, for the caller's overlap checks.
pub fn open_own(
    base: &Path,
    base_fd: OwnedFd,
    parts: &[&str],
) -> io::Result<(OwnDir, Vec<(u64, u64)>)> {
    let mut fd = base_fd;
    let mut path = base.to_owned();
    let mut ids = Vec::new();
    for part in parts {
        match mkdirat(fd.as_fd(), *part, Mode::from_bits_truncate(0o700)) {
            Err(nix::errno::Errno::EEXIST) | Ok(()) => {}
            Err(e) => return Err(e.into()),
        }
        let next = open_dir_nofollow(fd.as_fd(), std::ffi::OsStr::new(part), &path.join(part))?;
        let stat = fstat(next.as_fd())?;
        if stat.st_uid != nix::unistd::geteuid().as_raw() {
            return Err(io::Error::other(format!(
                "{} is not yours: remove it",
                path.join(part).display()
            )));
        }
        fchmod(next.as_fd(), Mode::from_bits_truncate(0o700))?;
        ids.push((stat.st_dev, stat.st_ino));
        path.push(part);
        fd = next;
    }
    Ok((OwnDir { path, fd }, ids))
}

/// Removes `name` in `dir` whatever it is (a file, a link, a tree), following no link;
/// nothing there is no error.
pub fn remove_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let mut budget = MAX_ENTRIES;
    remove_within(dir, name, 0, &mut budget)
}

fn remove_within(
    dir: BorrowedFd<'_>,
    name: &str,
    depth: usize,
    budget: &mut usize,
) -> io::Result<()> {
    if *budget == 0 || depth > MAX_DEPTH {
        return Err(io::Error::other(
            "a tree too large or too deep to clear in a tool cache: remove the cache",
        ));
    }
    *budget -= 1;
    let stat = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(nix::errno::Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let is_dir = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
    if is_dir {
        let inner = open_dir_nofollow(dir, std::ffi::OsStr::new(name), Path::new(name))?;
        // Writable too, so its entries can be removed: it is ours.
        fchmod(inner.as_fd(), Mode::from_bits_truncate(0o700))?;
        let names: Vec<String> = {
            let listing = nix::dir::Dir::from_fd(inner.try_clone()?)?;
            let mut names = Vec::new();
            for entry in listing.into_iter() {
                let entry = entry?;
                let entry_name = entry.file_name().to_string_lossy().into_owned();
                if entry_name != "." && entry_name != ".." {
                    names.push(entry_name);
                }
                if names.len() > *budget {
                    break;
                }
            }
            names
        };
        for entry in names {
            remove_within(inner.as_fd(), &entry, depth + 1, budget)?;
        }
        unlinkat(dir, name, UnlinkatFlags::RemoveDir)?;
    } else {
        unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)?;
    }
    Ok(())
}

/// Makes `name` in `dir` a file of `text` (0600), by a staged file and a rename: a link
/// or file an earlier run left at `name` is replaced, never written through.
pub fn replace_at(dir: BorrowedFd<'_>, name: &str, text: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let staged = format!(".{name}.netbox-{}", std::process::id());
    remove_at(dir, &staged)?;
    let file = openat(
        dir,
        staged.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let mut file = std::fs::File::from(file);
    file.write_all(text)?;
    drop(file);
    // A directory at `name` (rename cannot replace it with a file) goes first.
    if fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|s| SFlag::from_bits_truncate(s.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
    {
        remove_at(dir, name)?;
    }
    renameat(dir, staged.as_str(), dir, name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_on_the_way_is_refused_and_nothing_beyond_it_is_touched() {
        let base = std::env::temp_dir().join(format!("netbox-owndir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("victim")).unwrap();
        std::fs::write(base.join("victim/keep"), "keep").unwrap();
        std::os::unix::fs::symlink(base.join("victim"), base.join("cache")).unwrap();
        let (real, fd) = open_cache_home(&base, None, None).unwrap();
        assert!(open_own(&real, fd, &["cache", "x"]).is_err());
        assert!(base.join("victim/keep").exists());
        // A link on the way to the cache home, but for one at home's top.
        assert!(open_cache_home(&base.join("cache/c"), None, None).is_err());
        assert!(!base.join("victim/c").exists());
        let (real, _) = open_cache_home(&base.join("cache/c"), Some(&base), None).unwrap();
        assert_eq!(real, std::fs::canonicalize(base.join("victim/c")).unwrap());
        // A second link, past the one at home's top, is refused: its text is walked.
        std::fs::create_dir_all(base.join("disk")).unwrap();
        std::os::unix::fs::symlink(base.join("victim"), base.join("disk/c")).unwrap();
        std::os::unix::fs::symlink(base.join("disk/c"), base.join("second")).unwrap();
        assert!(open_cache_home(&base.join("second/x"), Some(&base), None).is_err());
        assert!(!base.join("victim/x").exists());
        // Positive control: a real directory is opened, and a tree in it cleared, one
        // made unreadable included.
        std::fs::remove_file(base.join("cache")).unwrap();
        let (real, fd) = open_cache_home(&base, None, None).unwrap();
        let (own, _) = open_own(&real, fd, &["cache", "x"]).unwrap();
        assert_eq!(own.path, base.join("cache/x"));
        std::fs::create_dir_all(own.path.join("bin/deep/er")).unwrap();
        std::os::unix::fs::symlink(base.join("victim"), own.path.join("bin/link")).unwrap();
        std::fs::set_permissions(
            own.path.join("bin/deep"),
            std::os::unix::fs::PermissionsExt::from_mode(0o000),
        )
        .unwrap();
        remove_at(own.fd.as_fd(), "bin").unwrap();
        assert!(!own.path.join("bin").exists());
        assert!(base.join("victim/keep").exists());
        // A link at a name is replaced, not written through.
        std::os::unix::fs::symlink(base.join("victim/keep"), own.path.join("config.toml")).unwrap();
        replace_at(own.fd.as_fd(), "config.toml", b"[net]\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(base.join("victim/keep")).unwrap(),
            "keep"
        );
        assert_eq!(
            std::fs::read_to_string(own.path.join("config.toml")).unwrap(),
            "[net]\n"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
