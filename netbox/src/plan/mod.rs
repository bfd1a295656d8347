//! netbox before the clone: from the command line to a checked plan of the run. What is
//! writable and what stays read-only inside it (`config`, `protect`, `homesplit`,
//! `resolved`, `pins`), the policy and what package managers add to it (`policy`,
//! `tools`), limits and cgroups, CMD's environment, the host sockets to hide, and what
//! `--hide` covers for what netbox copies into the sandbox (`hidden`).

pub mod apt_conf;
pub mod bridge_secrets;
pub mod capture;
pub mod cgroup;
pub mod config;
pub mod env;
pub mod hidden;
pub mod homesplit;
pub mod inspection;
pub mod mount_names;
pub mod pins;
pub mod policy;
pub mod protect;
pub mod resolved;
pub mod sockets;
pub mod ssh_agent;
pub mod tenants;
pub mod tools;
pub mod upstream;
pub mod user_config;

/// A file's text, at most `max_bytes` of it, if it is a regular file (the bridge's reader,
/// which a reloaded allowlist goes through too).
pub use bridge::small_file::read_small_file;

/// An XDG base directory: `$VAR` if it is an absolute path, else `$HOME/under_home` if
/// HOME is one (a relative value is ignored, as the XDG spec says).
pub fn xdg_dir(var: &str, under_home: &str) -> Option<std::path::PathBuf> {
    let absolute =
        |v: std::ffi::OsString| Some(std::path::PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os(var).and_then(absolute).or_else(|| {
        std::env::var_os("HOME")
            .and_then(absolute)
            .map(|home| home.join(under_home))
    })
}
