//! The layers of this crate, checked: a module may use what lies in its own layer or
//! below, never above, and no two modules use each other (ARCHITECTURE.md). Read from the
//! sources' `crate::` paths, so a new upward import fails `cargo test` with the file and
//! the path. And ARCHITECTURE.md itself: every path it names is code that exists.

use std::path::{Path, PathBuf};

// The bridge's reading of a crate's imports, compiled here too: one reading for both.
#[path = "../../bridge/src/architecture/imports.rs"]
mod imports;

use imports::{circle_in, crate_paths, layer_in, sources, upward_imports};

/// Layers from the bottom up: the top-level module names each holds.
const LAYERS: &[&[&str]] = &[
    &[
        "sys",
        "error",
        "output",
        "printable",
        "paths",
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
    layer_in(LAYERS, module)
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let upward = upward_imports(&src, LAYERS);
    assert!(
        upward.is_empty(),
        "imports that run upward:\n{}",
        upward.join("\n")
    );
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

#[test]
fn no_two_modules_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_eq!(circle_in(&src), None, "modules that use each other");
}
