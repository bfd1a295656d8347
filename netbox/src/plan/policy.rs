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
        summaries.push(crate::plan::tools::summary(&tool, &found, &named_at));
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
    Ok(policy)
}

/// A session id unique enough to tell runs apart in one log.
pub fn new_session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}
