//! The pins checked again while the run goes on. They are chosen once, at the start,
//! from git's configuration, the indexes and the hooks; the mounts cannot grow after
//! (pid 1 has dropped its capabilities). If a host program changes one of those files
//! during the run (husky's `prepare` sets `core.hooksPath .husky/_`, `git submodule add`
//! records a gitlink, the user edits `~/.gitconfig`), a path may now be needed read-only
//! that no pin covers: CMD could plant a hook there for the user's next `git commit`.
//!
//! [`Recheck`] holds what the start chose and from what ([`super::Basis`]); when a source
//! file changes (supervise/gitwatch.rs polls them), it chooses again, as the start would
//! now, and returns each read-only pin the new choice makes that
//! - was made for something named (a setting, a gitlink, a hook runner, a link in a
//!   hooks directory) that the start did not name: what the start named it decided then
//!   (pinned, watched, or left as missing under a home entry), and what CMD did since to
//!   the writable paths around it must not turn into a stop at the user's `git commit`;
//! - for a repository the start pinned, or for none (the shared configuration): a
//!   repository that appeared during the run (CMD's `git init` in a home entry) is the
//!   check after the run's (supervise/gitaudit);
//! - and that no pin of the run covers: the deepest mount over it is not read-only.
//!
//! Reading again reads what CMD may have written: a configuration the host now includes
//! from a writable root, a hooks directory there. Those files are themselves such pins
//! (an include is pinned as a file read), so the run stops whatever they hold; what they
//! name only adds lines to that stop. A file there that cannot be read, or a link in the
//! way, fails the choice as it would at the start: the run stops then too.

use std::path::{Path, PathBuf};

use super::{pins_now, Basis, Naming, ProtectInput, Protected, Watched, WatchedAs};
use crate::error::WrapperError;

/// What [`super::protected_paths`] was given, kept for choosing again.
#[derive(Debug, Clone)]
pub struct ProtectRequest {
    pub write_roots: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub home_entries: Vec<PathBuf>,
    pub home: Option<PathBuf>,
    pub homes: Vec<PathBuf>,
    pub extra: Vec<PathBuf>,
    pub allow_git_writes: bool,
    pub other_names: Vec<(PathBuf, PathBuf)>,
}

impl ProtectRequest {
    pub fn of(input: &ProtectInput<'_>) -> ProtectRequest {
        ProtectRequest {
            write_roots: input.write_roots.to_vec(),
            writable: input.writable.to_vec(),
            home_entries: input.home_entries.to_vec(),
            home: input.home.map(Path::to_owned),
            homes: input.homes.to_vec(),
            extra: input.extra.to_vec(),
            allow_git_writes: input.allow_git_writes,
            other_names: input.other_names.to_vec(),
        }
    }

    fn input(&self) -> ProtectInput<'_> {
        ProtectInput {
            write_roots: &self.write_roots,
            writable: &self.writable,
            home_entries: &self.home_entries,
            home: self.home.as_deref(),
            homes: &self.homes,
            extra: &self.extra,
            allow_git_writes: self.allow_git_writes,
            other_names: &self.other_names,
        }
    }
}

/// A path now needed read-only that the run's mounts leave writable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncovered {
    pub path: PathBuf,
    pub naming: Naming,
}

/// What the run's pins are, and what they were chosen from.
#[derive(Debug)]
pub struct Recheck {
    request: ProtectRequest,
    /// The mounts over the writable roots: each path, and whether it is read-only.
    mounts: Vec<(PathBuf, bool)>,
    /// What the run's pins were chosen from; its sources, as the last choice read them.
    basis: Basis,
    /// What was watched so far (the start's, and what later choices added).
    watched: Vec<(PathBuf, WatchedAs)>,
}

/// What one check found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Needed read-only, and not covered: the run must stop.
    pub uncovered: Vec<Uncovered>,
    /// Paths the new choice watches that nothing watched before (a program below a
    /// missing directory a new setting names): for the check after the run.
    pub newly_watched: Vec<Watched>,
}

