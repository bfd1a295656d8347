//! Turns a target's host into the addresses it may be dialed at.
//!
//! Order: an IP literal is itself; a name pinned by the policy's `[hosts]` table gets its
//! pinned addresses and no DNS query at all; anything else goes to hickory-resolver, built
//! once from `/etc/resolv.conf` (or from `--dns`), with a deadline. The caller classifies
//! and then dials exactly these addresses: nothing resolves a name a second time, which is
//! what closes the DNS-rebinding hole between "checked" and "dialed".

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;

use crate::policy::Policy;
use crate::target::{canonical_ip, Host};

/// Where DNS questions go.
#[derive(Debug, Clone, Default)]
pub enum DnsConfig {
    /// The system's resolver configuration (`/etc/resolv.conf`, `/etc/hosts`).
    #[default]
    System,
    /// These name servers only (UDP then TCP), and no hosts file.
    Servers(Vec<SocketAddr>),
}

/// Resolves names, or explains why it can't.
pub struct Resolver {
    config: DnsConfig,
    /// Built on the first name that needs DNS: many sessions never ask (IP literals and
    /// pinned names only), and building seeds hickory's random generator, whose CPU
    /// feature probing alone is measurable in a start-up that should cost nothing.
    dns: std::sync::OnceLock<Result<TokioResolver, String>>,
    /// The system's hosts file, read with the DNS client: a name it gives an address is
    /// answered from it alone. hickory asks DNS for the family the file lacks (a name
    /// with an IPv4 line only still costs an AAAA query), which on a machine whose DNS does
    /// not answer (offline, or names only the hosts file knows) ends in a timeout where
    /// every other client on the machine, through the C library's "files, then dns",
    /// gets the address.
    hosts: std::sync::OnceLock<Option<hickory_resolver::Hosts>>,
    timeout: Duration,
    /// A standalone bridge's counters: each lookup's latency.
    metrics: Option<std::sync::Arc<crate::log::metrics::Metrics>>,
}

/// Why a host has no address.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    #[error("no DNS resolver available: {0}")]
    NoResolver(String),
    #[error("DNS lookup timed out after {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Lookup(String),
    #[error("name has no addresses")]
    Empty,
}

impl Resolver {
    /// A resolver for `config`; the DNS client itself is built on first use. A failure to
    /// build it is kept and reported per lookup: pinned names and IP literals still work.
    pub fn new(
        config: &DnsConfig,
        timeout: Duration,
        metrics: Option<std::sync::Arc<crate::log::metrics::Metrics>>,
    ) -> Resolver {
        Resolver {
            config: config.clone(),
            dns: std::sync::OnceLock::new(),
            hosts: std::sync::OnceLock::new(),
            timeout,
            metrics,
        }
    }

    fn dns(&self) -> &Result<TokioResolver, String> {
        self.dns
            .get_or_init(|| build(&self.config, self.timeout).map_err(|e| e.to_string()))
    }
    /// All addresses for `host`, in the resolver's order, canonicalised.
    pub async fn resolve(&self, host: &Host, policy: &Policy) -> Result<Vec<IpAddr>, ResolveError> {
        if let Host::Ip(ip) = host {
            return Ok(vec![*ip]);
        }
        if let Some(pinned) = policy.pinned(host) {
            return Ok(pinned.to_vec());
        }
        let Host::Name(name) = host else {
            return Err(ResolveError::Empty);
        };
        if matches!(self.config, DnsConfig::System) {
            let hosts = self
                .hosts
                .get_or_init(|| hickory_resolver::Hosts::from_system().ok());
            let listed = hosts.as_ref().map(|h| from_hosts_file(h, name));
            if let Some(addrs) = listed.filter(|a| !a.is_empty()) {
                return Ok(addrs);
            }
        }
        let dns = self
            .dns()
            .as_ref()
            .map_err(|e| ResolveError::NoResolver(e.clone()))?;
        // A trailing dot makes the name absolute: no search-domain suffixes are tried.
        let fqdn = format!("{name}.");
        let started = std::time::Instant::now();
        let lookup = tokio::time::timeout(self.timeout, dns.lookup_ip(fqdn.as_str())).await;
        if let Some(metrics) = &self.metrics {
            metrics.dns_lookup(started.elapsed());
        }
        let lookup = lookup
            .map_err(|_| ResolveError::Timeout(self.timeout))?
            .map_err(|e| ResolveError::Lookup(e.to_string()))?;
        let mut addrs: Vec<IpAddr> = lookup.iter().map(canonical_ip).collect();
        addrs.dedup();
        if addrs.is_empty() {
            return Err(ResolveError::Empty);
        }
        Ok(addrs)
    }
}

