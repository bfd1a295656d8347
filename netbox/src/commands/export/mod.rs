//! `netbox export --from DIR --to DIR [--max-bytes N] PATH…`: copies named files, and the
//! files of named directories (tree.rs), out of a directory a sandbox wrote, treating that
//! directory as hostile. `--to` is created if it is missing.
//!
//! Every path is walked one component at a time from a held directory fd, with
//! O_NOFOLLOW: no symlink is ever followed, at any depth. `--from` and `--to` too, from
//! `/` or the current directory: a sandbox that can write where they lead can plant a
//! link at any of their components (`--from ws/out/logs` with `ws/out` made a link to a
//! directory elsewhere on the host would export the host's files), so a link anywhere in
//! them is refused, named with where it points. A file is looked at before it is
//! opened (fstatat without following: only a regular file is opened at all, so no fifo
//! blocks and no device is touched), opened O_NOFOLLOW|O_NONBLOCK, and `fstat` on the open
//! fd must then show the same regular file, with a link count of 1 (a hard link could make
//! it some other file's content) and a size within the bound. Exactly that many bytes are
//! read; a byte more, or a different `fstat` afterwards (size, times, inode), means the
//! file changed under us and it is refused. The destination is created O_EXCL|O_NOFOLLOW,
//! so nothing there is overwritten or followed either.

use crate::printable::printable;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};

use crate::cli::ExportArgs;
use crate::error::WrapperError;

mod tree;

/// What happened to one requested path.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Exported { bytes: u64 },
    Refused(String),
}

/// Runs `netbox export`; exit status 0 if every path was exported, 1 if any was refused.
pub fn run(args: &ExportArgs) -> Result<u8, WrapperError> {
    let from = open_walked(&args.from, "export", "--from directory")?;
    let to = open_walked_creating(&args.to, "export", "--to directory")?;
    let mut refused = 0;
    for path in &args.paths {
        match named_dir(&from, path) {
            Some(dir) => refused += export_tree(&from, &to, dir, path, args.max_bytes),
            None => match export_one(&from, &to, path, args.max_bytes) {
                Outcome::Exported { bytes } => {
                    crate::output::say(&format!("exported {} ({bytes} bytes)", shown(path)));
                }
                Outcome::Refused(reason) => {
                    refused += 1;
                    say_refused(path, &reason);
                }
            },
        }
    }
    Ok(u8::from(refused > 0))
}

fn say_refused(path: &Path, reason: &str) {
    crate::output::say(&format!("refused {}: {}", shown(path), printable(reason)));
}

/// The directory `path` names under `from` (`.` is `from` itself), opened without
/// following a link; `None` if it is no directory, which `export_one` then says.
fn named_dir(from: &OwnedFd, path: &Path) -> Option<OwnedFd> {
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return None;
    }
    let parts = path.components().filter_map(|c| match c {
        Component::Normal(part) => Some(part),
        _ => None,
    });
    walk(from.try_clone().ok()?, parts, PathBuf::new(), false).ok()
}

/// Exports every regular file under the directory `dir` (`path` under `--from`) and makes
/// its directories; returns how many entries were refused. One line says what went, one
/// line each what did not.
fn export_tree(from: &OwnedFd, to: &OwnedFd, dir: OwnedFd, path: &Path, max_bytes: u64) -> usize {
    let base: PathBuf = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let listing = tree::list(dir, &base);
    let mut refused = listing.refused.len();
    for (entry, reason) in &listing.refused {
        say_refused(entry, reason);
    }
    for dir in listing.dirs.iter().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(reason) = make_dirs(to, dir) {
            refused += 1;
            say_refused(dir, &reason);
        }
    }
    let (mut files, mut bytes) = (0, 0);
    for file in &listing.files {
        match export_one(from, to, file, max_bytes) {
            Outcome::Exported { bytes: n } => {
                files += 1;
                bytes += n;
            }
            Outcome::Refused(reason) => {
                refused += 1;
                say_refused(file, &reason);
            }
        }
    }
    let shown_dir = if base.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        shown(&base)
    };
    crate::output::say(&format!(
        "exported {shown_dir}/: {files} files ({bytes} bytes), {} directories{}",
        listing.dirs.len(),
        if refused > 0 {
            format!(", {refused} refused")
        } else {
            String::new()
        }
    ));
    refused
}

/// A path as printed: the sandbox chose its name, and an escape or carriage return in it
/// could forge or erase lines on the terminal.
fn shown(path: &Path) -> String {
    printable(&path.to_string_lossy())
}

fn export_dir_error(path: &Path, what: &'static str, e: Errno) -> WrapperError {
    WrapperError::Path {
        path: path.to_owned(),
        what,
        source: std::io::Error::from(e),
    }
}

