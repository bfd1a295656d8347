//! The policy a run or a standalone bridge is held to: the allowlist files and rule flags,
//! and the rules the tools named with `--allow-tool` add. Shared by `netbox -- CMD` and
//! `netbox bridge`, below both.

use bridge::policy::{Action, Policy};

use crate::cli::PolicyArgs;
use crate::error::WrapperError;

/// Loads the policy from files and flags, asking the tools named (`--allow-tool`,
/// `tools = [...]`) for their registries as seen from `cwd`; every mistake is reported
/// before anything runs. Returns the policy and, per tool, a summary for the start-up
/// line. The registry documents read go in `fetches` (one deadline for all of them, and
/// their records for the event log).
pub fn load_policy_with_tools(
    args: &PolicyArgs,
    cwd: &std::path::Path,
    untrusted: &[std::path::PathBuf],
    hidden: &[std::path::PathBuf],
    fetches: &crate::plan::tools::fetch::Fetches,
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
        let key = crate::plan::tools::canonical(&tool)
            .unwrap_or(&tool)
            .to_owned();
        if asked.contains(&key) {
            continue;
        }
        asked.push(key);
        let ctx = crate::plan::tools::Context {
            cwd,
            untrusted,
            hidden,
            policy: &policy,
            private_ok: args.private_ok,
            fetches,
        };
        let found =
            crate::plan::tools::discover(&tool, &ctx).map_err(|reason| WrapperError::Rule {
                flag: "--allow-tool",
                rule: tool.clone(),
                reason,
            })?;
        for rule in &found.rules {
            let origin = format!(
                "{}{tool} ({})",
                bridge::policy::TOOL_RULE_PREFIX,
                rule.source
            );
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
        summaries.push(crate::plan::tools::summary(&tool, &found, &named_at));
    }
    policy.prepare();
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
    if args.inspect {
        policy.set_inspect_all();
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
    for (index, flag) in args.secret.iter().enumerate() {
        let secret = |reason| WrapperError::Usage(format!("--secret {flag}: {reason}"));
        policy
            .add_secret(secret_flag(flag, index + 1).map_err(secret)?)
            .map_err(secret)?;
    }
    if let Some((secret, host)) = policy.secret_host_not_allowed() {
        return Err(WrapperError::Usage(format!(
            "secret {} ({}) goes to {host}, which the policy does not allow: add an allow \
             rule for it",
            secret.name, secret.origin
        )));
    }
    Ok(policy)
}

/// `--secret NAME[=SOURCE]@HOST[,HOST]`: the source is `env:NAME` when left out.
fn secret_flag(flag: &str, line: usize) -> Result<bridge::policy::secrets::Secret, String> {
    let (named, hosts) = flag
        .rsplit_once('@')
        .ok_or("name the hosts it goes to: NAME[=SOURCE]@HOST[,HOST]")?;
    let (name, from) = match named.split_once('=') {
        Some((name, from)) => (name, from.to_owned()),
        None => (named, format!("env:{named}")),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect();
    let origin = bridge::policy::RuleRef {
        file: std::sync::Arc::from("--secret"),
        line: u32::try_from(line).unwrap_or(u32::MAX),
        text: flag.into(),
    };
    let cwd = std::env::current_dir().ok();
    bridge::policy::secrets::Secret::parse(name, &from, &hosts, cwd.as_deref(), origin)
}

/// A standalone bridge's policy, refused if it names secrets: their placeholders are made
/// per sandboxed run, and a bridge has no run to hand them to.
pub fn refuse_secrets_at_bridge(policy: Policy) -> Result<Policy, WrapperError> {
    match policy.secrets().first() {
        Some(secret) => Err(WrapperError::Usage(format!(
            "secret {} ({}): a bridge holds secrets for its tenants alone (--tenants, \
             where each client names itself); or give them to the run (netbox --secret or \
             an allowlist's [[secret]] with netbox -- CMD)",
            secret.name, secret.origin
        ))),
        None => Ok(policy),
    }
}

/// A session id unique enough to tell runs apart in one log.
pub fn new_session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}
