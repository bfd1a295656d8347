//! End-to-end tests: the real `netbox` binary, real clients (curl, git, bash, raw sockets)
//! and real servers on loopback. One test binary, one module per area (see support/ for
//! helpers). The sandbox tests need netbox built with `--features test-hooks` (tests/run.sh
//! does that) for the deliberately broken controls.

// Test code: the addresses its clients and servers use are loopback literals or names the
// test itself pins, so std's and tokio's socket calls (clippy.toml) are allowed throughout.
#![allow(clippy::disallowed_methods)]

mod support;

mod bridge_admin;
mod bridge_dns;
mod bridge_fleet;
mod bridge_flood;
mod bridge_forward;
mod bridge_limits;
mod bridge_malformed;
mod bridge_mtls;
mod bridge_policy;
mod bridge_reload;
mod bridge_remote;
mod bridge_socks;
mod bridge_tenants;
mod bridge_tls;
mod bridge_tunnel;
mod bypass_battery;
mod capture;
mod cited_tests;
mod containers;
mod direct_attempts;
mod escape_battery;
mod export;
mod faults;
mod git_code_paths;
mod inspect;
mod learn;
mod log_bounds;
mod readme;
mod sandbox_binds;
mod sandbox_byte_names;
mod sandbox_escapes;
mod sandbox_fetch;
mod sandbox_git;
mod sandbox_git_changes;
mod sandbox_git_data;
mod sandbox_home;
mod sandbox_lifecycle;
mod sandbox_limits;
mod sandbox_other_names;
mod sandbox_pid1;
mod sandbox_pins;
mod sandbox_regressions;
mod sandbox_sends;
mod sandbox_sockets;
mod sandbox_swaps;
mod sandbox_tty;
mod sandbox_tty_reset;
mod sandbox_walkthrough;
mod sandbox_writelog;
mod secrets;
mod session_log;
mod shell_docs;
mod tools;
mod tools_fetch;
mod tools_seed;
