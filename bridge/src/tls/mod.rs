//! TLS material and parsing the bridge needs below the connections that use it: the
//! ClientHello's server name (`client_hello`), the session CA (`session_ca`), and what a
//! session that inspects holds (`inspector`).

pub mod client_hello;
pub mod inspector;
pub mod session_ca;
