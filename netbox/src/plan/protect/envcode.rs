//! The places under a home that the environment names for code (`PATH`, `EDITOR`,
//! `LESSOPEN`, ...: homesplit/ finds them), where a writable root holds one: judged where
//! each really is, since the name the environment gives may lead through a link (`~/tools`
//! to `/data/tools`, with `--write ~/tools`), and the root is where the link leads.
//!
//! - Reached through a link inside a root: the name is watched, wherever the link leads,
//!   since CMD could put a directory of its own in the link's place.
//! - A directory in a project's environment (a Python venv, a `node_modules`, below the
//!   root): left writable for the tools that install there, and watched; the environment
//!   is watched whole wherever what is named lies in one (a `.pth` file in
//!   `site-packages` runs with every start of its python).
//! - Otherwise a directory or a file is pinned read-only where it is; anything else is
//!   watched: a missing place (a placeholder would stop CMD's own work: `python -m venv
//!   .venv` with `VIRTUAL_ENV` naming it), a link that leads nowhere, a socket, a FIFO.

use std::path::{Path, PathBuf};

use super::paths::refuse_symlinks_in_roots;
use super::{is_placeholder, Found, Placeholder, WatchedAs};
use crate::plan::homesplit::PrefixResolver;

impl Found<'_> {
    /// Pins or watches what the environment names for code under each of `homes`.
    pub(super) fn environment_named_code(
        &mut self,
        homes: &[PathBuf],
        resolver: &mut PrefixResolver,
    ) {
        const WHY: &str = "a place under home the environment names for code";
        for named in homes
            .iter()
            .flat_map(|h| crate::plan::homesplit::code_locations(h))
        {
            let real = resolver.resolve(&named);
            // A link inside a root on the way: CMD can put a directory of its own in its
            // place, wherever the link leads now (out of every root, into a venv).
            if refuse_symlinks_in_roots(&named, self.writable, "code place").is_err() {
                let what = if real.is_dir() {
                    WatchedAs::Programs
                } else {
                    WatchedAs::Path
                };
                self.watch_as(&named, WHY, what);
            }
            let Some(root) = self
                .writable
                .iter()
                .find(|r| real.starts_with(r) && real != **r)
                .cloned()
            else {
                // A whole root cannot be pinned and still be written, and every place
                // named in a root names the root too (homesplit/ takes the entry after
                // home's path as a name, for names with spaces): watched, it would be
                // said of every run. Not covered: docs/running.md.
                continue;
            };
            let kept = std::fs::symlink_metadata(&real).ok();
            let is_dir = kept.as_ref().is_some_and(std::fs::Metadata::is_dir);
            // What runs from an environment loads the rest of it (a `.pth` file in
            // `site-packages` runs with every start of its python), a file named in it too.
            let environment = environment_of(&real, &root);
            if let Some(environment) = &environment {
                self.watch_as(
                    environment,
                    "a program your variables name",
                    WatchedAs::Tree,
                );
            }
            match kept {
                _ if environment.is_some() && (is_dir || kept.is_none()) => {
                    self.watch_as(&real, WHY, WatchedAs::Programs);
                }
                Some(meta) if meta.is_dir() || meta.is_file() => {
                    let placeholder = is_placeholder(&real).then_some(Placeholder::Dir);
                    self.push(real, placeholder);
                }
                // Missing: a placeholder would stop CMD's own work (`python -m venv .venv`
                // with VIRTUAL_ENV naming it). A link that leads nowhere, a socket, a FIFO:
                // nothing a mount can hold still.
                _ => self.watch(&real, WHY),
            }
        }
    }
}

/// The Python venv (a directory holding `pyvenv.cfg` and `bin/python`) or the
/// `node_modules` that `real` lies in, below `root` (a root is not one: a repository can
/// ship a `pyvenv.cfg` at its top): `pip install` and `npm install` write there.
fn environment_of(real: &Path, root: &Path) -> Option<PathBuf> {
    real.ancestors()
        .take_while(|a| a.starts_with(root) && *a != root)
        .find(|a| {
            a.file_name() == Some("node_modules".as_ref())
                || (a.join("pyvenv.cfg").is_file()
                    && std::fs::symlink_metadata(a.join("bin/python")).is_ok())
        })
        .map(Path::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_is_found_below_the_root_and_no_further() {
        let dir = std::env::temp_dir().join(format!("netbox-envcode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("proj");
        let venv = root.join(".venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        // A pyvenv.cfg with no python beside it is no venv.
        assert_eq!(environment_of(&venv.join("bin"), &root), None);
        std::os::unix::fs::symlink("/usr/bin/python3", venv.join("bin/python")).unwrap();
        assert_eq!(environment_of(&venv.join("bin"), &root), Some(venv));
        assert_eq!(
            environment_of(&root.join("web/node_modules/.bin"), &root),
            Some(root.join("web/node_modules"))
        );
        // Neither the root itself nor above it counts.
        for above in [&dir, &root] {
            std::fs::create_dir_all(above.join("bin")).unwrap();
            std::os::unix::fs::symlink("/usr/bin/python3", above.join("bin/python")).unwrap();
            std::fs::write(above.join("pyvenv.cfg"), "").unwrap();
        }
        assert_eq!(environment_of(&root.join("bin"), &root), None);
        assert_eq!(
            environment_of(&root.join("node_modules"), &root.join("node_modules")),
            None
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
