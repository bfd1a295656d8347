//! The layers of this crate, checked: a module may use what lies in its own layer or
//! below, never above, and no two modules use each other, even through others (lib.rs
//! gives the reading order). Read from the sources' `crate::` paths, so a new upward
//! import fails `cargo test` with the file and the path.

mod imports;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use imports::{a_circle, circle_in, crate_paths, layer_in, upward_imports};

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
    &["session", "offer"],
    &["egress"],
    &["conn"],
    &["carry"],
    &["front"],
    &["serve"],
    &["fuzzing", "lib", "architecture"],
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
}

#[test]
fn no_two_modules_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_eq!(circle_in(&src), None, "modules that use each other");
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
