//! The validated run configuration: everything the sandbox needs, checked and resolved
//! before any namespace exists, so a bad path or rule fails with one line and exit 125.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use bridge::Policy;

use crate::cli::{RunArgs, TmpMode};
use crate::error::WrapperError;

/// A run, ready to set up.
#[derive(Debug)]
pub struct SandboxConfig {
    pub cmd: Vec<OsString>,
    /// `--fetch CMD1`: run first, with the network; then CMD with none.
    pub fetch: Option<String>,
    /// The current directory, where CMD starts.
    pub cwd: PathBuf,
    pub workspace: PathBuf,
    /// Writable roots, workspace first, canonical, none nested in another.
    pub write_roots: Vec<PathBuf>,
    /// Every root asked for, nested ones included: protected names are looked for at the
    /// top of each (a workspace inside a writable /tmp keeps its .git protected).
    pub requested_roots: Vec<PathBuf>,
    pub tmp: TmpMode,
    pub read_only: Vec<PathBuf>,
    pub hide: Vec<PathBuf>,
    /// netbox's cache home (tools/cover.rs): covered in the sandbox but for the writable
    /// roots inside it (this run's caches).
    pub cache_covers: Vec<PathBuf>,
    pub protect: Vec<PathBuf>,
    /// Allowlists (includes too) and `--env-file` files that lie inside a writable root,
    /// canonical: pinned read-only, so CMD cannot rewrite the next run's policy.
    pub policy_inputs: Vec<PathBuf>,
    /// Homes made writable on request (homesplit.rs): each, how many of its entries are
    /// writable roots, and the places holding code inside those, pinned.
    pub home_split: Vec<HomeSplit>,
    /// The caller's homes (homesplit.rs): `$HOME` and the account's.
    pub homes: Vec<PathBuf>,
    /// Places the environment names for code inside a writable root: pinned.
    pub code_pins: Vec<PathBuf>,
    pub allow_git_writes: bool,
    pub allow_nested_userns: bool,
    /// CMD may use io_uring.
    pub allow_io_uring: bool,
    /// Host Unix sockets CMD may connect to (`--allow-socket`, `sockets = [...]`).
    pub allowed_sockets: Vec<crate::plan::sockets::AllowedSocket>,
    /// Capture: where connections made without the proxy are listened for.
    pub capture: Option<crate::plan::capture::CapturePlan>,
    /// Connections CMD may have open through the bridge at once.
    pub max_connections: usize,
    /// The HTTP status of a refused request.
    pub refusal_status: http::StatusCode,
    /// What each `--allow-tool` contributed, for the start-up line.
    pub tool_summary: Vec<String>,
    /// The records of the registry documents `--allow-tool` read from the host, for the
    /// event log once it is open.
    pub tool_fetches: Vec<crate::plan::tools::fetch::FetchRecord>,
    /// Whether CMD gets a terminal of its own (terminal.rs).
    pub tty: crate::terminal::Choice,
    pub policy: Policy,
    /// `--bridge URL`: the netbox bridge every connection goes to, which judges it.
    pub upstream: Option<std::sync::Arc<bridge::egress::upstream_proxy::UpstreamProxy>>,
    /// What inspecting needs before the clone, when the policy inspects (inspection.rs).
    pub inspection: Option<crate::plan::inspection::Inspection>,
    pub session_id: String,
    pub env_base: crate::plan::env::EnvBase,
    /// From `--env` and `--env-file`, applied last.
    pub env_extra: Vec<(OsString, OsString)>,
    pub timeout: Option<std::time::Duration>,
    pub limits: crate::limits::Limits,
    pub log_path: PathBuf,
    pub quiet: bool,
    pub uid: u32,
    pub gid: u32,
}

