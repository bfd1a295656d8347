//! The places under a home that the environment names for code (`PATH`, `EDITOR`,
//! `LESSOPEN`, ...: homesplit.rs finds them), where a writable root holds one: judged where
//! each really is, since the name the environment gives may lead through a link (`~/tools`
//! to `/data/tools`, with `--write ~/tools`), and the root is where the link leads.
//!
//! - In a project's environment (a Python venv, a `node_modules`): left writable for the
//!   tools that install there, and watched (a directory of them on `PATH` for the programs
//!   made in it, protect/mod.rs, as in any writable root).
//! - There: pinned read-only where it is. Reached through a link inside a root, the name is
//!   watched too: CMD could put a directory of its own in the link's place.
//! - Missing: its name given a placeholder where only it is missing (as the places under
//!   home that run code are), watched where a directory above it is missing too (CMD's own
//!   work may need that directory: `python -m venv`).

use std::path::{Path, PathBuf};

use super::paths::refuse_symlinks_in_roots;
use super::{is_placeholder, Found, Placeholder, WatchedAs};
use crate::plan::homesplit::resolve_existing_prefix;

impl Found<'_> {
    /// Pins or watches what the environment names for code under each of `homes`.
    pub(super) fn environment_named_code(&mut self, homes: &[PathBuf]) {
        const WHY: &str = "a place under home the environment names for code";
        for named in homes
            .iter()
            .flat_map(|h| crate::plan::homesplit::code_locations(h))
        {
            let real = resolve_existing_prefix(&named);
            let Some(root) = self
                .writable
                .iter()
                .find(|r| real.starts_with(r) && real != **r)
                .cloned()
            else {
                continue;
            };
            if in_environment(&real, &root) {
                self.watch(&real, WHY);
                continue;
            }
            if refuse_symlinks_in_roots(&named, self.writable, "code place").is_err() {
                let what = if real.is_dir() {
                    WatchedAs::Programs
                } else {
                    WatchedAs::Path
                };
                self.watch_as(&named, WHY, what);
            }
            if std::fs::symlink_metadata(&real).is_ok() {
                let placeholder = is_placeholder(&real).then_some(Placeholder::Dir);
                self.push(real, placeholder);
            } else if real.parent().is_some_and(Path::is_dir) {
                self.push(real, Some(Placeholder::Dir));
            } else {
                self.watch(&real, WHY);
            }
        }
    }
}

/// Whether `real` lies in a Python venv (a directory holding `pyvenv.cfg`) or a
/// `node_modules` within `root`, the root itself included: `pip install` and `npm install`
/// write there.
fn in_environment(real: &Path, root: &Path) -> bool {
    real.ancestors()
        .take_while(|a| a.starts_with(root))
        .any(|a| a.file_name() == Some("node_modules".as_ref()) || a.join("pyvenv.cfg").is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_is_found_up_to_the_root_and_no_further() {
        let dir = std::env::temp_dir().join(format!("netbox-envcode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("proj");
        std::fs::create_dir_all(root.join(".venv/bin")).unwrap();
        std::fs::write(root.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(dir.join("pyvenv.cfg"), "").unwrap();
        assert!(in_environment(&root.join(".venv/bin"), &root));
        assert!(in_environment(&root.join("web/node_modules/.bin"), &root));
        // Above the root does not count; beside the venv is no environment.
        assert!(!in_environment(&root.join("bin"), &root));
        std::fs::write(root.join("pyvenv.cfg"), "").unwrap();
        assert!(in_environment(&root.join("bin"), &root));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
