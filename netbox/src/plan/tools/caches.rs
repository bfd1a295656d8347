//! Each tool's cache in the sandbox: a directory of netbox's own, writable there (never
//! the tool's own cache, which runs outside the sandbox's trust), or the private /tmp.
//! Nothing `--hide` covers is copied into one.

use std::path::Path;

use super::canonical;
use super::{cargo_home, owndir};

/// A tool's cache for a run: the directory made writable for it (none with `--cache
/// none`), and the environment that points the tool there.
#[derive(Debug, Clone)]
pub struct Cache {
    pub dir: Option<std::path::PathBuf>,
    pub env: Vec<(String, String)>,
    /// What the start-up line says of it (`cargo: … is hidden (--hide …): not copied`).
    pub notes: Vec<String>,
}

/// What the caches are made for: the run's workspace and writable roots, the paths
/// `--hide` covers (nothing under them is copied into a cache), and whether CMD's
/// environment is built from nothing (`--clean-env`).
pub struct CacheFor<'a> {
    pub workspace: &'a Path,
    pub write_roots: &'a [std::path::PathBuf],
    pub hidden: &'a [std::path::PathBuf],
    pub clean_env: bool,
}

/// The caches of `tools` (canonical names): `$XDG_CACHE_HOME/netbox/TOOL` (or
/// `~/.cache/netbox/TOOL`), made 0700 if missing; or, with `--cache none`, a directory in
/// the run's private /tmp. Tools with no cache setting of their own (git, apt) get none;
/// cargo, whose cache is inside `CARGO_HOME` with its settings, gets a `CARGO_HOME` of
/// netbox's (not with `--cache none`).
pub fn caches(
    tools: &[String],
    mode: crate::cli::ToolCache,
    run: &CacheFor<'_>,
) -> Result<Vec<Cache>, crate::error::WrapperError> {
    let CacheFor {
        workspace,
        write_roots,
        hidden,
        clean_env,
    } = *run;
    // One cache per workspace: a cache one run could poison (npm's packument index, pip's
    // wheels, go's build cache are not checked against who wrote them) serves only later
    // runs in the same workspace, which that run could change anyway.
    let per_workspace = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes());
        digest[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let mut out = Vec::new();
    for tool in tools.iter().filter_map(|t| canonical(t)) {
        let vars: &[(&str, &str)] = match tool {
            "npm" => &[("npm_config_cache", "")],
            "pip" => &[("PIP_CACHE_DIR", ""), ("UV_CACHE_DIR", "uv")],
            "go" => &[("GOMODCACHE", "mod"), ("GOCACHE", "build")],
            "gem" => &[
                ("GEM_SPEC_CACHE", "specs"),
                ("BUNDLE_USER_CACHE", "bundler"),
            ],
            // maven's local repository, given as a system property after the user's own.
            "maven" => &[("MAVEN_OPTS", "repository")],
            // cargo keeps its cache in CARGO_HOME beside its settings: a CARGO_HOME of
            // netbox's own, with the user's settings copied in at each run. Not with
            // `--cache none`: the private /tmp cannot be given them before CMD starts.
            "cargo" if mode == crate::cli::ToolCache::Netbox => &[("CARGO_HOME", "")],
            _ => continue,
        };
        let mut notes = Vec::new();
        let dir = match mode {
            crate::cli::ToolCache::None => None,
            crate::cli::ToolCache::Netbox => {
                let own = own_cache_dir(tool, &per_workspace, write_roots)?;
                if tool == "cargo" {
                    let said = cargo_home::seed_home(&own, hidden).map_err(|source| {
                        crate::error::WrapperError::Path {
                            path: own.path.clone(),
                            what: "cargo's home in netbox's cache (its settings are copied there)",
                            source,
                        }
                    })?;
                    notes.extend(said.into_iter().map(|n| format!("cargo: {n}")));
                }
                Some(own.path)
            }
        };
        let base = dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("/tmp/netbox-cache").join(tool));
        let env = vars
            .iter()
            .map(|(key, sub)| {
                let at = if sub.is_empty() {
                    base.clone()
                } else {
                    base.join(sub)
                };
                let value = if *key == "MAVEN_OPTS" {
                    // Under --clean-env, built from nothing: the caller's options may carry
                    // a secret (`-Dhttp.proxyPassword=…`) the clean environment leaves out.
                    // Otherwise CMD inherits the caller's MAVEN_OPTS anyway, so keeping it
                    // before netbox's property gives CMD nothing it would not have.
                    let theirs = if clean_env {
                        String::new()
                    } else {
                        std::env::var("MAVEN_OPTS").unwrap_or_default()
                    };
                    format!("{theirs} -Dmaven.repo.local={}", at.display())
                        .trim()
                        .to_owned()
                } else {
                    at.display().to_string()
                };
                ((*key).to_owned(), value)
            })
            .collect();
        out.push(Cache { dir, env, notes });
    }
    Ok(out)
}

