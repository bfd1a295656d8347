//! `--allow-tool NAME`: the hosts a package manager will reach, found in its own
//! configuration at run time (issue 12). Nothing here names a public registry: where a
//! tool's built-in default is in no configuration file, it is asked of the tool itself
//! (its config query, its installed modules, what it cached of an index), and where a
//! registry serves files from a host nothing names, that is said, pointing to learn mode.
//!
//! Each tool has a module with one `discover` function; what it finds is a list of rules
//! (`host:port`), each with where it came from, and notes for the start-up line. Each
//! tool's cache is a directory of netbox's (`caches`, owndir.rs); cargo's holds its
//! settings too, copied there by cargo_home.rs.

mod apt;
mod cargo;
mod cargo_clean;
mod cargo_home;
mod cover;
pub(crate) mod fetch;
mod gem;
mod git;
mod go;
mod maven;
mod npm;
mod owndir;
mod pip;
mod query;

use std::path::Path;

pub use cover::cache_homes_to_cover;

/// One rule a tool needs, and where it came from ("index-url in /etc/pip.conf").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRule {
    pub rule: String,
    pub source: String,
    /// It came from a file in a writable root (the workspace's `.npmrc`, its git remotes):
    /// an earlier command may have written it, so `--private-ok` does not apply to it.
    pub from_workspace: bool,
}

/// What discovery needs: where the command runs, the writable roots (nothing from them
/// is run, and what is read from them is marked), and the policy's pins.
pub struct Context<'a> {
    pub cwd: &'a Path,
    pub untrusted: &'a [std::path::PathBuf],
    /// What `--hide` covers: a tool's settings there are not read, as the tool in the
    /// sandbox will not see them.
    pub hidden: &'a [std::path::PathBuf],
    pub policy: &'a bridge::policy::Policy,
    /// The user said the registries are internal (`--private-ok`): a registry document
    /// the user's own settings name may be read from a non-public address.
    pub private_ok: bool,
    /// What the registry documents read share: one deadline, and their records.
    pub fetches: &'a fetch::Fetches,
}

/// Rules one tool may add at most: a configuration listing thousands of registries is
/// not one to follow.
const MAX_RULES_PER_TOOL: usize = 64;

/// What one tool contributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolRules {
    pub rules: Vec<ToolRule>,
    /// What could not be found, said on the start-up line and by `netbox tools`.
    pub notes: Vec<String>,
}

impl ToolRules {
    /// Adds the rule for a URL a tool's configuration names. `source` may hold text
    /// from a file an earlier command wrote (a git remote's name): it is escaped here,
    /// once, for every place it is shown.
    fn add(&mut self, url_or_host: &str, source: impl Into<String>) {
        self.add_from(url_or_host, source, false);
    }

    /// [`ToolRules::add`] for what a file in a writable root named.
    fn add_from(&mut self, url_or_host: &str, source: impl Into<String>, from_workspace: bool) {
        if let Some(rule) = rule_of(url_or_host) {
            // Counted apart, so the workspace's files cannot crowd out the user's own.
            let alike = self
                .rules
                .iter()
                .filter(|r| r.from_workspace == from_workspace)
                .count();
            if alike >= MAX_RULES_PER_TOOL {
                // Past the cap on notes: the workspace's notes must not hide it.
                if !self.notes.iter().any(|n| n.starts_with("more than")) {
                    self.notes.push(format!(
                        "more than {MAX_RULES_PER_TOOL} registries: the rest are left out"
                    ));
                }
                return;
            }
            if !self.rules.iter().any(|r| r.rule == rule) {
                self.rules.push(ToolRule {
                    rule,
                    source: crate::printable::printable(&without_credentials(&source.into())),
                    from_workspace,
                });
            }
        } else if !url_or_host.trim().is_empty() && url_or_host.contains("://") {
            // Not a URL netbox could read: its host alone (what stands before its last
            // `@` may be credentials, and its path and query may hold a token).
            let shown = host_of(url_or_host.trim());
            self.note(crate::printable::printable(&format!(
                "{shown} is not a registry address netbox allows (a name and one port only)"
            )));
        }
    }

    /// Whether `file` lies in what `--hide` covers (plan/hidden.rs): the tool in the
    /// sandbox does not see it, so nothing it names is allowed, and the start-up line says
    /// so. Every tool's discovery asks this of each settings file it reads or has its tool
    /// read.
    fn skip_hidden(&mut self, file: &Path, ctx: &Context<'_>) -> bool {
        let Some(by) = crate::plan::hidden::covering(file, ctx.hidden) else {
            return false;
        };
        self.note(format!(
            "{} is hidden (--hide {}): what it names is not allowed",
            file.display(),
            by.display()
        ));
        true
    }

