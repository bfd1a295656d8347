//! Serving: the listeners (bound here for a standalone bridge, or handed over by netbox),
//! TLS on a shared bridge's listeners and its handshakes taken in turns, the accept loop
//! that gives each connection its context and hands it to a front end, the admin listener,
//! and the crate's error type.

pub mod admin;
pub mod error;
pub mod listen;
pub mod listener_tls;
pub mod server;
pub mod turns;
