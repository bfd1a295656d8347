//! The validated run configuration: everything the sandbox needs, checked and resolved
//! before any namespace exists, so a bad path or rule fails with one line and exit 125.

mod binds;
mod files;
mod host_tmp;
mod roots;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use bridge::Policy;

use crate::cli::{RunArgs, Show, TmpMode};
use crate::error::WrapperError;
pub use binds::{refuse_overlaps as refuse_bind_overlaps, Bind};
pub use files::sessions_dir;
use files::{
    default_log_path, extra_env, policy_inputs, refuse_bridge_files_cmd_could_read,
    refuse_hidden_upstream_ca, refuse_log_inside_roots,
};
use roots::{
    existing, outermost, refuse_symlinks_in_roots, split_homes, writable_roots, NamedPaths,
};
pub use roots::{home_dir, HomeSplit};

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
    /// `--bind` and `--ro-bind`: host paths shown at another path too.
    pub binds: Vec<Bind>,
    pub hide: Vec<PathBuf>,
    /// netbox's cache home (tools/cover.rs): covered in the sandbox but for the writable
    /// roots inside it (this run's caches).
    pub cache_covers: Vec<PathBuf>,
    pub protect: Vec<PathBuf>,
    /// Allowlists (includes too) and `--env-file` files that lie inside a writable root,
    /// canonical: pinned read-only, so CMD cannot rewrite the next run's policy.
    pub policy_inputs: Vec<PathBuf>,
    /// Homes made writable on request (homesplit/): each, how many of its entries are
    /// writable roots, and the places holding code inside those, pinned.
    pub home_split: Vec<HomeSplit>,
    /// The caller's homes (homesplit/): `$HOME` and the account's.
    pub homes: Vec<PathBuf>,
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
    /// apt's configuration for the sandbox's `/run`, when CMD may run apt (apt_conf.rs).
    pub apt_conf: Option<String>,
    /// `--no-network`: the allowlist is empty on purpose, and the start-up line says so.
    pub no_network: bool,
    /// With `--bridge`: the placeholders of the secrets `--secret NAME` takes from it, and
    /// its CA when it inspects the tenant's tunnels (bridge_secrets.rs).
    pub from_bridge: crate::plan::bridge_secrets::FromBridge,
    pub session_id: String,
    pub env_base: crate::plan::env::EnvBase,
    /// From `--env` and `--env-file`, applied last.
    pub env_extra: Vec<(OsString, OsString)>,
    pub timeout: Option<std::time::Duration>,
    pub limits: crate::limits::Limits,
    pub log_path: PathBuf,
    /// What stderr says while CMD runs (`--show`, `--quiet`).
    pub show: Show,
    /// The tools `--allow-tool` (or the defaults file) named.
    pub tools: Vec<String>,
    pub uid: u32,
    pub gid: u32,
}

impl SandboxConfig {
    /// The run's configuration, in the order its parts depend on each other: what can
    /// run at all, the writable roots (home split off), the paths named read-only, hidden
    /// or protected, the policy and the tools' caches, the environment, the event log.
    /// Each step refuses a mistake with one line.
    // Whole: the flags taken in the order each depends on the last (roots, then the policy
    // and tools read from them, then what is checked against both), ending in one literal.
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
        // The user's defaults, before anything reads the flags they fill in.
        let (args, user_config) = crate::plan::user_config::apply(args, &workspace)?;
        if user_config.is_some() {
            refuse_what_cannot_run(&args)?;
        }
        let (requested_roots, write_roots) = writable_roots(&args, &workspace)?;
        // A writable home lets CMD plant code that runs later, outside the sandbox: only
        // on request, and then split into what may be written (homesplit/).
        let homes = crate::plan::homesplit::homes();
        let (mut write_roots, mut home_split) =
            split_homes(outermost(write_roots), &homes, args.allow_home_write)?;
        // A root asked for inside a home the split replaced (`--write ~/.config/tool`, the
        // workspace being home) stays a root, as it is when asked for alone: the split
        // makes writable only what it lists, which would leave it read-only in silence.
        // Never a home already split, or a root holding one; any other goes through the
        // same split as a root asked for alone (a home nested under a hidden entry, a
        // home's other name).
        let inside_a_split_home = |root: &Path| {
            home_split
                .iter()
                .any(|split| root.starts_with(&split.home) && root != split.home)
        };
        let holds_a_split_home =
            |root: &Path| home_split.iter().any(|split| split.home.starts_with(root));
        let kept_apart: Vec<PathBuf> = requested_roots
            .iter()
            .filter(|r| {
                inside_a_split_home(r)
                    && !holds_a_split_home(r)
                    && !write_roots.iter().any(|w| r.starts_with(w))
            })
            .cloned()
            .collect();
        if !kept_apart.is_empty() {
            let (apart, splits) = split_homes(kept_apart, &homes, args.allow_home_write)?;
            write_roots.extend(apart);
            home_split.extend(splits);
            write_roots = outermost(write_roots);
        }
        roots::refuse_mounts_of_elsewhere(&write_roots)?;
        let mut named = NamedPaths::check(&args, &write_roots)?;
        let path = std::env::var_os("PATH");
        let notes = [
            host_tmp::note_for_unseen("--ro", &named.read_only, args.tmp, &write_roots),
            host_tmp::note_for_unseen("--protect", &named.protect, args.tmp, &write_roots),
            args.cmd.first().and_then(|program| {
                host_tmp::note_for_program(program, &cwd, path.as_deref(), args.tmp, &write_roots)
            }),
        ];
        for note in notes.iter().flatten() {
            crate::output::say(note);
        }