    fn note(&mut self, note: impl Into<String>) {
        let note = without_credentials(&note.into());
        if self.notes.len() < MAX_NOTES_PER_TOOL {
            let mut note = note;
            if note.chars().count() > MAX_NOTE_CHARS {
                note = note.chars().take(MAX_NOTE_CHARS).collect::<String>() + "…";
            }
            self.notes.push(note);
        } else if self.notes.len() == MAX_NOTES_PER_TOOL {
            self.notes.push("and more notes, left out".to_owned());
        }
    }
}

/// Notes one tool may add, and their length: text a workspace file chose must not flood
/// the start-up line.
const MAX_NOTES_PER_TOOL: usize = 6;
const MAX_NOTE_CHARS: usize = 300;

/// `text` with the credentials of every URL in it left out (`https://user:token@host/`
/// → `https://host/`; a query string or fragment → `?…`, `#…`; `;params` → `;…`):
/// sources and notes are shown and logged.
pub fn without_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        // The user and password run to the last `@` before the path (or a blank),
        // whatever they hold (`#` and `?` too); a query or fragment right after the host
        // is cut as below.
        let authority_end = rest
            .find(|c: char| c.is_whitespace() || c == '/')
            .unwrap_or(rest.len());
        let host_from = rest[..authority_end].rfind('@').map_or(0, |i| i + 1);
        let host = &rest[host_from..authority_end];
        if let Some(cut) = host.find(['?', '#', ';']) {
            out.push_str(&host[..cut]);
            out.push(host.as_bytes()[cut] as char);
            out.push('…');
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '>' | ')'))
                .map_or(rest.len(), |e| e.max(authority_end));
            rest = &rest[end..];
            continue;
        }
        out.push_str(host);
        rest = &rest[authority_end..];
        // The path, up to where the URL ends; past `?`, `#` or `;` nothing is kept.
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '>' | ')'))
            .unwrap_or(rest.len());
        let path = &rest[..end];
        match path.find(['?', '#', ';']) {
            Some(cut) => {
                out.push_str(&path[..cut]);
                out.push(path.as_bytes()[cut] as char);
                out.push('…');
            }
            None => out.push_str(path),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    // npm's `//host/:_authToken=…` and the like: every value after a key that says so,
    // spaces around `=` allowed.
    let lower = out.to_ascii_lowercase();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for key in ["_authtoken", "_auth", "_password", "token", "password"] {
        for (at, _) in lower.match_indices(key) {
            let after = &lower[at + key.len()..];
            let spaces = after.len() - after.trim_start().len();
            let Some(value) = after.trim_start().strip_prefix('=') else {
                continue;
            };
            let from = at + key.len() + spaces + 1 + (value.len() - value.trim_start().len());
            let end = lower[from..]
                .find(char::is_whitespace)
                .map_or(lower.len(), |e| from + e);
            if end > from {
                cuts.push((from, end));
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup_by(|later, earlier| later.0 < earlier.1);
    for (from, end) in cuts.into_iter().rev() {
        out.replace_range(from..end, "…");
    }
    out
}

/// A URL as the start-up line may name it: its scheme and host (and port), nothing of its
/// user, path, query or fragment (`https://u:p@h.test:8443/t0k/x?a=b` →
/// `https://…@h.test:8443`).
pub fn host_of(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.split(['/', '?', '#']).next().unwrap_or("").to_owned();
    };
    let authority = rest.split('/').next().unwrap_or("");
    let (user, host) = match authority.rsplit_once('@') {
        Some((_, host)) => ("…@", host),
        None => ("", authority),
    };
    let host = host.split(['?', '#', ';']).next().unwrap_or("");
    format!("{scheme}://{user}{host}")
}

/// One line for the start-up line: `pip: 2 hosts (pip's default index …)`, and what
/// could not be found.
pub fn summary(tool: &str, found: &ToolRules, named_at: &str) -> String {
    let hosts = found.rules.len();
    let plural = if hosts == 1 { "" } else { "s" };
    let mut sources: Vec<&str> = found.rules.iter().map(|r| r.source.as_str()).collect();
    sources.dedup();
    if sources.len() > 4 {
        sources.truncate(4);
        sources.push("…");
    }
    let mut line = format!("{tool}: {hosts} host{plural}");
    if !sources.is_empty() {
        line.push_str(&format!(" ({})", sources.join("; ")));
    }
    if named_at != "--allow-tool" {
        line.push_str(&format!(" [{named_at}]"));
    }
    for note in &found.notes {
        line.push_str(&format!("; {note}"));
    }
    crate::printable::printable(&line)
}

/// `netbox tools NAME...`: prints what each tool would add, as allowlist lines.
pub fn run(args: &crate::cli::ToolsArgs) -> Result<u8, crate::error::WrapperError> {
    let cwd = std::env::current_dir().map_err(|source| crate::error::WrapperError::Path {
        path: ".".into(),
        what: "current directory",
        source,
    })?;
    let mut text = String::from("allow = [\n");
    let policy = bridge::policy::Policy::deny_all();
    // As a run from here would see it: the current directory is the workspace.
    let untrusted = vec![std::fs::canonicalize(&cwd).unwrap_or_else(|_| cwd.clone())];
    // No event log here: what was read is what this prints.
    let fetches = fetch::Fetches::new();
    let ctx = Context {
        cwd: &cwd,
        untrusted: &untrusted,
        hidden: &[],
        policy: &policy,
        private_ok: args.private_ok,
        fetches: &fetches,
    };
    for name in &args.names {
        let found = discover(name, &ctx).map_err(|reason| crate::error::WrapperError::Rule {
            flag: "netbox tools",
            rule: name.clone(),
            reason,
        })?;
        text.push_str(&format!("    # {name}\n"));
        for rule in &found.rules {
            let quoted = serde_json::to_string(&rule.rule).unwrap_or_default();
            let source = crate::printable::printable(&rule.source);
            text.push_str(&format!("    {quoted}, # {source}\n"));
        }
        for note in &found.notes {
            text.push_str(&format!(
                "    # note: {}\n",
                crate::printable::printable(note)
            ));
        }
    }
    text.push_str("]\n");
    crate::output::print_stdout(&text).map(|()| 0)
}

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
fn own_cache_dir(
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
fn link_in_roots<'a>(
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
fn overlaps(dir: &Path, root: &Path) -> bool {
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

fn cache_home() -> Option<std::path::PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(std::path::PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".cache"))
        })
}

