//! Unix sockets named by a path, decided when CMD connects. A socket file is connectable
//! whatever mount it is on (a read-only one too), so a path CMD can name is a way to
//! whatever listens behind it on the host: an agent, a container daemon, a desktop bus.
//! netbox reads the address once, finds the file itself inside the sandbox's root
//! (openat2 with RESOLVE_IN_ROOT: symlinks followed as the sandbox sees them, never out
//! of it), and decides on the file it holds:
//!
//! - one bound in the sandbox's own network namespace (a test's server, a language
//!   server, a database CMD started) is the sandbox's: connected;
//! - one the user allowed (`--allow-socket`), named by its path, is found on the host,
//!   following no symlink: connected, and logged;
//! - anything else is refused with ECONNREFUSED, as if nothing listened there, and
//!   logged as a `direct_attempt` with protocol `unix`.
//!
//! The connect is then made by netbox on a copy of the caller's socket, to the very file
//! decided on (`/proc/self/fd/N`), and its result is the caller's: no second lookup by
//! the kernel that a swapped symlink or rewritten memory could send elsewhere.
//! "Bound in the sandbox's namespace" is asked of the kernel (unixdiag.rs): a path-bound
//! socket is listed by the namespace it was bound in, whatever mount its file is on.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::plan::sockets::AllowedSocket;
use crate::sys::unixdiag::{self, BoundFile};

/// What one path was found to be.
pub enum Decision {
    /// Connect to this file (held `O_PATH`).
    Connect { file: OwnedFd, whose: Whose },
    /// Answer with this errno; `host` when the path led to a socket that is not the
    /// sandbox's own (a record's matter), not when it led to nothing at all.
    Refuse { errno: i32, host: bool },
}

/// Whose socket a connect reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    Own,
    /// The index of the allowed socket.
    Allowed(usize),
}

/// What deciding needs.
pub struct UnixContext<'a> {
    /// The sandbox's root (pid 1's), when every process shares it; otherwise each
    /// caller's own is opened.
    pub root: Option<&'a OwnedFd>,
    /// A sock_diag socket in the sandbox's network namespace, if it answers for Unix
    /// sockets (checked at the start): without it nothing is taken for the sandbox's own.
    pub diag: Option<BorrowedFd<'a>>,
    pub allowed: &'a [AllowedSocket],
    /// When the run started: a socket file with an inode number wider than the kernel's
    /// list shows (32 bits) must also be newer than this to be taken for the sandbox's.
    pub started: std::time::SystemTime,
}

/// The path a Unix socket address names, up to its first NUL; `None` for any other
/// address: another family, an abstract name (which the network namespace confines), or
/// none (an unnamed address).
pub fn path_of(address: &[u8]) -> Option<&[u8]> {
    let family = i32::from(u16::from_ne_bytes(address.get(0..2)?.try_into().ok()?));
    if family != libc::AF_UNIX {
        return None;
    }
    let path = address.get(2..)?;
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    (end > 0).then_some(&path[..end])
}

/// The path as the sandbox names it: absolute, from the caller's working directory for a
/// relative one (read from /proc, which gives the sandbox's own view of it).
pub fn as_named(pid: u32, path: &[u8]) -> Option<PathBuf> {
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    if path.is_absolute() {
        return Some(path.to_owned());
    }
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    Some(cwd.join(path))
}

use std::os::unix::ffi::OsStrExt;

