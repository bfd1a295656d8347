//! Going out: the one pipeline every request runs, whatever protocol named it (policy →
//! resolve → classify each address → dial an admitted address, or through an upstream
//! proxy), with its parts: the resolver, the dialer, the upstream proxy, and netbox's own
//! fetches, which take the same steps. It takes what it needs of a connection as an
//! [`Egress`], so it knows nothing of the connections above it.

pub(crate) mod dialer;
pub mod fetch;
mod pipeline;
pub mod resolver;
pub mod upstream_proxy;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::policy::{Policy, Reason};
use crate::session::addresses::SessionAddresses;
use resolver::Resolver;
use upstream_proxy::UpstreamProxy;

pub(crate) use pipeline::{admit, decide, MAX_DIAL_ADDRESSES};
pub use pipeline::{open, open_for_requests, ViaProxy};

/// What the pipeline needs of the connection it dials for: the policy it is judged under,
/// the resolver, its session's DNS-stub addresses (never dialled), the bridge's own
/// listeners (never dialled), the connect deadline, and the upstream proxy, if any.
pub struct Egress<'a> {
    pub policy: &'a Policy,
    pub resolver: &'a Resolver,
    pub addresses: &'a SessionAddresses,
    pub own_listeners: &'a [SocketAddr],
    pub connect_timeout: Duration,
    pub upstream_proxy: Option<&'a Arc<UpstreamProxy>>,
    /// A test hook: a request for this host panics (`BridgeConfig::panic_on_host`).
    pub panic_on_host: Option<&'a str>,
}

/// Why a request was refused, with prose for the client and the log.
#[derive(Debug)]
pub struct Refusal {
    pub reason: Reason,
    pub detail: String,
    /// For dial failures: what the kernel said (SOCKS5 reply codes depend on it).
    pub io_kind: Option<io::ErrorKind>,
}

impl Refusal {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            // It goes into the response too: a client's 60 KB Host header is not echoed.
            detail: crate::text::bounded(detail.into(), crate::text::MAX_DETAIL_BYTES),
            io_kind: None,
        }
    }
}
