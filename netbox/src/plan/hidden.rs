//! What `--hide` covers, for what netbox copies from the host into a place the sandbox sees
//! (a tool's settings seeded into netbox's cache, `--upstream-ca` in the trust bundle): a
//! copy would carry past the cover what the user hid, so nothing under a hidden path is
//! copied, whatever name it is reached by.
//!
//! A file counts as hidden when its path as given, its directory's real path with its
//! name, or the real path of what was opened lies in a hidden path; or when it, or a
//! directory above it, is a hidden path under another name (same device and inode: a bind
//! mount, a hard link to a hidden file). A hard link, elsewhere, to a file inside a hidden
//! directory is not found: nothing short of walking the directory would find it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The hidden path (from `hidden`, canonical as `--hide` keeps them) that covers `path`.
pub fn covering(path: &Path, hidden: &[PathBuf]) -> Option<PathBuf> {
    if hidden.is_empty() {
        return None;
    }
    let mut names: Vec<PathBuf> = vec![path.to_owned()];
    if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
        if let Ok(real) = std::fs::canonicalize(parent) {
            names.push(real.join(name));
        }
    }
    if let Ok(real) = std::fs::canonicalize(path) {
        names.push(real);
    }
    covering_any(&names, hidden)
}

/// The hidden path covering any of `names` (each another name for one file).
fn covering_any(names: &[PathBuf], hidden: &[PathBuf]) -> Option<PathBuf> {
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let hidden_ids: Vec<(&PathBuf, (u64, u64))> =
        hidden.iter().filter_map(|h| Some((h, id(h)?))).collect();
    for name in names {
        if let Some(h) = hidden.iter().find(|h| name.starts_with(h)) {
            return Some(h.clone());
        }
        for above in name.ancestors() {
            let Some(here) = id(above) else { continue };
            if let Some((h, _)) = hidden_ids.iter().find(|(_, i)| *i == here) {
                return Some((*h).clone());
            }
        }
    }
    None
}

/// What reading a file to copy found.
#[derive(Debug, PartialEq, Eq)]
pub enum ToCopy {
    /// Its text.
    Text(String),
    /// `--hide` covers it (this hidden path does): it is not read.
    Hidden(PathBuf),
    /// There is none.
    Absent,
    /// Not a regular file of at most the size asked, or unreadable: why.
    Unreadable(String),
}

/// Reads `path` to copy into the sandbox, unless `--hide` covers it: by the names
/// [`covering`] checks, and by the real path and identity of the very file opened (so a
/// link changed between the check and the read is caught too). A FIFO or device in its
/// place is not waited on; at most `max_bytes` are read.
pub fn read_to_copy(path: &Path, hidden: &[PathBuf], max_bytes: u64) -> ToCopy {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(h) = covering(path, hidden) {
        return ToCopy::Hidden(h);
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ToCopy::Absent,
        Err(e) => return ToCopy::Unreadable(e.to_string()),
    };
    // What was opened, by its descriptor: its real path, and itself by identity.
    if let Ok(real) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        if let Some(h) = covering_any(&[real], hidden) {
            return ToCopy::Hidden(h);
        }
    }
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return ToCopy::Unreadable(e.to_string()),
    };
    let opened = (meta.dev(), meta.ino());
    let is_hidden_file =
        |h: &&PathBuf| std::fs::metadata(h).is_ok_and(|m| (m.dev(), m.ino()) == opened);
    if let Some(h) = hidden.iter().find(is_hidden_file) {
        return ToCopy::Hidden(h.clone());
    }
    if !meta.is_file() {
        return ToCopy::Unreadable("not a regular file".into());
    }
    let mut text = String::new();
    // One byte past the limit tells a file cut short from one at it.
    if let Err(e) = file
        .take(max_bytes.saturating_add(1))
        .read_to_string(&mut text)
    {
        return ToCopy::Unreadable(e.to_string());
    }
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > max_bytes {
        return ToCopy::Unreadable(format!("larger than {max_bytes} bytes"));
    }
    ToCopy::Text(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_hidden_by_any_name_it_is_reached_by() {
        let base = std::env::temp_dir().join(format!("netbox-hidden-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("home/.cargo")).unwrap();
        std::fs::create_dir_all(base.join("dotfiles")).unwrap();
        let base = std::fs::canonicalize(&base).unwrap();
        let config = base.join("home/.cargo/config.toml");
        std::fs::write(&config, "[registry]\ntoken = \"t\"\n").unwrap();
        let read = |hidden: &[PathBuf]| read_to_copy(&config, hidden, 1 << 20);
        // Positive control: nothing hidden, the text is read.
        assert!(matches!(read(&[]), ToCopy::Text(t) if t.contains("token")));
        assert!(matches!(read(&[base.join("dotfiles")]), ToCopy::Text(_)));
        // The file itself, its directory.
        assert_eq!(
            read(std::slice::from_ref(&config)),
            ToCopy::Hidden(config.clone())
        );
        let dir = base.join("home/.cargo");
        assert_eq!(
            read(std::slice::from_ref(&dir)),
            ToCopy::Hidden(dir.clone())
        );
        // Reached through a link into a hidden directory.
        std::fs::rename(&config, base.join("dotfiles/cargo.toml")).unwrap();
        std::os::unix::fs::symlink(base.join("dotfiles/cargo.toml"), &config).unwrap();
        let dotfiles = base.join("dotfiles");
        assert_eq!(
            read(std::slice::from_ref(&dotfiles)),
            ToCopy::Hidden(dotfiles.clone())
        );
        // A directory spelled through a link to a hidden one.
        std::os::unix::fs::symlink(base.join("home/.cargo"), base.join("cargo-link")).unwrap();
        assert_eq!(
            read_to_copy(
                &base.join("cargo-link/config.toml"),
                std::slice::from_ref(&dir),
                1 << 20
            ),
            ToCopy::Hidden(dir.clone())
        );
        // A hard link to a hidden file, under another name.
        std::fs::hard_link(base.join("dotfiles/cargo.toml"), base.join("second.toml")).unwrap();
        let hidden_file = base.join("dotfiles/cargo.toml");
        assert_eq!(
            read_to_copy(
                &base.join("second.toml"),
                std::slice::from_ref(&hidden_file),
                1 << 20
            ),
            ToCopy::Hidden(hidden_file.clone())
        );
        assert_eq!(
            read_to_copy(&base.join("missing.toml"), &[], 1 << 20),
            ToCopy::Absent
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
