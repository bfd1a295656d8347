//! The ways into a home's entries that are not paths by name: what the home split keeps
//! read-only besides the places the environment names. A symlink in home's hidden part
//! leads into an entry (dotfiles kept in `~/dotfiles`); a file kept read-only has another
//! name (a hard link) in an entry. Each bounded: a home too big to look through is refused
//! rather than split half-seen, and the search for other names stops at its own bound.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// How deep the look for symlinks goes in each hidden directory, and how many entries it
/// reads at most: a home with more is refused rather than split half-seen.
const LINK_SCAN_DEPTH: usize = 8;
pub(super) const LINK_SCAN_ENTRIES: usize = 500_000;

/// Not looked through for links: caches, toolchains and package stores (read-only here,
/// filled by their tools, which link within them), and the biggest data stores. A link
/// in them into a writable entry is not seen.
const LINK_SCAN_SKIP: &[&str] = &[
    ".cache",
    ".npm",
    ".rustup",
    ".cargo/registry",
    ".cargo/git",
    ".m2",
    ".gradle",
    ".pyenv/versions",
    ".nvm/versions",
    ".vscode/extensions",
    ".vscode-server",
    ".local/state/nix",
    ".local/share/Steam",
    ".local/share/flatpak",
    ".local/share/containers",
    ".local/share/Trash",
    ".local/share/baloo",
    // Package stores whose files are hard-linked into each project (pnpm, bun): their
    // other names are in every project, and each would be pinned.
    ".local/share/pnpm",
    ".pnpm-store",
    ".bun/install/cache",
    ".local/share/akonadi",
];

/// Looked through besides home's top level and its hidden directories (none).
const LINK_SCAN_LOCAL: &[&str] = &[];

/// Too much to look through for links into home.
#[derive(Debug)]
pub(super) struct TooBig;

/// What the look through home's kept part (its hidden entries, and the top of the
/// entries holding code) finds of the ways into its other entries.
#[derive(Debug, Default)]
pub(super) struct WaysIn {
    /// The entries of home that a symlink there leads into, or would if it existed (a
    /// link to a dotfiles repository not cloned yet): where dotfiles are kept.
    pub(super) linked: Vec<std::ffi::OsString>,
    /// Files kept read-only with more than one name (hard links), by device and inode:
    /// how many names they have, and those seen in the kept part (the first one names the
    /// file in messages). A dotfile kept as a hard link in `~/dotfiles` is written
    /// through either name.
    kept_names: HashMap<(u64, u64), (u64, Vec<PathBuf>)>,
    /// Entries looked at so far, against [`LINK_SCAN_ENTRIES`].
    seen: usize,
}

/// How deep the look goes in an entry that holds code (`~/bin`): its programs, at its top.
/// Not deeper: toolchains there (`~/miniconda3`) link their packages into their
/// environments, and each such file whose other names were not all seen sends the look
/// through every other entry of home. (A directory the environment names for code is
/// looked at itself: [`WaysIn::count_kept`].)
const CODE_SCAN_DEPTH: usize = 1;

/// How many entries the look for a kept file's other names goes through, beside the look
/// for links: past it, the entries not yet looked through stay read-only.
const HARD_LINK_SEARCH_ENTRIES: usize = 200_000;

/// Looks through home's hidden part (and the entries `holds_code` names, not as deep) for
/// symlinks and hard links.
pub(super) fn ways_in(home: &Path, holds_code: &dyn Fn(&OsStr) -> bool) -> Result<WaysIn, TooBig> {
    let mut found = WaysIn::default();
    let mut stack: Vec<(PathBuf, usize, usize)> = LINK_SCAN_LOCAL
        .iter()
        .map(|d| (home.join(d), 1, LINK_SCAN_DEPTH))
        .collect();
    stack.push((home.to_owned(), 0, LINK_SCAN_DEPTH));
    while let Some((dir, depth, max_depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            found.seen += 1;
            if found.seen > LINK_SCAN_ENTRIES {
                return Err(TooBig);
            }
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let at_top = depth == 0;
            let hidden = name.as_encoded_bytes().starts_with(b".");
            let code = at_top && !hidden && holds_code(&name);
            if kind.is_symlink() && (hidden || !at_top) {
                if let Some(top) = link_target(&entry.path())
                    .and_then(|t| t.strip_prefix(home).ok().map(Path::to_owned))
                    .and_then(|rest| rest.components().next().map(|c| c.as_os_str().to_owned()))
                {
                    found.linked.push(top);
                }
            } else if kind.is_dir() && depth < max_depth && (!at_top || hidden || code) {
                let path = entry.path();
                let skipped = LINK_SCAN_SKIP.iter().any(|s| path == home.join(s));
                if !skipped {
                    let max_depth = if code { CODE_SCAN_DEPTH } else { max_depth };
                    stack.push((path, depth + 1, max_depth));
                }
            } else if kind.is_file() && (hidden || !at_top) {
                found.count_kept(&entry.path());
            }
        }
    }
    Ok(found)
}