fn open_dir_at<Fd: AsFd>(dir: Fd, name: &Path) -> Result<OwnedFd, Errno> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Opens the directory `path` names (`--from`, `--to`, learn's `-o`), walked from `/` or
/// the current directory one component at a time: no symlink in it is followed, and one
/// met is named, with where it points, in the error (`command` and `what` say whose path
/// it was).
pub fn open_walked(
    path: &Path,
    command: &'static str,
    what: &'static str,
) -> Result<OwnedFd, WrapperError> {
    open_walked_with(path, command, what, false)
}

/// As [`open_walked`], creating each directory that is missing (mode 0755), and saying so.
pub fn open_walked_creating(
    path: &Path,
    command: &'static str,
    what: &'static str,
) -> Result<OwnedFd, WrapperError> {
    match open_walked_with(path, command, what, false) {
        Err(WrapperError::Path { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            let dir = open_walked_with(path, command, what, true)?;
            crate::output::say(&format!("created {}", shown(path)));
            Ok(dir)
        }
        opened => opened,
    }
}

fn open_walked_with(
    path: &Path,
    command: &'static str,
    what: &'static str,
    create: bool,
) -> Result<OwnedFd, WrapperError> {
    let start = if path.has_root() { "/" } else { "." };
    let dir = open_dir_at(nix::fcntl::AT_FDCWD, Path::new(start))
        .map_err(|e| export_dir_error(path, what, e))?;
    let parts = path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name),
        Component::ParentDir => Some(OsStr::new("..")),
        _ => None,
    });
    let walked = if path.has_root() { "/" } else { "" };
    walk(dir, parts, PathBuf::from(walked), create).map_err(|stop| match stop.link_to {
        Some(target) => WrapperError::WalkThroughSymlink {
            command,
            what,
            path: path.to_owned(),
            link: stop.at,
            target: printable(&target.to_string_lossy()),
        },
        None => export_dir_error(path, what, stop.errno),
    })
}

/// Where a walk stopped: the path walked up to the component that could not be opened,
/// why, and the link's target if that component is a symlink.
struct Stop {
    at: PathBuf,
    errno: Errno,
    link_to: Option<OsString>,
}

/// Walks down `parts` from `dir`, one directory at a time with O_NOFOLLOW; `walked` is
/// what `dir` was reached by, to name where the walk stopped. `create`: a directory that
/// is missing is made (mode 0755) and opened as any other.
fn walk<'a>(
    mut dir: OwnedFd,
    parts: impl IntoIterator<Item = &'a OsStr>,
    mut walked: PathBuf,
    create: bool,
) -> Result<OwnedFd, Stop> {
    for part in parts {
        walked.push(part);
        let mut opened = open_dir_at(&dir, Path::new(part));
        if create && matches!(opened, Err(Errno::ENOENT)) {
            opened = match mkdirat(&dir, part, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => open_dir_at(&dir, Path::new(part)),
                Err(e) => Err(e),
            };
        }
        dir = match opened {
            Ok(next) => next,
            Err(errno) => {
                // What stands there, as the held directory has it (not followed).
                let link_to = fstatat(&dir, part, AtFlags::AT_SYMLINK_NOFOLLOW)
                    .ok()
                    .filter(|stat| stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits())
                    .map(|_| {
                        nix::fcntl::readlinkat(&dir, part)
                            .unwrap_or_else(|_| OsString::from("somewhere unreadable"))
                    });
                return Err(Stop {
                    at: walked,
                    errno,
                    link_to,
                });
            }
        };
    }
    Ok(dir)
}

/// The plain components of a relative path; anything else (absolute, `..`) is refused.
fn components(path: &Path) -> Result<Vec<&OsStr>, String> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => return Err("only plain relative paths inside --from are exported".into()),
        }
    }
    if parts.is_empty() {
        return Err("empty path".into());
    }
    Ok(parts)
}

/// Copies one file; never follows a link, never overwrites.
pub fn export_one(from: &OwnedFd, to: &OwnedFd, path: &Path, max_bytes: u64) -> Outcome {
    match copy(from, to, path, max_bytes) {
        Ok(bytes) => Outcome::Exported { bytes },
        Err(reason) => Outcome::Refused(reason),
    }
}

fn copy(from: &OwnedFd, to: &OwnedFd, path: &Path, max_bytes: u64) -> Result<u64, String> {
    let parts = components(path)?;
    let (name, dirs) = parts.split_last().ok_or("empty path")?;
    // Walk the source directories without following anything.
    let from = from.try_clone().map_err(|e| e.to_string())?;
    let src_dir = walk(from, dirs.iter().copied(), PathBuf::new(), false).map_err(|stop| {
        let at = stop.at.display();
        match (stop.link_to, stop.errno) {
            (Some(target), _) => format!(
                "{at} is not a plain directory (a symbolic link to {})",
                target.to_string_lossy()
            ),
            (None, Errno::ELOOP | Errno::ENOTDIR) => format!("{at} is not a plain directory"),
            (None, e) => format!("cannot open {at}: {}", e.desc()),
        }
    })?;
    // Look before opening: only a regular file is opened at all.
    let before = fstatat(&src_dir, *name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| format!("cannot look at it: {}", e.desc()))?;
    check_plain_file(&before, max_bytes)?;
    let file = openat(
        &src_dir,
        *name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open it: {}", e.desc()))?;
    let opened = fstat(&file).map_err(|e| format!("cannot stat it: {}", e.desc()))?;
    check_plain_file(&opened, max_bytes)?;
    if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino) {
        return Err("it was replaced while being opened".into());
    }
    crate::testhooks::pause(crate::testhooks::hooks().export_pause);
    let content = read_exactly(&file, u64::try_from(opened.st_size).unwrap_or(u64::MAX))?;
    let after = fstat(&file).map_err(|e| format!("cannot stat it: {}", e.desc()))?;
    if !same_file_state(&opened, &after) {
        return Err("it changed while being read".into());
    }
    write_destination(to, dirs, name, &content)?;
    Ok(content.len() as u64)
}

