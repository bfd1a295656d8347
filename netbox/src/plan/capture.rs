//! Which ports capture listens on, planned from the policy before the clone. Capture's
//! listeners live in a namespace of their own, at every address (sandbox/capture.rs), so
//! they take no port from CMD: any port the allowlist names can be carried.

use std::net::SocketAddr;

use bridge::Policy;

/// Where capture listens.
#[derive(Debug, Clone, Default)]
pub struct CapturePlan {
    /// Ports listened on at every address but the sandbox's own (loopback, the link's).
    pub ports: Vec<u16>,
}

impl CapturePlan {
    /// Whether a TCP connection to `to`, an address routed to capture's namespace,
    /// reaches one of its listeners.
    pub fn listens_at(&self, to: SocketAddr) -> bool {
        self.ports.contains(&to.port())
    }
}

/// Where capture listens: 80 and 443, and every port the allow rules name (ranges of up
/// to 64), at most `MAX_CAPTURE_PORTS`, 80 and 443 first, then the lowest (every listener
/// travels to netbox in one message, which carries 253 fds at most). A port left out is
/// not captured: a connection to it is a direct attempt, logged as one, and the DNS stub
/// does not answer for a name allowed only there.
pub fn plan(policy: &Policy) -> CapturePlan {
    let mut ports: std::collections::BTreeSet<u16> = [80, 443].into();
    let named = policy.named_ports();
    let named = named.into_iter().filter(|&p| p != 0);
    for port in named {
        if ports.len() >= MAX_CAPTURE_PORTS {
            break;
        }
        ports.insert(port);
    }
    CapturePlan {
        ports: ports.into_iter().collect(),
    }
}

/// Ports capture listens on, at most: with the proxy's two listeners and the DNS stub's
/// two sockets, within one message's 253 fds.
pub const MAX_CAPTURE_PORTS: usize = 240;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_listens_on_every_port_the_allowlist_names() {
        let mut policy = Policy::deny_all();
        for rule in [
            "a.test:22,443,8443",
            "b.test:8080-8081",
            "10.1.2.3:9000",
            "*.c.test:7443",
            "10.0.0.0/8:7000",
            "d.test:1-65535",
            "e.test:*",
        ] {
            policy
                .add_rule(bridge::policy::Action::Allow, rule, "--allow")
                .unwrap();
        }
        policy
            .add_rule(bridge::policy::Action::Deny, "f.test:6000", "--deny")
            .unwrap();
        let plan = plan(&policy);
        assert_eq!(
            plan.ports,
            vec![22, 80, 443, 7000, 7443, 8080, 8081, 8443, 9000]
        );
        assert!(plan.listens_at("198.18.0.9:8443".parse().unwrap()));
        assert!(!plan.listens_at("198.18.0.9:6000".parse().unwrap()));
    }

    #[test]
    fn ports_past_the_cap_are_left_out_but_80_and_443_never() {
        let mut policy = Policy::deny_all();
        let many: Vec<String> = (1000..1300).map(|p| format!("a.test:{p}")).collect();
        for rule in &many {
            policy
                .add_rule(bridge::policy::Action::Allow, rule, "--allow")
                .unwrap();
        }
        let plan = plan(&policy);
        assert_eq!(plan.ports.len(), MAX_CAPTURE_PORTS);
        assert!(plan.ports.contains(&80) && plan.ports.contains(&443));
        assert_eq!(plan.ports[0], 80);
        assert_eq!(plan.ports.last(), Some(&1237));
    }
}
