//! What netbox lays in the sandbox's own `/run` (a read-only tmpfs over the host's, whose
//! service sockets stay out of reach), and binds from there:
//! - when the run inspects, the trust bundle: the session CA (sent by netbox once it
//!   exists: run.rs), `--upstream-ca`'s certificates and the system's roots, bound
//!   read-only over each distribution trust store that exists, so CMD's TLS clients trust
//!   the bridge's certificates without a flag, whether they read a store file or one of
//!   the variables env.rs points at the bundle;
//! - when CMD may run apt, an apt configuration that keeps apt as the user it runs as
//!   (plan/apt_conf.rs), which `APT_CONFIG` names;
//! - when the run captures, a resolver configuration naming the sandbox's DNS stub, bound
//!   over what `/etc/resolv.conf` leads to (or laid where it leads, when that is in the
//!   host's `/run`, as systemd-resolved's link does).
//!
//! Everything is found from the new root (never by a host path), following a store's
//! symlinks only inside that root. The root is the host's, read-only: a store is what the
//! host has, and nothing CMD wrote.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::mount_error::MountError;
use crate::plan::inspection::{TRUST_BUNDLE, TRUST_STORES};
use crate::sys::mount_api::{attach_tree_onto, clone_tree_of, new_tmpfs, set_attributes_of, Depth};
use crate::sys::resolve::{self, FileId};

/// Largest trust store read (Debian's is ~220 KB).
const MAX_STORE_BYTES: u64 = 16 << 20;

/// Where the resolver configuration is laid, inside `/run`.
const RESOLV_CONF: &str = "netbox/resolv.conf";

/// What `/run` holds.
pub struct RunFiles<'a> {
    /// The session CA's certificate and `--upstream-ca`'s (PEM), when the run inspects.
    pub trust: Option<(&'a str, &'a str)>,
    /// The DNS stub's address, when the run captures.
    pub resolver: Option<std::net::Ipv4Addr>,
    /// apt's configuration, when CMD may run apt (plan/apt_conf.rs).
    pub apt_conf: Option<&'a str>,
}

/// Where `/etc/resolv.conf` leads in the new root.
enum ResolvConf {
    /// A file outside `/run`: covered with a bind.
    File(OwnedFd),
    /// A path inside the host's `/run` (relative to it): laid in the new `/run`.
    InRun(PathBuf),
}

fn failed(step: &str) -> impl FnOnce(std::io::Error) -> MountError + '_ {
    move |source| MountError {
        step: step.to_owned(),
        source,
    }
}