impl SandboxConfig {
    /// The run's configuration, in the order its parts depend on each other: what can
    /// run at all, the writable roots (home split off), the paths named read-only, hidden
    /// or protected, the policy and the tools' caches, the environment, the event log.
    /// Each step refuses a mistake with one line.
    pub fn from_args(args: RunArgs) -> Result<SandboxConfig, WrapperError> {
        refuse_what_cannot_run(&args)?;
        let cwd = std::env::current_dir().map_err(|source| WrapperError::Path {
            path: PathBuf::from("."),
            what: "current directory",
            source,
        })?;
        let workspace = existing(args.workspace.as_deref().unwrap_or(&cwd), "workspace")?;
        if !workspace.is_dir() {
            return Err(WrapperError::Usage(format!(
                "workspace {} is not a directory",
                workspace.display()
            )));
        }
        let (requested_roots, write_roots) = writable_roots(&args, &workspace)?;
        // A writable home lets CMD plant code that runs later, outside the sandbox: only
        // on request, and then split into what may be written (homesplit.rs).
        let homes = crate::plan::homesplit::homes();
        let (mut write_roots, home_split) =
            split_homes(outermost(write_roots), &homes, args.allow_home_write)?;
        let code_pins = code_inside(&write_roots, &homes);
        let named = NamedPaths::check(&args, &write_roots)?;

        // With --fetch, the policy is the fetch phase's: CMD itself gets no network.
        let mut policy_args = args.policy;
        policy_args.allowlist.extend(args.fetch_allowlist);
        let fetches = crate::plan::tools::fetch::Fetches::new();
        let (mut policy, mut tool_summary, tools) = crate::plan::policy::load_policy_with_tools(
            &policy_args,
            &cwd,
            &write_roots,
            &named.hide,
            &fetches,
        )?;
        // Each tool's cache: a directory of netbox's, writable in the sandbox (never the
        // tool's own cache, which runs outside the sandbox trust), or the private /tmp.
        // Nothing --hide covers is copied into one.
        let caches = crate::plan::tools::caches(
            &tools,
            args.cache,
            &crate::plan::tools::CacheFor {
                workspace: &workspace,
                write_roots: &write_roots,
                hidden: &named.hide,
                clean_env: args.clean_env,
            },
        )?;
        tool_summary.extend(caches.iter().flat_map(|c| c.notes.iter().cloned()));
        if args.learn {
            policy.set_learning();
        }
        // Relaying, every name goes to the remote bridge, whose answer decides (its refusal
        // is this run's refusal; the probe proves it refuses the canary).
        let upstream = match &args.bridge {
            Some(url) => {
                policy.set_relaying();
                Some(std::sync::Arc::new(crate::plan::upstream::upstream_proxy(
                    "--bridge",
                    url,
                    &crate::plan::upstream::ProxyFiles {
                        credentials: args.bridge_token_file.as_deref(),
                        ca: args.bridge_ca.as_deref(),
                        cert: args.bridge_cert.as_deref(),
                        key: args.bridge_key.as_deref(),
                    },
                    None,
                    true,
                )?))
            }
            None => None,
        };
        let inspection = crate::plan::inspection::prepare(&policy, &policy_args)?;
        // Its certificates are copied into the sandbox's trust bundle, past any cover.
        for file in inspection.iter().flat_map(|i| &i.files) {
            if let Some(by) = crate::plan::hidden::covering(file, &named.hide) {
                return Err(WrapperError::Usage(format!(
                    "--upstream-ca {} lies in what --hide {} hides, but its certificates are \
                     copied into the sandbox's trust bundle; keep the CA file outside it",
                    file.display(),
                    by.display()
                )));
            }
        }
        let session_id = crate::plan::policy::new_session_id();
        for file in policy.named_files() {
            refuse_symlinks_in_roots(file, &write_roots, "allowlist")?;
        }
        let env_extra = extra_env(&args.env_file, &args.env, &caches, &write_roots)?;
        // netbox's cache home, every workspace's caches in it: covered in the sandbox but
        // for this run's own caches (tools/cover.rs).
        let cache_covers = crate::plan::tools::cache_homes_to_cover(&write_roots);
        write_roots.extend(caches.iter().filter_map(|c| c.dir.clone()));
        let bridge_files = [
            (&args.bridge_token_file, "--bridge-token-file"),
            (&args.bridge_ca, "--bridge-ca"),
            (&args.bridge_cert, "--bridge-cert"),
            (&args.bridge_key, "--bridge-key"),
        ];
        for (file, flag) in bridge_files {
            if let Some(file) = file {
                refuse_bridge_file_inside_roots(file, flag, &write_roots)?;
            }
        }
        // The key is hidden inside the sandbox; a certificate file is not (unless it is
        // the key's file too), so it must not carry the key as well (review 42).
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

        let allowed_sockets =
            crate::plan::sockets::allowed(&args.allow_socket, &policy, &cwd, &write_roots)?;

        let log_path = match args.log {
            Some(path) => path,
            None => default_log_path(&session_id)?,
        };
        refuse_log_inside_roots(&log_path, &write_roots)?;
        let mut policy_inputs = policy_inputs(&policy, &args.env_file, &write_roots);
        if let Some(inspection) = &inspection {
            // A CA file CMD could rewrite would decide what the next run trusts.
            policy_inputs.extend(
                inspection
                    .files
                    .iter()
                    .filter(|f| write_roots.iter().any(|r| f.starts_with(r)))
                    .cloned(),
            );
            policy_inputs.sort();
            policy_inputs.dedup();
        }
        Ok(SandboxConfig {
            cmd: args.cmd,
            fetch: args.fetch,
            cwd,
            workspace,
            write_roots,
            requested_roots,
            tmp: args.tmp,
            read_only: named.read_only,
            hide: named.hide,
            cache_covers,
            protect: named.protect,
            policy_inputs,
            home_split,
            homes,
            code_pins,
            allow_git_writes: args.allow_git_writes,
            allow_nested_userns: args.allow_nested_userns,
            allow_io_uring: args.allow_io_uring,
            allowed_sockets,
            capture: (!args.no_capture).then(|| crate::plan::capture::plan(&policy)),
            max_connections: args.max_connections,
            refusal_status: http::StatusCode::from_u16(args.refusal_status).map_err(|_| {
                WrapperError::Usage(format!(
                    "--refusal-status {} is not an HTTP status",
                    args.refusal_status
                ))
            })?,
            tool_summary,
            tool_fetches: fetches.take_records(),
            tty: match (args.tty, args.no_tty) {
                (true, _) => crate::terminal::Choice::Always,
                (_, true) => crate::terminal::Choice::Never,
                _ => crate::terminal::Choice::Auto,
            },
            policy,
            upstream,
            inspection,
            session_id,
            env_base: if args.clean_env {
                crate::plan::env::EnvBase::Clean
            } else {
                crate::plan::env::EnvBase::Inherit
            },
            env_extra,
            timeout: args.timeout,
            limits: crate::limits::Limits {
                memory: args.memory,
                file_size: args.fsize,
                pids: args.pids,
                cpu_millis: args.cpus,
            },
            log_path,
            quiet: args.quiet,
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
        })
    }
}

