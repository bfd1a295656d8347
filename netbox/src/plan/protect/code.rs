//! The code git runs or reads, pinned where it lies in a writable root: what the shared
//! and the repository's own configuration name (hooks, helpers, include files), links
//! followed to their targets, and the hook runners a hook names.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::gitcode::Role;
use super::gitconfig::CodePath;
use super::paths::refuse_symlinks_in_roots;
use super::placeholders::Placeholder;
use super::placeholders::EMPTY_CONFIG;
use super::{codes_of, Found, Lay};
use crate::error::WrapperError;
use crate::paths::exact_text::{path_of, text_of};

impl Found<'_> {
    /// What the shared configuration's relative paths name at `dir`, where git run
    /// outside any repository (or in one made later) takes them from.
    pub(super) fn shared_relative(&mut self, dir: &Path, lay: Lay) -> Result<(), WrapperError> {
        for code in self.shared_codes(Some(dir))? {
            self.pin_code(&code, lay)?;
        }
        Ok(())
    }

    /// What the shared configuration names, relative paths against `run_dir`.
    pub(super) fn shared_codes(
        &self,
        run_dir: Option<&Path>,
    ) -> Result<Vec<CodePath>, WrapperError> {
        codes_of(&self.shared, run_dir, self.home)
    }

    pub(super) fn pin_code(&mut self, code: &CodePath, lay: Lay) -> Result<(), WrapperError> {
        let outer = self.name(&code.setting, &code.path);
        let pinned = self.pin_code_path(code, lay);
        self.naming = outer;
        pinned
    }

    pub(super) fn pin_code_path(&mut self, code: &CodePath, lay: Lay) -> Result<(), WrapperError> {
        // A word that can be no file's name (an awk program's text slipped through) is
        // no path at all. A setting's whole value is the path git uses, whatever bytes
        // it holds (`hooksPath = .ho<TAB>ks`).
        if code.role != Role::Value && !could_be_a_file(&code.path) {
            return Ok(());
        }
        // A setting naming a whole writable root (`core.hooksPath = .`): a root cannot
        // be pinned and still be written.
        let real = std::fs::canonicalize(&code.path).unwrap_or_else(|_| code.path.clone());
        if self.writable.iter().any(|r| r.starts_with(&real)) {
            if code.leaf == Placeholder::Dir {
                return Err(WrapperError::Usage(format!(
                    "{} names {}, which is (or holds) a writable root: netbox cannot keep git's \
                     hooks there read-only while CMD may write it; leave it out of the writable \
                     roots (--write only the directories CMD needs)",
                    code.setting,
                    code.path.display()
                )));
            }
            return Ok(());
        }
        // Found on PATH, or a word that names a file: watched, never pinned (a venv's
        // entry point, a file an argument names), with the environment it runs from.
        if matches!(code.role, Role::Bare | Role::Mentioned) {
            if self.writable(&real) {
                self.watch(&code.path, &code.setting);
                self.watch_environment(&real, &code.setting);
            }
            return Ok(());
        }
        // A program that is a FIFO, socket or device cannot be run (execve refuses it):
        // watched, where what a reader reads (a config, a script) stops the run.
        if code.role == Role::Program && super::is_special_file(&real) {
            self.watch(&code.path, &code.setting);
            return Ok(());
        }
        // Named anywhere, a file with another name in a root changes with it.
        self.watch_if_linked(&code.path);
        if code.role != Role::Value {
            // A program or script: reached through a link in a root (a venv's
            // `python3`, a package manager's `node_modules/.bin` link), or below a
            // missing directory, it is watched rather than refused or given a
            // placeholder directory that would stop CMD's own work (`npm install`).
            self.watch_environment(&code.path, &code.setting);
            if refuse_symlinks_in_roots(&code.path, self.writable, "program").is_err() {
                self.watch(&code.path, &code.setting);
                return Ok(());
            }
            // Only the leaf missing: a placeholder file holds its place.
            let leaf_missing = code.path.parent().is_some_and(Path::is_dir);
            if !code.path.exists() && !leaf_missing {
                if self.writable(&real) {
                    self.watch(&code.path, &code.setting);
                }
                return Ok(());
            }
        }
        self.pin_named(&code.path, code.leaf, "path in git config", lay)?;
        if code.leaf == Placeholder::Dir {
            // A hooks or template directory: links in it lead git on to their targets.
            self.pin_link_targets(&real, 0)?;
            self.pin_link_targets(&real.join("hooks"), 0)?;
        }
        Ok(())
    }

    /// Pins the targets of the links in the pinned directory `dir` (a git directory's
    /// hooks, a hooks path): a link cannot change, but what it leads to in a writable
    /// root could (`.git/hooks/pre-commit -> ../../scripts/pre-commit`, a tracked file).
    pub(super) fn pin_link_targets(
        &mut self,
        dir: &Path,
        depth: usize,
    ) -> Result<(), WrapperError> {
        // A link added there later leads git elsewhere.
        self.basis.sources.record(dir);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten().take(MAX_LINKS_LOOKED_AT) {
            if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
                // A hook with another name elsewhere (a hard link) is written there.
                self.watch_if_linked(&entry.path());
                continue;
            }
            let Ok(target) = std::fs::read_link(entry.path()) else {
                continue;
            };
            self.pin_link_target(&dir.join(target), depth)?;
        }
        Ok(())
    }

    /// Pins what a link in a pinned place leads to (`target`, as the link names it,
    /// relative to the link's directory), and what links in it lead to, a level or two.
    pub(super) fn pin_link_target(
        &mut self,
        target: &Path,
        depth: usize,
    ) -> Result<(), WrapperError> {
        let outer = self.name_further(target);
        let pinned = self
            .pin_named(
                target,
                EMPTY_CONFIG,
                "target of a link git follows",
                Lay::Placeholders,
            )
            .and_then(|()| {
                if depth < 2 && target.is_dir() {
                    let real = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_owned());
                    self.pin_link_targets(&real, depth + 1)?;
                }
                Ok(())
            });
        self.naming = outer;
        pinned
    }

    /// What the hook runners a repository's hooks start read from its work tree: a hook
    /// is only as safe as what it runs. husky's hooks (`core.hooksPath = .husky/_`) run
    /// the scripts beside them in `.husky/`; pre-commit's read `.pre-commit-config.yaml`;
    /// lefthook's read `lefthook.yml` and its variants. Each is pinned (the configs with a
    /// placeholder where a runner would pick up a new one).
    pub(super) fn pin_hook_runners(
        &mut self,
        hooks: &Path,
        run_dir: &Path,
    ) -> Result<(), WrapperError> {
        if hooks.file_name() == Some(std::ffi::OsStr::new("_")) {
            if let Some(parent) = hooks.parent() {
                let outer = self.name("husky's scripts beside its hooks", parent);
                let pinned = self
                    .pin_named(
                        parent,
                        Placeholder::Dir,
                        "hook runner's scripts",
                        Lay::Placeholders,
                    )
                    .and_then(|()| self.pin_link_targets(parent, 0));
                self.naming = outer;
                pinned?;
            }
        }
        // A hook installed later may be a runner's.
        self.basis.sources.record(hooks);
        let Ok(entries) = std::fs::read_dir(hooks) else {
            return Ok(());
        };
        let mut texts = String::new();
        for entry in entries.flatten().take(MAX_LINKS_LOOKED_AT) {
            let name = entry.file_name();
            if name.to_string_lossy().ends_with(".sample") {
                continue;
            }
            self.basis.sources.record(&entry.path());
            if let Ok(bytes) = bridge::small_file::read_small_bytes(&entry.path(), 64 << 10) {
                texts.push_str(&text_of(std::ffi::OsStr::from_bytes(&bytes)));
            }
        }
        // pre-commit's hooks run `$INSTALL_PYTHON -mpre_commit`: the environment that
        // python belongs to (a project venv) runs as the hook.
        for line in texts.lines() {
            if let Some(python) = line.trim().strip_prefix("INSTALL_PYTHON=") {
                let python = path_of(python.trim_matches(|c| c == '\'' || c == '"'));
                if python.is_absolute() {
                    self.watch_environment(&python, "the python a hook runs");
                }
            }
        }
        for (runner, files) in HOOK_RUNNERS {
            if !texts.contains(runner) {
                continue;
            }
            let mut files: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
            // pre-commit installed with another config (`--config=ci/pre-commit.yaml`).
            files.extend(config_arguments(&texts));
            for file in files {
                let path = run_dir.join(path_of(file.trim_end_matches('/')));
                if path.symlink_metadata().is_ok() {
                    let outer = self.name(&format!("{runner}'s configuration"), &path);
                    let pinned = self.pin_named(
                        &path,
                        EMPTY_CONFIG,
                        "hook runner's configuration",
                        Lay::Placeholders,
                    );
                    self.naming = outer;
                    pinned?;
                } else if self.writable(&path) {
                    // Named all the same: one that appears later was looked for.
                    self.basis.named.insert(path.clone());
                    // One a runner would pick up if it appeared: said if CMD makes it.
                    self.watch(&path, &format!("a configuration {runner} reads"));
                }
            }
        }
        Ok(())
    }
}