/// `CACHE_HOME/netbox/TOOL/HASH`, made if missing, and netbox's own (owndir.rs): the
/// cache home lies in no writable root, by path or as another name for one (a bind
/// mount), and holds none below `netbox/` (CMD could swap a directory there for a link);
/// `netbox`, `TOOL` and `HASH` are this user's directories, reached with no link and
/// made 0700. The directory is held by its fd for seeding.
pub(super) fn own_cache_dir(
    tool: &str,
    per_workspace: &str,
    write_roots: &[std::path::PathBuf],
) -> Result<owndir::OwnDir, crate::error::WrapperError> {
    let usage = |text: String| crate::error::WrapperError::Usage(text);
    let home = cache_home().ok_or_else(|| {
        usage(format!(
            "--allow-tool {tool}: no HOME or XDG_CACHE_HOME for its cache; pass --cache none"
        ))
    })?;
    let io_error = |path: &Path| {
        let path = path.to_owned();
        move |source| crate::error::WrapperError::Path {
            path,
            what: "tool cache directory (--cache none keeps it in the run's private /tmp)",
            source,
        }
    };
    // Before anything is made: a cache home that would lie in a writable root.
    let refuse = |root: &Path, at: &Path| {
        usage(format!(
            "--allow-tool {tool}: its cache {} would lie in the writable root {}, where CMD could \
             swap it for a link; set XDG_CACHE_HOME outside it, or pass --cache none",
            at.display(),
            root.display()
        ))
    };
    let planned = crate::plan::homesplit::resolve_existing_prefix(&home).join("netbox");
    if let Some(root) = write_roots.iter().find(|r| overlaps(&planned, r)) {
        return Err(refuse(root, &planned));
    }
    // The user's home itself is trusted as it resolves (`/home` may be a link): the walk
    // starts from its real path.
    let user_home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .filter(|h| h.is_absolute())
        .and_then(|h| Some((std::fs::canonicalize(&h).ok()?, h)));
    // A HOME spelled through a link inside a writable root: CMD could re-point it.
    if let Some((real, named)) = &user_home {
        if let Some(root) = link_in_roots(named, write_roots) {
            return Err(usage(format!(
                "--allow-tool {tool}: HOME {} is reached through a link inside the writable root \
                 {}, which CMD could point elsewhere; set HOME to {}, or pass --cache none",
                named.display(),
                root.display(),
                real.display()
            )));
        }
    }
    let home = match &user_home {
        Some((real, named)) => match home.strip_prefix(named) {
            Ok(rest) => real.join(rest),
            Err(_) => home,
        },
        None => home,
    };
    let (home, home_fd) = owndir::open_cache_home(
        &home,
        user_home.as_ref().map(|(real, _)| real.as_path()),
        user_home.as_ref().map(|(_, named)| named.as_path()),
    )
    .map_err(io_error(&home))?;
    let netbox = home.join("netbox");
    if let Some(root) = write_roots.iter().find(|r| overlaps(&netbox, r)) {
        return Err(refuse(root, &netbox));
    }
    let (own, ids) = owndir::open_own(&home, home_fd, &["netbox", tool, per_workspace])
        .map_err(io_error(&netbox))?;
    // A root that is another name for a directory below netbox/ (a bind mount of TOOL/).
    let id = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    };
    if let Some(root) = write_roots.iter().find(|r| {
        r.ancestors()
            .any(|a| id(a).is_some_and(|i| ids.contains(&i)))
    }) {
        return Err(refuse(root, &own.path));
    }
    Ok(own)
}

/// The writable root holding a link that `path` is spelled through (each prefix of it as
/// written, `..` and all, whose link lies in a directory inside a root by path or by
/// device and inode): CMD could point that link elsewhere.
pub(super) fn link_in_roots<'a>(
    path: &Path,
    roots: &'a [std::path::PathBuf],
) -> Option<&'a std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let mut prefix = std::path::PathBuf::new();
    for part in path.components() {
        prefix.push(part);
        let is_link = std::fs::symlink_metadata(&prefix).is_ok_and(|m| m.file_type().is_symlink());
        let Some(parent) = prefix.parent().filter(|_| is_link) else {
            continue;
        };
        let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_owned());
        let found = roots.iter().find(|r| {
            parent.starts_with(r)
                || id(r).is_some_and(|want| parent.ancestors().any(|a| id(a) == Some(want)))
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Whether writable root `root` holds `dir` or lies in it: by path, or as another name
/// for the same directory (a bind mount), compared by device and inode up both paths.
pub(super) fn overlaps(dir: &Path, root: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if dir.starts_with(root) || root.starts_with(dir) {
        return true;
    }
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let holds = |outer: &Path, inner: &Path| {
        id(outer).is_some_and(|want| inner.ancestors().any(|a| id(a) == Some(want)))
    };
    holds(root, dir) || holds(dir, root)
}

pub(super) fn cache_home() -> Option<std::path::PathBuf> {
    crate::plan::xdg_dir("XDG_CACHE_HOME", ".cache")
}
