//! netbox's bridge: the egress-filtering proxy that is a sandboxed command's only way out.
//!
//! It decides every connection attempt against an allowlist policy, resolves names itself,
//! refuses non-public addresses unless a rule opens them, dials exactly the address it
//! checked, relays the bytes, and logs each attempt as one JSON line. It knows nothing about
//! namespaces: it serves listeners handed to it, each bound to a session and its policy.
//!
//! Modules, in data-flow order:
//! - [`listen`]: parse `127.0.0.1:PORT` / `[::1]:PORT` / `unix:PATH` and bind (standalone use);
//!   [`listener_tls`]: TLS on a shared bridge's listeners, and a client certificate's names
//! - [`server`]: accept loops, one per listener, each tied to a [`server::Session`];
//!   [`lobby`]: the seats of a shared bridge's clients until they name their tenant, and
//!   whom to drop, by source; [`turns`]: a TLS handshake's costly part, taken in turns
//!   source by source
//! - [`identity`]: on a shared bridge, the tenant a client's credentials name
//! - `front`: tells HTTP from SOCKS5 by the first byte; `front::http`, `front::socks5`
//! - [`target`]: the normalised destination every front end produces
//! - [`policy`]: allowlist files and the pure allow/deny decision
//! - [`resolver`]: pinned hosts, then DNS, with a deadline
//! - [`ipclass`]: public or not, for every resolved address
//! - `upstream`: the pipeline policy → resolve → classify → dial; `dialer` dials, or
//!   [`upstream_proxy`] goes out through another proxy; [`fetch`]: a document netbox reads
//!   itself (a registry's, at start-up), through the same steps
//! - `http_relay`: one HTTP request sent on and its response back, logged when it ends
//!   (the forward path's and an inspected tunnel's)
//! - `carry`: what an opened tunnel carries: bytes, TLS checked for its host
//!   (`tls_check`), or HTTP inspected request by request ([`inspect`])
//! - `tunnel`: the byte relay with half-close and idle timeout
//! - [`log`]: the JSON-lines event log and the stderr summary
//! - [`capture`]: connections made without the proxy, and the sandbox's DNS stub

#![forbid(unsafe_code)]

pub mod admin;
pub mod capture;
mod carry;
pub mod client_hello;
mod client_io;
pub mod conn;
mod counted;
mod dialer;
mod error;
pub mod fetch;
mod front;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod http_relay;
pub mod identity;
pub mod inspect;
pub mod ipclass;
pub mod listen;
pub mod listener_tls;
pub mod lobby;
pub mod local;
pub mod log;
mod memory;
pub mod metrics;
pub mod outbound;
pub mod policy;
pub mod records;
pub mod resolver;
pub mod server;
pub mod small_file;
pub mod target;
pub mod terminal;
mod tls_check;
pub mod tunnel;
pub mod turns;
mod upstream;
pub mod upstream_proxy;

pub use error::BridgeError;
pub use front::http::HEALTH_PATH;
pub use log::{EventLog, NetCap, Stderr};
pub use policy::Policy;
pub use resolver::DnsConfig;
pub use server::{serve, BridgeConfig, Listener, Session, SessionListener};