        // With --fetch, the policy is the fetch phase's: CMD itself gets no network.
        let mut policy_args = args.policy.clone();
        // With --bridge, `--secret NAME` names one the bridge holds (bridge_secrets.rs).
        let bridge_secret_names = match args.bridge {
            Some(_) => {
                crate::plan::bridge_secrets::names(&std::mem::take(&mut policy_args.secret))?
            }
            None => Vec::new(),
        };
        policy_args
            .allowlist
            .extend(args.fetch_allowlist.iter().cloned());
        let fetches = crate::plan::tools::fetch::Fetches::new();
        let (mut policy, mut tool_summary, tools) = crate::plan::policy::load_policy_with_tools(
            &policy_args,
            &cwd,
            &write_roots,
            &named.hide,
            &fetches,
        )?;
        hide_secret_files(&policy, &mut named.hide)?;
        // Other runs' logs.
        for dir in files::sessions_dirs_to_hide() {
            if !named.hide.contains(&dir) {
                named.hide.push(dir);
            }
        }
        if args.ssh_agent {
            let keys = crate::plan::ssh_agent::private_keys(home_dir().as_deref());
            for key in keys.found {
                if !named.hide.contains(&key) {
                    named.hide.push(key);
                }
            }
            for place in keys.unsearched {
                crate::output::say(&format!(
                    "netbox: --ssh-agent did not search all of {}: a key there stays                      readable; hide the directory with --hide if it holds one",
                    crate::printable::printable(&place)
                ));
            }
        }
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
        if let Some(file) = &user_config {
            tool_summary.push(format!("defaults from {}", file.display()));
        }
        let refusal_status = refusal_status(args.refusal_status, &tools, &mut tool_summary)?;
        if args.learn {
            policy.set_learning();
        }
        let upstream = bridge_upstream(&args, &mut policy)?;
        let from_bridge = match &upstream {
            Some(proxy) => crate::plan::bridge_secrets::ask(proxy, &bridge_secret_names)?,
            None => crate::plan::bridge_secrets::FromBridge::default(),
        };
        let inspection = crate::plan::inspection::prepare(&policy, &policy_args)?;
        refuse_hidden_upstream_ca(inspection.as_ref(), &named.hide)?;
        let session_id = crate::plan::policy::new_session_id();
        for file in policy.named_files() {
            refuse_symlinks_in_roots(file, &write_roots, "allowlist")?;
        }
        let apt_conf = crate::plan::apt_conf::for_run(
            &tools,
            args.cmd.first().map(OsString::as_os_str),
            std::env::var_os("APT_CONFIG").as_deref(),
        );
        let mut env_extra = extra_env(&args.env_file, &args.env, &caches, &write_roots)?;
        if apt_conf.is_some() {
            // First: an APT_CONFIG given with --env still wins.
            env_extra.insert(
                0,
                (
                    OsString::from("APT_CONFIG"),
                    OsString::from(crate::plan::apt_conf::APT_CONF),
                ),
            );
        }
        if args.ssh_agent {
            // Under --clean-env too: the agent is what --ssh-agent asked for.
            if let Some(socket) = std::env::var_os("SSH_AUTH_SOCK") {
                env_extra.push((OsString::from("SSH_AUTH_SOCK"), socket));
            }
        }
        // netbox's cache home, every workspace's caches in it: covered in the sandbox but
        // for this run's own caches (tools/cover.rs).
        let cache_covers = crate::plan::tools::cache_homes_to_cover(&write_roots);
        write_roots.extend(caches.iter().filter_map(|c| c.dir.clone()));
        // After the caches join the roots: a DST inside one under a private /tmp exists.
        let binds = binds::check(&args, &write_roots, args.tmp)?;
        refuse_bridge_files_cmd_could_read(&args, &write_roots)?;

        let mut socket_flags = args.allow_socket.clone();
        if args.ssh_agent {
            socket_flags.push(crate::plan::ssh_agent::socket()?);
        }
        let allowed_sockets =
            crate::plan::sockets::allowed(&socket_flags, &policy, &cwd, &write_roots)?;

        let log_path = match args.log {
            Some(path) => path,
            None => default_log_path(&session_id)?,
        };
        refuse_log_inside_roots(&log_path, &write_roots)?;
        let mut policy_inputs = policy_inputs(&policy, &args.env_file, &write_roots)?;

