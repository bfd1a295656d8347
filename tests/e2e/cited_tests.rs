//! The tests the documents cite as proof exist: every `module::test` named in SECURITY.md,
//! README.md, ARCHITECTURE.md and docs/ whose module is one of this binary's is one of its
//! tests, as this binary lists them itself. A renamed or removed test fails here instead
//! of leaving a claim with nothing behind it.

use std::collections::BTreeSet;
use std::process::Command;

const DOCUMENTS: &[(&str, &str)] = &[
    ("SECURITY.md", include_str!("../../SECURITY.md")),
    ("README.md", include_str!("../../README.md")),
    ("ARCHITECTURE.md", include_str!("../../ARCHITECTURE.md")),
    ("docs/bridge.md", include_str!("../../docs/bridge.md")),
    ("docs/event-log.md", include_str!("../../docs/event-log.md")),
    ("docs/git.md", include_str!("../../docs/git.md")),
    ("docs/logs.md", include_str!("../../docs/logs.md")),
    ("docs/running.md", include_str!("../../docs/running.md")),
];

/// This binary's tests, by full path (`sandbox_escapes::filesystem_tricks_fail`), read from
/// its own `--list`, so a test that is compiled out or ignored-by-cfg does not count.
fn listed_tests() -> BTreeSet<String> {
    let me = std::env::current_exe().expect("the test binary's own path");
    let out = Command::new(me)
        .args(["--list", "--format", "terse"])
        .output()
        .expect("run the test binary's --list");
    assert!(out.status.success(), "--list failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_owned)
        .collect()
}

/// Every backticked `a::b` or `a::b::c` in `text`.
fn cited_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.contains("::")
                && s.split("::").all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                })
        })
        .map(str::to_owned)
        .collect()
}

/// Some source modules share a name with a test module (`capture`, `inspect`, `tools`), so
/// a path is taken for a test's by its last part: tests are named as sentences, with two
/// underscores at least (`filesystem_tricks_fail`), which no source module or function
/// the documents cite has (`capture::dns`, `upstream::open_as`). A whole test module or
/// group is cited by its bare name and is checked when it is one.
fn names_a_test(path: &str) -> bool {
    let last = path.rsplit("::").next().unwrap_or("");
    last.matches('_').count() >= 2
}

#[test]
fn every_test_the_documents_cite_exists() {
    let tests = listed_tests();
    // The binary names its own tests' shape: every one is a sentence.
    let short: Vec<&String> = tests.iter().filter(|t| !names_a_test(t)).collect();
    assert!(
        short.is_empty(),
        "name these tests as sentences of three words or more: {short:?}"
    );
    let modules: BTreeSet<&str> = tests.iter().filter_map(|t| t.split("::").next()).collect();
    let mut cited = 0;
    let mut missing = Vec::new();
    for (document, text) in DOCUMENTS {
        for path in cited_paths(text) {
            let module = path.split("::").next().unwrap();
            if !modules.contains(module) || !names_a_test(&path) {
                continue; // a source path (`plan::protect`, `capture::dns`), not a test
            }
            cited += 1;
            // A module or a test group (`sandbox_escapes`, `bridge_admin::slow_clients`)
            // may be cited as well as one test.
            let exists =
                tests.contains(&path) || tests.iter().any(|t| t.starts_with(&format!("{path}::")));
            if !exists {
                missing.push(format!("{document}: `{path}`"));
            }
        }
    }
    // The control: the documents do cite tests, so an empty match cannot pass for a clean one.
    assert!(
        cited >= 20,
        "only {cited} cited tests found: is the citation form still `module::test`?"
    );
    assert!(
        missing.is_empty(),
        "documents cite tests that do not exist (renamed or removed? update the document):\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_cited_test_that_does_not_exist_is_found() {
    // The check itself, on a text naming one real test and one made up.
    let tests = listed_tests();
    let text = "proved by `cited_tests::every_test_the_documents_cite_exists` and \
                `cited_tests::no_such_test_anywhere`";
    let paths = cited_paths(text);
    assert_eq!(paths.len(), 2);
    assert!(tests.contains(&paths[0]));
    assert!(!tests.contains(&paths[1]));
    assert!(paths.iter().all(|p| names_a_test(p)));
    assert!(
        !names_a_test("capture::dns"),
        "a source path taken for a test"
    );
}