/// Every address `hosts` gives `name` (IPv4 first, as the file's lines for it would be
/// read), canonicalised; none when it does not list the name.
fn from_hosts_file(hosts: &hickory_resolver::Hosts, name: &str) -> Vec<IpAddr> {
    use hickory_resolver::proto::op::Query;
    use hickory_resolver::proto::rr::{Name, RecordType};
    let Ok(name) = Name::from_ascii(name.to_ascii_lowercase()) else {
        return Vec::new();
    };
    let mut addrs: Vec<IpAddr> = [RecordType::A, RecordType::AAAA]
        .into_iter()
        .filter_map(|kind| hosts.lookup_static_host(&Query::query(name.clone(), kind)))
        .flat_map(|found| {
            hickory_resolver::lookup_ip::LookupIp::from(found)
                .iter()
                .collect::<Vec<_>>()
        })
        .map(canonical_ip)
        .collect();
    addrs.dedup();
    addrs
}

/// Builds the DNS client for `config`.
// The one resolver netbox has (clippy.toml disallows building another anywhere else).
#[allow(clippy::disallowed_methods)]
fn build(
    config: &DnsConfig,
    timeout: Duration,
) -> Result<TokioResolver, hickory_resolver::net::NetError> {
    match config {
        DnsConfig::System => TokioResolver::builder_tokio().and_then(|mut b| {
            b.options_mut().timeout = timeout;
            b.build()
        }),
        DnsConfig::Servers(servers) => {
            let servers = servers
                .iter()
                .map(|addr| {
                    let mut udp = ConnectionConfig::udp();
                    udp.port = addr.port();
                    let mut tcp = ConnectionConfig::tcp();
                    tcp.port = addr.port();
                    NameServerConfig::new(addr.ip(), true, vec![udp, tcp])
                })
                .collect();
            let mut builder = TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(servers),
                TokioRuntimeProvider::default(),
            );
            let opts = builder.options_mut();
            opts.timeout = timeout;
            opts.attempts = 1;
            opts.use_hosts_file = hickory_resolver::config::ResolveHosts::Never;
            builder.build()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_hosts_file_lists_is_answered_from_it_alone() {
        let mut hosts = hickory_resolver::Hosts::default();
        hosts
            .read_hosts_conf(
                "# a comment\n10.77.0.1 Mirror.Test mirror-alias.test\n\
                 fd00::1 both.test\n10.77.0.2 both.test\n::ffff:10.1.2.3 mapped.test\n"
                    .as_bytes(),
            )
            .unwrap();
        let of = |name: &str| from_hosts_file(&hosts, name);
        assert_eq!(
            of("mirror.test"),
            vec!["10.77.0.1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            of("MIRROR-alias.test"),
            vec!["10.77.0.1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            of("both.test"),
            vec![
                "10.77.0.2".parse::<IpAddr>().unwrap(),
                "fd00::1".parse::<IpAddr>().unwrap()
            ]
        );
        // Classified as what it is: the mapped form is its IPv4 address.
        assert_eq!(
            of("mapped.test"),
            vec!["10.1.2.3".parse::<IpAddr>().unwrap()]
        );
        assert!(of("other.test").is_empty());
        assert!(of("bad name").is_empty());
    }
}
