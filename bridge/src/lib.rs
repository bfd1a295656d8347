//! netbox's bridge: the egress-filtering proxy that is a sandboxed command's only way out.
//!
//! It decides every connection attempt against an allowlist policy, resolves names itself,
//! refuses non-public addresses unless a rule opens them, dials exactly the address it
//! checked, relays the bytes, and logs each attempt as one JSON line. It knows nothing about
//! namespaces: it serves listeners handed to it, each bound to a session and its policy.
//!
//! Layers, from the top down: a module uses its own layer and those below, never one above
//! (`architecture.rs` checks every `crate::` path in `cargo test`). Read them in this order:
//!
//! - [`serve`]: listeners (bound for a standalone bridge, or handed over), TLS on a shared
//!   bridge's listeners and its handshakes taken in turns, the accept loop that gives each
//!   connection its context, the admin listener
//! - `front`: turns a client into a request: HTTP (CONNECT and the forward path) and SOCKS5,
//!   told apart by the first byte; capture's connections made without a proxy, and the
//!   sandbox's DNS stub
//! - [`carry`]: what an opened tunnel carries: bytes ([`carry::tunnel`]), TLS checked to
//!   name its host (`tls_check`), or HTTP inspected request by request ([`carry::inspect`])
//! - [`conn`]: one connection's context (its session, the policy it is judged under, its
//!   place under the limits) and what every connection shares: plain data and handles
//! - [`egress`]: the one pipeline every request runs: policy → resolve → classify → dial, or
//!   through an upstream proxy; netbox's own fetches take it too
//! - [`session`]: who a connection serves: a session and its policy, a shared bridge's
//!   tenants and the lobby of clients that have named none yet, the DNS stub's addresses;
//!   and [`offer`], what a bridge tells its own client (placeholders, its CA)
//! - [`log`]: the JSON-lines event log, its record types, the stderr summary, the metrics
//! - [`policy`]: allowlist files and the pure allow/deny decision
//! - the bottom: [`target`] (the normalised destination), [`ipclass`] and [`local_routes`]
//!   (public or not; this machine's own), [`client_io`], [`outbound`], `counting`, [`tls`]
//!   (the ClientHello's name, the session CA), [`text`], [`small_file`], `memory`,
//!   [`terminal`]

#![forbid(unsafe_code)]

#[cfg(test)]
mod architecture;
pub mod carry;
mod client_io;
pub mod conn;
mod counting;
pub mod egress;
mod front;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod ipclass;
pub mod local_routes;
pub mod log;
mod memory;
pub mod offer;
pub mod outbound;
pub mod policy;
pub mod serve;
pub mod session;
pub mod small_file;
pub mod target;
pub mod terminal;
pub mod text;
pub mod tls;

pub use conn::BridgeConfig;
pub use egress::resolver::DnsConfig;
pub use front::http::HEALTH_PATH;
pub use log::{EventLog, NetCap, Stderr};
pub use policy::Policy;
pub use serve::error::BridgeError;
pub use serve::server::{serve, Listener, SessionListener};
pub use session::Session;
