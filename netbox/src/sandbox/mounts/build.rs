//! The plan carried out, in pid 1 with its capabilities still held: each source opened
//! and checked to be what netbox planned (its identity), the tree built in the staging
//! root, /proc and /dev made, and the pivot.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::{MountOp, MountPlan, DEVICES, NEW_ROOT, PROC_READ_ONLY, STAGING};
use crate::sandbox::mount_error::MountError;
use crate::sys::mount_api::{
    attach_tree, attach_tree_onto, clone_tree, clone_tree_of, new_tmpfs, set_attributes,
    set_attributes_of, Depth,
};
use crate::sys::resolve::{self, FileId};

pub(super) type Result<T> = std::result::Result<T, MountError>;

pub(super) fn step<T, E: Into<std::io::Error>>(
    what: impl FnOnce() -> String,
    result: std::result::Result<T, E>,
) -> Result<T> {
    result.map_err(|e| MountError {
        step: what(),
        source: e.into(),
    })
}

pub(super) fn in_root(path: &Path) -> PathBuf {
    Path::new(NEW_ROOT).join(path.strip_prefix("/").unwrap_or(path))
}

/// Builds the sandbox filesystem and pivots into it. Runs in the sandbox's init process,
/// inside its new user, mount and pid namespaces, with capabilities still held.
/// `session_ca` waits for the session CA's certificate (PEM) from netbox, when the plan
/// lays a trust bundle.
// Whole: the mounts in the order they must happen (sources before the staging tmpfs hides
// them, the tree, /proc, /dev, the pivot), on shared state.
pub fn apply(
    plan: &MountPlan,
    session_ca: impl FnOnce() -> std::result::Result<String, String>,
) -> Result<()> {
    let hooks = crate::testhooks::hooks();
    crate::testhooks::pause(hooks.mount_pause);
    let check = !hooks.skip_identity_checks;
    let none: Option<&str> = None;
    step(
        || "make / private".into(),
        mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none),
    )?;

    // Capture sources before the staging tmpfs hides /tmp: each the very directory netbox
    // resolved, reached without a symlink.
    let root_tree = step(
        || "clone /".into(),
        clone_tree(Path::new("/"), Depth::Recursive),
    )?;
    let sources: Vec<OwnedFd> = plan
        .sources
        .iter()
        .map(|s| {
            let found = step(
                || format!("find {}", s.display()),
                resolve::open_exact(s).map_err(|e| changed(s, &e)),
            )?;
            if check {
                expect_identity(plan, s, &found)?;
            }
            step(
                || format!("clone {}", s.display()),
                clone_tree_of(found.as_fd(), Depth::Recursive),
            )
        })
        .collect::<Result<_>>()?;

    step(
        || "mount staging tmpfs".into(),
        mount(
            Some("tmpfs"),
            STAGING,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0700"),
        ),
    )?;
    step(
        || "create staging root".into(),
        std::fs::create_dir(NEW_ROOT),
    )?;
    step(
        || "attach root".into(),
        attach_tree(root_tree.as_fd(), Path::new(NEW_ROOT)),
    )?;
    if !hooks.skip_read_only_root {
        // One call makes every mount under the new root read-only, stacked ones included.
        step(
            || "make / read-only".into(),
            set_attributes(
                Path::new(NEW_ROOT),
                Depth::Recursive,
                libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID,
                0,
            ),
        )?;
    }
    // Everything below is found from here (the root tree just attached), never by a host
    // path.
    let new_root = step(
        || "open the new root".into(),
        resolve::open_exact(Path::new(NEW_ROOT)),
    )?;
    let steps = Steps {
        root: new_root.as_fd(),
        sources: &sources,
        plan,
        fresh: plan
            .ops
            .iter()
            .flat_map(|op| match op {
                MountOp::Mkdir { target } | MountOp::MakeFile { target } => {
                    vec![target.as_path()]
                }
                MountOp::Cover { keep, .. } => keep.iter().map(PathBuf::as_path).collect(),
                _ => Vec::new(),
            })
            .collect(),
        check,
    };
    for op in &plan.ops {
        steps.apply(op)?;
    }
    mount_proc(
        &steps,
        plan.forbid_nested_userns && !hooks.keep_nested_userns,
    )?;
    mount_dev()?;
    // Host service sockets live in /run (netbox decides each connect to one all the same:
    // supervise/unixsockets.rs); a host without one has nothing to hide. When the run
    // inspects, the tmpfs laid over it holds the trust bundle.
    if plan.trust.is_some() || plan.resolver.is_some() || plan.apt_conf.is_some() {
        let ca = match &plan.trust {
            Some(_) => Some(session_ca().map_err(|e| MountError {
                step: "trust bundle: receive the session CA".into(),
                source: std::io::Error::other(e),
            })?),
            None => None,
        };
        let files = crate::sandbox::run_dir::RunFiles {
            trust: ca.as_deref().zip(plan.trust.as_deref()),
            resolver: plan.resolver,
            apt_conf: plan.apt_conf.as_deref(),
        };
        crate::sandbox::run_dir::lay(steps.root, &files)?;
    } else if in_root(Path::new("/run")).is_dir() {
        steps.hide_dir(Path::new("/run"), None)?;
    }

    let root = Path::new(NEW_ROOT);
    step(|| "chdir to new root".into(), nix::unistd::chdir(root))?;
    step(|| "pivot_root".into(), nix::unistd::pivot_root(".", "."))?;
    // The old root is now stacked under the new one at "/"; detach it.
    step(
        || "detach old root".into(),
        umount2(".", MntFlags::MNT_DETACH),
    )?;
    step(|| "chdir /".into(), nix::unistd::chdir("/"))?;
    Ok(())
}

