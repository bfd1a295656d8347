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
    // One byte more than allowed tells a file past the limit from one at it: cut short,
    // a file could mean something else (a number missing its last digits).
    file.take(max_bytes.saturating_add(1))
        .read_to_string(&mut text)?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max_bytes} bytes"),
        ));
    }
    Ok(text)
}
