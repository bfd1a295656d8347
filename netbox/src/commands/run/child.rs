//! What pid 1 is given: the plan of the sandbox it builds (mounts, namespaces, the probe's
//! input, CMD and its environment), and the line that says what a run is under.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::error::WrapperError;
use crate::plan::config::SandboxConfig;
use crate::plan::protect::Protected;
use crate::plan::resolved::Resolved;
use crate::plan::{cgroup, env};
use crate::sandbox::mounts;
use crate::sandbox::probe::ProbeInput;
use crate::sandbox::{ChildPlan, PROXY_PORT};

// Whole: the mounts worked out (what is hidden, read-only, protected), then the plan filled
// field by field from them and the config: a third of it is the struct literal.
pub(super) fn child_plan(
    config: &SandboxConfig,
    protected: &[Protected],
    resolved: &mut Resolved,
    host_listener: SocketAddr,
    canary: &str,
    cgroup_limits: Vec<cgroup::CgroupLimit>,
) -> Result<ChildPlan, WrapperError> {
    // The host's sockets are not in the plan: pid 1 finds them while it sets up.
    // A path under a private /tmp outside every root is not in the sandbox at all: nothing
    // to hide or pin there.
    let in_sandbox = |path: &&PathBuf| {
        config.tmp == crate::cli::TmpMode::Host
            || !path.starts_with("/tmp")
            || config.write_roots.iter().any(|r| path.starts_with(r))
    };
    let covered: Vec<PathBuf> = config
        .cache_covers
        .iter()
        .filter(in_sandbox)
        .cloned()
        .collect();
    // Under a cover, but for the roots kept in it, nothing shows: nothing to hide or pin.
    let shown = |path: &&PathBuf| {
        !covered.iter().any(|c| path.starts_with(c))
            || config.write_roots.iter().any(|r| path.starts_with(r))
    };
    let mut hidden: Vec<PathBuf> = config
        .hide
        .iter()
        .filter(in_sandbox)
        .filter(shown)
        .cloned()
        .collect();
    let mut read_only: Vec<PathBuf> = config
        .read_only
        .iter()
        .filter(in_sandbox)
        .filter(shown)
        .cloned()
        .collect();
    // What is hidden or pinned by one name is by its other names too (a bind mount of
    // home elsewhere shows `~/.ssh` again): hidden wherever it shows, pinned wherever a
    // writable root holds it (elsewhere the sandbox is read-only already).
    let table = crate::plan::mount_names::host()?;
    // From every path, the ones not in the sandbox by their own name too (under a private
    // /tmp, under a cover): another name may well be.
    let hidden_elsewhere: Vec<PathBuf> = config
        .hide
        .iter()
        .chain(&config.cache_covers)
        .flat_map(|path| table.other_names(path).all().cloned().collect::<Vec<_>>())
        .filter(|name| crate::plan::mount_names::shows_in_sandbox(name))
        .collect();
    let pinned_elsewhere: Vec<PathBuf> = protected
        .iter()
        .filter(|p| !p.writable)
        .map(|p| &p.path)
        .chain(&config.read_only)
        .flat_map(|path| {
            let names = table.other_names_in(path, &config.write_roots);
            names.all().cloned().collect::<Vec<_>>()
        })
        .collect();
    for (found, into) in [
        (hidden_elsewhere, &mut hidden),
        (pinned_elsewhere, &mut read_only),
    ] {
        for name in found {
            if in_sandbox(&&name) && shown(&&name) && !into.contains(&name) {
                into.push(name);
            }
        }
    }
    let protected: Vec<Protected> = protected
        .iter()
        .filter(|p| shown(&&p.path))
        .cloned()
        .collect();
    let protected = protected.as_slice();
    // Whether each is a directory, as resolved (roots already are).
    for path in &hidden {
        resolved.identify(path)?;
    }
    let pinned: Vec<&Path> = protected
        .iter()
        .map(|p| p.path.as_path())
        .chain(read_only.iter().map(PathBuf::as_path))
        .chain(covered.iter().map(PathBuf::as_path))
        .collect();
    // A bind's kind (a directory, a file) decides its mountpoint: known before the plan.
    for bind in &config.binds {
        resolved.identify(&bind.source)?;
    }
    crate::plan::config::refuse_bind_overlaps(
        &config.binds,
        &config.write_roots,
        &pinned,
        &hidden,
        &covered,
    )?;
    let mut mounts = mounts::plan(
        &mounts::Layout {
            write_roots: &config.write_roots,
            tmp: config.tmp,
            protected,
            read_only: &read_only,
            hidden: &hidden,
            covered: &covered,
            binds: &config.binds,
        },
        |path| resolved.is_dir(path),
    );
    mounts.forbid_nested_userns = !config.allow_nested_userns;
    // The bundle's first CA comes later, from netbox (run/mod.rs): the session CA, or the
    // CA of a shared bridge that inspects the tenant's tunnels.
    mounts.trust = match (&config.inspection, &config.from_bridge.ca_pem) {
        (Some(inspection), _) => Some(inspection.extra_pem.clone()),
        (None, Some(_)) => Some(String::new()),
        (None, None) => None,
    };
    mounts.resolver = config.capture.as_ref().map(|_| crate::sandbox::DNS_STUB);
    mounts.apt_conf.clone_from(&config.apt_conf);
    // What each path the sandbox mounts from or onto is, for pid 1 to check.
    let to_identify: Vec<PathBuf> = mounts
        .paths_to_identify()
        .into_iter()
        .map(Path::to_owned)
        .collect();
    for path in &to_identify {
        resolved.identify(path)?;
    }
    mounts.identities = resolved.ids();
    // Each cover with the roots kept in it, for the probe.
    let covers_kept = mounts
        .ops
        .iter()
        .filter_map(|op| match op {
            mounts::MountOp::Cover { target, keep } => Some((target.clone(), keep.clone())),
            _ => None,
        })
        .collect();
    let bound = config
        .binds
        .iter()
        .filter_map(|b| {
            Some(crate::sandbox::probe::BoundPath {
                source: b.source.clone(),
                target: b.target.clone(),
                identity: *mounts.identities.get(&b.source)?,
                writable: b.writable,
            })
        })
        .collect();
    let root_identities = config
        .write_roots
        .iter()
        .filter_map(|r| Some((r.clone(), *mounts.identities.get(r)?)))
        .collect();
    let mut outside = vec![PathBuf::from("/")];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        // Only where the sandbox can see it: under a private /tmp it does not exist at all.
        // And where this user can look: a home it cannot search would fail with EACCES,
        // which proves nothing about the mount.
        let hidden = config.tmp == crate::cli::TmpMode::Private && home.starts_with("/tmp");
        let searchable = nix::unistd::access(&home, nix::unistd::AccessFlags::X_OK).is_ok();
        if home.is_dir()
            && searchable
            && !hidden
            && !config.write_roots.iter().any(|r| home.starts_with(r))
        {
            outside.push(home);
        }
    }
    let trust_bundle = mounts
        .trust
        .as_ref()
        .map(|_| crate::plan::inspection::TRUST_BUNDLE);
    // The run's own secrets and those its shared bridge holds, alike to CMD.
    let secrets: Vec<env::SecretVar> = config
        .policy
        .secrets()
        .iter()
        .map(env::SecretVar::of)
        .chain(config.from_bridge.secrets.iter().cloned())
        .collect();
    Ok(ChildPlan {
        uid: config.uid,
        gid: config.gid,
        mounts,
        probe: ProbeInput {
            write_roots: config.write_roots.clone(),
            root_identities,
            temp_dir: PathBuf::from("/tmp"),
            outside,
            // Each proved read-only and watched while CMD runs; the parts left writable
            // inside a pin are not (losing one leaves the pin's read-only entry).
            protected: protected
                .iter()
                .filter(|p| !p.writable)
                .map(|p| p.path.clone())
                .chain(read_only.iter().cloned())
                .collect(),
            hidden,
            covered: covers_kept,
            binds: bound,
            proxy: SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)),
            host_listener,
            canary: canary.to_owned(),
            refusal_status: config.refusal_status.as_u16(),
            limits: config.limits,
            cgroup_limits,
            nested_userns_forbidden: !config.allow_nested_userns,
            io_uring_forbidden: !config.allow_io_uring,
            allowed_sockets: config
                .allowed_sockets
                .iter()
                .map(|a| a.named.clone())
                .collect(),
            capture: config.capture.as_ref().map(|capture| {
                let ports = &capture.ports;
                crate::sandbox::probe::CaptureProbe {
                    // 443 is always among them; a port below 1024 that is not, for the
                    // closed one (there is always one: at most 1,023 are named).
                    port: 443,
                    closed_port: (1..1024)
                        .find(|p| !ports.contains(p) && *p != 53)
                        .unwrap_or(1),
                    // One CMD could listen on itself, if any.
                    unprivileged_port: ports
                        .iter()
                        .copied()
                        .find(|&p| p >= 1024 && p != PROXY_PORT),
                }
            }),
            secrets: secrets
                .iter()
                .map(|s| (s.name.clone(), s.placeholder.clone()))
                .collect(),
        },
        cmd: config.cmd.clone(),
        fetch: config
            .fetch
            .as_ref()
            .map(|cmd1| vec!["/bin/sh".into(), "-c".into(), cmd1.into()]),
        env: env::with_placeholders(
            env::sandbox_env(PROXY_PORT, config.env_base, trust_bundle, &config.env_extra),
            &secrets,
        ),
        cwd: config.cwd.clone(),
        terminal: crate::terminal::plan(config.tty),
        capture: config.capture.clone(),
        placeholders: protected
            .iter()
            .filter(|p| p.placeholder.is_some())
            .map(|p| p.path.clone())
            .collect(),
    })
}