/// Entries looked at in one directory for links and hook runners.
pub(super) const MAX_LINKS_LOOKED_AT: usize = 4096;

/// Hook runners (a word their installed hooks hold) and the files in the work tree they
/// read what to run from (a trailing `/` for a directory).
pub(super) const HOOK_RUNNERS: &[(&str, &[&str])] = &[
    (
        "pre-commit",
        &[".pre-commit-config.yaml", ".pre-commit-config.yml"],
    ),
    (
        "lefthook",
        &[
            "lefthook.yml",
            "lefthook.yaml",
            "lefthook.json",
            "lefthook.jsonc",
            "lefthook.toml",
            ".lefthook.yml",
            ".lefthook.yaml",
            ".lefthook.json",
            ".lefthook.jsonc",
            ".lefthook.toml",
            "lefthook-local.yml",
            "lefthook-local.yaml",
            "lefthook-local.json",
            "lefthook-local.jsonc",
            "lefthook-local.toml",
            ".lefthook-local.yml",
            ".lefthook-local.yaml",
            ".lefthook-local.json",
            ".lefthook-local.jsonc",
            ".lefthook-local.toml",
            ".config/lefthook.yml",
            ".config/lefthook.yaml",
            ".config/lefthook-local.yml",
            ".config/lefthook-local.yaml",
            ".lefthook/",
            ".lefthook-local/",
        ],
    ),
];

/// The files a hook names with `--config=FILE` or `--config FILE` (pre-commit's own
/// `pre-commit install -c FILE` writes them into its hooks).
pub(super) fn config_arguments(text: &str) -> Vec<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_ascii_whitespace() || c == '"' || c == '\'' || c == '(' || c == ')')
        .filter(|w| !w.is_empty())
        .collect();
    let mut found = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let file = match word.strip_prefix("--config=") {
            Some(file) => Some(file),
            None if *word == "--config" => words.get(i + 1).copied(),
            None => None,
        };
        if let Some(file) = file.filter(|f| could_be_a_file(&path_of(f)) && !f.starts_with('$')) {
            found.push(file.to_owned());
        }
    }
    found
}

/// Whether `path` could name a file: no component longer than the kernel allows
/// (NAME_MAX, 255 bytes), and no control character (an awk program's text, a format
/// string that slipped through, is no path).
pub(super) fn could_be_a_file(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.components().all(|c| {
        let bytes = c.as_os_str().as_bytes();
        bytes.len() <= 255 && !bytes.iter().any(|b| b.is_ascii_control())
    })
}
