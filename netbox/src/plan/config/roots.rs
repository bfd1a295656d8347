//! The paths a run names: the workspace and the writable roots (nested ones collapsed, a
//! home split into what may be written), and `--ro`, `--hide`, `--protect`, each checked
//! to exist as the kind it must be, with no symlink on the way.

use std::path::{Path, PathBuf};

use crate::cli::{RunArgs, TmpMode};
use crate::error::WrapperError;

/// The roots asked for (workspace first, then `--write`), canonical, and the writable
/// roots (with a host /tmp), each one a directory the sandbox can give CMD.
pub(super) fn writable_roots(
    args: &RunArgs,
    workspace: &Path,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), WrapperError> {
    let mut write_roots = vec![workspace.to_owned()];
    for path in &args.write {
        write_roots.push(existing(path, "--write path")?);
    }
    for path in super::binds::writable_sources(args) {
        write_roots.push(existing(path, "--bind source")?);
    }
    // Protected names (and their placeholders) belong to the roots the user named, not to
    // a shared host /tmp.
    let requested_roots = write_roots.clone();
    if args.tmp == TmpMode::Host {
        write_roots.push(existing(Path::new("/tmp"), "/tmp")?);
    }
    // The sandbox has its own /dev, /proc and /run (and /sys is the kernel's): a writable
    // root there would not be the host's directory at all.
    if let Some(root) = write_roots.iter().find(|r| {
        ["/dev", "/proc", "/run", "/sys"]
            .iter()
            .any(|hidden| r.starts_with(hidden))
    }) {
        return Err(WrapperError::Usage(format!(
            "{} cannot be a writable root: the sandbox has its own /dev, /proc and /run, \
             and /sys is the kernel's; use a directory elsewhere",
            root.display()
        )));
    }
    if write_roots.iter().any(|r| r == Path::new("/")) {
        return Err(WrapperError::Usage(
            "a writable root of / leaves nothing protected; use --disable-sandbox if you mean it"
                .into(),
        ));
    }
    Ok((requested_roots, write_roots))
}

/// A symlink inside a writable root could be replaced by CMD: a pin on its target would
/// hold the target, not the name the user gave.
pub(super) fn refuse_symlinks_in_roots(
    path: &Path,
    write_roots: &[PathBuf],
    what: &'static str,
) -> Result<(), WrapperError> {
    crate::plan::protect::refuse_symlinks_in_roots(path, write_roots, what)
}

/// `--ro`, `--hide` and `--protect` paths, canonical.
pub(super) struct NamedPaths {
    pub(super) read_only: Vec<PathBuf>,
    pub(super) hide: Vec<PathBuf>,
    /// A protected path may not exist yet: then it gets a placeholder, like .git.
    pub(super) protect: Vec<PathBuf>,
}

impl NamedPaths {
    pub(super) fn check(
        args: &RunArgs,
        write_roots: &[PathBuf],
    ) -> Result<NamedPaths, WrapperError> {
        let read_only = args
            .read_only
            .iter()
            .map(|p| {
                refuse_symlinks_in_roots(p, write_roots, "--ro")
                    .and_then(|()| existing(p, "--ro path"))
            })
            .collect::<Result<_, _>>()?;
        let mut hide: Vec<PathBuf> = args
            .hide
            .iter()
            .map(|p| no_link_at_all(p).and_then(|()| existing(p, "--hide path")))
            .collect::<Result<_, _>>()?;
        // The remote bridge's credentials are netbox's, not CMD's: CMD, which can read
        // what the user can, finds the file empty (under whatever name it tries: the path
        // hidden is the file's own, every link resolved).
        for secret in [&args.bridge_token_file, &args.bridge_key]
            .into_iter()
            .flatten()
        {
            hide.push(existing(secret, "--bridge-token-file or --bridge-key")?);
        }
        let protect = args
            .protect
            .iter()
            .map(|p| {
                refuse_symlinks_in_roots(p, write_roots, "--protect")
                    .and_then(|()| existing_or_in_existing_dir(p, "--protect path"))
            })
            .collect::<Result<_, _>>()?;
        Ok(NamedPaths {
            read_only,
            hide,
            protect,
        })
    }
}

pub(super) fn existing(path: &Path, what: &'static str) -> Result<PathBuf, WrapperError> {
    std::fs::canonicalize(path).map_err(|source| WrapperError::Path {
        path: path.to_owned(),
        what,
        source,
    })
}

