//! What a bridge tells its own client about itself: the placeholders of the secrets it
//! holds for the client's session (a tenant's, on a shared bridge) and the CA that signs
//! the certificates of the tunnels it inspects. `netbox --bridge URL` asks for it at start
//! (`GET http://netbox-bridge.invalid/` through the bridge, under its tenant's
//! credentials), so that a sandbox judged by a shared bridge holds placeholders and trusts
//! that CA while the values stay at the bridge, not even on the machine the run is on.
//!
//! Every bridge answers the name itself, never passing it on: a run's own bridge, relaying
//! to a shared one, answers with its own session's (none of the tenant's), so CMD never
//! learns a placeholder of the tenant's that its run did not ask for. `.invalid` (RFC
//! 6761) is no server's name anywhere.

use serde::{Deserialize, Serialize};

use crate::policy::Policy;

/// The name a bridge answers as itself.
pub const OFFER_HOST: &str = "netbox-bridge.invalid";

/// Largest answer a client reads: placeholders and hosts of a policy's secrets, and a CA
/// certificate.
pub const MAX_OFFER_BYTES: usize = 1 << 20;

/// The answer, as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// The inspecting CA's certificate (PEM), when the session's policy inspects.
    pub ca: Option<String>,
    pub secrets: Vec<OfferedSecret>,
}

/// One secret as a client may know it: never its value or where it is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferedSecret {
    pub name: String,
    pub placeholder: String,
    /// The hosts its value goes to, as the policy writes them.
    pub hosts: Vec<String>,
}

impl Offer {
    /// What `policy` (and the bridge's CA, if the policy inspects) lets a client know.
    pub fn of(policy: &Policy, ca_pem: Option<&str>) -> Offer {
        Offer {
            ca: ca_pem.filter(|_| policy.inspects()).map(str::to_owned),
            secrets: policy
                .secrets()
                .iter()
                .map(|s| OfferedSecret {
                    name: s.name.clone(),
                    placeholder: s.placeholder.clone(),
                    hosts: s.written_hosts.clone(),
                })
                .collect(),
        }
    }
}
