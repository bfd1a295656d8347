//! `netbox bridge`: the egress proxy on its own, on listeners it binds itself.

use std::sync::Arc;

use bridge::listen::ListenAddr;
use bridge::policy::{Action, Policy};
use bridge::{BridgeConfig, EventLog, Session, SessionListener, Stderr};

use crate::cli::{BridgeArgs, PolicyArgs};
use crate::error::WrapperError;

/// Loads the policy from files and flags, asking the tools named (`--allow-tool`,
/// `tools = [...]`) for their registries as seen from `cwd`; every mistake is reported
/// before anything runs. Returns the policy and, per tool, a summary for the start-up
/// line.
pub fn load_policy_with_tools(
    args: &PolicyArgs,
    cwd: &std::path::Path,
    untrusted: &[std::path::PathBuf],
) -> Result<(Policy, Vec<String>, Vec<String>), WrapperError> {
    let mut policy = load_policy(args)?;
    let mut named: Vec<(String, String)> = args
        .allow_tool
        .iter()
        .map(|t| (t.clone(), "--allow-tool".to_owned()))
        .collect();
    named.extend(
        policy
            .tools()
            .iter()
            .map(|(t, at)| (t.clone(), at.to_string())),
    );
    let mut summaries = Vec::new();
    let mut asked: Vec<String> = Vec::new();
    for (tool, named_at) in named {
        // One tool however it is named (npm, yarn and pnpm are npm).
        let key = crate::tools::canonical(&tool).unwrap_or(&tool).to_owned();
        if asked.contains(&key) {
            continue;
        }
        asked.push(key);
        let ctx = crate::tools::Context {
            cwd,
            untrusted,
            policy: &policy,
            private_ok: args.private_ok,
        };
        let found = crate::tools::discover(&tool, &ctx).map_err(|reason| WrapperError::Rule {
            flag: "--allow-tool",
            rule: tool.clone(),
            reason,
        })?;
        for rule in &found.rules {
            let origin = format!("{tool} ({})", rule.source);
            // An address is opened by its own rule; a name may reach a private address
            // only if the user said the registries are internal.
            let is_name = bridge::policy::RuleSpec::parse(&rule.rule, Action::Allow)
                .is_ok_and(|spec| !spec.hosts.is_address());
            // Never for what a file in a writable root named: an earlier command could
            // have pointed it at this machine or the local network.
            let added = if args.private_ok && is_name && !rule.from_workspace {
                policy.add_private_rule(&rule.rule, &origin)
            } else {
                policy.add_rule(Action::Allow, &rule.rule, &origin)
            };
            added.map_err(|reason| WrapperError::Rule {
                flag: "--allow-tool",
                rule: rule.rule.clone(),
                reason,
            })?;
        }
        summaries.push(crate::tools::summary(&tool, &found, &named_at));
    }
    Ok((policy, summaries, asked))
}

/// Loads the policy from files and flags; every mistake is reported before anything runs.
pub fn load_policy(args: &PolicyArgs) -> Result<Policy, WrapperError> {
    let mut policy = Policy::load(&args.allowlist).map_err(bridge::BridgeError::from)?;
    let flags = [
        ("--allow", Action::Allow, &args.allow),
        ("--deny", Action::Deny, &args.deny),
    ];
    for (flag, action, rules) in flags {
        for rule in rules {
            policy
                .add_rule(action, rule, flag)
                .map_err(|reason| WrapperError::Rule {
                    flag,
                    rule: rule.clone(),
                    reason,
                })?;
        }
    }
    for rule in &args.allow_private {
        policy
            .add_private_rule(rule, "--allow-private")
            .map_err(|reason| WrapperError::Rule {
                flag: "--allow-private",
                rule: rule.clone(),
                reason,
            })?;
    }
    Ok(policy)
}

/// A session id unique enough to tell runs apart in one log.
pub fn new_session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

pub fn run(args: BridgeArgs) -> Result<(), WrapperError> {
    // Parse and validate everything before a runtime or socket exists.
    let addrs: Vec<ListenAddr> = args
        .listen
        .iter()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let untrusted = vec![cwd.clone()];
    let (policy, tools, _) = load_policy_with_tools(&args.policy, &cwd, &untrusted)?;
    for line in tools {
        crate::say(&format!("netbox bridge: {line}"));
    }
    let stderr = if args.quiet {
        Stderr::Quiet
    } else {
        Stderr::Summary
    };
    let log = EventLog::open(args.log.as_deref(), stderr).map_err(|source| {
        bridge::BridgeError::OpenLog {
            path: args.log.clone().unwrap_or_default(),
            source,
        }
    })?;
    let config = BridgeConfig {
        connect_timeout: args.connect_timeout,
        header_timeout: args.header_timeout,
        idle_timeout: args.idle_timeout,
        dns: if args.dns.is_empty() {
            bridge::DnsConfig::System
        } else {
            bridge::DnsConfig::Servers(args.dns.clone())
        },
        refusal_status: http_status(args.refusal_status)?,
        ..BridgeConfig::default()
    };
    let session = Arc::new(Session {
        id: Arc::from(args.session.clone().unwrap_or_else(new_session_id)),
        policy: Arc::new(policy),
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WrapperError::Runtime)?;
    runtime.block_on(async move {
        let mut listeners = Vec::new();
        for addr in &addrs {
            if let ListenAddr::Unix(path) = addr {
                remove_stale_socket(path)?;
            }
            listeners.push(SessionListener {
                session: Arc::clone(&session),
                listener: addr.bind().await?,
            });
        }
        // Announced only once every listener is bound, so a client that reads this line
        // can connect to any of them.
        for sl in &listeners {
            crate::say(&format!(
                "netbox bridge: listening on {} (session {}, {} allow rules)",
                sl.listener.describe(),
                session.id,
                session.policy.allow_count()
            ));
        }
        let log = Arc::new(log);
        // A bridge that cannot log stops: what it lets through must be on record.
        let stop = {
            let log = Arc::clone(&log);
            async move {
                tokio::select! {
                    () = shutdown_signal() => {}
                    () = log.failed() => {}
                }
            }
        };
        bridge::serve(listeners, config, Arc::clone(&log), stop).await;
        for addr in &addrs {
            if let ListenAddr::Unix(path) = addr {
                let _ = std::fs::remove_file(path);
            }
        }
        match log.failure() {
            Some(reason) => Err(WrapperError::EventLogWrite {
                path: args.log.clone().unwrap_or_default(),
                reason,
            }),
            None => Ok(()),
        }
    })
}

fn http_status(code: u16) -> Result<http::StatusCode, WrapperError> {
    http::StatusCode::from_u16(code)
        .map_err(|_| WrapperError::Usage(format!("--refusal-status {code} is not an HTTP status")))
}

/// A socket file left by an earlier bridge would make bind fail; only sockets are removed.
fn remove_stale_socket(path: &std::path::Path) -> Result<(), WrapperError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|source| WrapperError::StaleSocket {
                path: path.to_owned(),
                source,
            })
        }
        _ => Ok(()),
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without signal handlers the default action (terminate) still applies.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}
