//! Repositories met in a writable root: the one a root lies in, each `.git` entry and
//! its git directory, each submodule the index records (to `MAX_SUBMODULE_DEPTH`), and
//! the git data pinned or left writable.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::gitconfig::ConfigSet;
use super::paths::{
    gitfile_target, pointed_path, read_git_pointer, real_path, refuse_symlinks_in_roots,
};
use super::placeholders::EMPTY_CONFIG;
use super::placeholders::{self, is_placeholder, Placeholder};
use super::{
    codes_of, path_error, Found, Lay, Naming, Repository, RepositoryName, CODE_PARTS,
    GIT_DATA_DIRS, MAX_GITLINKS, MAX_SUBMODULE_DEPTH,
};
use super::{gitconfig, gitindex};
use crate::error::WrapperError;

impl Found<'_> {
    /// The repository a root lies inside, if its top is above the root: `git status`
    /// there enters the submodules it records, those inside the root included. One whose
    /// index cannot be read is refused like the root's own: its submodules could not be
    /// pinned (and another user's git may read what this one cannot).
    /// Returns whether there is one.
    /// Above a root, a `.git` link is followed (CMD cannot change it), and a `.git`
    /// directory that is no repository is passed over, as git's own search does.
    pub(super) fn enclosing_repository(&mut self, root: &Path) -> Result<bool, WrapperError> {
        for top in root.ancestors().skip(1) {
            let dot_git = top.join(".git");
            match std::fs::metadata(&dot_git) {
                Ok(meta) if meta.is_dir() && !is_git_directory(&dot_git) => continue,
                Ok(meta) => {
                    let dot_git = std::fs::canonicalize(&dot_git).unwrap_or(dot_git);
                    self.git_entry(top, &dot_git, &meta, 0)?;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(_) => return Ok(false),
            }
        }
        Ok(false)
    }

    /// A `.git` entry of the work tree `worktree`: the git dir it is or points at,
    /// pinned with all it names (pin_repository).
    pub(super) fn git_entry(
        &mut self,
        worktree: &Path,
        dot_git: &Path,
        meta: &std::fs::Metadata,
        depth: usize,
    ) -> Result<(), WrapperError> {
        let (git_dir, common_dir) = if meta.is_file() {
            let dirs = git_dirs_of_gitfile(dot_git)?;
            self.push(dot_git.to_owned(), None);
            let git_dir = dirs[0].clone();
            let common = dirs.last().cloned().unwrap_or_else(|| git_dir.clone());
            (git_dir, common)
        } else if meta.is_dir() {
            (dot_git.to_owned(), common_dir_of(dot_git))
        } else {
            // Neither (a fifo, say): git takes it for no repository. Pinned as it is.
            self.push(dot_git.to_owned(), None);
            return Ok(());
        };
        self.pin_repository(
            Repository {
                git_dir,
                common_dir,
                worktree: Some(worktree.to_owned()),
            },
            depth,
        )
    }

    /// Everything git would later run or read as code for one repository, whichever
    /// way netbox met it (the workspace's, a `--write` root's, the one a root lies in, a
    /// home entry's, a submodule's): its git directory (all of it, or with
    /// `--allow-git-writes` the parts that run code or lead elsewhere), what its own
    /// configuration and the shared one name relative to where git runs for it (the work
    /// tree's top, `core.worktree`, or a bare repository's own directory), and the
    /// submodules its index records, each the same way.
    pub(super) fn pin_repository(
        &mut self,
        repo: Repository,
        depth: usize,
    ) -> Result<(), WrapperError> {
        if !self.repositories.insert(repo.git_dir.clone()) {
            return Ok(());
        }
        let this = RepositoryName {
            git_dir: repo.git_dir.clone(),
            shown: repo
                .worktree
                .clone()
                .unwrap_or_else(|| repo.git_dir.clone()),
        };
        // Its git directory is named by what led here (a submodule's by the index that
        // records it); a top one's by itself, for what links in its hooks lead to.
        let outer_naming = self.naming.clone();
        if self.naming.is_none() {
            let hooks = repo.common_dir.join("hooks");
            self.basis.named.insert(hooks.clone());
            self.naming = Some(Naming {
                repository: Some(this.clone()),
                setting: "a link in its hooks directory".into(),
                named: hooks,
            });
        }
        // A bare repository that is a writable root itself keeps only its code-bearing
        // parts read-only: all of it would leave the root nothing writable (a push to
        // the branch HEAD names takes HEAD's lock at its top).
        let shape = match (&repo.worktree, self.allow_git_writes) {
            (None, _) => GitDirPin::Parts,
            (Some(_), false) => GitDirPin::Whole,
            (Some(_), true) => GitDirPin::WholeButData,
        };
        self.push_git_dir(&repo.git_dir, shape)?;
        if repo.common_dir != repo.git_dir {
            self.push_git_dir(&repo.common_dir, shape)?;
        }
        self.naming = None;
        let outer_repository = self.repository.replace(this);
        let own = [
            ConfigSet::read(&repo.common_dir.join("config"), self.home),
            ConfigSet::read(&repo.git_dir.join("config.worktree"), self.home),
        ];
        for set in &own {
            self.basis.sources.extend(set.sources.clone());
        }
        let run_dir = own
            .iter()
            .rev()
            .find_map(ConfigSet::worktree)
            .map(|w| {
                let at = repo.git_dir.join(crate::paths::exact_text::path_of(w));
                std::fs::canonicalize(&at).unwrap_or(at)
            })
            .or_else(|| repo.worktree.clone())
            .unwrap_or_else(|| repo.git_dir.clone());
        let mut codes = self.shared_codes(Some(&run_dir))?;
        codes.extend(codes_of(&own, Some(&run_dir), self.home)?);
        for code in &codes {
            self.pin_code(code, Lay::Placeholders)?;
        }
        let hooks_paths: Vec<PathBuf> = codes
            .iter()
            .filter(|c| c.setting == "core.hookspath")
            .map(|c| c.path.clone())
            .collect();
        let hooks = match hooks_paths.last() {
            Some(path) => path.clone(),
            None => repo.common_dir.join("hooks"),
        };
        self.pin_hook_runners(&hooks, &run_dir)?;
        if repo.worktree.is_some() {
            self.submodules_of(&run_dir, &repo.git_dir, &repo.common_dir, depth)?;
        }
        self.repository = outer_repository;
        self.naming = outer_naming;
        Ok(())
    }

    /// Pins a path something names, wherever it lies in a writable root: refused if it
    /// reaches a symlink there; where it is missing, a placeholder at its first missing
    /// component (`leaf` for the path itself, else a directory), or nothing (`lay`).
    pub(super) fn pin_named(
        &mut self,
        path: &Path,
        leaf: Placeholder,
        what: &'static str,
        lay: Lay,
    ) -> Result<(), WrapperError> {
        refuse_symlinks_in_roots(path, self.writable, what)?;
        let Some((real, missing_from)) = real_path(path) else {
            return Ok(());
        };
        match missing_from {
            None => {
                let placeholder = is_placeholder(&real).then_some(leaf);
                self.push(real, placeholder);
            }
            Some(_) if lay == Lay::ExistingOnly => {}
            Some(first_missing) if first_missing == real => self.push(real, Some(leaf)),
            Some(first_missing) => self.push(first_missing, Some(Placeholder::Dir)),
        }
        Ok(())
    }

    /// Pins what git would enter for each gitlink in `git_dir`'s index.
    pub(super) fn submodules_of(
        &mut self,
        worktree: &Path,
        git_dir: &Path,
        common_dir: &Path,
        depth: usize,
    ) -> Result<(), WrapperError> {
        let index = git_dir.join("index");
        self.basis.sources.record(&index);
        let scan =
            gitindex::gitlinks(&index, gitindex::object_name_len(common_dir)).map_err(|e| {
                WrapperError::GitIndex {
                    path: index.clone(),
                    reason: e.to_string(),
                }
            })?;
        // A split index reads most of its entries from the shared one (read with it
        // above): it lies at the top of the git dir, read-only with it.
        let links = scan.gitlinks;
        if !links.is_empty() && depth >= MAX_SUBMODULE_DEPTH {
            return Err(WrapperError::GitIndex {
                path: index,
                reason: format!("submodules nest more than {MAX_SUBMODULE_DEPTH} deep"),
            });
        }
        for link in links {
            self.gitlinks += 1;
            if self.gitlinks > MAX_GITLINKS {
                return Err(WrapperError::GitIndex {
                    path: index,
                    reason: format!("more than {MAX_GITLINKS} submodules to pin"),
                });
            }
            let path = worktree.join(&link);
            if self.writable(&path) {
                let outer = self.name("a submodule in the index", &path);
                let pinned = self.submodule(worktree, &path, depth);
                self.naming = outer;
                pinned?;
            }
        }
        Ok(())
    }

    /// One submodule at `path` (inside `worktree`): its `.git` pinned and followed; if
    /// it has none, the directory itself pinned; if a component of the path is missing,
    /// a placeholder directory there.
    pub(super) fn submodule(
        &mut self,
        worktree: &Path,
        path: &Path,
        depth: usize,
    ) -> Result<(), WrapperError> {
        let below = path.strip_prefix(worktree).unwrap_or(path);
        let mut at = worktree.to_owned();
        for component in below.components() {
            at.push(component);
            let meta = match std::fs::symlink_metadata(&at) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.push(at, Some(Placeholder::Dir));
                    return Ok(());
                }
                Err(source) => return Err(path_error(at, source)),
            };
            if meta.file_type().is_symlink() {
                return Err(WrapperError::SubmoduleSymlink {
                    path: at,
                    submodule: path.to_owned(),
                });
            }
            if !meta.is_dir() {
                // A file where git expects the submodule (or a directory on its way):
                // pinned, so that no directory can take its place.
                self.push(at, None);
                return Ok(());
            }
        }
        let dot_git = path.join(".git");
        match std::fs::symlink_metadata(&dot_git) {
            Ok(meta) if meta.file_type().is_symlink() => {
                Err(WrapperError::ProtectedSymlink { path: dot_git })
            }
            Ok(meta) => self.git_entry(path, &dot_git, &meta, depth + 1),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Not checked out: nothing of it may be written, a `.git` least of all.
                let placeholder = is_placeholder(path).then_some(Placeholder::Dir);
                self.push(path.to_owned(), placeholder);
                Ok(())
            }
            Err(source) => Err(path_error(dot_git, source)),
        }
    }

    /// A git directory, pinned as `shape` says. A code-bearing part that is a link is
    /// followed to what it leads to (pinned too) where the directory's top is read-only,
    /// and refused where it is not (CMD could replace the link).
    pub(super) fn push_git_dir(
        &mut self,
        dir: &Path,
        shape: GitDirPin,
    ) -> Result<(), WrapperError> {
        for part in CODE_PARTS {
            let path = dir.join(part);
            if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                self.watch_if_linked(&path);
                continue;
            }
            if shape == GitDirPin::Parts && self.writable(&path) {
                return Err(WrapperError::ProtectedSymlink { path });
            }
            if let Ok(target) = std::fs::read_link(&path) {
                self.pin_link_target(&dir.join(target), 0)?;
            }
        }
        // The hooks, wherever the hooks directory really is.
        let hooks = std::fs::canonicalize(dir.join("hooks")).unwrap_or_else(|_| dir.join("hooks"));
        self.pin_link_targets(&hooks, 0)?;
        match shape {
            GitDirPin::Whole => {
                self.push(dir.to_owned(), None);
                return Ok(());
            }
            GitDirPin::WholeButData => {
                self.push(dir.to_owned(), None);
                self.open_git_data(dir)?;
                return Ok(());
            }
            GitDirPin::Parts => {}
        }
        if self.writable(dir) {
            self.pin_bare_top(dir)?;
        }
        let index = match gitindex::object_name_len(&common_dir_of(dir)) {
            32 => placeholders::EMPTY_INDEX_SHA256,
            _ => placeholders::EMPTY_INDEX_SHA1,
        };
        // hooks and config run code, and so does config.worktree once config enables it;
        // info/attributes chooses which configured drivers run on which files; a commondir
        // would redirect git to another directory's config and hooks; a gitlink added to
        // the index, or a submodule's or worktree's git dir under modules/ or worktrees/,
        // makes git enter a directory CMD filled. Missing ones get placeholders, but
        // config: a repository without one is not a repository. (objects/info/alternates
        // is left writable with the objects: it names more objects, never code.)
        let info = dir.join("info");
        if std::fs::symlink_metadata(&info).is_err() || is_placeholder(&info) {
            self.push(info, Some(Placeholder::Dir));
        } else {
            let attributes = info.join("attributes");
            let placeholder = (std::fs::symlink_metadata(&attributes).is_err()
                || is_placeholder(&attributes))
            .then_some(placeholders::EMPTY_CONFIG);
            self.push(attributes, placeholder);
        }
        for (part, placeholder) in [
            ("hooks", Some(Placeholder::Dir)),
            ("config", None),
            ("config.worktree", Some(placeholders::EMPTY_CONFIG)),
            ("commondir", Some(placeholders::COMMONDIR)),
            ("index", Some(index)),
            ("modules", Some(Placeholder::Dir)),
            ("worktrees", Some(Placeholder::Dir)),
            // A rebase under way: its todo list's `exec` lines run at `git rebase
            // --continue`. Pinned where one is under way; a placeholder would make git
            // believe one is (a rebase CMD starts is reported after the run).
            ("rebase-merge", None),
            ("rebase-apply", None),
            // A cherry-pick under way: its options name the merge strategy it runs.
            ("sequencer", None),
            // lefthook's remote configurations (`remotes:`), fetched into the git dir.
            ("info/lefthook-remotes", None),
        ] {
            let path = dir.join(part);
            let exists = std::fs::symlink_metadata(&path).is_ok();
            if exists && !is_placeholder(&path) {
                self.push(path, None);
            } else if let Some(placeholder) = placeholder {
                self.push(path, Some(placeholder));
            }
        }
        Ok(())
    }

    /// What `git fetch`, `git commit-tree` and `git update-ref` write in a git directory
    /// pinned whole, left writable on top of its pin: the data directories that exist
    /// (an allow-list: one git adds later stays read-only), `logs/` made if missing (git
    /// would make it at the top), and `FETCH_HEAD`, which git writes in place (made
    /// empty if missing). A link stays read-only with the top (git writes through it,
    /// to what it leads to); so does a `FETCH_HEAD` with another name (a hard link to a
    /// hook would make the hook writable). Within `refs/`, `refs/replace/` stays
    /// read-only (a placeholder where missing): a replace ref makes git read CMD's object
    /// wherever the original is named, so `git diff` would not show CMD's change and a
    /// checkout would bring it back. A repository whose refs are a reftable (one file
    /// for every ref, replace refs too) keeps `refs/`, `reftable/` and `logs/` read-only:
    /// ref updates fail inside.
    pub(super) fn open_git_data(&mut self, dir: &Path) -> Result<(), WrapperError> {
        let reftable = uses_reftable(dir);
        for name in GIT_DATA_DIRS {
            if reftable && matches!(*name, "refs" | "reftable" | "logs") {
                continue;
            }
            let path = dir.join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() && self.writable(&path) => {
                    refuse_hard_links(&path, dir)?;
                    let placeholder = is_placeholder(&path).then_some(Placeholder::Dir);
                    self.push_as(path.clone(), placeholder, true);
                    self.git_data.dirs.push(path);
                }
                Err(e) if e.kind() == ErrorKind::NotFound && *name == "logs" => {
                    self.push_as(path.clone(), Some(Placeholder::Dir), true);
                    self.git_data.dirs.push(path);
                }
                _ => {}
            }
        }
        let refs = dir.join("refs");
        if !reftable && self.listed.contains(&refs) {
            self.pin_named(
                &refs.join("replace"),
                Placeholder::Dir,
                "replace refs",
                Lay::Placeholders,
            )?;
        }
        self.open_fetch_head(dir);
        Ok(())
    }

    /// `FETCH_HEAD`, which git writes in place (never by rename), bound writable over
    /// itself (made empty if missing), so that no link can take its place; one with
    /// another name stays as it is.
    pub(super) fn open_fetch_head(&mut self, dir: &Path) {
        use std::os::unix::fs::MetadataExt;
        let fetch_head = dir.join("FETCH_HEAD");
        match std::fs::symlink_metadata(&fetch_head) {
            Ok(meta) if meta.is_file() && meta.nlink() == 1 => {
                let placeholder = is_placeholder(&fetch_head).then_some(EMPTY_CONFIG);
                self.push_as(fetch_head, placeholder, true);
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.push_as(fetch_head, Some(EMPTY_CONFIG), true);
            }
            _ => {}
        }
    }

    /// The top of a git directory that is itself writable (a bare repository that is a
    /// writable root): the files at its top that git rewrites through a link (its lock
    /// file follows one: `git pack-refs` would write the packed refs, branch names CMD
    /// chose, into whatever `packed-refs` leads to) are pinned, with an empty placeholder
    /// where missing (an empty `packed-refs` or `shallow` reads as none), and `FETCH_HEAD`
    /// is bound writable over itself; whatever else CMD leaves there that git never
    /// makes (a link in `logs/`, a FIFO in `objects/`) is removed after the run.
    pub(super) fn pin_bare_top(&mut self, dir: &Path) -> Result<(), WrapperError> {
        for (part, placeholder) in [
            ("HEAD", None),
            ("packed-refs", Some(EMPTY_CONFIG)),
            ("shallow", Some(EMPTY_CONFIG)),
        ] {
            let path = dir.join(part);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(WrapperError::ProtectedSymlink { path })
                }
                Ok(_) => {
                    let placeholder = placeholder.filter(|_| is_placeholder(&path));
                    self.push(path, placeholder);
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    if let Some(placeholder) = placeholder {
                        self.push(path, Some(placeholder));
                    }
                }
                Err(source) => return Err(path_error(path, source)),
            }
        }
        self.open_fetch_head(dir);
        for name in GIT_DATA_DIRS {
            let path = dir.join(name);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                refuse_hard_links(&path, dir)?;
            }
        }
        self.git_data.git_dirs.push(dir.to_owned());
        Ok(())
    }
}

