//! netbox's cache home (`$XDG_CACHE_HOME/netbox`, else `~/.cache/netbox`) holds every
//! tool's cache of every workspace: cargo's copy of the user's settings, pip's wheels,
//! npm's and go's downloads. No sandbox sees it but for its own run's caches: the mount
//! plan covers it with a read-only tmpfs holding only the mountpoints of the run's caches,
//! which are attached there writable (sandbox/mounts.rs, `MountOp::Cover`). So one
//! workspace's run reads nothing another workspace's run left, a copy of settings a later
//! `--hide` hides included, and nothing there is left for netbox to clean.

use std::path::{Path, PathBuf};

/// The directories of netbox's cache home to cover in this run's sandbox, as real paths:
/// `CACHE_HOME/netbox` as the run names it (`XDG_CACHE_HOME`, else `~/.cache`), and
/// `~/.cache/netbox` too when `XDG_CACHE_HOME` points elsewhere (runs with another
/// environment keep their caches there); each that exists as a directory when the run
/// starts (the run's own caches, made before this, are in it). Nothing is made for it: a
/// run leaves no trace in a home it caches nothing in. One that a writable root is has
/// been given to CMD whole, and is not covered.
pub fn cache_homes_to_cover(write_roots: &[PathBuf]) -> Vec<PathBuf> {
    let home_cache = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .map(|h| h.join(".cache"));
    let mut covers: Vec<PathBuf> = Vec::new();
    for base in [super::caches::cache_home(), home_cache]
        .into_iter()
        .flatten()
    {
        let Ok(real) = std::fs::canonicalize(base.join("netbox")) else {
            continue;
        };
        if real.is_dir() && !is_a_root(&real, write_roots) && !covers.contains(&real) {
            covers.push(real);
        }
    }
    // One inside another is covered with it.
    let all = covers.clone();
    covers.retain(|c| !all.iter().any(|o| o != c && c.starts_with(o)));
    covers
}

/// Whether a writable root is `dir`, by path or as another name for it (a bind mount).
fn is_a_root(dir: &Path, write_roots: &[PathBuf]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let own = id(dir);
    write_roots
        .iter()
        .any(|r| r == dir || (own.is_some() && id(r) == own))
}
