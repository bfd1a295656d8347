//! Where capture listens in the sandbox, planned from the policy before the clone: the
//! ports taken at every address, and the addresses (and ports) taken one at a time.

use std::net::SocketAddr;

use bridge::Policy;

/// Where capture listens.
#[derive(Debug, Clone, Default)]
pub struct CapturePlan {
    /// Ports listened on at every address (below 1024, which CMD cannot listen on itself,
    /// so a listener there takes nothing from it).
    pub ports: Vec<u16>,
    /// Names the allowlist opens on higher ports, in the order the session hands out
    /// their addresses (which `pinned` listens at).
    pub names: Vec<String>,
    /// Addresses and ports listened on one by one, for higher ports: the session
    /// addresses of `names` (IPv4 and IPv6) and single addresses the allowlist opens,
    /// each at its ports. A listener on one address leaves the port to CMD on every other
    /// single address (not on the wildcard, which Linux will not bind beside it). IPv6
    /// ones are left out where IPv6 is down.
    pub pinned: Vec<SocketAddr>,
}

impl CapturePlan {
    /// Every port capture listens on, at every address or at single ones: the DNS stub
    /// answers for names allowed on one of these.
    pub fn ports_carried(&self) -> Vec<u16> {
        let mut ports = self.ports.clone();
        for at in &self.pinned {
            if !ports.contains(&at.port()) {
                ports.push(at.port());
            }
        }
        ports
    }

    /// Whether a TCP connection to `to` reaches one of capture's listeners.
    pub fn listens_at(&self, to: SocketAddr) -> bool {
        let ip = bridge::target::canonical_ip(to.ip());
        self.ports.contains(&to.port())
            || self
                .pinned
                .iter()
                .any(|p| bridge::target::canonical_ip(p.ip()) == ip && p.port() == to.port())
    }
}

/// Where capture listens. At every address: 80 and 443, and the privileged ports the
/// allow rules name (CMD cannot listen on those itself, so a listener on every address
/// there takes nothing from it); never 53, the DNS stub's. At most `MAX_CAPTURE_PORTS`,
/// the lowest. On higher ports, one address at a time: each exact name's session
/// addresses (handed out here in rule order, as the session hands them out again) and
/// each single address, at the ports their rules name; at most `MAX_PINNED_LISTENERS`,
/// the first rules' (every listener travels to netbox in one message, which carries 253
/// fds at most). What is left out is not captured: a direct attempt, logged as one.
pub fn plan(policy: &Policy) -> CapturePlan {
    let mut ports: std::collections::BTreeSet<u16> = [80, 443].into();
    let named = policy.named_ports();
    let named = named.into_iter().filter(|&p| p < 1024 && p != 53);
    ports.extend(named.take(MAX_CAPTURE_PORTS - 2));
    let addresses = bridge::capture::SessionAddresses::default();
    let mut names = Vec::new();
    let mut pinned = Vec::new();
    for (host, host_ports) in policy.named_targets_on_high_ports() {
        let ips = match host {
            bridge::target::Host::Name(name) => {
                let ips: Vec<std::net::IpAddr> = [false, true]
                    .into_iter()
                    .filter_map(|v6| addresses.address_for(&name, v6))
                    .collect();
                names.push(name);
                ips
            }
            bridge::target::Host::Ip(ip) => vec![ip],
        };
        for port in host_ports {
            for &ip in &ips {
                if pinned.len() < MAX_PINNED_LISTENERS {
                    pinned.push(std::net::SocketAddr::new(ip, port));
                }
            }
        }
    }
    CapturePlan {
        ports: ports.into_iter().collect(),
        names,
        pinned,
    }
}

/// Ports capture listens on at every address, at most.
const MAX_CAPTURE_PORTS: usize = 64;
/// Listeners capture has at one address each, at most: with the 64 above, the proxy's two
/// and the DNS stub's two, within one message's 253 fds.
const MAX_PINNED_LISTENERS: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_listens_for_names_and_addresses_on_higher_ports_one_address_at_a_time() {
        let mut policy = Policy::deny_all();
        for rule in [
            "a.test:22,443,8443",
            "b.test:8080-8081",
            "10.1.2.3:9000",
            "127.0.0.1:5432",
            "*.c.test:8443",
            "10.0.0.0/8:7000",
            "a.test:9443",
            "[fe80::1]:8080",
            "[ff02::1]:9002",
            "224.0.0.1:9003",
            "255.255.255.255:9004",
        ] {
            policy
                .add_rule(bridge::policy::Action::Allow, rule, "--allow")
                .unwrap();
        }
        policy
            .add_rule(bridge::policy::Action::Deny, "d.test:8443", "--deny")
            .unwrap();
        let plan = plan(&policy);
        assert_eq!(plan.ports, vec![22, 80, 443]);
        assert_eq!(plan.names, vec!["a.test".to_owned(), "b.test".to_owned()]);
        let pinned: Vec<String> = plan.pinned.iter().map(ToString::to_string).collect();
        assert_eq!(
            pinned,
            [
                "198.18.0.1:8443",
                "[2001:2::1]:8443",
                "198.18.0.1:9443",
                "[2001:2::1]:9443",
                "198.18.0.2:8080",
                "[2001:2::2]:8080",
                "198.18.0.2:8081",
                "[2001:2::2]:8081",
                "10.1.2.3:9000",
            ]
        );
        // The session hands the same names the same addresses, in the same order.
        let session = bridge::capture::SessionAddresses::default();
        for name in &plan.names {
            session.address_for(name, false);
        }
        assert_eq!(
            session.address_for("b.test", true),
            Some("2001:2::2".parse().unwrap())
        );
    }
}
