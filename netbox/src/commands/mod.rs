//! The subcommands: each file (or folder) is one, from its arguments to its exit status. `run` is
//! the default (`netbox -- CMD`); the others read what runs left (`log`, `learn`,
//! `export`), prove the boundary (`verify`) or serve the proxy alone (`bridge`).

pub mod bridge;
pub mod export;
pub mod learn;
pub mod log;
pub mod run;
pub mod verify;
