//! `--bind SRC DST` and `--ro-bind SRC DST`: the host's SRC shown at DST as well. A bind is
//! an alias inside the sandbox: DST shows what the sandbox sees at SRC, every hide, pin and
//! protection netbox lays under SRC included, so it is never a second way past what SRC's
//! own path allows. `--bind` makes SRC a writable root (as `--write` does); `--ro-bind`
//! shows it read-only at DST.
//!
//! The sandbox's root is the host's own, read-only, so no mountpoint can be made in it: DST
//! must exist already, as SRC's kind (a directory or a file), or lie under the sandbox's own
//! `/tmp`, where it is made.

use std::path::{Component, Path, PathBuf};

use super::roots::{existing, refuse_symlinks_in_roots};
use crate::cli::{RunArgs, TmpMode};
use crate::error::WrapperError;

/// One bind, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The host path, canonical.
    pub source: PathBuf,
    /// Where the sandbox sees it as well.
    pub target: PathBuf,
    pub writable: bool,
    /// Made in the sandbox's own `/tmp` (nothing of the host's is there).
    pub fresh: bool,
}

/// Paths a bind may not cover: the sandbox has its own, or they are the kernel's.
const OWN_PATHS: [&str; 4] = ["/dev", "/proc", "/run", "/sys"];

/// The `--bind` sources, which are writable roots.
pub fn writable_sources(args: &RunArgs) -> impl Iterator<Item = &PathBuf> {
    args.bind.chunks(2).map(|pair| &pair[0])
}

/// Checks every bind the flags name against the roots; each mistake is one line.
pub fn check(
    args: &RunArgs,
    write_roots: &[PathBuf],
    tmp: TmpMode,
) -> Result<Vec<Bind>, WrapperError> {
    let named = args
        .bind
        .chunks(2)
        .map(|pair| (pair, true))
        .chain(args.ro_bind.chunks(2).map(|pair| (pair, false)));
    let mut binds: Vec<Bind> = Vec::new();
    for (pair, writable) in named {
        let [source, target] = pair else {
            return Err(usage(
                writable,
                pair.first().map(PathBuf::as_path),
                "takes two paths, SRC and DST",
            ));
        };
        let bind = check_one(source, target, writable, write_roots, tmp)?;
        if let Some(other) = binds
            .iter()
            .find(|b| b.target.starts_with(&bind.target) || bind.target.starts_with(&b.target))
        {
            return Err(usage(
                writable,
                Some(source.as_path()),
                &format!(
                    "{} and {} overlap; bind each at a place of its own",
                    bind.target.display(),
                    other.target.display()
                ),
            ));
        }
        binds.push(bind);
    }
    Ok(binds)
}

fn check_one(
    source: &Path,
    target: &Path,
    writable: bool,
    write_roots: &[PathBuf],
    tmp: TmpMode,
) -> Result<Bind, WrapperError> {
    let flag = flag(writable);
    if !writable {
        refuse_symlinks_in_roots(source, write_roots, "--ro-bind")?;
    }
    let canonical_source = existing(source, "bind source")?;
    // The sandbox lays its own /dev, /proc and /run, and /sys is the kernel's: a source
    // there (or `/`, which holds them all) would show the host's terminals, devices,
    // processes and service sockets.
    if canonical_source == Path::new("/")
        || OWN_PATHS
            .iter()
            .any(|own| canonical_source.starts_with(own))
    {
        return Err(usage(
            writable,
            Some(source),
            "SRC may not be /, nor lie under /dev, /proc, /run or /sys: the sandbox has its \
             own, and the host's would show its devices, processes and services; bind a \
             directory below / that holds none of them",
        ));
    }
    let in_a_root = |path: &Path| write_roots.iter().any(|r| path.starts_with(r));
    let under_own_tmp = |path: &Path| tmp == TmpMode::Private && path.starts_with("/tmp");
    if !writable && under_own_tmp(&canonical_source) && !in_a_root(&canonical_source) {
        return Err(usage(
            writable,
            Some(source),
            "it lies under the host's /tmp, which the sandbox does not see (it has a /tmp \
             of its own); add --tmp host, or use --bind to have it writable",
        ));
    }
    if !target.is_absolute() || target.components().any(|c| c == Component::ParentDir) {
        return Err(usage(
            writable,
            Some(source),
            &format!(
                "DST {} must be an absolute path without `..`: where the sandbox sees it",
                target.display()
            ),
        ));
    }
    let target: PathBuf = target.components().collect();
    if target == Path::new("/")
        || target == Path::new("/tmp")
        || OWN_PATHS.iter().any(|own| target.starts_with(own))
    {
        return Err(usage(
            writable,
            Some(source),
            &format!(
                "DST {} is the sandbox's own (/, /tmp, /dev, /proc, /run, /sys); bind at a \
                 path below one that is yours",
                target.display()
            ),
        ));
    }
    let fresh = under_own_tmp(&target) && !in_a_root(&target);
    if !fresh {
        let found = std::fs::canonicalize(&target).map_err(|e| {
            usage(
                writable,
                Some(source),
                &format!(
                    "DST {}: {e}; the sandbox's root is the host's, read-only, so DST must \
                     exist (or lie under /tmp, the sandbox's own)",
                    target.display()
                ),
            )
        })?;
        if found != target {
            return Err(usage(
                writable,
                Some(source),
                &format!(
                    "DST {} goes through a symbolic link (to {}); name the real path",
                    target.display(),
                    found.display()
                ),
            ));
        }
        if found.is_dir() != canonical_source.is_dir() {
            let kind = |dir: bool| if dir { "a directory" } else { "a file" };
            return Err(usage(
                writable,
                Some(source),
                &format!(
                    "SRC is {} and DST {} is {}: they must be of one kind",
                    kind(canonical_source.is_dir()),
                    target.display(),
                    kind(found.is_dir())
                ),
            ));
        }
    }
    if target == canonical_source {
        return Err(WrapperError::Usage(crate::printable::printable(&format!(
            "{flag} {}: SRC and DST are the same path; use {} alone",
            source.display(),
            if writable {
                "--write"
            } else {
                "nothing (the host is read-only inside)"
            }
        ))));
    }
    Ok(Bind {
        source: canonical_source,
        target,
        writable,
        fresh,
    })
}

