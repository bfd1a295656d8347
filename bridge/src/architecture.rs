//! The layers of this crate, checked: a module may use what lies in its own layer or
//! below, never above, and no two modules use each other, even through others (lib.rs
//! gives the reading order). Read from the sources' `crate::` paths, so a new upward
//! import fails `cargo test` with the file and the path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the bottom up: the top-level module names each holds.
const LAYERS: &[&[&str]] = &[
    &[
        "target",
        "ipclass",
        "local_routes",
        "small_file",
        "memory",
        "terminal",
        "outbound",
        "counting",
        "client_io",
        "text",
        "tls",
    ],
    &["policy"],
    &["log"],
    &["session"],
    &["egress"],
    &["conn"],
    &["carry"],
    &["front"],
    &["serve"],
    &["fuzzing", "lib", "architecture"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a source file belongs to (`egress/fetch/tests.rs` → `egress`).
fn module_of(file: &Path, src: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
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
fn crate_paths(text: &str) -> Vec<String> {
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
fn uses(src: &Path) -> BTreeMap<String, BTreeSet<(String, PathBuf)>> {
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
fn a_circle(uses: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward = Vec::new();
    for (module, used) in uses(&src) {
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
    assert!(
        upward.is_empty(),
        "imports that run upward:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_two_modules_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let uses: BTreeMap<String, BTreeSet<String>> = uses(&src)
        .into_iter()
        .map(|(module, used)| (module, used.into_iter().map(|(m, _)| m).collect()))
        .collect();
    assert_eq!(a_circle(&uses), None, "modules that use each other");
}

#[test]
fn an_upward_import_and_a_circle_are_caught() {
    // The same readings applied to made-up text: the bottom layer using `conn`.
    let text = "use crate::conn::Conn;\nuse crate::{log::Attempt, policy};";
    assert_eq!(crate_paths(text), ["conn", "log", "policy"]);
    let own = layer_of("target").unwrap();
    assert!(layer_of("conn").unwrap() > own);
    let uses: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &[][..]),
    ]
    .into_iter()
    .map(|(m, used)| (m.to_owned(), used.iter().map(|u| u.to_string()).collect()))
    .collect();
    assert_eq!(
        a_circle(&uses).unwrap(),
        ["a", "b", "c", "a"].map(String::from)
    );
}