/// A configuration file's text, if it is a regular file of at most 1 MiB (a workspace
/// file may be anything: a FIFO, a sparse file of gigabytes).
fn read_small(path: &Path) -> Option<String> {
    crate::plan::read_small_file(path, 1 << 20).ok()
}

/// Variables by which a tool's own settings can come from elsewhere than the user's
/// files: where one points into a writable root, all that tool's rules are taken as the
/// workspace's (an earlier command could have written them).
fn settings_elsewhere(tool: &str) -> &'static [&'static str] {
    // Compared without regard to case (npm reads npm_config_* in any case).
    match tool {
        "npm" => &[
            "npm_config_userconfig",
            "npm_config_globalconfig",
            "npm_config_prefix",
            "npm_config_cache",
            "npm_config_logs_dir",
            "npm_config_logs-dir",
        ],
        "pip" => &[
            "PIP_CONFIG_FILE",
            "XDG_CONFIG_HOME",
            "VIRTUAL_ENV",
            "PYENV_ROOT",
        ],
        "cargo" => &["CARGO_HOME", "RUSTUP_HOME"],
        "go" => &["GOENV", "XDG_CONFIG_HOME", "GOROOT"],
        "apt" => &["APT_CONFIG"],
        // gem loads the plugins of the gems in its paths when it starts.
        "gem" => &[
            "GEMRC",
            "GEM_HOME",
            "GEM_PATH",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
        ],
        _ => &[],
    }
}

/// The first variable (and its value) by which the environment points `tool`'s settings
/// into a writable root.
fn redirected_into_root(tool: &str, untrusted: &[std::path::PathBuf]) -> Option<String> {
    let watched = settings_elsewhere(tool);
    std::env::vars_os().find_map(|(key, value)| {
        let key = key.to_string_lossy();
        if !watched.iter().any(|w| w.eq_ignore_ascii_case(&key)) {
            return None;
        }
        // Each part of a path list (`GEMRC=a:b`, `GEM_PATH`); a relative one is read
        // from where the tool starts, which is no writable root.
        std::env::split_paths(&value)
            .find(|path| path.is_absolute() && query::is_untrusted(path, untrusted))
            .map(|path| format!("{key}={}", path.display()))
    })
}

