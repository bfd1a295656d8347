//! The sandbox's trust bundle, when the run inspects: the session CA (sent by netbox once
//! it exists: run.rs), `--upstream-ca`'s certificates and the system's roots, in one file
//! on a read-only tmpfs over `/run`, bound read-only over each distribution trust store
//! that exists. CMD's TLS clients then trust the bridge's certificates without a flag,
//! whether they read a store file or one of the variables env.rs points at the bundle.
//!
//! Everything is found from the new root (never by a host path), following a store's
//! symlinks only inside that root. The root is the host's, read-only: a store is what the
//! host has, and nothing CMD wrote.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::plan::inspection::{TRUST_BUNDLE, TRUST_STORES};
use crate::sandbox::mounts::MountError;
use crate::sys::mount_api::{attach_tree_onto, clone_tree_of, new_tmpfs, set_attributes_of, Depth};
use crate::sys::resolve::{self, FileId};

/// Largest trust store read (Debian's is ~220 KB).
const MAX_STORE_BYTES: u64 = 16 << 20;

/// Lays the bundle over `/run` and the stores, in the new root `root`.
pub fn lay(root: BorrowedFd<'_>, ca_pem: &str, extra_pem: &str) -> Result<(), MountError> {
    let failed = |step: &str| {
        let step = step.to_owned();
        move |source: std::io::Error| MountError { step, source }
    };
    let mut bundle = format!("# netbox session CA (this run only)\n{ca_pem}");
    if !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(extra_pem);
    bundle.push_str(&system_roots(root));

    let bundle_path = Path::new(TRUST_BUNDLE);
    let run = bundle_path
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/run"));
    let tmpfs = new_tmpfs(
        "0755",
        libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC,
    )
    .map_err(failed("trust bundle: make a tmpfs"))?;
    let inside = bundle_path.strip_prefix(run).unwrap_or(bundle_path);
    if let Some(dir) = inside.parent().filter(|d| !d.as_os_str().is_empty()) {
        nix::sys::stat::mkdirat(tmpfs.as_fd(), dir, Mode::from_bits_truncate(0o755))
            .map_err(|e| failed("trust bundle: make its directory")(e.into()))?;
    }
    let file = nix::fcntl::openat(
        tmpfs.as_fd(),
        inside,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|e| failed("trust bundle: create it")(e.into()))?;
    std::fs::File::from(file)
        .write_all(bundle.as_bytes())
        .map_err(failed("trust bundle: write it"))?;
    set_attributes_of(tmpfs.as_fd(), Depth::Recursive, libc::MOUNT_ATTR_RDONLY, 0)
        .map_err(failed("trust bundle: make it read-only"))?;
    let run_relative = run.strip_prefix("/").unwrap_or(run);
    let run_dir = resolve::open_beneath(root, run_relative).map_err(failed(
        "trust bundle: find /run (the bundle is laid there; a root without it cannot inspect)",
    ))?;
    if !resolve::is_dir(&run_dir).unwrap_or(false) {
        return Err(failed("trust bundle: /run is not a directory")(
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    attach_tree_onto(tmpfs.as_fd(), run_dir.as_fd()).map_err(failed("trust bundle: lay /run"))?;

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
        let tree = clone_tree_of(bundle_file.as_fd(), Depth::One).map_err(failed(&step))?;
        set_attributes_of(
            tree.as_fd(),
            Depth::One,
            libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOEXEC,
            0,
        )
        .map_err(failed(&step))?;
        attach_tree_onto(tree.as_fd(), target.as_fd()).map_err(failed(&step))?;
        covered.push(id);
    }
    Ok(())
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
