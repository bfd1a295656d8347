//! Reading a crate's own imports: every source file under `src/`, the top-level module
//! each belongs to, and the `crate::` paths it uses (comments left out: they name paths
//! without using them). Shared by both crates' architecture tests (the netbox crate's
//! includes this file), so the two read their sources the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level module a source file belongs to (`egress/fetch/tests.rs` → `egress`).
pub(crate) fn module_of(file: &Path, src: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}
pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
/// The first part of every `crate::NAME` in `text`, and of each path in a
/// `crate::{A, B::C}` group.
pub(crate) fn crate_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inside = &group[..group.find('}').unwrap_or(0)];
            found.extend(
                inside
                    .split(',')
                    .map(|p| p.trim().split("::").next().unwrap_or("").to_owned()),
            );
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found.retain(|n| !n.is_empty());
    found
}
/// Every module's uses of the others, from the sources under `src`, comments left out
/// (they name paths without using them).
pub(crate) fn uses(src: &Path) -> BTreeMap<String, BTreeSet<(String, PathBuf)>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    assert!(files.len() > 40, "the sources were not found");
    let mut uses: BTreeMap<String, BTreeSet<(String, PathBuf)>> = BTreeMap::new();
    for file in files {
        let module = module_of(&file, src);
        if module == "architecture" {
            continue; // Its own examples are text, not imports.
        }
        let text: String = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let entry = uses.entry(module.clone()).or_default();
        for used in crate_paths(&text) {
            if used != module {
                entry.insert((used, file.clone()));
            }
        }
    }
    uses
}
/// A module that reaches itself through the modules it uses, if there is one.
pub(crate) fn a_circle(uses: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut circle = path[start..].to_vec();
            circle.push(at.to_owned());
            return Some(circle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in uses.get(at).into_iter().flatten() {
            if let Some(circle) = visit(next, uses, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    uses.keys()
        .find_map(|module| visit(module, uses, &mut Vec::new(), &mut done))
}

/// The layer `module` is in, counted from the bottom of `layers`.
pub(crate) fn layer_in(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|layer| layer.contains(&module))
}

/// Each import in the crate at `src` of a module in a layer above the importer's, as
/// "FILE uses crate::MODULE". `layers` lists the top-level module names, bottom up.
pub(crate) fn upward_imports(src: &Path, layers: &[&[&str]]) -> Vec<String> {
    let layer_of = |module: &str| layer_in(layers, module);
    let mut upward = Vec::new();
    for (module, used) in uses(src) {
        let own = layer_of(&module)
            .unwrap_or_else(|| panic!("{module} is in no layer: add it to LAYERS"));
        for (theirs, file) in used {
            let Some(layer) = layer_of(&theirs) else {
                panic!("{}: crate::{theirs} is in no layer", file.display());
            };
            if layer > own {
                upward.push(format!("{} uses crate::{theirs}", file.display()));
            }
        }
    }
    upward
}

/// A circle among the top-level modules of the crate at `src` (a folder and its own files
/// count as one), if there is one.
pub(crate) fn circle_in(src: &Path) -> Option<Vec<String>> {
    let uses: BTreeMap<String, BTreeSet<String>> = uses(src)
        .into_iter()
        .map(|(module, used)| (module, used.into_iter().map(|(m, _)| m).collect()))
        .collect();
    a_circle(&uses)
}