/// What the plan's steps need: the new root to find targets from, the captured sources,
/// the identities to check, and which targets the sandbox made itself.
pub(super) struct Steps<'a> {
    pub(super) root: BorrowedFd<'a>,
    pub(super) sources: &'a [OwnedFd],
    pub(super) plan: &'a MountPlan,
    pub(super) fresh: BTreeSet<&'a Path>,
    /// Whether identities are checked (always, but in a test build's deliberate breakage).
    pub(super) check: bool,
}

impl Steps<'_> {
    pub(super) fn apply(&self, op: &MountOp) -> Result<()> {
        match op {
            MountOp::Tmpfs { target } => {
                let at = self.find(target, None)?;
                let tmpfs = step(
                    || format!("tmpfs for {}", target.display()),
                    new_tmpfs("1777", libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV),
                )?;
                step(
                    || format!("tmpfs on {}", target.display()),
                    attach_tree_onto(tmpfs.as_fd(), at.as_fd()),
                )
            }
            // Inside the sandbox's own fresh tmpfs, which no other process can reach.
            MountOp::Mkdir { target } => step(
                || format!("create {}", target.display()),
                std::fs::create_dir_all(in_root(target)),
            ),
            MountOp::MakeFile { target } => {
                let path = in_root(target);
                if let Some(parent) = path.parent() {
                    step(
                        || format!("create {}", parent.display()),
                        std::fs::create_dir_all(parent),
                    )?;
                }
                step(
                    || format!("create {}", target.display()),
                    std::fs::File::create(&path).map(drop),
                )
            }
            MountOp::Writable { source, target } => {
                let tree = self.sources.get(*source).ok_or_else(|| MountError {
                    step: format!("bind {}", target.display()),
                    source: std::io::Error::other("no captured source"),
                })?;
                // The mountpoint is the source's own directory in the root tree, unless
                // the sandbox made it in its fresh /tmp.
                let expected = if self.fresh.contains(target.as_path()) {
                    None
                } else {
                    Some(self.expected(target)?)
                };
                let at = self.find(target, expected)?;
                step(
                    || format!("bind {} writable", target.display()),
                    attach_tree_onto(tree.as_fd(), at.as_fd()),
                )
            }
            MountOp::Anchor { target } => {
                let at = self.find(target, Some(self.expected(target)?))?;
                let tree = step(
                    || format!("anchor {}", target.display()),
                    clone_tree_of(at.as_fd(), Depth::Recursive),
                )?;
                step(
                    || format!("anchor {}", target.display()),
                    attach_tree_onto(tree.as_fd(), at.as_fd()),
                )
            }
            MountOp::ReadOnly { target } => self.read_only(target, Some(self.expected(target)?)),
            MountOp::Opened { target } => {
                let at = self.find(target, Some(self.expected(target)?))?;
                let tree = step(
                    || format!("bind {} over itself", target.display()),
                    clone_tree_of(at.as_fd(), Depth::Recursive),
                )?;
                // Recursively: the anchors below it were made read-only with the pin
                // above it; the pins below it are laid after it.
                step(
                    || format!("make {} writable", target.display()),
                    set_attributes_of(tree.as_fd(), Depth::Recursive, 0, libc::MOUNT_ATTR_RDONLY),
                )?;
                step(
                    || format!("bind {} over itself", target.display()),
                    attach_tree_onto(tree.as_fd(), at.as_fd()),
                )
            }
            MountOp::HideDir { target } => self.hide_dir(target, Some(self.expected(target)?)),
            MountOp::Cover { target, keep } => self.cover(target, keep),
            MountOp::HideFile { target } => {
                let at = self.find(target, Some(self.expected(target)?))?;
                self.cover_with_null(target, at.as_fd())
            }
            MountOp::Alias {
                source,
                target,
                writable,
            } => self.alias(source, target, *writable),
        }
    }

    /// Shows what the new root has at `source` (the very path netbox resolved, with every
    /// mount laid on and under it) at `target` too; read-only, recursively, unless
    /// `writable`, before it is attached, so it is never writable there for a moment.
    pub(super) fn alias(&self, source: &Path, target: &Path, writable: bool) -> Result<()> {
        let from = self.find(source, Some(self.expected(source)?))?;
        let tree = step(
            || format!("clone {} for {}", source.display(), target.display()),
            clone_tree_of(from.as_fd(), Depth::Recursive),
        )?;
        // Nothing set-uid runs from an alias. Device nodes stay: a hidden file under SRC is
        // covered by /dev/null, which must read as empty there too (a source holding the
        // host's devices, / or /dev, is refused before this: binds.rs).
        let read_only = if writable { 0 } else { libc::MOUNT_ATTR_RDONLY };
        step(
            || format!("set {}'s attributes", target.display()),
            set_attributes_of(
                tree.as_fd(),
                Depth::Recursive,
                read_only | libc::MOUNT_ATTR_NOSUID,
                0,
            ),
        )?;
        let expected = if self.fresh.contains(target) {
            None
        } else {
            Some(self.expected(target)?)
        };
        let at = self.find(target, expected)?;
        step(
            || format!("bind {} at {}", source.display(), target.display()),
            attach_tree_onto(tree.as_fd(), at.as_fd()),
        )
    }

    /// Binds `target` over itself, read-only, recursively. `expected`: the identity netbox
    /// recorded (every pin of the plan has one; the kernel knobs under the sandbox's own
    /// fresh /proc have none).
    pub(super) fn read_only(&self, target: &Path, expected: Option<FileId>) -> Result<()> {
        let at = self.find(target, expected)?;
        let tree = step(
            || format!("bind {} over itself", target.display()),
            clone_tree_of(at.as_fd(), Depth::Recursive),
        )?;
        step(
            || format!("make {} read-only", target.display()),
            set_attributes_of(tree.as_fd(), Depth::Recursive, libc::MOUNT_ATTR_RDONLY, 0),
        )?;
        step(
            || format!("bind {} over itself", target.display()),
            attach_tree_onto(tree.as_fd(), at.as_fd()),
        )
    }

    /// Covers a directory with an empty read-only tmpfs. What was to be hidden must not
    /// show: a target that is no longer a directory is an error. `expected`: as for
    /// [`Steps::read_only`] (the sandbox's own /run has none).
    pub(super) fn hide_dir(&self, target: &Path, expected: Option<FileId>) -> Result<()> {
        let at = self.find(target, expected)?;
        if !resolve::is_dir(&at).unwrap_or(false) {
            return Err(MountError {
                step: format!("hide {}", target.display()),
                source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        let tmpfs = step(
            || format!("hide {}", target.display()),
            new_tmpfs(
                "0755",
                libc::MOUNT_ATTR_RDONLY
                    | libc::MOUNT_ATTR_NOSUID
                    | libc::MOUNT_ATTR_NODEV
                    | libc::MOUNT_ATTR_NOEXEC,
            ),
        )?;
        step(
            || format!("hide {}", target.display()),
            attach_tree_onto(tmpfs.as_fd(), at.as_fd()),
        )
    }

    /// Covers the directory `target` with a tmpfs holding only the directories `keep` (the
    /// writable roots inside it, attached onto them next), made read-only before it is
    /// attached: CMD sees nothing else of what `target` held, and can add nothing to it.
    pub(super) fn cover(&self, target: &Path, keep: &[PathBuf]) -> Result<()> {
        let at = self.find(target, Some(self.expected(target)?))?;
        let what = || format!("cover {}", target.display());
        if !resolve::is_dir(&at).unwrap_or(false) {
            return Err(MountError {
                step: what(),
                source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        let tmpfs = step(
            what,
            new_tmpfs(
                "0755",
                libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC,
            ),
        )?;
        for dir in keep {
            let below = dir.strip_prefix(target).map_err(|_| MountError {
                step: what(),
                source: std::io::Error::other(format!("{} is not inside it", dir.display())),
            })?;
            // Made from the detached tmpfs's own root, which nothing else can reach.
            let mut here = step(what, tmpfs.try_clone())?;
            for part in below.components() {
                let std::path::Component::Normal(name) = part else {
                    continue;
                };
                match nix::sys::stat::mkdirat(
                    here.as_fd(),
                    name,
                    nix::sys::stat::Mode::from_bits_truncate(0o755),
                ) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => {
                        return Err(MountError {
                            step: what(),
                            source: e.into(),
                        })
                    }
                }
                here = step(
                    what,
                    nix::fcntl::openat(
                        here.as_fd(),
                        name,
                        nix::fcntl::OFlag::O_PATH
                            | nix::fcntl::OFlag::O_DIRECTORY
                            | nix::fcntl::OFlag::O_NOFOLLOW
                            | nix::fcntl::OFlag::O_CLOEXEC,
                        nix::sys::stat::Mode::empty(),
                    ),
                )?;
            }
        }
        step(
            what,
            set_attributes_of(tmpfs.as_fd(), Depth::One, libc::MOUNT_ATTR_RDONLY, 0),
        )?;
        step(what, attach_tree_onto(tmpfs.as_fd(), at.as_fd()))
    }

    /// Covers a file (or a socket) with a read-only `/dev/null`: reads are empty, writes
    /// fail, and a socket there can no longer be connected to.
    pub(super) fn cover_with_null(&self, target: &Path, at: BorrowedFd<'_>) -> Result<()> {
        let null = step(
            || format!("hide {}", target.display()),
            clone_tree(Path::new("/dev/null"), Depth::One),
        )?;
        step(
            || format!("make {} read-only", target.display()),
            set_attributes_of(
                null.as_fd(),
                Depth::One,
                libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOEXEC,
                0,
            ),
        )?;
        step(
            || format!("hide {}", target.display()),
            attach_tree_onto(null.as_fd(), at),
        )
    }

    /// The identity netbox recorded for `path`; a plan without one is netbox's bug, and
    /// nothing is mounted unchecked.
    pub(super) fn expected(&self, path: &Path) -> Result<FileId> {
        self.plan
            .identities
            .get(path)
            .copied()
            .ok_or_else(|| MountError {
                step: format!("check {}", path.display()),
                source: std::io::Error::other("netbox recorded no identity for it"),
            })
    }

    /// Opens `target` (a sandbox path) in the new root, following no symlink, and checks it
    /// is what netbox resolved.
    pub(super) fn find(&self, target: &Path, expected: Option<FileId>) -> Result<OwnedFd> {
        let relative = target.strip_prefix("/").unwrap_or(target);
        let found = step(
            || format!("find {}", target.display()),
            resolve::open_beneath(self.root, relative).map_err(|e| changed(target, &e)),
        )?;
        if let Some(expected) = expected.filter(|_| self.check) {
            check_identity(target, expected, &found)?;
        }
        Ok(found)
    }
}

/// A lookup that failed, said as what it means: the path changed since netbox looked.
pub(super) fn changed(path: &Path, error: &std::io::Error) -> std::io::Error {
    std::io::Error::new(
        error.kind(),
        format!(
            "{} changed since netbox resolved it: {}",
            path.display(),
            resolve::describe(error)
        ),
    )
}

pub(super) fn expect_identity(plan: &MountPlan, path: &Path, found: &OwnedFd) -> Result<()> {
    let expected = plan
        .identities
        .get(path)
        .copied()
        .ok_or_else(|| MountError {
            step: format!("check {}", path.display()),
            source: std::io::Error::other("netbox recorded no identity for it"),
        })?;
    check_identity(path, expected, found)
}

pub(super) fn check_identity(path: &Path, expected: FileId, found: &OwnedFd) -> Result<()> {
    let id = step(|| format!("check {}", path.display()), FileId::of(found))?;
    if id == expected {
        return Ok(());
    }
    Err(MountError {
        step: format!("check {}", path.display()),
        source: std::io::Error::other(format!(
            "{} is not what netbox resolved at start-up ({expected}; now {id}): another process moved or replaced it",
            path.display()
        )),
    })
}

pub(super) fn mount_proc(steps: &Steps<'_>, forbid_nested_userns: bool) -> Result<()> {
    let proc_dir = in_root(Path::new("/proc"));
    step(
        || "mount /proc".into(),
        mount(
            Some("proc"),
            &proc_dir,
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        ),
    )?;
    if forbid_nested_userns {
        // No user namespace may be made inside this one: CMD cannot undo the locked mounts
        // from one, but each is kernel attack surface a build does not need (unshare then
        // fails with ENOSPC). The setting belongs to the sandbox's user namespace (the host
        // keeps its own), and this fresh /proc is still writable: the read-only
        // /proc/sys below comes after, and a host /proc/sys may already be read-only.
        step(
            || "set user.max_user_namespaces=0".into(),
            std::fs::write(proc_dir.join("sys/user/max_user_namespaces"), "0"),
        )?;
    }
    for name in PROC_READ_ONLY {
        let path = proc_dir.join(name);
        if path.exists() {
            steps.read_only(&Path::new("/proc").join(name), None)?;
        }
    }
    Ok(())
}

pub(super) fn mount_dev() -> Result<()> {
    let dev = in_root(Path::new("/dev"));
    let none: Option<&str> = None;
    step(
        || "tmpfs on /dev".into(),
        mount(
            Some("tmpfs"),
            &dev,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("mode=0755"),
        ),
    )?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if !host.exists() {
            continue;
        }
        let target = dev.join(name);
        step(
            || format!("create /dev/{name}"),
            std::fs::File::create(&target),
        )?;
        step(
            || format!("bind /dev/{name}"),
            mount(Some(&host), &target, none, MsFlags::MS_BIND, none),
        )?;
        // Read-only mount: the device still reads and writes, but its inode (owner, mode,
        // times: the host's own /dev/null) cannot be changed from inside.
        step(
            || format!("make /dev/{name} read-only"),
            set_attributes(
                &target,
                Depth::One,
                libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC,
                0,
            ),
        )?;
    }
    for dir in ["pts", "shm"] {
        step(
            || format!("create /dev/{dir}"),
            std::fs::create_dir(dev.join(dir)),
        )?;
    }
    step(
        || "mount /dev/pts".into(),
        mount(
            Some("devpts"),
            &dev.join("pts"),
            Some("devpts"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("newinstance,ptmxmode=0666,mode=620"),
        ),
    )?;
    step(
        || "mount /dev/shm".into(),
        mount(
            Some("tmpfs"),
            &dev.join("shm"),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        ),
    )?;
    for (link, to) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        step(
            || format!("link /dev/{link}"),
            std::os::unix::fs::symlink(to, dev.join(link)),
        )?;
    }
    // Populated: now nothing may be added to /dev itself.
    step(
        || "make /dev read-only".into(),
        set_attributes(&dev, Depth::One, libc::MOUNT_ATTR_RDONLY, 0),
    )
}
