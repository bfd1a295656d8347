//! Host filesystem Unix sockets, found so they can be hidden.
//!
//! A socket file on a read-only mount is still connectable (measured on kernel 6.18,
//! 2026-11-29; neither the network namespace nor Landlock ABI 7 stops it), and behind such
//! sockets sit agents, terminal multiplexers, display servers and container daemons: a
//! connection is a way out. A listening socket bound to a path shows up in
//! `/proc/net/unix` of the network namespace it was bound in (unix(7)), and only there,
//! though any namespace can connect to it: a container's, a `PrivateNetwork=` service's,
//! another sandbox's. So netbox reads `/proc/PID/net/unix` for one process of every
//! network namespace it can see (the file's inode number is the namespace's: measured,
//! kernel 6.18, readable for other users' processes too) and covers each socket the
//! sandbox could see with a read-only `/dev/null`. It costs ~5 µs a process (kernel 6.18,
//! measured: 0.3 ms for 67), so the sandbox's mounting thread runs it, alongside the
//! other thread's network namespace, before its own tmpfs hides the host's /tmp.
//! Sockets created after the scan are not covered (nor one whose directory is moved away
//! during the scan and back after it); `/run` and a private `/tmp` are hidden whole, which
//! is where most appear. A socket found is covered only if its path still leads to it,
//! with no symlink, when the cover goes on; otherwise the run stops.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use crate::sys::resolve::{open_exact, FileId};

/// The socket paths bound in every network namespace this user can see: netbox's own,
/// and one `/proc/PID/net/unix` for each other namespace a process is in.
fn every_namespaces_sockets() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut namespaces = std::collections::HashSet::new();
    let mut paths = Vec::new();
    let mut read = |file: &Path| {
        // Opened once, and the namespace told from the open file: by name, `/proc/self`
        // could lead to another namespace between a look and a read (pid 1 scans on one
        // thread while another unshares the network: the host's namespace was then marked
        // read with the new, empty one's list, and its sockets went uncovered).
        let Ok(mut opened) = std::fs::File::open(file) else {
            return;
        };
        let Ok(meta) = opened.metadata() else {
            return;
        };
        if namespaces.insert(meta.ino()) {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut opened, &mut text);
            paths.extend(parse_proc_net_unix(&text));
        }
    };
    read(Path::new("/proc/self/net/unix"));
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        if name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            read(&entry.path().join("net/unix"));
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

/// What the scan needs to know of the run: where relative socket paths may lie, and
/// which paths the sandbox will not show at all.
#[derive(Debug, Clone)]
pub struct SocketScan {
    pub write_roots: Vec<PathBuf>,
    /// A private /tmp hides the host's, but for the writable roots in it.
    pub private_tmp: bool,
    /// `--hide` paths: a socket under one is not there to cover.
    pub hide: Vec<PathBuf>,
    /// Covered directories (netbox's cache home): a socket under one but outside every
    /// writable root is not there either.
    pub covered: Vec<PathBuf>,
}

impl SocketScan {
    /// The host's socket files the sandbox would show, canonical, each with its identity
    /// (so the cover goes on that very socket, or the run stops: mounts.rs).
    pub fn run(&self) -> Vec<(PathBuf, FileId)> {
        let in_root = |p: &Path| self.write_roots.iter().any(|r| p.starts_with(r));
        let hidden = |p: &Path| {
            p.starts_with("/run")
                || (self.private_tmp && p.starts_with("/tmp") && !in_root(p))
                || self.hide.iter().any(|h| p.starts_with(h))
                || (self.covered.iter().any(|c| p.starts_with(c)) && !in_root(p))
        };
        visible_host_sockets(hidden, &self.write_roots)
    }
}

/// Parses `/proc/net/unix` text: the path column of every named socket, exactly as it was
/// bound (absolute or relative; it is the last column and may contain spaces).
pub fn parse_proc_net_unix(text: &str) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = text
        .lines()
        .skip(1)
        .filter_map(path_column)
        .filter(|p| !p.starts_with('@'))
        .map(PathBuf::from)
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// Everything after the seventh whitespace-separated field.
fn path_column(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for _ in 0..7 {
        let end = rest.find(char::is_whitespace)?;
        rest = rest[end..].trim_start();
    }
    (!rest.is_empty()).then_some(rest)
}

/// The host's socket files that the sandbox could see, canonical.
///
/// A relative path is tried against each writable root (the likely place a process bound
/// it from); `hidden` says which paths the sandbox will not see at all.
pub fn visible_host_sockets(
    hidden: impl Fn(&Path) -> bool,
    roots: &[PathBuf],
) -> Vec<(PathBuf, FileId)> {
    let mut found: Vec<PathBuf> = every_namespaces_sockets()
        .into_iter()
        .flat_map(|p| {
            if p.is_absolute() {
                vec![p]
            } else {
                roots.iter().map(|r| r.join(&p)).collect()
            }
        })
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        // The sandbox sees the same tree through its binds: cover the real path.
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .filter(|p| !hidden(p))
        .collect();
    found.sort();
    found.dedup();
    found
        .into_iter()
        .filter_map(|p| {
            let id = open_exact(&p).and_then(FileId::of).ok()?;
            Some((p, id))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_skips_abstract_and_unnamed() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000001: 00000002 00000000 00010000 0001 01 1234 /run/agent.sock\n\
            0000000002: 00000002 00000000 00010000 0001 01 1235 @abstract\n\
            0000000003: 00000003 00000000 00000000 0001 03 1236\n\
            0000000004: 00000002 00000000 00010000 0001 01 1237 /var/tmp/x.sock\n\
            0000000005: 00000002 00000000 00010000 0001 01 1238 /run/agent.sock\n";
        assert_eq!(
            parse_proc_net_unix(text),
            vec![
                PathBuf::from("/run/agent.sock"),
                PathBuf::from("/var/tmp/x.sock")
            ]
        );
    }
}