impl WaysIn {
    /// Counts `path`, a file kept read-only, if it has other names (once a path).
    pub(super) fn count_kept(&mut self, path: &Path) {
        use std::os::unix::fs::MetadataExt;
        let Some(meta) = std::fs::symlink_metadata(path)
            .ok()
            .filter(|m| m.is_file() && m.nlink() > 1)
        else {
            return;
        };
        let (_, seen) = self
            .kept_names
            .entry((meta.dev(), meta.ino()))
            .or_insert((meta.nlink(), Vec::new()));
        if !seen.iter().any(|p| p == path) {
            seen.push(path.to_owned());
        }
    }

    /// Which of `entries` hold another name of a kept file, and which could not be looked
    /// through within [`HARD_LINK_SEARCH_ENTRIES`] (kept read-only too, with a file whose
    /// names were not all found). Looked through level by level, all entries at once (a
    /// dotfiles repository is shallow), until every such name is found.
    pub(super) fn holding_hard_links(
        &self,
        entries: &[PathBuf],
    ) -> (Vec<Option<KeptFor>>, Vec<PathBuf>) {
        use std::os::unix::fs::MetadataExt;
        // Each kept file's names still to find, and the name it is known by.
        let mut left: HashMap<(u64, u64), (u64, &Path)> = self
            .kept_names
            .iter()
            .filter(|(_, (all, seen))| *all > seen.len() as u64)
            .map(|(id, (all, seen))| (*id, (all - seen.len() as u64, seen[0].as_path())))
            .collect();
        let mut holds: Vec<Option<KeptFor>> = vec![None; entries.len()];
        // Every other name found, wherever it is.
        let mut links: Vec<PathBuf> = Vec::new();
        let mut level: Vec<(usize, PathBuf)> = entries.iter().cloned().enumerate().collect();
        let mut first = true;
        let mut looked = 0usize;
        while !level.is_empty() && !left.is_empty() {
            let mut next = Vec::new();
            for (at, path) in level {
                // An entry found to hold one is still looked through: each name in it
                // counts, or the look would go on for a name already found.
                if looked > HARD_LINK_SEARCH_ENTRIES {
                    if holds[at].is_none() {
                        let file = left.values().next().map(|(_, f)| f.to_path_buf());
                        holds[at] = file.map(KeptFor::NotLookedThrough);
                    }
                    continue;
                }
                let found: Vec<(PathBuf, std::fs::Metadata)> = if first {
                    // The entry itself (a file at home's top).
                    std::fs::symlink_metadata(&path)
                        .map(|m| vec![(path, m)])
                        .unwrap_or_default()
                } else {
                    let Ok(read) = std::fs::read_dir(&path) else {
                        continue;
                    };
                    read.flatten()
                        .filter_map(|e| {
                            let meta = std::fs::symlink_metadata(e.path()).ok()?;
                            Some((e.path(), meta))
                        })
                        .collect()
                };
                for (path, meta) in found {
                    looked += 1;
                    if meta.is_dir() {
                        next.push((at, path));
                    } else if meta.is_file() && meta.nlink() > 1 {
                        let id = (meta.dev(), meta.ino());
                        if let Some((names, file)) = left.get_mut(&id) {
                            if holds[at].is_none() {
                                holds[at] = Some(KeptFor::HardLink {
                                    file: file.to_path_buf(),
                                    name: path.clone(),
                                });
                            }
                            links.push(path.clone());
                            *names -= 1;
                            if *names == 0 {
                                left.remove(&id);
                            }
                        }
                    }
                }
            }
            level = next;
            first = false;
        }
        (holds, links)
    }
}

/// Why an entry of home that the caller may write stays read-only, to say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptFor {
    /// It holds `name`, another name (a hard link) of `file`, kept read-only.
    HardLink { file: PathBuf, name: PathBuf },
    /// It was not looked through for the other names of this file.
    NotLookedThrough(PathBuf),
}

/// Where a symlink leads, resolved as far as what it names exists (a dangling link's
/// target counts where it would be).
fn link_target(link: &Path) -> Option<PathBuf> {
    let target = std::fs::read_link(link).ok()?;
    let target = if target.is_absolute() {
        target
    } else {
        link.parent()?.join(target)
    };
    Some(super::resolve_existing_prefix(&target))
}

/// Whether a data entry of home's hidden part (a history, a small directory of them) is,
/// or holds, a file with more than one name: its names were counted as kept, so where the
/// others are is not known.
pub(super) fn holds_any_hard_link(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // These are small (a few histories); one bigger than this is kept read-only.
    const MOST: usize = 10_000;
    let mut stack = vec![path.to_owned()];
    let mut seen = 0;
    while let Some(at) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            continue;
        };
        seen += 1;
        if seen > MOST || (meta.is_file() && meta.nlink() > 1) {
            return true;
        }
        if meta.is_dir() {
            match std::fs::read_dir(&at) {
                Ok(entries) => stack.extend(entries.flatten().map(|e| e.path())),
                Err(_) => return true,
            }
        }
    }
    false
}