/// Mistakes that leave nothing to run, or nothing safe to run.
fn refuse_what_cannot_run(args: &RunArgs) -> Result<(), WrapperError> {
    if args.cmd.is_empty() {
        return Err(WrapperError::Usage(
            "nothing to run: use netbox [OPTIONS] -- CMD [ARGS...]".into(),
        ));
    }
    if args.bridge.is_some() {
        // The remote bridge judges by the tenant's policy: rules here would only seem to.
        let p = &args.policy;
        let local = [
            (!p.allow.is_empty(), "--allow"),
            (
                !p.allowlist.is_empty() || !args.fetch_allowlist.is_empty(),
                "--allowlist",
            ),
            (!p.allow_private.is_empty(), "--allow-private"),
            (args.learn, "netbox learn"),
        ];
        if let Some((_, flag)) = local.iter().find(|(given, _)| *given) {
            return Err(WrapperError::Usage(format!(
                "{flag} does not go with --bridge: the bridge at the other end judges every \
                 connection by its tenant's allowlist; change that allowlist instead"
            )));
        }
    }
    // As host root, CMD's processes own every cgroup file of the host; from a nested user +
    // cgroup namespace it could mount the hierarchies and kill, freeze or limit host
    // processes in netbox's cgroups. Only without nested namespaces is that shut.
    if args.allow_nested_userns && crate::plan::cgroup::is_host_root() {
        return Err(WrapperError::Usage(
            "--allow-nested-userns is refused when netbox runs as root: CMD would own the \
             host's cgroup files from inside; run netbox as an ordinary user"
                .into(),
        ));
    }
    Ok(())
}

/// The roots asked for (workspace first, then `--write`), canonical, and the writable
/// roots (with a host /tmp), each one a directory the sandbox can give CMD.
fn writable_roots(
    args: &RunArgs,
    workspace: &Path,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), WrapperError> {
    let mut write_roots = vec![workspace.to_owned()];
    for path in &args.write {
        write_roots.push(existing(path, "--write path")?);
    }
    // Protected names (and their placeholders) belong to the roots the user named, not to
    // a shared host /tmp.
    let requested_roots = write_roots.clone();
    if args.tmp == TmpMode::Host {
        write_roots.push(existing(Path::new("/tmp"), "/tmp")?);
    }
    // The sandbox has its own /dev, /proc and /run (and /sys is the kernel's): a writable
    // root there would not be the host's directory at all.
    if let Some(root) = write_roots.iter().find(|r| {
        ["/dev", "/proc", "/run", "/sys"]
            .iter()
            .any(|hidden| r.starts_with(hidden))
    }) {
        return Err(WrapperError::Usage(format!(
            "{} cannot be a writable root: the sandbox has its own /dev, /proc and /run, \
             and /sys is the kernel's; use a directory elsewhere",
            root.display()
        )));
    }
    if write_roots.iter().any(|r| r == Path::new("/")) {
        return Err(WrapperError::Usage(
            "a writable root of / leaves nothing protected; use --disable-sandbox if you mean it"
                .into(),
        ));
    }
    Ok((requested_roots, write_roots))
}

