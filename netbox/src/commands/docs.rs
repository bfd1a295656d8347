//! `netbox docs [TOPIC]`: netbox's own documents, carried in the binary, so that a hint
//! can point an installed user (`cargo install` copies no documents) at the file format or
//! the flags it names.

use crate::cli::DocsArgs;
use crate::error::WrapperError;

/// Each topic: its name, what it covers, and the document.
const TOPICS: [(&str, &str, &str); 7] = [
    (
        "allowlist",
        "the allowlist file's format: rules, [hosts], [[http]], [[git]], [[secret]]",
        include_str!("../../../allowlists/README.md"),
    ),
    (
        "running",
        "netbox -- CMD: what the sandbox holds, every flag, the probe's rows",
        include_str!("../../../docs/running.md"),
    ),
    (
        "secrets",
        "credentials CMD never holds: [[secret]], --secret, --ssh-agent, [[git]]",
        include_str!("../../../docs/secrets.md"),
    ),
    (
        "bridge",
        "netbox bridge: the proxy alone, tenants, --bridge URL, inspection",
        include_str!("../../../docs/bridge.md"),
    ),
    (
        "git",
        "what netbox keeps git from running and writing",
        include_str!("../../../docs/git.md"),
    ),
    (
        "logs",
        "netbox log, netbox learn, netbox export",
        include_str!("../../../docs/logs.md"),
    ),
    (
        "event-log",
        "every record and field of the JSON event log",
        include_str!("../../../docs/event-log.md"),
    ),
];

pub fn run(args: &DocsArgs) -> Result<u8, WrapperError> {
    let Some(topic) = &args.topic else {
        let mut text = String::from("netbox docs TOPIC prints one of these:\n");
        for (name, about, _) in TOPICS {
            text.push_str(&format!("  {name:<10} {about}\n"));
        }
        return crate::output::print_stdout(&text).map(|()| 0);
    };
    match TOPICS.iter().find(|(name, _, _)| name == topic) {
        Some((_, _, text)) => crate::output::print_stdout(text).map(|()| 0),
        None => Err(WrapperError::Usage(format!(
            "no document {:?}: the topics are {}",
            crate::printable::printable(topic),
            TOPICS.map(|(name, _, _)| name).join(", ")
        ))),
    }
}
