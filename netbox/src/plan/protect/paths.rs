//! Paths as netbox must see them before it pins anything: no symlink in a writable root's
//! own path, git's shared configuration files found where git finds them, real paths.

use std::path::{Path, PathBuf};

use crate::error::WrapperError;

/// Refuses `path` (as the user named it) if resolving it meets a symlink inside a
/// writable root: CMD could point that link elsewhere, so what netbox pins (or reads next
/// time) would no longer be what the name leads to. Symlinks outside the roots are
/// followed, as the kernel would; a missing component ends the check (nothing beyond it
/// exists to be a link).
pub fn refuse_symlinks_in_roots(
    path: &Path,
    roots: &[PathBuf],
    what: &'static str,
) -> Result<(), WrapperError> {
    use std::path::Component;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    // What is left to resolve, last component first: a link's target is put back in
    // front, so every component met on the way is checked, as the kernel meets them.
    let mut left: Vec<std::ffi::OsString> = Vec::new();
    push_components(&mut left, &absolute);
    // Where resolution has got to: always a real path, no symlink in it.
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = left.pop() {
        match Path::new(&name).components().next() {
            Some(Component::ParentDir) => {
                at.pop();
                continue;
            }
            Some(Component::Normal(_)) => {}
            _ => continue,
        }
        let next = at.join(&name);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Some(root) = roots.iter().find(|r| next.starts_with(r)) {
                    return Err(WrapperError::SymlinkInRoot {
                        what,
                        path: path.to_owned(),
                        link: next,
                        root: root.clone(),
                    });
                }
                hops += 1;
                let Ok(target) = std::fs::read_link(&next) else {
                    return Ok(());
                };
                if hops > MAX_SYMLINK_HOPS {
                    // The kernel would give up too (ELOOP): nothing lies beyond.
                    return Ok(());
                }
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                push_components(&mut left, &target);
            }
            Ok(_) => at = next,
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

/// Symlinks followed in one path at most, as the kernel (MAXSYMLINKS).
pub(super) const MAX_SYMLINK_HOPS: usize = 40;

/// Pushes `path`'s components so that the first is popped first (`.` dropped, `..` kept).
pub(super) fn push_components(left: &mut Vec<std::ffi::OsString>, path: &Path) {
    use std::path::Component;
    let parts: Vec<std::ffi::OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    left.extend(parts.into_iter().rev());
}

/// The config files every repository reads besides its own (git-config(1) FILES): the
/// system one and the global ones, or the files `GIT_CONFIG_SYSTEM` and
/// `GIT_CONFIG_GLOBAL` name.
pub(super) fn shared_git_configs(home: Option<&Path>) -> Vec<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let mut configs = Vec::new();
    // git reads it as a boolean: `false`, `no`, `off`, `0` or empty still read the file.
    let no_system = std::env::var("GIT_CONFIG_NOSYSTEM").is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "false" | "no" | "off" | "0"
        )
    });
    if !no_system {
        match from_env("GIT_CONFIG_SYSTEM") {
            Some(system) => configs.push(system),
            None => configs.extend(system_configs()),
        }
    }
    match from_env("GIT_CONFIG_GLOBAL") {
        Some(global) => configs.push(global),
        None => {
            let xdg = from_env("XDG_CONFIG_HOME")
                .filter(|p| p.is_absolute())
                .or_else(|| home.map(|h| h.join(".config")));
            configs.extend(xdg.map(|x| x.join("git/config")));
            configs.extend(home.map(|h| h.join(".gitconfig")));
        }
    }
    configs
}

/// The system config of each git on `PATH`: `/etc/gitconfig` for a distribution's,
/// `PREFIX/etc/gitconfig` for one built or installed elsewhere (`/usr/local`, a home
/// manager's prefix), since git's is set when it is built.
pub(super) fn system_configs() -> Vec<PathBuf> {
    let mut configs = vec![PathBuf::from("/etc/gitconfig")];
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).filter(|d| d.is_absolute()) {
        // One stat first: canonicalizing a path that is not there reads each of its
        // directories' links before failing, for every directory on PATH.
        let candidate = dir.join("git");
        if std::fs::metadata(&candidate).is_err() {
            continue;
        }
        let Ok(git) = std::fs::canonicalize(&candidate) else {
            continue;
        };
        if let Some(prefix) = git.parent().and_then(Path::parent) {
            let config = prefix.join("etc/gitconfig");
            if !configs.contains(&config) {
                configs.push(config);
            }
        }
    }
    configs
}

