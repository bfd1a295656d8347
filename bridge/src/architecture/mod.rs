//! The layers of this crate, checked: a module may use what lies in its own layer or
//! below, never above, and no two modules use each other, even through others (lib.rs
//! gives the reading order). Read from the sources' `crate::` paths, so a new upward
//! import fails `cargo test` with the file and the path.

mod imports;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use imports::{a_circle, crate_paths, uses};

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
