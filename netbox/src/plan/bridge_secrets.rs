//! Secrets a shared bridge holds for the run's tenant: `netbox --bridge URL --secret NAME`.
//! The values stay at the bridge, not even on this machine; the run asks the bridge, under
//! its tenant's credentials, for the placeholders of the secrets it names and for the CA
//! of the tunnels the bridge inspects (bridge::offer), before the sandbox exists: CMD's
//! environment is made from them, and its trust bundle holds that CA.
//!
//! What the bridge answers is held to what a netbox bridge makes: each placeholder as
//! `netbox-secret-NAME-` and 32 hex digits, each host a name rule, the CA certificates
//! alone (written afresh). Only the secrets the user named are taken, under the names the
//! user gave: a bridge cannot put a variable of its choosing into CMD's environment.

use std::time::Duration;

use bridge::egress::upstream_proxy::UpstreamProxy;
use bridge::offer::Offer;
use bridge::policy::secrets::SecretHost;

use crate::error::WrapperError;
use crate::plan::env::SecretVar;

/// How long the bridge has to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// What the run takes from its bridge.
#[derive(Debug, Clone, Default)]
pub struct FromBridge {
    /// The bridge's inspecting CA, PEM (its certificates alone), when the tenant's policy
    /// inspects: CMD's trust bundle holds it.
    pub ca_pem: Option<String>,
    /// The secrets named with `--secret NAME`, as CMD's environment carries them.
    pub secrets: Vec<SecretVar>,
}

/// The names `--secret` gives with `--bridge`: bare variable names, each once (the value
/// and its hosts are the bridge's to say).
pub fn names(flags: &[String]) -> Result<Vec<String>, WrapperError> {
    let mut names: Vec<String> = Vec::new();
    for flag in flags {
        if !bridge::policy::secrets::valid_name(flag) {
            return Err(WrapperError::Usage(format!(
                "--secret {flag}: with --bridge, a secret's value and hosts are in the \
                 tenant's policy at the bridge; name it alone (--secret NAME)"
            )));
        }
        if names.contains(flag) {
            return Err(WrapperError::Usage(format!(
                "--secret {flag} is given twice"
            )));
        }
        names.push(flag.clone());
    }
    Ok(names)
}

/// Asks the bridge for its offer and takes what `wanted` names from it. With nothing
/// wanted, a bridge that has no offer to make (an older netbox bridge) is no mistake:
/// the run then trusts no CA of its.
pub fn ask(proxy: &UpstreamProxy, wanted: &[String]) -> Result<FromBridge, WrapperError> {
    let asked = ask_offer(proxy);
    let offer = match (asked, wanted.is_empty()) {
        (Ok(offer), _) => offer,
        (Err(_), true) => return Ok(FromBridge::default()),
        (Err(detail), false) => {
            return Err(WrapperError::Usage(format!(
                "--secret {}: cannot ask the bridge at {} for its placeholders: {detail}",
                wanted[0], proxy.name
            )))
        }
    };
    take(offer, wanted, &proxy.name)
}

/// The offer, asked on a current-thread runtime made for it and dropped after it: this
/// runs before netbox forks (STYLE.md rule 13), and such a runtime leaves no thread behind
/// (plan/tools/fetch.rs says why).
fn ask_offer(proxy: &UpstreamProxy) -> Result<Offer, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start asking: {e}"))?;
    let resolver =
        bridge::egress::resolver::Resolver::new(&bridge::DnsConfig::System, ASK_TIMEOUT, None);
    let asked = runtime.block_on(proxy.ask_offer(&resolver, ASK_TIMEOUT));
    drop(resolver);
    drop(runtime);
    asked.map_err(|refusal| refusal.detail)
}

