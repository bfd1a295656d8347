//! The row netbox checks itself, outside the sandbox, since only it holds the secrets'
//! values: none is in what it hands CMD (its environment, as pid 1 will give it, and its
//! command line, or `--fetch`'s), while each placeholder is (the control). A value typed
//! on the host's command line (`netbox -- curl -H "Authorization: $TOKEN"`, expanded by
//! the host's shell) is caught here, and CMD does not start.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use bridge::policy::secrets::Secret;

use super::{check, Check, Outcome};
use crate::sandbox::ChildPlan;

/// The row's name in the report.
pub const SECRET_VALUES_CHECK: &str = "secret values kept outside the sandbox";

/// Searches `plan` for each secret's value (and its placeholder, the control).
pub fn check_plan(secrets: &[Secret], plan: &ChildPlan) -> Check {
    let mut places: Vec<(String, Vec<u8>)> = plan
        .env
        .iter()
        .map(|(k, v)| (format!("CMD's environment ({})", shown(k)), joined(k, v)))
        .collect();
    places.push(("CMD's command line".into(), argv(&plan.cmd)));
    if let Some(fetch) = &plan.fetch {
        places.push(("--fetch's command line".into(), argv(fetch)));
    }
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    for secret in secrets {
        let Some(value) = secret.value() else {
            forbidden.push(Outcome {
                attempt: format!("read {}'s value", secret.name),
                ok: false,
                result: "not read".into(),
            });
            continue;
        };
        let found: Vec<&str> = places
            .iter()
            .filter(|(_, bytes)| contains(bytes, value.bytes()))
            .map(|(place, _)| place.as_str())
            .collect();
        forbidden.push(Outcome {
            attempt: format!("find {}'s value in what CMD is given", secret.name),
            ok: found.is_empty(),
            result: if found.is_empty() {
                "not found".into()
            } else {
                format!(
                    "found in {}: give CMD the placeholder instead (${})",
                    found.join(", "),
                    secret.name
                )
            },
        });
        let held = places
            .iter()
            .any(|(_, bytes)| contains(bytes, secret.placeholder.as_bytes()));
        control.push(Outcome {
            attempt: format!("find {}'s placeholder in CMD's environment", secret.name),
            ok: held,
            result: if held { "found" } else { "missing" }.into(),
        });
    }
    check(SECRET_VALUES_CHECK, forbidden, control)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn joined(name: &OsString, value: &OsString) -> Vec<u8> {
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(b'=');
    bytes.extend_from_slice(value.as_bytes());
    bytes
}

fn argv(args: &[OsString]) -> Vec<u8> {
    args.iter()
        .flat_map(|a| a.as_bytes().iter().copied().chain([0]))
        .collect()
}

/// A variable's name for the report: its bytes, control characters escaped.
fn shown(name: &OsString) -> String {
    name.to_string_lossy().escape_debug().to_string()
}