/// Decides a connect (or a datagram) of caller `pid` to the socket file `named`.
pub fn decide(pid: u32, named: &Path, context: &UnixContext) -> Decision {
    let refuse = |errno: i32| Decision::Refuse { errno, host: false };
    if let Some(plain) = crate::plan::sockets::lexically_plain(named) {
        if let Some(index) = context
            .allowed
            .iter()
            .position(|a| a.named == plain || a.target == plain)
        {
            // The host's file, found again now (a restarted agent's new socket), following
            // no symlink: the path was resolved when the run started.
            return match crate::sys::resolve::open_exact(&context.allowed[index].target) {
                Ok(file) if is_socket(&file) => Decision::Connect {
                    file,
                    whose: Whose::Allowed(index),
                },
                Ok(_) => refuse(libc::ECONNREFUSED),
                Err(e) => refuse(e.raw_os_error().unwrap_or(libc::ECONNREFUSED)),
            };
        }
    }
    let opened_root;
    let root = match context.root {
        Some(root) => root,
        None => match crate::supervise::writejudge::open_root(pid) {
            Some(root) => {
                opened_root = root;
                &opened_root
            }
            None => return refuse(libc::ECONNREFUSED),
        },
    };
    let relative = named.strip_prefix("/").unwrap_or(named);
    let file = match crate::sys::resolve::open_in_root(root.as_fd(), relative, false) {
        Ok(file) => file,
        // What the kernel's own lookup would have said (ENOENT, ENOTDIR, ELOOP, ...);
        // EXDEV is the magic links RESOLVE_IN_ROOT refuses: nothing there for the caller.
        Err(e) => {
            return refuse(match e.raw_os_error() {
                Some(libc::EXDEV) | None => libc::ECONNREFUSED,
                Some(errno) => errno,
            })
        }
    };
    if !is_socket(&file) {
        // Not a socket (a covered path's /dev/null among them): as the kernel answers.
        return refuse(libc::ECONNREFUSED);
    }
    if is_own(&file, context) {
        return Decision::Connect {
            file,
            whose: Whose::Own,
        };
    }
    Decision::Refuse {
        errno: libc::ECONNREFUSED,
        host: true,
    }
}

fn is_socket(file: &OwnedFd) -> bool {
    nix::sys::stat::fstat(file).is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFSOCK)
}

/// Whether `file` is bound by a socket of the sandbox's network namespace.
fn is_own(file: &OwnedFd, context: &UnixContext) -> bool {
    let Some(diag) = context.diag else {
        return false;
    };
    let Ok(stat) = nix::sys::stat::fstat(file) else {
        return false;
    };
    let bound = BoundFile::of_stat(stat.st_dev, stat.st_ino);
    let listed = unixdiag::bound_files(diag).is_ok_and(|all| all.contains(&bound));
    if !listed {
        return false;
    }
    if stat.st_ino <= u64::from(u32::MAX) {
        return true;
    }
    // The list's inode number is cut to 32 bits: another file on the same filesystem can
    // share those with a socket of the sandbox's. Made during the run, it can only be the
    // sandbox's if nothing else bound one there since; without a birth time, refused.
    let birth = file
        .try_clone()
        .ok()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata().ok())
        .and_then(|m| m.created().ok());
    birth.is_some_and(|b| b >= context.started)
}

/// Whether a sock_diag socket answers for Unix sockets: the kernel's unix_diag may be
/// missing (a module not loaded), and then nothing would be found.
pub fn diag_answers(diag: BorrowedFd<'_>) -> bool {
    unixdiag::bound_files(diag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_named_unix_address_has_a_path() {
        let unix = |bytes: &[u8]| {
            let mut out = u16::try_from(libc::AF_UNIX).unwrap().to_ne_bytes().to_vec();
            out.extend_from_slice(bytes);
            out
        };
        assert_eq!(
            path_of(&unix(b"/run/a.sock\0junk")),
            Some(&b"/run/a.sock"[..])
        );
        assert_eq!(path_of(&unix(b"rel.sock")), Some(&b"rel.sock"[..]));
        assert_eq!(path_of(&unix(b"\0abstract")), None);
        assert_eq!(path_of(&unix(b"")), None);
        let mut inet = u16::try_from(libc::AF_INET).unwrap().to_ne_bytes().to_vec();
        inet.extend_from_slice(b"/x");
        assert_eq!(path_of(&inet), None);
    }
}