/// The canonical path of something that may not exist yet, in a directory that does.
pub(super) fn existing_or_in_existing_dir(
    path: &Path,
    what: &'static str,
) -> Result<PathBuf, WrapperError> {
    if let Ok(found) = std::fs::canonicalize(path) {
        return Ok(found);
    }
    let name = path.file_name().ok_or_else(|| {
        WrapperError::Usage(format!("{what} {} has no file name", path.display()))
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(existing(parent, what)?.join(name))
}

/// Refuses a `--hide` path that goes through a symlink anywhere: the cover is on what the
/// link leads to at the start, and the host can point the link elsewhere during the run
/// (a credentials link updated to a new file), which no pin notices.
pub(super) fn no_link_at_all(path: &Path) -> Result<(), WrapperError> {
    crate::plan::protect::refuse_symlinks_in_roots(path, &[PathBuf::from("/")], "--hide").map_err(
        |e| match e {
            WrapperError::SymlinkInRoot { path, link, .. } => {
                WrapperError::HideThroughSymlink { path, link }
            }
            other => other,
        },
    )
}

/// Drops roots that lie inside another root: the outer bind already covers them, and a
/// second bind of the same inodes would be a second path to protect.
pub(super) fn outermost(mut roots: Vec<PathBuf>) -> Vec<PathBuf> {
    let all = roots.clone();
    roots.retain(|r| !all.iter().any(|other| other != r && r.starts_with(other)));
    roots.dedup();
    roots
}

/// A home split into writable entries (homesplit/).
#[derive(Debug, Clone)]
pub struct HomeSplit {
    pub home: PathBuf,
    pub writable: usize,
    /// The writable entries that are directories: a repository at the top of one is
    /// pinned like the workspace's (protect/mod.rs).
    pub entries: Vec<PathBuf>,
    /// Other names (hard links) of files kept read-only, found in its entries: pinned
    /// wherever a root holds one.
    pub links: Vec<PathBuf>,
}

/// Replaces each writable root that is, or holds, one of the caller's homes by the
/// entries that may be written (homesplit/), or refuses it without
/// `--allow-home-write`. A root holds a home by path, or as another name for the same
/// directory (a bind mount of home, or of a directory above it). Also refuses, without the
/// flag, a root that is one of home's shared configuration or data directories
/// (`~/.config`, `~/.local`, ...): they hold every program's settings.
pub(super) fn split_homes(
    mut roots: Vec<PathBuf>,
    homes: &[PathBuf],
    allowed: bool,
) -> Result<(Vec<PathBuf>, Vec<HomeSplit>), WrapperError> {
    use std::os::unix::fs::MetadataExt;
    // Outermost first: $HOME inside the account's home (or the other way round) is split
    // as part of the outer one, whose hidden entries stay read-only.
    let mut homes = homes.to_vec();
    homes.sort_by_key(|h| h.components().count());
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    // Where root `r` holds a home: the home's path as seen through `r`.
    let holds = |r: &Path| -> Option<(PathBuf, PathBuf)> {
        let root_id = id(r)?;
        homes.iter().find_map(|h| {
            if h.starts_with(r) {
                return Some((h.clone(), h.clone()));
            }
            h.ancestors().find_map(|a| {
                (id(a) == Some(root_id)).then(|| {
                    // No `/` after it for home itself (it names the home in messages).
                    let below = h.strip_prefix(a).unwrap_or(Path::new(""));
                    (h.clone(), crate::paths::join_below(r, below))
                })
            })
        })
    };
    // A root that is a home (or a directory above one) by another name is split below,
    // through that name; any other that reaches a home by another name is refused.
    let table = crate::plan::mount_names::host()?;
    // (A name inside a root that holds a home is not written as it stands: that root is
    // split.)
    let kept_whole: Vec<PathBuf> = roots
        .iter()
        .filter(|r| holds(r).is_none())
        .cloned()
        .collect();
    for root in &kept_whole {
        refuse_home_by_another_name(root, &kept_whole, &homes, table)?;
    }
    for root in &roots {
        if !allowed {
            if let Some(base) = shared_base_dir(root, &homes) {
                return Err(WrapperError::SharedHomeDirWritable { root: base });
            }
        }
    }
    let mut splits: Vec<HomeSplit> = Vec::new();
    // A root split for one home may still hold another: split until none does.
    while let Some((at, (home, seen_as))) = roots
        .iter()
        .enumerate()
        .find_map(|(i, r)| holds(r).map(|found| (i, found)))
    {
        let root = roots.remove(at);
        if !allowed {
            return Err(WrapperError::HomeWritable { root, home });
        }
        // What the environment and the links name is in the real home's terms; mapped onto
        // the name this root gives it (a bind mount of home).
        let code: Vec<PathBuf> = crate::plan::homesplit::code_locations(&home)
            .into_iter()
            .filter_map(|c| Some(seen_as.join(c.strip_prefix(&home).ok()?)))
            .collect();
        let split =
            crate::plan::homesplit::split(&root, &seen_as, &home, &code).map_err(|source| {
                WrapperError::Path {
                    path: root.clone(),
                    what: "writable root holding your home directory",
                    source,
                }
            })?;
        for (entry, why) in &split.kept {
            crate::output::say(&kept_note(entry, why));
        }
        let writable = split
            .roots
            .iter()
            .filter(|r| r.starts_with(&seen_as))
            .count();
        let entries: Vec<PathBuf> = split
            .roots
            .iter()
            .filter(|r| r.starts_with(&seen_as) && r.is_dir())
            .cloned()
            .collect();
        roots.extend(split.roots);
        match splits.iter_mut().find(|s| s.home == seen_as) {
            Some(known) => {
                known.writable += writable;
                known.entries.extend(entries);
                known.links.extend(split.links);
            }
            None => splits.push(HomeSplit {
                home: seen_as,
                writable,
                entries,
                links: split.links,
            }),
        }
    }
    Ok((roots, splits))
}

/// What to say of an entry of a split home kept read-only for a hard link.
fn kept_note(entry: &Path, why: &crate::plan::homesplit::KeptFor) -> String {
    use crate::plan::homesplit::KeptFor;
    let shown = |p: &Path| crate::printable::printable(&p.to_string_lossy());
    match why {
        KeptFor::HardLink { file, name } if name == file => format!(
            "netbox: {} stays read-only: it has another name (a hard link), which the look \
             did not follow",
            shown(entry),
        ),
        KeptFor::HardLink { file, name } => format!(
            "netbox: {} is another name (a hard link) of {}: it stays read-only, and so does \
             {} in the split home",
            shown(name),
            shown(file),
            shown(entry)
        ),
        KeptFor::NotLookedThrough(file) => format!(
            "netbox: {} stays read-only: {} has another name (a hard link) that was not found \
             before the look reached it; --write it if CMD needs it",
            shown(entry),
            shown(file)
        ),
    }
}

/// A writable root whose directory, or a part of it, shows under a home by another name
/// (a bind mount: `--write /srv/alias/.config` where `/srv/alias` is home mounted again):
/// the rules for a home go by its paths, so it is refused, naming the path to use. A name
/// inside a writable root (`roots`) had those rules already.
fn refuse_home_by_another_name(
    root: &Path,
    roots: &[PathBuf],
    homes: &[PathBuf],
    table: &crate::plan::mount_names::MountTable,
) -> Result<(), WrapperError> {
    let names = table.other_names(root);
    let home_place = |name: &&PathBuf| {
        !roots.iter().any(|r| name.starts_with(r))
            && homes
                .iter()
                .any(|h| name.starts_with(h) || h.starts_with(name))
    };
    let found = names.all().find(home_place).cloned();
    match found {
        Some(other) => Err(WrapperError::RootIsHomeByOtherName {
            root: root.to_owned(),
            other,
        }),
        None => Ok(()),
    }
}

/// A mount inside a writable root shows what it holds there too (a bind of a directory
/// elsewhere, of home): writable through the root, read-only by its own name. Refused
/// where that other name lies outside every writable root; a filesystem mounted there
/// alone (a disk, a tmpfs) has no other name.
pub(super) fn refuse_mounts_of_elsewhere(roots: &[PathBuf]) -> Result<(), WrapperError> {
    let table = crate::plan::mount_names::host()?;
    let in_a_root = |path: &&PathBuf| roots.iter().any(|r| path.starts_with(r));
    for root in roots {
        for mount in table.mount_points_inside(root) {
            let names = table.other_names(mount);
            let found = names.all().find(|n| !in_a_root(n)).cloned();
            if let Some(other) = found {
                return Err(WrapperError::RootHoldsOtherName {
                    root: root.clone(),
                    mount: mount.to_owned(),
                    other,
                });
            }
        }
    }
    Ok(())
}

/// The shared configuration or data directory that `root` is, or lies above (but for a
/// home itself, which is split instead): `~/.config`, `~/.local`, `~/.local/share`,
/// `~/.local/state`, `~/.cache`, and what `XDG_CONFIG_HOME`, `XDG_DATA_HOME`,
/// `XDG_STATE_HOME` name wherever they are; each resolved (a `~/.config` that is a link
/// into `~/dotfiles` is that directory).
pub(super) fn shared_base_dir(root: &Path, homes: &[PathBuf]) -> Option<PathBuf> {
    let mut bases: Vec<PathBuf> = homes
        .iter()
        .flat_map(|h| {
            [
                ".config",
                ".local",
                ".local/share",
                ".local/state",
                ".cache",
            ]
            .map(|b| h.join(b))
        })
        .collect();
    bases.extend(
        ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"]
            .iter()
            .filter_map(std::env::var_os)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute()),
    );
    let is_home = homes.iter().any(|h| h == root);
    bases
        .into_iter()
        .map(|b| crate::plan::homesplit::resolve_existing_prefix(&b))
        .find(|b| b.starts_with(root) && !is_home && !homes.iter().any(|h| h.starts_with(root)))
}

/// The caller's home directory (`$HOME`), canonical, if it exists.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| Path::new(h).is_absolute())
        .and_then(|h| std::fs::canonicalize(h).ok())
}