/// Lays `/run` (empty but for `files`) in the new root `root`, and binds from it.
pub fn lay(root: BorrowedFd<'_>, files: &RunFiles<'_>) -> Result<(), MountError> {
    // Before the new /run covers the host's: where resolv.conf leads may be in it.
    let resolv = match files.resolver {
        Some(_) => Some(resolv_conf(root)?),
        None => None,
    };
    let tmpfs = new_tmpfs(
        "0755",
        libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC,
    )
    .map_err(failed("lay /run: make a tmpfs"))?;
    let run = Path::new("/run");
    let bundle_path = Path::new(TRUST_BUNDLE);
    if let Some((ca_pem, extra_pem)) = files.trust {
        // Headed by netbox with what it is (the session CA, or a shared bridge's).
        let mut bundle = ca_pem.to_owned();
        if !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(extra_pem);
        bundle.push_str(&system_roots(root));
        let inside = bundle_path.strip_prefix(run).unwrap_or(bundle_path);
        write_file(tmpfs.as_fd(), inside, bundle.as_bytes())?;
    }
    if let Some(conf) = files.apt_conf {
        let inside = Path::new(crate::plan::apt_conf::APT_CONF)
            .strip_prefix(run)
            .unwrap_or(Path::new("netbox/apt.conf"));
        write_file(tmpfs.as_fd(), inside, conf.as_bytes())?;
    }
    if let Some(stub) = files.resolver {
        let text =
            format!("# netbox: the sandbox's DNS stub (allowed names only)\nnameserver {stub}\n");
        write_file(tmpfs.as_fd(), Path::new(RESOLV_CONF), text.as_bytes())?;
        if let Some(ResolvConf::InRun(inside)) = &resolv {
            write_file(tmpfs.as_fd(), inside, text.as_bytes())?;
        }
    }
    set_attributes_of(tmpfs.as_fd(), Depth::Recursive, libc::MOUNT_ATTR_RDONLY, 0)
        .map_err(failed("lay /run: make it read-only"))?;
    let run_dir = resolve::open_beneath(root, Path::new("run")).map_err(failed(
        "lay /run: find it (a root without /run cannot hold what netbox lays)",
    ))?;
    if !resolve::is_dir(&run_dir).unwrap_or(false) {
        return Err(failed("lay /run: it is not a directory")(
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    attach_tree_onto(tmpfs.as_fd(), run_dir.as_fd()).map_err(failed("lay /run"))?;

    if files.trust.is_some() {
        cover_stores(root, bundle_path)?;
    }
    if let Some(ResolvConf::File(target)) = &resolv {
        let ours = Path::new("run").join(RESOLV_CONF);
        let conf = resolve::open_beneath(root, &ours).map_err(failed("resolv.conf: find it"))?;
        bind_read_only(
            conf.as_fd(),
            target.as_fd(),
            "resolv.conf: cover /etc/resolv.conf",
        )?;
    }
    Ok(())
}

/// Writes `bytes` to `path` inside the tmpfs `dir`, making its directories.
fn write_file(dir: BorrowedFd<'_>, path: &Path, bytes: &[u8]) -> Result<(), MountError> {
    let mut made = PathBuf::new();
    if let Some(parent) = path.parent() {
        for part in parent.components() {
            made.push(part);
            match nix::sys::stat::mkdirat(dir, &made, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => return Err(failed("lay /run: make a directory")(e.into())),
            }
        }
    }
    let file = nix::fcntl::openat(
        dir,
        path,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|e| failed("lay /run: create a file")(e.into()))?;
    std::fs::File::from(file)
        .write_all(bytes)
        .map_err(failed("lay /run: write a file"))
}

/// Binds the file `source` holds, read-only, over the file `target` holds.
fn bind_read_only(
    source: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    step: &str,
) -> Result<(), MountError> {
    let tree = clone_tree_of(source, Depth::One).map_err(failed(step))?;
    set_attributes_of(
        tree.as_fd(),
        Depth::One,
        libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOEXEC,
        0,
    )
    .map_err(failed(step))?;
    attach_tree_onto(tree.as_fd(), target).map_err(failed(step))
}

/// Covers each distribution trust store that exists with the bundle.
fn cover_stores(root: BorrowedFd<'_>, bundle_path: &Path) -> Result<(), MountError> {
    // The bundle, found again where it now is, is what each store is covered with.
    let bundle_file =
        resolve::open_beneath(root, bundle_path.strip_prefix("/").unwrap_or(bundle_path))
            .map_err(failed("trust bundle: find it"))?;
    let mut covered = vec![FileId::of(&bundle_file).map_err(failed("trust bundle: stat it"))?];
    for store in TRUST_STORES {
        let Some(target) = regular_file(root, store, false) else {
            continue;
        };
        let id = FileId::of(&target).map_err(failed("trust bundle: stat a store"))?;
        // A store that is a symlink to one already covered leads to the bundle itself.
        if covered.contains(&id) {
            continue;
        }
        let step = format!("trust bundle: cover {store}");
        bind_read_only(bundle_file.as_fd(), target.as_fd(), &step)?;
        covered.push(id);
    }
    Ok(())
}

/// Where `/etc/resolv.conf` leads: as the kernel resolves it inside the root (through any
/// links, `/var/run` among them), a file in `/run` is to be laid in the new `/run`, which
/// will not have it; a file elsewhere is covered. A link whose target does not exist is
/// followed by its text, one link deep.
fn resolv_conf(root: BorrowedFd<'_>) -> Result<ResolvConf, MountError> {
    use std::os::fd::AsRawFd;
    let name = Path::new("etc/resolv.conf");
    if let Ok(found) = resolve::open_in_root(root, name, false) {
        let path_of = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}"));
        if let (Ok(at), Ok(root_path)) = (path_of(found.as_raw_fd()), path_of(root.as_raw_fd())) {
            if let Ok(in_root) = at.strip_prefix(&root_path) {
                if let Ok(inside) = in_root.strip_prefix("run") {
                    if !inside.as_os_str().is_empty() {
                        return Ok(ResolvConf::InRun(inside.to_owned()));
                    }
                }
            }
        }
        let stat =
            nix::sys::stat::fstat(&found).map_err(|e| failed("resolv.conf: stat")(e.into()))?;
        if stat.st_mode & libc::S_IFMT == libc::S_IFREG {
            return Ok(ResolvConf::File(found));
        }
    }
    if let Ok(link) = nix::fcntl::readlinkat(root, name) {
        let absolute = Path::new("/etc").join(link);
        let mut lexical = PathBuf::from("/");
        for part in absolute.components() {
            match part {
                Component::ParentDir => {
                    lexical.pop();
                }
                Component::Normal(part) => lexical.push(part),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        if let Ok(inside) = lexical.strip_prefix("/run") {
            if !inside.as_os_str().is_empty() {
                return Ok(ResolvConf::InRun(inside.to_owned()));
            }
        }
    }
    regular_file(root, "/etc/resolv.conf", false)
        .map(ResolvConf::File)
        .ok_or_else(|| {
            failed("resolv.conf: capture points it at the DNS stub, and /etc/resolv.conf is not a file")(
                std::io::Error::from_raw_os_error(libc::ENOENT),
            )
        })
}

/// The system's roots: the first trust store that exists, as text (empty if none does:
/// the bundle then holds only what this run adds).
fn system_roots(root: BorrowedFd<'_>) -> String {
    for store in TRUST_STORES {
        let Some(file) = regular_file(root, store, true) else {
            continue;
        };
        let mut text = String::new();
        if std::fs::File::from(file)
            .take(MAX_STORE_BYTES)
            .read_to_string(&mut text)
            .is_ok()
        {
            return text;
        }
    }
    String::new()
}

/// `path` in the new root, if it leads to a regular file there.
fn regular_file(root: BorrowedFd<'_>, path: &str, read: bool) -> Option<OwnedFd> {
    let relative = Path::new(path).strip_prefix("/").ok()?;
    let fd = resolve::open_in_root(root, relative, read).ok()?;
    let stat = nix::sys::stat::fstat(&fd).ok()?;
    (stat.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(fd)
}
