//! netbox before the clone: from the command line to a checked plan of the run. What is
//! writable and what stays read-only inside it (`config`, `protect`, `homesplit`,
//! `resolved`, `pins`), the policy and what package managers add to it (`policy`,
//! `tools`), limits and cgroups, CMD's environment, and the host sockets to hide.

pub mod capture;
pub mod cgroup;
pub mod config;
pub mod env;
pub mod homesplit;
pub mod hostsockets;
pub mod inspection;
pub mod pins;
pub mod policy;
pub mod protect;
pub mod resolved;
pub mod tenants;
pub mod tools;

use std::path::Path;

/// A file's text, at most `max_bytes` of it, if it is a regular file; anything else is an
/// error. A file in a workspace may be anything: a FIFO someone planted (opened without
/// blocking, where an ordinary open would wait forever), a device, a sparse file of
/// gigabytes.
pub fn read_small_file(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let mut text = String::new();
    file.take(max_bytes).read_to_string(&mut text)?;
    Ok(text)
}