/// Whether the repository whose git directory is `dir` keeps its refs in a reftable
/// (`reftable/` present, or `extensions.refStorage = reftable` in its config).
pub(super) fn uses_reftable(dir: &Path) -> bool {
    let common = common_dir_of(dir);
    if dir.join("reftable").is_dir() || common.join("reftable").is_dir() {
        return true;
    }
    gitconfig::read(&common.join("config")).is_some_and(|entries| {
        entries.iter().any(|e| {
            e.section == "extensions"
                && e.subsection.is_none()
                && e.key == "refstorage"
                && e.value
                    .as_deref()
                    .is_some_and(|v| v.eq_ignore_ascii_case("reftable"))
        })
    })
}

/// Entries a check for hard links reads under one data directory, at most: a repository
/// of loose objects that large is refused rather than half-checked (`git gc` packs it).
pub(super) const MAX_HARD_LINK_ENTRIES: usize = 200_000;

/// Refuses a data directory (`objects/`, `lfs/`, …) about to be left writable that holds
/// a regular file with more than one name: a local `git clone` hard-links its objects to
/// the source repository's, and CMD, owning the file, could `chmod u+w` it and rewrite
/// the object there too, outside every writable root (git does not check a loose
/// object's content against its name when it reads it). Nothing is followed.
pub(super) fn refuse_hard_links(data: &Path, git_dir: &Path) -> Result<(), WrapperError> {
    use std::os::unix::fs::MetadataExt;
    let mut pending = vec![data.to_owned()];
    let mut seen = 0;
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| path_error(dir.clone(), source))?;
        for entry in entries {
            let entry = entry.map_err(|source| path_error(dir.clone(), source))?;
            seen += 1;
            if seen > MAX_HARD_LINK_ENTRIES {
                return Err(WrapperError::GitDataUnchecked {
                    path: data.to_owned(),
                    limit: MAX_HARD_LINK_ENTRIES,
                });
            }
            let path = entry.path();
            let meta = entry
                .metadata()
                .map_err(|source| path_error(path.clone(), source))?;
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() && meta.nlink() > 1 {
                return Err(WrapperError::GitDataHardLink {
                    path,
                    links: meta.nlink(),
                    repository: git_dir.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// How a git directory is pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GitDirPin {
    /// All of it read-only.
    Whole,
    /// All of it read-only, with its data left writable on top (`--allow-git-writes`):
    /// a host `git commit` replaces files at its top (`index`, `config`), which would
    /// detach a pin on each, but never the directory itself.
    WholeButData,
    /// Only what runs code or leads git elsewhere (a bare repository that is a writable
    /// root itself).
    Parts,
}

/// Whether `dir` is a git directory as git's is_git_directory() sees one (a bare
/// repository, where it is not a `.git`): `HEAD`, and `objects` and `refs` (here or in
/// its common dir).
pub(super) fn is_git_directory(dir: &Path) -> bool {
    let common = common_dir_of(dir);
    dir.join("HEAD").is_file() && common.join("objects").is_dir() && common.join("refs").is_dir()
}

/// A git dir's common dir: where its `commondir` file points, or itself (also where that
/// is missing: there is nothing there to pin or look at).
pub fn common_dir_of(git_dir: &Path) -> PathBuf {
    read_git_pointer(&git_dir.join("commondir"))
        .ok()
        .and_then(|common| std::fs::canonicalize(git_dir.join(pointed_path(&common))).ok())
        .unwrap_or_else(|| git_dir.to_owned())
}

/// The git dir a `gitdir: PATH` file points at, and its common dir if it has one.
pub(super) fn git_dirs_of_gitfile(gitfile: &Path) -> Result<Vec<PathBuf>, WrapperError> {
    let read_error = |source| WrapperError::Path {
        path: gitfile.to_owned(),
        what: "gitdir file",
        source,
    };
    let text = read_git_pointer(gitfile).map_err(read_error)?;
    let Some(target) = gitfile_target(&text) else {
        return Err(read_error(std::io::Error::new(
            ErrorKind::InvalidData,
            "not a `gitdir: PATH` file",
        )));
    };
    let base = gitfile.parent().unwrap_or(Path::new("/"));
    let git_dir = std::fs::canonicalize(base.join(target)).map_err(read_error)?;
    let common = common_dir_of(&git_dir);
    let mut dirs = vec![git_dir.clone()];
    if common != git_dir {
        dirs.push(common);
    }
    Ok(dirs)
}