/// Refuses a bind whose DST would cover, or lie inside, a path netbox lays a mount of its
/// own on (a writable root, a protected, read-only or hidden path, a cover): a bind inside
/// `.git` would make part of it writable again, and one over the workspace would hide it.
/// And one whose SRC is hidden or covered: there is nothing of it to show.
pub fn refuse_overlaps(
    binds: &[Bind],
    write_roots: &[PathBuf],
    pinned: &[&Path],
    hidden: &[PathBuf],
    covers: &[PathBuf],
) -> Result<(), WrapperError> {
    for bind in binds {
        let flag = flag(bind.writable);
        let target = bind.target.as_path();
        if let Some(root) = write_roots.iter().find(|r| r.starts_with(target)) {
            return Err(WrapperError::Usage(crate::printable::printable(&format!(
                "{flag} {}: DST {} would cover the writable root {}; bind it elsewhere",
                bind.source.display(),
                target.display(),
                root.display()
            ))));
        }
        let laid = pinned
            .iter()
            .copied()
            .chain(hidden.iter().map(PathBuf::as_path));
        for path in laid {
            if path.starts_with(target) || target.starts_with(path) {
                return Err(WrapperError::Usage(crate::printable::printable(&format!(
                    "{flag} {}: DST {} meets {}, which netbox keeps read-only or hidden; bind \
                     it elsewhere",
                    bind.source.display(),
                    target.display(),
                    path.display()
                ))));
            }
        }
        // netbox's cache home is covered but for this run's own caches (writable roots).
        let kept = write_roots.iter().any(|r| bind.source.starts_with(r));
        if let Some(cover) = covers.iter().find(|c| bind.source.starts_with(c)) {
            if !kept {
                return Err(WrapperError::Usage(crate::printable::printable(&format!(
                    "{flag} {}: SRC lies in netbox's cache home ({}), which the sandbox \
                     covers; bind a directory outside it",
                    bind.source.display(),
                    cover.display()
                ))));
            }
        }
        if let Some(cover) = hidden.iter().find(|h| bind.source.starts_with(h)) {
            return Err(WrapperError::Usage(crate::printable::printable(&format!(
                "{flag} {}: SRC is hidden (under {}), so there is nothing of it to show",
                bind.source.display(),
                cover.display()
            ))));
        }
    }
    Ok(())
}

fn flag(writable: bool) -> &'static str {
    if writable {
        "--bind"
    } else {
        "--ro-bind"
    }
}

fn usage(writable: bool, source: Option<&Path>, what: &str) -> WrapperError {
    let source = source
        .map(|s| format!(" {}", s.display()))
        .unwrap_or_default();
    // Paths are the user's to name, control characters and all: escaped, one line.
    WrapperError::Usage(crate::printable::printable(&format!(
        "{}{source}: {what}",
        flag(writable)
    )))
}
