//! End-to-end tests: the real `netbox` binary, real clients (curl, raw sockets) and real
//! servers on loopback. One test binary, one module per area (see support/ for helpers).

mod support;

mod bridge_dns;
mod bridge_malformed;
mod bridge_policy;
mod bridge_socks;
mod bridge_tunnel;
