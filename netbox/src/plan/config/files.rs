//! The files a run reads or writes outside the sandbox: its event log, `--env-file`s, the
//! policy's own files and the `--bridge-*` and `--upstream-ca` files, none where CMD could
//! rewrite or read what it must not.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use bridge::Policy;

use super::roots::refuse_symlinks_in_roots;
use crate::cli::RunArgs;
use crate::error::WrapperError;
use crate::plan::mount_names::name_in_roots;

/// The `--bridge-*` files: none inside a writable root (CMD could replace them for the
/// next run), and no private key in the certificate's file, which the sandbox can read.
pub(super) fn refuse_bridge_files_cmd_could_read(
    args: &RunArgs,
    write_roots: &[PathBuf],
) -> Result<(), WrapperError> {
    let bridge_files = [
        (&args.bridge_token_file, "--bridge-token-file"),
        (&args.bridge_ca, "--bridge-ca"),
        (&args.bridge_cert, "--bridge-cert"),
        (&args.bridge_key, "--bridge-key"),
    ];
    for (file, flag) in bridge_files {
        if let Some(file) = file {
            refuse_bridge_file_inside_roots(file, flag, write_roots)?;
        }
    }
    // The key is hidden inside the sandbox; a certificate file is not (unless it is
    // the key's file too), so it must not carry the key as well, or CMD could read it there.
    if let (Some(cert), Some(key)) = (&args.bridge_cert, &args.bridge_key) {
        let same = std::fs::canonicalize(cert).ok() == std::fs::canonicalize(key).ok();
        let holds_key = crate::plan::read_small_file(cert, 1 << 20)
            .is_ok_and(|pem| pem.contains("PRIVATE KEY"));
        if holds_key && !same {
            return Err(WrapperError::Usage(format!(
                "--bridge-cert {} holds a private key, which CMD could read: keep the key \
                 in --bridge-key's file only (it is hidden inside the sandbox)",
                cert.display()
            )));
        }
    }
    Ok(())
}

/// `--upstream-ca` files: their certificates are copied into the sandbox's trust bundle,
/// past any cover, so none may lie in what `--hide` hides.
pub(super) fn refuse_hidden_upstream_ca(
    inspection: Option<&crate::plan::inspection::Inspection>,
    hide: &[PathBuf],
) -> Result<(), WrapperError> {
    // Its certificates are copied into the sandbox's trust bundle, past any cover.
    for file in inspection.into_iter().flat_map(|i| &i.files) {
        if let Some(by) = crate::plan::hidden::covering(file, hide) {
            return Err(WrapperError::Usage(format!(
                "--upstream-ca {} lies in what --hide {} hides, but its certificates are \
                 copied into the sandbox's trust bundle; keep the CA file outside it",
                file.display(),
                by.display()
            )));
        }
    }
    Ok(())
}

