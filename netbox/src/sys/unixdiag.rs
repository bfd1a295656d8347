//! Which filesystem Unix sockets were bound in one network namespace: NETLINK_SOCK_DIAG's
//! unix dump with the bound file's device and inode (`UDIAG_SHOW_VFS`, sock_diag(7)). A
//! path-bound socket is listed by the namespace it was bound in, and only there (the
//! same as `/proc/net/unix`), so a socket file found in the sandbox's namespace's list
//! is one the sandbox bound itself. Unix sockets are hashed per namespace (Linux 5.18+),
//! so the dump walks the sandbox's own sockets only. Hand-written like sockdiag.rs: one
//! fixed-layout request, and two fields read from each answer.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::sys::socket::{recv, send, MsgFlags};

/// linux/sock_diag.h, linux/netlink.h, linux/unix_diag.h.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HEADER: usize = 16;
const AF_UNIX: u8 = 1;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UNIX_DIAG_VFS: u16 = 1;
/// `struct unix_diag_msg`: family, type, state, pad, ino, cookie[2].
const MESSAGE_BODY: usize = 16;

/// A bound socket file as the kernel names it in the dump: the superblock's device number
/// in the kernel's own encoding (major << 20 | minor) and the inode number's low 32 bits
/// (the dump's fields are 32 bits wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundFile {
    pub dev: u32,
    pub ino: u32,
}

impl BoundFile {
    /// The dump's name for a file `stat` describes (`st_dev` as user space encodes it).
    pub fn of_stat(dev: u64, ino: u64) -> BoundFile {
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        BoundFile {
            dev: (major << 20) | (minor & 0xf_ffff),
            // Cut to 32 bits as the kernel cuts it; the caller knows the full number.
            ino: (ino & 0xffff_ffff) as u32,
        }
    }
}

/// Every socket file bound in the namespace `diag` answers for (made there: sockdiag.rs).
pub fn bound_files(diag: BorrowedFd<'_>) -> io::Result<Vec<BoundFile>> {
    static SEQUENCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let sequence = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // struct unix_diag_req: family, protocol, pad, states (all), ino (any), show, cookie.
    let mut body = [0u8; 24];
    body[0] = AF_UNIX;
    body[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    body[12..16].copy_from_slice(&UDIAG_SHOW_VFS.to_ne_bytes());
    body[16..24].copy_from_slice(&[0xff; 8]);
    let mut request = Vec::with_capacity(NLMSG_HEADER + body.len());
    let length = u32::try_from(NLMSG_HEADER + body.len()).unwrap_or(u32::MAX);
    request.extend_from_slice(&length.to_ne_bytes());
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request.extend_from_slice(&sequence.to_ne_bytes());
    request.extend_from_slice(&[0; 4]);
    request.extend_from_slice(&body);
    send(diag.as_raw_fd(), &request, MsgFlags::empty())?;
    let mut found = Vec::new();
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        let n = recv(diag.as_raw_fd(), &mut buffer, MsgFlags::empty())?;
        let mut rest = &buffer[..n];
        while rest.len() >= NLMSG_HEADER {
            let length = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if length < NLMSG_HEADER || length > rest.len() {
                return Err(io::Error::other("unix diag: a malformed answer"));
            }
            let kind = u16::from_ne_bytes([rest[4], rest[5]]);
            let seq = u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]);
            let message = &rest[NLMSG_HEADER..length];
            // Messages are 4-byte aligned.
            rest = &rest[(length + 3) & !3usize..];
            if seq != sequence {
                // An answer left over from a request whose wait was cut short.
                continue;
            }
            match kind {
                NLMSG_DONE => return Ok(found),
                NLMSG_ERROR => {
                    let code = message
                        .get(..4)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, i32::from_ne_bytes);
                    return Err(io::Error::from_raw_os_error(code.saturating_neg()));
                }
                SOCK_DIAG_BY_FAMILY => found.extend(vfs_attribute(message)),
                _ => {}
            }
            if rest.len() < NLMSG_HEADER {
                break;
            }
        }
    }
}

/// The `UNIX_DIAG_VFS` attribute of one socket's answer, if it is bound to a file.
fn vfs_attribute(message: &[u8]) -> Option<BoundFile> {
    let mut attributes = message.get(MESSAGE_BODY..)?;
    while attributes.len() >= 4 {
        let length = usize::from(u16::from_ne_bytes([attributes[0], attributes[1]]));
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]);
        if length < 4 || length > attributes.len() {
            return None;
        }
        if kind == UNIX_DIAG_VFS && length >= 12 {
            let word = |at: usize| {
                u32::from_ne_bytes([
                    attributes[at],
                    attributes[at + 1],
                    attributes[at + 2],
                    attributes[at + 3],
                ])
            };
            return Some(BoundFile {
                ino: word(4),
                dev: word(8),
            });
        }
        attributes = attributes.get((length + 3) & !3usize..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_socket_bound_here_is_listed_by_its_file_and_gone_once_closed() {
        let diag = crate::sys::sockdiag::open().unwrap();
        let dir = std::env::temp_dir().join(format!("netbox-unixdiag-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("own.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let file = BoundFile::of_stat(meta.dev(), meta.ino());
        assert!(bound_files(diag.as_fd()).unwrap().contains(&file));
        // A datagram socket bound to a file is listed too.
        let dgram_path = dir.join("own.dgram");
        let dgram = std::os::unix::net::UnixDatagram::bind(&dgram_path).unwrap();
        let meta = std::fs::metadata(&dgram_path).unwrap();
        let dgram_file = BoundFile::of_stat(meta.dev(), meta.ino());
        assert!(bound_files(diag.as_fd()).unwrap().contains(&dgram_file));
        drop((listener, dgram));
        let after = bound_files(diag.as_fd()).unwrap();
        assert!(!after.contains(&file) && !after.contains(&dgram_file));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