impl Recheck {
    /// The run's pins, what it watches and what they were chosen from, as `request`
    /// chose them; `read_only`, the other read-only mounts over the writable roots
    /// (`--ro`, `--hide`), which cover what lies in them.
    pub fn new(
        request: ProtectRequest,
        pinned: &[Protected],
        watched: &[Watched],
        basis: Basis,
        read_only: &[PathBuf],
    ) -> Recheck {
        let mut mounts: Vec<(PathBuf, bool)> = pinned
            .iter()
            .map(|p| (p.path.clone(), !p.writable))
            .collect();
        mounts.extend(read_only.iter().map(|p| (p.clone(), true)));
        let watched = watched.iter().map(|w| (w.path.clone(), w.what)).collect();
        Recheck {
            request,
            mounts,
            basis,
            watched,
        }
    }

    /// The first source file that changed since it was read, if any.
    pub fn changed(&self) -> Option<&Path> {
        self.basis.sources.changed()
    }

    /// Chooses the pins again and compares; the next [`Recheck::changed`] is against
    /// what this choice read.
    pub fn check(&mut self) -> Result<Outcome, WrapperError> {
        let now = pins_now(&self.request.input())?;
        let mut outcome = Outcome::default();
        for (path, naming) in &now.basis.needs {
            if self.needs_a_new_pin(path, naming)
                && !outcome.uncovered.iter().any(|u| u.path == *path)
            {
                outcome.uncovered.push(Uncovered {
                    path: path.clone(),
                    naming: naming.clone(),
                });
            }
        }
        for watched in now.watched {
            let key = (watched.path.clone(), watched.what);
            if !self.watched.contains(&key) {
                self.watched.push(key);
                outcome.newly_watched.push(watched);
            }
        }
        self.basis.sources = now.basis.sources;
        Ok(outcome)
    }

    fn needs_a_new_pin(&self, path: &Path, naming: &Naming) -> bool {
        let basis = &self.basis;
        let known_repository = naming
            .repository
            .as_ref()
            .is_none_or(|r| basis.repositories.contains(&r.git_dir));
        known_repository && !basis.named.contains(&naming.named) && !self.covered(path)
    }