/// Where `path` leads, and its first missing component if it does not exist: the
/// longest existing ancestor resolved (symlinks outside the roots followed, as the
/// kernel would), the rest appended. Where the rest climbs with `..` (`build/../hooks`
/// with `build` missing), where it leads depends on what CMD makes `build`: only the
/// first missing component is known, and the path is left unresolved.
pub(super) fn real_path(path: &Path) -> Option<(PathBuf, Option<PathBuf>)> {
    let absolute = std::path::absolute(path).ok()?;
    for ancestor in absolute.ancestors() {
        let Ok(real) = std::fs::canonicalize(ancestor) else {
            continue;
        };
        let rest = absolute.strip_prefix(ancestor).ok()?;
        if rest.as_os_str().is_empty() {
            return Some((real, None));
        }
        let mut components = rest.components();
        let first = real.join(components.next()?);
        if !rest
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            return Some((absolute.clone(), Some(first)));
        }
        return Some((real.join(rest), Some(first)));
    }
    None
}

/// A gitdir or commondir file's text (only a small regular file, opened without
/// blocking), byte for byte: git writes the path's bytes as they are, so the text is
/// `paths/exact_text.rs`'s, and a path is made from it with `path_of`.
pub fn read_git_pointer(path: &Path) -> std::io::Result<String> {
    use std::os::unix::ffi::OsStrExt;
    bridge::small_file::read_small_bytes(path, 64 << 10)
        .map(|bytes| crate::paths::exact_text::text_of(std::ffi::OsStr::from_bytes(&bytes)))
}

/// The path a gitdir or commondir file's text names: git takes off the line ends at its
/// end and nothing else (a submodule named `foo ` has its git directory at
/// `modules/foo `, not at another submodule's `modules/foo`), then reads what is left as
/// a C string (it ends at a NUL byte): in that order, so `../gd\r\0x` is `../gd\r`.
pub fn pointed_path(text: &str) -> PathBuf {
    let text = text.trim_end_matches(['\n', '\r']);
    let text = text.split('\0').next().unwrap_or_default();
    crate::paths::exact_text::path_of(text)
}

/// The path a `.git` file's text (`gitdir: PATH`) names, as git's read_gitfile takes it:
/// all after `gitdir: `, line ends off its end. (`gitdir:` with no space, which git
/// refuses, is read too: more is pinned, never less.)
pub fn gitfile_target(text: &str) -> Option<PathBuf> {
    let rest = text
        .strip_prefix("gitdir: ")
        .or_else(|| text.strip_prefix("gitdir:"))?;
    Some(pointed_path(rest))
}

/// A `PATH` entry as the programs that search it read it: relative to the current
/// directory, and, where it starts with `~`, `~user`, `~+` or `~-`, also as bash reads it,
/// expanded (dash, execvp and git take the `~` literally, bash expands it: both count).
pub(super) fn path_entry(entry: &Path, cwd: &Path) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut readings = vec![cwd.join(entry)];
    let text = entry.as_os_str().as_bytes();
    if let Some(rest) = text.strip_prefix(b"~") {
        let at = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
        let (word, tail) = rest.split_at(at);
        let tail = Path::new(std::ffi::OsStr::from_bytes(
            tail.strip_prefix(b"/").unwrap_or(tail),
        ));
        let base = match word {
            b"" => std::env::var_os("HOME").map(PathBuf::from),
            b"+" => Some(cwd.to_owned()),
            b"-" => std::env::var_os("OLDPWD").map(PathBuf::from),
            user => std::str::from_utf8(user)
                .ok()
                .and_then(crate::plan::homesplit::account_home),
        };
        if let Some(base) = base.filter(|b| b.is_absolute()) {
            readings.push(if tail.as_os_str().is_empty() {
                base
            } else {
                base.join(tail)
            });
        }
    }
    readings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_entry_is_read_as_each_searcher_reads_it() {
        let cwd = Path::new("/work/proj");
        let home = PathBuf::from(std::env::var_os("HOME").unwrap());
        let one = |entry: &str| path_entry(Path::new(entry), cwd);
        assert_eq!(one("bin"), [cwd.join("bin")]);
        assert_eq!(one(""), [cwd.join("")]);
        assert_eq!(one("/usr/bin"), [PathBuf::from("/usr/bin")]);
        // Taken literally too: dash and git search `./~/bin`.
        assert_eq!(one("~"), [cwd.join("~"), home.clone()]);
        assert_eq!(
            one("~/proj/bin"),
            [cwd.join("~/proj/bin"), home.join("proj/bin")]
        );
        assert_eq!(one("~+/bin"), [cwd.join("~+/bin"), cwd.join("bin")]);
        assert_eq!(
            one("~root/bin"),
            [cwd.join("~root/bin"), PathBuf::from("/root/bin")]
        );
        // No such account: only the literal name.
        assert_eq!(
            one("~no-such-user-here/bin"),
            [cwd.join("~no-such-user-here/bin")]
        );
    }
}
