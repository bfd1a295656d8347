//! The subcommands: each file is one, from its arguments to its exit status. `run` is
//! the default (`netbox -- CMD`); the others read what runs left (`log`, `learn`,
//! `export`), prove the boundary (`verify`) or serve the proxy alone (`bridge`).

pub mod bridge_cmd;
pub mod bridge_reload;
pub mod export;
pub mod learn;
pub mod logview;
pub mod run;
pub mod verify;