/// A symlink inside a writable root could be replaced by CMD: a pin on its target would
/// hold the target, not the name the user gave.
fn refuse_symlinks_in_roots(
    path: &Path,
    write_roots: &[PathBuf],
    what: &'static str,
) -> Result<(), WrapperError> {
    crate::plan::protect::refuse_symlinks_in_roots(path, write_roots, what)
}

/// `--ro`, `--hide` and `--protect` paths, canonical.
struct NamedPaths {
    read_only: Vec<PathBuf>,
    hide: Vec<PathBuf>,
    /// A protected path may not exist yet: then it gets a placeholder, like .git.
    protect: Vec<PathBuf>,
}

impl NamedPaths {
    fn check(args: &RunArgs, write_roots: &[PathBuf]) -> Result<NamedPaths, WrapperError> {
        let read_only = args
            .read_only
            .iter()
            .map(|p| {
                refuse_symlinks_in_roots(p, write_roots, "--ro")
                    .and_then(|()| existing(p, "--ro path"))
            })
            .collect::<Result<_, _>>()?;
        let mut hide: Vec<PathBuf> = args
            .hide
            .iter()
            .map(|p| no_link_at_all(p).and_then(|()| existing(p, "--hide path")))
            .collect::<Result<_, _>>()?;
        // The remote bridge's credentials are netbox's, not CMD's: CMD, which can read
        // what the user can, finds the file empty (under whatever name it tries: the path
        // hidden is the file's own, every link resolved).
        for secret in [&args.bridge_token_file, &args.bridge_key]
            .into_iter()
            .flatten()
        {
            hide.push(existing(secret, "--bridge-token-file or --bridge-key")?);
        }
        let protect = args
            .protect
            .iter()
            .map(|p| {
                refuse_symlinks_in_roots(p, write_roots, "--protect")
                    .and_then(|()| existing_or_in_existing_dir(p, "--protect path"))
            })
            .collect::<Result<_, _>>()?;
        Ok(NamedPaths {
            read_only,
            hide,
            protect,
        })
    }
}

