//! What `netbox tools` says of each host it lists that a run would refuse as it stands:
//! one that resolves, here and now, to an address that is not public (a registry inside a
//! company, or behind split-horizon DNS). A run opens such a host only with `--private-ok`
//! (for hosts from the user's own settings) or `--allow-private HOST:PORT`; saying so
//! here saves the first try's refusal.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bridge::egress::resolver::Resolver;
use bridge::ipclass::IpClass;

/// How long the lookups may take in all: a host that has not answered by then is said
/// nothing of.
const LOOKUP_DEADLINE: Duration = Duration::from_secs(3);

/// For each rule (`HOST:PORT`), the first address it resolves to that is not public, with
/// its class; `None` where every address is public, or the lookup failed or was late.
/// Looked up as a run's bridge looks names up (the system's configuration, hosts file
/// first), all at once.
pub fn non_public(rules: &[String]) -> Vec<Option<(IpAddr, IpClass)>> {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return vec![None; rules.len()];
    };
    let resolver = Arc::new(Resolver::new(
        &bridge::DnsConfig::System,
        LOOKUP_DEADLINE,
        None,
    ));
    let policy = Arc::new(bridge::Policy::deny_all());
    runtime.block_on(async {
        let lookups: Vec<_> = rules
            .iter()
            .map(|rule| {
                let (resolver, policy) = (Arc::clone(&resolver), Arc::clone(&policy));
                let target = bridge::target::Target::parse_authority(rule).ok();
                tokio::spawn(async move {
                    let addrs = resolver.resolve(&target?.host, &policy).await.ok()?;
                    addrs
                        .into_iter()
                        .map(|ip| (ip, bridge::local_routes::classify_here(ip)))
                        .find(|(_, class)| !class.is_public())
                })
            })
            .collect();
        let mut found = Vec::with_capacity(lookups.len());
        for lookup in lookups {
            found.push(lookup.await.ok().flatten());
        }
        found
    })
}

/// The line said under a rule whose host is not public, given how the run would be asked.
pub fn advice(
    rule: &str,
    ip: IpAddr,
    class: IpClass,
    private_ok: bool,
    from_workspace: bool,
) -> Option<String> {
    let what = format!("resolves to {ip} ({}, not public)", class.describe());
    match (private_ok, from_workspace) {
        (true, false) => None,
        (false, false) => Some(format!(
            "{what}: a run refuses it unless --private-ok (every host a tool's own settings \
             name), or --allow-private {rule}"
        )),
        (_, true) => Some(format!(
            "{what}: it comes from the workspace, which --private-ok does not open; \
             --allow-private {rule} does"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_that_resolves_to_a_private_address_is_said_with_what_opens_it() {
        // Real lookups: an address literal, and a name the system's hosts file has.
        let rules = ["127.0.0.1:443".to_owned(), "localhost:80".to_owned()];
        let found = non_public(&rules);
        for (rule, found) in rules.iter().zip(&found) {
            let (ip, class) = found.unwrap_or_else(|| panic!("{rule} resolved to nothing private"));
            assert!(ip.is_loopback(), "{rule}: {ip}");
            assert_eq!(class, IpClass::Loopback);
        }
        let (ip, class) = found[0].unwrap();
        let said = advice("reg.test:443", ip, class, false, false).unwrap();
        assert!(said.contains("--private-ok") && said.contains("--allow-private reg.test:443"));
        assert_eq!(advice("reg.test:443", ip, class, true, false), None);
        let workspace = advice("reg.test:443", ip, class, true, true).unwrap();
        assert!(
            workspace.contains("--private-ok does not open"),
            "{workspace}"
        );
    }
}