/// What CMD's environment gets on top of its base, in this order: `--env-file` files,
/// the tools' cache settings, `--env` flags.
pub(super) fn extra_env(
    env_files: &[PathBuf],
    env_flags: &[String],
    caches: &[crate::plan::tools::Cache],
    write_roots: &[PathBuf],
) -> Result<Vec<(OsString, OsString)>, WrapperError> {
    let mut env_extra = Vec::new();
    for file in env_files {
        refuse_symlinks_in_roots(file, write_roots, "--env-file")?;
        let text = std::fs::read_to_string(file).map_err(|source| WrapperError::Path {
            path: file.clone(),
            what: "--env-file",
            source,
        })?;
        let parsed = crate::plan::env::parse_env_file(&text).map_err(|(line, reason)| {
            WrapperError::Usage(format!("{}:{line}: {reason}", file.display()))
        })?;
        env_extra.extend(parsed);
    }
    for cache in caches {
        env_extra.extend(
            cache
                .env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
    }
    env_extra.extend(
        crate::plan::env::parse_env_flags(env_flags)
            .map_err(|reason| WrapperError::Usage(format!("--env: {reason}")))?,
    );
    Ok(env_extra)
}

/// What this run read its policy and environment from, where CMD could rewrite it for
/// the next run: pinned read-only.
pub(super) fn policy_inputs(
    policy: &Policy,
    env_files: &[PathBuf],
    write_roots: &[PathBuf],
) -> Result<Vec<PathBuf>, WrapperError> {
    let mut inputs: Vec<PathBuf> = policy.files().to_vec();
    inputs.extend(
        env_files
            .iter()
            .filter_map(|f| std::fs::canonicalize(f).ok()),
    );
    let mut kept = Vec::new();
    for input in inputs {
        // By any name: pinned where it is, and so at its names in the roots (child.rs).
        if name_in_roots(&input, write_roots)?.is_some() {
            kept.push(input);
        }
    }
    kept.sort();
    kept.dedup();
    Ok(kept)
}

/// The event log is evidence: CMD must not be able to rewrite it.
pub(super) fn refuse_log_inside_roots(log: &Path, roots: &[PathBuf]) -> Result<(), WrapperError> {
    let absolute = std::path::absolute(log).unwrap_or_else(|_| log.to_owned());
    let dir = absolute.parent().unwrap_or(Path::new("/"));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    // By any name: a bind mount can show its directory in a root.
    let name = name_in_roots(&dir, roots)?;
    match name.and_then(|name| roots.iter().find(|r| name.starts_with(r))) {
        Some(root) => Err(WrapperError::Usage(format!(
            "event log {} is inside the writable root {}, where CMD could rewrite it; \
             choose a --log path outside it",
            log.display(),
            root.display()
        ))),
        None => Ok(()),
    }
}

/// A file of the remote bridge's (its token, its CA, a client certificate and key) where
/// CMD could replace it for the next run (with a token or CA of its choosing, or a link to
/// another secret): refused, by the path given and by the path it leads to.
pub(super) fn refuse_bridge_file_inside_roots(
    file: &Path,
    flag: &str,
    roots: &[PathBuf],
) -> Result<(), WrapperError> {
    use std::os::unix::fs::MetadataExt;
    let given = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
    let real = std::fs::canonicalize(file).unwrap_or_else(|_| given.clone());
    // A second name (a hard link) could lie inside a root, where CMD could write the file
    // through it or read it past the hiding, which goes by path.
    if std::fs::metadata(file).is_ok_and(|m| m.nlink() > 1) {
        return Err(WrapperError::Usage(format!(
            "{flag} {} has other names (hard links), which CMD might reach; give it a \
             file of its own",
            file.display()
        )));
    }
    // By any name: a bind mount inside a root can show it too.
    let name = match name_in_roots(&real, roots)? {
        Some(name) => Some(name),
        None => roots.iter().any(|r| given.starts_with(r)).then_some(given),
    };
    match name.and_then(|name| roots.iter().find(|r| name.starts_with(r))) {
        Some(root) => Err(WrapperError::Usage(format!(
            "{flag} {} is inside the writable root {}, where CMD could replace it for the \
             next run; keep it outside (in ~/.config/netbox/, say)",
            file.display(),
            root.display()
        ))),
        None => Ok(()),
    }
}

/// `$XDG_STATE_HOME/netbox/sessions/ID.jsonl`, or `~/.local/state/...`.
pub(super) fn default_log_path(session: &str) -> Result<PathBuf, WrapperError> {
    let dir = sessions_dir()?;
    private_dir(&dir).map_err(|source| WrapperError::Path {
        path: dir.clone(),
        what: "event log directory (pass --log FILE to put it elsewhere)",
        source,
    })?;
    Ok(dir.join(format!("{session}.jsonl")))
}

/// Makes `dir` (and the missing directories above it) readable by this user alone, and
/// makes it so if an earlier netbox left it open to others: its logs hold command lines.
/// Only a directory this user owns is changed.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.is_dir() && meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The directories of session logs the sandbox hides, as real paths: this run's default
/// one, and the one under the home whatever `XDG_STATE_HOME` says. A log holds other runs'
/// command lines, which are not CMD's to read.
pub(super) fn sessions_dirs_to_hide() -> Vec<PathBuf> {
    let home_default = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .map(|h| h.join(".local/state/netbox/sessions"));
    let mut hidden: Vec<PathBuf> = Vec::new();
    for dir in sessions_dir().ok().into_iter().chain(home_default) {
        if let Ok(real) = std::fs::canonicalize(&dir) {
            if real.is_dir() && !hidden.contains(&real) {
                hidden.push(real);
            }
        }
    }
    hidden
}

/// Where session logs go by default: `$XDG_STATE_HOME/netbox/sessions`, or
/// `~/.local/state/netbox/sessions`.
pub fn sessions_dir() -> Result<PathBuf, WrapperError> {
    let base = crate::plan::xdg_dir("XDG_STATE_HOME", ".local/state").ok_or_else(|| {
        WrapperError::Usage("no HOME or XDG_STATE_HOME for the event log; pass --log FILE".into())
    })?;
    Ok(base.join("netbox/sessions"))
}
