//! The row netbox checks itself, outside the sandbox, since only it holds the secrets'
//! values: none is in what it hands CMD (its environment, as pid 1 will give it, and its
//! command line, or `--fetch`'s), nor in the files tools keep credentials in that CMD
//! could read (in the home and the workspace, unless hidden), while each placeholder is
//! in CMD's environment (the control). A value typed on the host's command line (`netbox
//! -- curl -H "Authorization: $TOKEN"`, expanded by the host's shell) or left in
//! `~/.npmrc` is caught here, and CMD does not start.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use bridge::policy::secrets::Secret;

use super::{check, Check, Outcome};
use crate::sandbox::ChildPlan;

/// The row's name in the report.
pub const SECRET_VALUES_CHECK: &str = "secret values kept outside the sandbox";

/// Where tools keep credentials, under the home: npm, pip, git's store, curl and others'
/// netrc, cargo, docker, GitHub's CLI.
const HOME_CREDENTIAL_FILES: [&str; 10] = [
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".config/git/credentials",
    ".netrc",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".config/pip/pip.conf",
];

/// The same in the workspace, and the dotenv file projects keep tokens in.
const WORKSPACE_CREDENTIAL_FILES: [&str; 4] = [".npmrc", ".pypirc", ".netrc", ".env"];

/// Largest credential file read.
const MAX_CREDENTIAL_FILE_BYTES: u64 = 1 << 20;

/// Searches `plan`, and the credential files CMD could read under `home` and `workspace`,
/// for each secret's value (and `plan` for its placeholder, the control).
pub fn check_plan(
    secrets: &[Secret],
    plan: &ChildPlan,
    home: Option<&Path>,
    workspace: &Path,
) -> Check {
    let mut places: Vec<(String, Vec<u8>)> = plan
        .env
        .iter()
        .map(|(k, v)| (format!("CMD's environment ({})", shown(k)), joined(k, v)))
        .collect();
    places.push(("CMD's command line".into(), argv(&plan.cmd)));
    if let Some(fetch) = &plan.fetch {
        places.push(("--fetch's command line".into(), argv(fetch)));
    }
    let files = home
        .into_iter()
        .flat_map(|h| HOME_CREDENTIAL_FILES.iter().map(move |f| h.join(f)))
        .chain(WORKSPACE_CREDENTIAL_FILES.iter().map(|f| workspace.join(f)));
    for file in files {
        if crate::plan::hidden::covering(&file, &plan.probe.hidden).is_some() {
            continue;
        }
        if let Ok(bytes) = bridge::small_file::read_small_bytes(&file, MAX_CREDENTIAL_FILE_BYTES) {
            places.push((
                format!("{} (hide it: --hide {})", file.display(), file.display()),
                bytes,
            ));
        }
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
        let held = plan
            .env
            .iter()
            .any(|(k, v)| k == secret.name.as_str() && v == secret.placeholder.as_str());
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