/// `offer` held to what a netbox bridge makes, and cut to `wanted`.
fn take(offer: Offer, wanted: &[String], bridge: &str) -> Result<FromBridge, WrapperError> {
    let ca_pem = match offer.ca {
        Some(pem) => {
            let certificates = bridge::tls::inspector::read_pem_certificates(pem.as_bytes())
                .map_err(|e| {
                    WrapperError::Usage(format!(
                        "the bridge at {bridge} offered a CA that is not one: {e}"
                    ))
                })?;
            Some(
                certificates
                    .iter()
                    .map(|c| crate::plan::inspection::pem_certificate(c))
                    .collect::<String>(),
            )
        }
        None => None,
    };
    let mut secrets = Vec::new();
    for name in wanted {
        let mistake = |why: String| WrapperError::Usage(format!("--secret {name}: {why}"));
        let Some(offered) = offer.secrets.iter().find(|s| &s.name == name) else {
            let held: Vec<&str> = offer.secrets.iter().map(|s| s.name.as_str()).collect();
            return Err(mistake(format!(
                "the bridge at {bridge} holds no secret of that name for this tenant ({})",
                if held.is_empty() {
                    "it holds none".to_owned()
                } else {
                    format!("it holds {}", held.join(", "))
                }
            )));
        };
        if !bridge::policy::secrets::is_placeholder_for(name, &offered.placeholder) {
            return Err(mistake(format!(
                "the bridge at {bridge} answered with a placeholder netbox does not make"
            )));
        }
        let hosts = offered
            .hosts
            .iter()
            .map(|h| match SecretHost::parse(h) {
                Ok(host) => Ok(host),
                Err(_) => Err(mistake(format!(
                    "the bridge at {bridge} names a host that is not a name rule: {:?}",
                    crate::printable::printable(h)
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        secrets.push(SecretVar {
            name: name.clone(),
            placeholder: offered.placeholder.clone(),
            hosts,
            read_from: None,
        });
    }
    Ok(FromBridge { ca_pem, secrets })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bridge::offer::OfferedSecret;

    fn offered(name: &str, placeholder: &str, hosts: &[&str]) -> OfferedSecret {
        OfferedSecret {
            name: name.into(),
            placeholder: placeholder.into(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }
    }

    const GOOD: &str = "netbox-secret-T-0123456789abcdef0123456789abcdef";

    #[test]
    fn only_the_named_secrets_are_taken_and_each_is_checked() {
        let offer = Offer {
            ca: None,
            secrets: vec![
                offered("T", GOOD, &["git.test"]),
                offered(
                    "OTHER",
                    "netbox-secret-OTHER-0123456789abcdef0123456789abcdef",
                    &["x.test"],
                ),
            ],
        };
        let taken = take(offer.clone(), &["T".into()], "b").unwrap();
        assert_eq!(taken.secrets.len(), 1);
        assert_eq!(taken.secrets[0].placeholder, GOOD);
        let missing = take(offer, &["NOPE".into()], "b").unwrap_err().to_string();
        assert!(missing.contains("it holds T, OTHER"), "{missing}");
    }

    #[test]
    fn what_a_netbox_bridge_does_not_make_is_refused() {
        let bad = |secret: OfferedSecret| {
            let offer = Offer {
                ca: None,
                secrets: vec![secret],
            };
            take(offer, &["T".into()], "b").unwrap_err().to_string()
        };
        assert!(bad(offered("T", "$(reboot)", &["git.test"])).contains("placeholder"));
        assert!(bad(offered("T", &format!("{GOOD}\n"), &["git.test"])).contains("placeholder"));
        assert!(bad(offered("T", GOOD, &["10.0.0.0/8"])).contains("host"));
        assert!(bad(offered("T", GOOD, &["git.test\nx"])).contains("host"));
        let offer = Offer {
            ca: Some("not a certificate".into()),
            secrets: Vec::new(),
        };
        assert!(take(offer, &[], "b").is_err());
    }

    #[test]
    fn names_are_bare_variable_names_once() {
        assert_eq!(names(&["A".into()]).unwrap(), ["A"]);
        assert!(names(&["A@git.test".into()]).is_err());
        assert!(names(&["A=env:B".into()]).is_err());
        assert!(names(&["A".into(), "A".into()]).is_err());
    }
}