fn check_plain_file(stat: &FileStat, max_bytes: u64) -> Result<(), String> {
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    if kind != SFlag::S_IFREG {
        return Err(format!("it is {}, not a regular file", kind_name(kind)));
    }
    if stat.st_nlink != 1 {
        return Err(format!(
            "it has {} hard links, and only a file with one is exported: a hard link is \
             another name for a file that may lie outside what the sandbox wrote (one of \
             yours it could reach), whose content the copy would carry out; if you know \
             the file, copy it yourself",
            stat.st_nlink
        ));
    }
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if size > max_bytes {
        return Err(format!("it is {size} bytes, over --max-bytes {max_bytes}"));
    }
    Ok(())
}

/// What a file of this kind is, in words.
fn kind_name(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFIFO => "a fifo",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        _ => "not a regular file",
    }
}

fn same_file_state(a: &FileStat, b: &FileStat) -> bool {
    (
        a.st_dev,
        a.st_ino,
        a.st_size,
        a.st_mtime,
        a.st_mtime_nsec,
        a.st_ctime,
        a.st_ctime_nsec,
    ) == (
        b.st_dev,
        b.st_ino,
        b.st_size,
        b.st_mtime,
        b.st_mtime_nsec,
        b.st_ctime,
        b.st_ctime_nsec,
    )
}

/// Reads exactly `size` bytes; a short file or one byte more means it changed.
fn read_exactly(file: &OwnedFd, size: u64) -> Result<Vec<u8>, String> {
    let size = usize::try_from(size).map_err(|_| "too large for this machine".to_string())?;
    let mut content = vec![0u8; size];
    let mut filled = 0;
    while filled < size {
        match nix::unistd::read(file, &mut content[filled..]) {
            Ok(0) => return Err("it shrank while being read".into()),
            Ok(n) => filled += n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(format!("cannot read it: {}", e.desc())),
        }
    }
    let mut extra = [0u8; 1];
    match nix::unistd::read(file, &mut extra) {
        Ok(0) => Ok(content),
        Ok(_) => Err("it grew while being read".into()),
        Err(e) => Err(format!("cannot read it: {}", e.desc())),
    }
}

/// Makes the directory `path` under `to` (and those above it) if missing.
fn make_dirs(to: &OwnedFd, path: &Path) -> Result<(), String> {
    let parts: Vec<&OsStr> = path.iter().collect();
    destination_dir(to, &parts).map(drop)
}

/// The directory `dirs` under `to`, each made if missing; nothing there is followed.
fn destination_dir(to: &OwnedFd, dirs: &[&OsStr]) -> Result<OwnedFd, String> {
    let mut dst_dir = to.try_clone().map_err(|e| e.to_string())?;
    let mut shown = PathBuf::new();
    for dir in dirs {
        shown.push(dir);
        match mkdirat(&dst_dir, *dir, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(format!("cannot create {}: {}", shown.display(), e.desc())),
        }
        dst_dir = open_dir_at(&dst_dir, Path::new(dir)).map_err(|e| {
            format!(
                "destination {} is not a plain directory: {}",
                shown.display(),
                e.desc()
            )
        })?;
    }
    Ok(dst_dir)
}

/// Creates the destination under `to`, mirroring the source's directories; nothing there
/// is followed or overwritten.
fn write_destination(
    to: &OwnedFd,
    dirs: &[&OsStr],
    name: &OsStr,
    content: &[u8],
) -> Result<(), String> {
    let dst_dir = destination_dir(to, dirs)?;
    let out = openat(
        &dst_dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|e| match e {
        Errno::EEXIST => "the destination already exists".to_string(),
        e => format!("cannot create the destination: {}", e.desc()),
    })?;
    let mut out = std::fs::File::from(out);
    out.write_all(content)
        .and_then(|()| out.sync_all())
        .map_err(|e| format!("cannot write the destination: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths() {
        assert!(components(Path::new("a/b.txt")).is_ok());
        assert!(components(Path::new("./a.txt")).is_ok());
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            assert!(components(Path::new(bad)).is_err(), "{bad}");
        }
    }
}