    /// Whether the deepest of the run's mounts over `path` is read-only (mounts are laid
    /// outer before inner: a writable part of a git directory over its pin, a pin inside
    /// that part over it).
    fn covered(&self, path: &Path) -> bool {
        self.mounts
            .iter()
            .filter(|(mount, _)| path.starts_with(mount))
            .max_by_key(|(mount, _)| mount.components().count())
            .is_some_and(|(_, read_only)| *read_only)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::protect::RepositoryName;

    fn pin(path: &str, writable: bool) -> Protected {
        Protected {
            path: PathBuf::from(path),
            placeholder: None,
            writable,
        }
    }

    fn naming(repository: Option<&str>, named: &str) -> Naming {
        Naming {
            repository: repository.map(|r| RepositoryName {
                git_dir: PathBuf::from(r),
                shown: PathBuf::from(r),
            }),
            setting: "core.hookspath".into(),
            named: PathBuf::from(named),
        }
    }

    /// A run on /ws with `.git` pinned, `.git/refs` bound writable on top, `.husky`
    /// named and pinned, and `/ws/vendor` read-only (`--ro`).
    fn recheck() -> Recheck {
        let pinned = [
            pin("/ws/.git", false),
            pin("/ws/.git/refs", true),
            pin("/ws/.git/refs/pinned", false),
            pin("/ws/.husky", false),
        ];
        let basis = Basis {
            named: [
                PathBuf::from("/ws/.husky"),
                PathBuf::from("/ws/node_modules/x"),
            ]
            .into(),
            repositories: [PathBuf::from("/ws/.git")].into(),
            ..Basis::default()
        };
        let request = ProtectRequest {
            write_roots: vec![PathBuf::from("/ws")],
            writable: vec![PathBuf::from("/ws")],
            home_entries: Vec::new(),
            home: None,
            homes: Vec::new(),
            extra: Vec::new(),
            allow_git_writes: true,
            other_names: Vec::new(),
        };
        Recheck::new(request, &pinned, &[], basis, &[PathBuf::from("/ws/vendor")])
    }

    #[test]
    fn a_new_need_stops_the_run_only_where_no_read_only_mount_covers_it() {
        let r = recheck();
        let ws = Some("/ws/.git");
        // (case, path pinned, what named it, needs a new pin)
        let cases = [
            (
                "a new hooks path in the work tree",
                "/ws/.husky2/_",
                naming(ws, "/ws/.husky2/_"),
                true,
            ),
            (
                "inside the pinned git directory",
                "/ws/.git/hooks2",
                naming(ws, "/ws/.git/hooks2"),
                false,
            ),
            (
                "inside its writable refs",
                "/ws/.git/refs/hooks",
                naming(ws, "/ws/.git/refs/hooks"),
                true,
            ),
            (
                "inside a pin inside the refs",
                "/ws/.git/refs/pinned/x",
                naming(ws, "/ws/.git/refs/pinned/x"),
                false,
            ),
            (
                "inside a --ro path",
                "/ws/vendor/hooks",
                naming(ws, "/ws/vendor/hooks"),
                false,
            ),
            (
                "inside a pinned directory",
                "/ws/.husky/x",
                naming(ws, "/ws/.husky/x"),
                false,
            ),
            (
                "a name's prefix is not its parent",
                "/ws/.gitx",
                naming(ws, "/ws/.gitx"),
                true,
            ),
            (
                "named at the start (decided then)",
                "/ws/node_modules/x",
                naming(ws, "/ws/node_modules/x"),
                false,
            ),
            (
                "shared configuration, no repository",
                "/ws/.githooks",
                naming(None, "/ws/.githooks"),
                true,
            ),
            (
                "a repository made during the run",
                "/ws/lib/hooks",
                naming(Some("/ws/lib/.git"), "/ws/lib/hooks"),
                false,
            ),
        ];
        for (case, path, naming, expected) in cases {
            assert_eq!(
                r.needs_a_new_pin(Path::new(path), &naming),
                expected,
                "{case}"
            );
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("netbox-recheck-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::canonicalize(&dir).unwrap()
    }

    /// A repository's git directory as git lays it out: enough for netbox to take it for
    /// one.
    fn git_dir(at: &Path) {
        for dir in ["objects", "refs/heads", "hooks"] {
            std::fs::create_dir_all(at.join(dir)).unwrap();
        }
        std::fs::write(at.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(at.join("config"), "[core]\n\tbare = false\n").unwrap();
    }

    /// Replaces `path` by rename, as git does.
    fn replace(path: &Path, text: &str) {
        let lock = path.with_extension("lock");
        std::fs::write(&lock, text).unwrap();
        std::fs::rename(&lock, path).unwrap();
    }

    /// The pins of a run on `ws` (with `notes` a home entry), and their recheck.
    fn start(ws: &Path, home_entries: &[PathBuf], allow_git_writes: bool) -> Recheck {
        let roots = [ws.to_owned()];
        let input = ProtectInput {
            write_roots: &roots,
            writable: &roots,
            home_entries,
            home: None,
            homes: &[],
            extra: &[],
            allow_git_writes,
            other_names: &[],
        };
        let protection = super::super::protected_paths(&input).unwrap();
        Recheck::new(
            ProtectRequest::of(&input),
            &protection.pinned,
            &protection.watched,
            protection.basis,
            &[],
        )
    }

    #[test]
    fn a_hooks_path_set_during_the_run_is_found_and_a_commit_is_not() {
        for allow_git_writes in [false, true] {
            let ws = tempdir(&format!("hookspath-{allow_git_writes}"));
            git_dir(&ws.join(".git"));
            let empty_index = match super::super::placeholders::EMPTY_INDEX_SHA1 {
                super::super::Placeholder::File(bytes) => bytes,
                super::super::Placeholder::Dir => unreachable!("a file"),
            };
            std::fs::write(ws.join(".git/index"), empty_index).unwrap();
            let mut r = start(&ws, &[], allow_git_writes);
            assert_eq!(r.changed(), None);
            // The user's own commit and config: the index and config replaced, nothing
            // new named (a hooks path outside the roots is read-only anyway).
            std::fs::write(ws.join(".git/index.new"), empty_index).unwrap();
            std::fs::rename(ws.join(".git/index.new"), ws.join(".git/index")).unwrap();
            replace(
                &ws.join(".git/config"),
                "[user]\n\tname = U\n[core]\n\thooksPath = /nonexistent/hooks\n",
            );
            assert_eq!(r.changed(), Some(ws.join(".git/config").as_path()));
            let outcome = r.check().unwrap();
            assert_eq!(outcome.uncovered, Vec::new());
            // Read again: nothing changed since.
            assert_eq!(r.changed(), None);
            // husky's `prepare`: a hooks path in the work tree.
            replace(&ws.join(".git/config"), "[core]\n\thooksPath = .husky/_\n");
            let outcome = r.check().unwrap();
            let first = outcome.uncovered.first().expect("the new hooks path");
            assert_eq!(first.path, ws.join(".husky"));
            assert_eq!(first.naming.setting, "core.hookspath");
            assert_eq!(first.naming.named, ws.join(".husky/_"));
            assert_eq!(first.naming.repository.as_ref().unwrap().shown, ws);
            std::fs::remove_dir_all(&ws).unwrap();
        }
    }

    #[test]
    fn what_the_start_named_or_a_repository_made_during_the_run_names_does_not_stop_it() {
        let ws = tempdir("decided");
        git_dir(&ws.join(".git"));
        // Named at the start, below a missing directory: watched, not pinned.
        std::fs::write(
            ws.join(".git/config"),
            "[core]\n\tfsmonitor = ./node_modules/.bin/fsmon\n",
        )
        .unwrap();
        let notes = ws.join("notes");
        std::fs::create_dir(&notes).unwrap();
        let mut r = start(&ws, std::slice::from_ref(&notes), false);
        // CMD fills both: `npm install`, and `git init` in a home entry with a hooks path.
        std::fs::create_dir_all(ws.join("node_modules/.bin")).unwrap();
        std::fs::write(ws.join("node_modules/.bin/fsmon"), "").unwrap();
        git_dir(&notes.join(".git"));
        std::fs::write(notes.join(".git/config"), "[core]\n\thooksPath = hooks\n").unwrap();
        std::fs::create_dir(notes.join("hooks")).unwrap();
        // The user's `git config` then makes netbox choose again: neither stops the run.
        replace(
            &ws.join(".git/config"),
            "[core]\n\tfsmonitor = ./node_modules/.bin/fsmon\n[user]\n\tname = U\n",
        );
        let outcome = r.check().unwrap();
        assert_eq!(outcome.uncovered, Vec::new());
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn an_include_or_a_link_among_the_hooks_added_during_the_run_is_found() {
        let ws = tempdir("include");
        git_dir(&ws.join(".git"));
        std::fs::create_dir(ws.join("scripts")).unwrap();
        std::fs::write(ws.join("scripts/pre-commit"), "").unwrap();
        let mut r = start(&ws, &[], false);
        // A hook installed as a link into the work tree.
        std::os::unix::fs::symlink("../../scripts/pre-commit", ws.join(".git/hooks/pre-commit"))
            .unwrap();
        assert_eq!(r.changed(), Some(ws.join(".git/hooks").as_path()));
        let outcome = r.check().unwrap();
        assert_eq!(
            outcome.uncovered.first().map(|u| u.path.clone()),
            Some(ws.join("scripts/pre-commit"))
        );
        // An include from the work tree: the file itself must be read-only.
        replace(
            &ws.join(".git/config"),
            "[include]\n\tpath = ../team.gitconfig\n",
        );
        std::fs::write(ws.join("team.gitconfig"), "").unwrap();
        let outcome = r.check().unwrap();
        assert!(
            outcome
                .uncovered
                .iter()
                .any(|u| u.path == ws.join("team.gitconfig") && u.naming.setting == "include.path"),
            "{outcome:?}"
        );
        std::fs::remove_dir_all(&ws).unwrap();
    }
}
