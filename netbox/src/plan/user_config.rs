//! The user's own defaults: `$XDG_CONFIG_HOME/netbox/config.toml` (or
//! `~/.config/netbox/config.toml`), so that what a user passes on every run
//! (`--allow-tool pip --private-ok`) is said once:
//!
//! ```toml
//! private_ok = true                 # as --private-ok
//! tools = ["pip", "npm"]            # as --allow-tool, added to the command line's
//! allowlist = ["allow.toml"]        # as --allowlist (relative to this file), added
//! refusal_status = 403              # as --refusal-status, unless the command line gives one
//! show = "blocked"                  # as --show, unless the command line gives it or --quiet
//!
//! [workspace."/home/me/src/app"]    # for runs whose workspace is this directory or in it
//! tools = ["cargo"]
//! ```
//!
//! It widens what a run may reach, so it is held to what a file of the user's own must
//! be: a regular file (no symlink) owned by the user and writable by no one else, at most
//! 64 KiB; a file in a writable root is pinned read-only for the run (config.rs), so CMD
//! cannot rewrite the next run's defaults. `--no-config` leaves it unread, and so does
//! `--no-network`; with `--bridge` its allowlists are left out (the far bridge decides).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cli::RunArgs;
use crate::error::WrapperError;

/// Largest config file read.
const MAX_BYTES: u64 = 64 * 1024;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    private_ok: Option<bool>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    allowlist: Vec<PathBuf>,
    refusal_status: Option<u16>,
    show: Option<crate::cli::Show>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(flatten)]
    defaults: Defaults,
    #[serde(default)]
    workspace: BTreeMap<PathBuf, Defaults>,
}

/// Where the file is looked for.
pub fn path() -> Option<PathBuf> {
    crate::plan::xdg_dir("XDG_CONFIG_HOME", ".config").map(|base| base.join("netbox/config.toml"))
}

/// `args` with the file's defaults applied for the run's `workspace`, and the file's path
/// when one was read (for the start-up line, and to pin it).
pub fn apply(
    mut args: RunArgs,
    workspace: &Path,
) -> Result<(RunArgs, Option<PathBuf>), WrapperError> {
    // --no-network opens nothing, whatever the defaults say.
    if args.no_config || args.no_network {
        return Ok((args, None));
    }
    let Some(path) = path() else {
        return Ok((args, None));
    };
    let file = match read(&path)? {
        Some(file) => file,
        None => return Ok((args, None)),
    };
    let base = path.parent().unwrap_or(Path::new("/")).to_owned();
    // The top level, then each workspace table that holds this workspace, the closest last.
    let mut layers: Vec<&Defaults> = vec![&file.defaults];
    let mut matching: Vec<(&PathBuf, &Defaults)> = file
        .workspace
        .iter()
        .filter(|(dir, _)| workspace.starts_with(dir))
        .collect();
    matching.sort_by_key(|(dir, _)| dir.components().count());
    layers.extend(matching.into_iter().map(|(_, d)| d));
    // What the command line leaves open is filled in; lists are added to.
    let mut private_ok = None;
    let mut refusal_status = None;
    let mut show = None;
    for layer in layers {
        private_ok = layer.private_ok.or(private_ok);
        refusal_status = layer.refusal_status.or(refusal_status);
        show = layer.show.or(show);
        for tool in &layer.tools {
            if !args.policy.allow_tool.contains(tool) {
                args.policy.allow_tool.push(tool.clone());
            }
        }
        // With --bridge the far bridge's allowlist decides: a local one would only seem to.
        if args.bridge.is_none() {
            args.policy
                .allowlist
                .extend(layer.allowlist.iter().map(|f| base.join(f)));
        }
    }
    args.policy.private_ok |= private_ok.unwrap_or(false);
    if args.refusal_status.is_none() {
        args.refusal_status = refusal_status;
    }
    if args.show.is_none() {
        args.show = show;
    }
    if let Some(code) = args.refusal_status {
        if !(400..=599).contains(&code) {
            return Err(mistake(
                &path,
                format!("refusal_status = {code}: 400 to 599"),
            ));
        }
    }
    Ok((args, Some(path)))
}

fn mistake(path: &Path, what: String) -> WrapperError {
    WrapperError::Usage(format!(
        "{}: {what} (or --no-config to run without it)",
        path.display()
    ))
}

/// The file, if there is one, held to what a file of the user's own must be.
fn read(path: &Path) -> Result<Option<File>, WrapperError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(mistake(path, e.to_string())),
    };
    if !meta.is_file() {
        return Err(mistake(
            path,
            "not a regular file (a symlink could be pointed at a file another wrote)".into(),
        ));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(mistake(
            path,
            "it widens what runs may reach, so it must be yours and writable by you alone \
             (chmod go-w)"
                .into(),
        ));
    }
    let text =
        crate::plan::read_small_file(path, MAX_BYTES).map_err(|e| mistake(path, e.to_string()))?;
    let file: File = toml::from_str(&text).map_err(|e| mistake(path, e.message().to_owned()))?;
    if let Some(dir) = file.workspace.keys().find(|d| !d.is_absolute()) {
        return Err(mistake(
            path,
            format!(
                "[workspace.{:?}] names a relative path: give it whole",
                dir.display().to_string()
            ),
        ));
    }
    Ok(Some(file))
}