        // The defaults file decides what later runs reach: never CMD's to rewrite.
        if let Some(file) = user_config
            .as_ref()
            .and_then(|f| std::fs::canonicalize(f).ok())
        {
            if crate::plan::mount_names::name_in_roots(&file, &write_roots)?.is_some() {
                policy_inputs.push(file);
            }
        }
        if let Some(inspection) = &inspection {
            // A CA file CMD could rewrite would decide what the next run trusts.
            for file in &inspection.files {
                if crate::plan::mount_names::name_in_roots(file, &write_roots)?.is_some() {
                    policy_inputs.push(file.clone());
                }
            }
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
            binds,
            hide: named.hide,
            cache_covers,
            protect: named.protect,
            policy_inputs,
            home_split,
            homes,
            allow_git_writes: args.allow_git_writes,
            allow_nested_userns: args.allow_nested_userns,
            allow_io_uring: args.allow_io_uring,
            allowed_sockets,
            capture: (!args.no_capture).then(|| crate::plan::capture::plan(&policy)),
            max_connections: args.max_connections,
            refusal_status,
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
            apt_conf,
            no_network: args.no_network,
            from_bridge,
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
            tools: tools.clone(),
            show: if args.quiet {
                Show::None
            } else {
                args.show.unwrap_or(Show::All)
            },
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
        })
    }
}

/// `--bridge URL`: the remote bridge every name is relayed to, whose answer decides (its
/// refusal is this run's refusal; the probe proves it refuses the canary).
fn bridge_upstream(
    args: &RunArgs,
    policy: &mut Policy,
) -> Result<Option<std::sync::Arc<bridge::egress::upstream_proxy::UpstreamProxy>>, WrapperError> {
    let Some(url) = &args.bridge else {
        return Ok(None);
    };
    policy.set_relaying();
    let proxy = crate::plan::upstream::upstream_proxy(
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
    )?;
    Ok(Some(std::sync::Arc::new(proxy)))
}

/// Each secret's source checked now (its value is read only once the sandbox exists:
/// run/mod.rs), and each file a secret is read from hidden from CMD, under whatever name
/// it tries (the path hidden is the file's own, every link resolved).
fn hide_secret_files(policy: &Policy, hide: &mut Vec<PathBuf>) -> Result<(), WrapperError> {
    for secret in policy.secrets() {
        secret.check_source().map_err(|reason| {
            WrapperError::Usage(format!(
                "secret {} ({}): {reason}",
                secret.name, secret.origin
            ))
        })?;
        if let bridge::policy::secrets::SecretSource::File(path) = &secret.from {
            let path = roots::existing(path, "a secret's file")?;
            if !hide.contains(&path) {
                hide.push(path);
            }
        }
    }
    Ok(())
}

/// Tools that retry a refusal's 502 for about a minute, and give up at once on a 403.
const GIVE_UP_ON_403: [&str; 3] = ["npm", "yarn", "pnpm"];

/// The status of a refusal: `--refusal-status`, or 403 when a tool that would retry a 502
/// for a minute is among `--allow-tool`'s (said in the start-up line), else 502.
fn refusal_status(
    given: Option<u16>,
    tools: &[String],
    summary: &mut Vec<String>,
) -> Result<http::StatusCode, WrapperError> {
    let code = match given {
        Some(code) => code,
        None => match tools.iter().find(|t| GIVE_UP_ON_403.contains(&t.as_str())) {
            Some(tool) => {
                summary.push(format!(
                    "refusals are 403 in this run: {tool} retries a 502 for a minute \
                     (--refusal-status 502 to keep it)"
                ));
                403
            }
            None => 502,
        },
    };
    http::StatusCode::from_u16(code)
        .map_err(|_| WrapperError::Usage(format!("--refusal-status {code} is not an HTTP status")))
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

/// How many other names (hard links) of a split home's kept files netbox pins in the
/// roots, one mount each: a store of packages linked into a project has thousands.
const MOST_KEPT_LINKS: usize = 256;

/// The other names (hard links) of a split home's kept files that the roots hold.
pub fn kept_links_in_roots(config: &SandboxConfig) -> Result<Vec<PathBuf>, WrapperError> {
    let links: Vec<PathBuf> = config
        .home_split
        .iter()
        .flat_map(|s| &s.links)
        .filter(|l| config.write_roots.iter().any(|r| l.starts_with(r)))
        .cloned()
        .collect();
    if links.len() > MOST_KEPT_LINKS {
        return Err(WrapperError::Usage(format!(
            "the writable roots hold {} other names (hard links) of files kept read-only in \
             your home, such as {}, more than the {MOST_KEPT_LINKS} netbox pins one by one; \
             --write the directories CMD needs instead of the home",
            links.len(),
            crate::printable::printable(&links[0].to_string_lossy()),
        )));
    }
    Ok(links)
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