/// What CMD's environment gets on top of its base, in this order: `--env-file` files,
/// the tools' cache settings, `--env` flags.
fn extra_env(
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
fn policy_inputs(policy: &Policy, env_files: &[PathBuf], write_roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut inputs: Vec<PathBuf> = policy.files().to_vec();
    inputs.extend(
        env_files
            .iter()
            .filter_map(|f| std::fs::canonicalize(f).ok()),
    );
    inputs.retain(|f| write_roots.iter().any(|r| f.starts_with(r)));
    inputs.sort();
    inputs.dedup();
    inputs
}

fn existing(path: &Path, what: &'static str) -> Result<PathBuf, WrapperError> {
    std::fs::canonicalize(path).map_err(|source| WrapperError::Path {
        path: path.to_owned(),
        what,
        source,
    })
}

/// The canonical path of something that may not exist yet, in a directory that does.
fn existing_or_in_existing_dir(path: &Path, what: &'static str) -> Result<PathBuf, WrapperError> {
    if let Ok(found) = std::fs::canonicalize(path) {
        return Ok(found);
    }
    let name = path.file_name().ok_or_else(|| {
        WrapperError::Usage(format!("{what} {} has no file name", path.display()))
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(existing(parent, what)?.join(name))
}

/// Refuses a `--hide` path that goes through a symlink anywhere: the cover is on what the
/// link leads to at the start, and the host can point the link elsewhere during the run
/// (a credentials link updated to a new file), which no pin notices.
fn no_link_at_all(path: &Path) -> Result<(), WrapperError> {
    crate::plan::protect::refuse_symlinks_in_roots(path, &[PathBuf::from("/")], "--hide").map_err(
        |e| match e {
            WrapperError::SymlinkInRoot { path, link, .. } => {
                WrapperError::HideThroughSymlink { path, link }
            }
            other => other,
        },
    )
}

/// Drops roots that lie inside another root: the outer bind already covers them, and a
/// second bind of the same inodes would be a second path to protect.
fn outermost(mut roots: Vec<PathBuf>) -> Vec<PathBuf> {
    let all = roots.clone();
    roots.retain(|r| !all.iter().any(|other| other != r && r.starts_with(other)));
    roots.dedup();
    roots
}

/// A home split into writable entries (homesplit.rs).
#[derive(Debug, Clone)]
pub struct HomeSplit {
    pub home: PathBuf,
    pub writable: usize,
    /// The writable entries that are directories: a repository at the top of one is
    /// pinned like the workspace's (protect/mod.rs).
    pub entries: Vec<PathBuf>,
}

/// Replaces each writable root that is, or holds, one of the caller's homes by the
/// entries that may be written (homesplit.rs), or refuses it without
/// `--allow-home-write`. A root holds a home by path, or as another name for the same
/// directory (a bind mount of home, or of a directory above it). Also refuses, without the
/// flag, a root that is one of home's shared configuration or data directories
/// (`~/.config`, `~/.local`, ...): they hold every program's settings.
fn split_homes(
    mut roots: Vec<PathBuf>,
    homes: &[PathBuf],
    allowed: bool,
) -> Result<(Vec<PathBuf>, Vec<HomeSplit>), WrapperError> {
    use std::os::unix::fs::MetadataExt;
    // Outermost first: $HOME inside the account's home (or the other way round) is split
    // as part of the outer one, whose hidden entries stay read-only.
    let mut homes = homes.to_vec();
    homes.sort_by_key(|h| h.components().count());
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    // Where root `r` holds a home: the home's path as seen through `r`.
    let holds = |r: &Path| -> Option<(PathBuf, PathBuf)> {
        let root_id = id(r)?;
        homes.iter().find_map(|h| {
            if h.starts_with(r) {
                return Some((h.clone(), h.clone()));
            }
            h.ancestors().find_map(|a| {
                (id(a) == Some(root_id)).then(|| {
                    (
                        h.clone(),
                        r.join(h.strip_prefix(a).unwrap_or(Path::new(""))),
                    )
                })
            })
        })
    };
    for root in &roots {
        if !allowed {
            if let Some(base) = shared_base_dir(root, &homes) {
                return Err(WrapperError::SharedHomeDirWritable { root: base });
            }
        }
    }
    let mut splits: Vec<HomeSplit> = Vec::new();
    // A root split for one home may still hold another: split until none does.
    while let Some((at, (home, seen_as))) = roots
        .iter()
        .enumerate()
        .find_map(|(i, r)| holds(r).map(|found| (i, found)))
    {
        let root = roots.remove(at);
        if !allowed {
            return Err(WrapperError::HomeWritable { root, home });
        }
        // What the environment and the links name is in the real home's terms; mapped onto
        // the name this root gives it (a bind mount of home).
        let code: Vec<PathBuf> = crate::plan::homesplit::code_locations(&home)
            .into_iter()
            .filter_map(|c| Some(seen_as.join(c.strip_prefix(&home).ok()?)))
            .collect();
        let split =
            crate::plan::homesplit::split(&root, &seen_as, &home, &code).map_err(|source| {
                WrapperError::Path {
                    path: root.clone(),
                    what: "writable root holding your home directory",
                    source,
                }
            })?;
        let writable = split
            .roots
            .iter()
            .filter(|r| r.starts_with(&seen_as))
            .count();
        let entries: Vec<PathBuf> = split
            .roots
            .iter()
            .filter(|r| r.starts_with(&seen_as) && r.is_dir())
            .cloned()
            .collect();
        roots.extend(split.roots);
        match splits.iter_mut().find(|s| s.home == seen_as) {
            Some(known) => {
                known.writable += writable;
                known.entries.extend(entries);
            }
            None => splits.push(HomeSplit {
                home: seen_as,
                writable,
                entries,
            }),
        }
    }
    Ok((roots, splits))
}

/// The places under the homes that the environment names for code (homesplit.rs) and
/// that lie inside a writable root the user named (`--write ~/tools` with `~/tools/bin` on
/// PATH): pinned there. (Other directories on PATH in a writable root are watched, not
/// pinned: protect/mod.rs.)
fn code_inside(roots: &[PathBuf], homes: &[PathBuf]) -> Vec<PathBuf> {
    let mut pins: Vec<PathBuf> = homes
        .iter()
        .flat_map(|h| crate::plan::homesplit::code_locations(h))
        .filter(|c| roots.iter().any(|r| c.starts_with(r) && c != r))
        .collect();
    pins.sort();
    pins.dedup();
    pins
}

/// The shared configuration or data directory that `root` is, or lies above (but for a
/// home itself, which is split instead): `~/.config`, `~/.local`, `~/.local/share`,
/// `~/.local/state`, `~/.cache`, and what `XDG_CONFIG_HOME`, `XDG_DATA_HOME`,
/// `XDG_STATE_HOME` name wherever they are; each resolved (a `~/.config` that is a link
/// into `~/dotfiles` is that directory).
fn shared_base_dir(root: &Path, homes: &[PathBuf]) -> Option<PathBuf> {
    let mut bases: Vec<PathBuf> = homes
        .iter()
        .flat_map(|h| {
            [
                ".config",
                ".local",
                ".local/share",
                ".local/state",
                ".cache",
            ]
            .map(|b| h.join(b))
        })
        .collect();
    bases.extend(
        ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"]
            .iter()
            .filter_map(std::env::var_os)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute()),
    );
    let is_home = homes.iter().any(|h| h == root);
    bases
        .into_iter()
        .map(|b| crate::plan::homesplit::resolve_existing_prefix(&b))
        .find(|b| b.starts_with(root) && !is_home && !homes.iter().any(|h| h.starts_with(root)))
}

/// The caller's home directory (`$HOME`), canonical, if it exists.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| Path::new(h).is_absolute())
        .and_then(|h| std::fs::canonicalize(h).ok())
}

/// The event log is evidence: CMD must not be able to rewrite it.
fn refuse_log_inside_roots(log: &Path, roots: &[PathBuf]) -> Result<(), WrapperError> {
    let absolute = std::path::absolute(log).unwrap_or_else(|_| log.to_owned());
    let dir = absolute.parent().unwrap_or(Path::new("/"));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    match roots.iter().find(|r| dir.starts_with(r)) {
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
fn refuse_bridge_file_inside_roots(
    file: &Path,
    flag: &str,
    roots: &[PathBuf],
) -> Result<(), WrapperError> {
    use std::os::unix::fs::MetadataExt;
    let given = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
    let real = std::fs::canonicalize(file).unwrap_or_else(|_| given.clone());
    // A second name (a hard link) could lie inside a root, where CMD could write the file
    // through it or read it past the hiding, which goes by path (review 42).
    if std::fs::metadata(file).is_ok_and(|m| m.nlink() > 1) {
        return Err(WrapperError::Usage(format!(
            "{flag} {} has other names (hard links), which CMD might reach; give it a \
             file of its own",
            file.display()
        )));
    }
    match roots
        .iter()
        .find(|r| given.starts_with(r) || real.starts_with(r))
    {
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
fn default_log_path(session: &str) -> Result<PathBuf, WrapperError> {
    let dir = sessions_dir()?;
    std::fs::create_dir_all(&dir).map_err(|source| WrapperError::Path {
        path: dir.clone(),
        what: "event log directory (pass --log FILE to put it elsewhere)",
        source,
    })?;
    Ok(dir.join(format!("{session}.jsonl")))
}

/// Where session logs go by default: `$XDG_STATE_HOME/netbox/sessions`, or
/// `~/.local/state/netbox/sessions`.
pub fn sessions_dir() -> Result<PathBuf, WrapperError> {
    let absolute = |v: &std::ffi::OsString| Path::new(v).is_absolute();
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(absolute)
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(absolute)
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .ok_or_else(|| {
            WrapperError::Usage(
                "no HOME or XDG_STATE_HOME for the event log; pass --log FILE".into(),
            )
        })?;
    Ok(base.join("netbox/sessions"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_roots_collapse_into_the_outer_one() {
        let roots = outermost(vec![
            PathBuf::from("/tmp/ws"),
            PathBuf::from("/tmp"),
            PathBuf::from("/srv/data"),
            PathBuf::from("/srv/database"),
        ]);
        assert_eq!(
            roots,
            vec![
                PathBuf::from("/tmp"),
                PathBuf::from("/srv/data"),
                PathBuf::from("/srv/database")
            ]
        );
    }
}