/// The tools `--allow-tool` knows.
pub const TOOLS: &[&str] = &["pip", "npm", "cargo", "git", "apt", "go", "maven", "gem"];

/// Names that mean one of the tools (uv reads pip's index settings; yarn and pnpm npm's).
pub fn canonical(name: &str) -> Option<&'static str> {
    match name {
        "pip" | "pip3" | "uv" => Some("pip"),
        "npm" | "yarn" | "pnpm" => Some("npm"),
        "cargo" => Some("cargo"),
        "git" => Some("git"),
        "apt" | "apt-get" => Some("apt"),
        "go" => Some("go"),
        "maven" | "mvn" => Some("maven"),
        "gem" | "bundle" | "bundler" => Some("gem"),
        _ => None,
    }
}

/// Asks `name`'s configuration, as seen from `cwd` (project files count). An unknown
/// tool is an error naming the known ones.
pub fn discover(name: &str, ctx: &Context<'_>) -> Result<ToolRules, String> {
    let tool = canonical(name).ok_or_else(|| {
        format!(
            "unknown tool {name:?}; known: {} (and uv, yarn, pnpm, apt-get, mvn, bundle)",
            TOOLS.join(", ")
        )
    })?;
    // The tool would be run on settings an earlier command may have written (its log,
    // trace or hook settings can make it write files or run code): not asked at all.
    if let Some(var) = redirected_into_root(tool, ctx.untrusted) {
        let mut skipped = ToolRules::default();
        skipped.note(format!(
            "not asked: {var} points its settings into a writable root, which an earlier command could have written"
        ));
        return Ok(skipped);
    }
    let mut found = match tool {
        "pip" => pip::discover(ctx),
        "npm" => npm::discover(ctx),
        "cargo" => cargo::discover(ctx),
        "git" => git::discover(ctx),
        "apt" => apt::discover(ctx),
        "maven" => maven::discover(ctx),
        "gem" => gem::discover(ctx),
        _ => go::discover(ctx),
    };
    // Run from an npm script, npm's settings in the environment are the project's own
    // .npmrc's (npm exports them as npm_config_*).
    let from_npm_script = tool == "npm"
        && ["npm_lifecycle_event", "npm_execpath", "npm_command"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
    if from_npm_script {
        for rule in &mut found.rules {
            rule.from_workspace = true;
        }
    }
    Ok(found)
}

/// `host:port` for a URL (`https://h:8443/x` → `h:8443`, `http://h/` → `h:80`), or a
/// bare `host[:port]` (443 when no port is given), the host spelled as the bridge
/// normalises it (`https://H.Test./` → `h.test:443`); `None` for what is no network
/// address (`file:`, a path), an address, or this machine's own name.
pub fn rule_of(url_or_host: &str) -> Option<String> {
    let text = url_or_host.trim();
    // Cargo's and others' prefixes: `sparse+https://…`, `git+https://…`, `registry+…`.
    let text = text
        .strip_prefix("sparse+")
        .or_else(|| text.strip_prefix("registry+"))
        .or_else(|| text.strip_prefix("git+"))
        .unwrap_or(text);
    let (default_port, rest) = if let Some(rest) = text.strip_prefix("https://") {
        (443, rest)
    } else if let Some(rest) = text.strip_prefix("http://") {
        (80, rest)
    } else if let Some(rest) = text.strip_prefix("ssh://") {
        (22, rest)
    } else if text.contains("://") || text.starts_with('/') || text.is_empty() {
        return None;
    } else {
        (443, text)
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() {
        return None;
    }
    let rule = if authority.starts_with('[') {
        if authority.contains("]:") {
            authority.to_owned()
        } else {
            format!("{authority}:{default_port}")
        }
    } else if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    // A name and one numeric port only: a tool's configuration (which an earlier command
    // may have written into the workspace) must not open an address, a wildcard, every
    // port or a range (`127.0.0.1:*`, `*.com:*`, `[::1]:1-65535`). The name as the bridge
    // normalises it (case, a final dot, IDNA; an address in any spelling is an address),
    // so that every check and comparison below and after sees what the bridge will.
    let target = bridge::target::Target::parse_authority(&rule).ok()?;
    let bridge::target::Host::Name(name) = target.host else {
        return None;
    };
    // `localhost` and its subdomains are this machine (RFC 6761), never a registry.
    let is_localhost = name == "localhost"
        || name.ends_with(".localhost")
        || name.starts_with("localhost.")
        || name.starts_with("ip6-localhost")
        || name.starts_with("ip6-loopback");
    if is_localhost {
        return None;
    }
    let rule = format!("{name}:{}", target.port);
    bridge::policy::RuleSpec::parse(&rule, bridge::policy::Action::Allow)
        .ok()
        .map(|_| rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_left_out_of_what_is_shown() {
        let cases = [
            (
                "files on https://alice:S3cret@idx.test:8443/simple/pip/",
                "files on https://idx.test:8443/simple/pip/",
            ),
            (
                "https://tok@a.test/x?token=abc could not be read",
                "https://a.test/x?… could not be read",
            ),
            ("http://a.test/p@q", "http://a.test/p@q"),
            ("no url here", "no url here"),
            ("https://alice:s3c;r)e't@idx.test/x", "https://idx.test/x"),
            (
                "https://idx.test/simple/#token=SECRET",
                "https://idx.test/simple/#…",
            ),
            ("https://a.test/x;jsessionid=abc y", "https://a.test/x;… y"),
            (
                "https://u:SECRET#FRAG@index.frag.test/ could not be read",
                "https://index.frag.test/ could not be read",
            ),
            (
                "https://a:S1@one.test/ https://b:S2?x@two.test",
                "https://one.test/ https://two.test",
            ),
            ("https://a.test?token=S3 y", "https://a.test?… y"),
            (
                "//npm.test/:_authToken=SECRET in .npmrc",
                "//npm.test/:_authToken=… in .npmrc",
            ),
            (
                "_auth = A1 and //x.test/:_authToken=B2 and token=C3",
                "_auth = … and //x.test/:_authToken=… and token=…",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(without_credentials(text), want, "{text}");
        }
    }

    #[test]
    fn a_url_netbox_cannot_read_is_shown_by_its_host_alone() {
        let mut found = ToolRules::default();
        found.add("https://eve:GIT SECRET2@bad host/r.git", "git remote");
        assert!(found.rules.is_empty());
        assert!(!found.notes[0].contains("SECRET"), "{:?}", found.notes);
        assert!(
            found.notes[0].contains("bad host is not a registry address"),
            "{:?}",
            found.notes
        );
    }

    #[test]
    fn the_workspaces_rules_cannot_crowd_out_the_users() {
        let mut found = ToolRules::default();
        for i in 0..100 {
            found.add_from(&format!("https://w{i}.test/"), "Gemfile", true);
        }
        found.add("https://mirror.corp.test/", "the user's settings");
        assert!(found.rules.iter().any(|r| r.rule == "mirror.corp.test:443"));
        assert_eq!(found.rules.len(), MAX_RULES_PER_TOOL + 1);
        for i in 0..100 {
            found.note(format!("note {i}"));
        }
        assert_eq!(found.notes.len(), MAX_NOTES_PER_TOOL + 1);
    }

    #[test]
    fn urls_become_host_port_rules() {
        let cases = [
            ("https://mirror.test/simple", Some("mirror.test:443")),
            ("http://mirror.test:8080/x", Some("mirror.test:8080")),
            ("sparse+https://index.test/", Some("index.test:443")),
            ("ssh://git@forge.test:2222/a.git", Some("forge.test:2222")),
            ("https://user:pw@mirror.test/", Some("mirror.test:443")),
            ("https://[2001:db8::1]/x", None),
            ("http://127.0.0.1:8080/", None),
            ("http://127.0.0.1:*/", None),
            ("https://*.com:*/", None),
            ("http://[::1]:1-65535/", None),
            ("https://mirror.test:0/", None),
            ("http://localhost:18080/", None),
            ("http://a.localhost/", None),
            ("http://localhost./", None),
            ("http://localhost.localdomain/", None),
            ("http://ip6-localhost/", None),
            // Spellings the bridge reads as the same host: one rule, in its one spelling.
            ("https://Mirror.TEST./x", Some("mirror.test:443")),
            ("https://ｍｉｒｒｏｒ.test/", Some("mirror.test:443")),
            ("https://ｌｏｃａｌｈｏｓｔ/", None),
            ("https://LOCALHOST./", None),
            ("https://ａ.ｌｏｃａｌｈｏｓｔ:8443/", None),
            ("https://0x7f000001/", None),
            ("https://１２７.０.０.１/", None),
            ("file:///opt/wheels", None),
            ("/opt/wheels", None),
            ("", None),
        ];
        for (url, want) in cases {
            assert_eq!(rule_of(url).as_deref(), want, "{url}");
        }
    }
}
