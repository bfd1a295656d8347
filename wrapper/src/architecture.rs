//! The layers of this crate, checked: a module may use what lies in its own layer or
//! below, never above (ARCHITECTURE.md). Read from the sources' `crate::` paths, so a
//! new upward import fails `cargo test` with the file and the path.

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
