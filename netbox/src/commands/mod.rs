//! The subcommands: each file (or folder) is one, from its arguments to its exit status. `run` is
//! the default (`netbox -- CMD`); the others read what runs left (`log`, `learn`,
//! `export`), prove the boundary (`verify`), serve the proxy alone (`bridge`) or print
//! netbox's own documents (`docs`, `completions`, `man`).

pub mod bridge;
pub mod completions;
pub mod docs;
pub mod export;
pub mod learn;
pub mod log;
pub mod run;
pub mod verify;
