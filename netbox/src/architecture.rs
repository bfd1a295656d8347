//! The layers of this crate, checked: a module may use what lies in its own layer or
//! below, never above, and no two modules use each other (ARCHITECTURE.md). Read from the
//! sources' `crate::` paths, so a new upward import fails `cargo test` with the file and
//! the path. And ARCHITECTURE.md itself: every path it names is code that exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the bottom up: the top-level module names each holds.
const LAYERS: &[&[&str]] = &[
    &[
        "sys",
        "error",
        "output",
        "printable",
        "terminal",
        "limits",
        "cpu",
        "place",
        "testhooks",
        "cli",
    ],
    &["plan"],
    &["sandbox"],
    &["supervise"],
    &["commands"],
    &["main", "architecture"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a source file belongs to (`plan/tools/pip.rs` → `plan`).
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

/// Every `crate::NAME` in `text`, and the `crate::{A, B}` groups' names.
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

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut upward = Vec::new();
    for file in &files {
        let module = module_of(file, &src);
        let own = layer_of(&module)
            .unwrap_or_else(|| panic!("{module} is in no layer: add it to LAYERS"));
        if module == "architecture" {
            continue; // Its own examples are text, not imports.
        }
        // Comments name paths without using them.
        let text: String = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for used in crate_paths(&text) {
            let Some(theirs) = layer_of(&used) else {
                panic!("{}: crate::{used} is in no layer", file.display());
            };
            if theirs > own {
                upward.push(format!("{} uses crate::{used}", file.display()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run upward:\n{}",
        upward.join("\n")
    );
    // The check sees what it should: every layer is found, and a test's own text counts.
    assert!(files.len() > 40);
    assert_eq!(
        crate_paths("use crate::{plan::config, sys};"),
        ["plan", "sys"]
    );
}

#[test]
fn an_upward_import_is_caught() {
    // The same reading applied to a made-up file of the bottom layer that uses `plan`.
    let text = "use crate::plan::config::SandboxConfig;";
    let own = layer_of("sys").unwrap();
    assert!(crate_paths(text)
        .iter()
        .any(|used| layer_of(used).unwrap() > own));
}

/// Every module of both crates: its path (`egress::fetch`, `commands::run`) and its text.
fn modules(crates: &[PathBuf]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for src in crates {
        let mut files = Vec::new();
        sources(src, &mut files);
        for file in files {
            let relative = file.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            found.push((parts.join("::"), text));
        }
    }
    found
}

/// Whether `path` (`bridge::egress::open`, `plan::protect`, `Conn::policy`,
/// `tenants::Tenants`) names code that exists: its leading parts a module (a whole path
/// from a crate's root, or its last parts), the rest items that module defines.
fn names_code(path: &str, modules: &[(String, String)]) -> bool {
    let parts: Vec<&str> = path
        .split("::")
        .skip_while(|p| *p == "bridge" || *p == "crate")
        .collect();
    (0..=parts.len()).rev().any(|k| {
        let module = parts[..k].join("::");
        let items = &parts[k..];
        modules.iter().any(|(name, text)| {
            let is_module = k == 0 || *name == module || name.ends_with(&format!("::{module}"));
            is_module && items.iter().all(|item| defines(text, item))
        })
    })
}

/// Whether `text` defines `name`: a type, function, constant, module, field or variant.
fn defines(text: &str, name: &str) -> bool {
    let kinds = [
        "fn ", "struct ", "enum ", "const ", "type ", "trait ", "mod ", "static ",
    ];
    kinds
        .iter()
        .any(|kind| text.contains(&format!("{kind}{name}")))
        || [
            format!("    {name}("),
            format!("    {name},"),
            format!("    {name} {{"),
            format!("pub {name}:"),
            format!("pub(crate) {name}:"),
        ]
        .iter()
        .any(|shape| text.contains(shape.as_str()))
        || text.lines().any(|line| {
            // Re-exported from a file of the module's (`pub use pipeline::{open, ...}`).
            let line = line.trim_start();
            (line.starts_with("pub use ") || line.starts_with("pub(crate) use "))
                && line
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|word| word == name)
        })
}

#[test]
fn architecture_md_names_code_that_exists() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let modules = modules(&[repo.join("netbox/src"), repo.join("bridge/src")]);
    let text = std::fs::read_to_string(repo.join("ARCHITECTURE.md")).unwrap();
    let cited: Vec<&str> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.contains("::")
                && s.split("::")
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
        })
        .collect();
    assert!(
        cited.len() > 30,
        "ARCHITECTURE.md cites {} paths",
        cited.len()
    );
    let missing: Vec<&&str> = cited.iter().filter(|p| !names_code(p, &modules)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names code that is not there (moved? renamed?): {missing:?}"
    );
    // The check can tell: a module that does not exist is found.
    assert!(!names_code("bridge::no_such_module::open", &modules));
    assert!(!names_code("egress::no_such_function", &modules));
    assert!(names_code("bridge::egress::open", &modules));
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
fn no_two_modules_use_each_other() {
    // Top-level modules: a folder and its own files count as one.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file, &src);
        if module == "architecture" {
            continue;
        }
        let text: String = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let entry = uses.entry(module.clone()).or_default();
        entry.extend(
            crate_paths(&text)
                .into_iter()
                .filter(|used| *used != module),
        );
    }
    assert_eq!(a_circle(&uses), None, "modules that use each other");
}