pub(super) fn startup_line(config: &SandboxConfig) -> String {
    // A home split into its writable entries is said as one (homesplit/).
    let in_split = |r: &Path| config.home_split.iter().any(|s| r.starts_with(&s.home));
    let mut roots: Vec<String> = config
        .write_roots
        .iter()
        .filter(|r| !in_split(r))
        .map(|r| r.display().to_string())
        .collect();
    for split in &config.home_split {
        roots.push(format!(
            "{} ({} entries; its top level, hidden files and code read-only)",
            split.home.display(),
            split.writable
        ));
    }
    if config.tmp == crate::cli::TmpMode::Private {
        roots.push("/tmp (private)".into());
    }
    // With --fetch the allowlist is the fetch phase's; CMD itself gets no network.
    let hosts = match (&config.fetch, config.policy.is_learning()) {
        _ if config.no_network => "no network (--no-network)".to_owned(),
        _ if config.policy.is_relaying() => format!(
            "hosts the bridge at {} allows",
            config.upstream.as_ref().map_or("?", |u| u.name.as_str())
        ),
        (_, true) => "any public host (learn mode)".to_owned(),
        (Some(_), false) => format!("{} for --fetch, none after", allow_rules(&config.policy)),
        (None, false) => allow_rules(&config.policy),
    };
    let mode = if config.policy.is_learning() {
        "learning"
    } else {
        "normal"
    };
    let tools: String = config
        .tool_summary
        .iter()
        .map(|t| format!(" | {}", crate::printable::printable(t)))
        .collect();
    format!(
        "netbox: sandbox {mode} | workspace {} | write {} | {hosts}{tools} | log {}",
        config.workspace.display(),
        roots.join(", "),
        config.log_path.display()
    )
}

/// "N allow rules": what the policy counts is rules (one may name many hosts, as
/// `*.test` does), and the tools' summaries count hosts apart.
fn allow_rules(policy: &bridge::policy::Policy) -> String {
    match policy.allow_count() {
        1 => "1 allow rule".to_owned(),
        n => format!("{n} allow rules"),
    }
}
