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

/// Opens `base` (the user's own cache home, links and all), then each of `parts` below
/// it, made 0700 if missing, each a directory of this user's reached without following a
/// link, and each made 0700 (a group- or other-writable one would let another user swap
/// what is below it).
pub fn open_own(base: &Path, parts: &[&str]) -> io::Result<OwnDir> {
    let mut fd = nix::fcntl::open(
        base,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut path = base.to_owned();
    for part in parts {
        match mkdirat(fd.as_fd(), *part, Mode::from_bits_truncate(0o700)) {
            Err(nix::errno::Errno::EEXIST) | Ok(()) => {}
            Err(e) => return Err(e.into()),
        }
        let next = openat(
            fd.as_fd(),
            *part,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => io::Error::other(format!(
                "{} is a link or no directory: remove it",
                path.join(part).display()
            )),
            e => e.into(),
        })?;
        let stat = fstat(next.as_fd())?;
        if stat.st_uid != nix::unistd::geteuid().as_raw() {
            return Err(io::Error::other(format!(
                "{} is not yours: remove it",
                path.join(part).display()
            )));
        }
        fchmod(next.as_fd(), Mode::from_bits_truncate(0o700))?;
        path.push(part);
        fd = next;
    }
    Ok(OwnDir { path, fd })
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
        let inner = openat(
            dir,
            name,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        // An unreadable directory (a run made it 0000) is made readable: it is ours.
        let _ = fchmod(inner.as_fd(), Mode::from_bits_truncate(0o700));
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
        assert!(open_own(&base, &["cache", "x"]).is_err());
        assert!(base.join("victim/keep").exists());
        // Positive control: a real directory is opened, and a tree in it cleared.
        std::fs::remove_file(base.join("cache")).unwrap();
        let own = open_own(&base, &["cache", "x"]).unwrap();
        assert_eq!(own.path, base.join("cache/x"));
        std::fs::create_dir_all(own.path.join("bin/deep/er")).unwrap();
        std::os::unix::fs::symlink(base.join("victim"), own.path.join("bin/link")).unwrap();
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
