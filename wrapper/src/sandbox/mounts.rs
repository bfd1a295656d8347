//! The sandbox's filesystem: a plan computed before fork from the configuration, and the
//! syscalls that carry it out inside the new mount namespace.
//!
//! The tree is built at a staging root, then pivoted into:
//! 1. `/` is made recursively private, so nothing here propagates to the host.
//! 2. Every source is captured with `open_tree(OPEN_TREE_CLONE)` first: the root tree, the
//!    writable roots, the host `/tmp`. Captured trees stay reachable after the staging
//!    tmpfs covers `/tmp`.
//!
//!    Every path taken from the host (a source, a pin, a hidden path) is opened following
//!    no symlink and checked against the identity netbox recorded at start-up (resolved.rs)
//!    before anything is mounted from or onto it; mounts then go from fd to fd
//!    (`move_mount` with empty paths), so nothing is looked up by name twice.
//! 3. The root clone is attached at the staging root and made read-only in one recursive
//!    `mount_setattr` (mount_setattr(2); this also covers hidden stacked mounts).
//! 4. The plan's operations run in order: the private temp root (tmpfs), writable roots,
//!    then read-only binds of protected paths on top (so no writable alias is left), with
//!    the parts of a pinned git directory left writable bound on top of its pin, outer
//!    binds before inner ones (clearing `MOUNT_ATTR_RDONLY` on a clone of the pin is
//!    allowed: netbox set it, so the kernel has not locked it).
//! 5. A fresh `/proc` (the new pid namespace) with `/proc/sys` and the other kernel knobs
//!    read-only (as kuid 0 a capability-less process can still open `/proc/sys/...` for
//!    writing: measured), a minimal `/dev`, an empty read-only `/run` (host service sockets
//!    live there, and a socket file on a read-only mount is still connectable).
//! 6. `pivot_root(".", ".")` and a detach of the old root.
//!
//! Capabilities are still held during all of this: while they are, `/` could be remounted
//! read-write. The capability drop comes right after (sandbox/mod.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::mount_error::MountError;
use crate::cli::TmpMode;
use crate::plan::protect::Protected;
use crate::sys::mount_api::{
    attach_tree, attach_tree_onto, clone_tree, clone_tree_of, new_tmpfs, set_attributes,
    set_attributes_of, Depth,
};
use crate::sys::resolve::{self, FileId};

/// Where the new root is assembled (inside a tmpfs mounted over `/tmp` in the sandbox's own
/// mount namespace only).
const STAGING: &str = "/tmp";
const NEW_ROOT: &str = "/tmp/root";

/// Kernel knobs under a fresh `/proc` that stay read-only (the list container runtimes use).
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];

/// Device nodes bound from the host into the minimal `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// One step of the plan, with targets as the sandbox will see them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountOp {
    /// A fresh writable tmpfs (the private temp root).
    Tmpfs { target: PathBuf },
    /// Create a directory (inside a tmpfs laid earlier) to serve as a mountpoint.
    Mkdir { target: PathBuf },
    /// Create an empty file (and its parents, inside a tmpfs laid earlier) as a mountpoint.
    MakeFile { target: PathBuf },
    /// Attach the captured source with this index at `target`, writable.
    Writable { source: usize, target: PathBuf },
    /// Bind a writable directory over itself, so that it is a mountpoint and cannot be
    /// renamed away (EBUSY) with the pins inside it.
    Anchor { target: PathBuf },
    /// Bind `target` over itself and make it read-only, recursively.
    ReadOnly { target: PathBuf },
    /// Bind `target`, inside a read-only pin, over itself writable (a git directory's
    /// `objects/` under `--allow-git-writes`), with the pins inside it that follow.
    Opened { target: PathBuf },
    /// Cover a directory with an empty read-only tmpfs.
    HideDir { target: PathBuf },
    /// Cover a directory (netbox's cache home) with a read-only tmpfs that holds only the
    /// directories `keep` (each below `target`), empty: the mountpoints of the writable
    /// roots that follow it in the plan.
    Cover { target: PathBuf, keep: Vec<PathBuf> },
    /// Cover a file (or a socket) with a read-only `/dev/null`: reads are empty, writes
    /// fail, and a socket there can no longer be connected to.
    HideFile { target: PathBuf },
}

/// Everything the mount step does, computed before fork.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    /// Host paths captured before anything is mounted; `Writable` refers to them by index.
    pub sources: Vec<PathBuf>,
    pub ops: Vec<MountOp>,
    /// Set `user.max_user_namespaces` to 0 in the sandbox's user namespace.
    pub forbid_nested_userns: bool,
    /// What each source and each pinned or hidden target was when netbox resolved it
    /// (resolved.rs), by host path: the sandbox mounts only onto and from these.
    pub identities: BTreeMap<PathBuf, FileId>,
    /// When the run inspects: `--upstream-ca`'s certificates (PEM), which go into the trust
    /// bundle with the session CA (run_dir.rs); `/run` then holds the bundle.
    pub trust: Option<String>,
    /// When the run captures: the DNS stub's address, which `/etc/resolv.conf` is made to
    /// name (run_dir.rs).
    pub resolver: Option<std::net::Ipv4Addr>,
}

impl MountPlan {
    /// The host paths whose identity the sandbox checks: every source, and every target
    /// that is not created fresh inside the sandbox.
    pub fn paths_to_identify(&self) -> Vec<&Path> {
        let targets = self.ops.iter().filter_map(|op| match op {
            MountOp::Anchor { target }
            | MountOp::ReadOnly { target }
            | MountOp::Opened { target }
            | MountOp::HideDir { target }
            | MountOp::HideFile { target }
            | MountOp::Cover { target, .. } => Some(target.as_path()),
            _ => None,
        });
        self.sources
            .iter()
            .map(PathBuf::as_path)
            .chain(targets)
            .collect()
    }
}

/// What the sandbox's filesystem must look like, beyond the fixed parts.
pub struct Layout<'a> {
    pub write_roots: &'a [PathBuf],
    pub tmp: TmpMode,
    pub protected: &'a [Protected],
    pub read_only: &'a [PathBuf],
    /// Paths to make empty (`--hide`).
    pub hidden: &'a [PathBuf],
    /// Directories no writable root holds, covered but for the writable roots inside them
    /// (netbox's cache home, but for this run's caches).
    pub covered: &'a [PathBuf],
}

/// Lays out the plan: temp root, writable roots, then protections and hidden paths on top.
/// A covered directory goes on after the other roots and before the roots inside it,
/// which are attached onto the cover's mountpoints: so they stay writable, and nothing
/// else of it shows. `is_dir` says which paths are directories (the one filesystem fact
/// the plan needs).
pub fn plan(layout: &Layout<'_>, is_dir: impl Fn(&Path) -> bool) -> MountPlan {
    let Layout {
        write_roots,
        tmp,
        protected,
        read_only,
        hidden,
        covered,
    } = *layout;
    let tmp_dir = Path::new("/tmp");
    let mut plan = MountPlan {
        sources: Vec::new(),
        ops: Vec::new(),
        forbid_nested_userns: true,
        identities: BTreeMap::new(),
        trust: None,
        resolver: None,
    };
    if tmp == TmpMode::Private {
        plan.ops.push(MountOp::Tmpfs {
            target: tmp_dir.to_owned(),
        });
    }
    let mut roots: Vec<&PathBuf> = write_roots.iter().collect();
    roots.sort_by_key(|r| r.components().count());
    // The cover a root lies inside, if any (none is a root itself: the caller leaves such a
    // cover out).
    let cover_of = |root: &Path| {
        covered
            .iter()
            .position(|c| root.starts_with(c) && root != c.as_path())
    };
    for root in roots.iter().filter(|r| cover_of(r).is_none()) {
        bind_root(&mut plan, root, tmp, &is_dir);
    }
    for (at, cover) in covered.iter().enumerate() {
        let inside: Vec<&PathBuf> = roots
            .iter()
            .copied()
            .filter(|r| cover_of(r) == Some(at))
            .collect();
        plan.ops.push(MountOp::Cover {
            target: cover.clone(),
            keep: inside.iter().map(|r| (*r).clone()).collect(),
        });
        for root in inside {
            bind_root(&mut plan, root, tmp, &is_dir);
        }
    }
    // rename(2) refuses only a mountpoint itself, not a directory holding one: every
    // writable directory between a root and a pin becomes a mountpoint first, or CMD could
    // move it aside with the pins inside (.git under --allow-git-writes) and build a new one.
    // (The parts of a pin left writable are not among them: each lies in its git
    // directory's pin, read-only, which no rename gets past.)
    let pins: Vec<&PathBuf> = protected
        .iter()
        .filter(|p| !p.writable)
        .map(|p| &p.path)
        .chain(read_only)
        .collect();
    let mut anchors: Vec<PathBuf> = Vec::new();
    for pin in &pins {
        let Some(root) = write_roots
            .iter()
            .filter(|r| pin.starts_with(r))
            .max_by_key(|r| r.components().count())
        else {
            continue;
        };
        for dir in pin.ancestors().skip(1) {
            if dir == root.as_path() || !dir.starts_with(root) {
                break;
            }
            anchors.push(dir.to_owned());
        }
    }
    anchors.sort_by_key(|a| a.components().count());
    anchors.dedup();
    plan.ops
        .extend(anchors.into_iter().map(|target| MountOp::Anchor { target }));
    // The parts of a pin left writable, bound on top of it; but none a `--ro` path holds.
    let opened = protected
        .iter()
        .filter(|p| p.writable && !read_only.iter().any(|r| p.path.starts_with(r)))
        .map(|p| MountOp::Opened {
            target: p.path.clone(),
        });
    let mut binds: Vec<MountOp> = pins
        .into_iter()
        .map(|target| MountOp::ReadOnly {
            target: target.clone(),
        })
        .chain(opened)
        .collect();
    // Outer ones first: a writable part goes on after the pin it lies in, and before the
    // pins inside it (an include file a config names in `objects/`), which it would
    // otherwise make writable again.
    binds.sort_by_key(|op| match op {
        MountOp::ReadOnly { target } | MountOp::Opened { target } => target.components().count(),
        _ => 0,
    });
    plan.ops.extend(binds);
    for target in hidden {
        let target = target.clone();
        plan.ops.push(if is_dir(&target) {
            MountOp::HideDir { target }
        } else {
            MountOp::HideFile { target }
        });
    }
    plan
}

/// The ops that attach writable root `root`: under a private /tmp its mountpoint is made
/// first (it does not exist in the fresh tmpfs).
fn bind_root(plan: &mut MountPlan, root: &Path, tmp: TmpMode, is_dir: &impl Fn(&Path) -> bool) {
    if tmp == TmpMode::Private && root.starts_with("/tmp") {
        let target = root.to_owned();
        plan.ops.push(if is_dir(root) {
            MountOp::Mkdir { target }
        } else {
            MountOp::MakeFile { target }
        });
    }
    plan.sources.push(root.to_owned());
    plan.ops.push(MountOp::Writable {
        source: plan.sources.len() - 1,
        target: root.to_owned(),
    });
}

type Result<T> = std::result::Result<T, MountError>;

fn step<T, E: Into<std::io::Error>>(
    what: impl FnOnce() -> String,
    result: std::result::Result<T, E>,
) -> Result<T> {
    result.map_err(|e| MountError {
        step: what(),
        source: e.into(),
    })
}

fn in_root(path: &Path) -> PathBuf {
    Path::new(NEW_ROOT).join(path.strip_prefix("/").unwrap_or(path))
}

/// Builds the sandbox filesystem and pivots into it. Runs in the sandbox's init process,
/// inside its new user, mount and pid namespaces, with capabilities still held.
/// `session_ca` waits for the session CA's certificate (PEM) from netbox, when the plan
/// lays a trust bundle.
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
    if plan.trust.is_some() || plan.resolver.is_some() {
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
struct Steps<'a> {
    root: BorrowedFd<'a>,
    sources: &'a [OwnedFd],
    plan: &'a MountPlan,
    fresh: BTreeSet<&'a Path>,
    /// Whether identities are checked (always, but in a test build's deliberate breakage).
    check: bool,
}

impl Steps<'_> {
    fn apply(&self, op: &MountOp) -> Result<()> {
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
        }
    }

    /// Binds `target` over itself, read-only, recursively. `expected`: the identity netbox
    /// recorded (every pin of the plan has one; the kernel knobs under the sandbox's own
    /// fresh /proc have none).
    fn read_only(&self, target: &Path, expected: Option<FileId>) -> Result<()> {
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
    fn hide_dir(&self, target: &Path, expected: Option<FileId>) -> Result<()> {
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
    fn cover(&self, target: &Path, keep: &[PathBuf]) -> Result<()> {
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
    fn cover_with_null(&self, target: &Path, at: BorrowedFd<'_>) -> Result<()> {
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
    fn expected(&self, path: &Path) -> Result<FileId> {
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
    fn find(&self, target: &Path, expected: Option<FileId>) -> Result<OwnedFd> {
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
fn changed(path: &Path, error: &std::io::Error) -> std::io::Error {
    std::io::Error::new(
        error.kind(),
        format!(
            "{} changed since netbox resolved it: {}",
            path.display(),
            resolve::describe(error)
        ),
    )
}

fn expect_identity(plan: &MountPlan, path: &Path, found: &OwnedFd) -> Result<()> {
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

fn check_identity(path: &Path, expected: FileId, found: &OwnedFd) -> Result<()> {
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

fn mount_proc(steps: &Steps<'_>, forbid_nested_userns: bool) -> Result<()> {
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

fn mount_dev() -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn workspace_under_private_tmp_is_recreated_then_bound_then_protected() {
        let protected = [Protected {
            path: p("/tmp/demo/.git"),
            placeholder: None,
            writable: false,
        }];
        let plan = plan(
            &Layout {
                write_roots: &[p("/tmp/demo")],
                tmp: TmpMode::Private,
                protected: &protected,
                read_only: &[],
                hidden: &[],
                covered: &[],
            },
            |_| true,
        );
        assert_eq!(plan.sources, vec![p("/tmp/demo")]);
        assert_eq!(
            plan.ops,
            vec![
                MountOp::Tmpfs { target: p("/tmp") },
                MountOp::Mkdir {
                    target: p("/tmp/demo")
                },
                MountOp::Writable {
                    source: 0,
                    target: p("/tmp/demo")
                },
                MountOp::ReadOnly {
                    target: p("/tmp/demo/.git")
                },
            ]
        );
    }

    #[test]
    fn directories_between_a_root_and_a_pin_become_anchors() {
        let protected = [
            Protected {
                path: p("/w/.git/hooks"),
                placeholder: None,
                writable: false,
            },
            Protected {
                path: p("/w/.git/config"),
                placeholder: None,
                writable: false,
            },
            Protected {
                path: p("/w/.envrc"),
                placeholder: None,
                writable: false,
            },
        ];
        let plan = plan(
            &Layout {
                write_roots: &[p("/w")],
                tmp: TmpMode::Host,
                protected: &protected,
                read_only: &[p("/w/a/b/c")],
                hidden: &[],
                covered: &[],
            },
            |_| true,
        );
        let anchors: Vec<&MountOp> = plan
            .ops
            .iter()
            .filter(|op| matches!(op, MountOp::Anchor { .. }))
            .collect();
        assert_eq!(
            anchors,
            vec![
                &MountOp::Anchor {
                    target: p("/w/.git")
                },
                &MountOp::Anchor { target: p("/w/a") },
                &MountOp::Anchor {
                    target: p("/w/a/b")
                },
            ]
        );
        let first_pin = plan
            .ops
            .iter()
            .position(|op| matches!(op, MountOp::ReadOnly { .. }))
            .unwrap();
        let last_anchor = plan
            .ops
            .iter()
            .rposition(|op| matches!(op, MountOp::Anchor { .. }))
            .unwrap();
        assert!(last_anchor < first_pin);
    }

    #[test]
    fn writable_parts_go_on_after_their_pin_and_before_the_pins_inside_them() {
        let pin = |path: &str, writable| Protected {
            path: p(path),
            placeholder: None,
            writable,
        };
        // Listed inner first, as protect may find them.
        let protected = [
            pin("/w/.git/objects/x.inc", false),
            pin("/w/.git/objects", true),
            pin("/w/.git/refs", true),
            pin("/w/.git", false),
            pin("/w/.git/lfs", true),
        ];
        let plan = plan(
            &Layout {
                write_roots: &[p("/w")],
                tmp: TmpMode::Host,
                protected: &protected,
                read_only: &[p("/w/.git/lfs")],
                hidden: &[],
                covered: &[],
            },
            |_| true,
        );
        assert_eq!(
            plan.ops[1..],
            [
                // Only for the pin inside a writable part: a writable part itself lies
                // in a read-only pin.
                MountOp::Anchor {
                    target: p("/w/.git")
                },
                MountOp::Anchor {
                    target: p("/w/.git/objects")
                },
                MountOp::ReadOnly {
                    target: p("/w/.git")
                },
                // `--ro` wins over the part left writable.
                MountOp::ReadOnly {
                    target: p("/w/.git/lfs")
                },
                MountOp::Opened {
                    target: p("/w/.git/objects")
                },
                MountOp::Opened {
                    target: p("/w/.git/refs")
                },
                MountOp::ReadOnly {
                    target: p("/w/.git/objects/x.inc")
                },
            ]
        );
    }

    #[test]
    fn a_file_root_under_private_tmp_gets_a_file_mountpoint() {
        let plan = plan(
            &Layout {
                write_roots: &[p("/tmp/notes.txt")],
                tmp: TmpMode::Private,
                protected: &[],
                read_only: &[],
                hidden: &[],
                covered: &[],
            },
            |_| false,
        );
        assert_eq!(
            plan.ops[1],
            MountOp::MakeFile {
                target: p("/tmp/notes.txt")
            }
        );
    }

    #[test]
    fn host_tmp_mode_binds_roots_outer_first_and_protects_last() {
        let protected = [Protected {
            path: p("/home/u/ws/.git"),
            placeholder: Some(crate::plan::protect::Placeholder::Dir),
            writable: false,
        }];
        let plan = plan(
            &Layout {
                write_roots: &[p("/home/u/ws"), p("/tmp")],
                tmp: TmpMode::Host,
                protected: &protected,
                read_only: &[p("/home/u/ws/secret")],
                hidden: &[p("/srv/agent.sock")],
                covered: &[],
            },
            |path| !path.ends_with("agent.sock"),
        );
        assert_eq!(plan.sources, vec![p("/tmp"), p("/home/u/ws")]);
        assert_eq!(
            plan.ops,
            vec![
                MountOp::Writable {
                    source: 0,
                    target: p("/tmp")
                },
                MountOp::Writable {
                    source: 1,
                    target: p("/home/u/ws")
                },
                MountOp::ReadOnly {
                    target: p("/home/u/ws/.git")
                },
                MountOp::ReadOnly {
                    target: p("/home/u/ws/secret")
                },
                MountOp::HideFile {
                    target: p("/srv/agent.sock")
                },
            ]
        );
    }

    #[test]
    fn every_source_and_every_pinned_or_hidden_target_is_identified() {
        let protected = [Protected {
            path: p("/w/.git/config"),
            placeholder: None,
            writable: false,
        }];
        let plan = plan(
            &Layout {
                write_roots: &[p("/w"), p("/tmp/scratch")],
                tmp: TmpMode::Private,
                protected: &protected,
                read_only: &[p("/w/ro")],
                hidden: &[p("/srv/secret"), p("/srv/agent.sock")],
                covered: &[],
            },
            |path| !path.ends_with("agent.sock"),
        );
        let mut wanted = plan.paths_to_identify();
        wanted.sort();
        assert_eq!(
            wanted,
            [
                "/srv/agent.sock",
                "/srv/secret",
                "/tmp/scratch",
                "/w",
                "/w/.git",
                "/w/.git/config",
                "/w/ro"
            ]
            .map(Path::new)
        );
    }

    #[test]
    fn a_cover_goes_on_after_the_other_roots_and_before_the_roots_it_keeps() {
        let cache = p("/home/u/.cache/netbox");
        let plan = plan(
            &Layout {
                write_roots: &[
                    p("/home/u/ws"),
                    p("/home/u/.cache/netbox/npm/ab"),
                    p("/home/u/.cache/netbox/cargo/ab"),
                ],
                tmp: TmpMode::Host,
                protected: &[],
                read_only: &[],
                hidden: &[],
                covered: std::slice::from_ref(&cache),
            },
            |_| true,
        );
        assert_eq!(
            plan.ops,
            vec![
                MountOp::Writable {
                    source: 0,
                    target: p("/home/u/ws")
                },
                MountOp::Cover {
                    target: cache.clone(),
                    keep: vec![
                        p("/home/u/.cache/netbox/npm/ab"),
                        p("/home/u/.cache/netbox/cargo/ab")
                    ],
                },
                MountOp::Writable {
                    source: 1,
                    target: p("/home/u/.cache/netbox/npm/ab")
                },
                MountOp::Writable {
                    source: 2,
                    target: p("/home/u/.cache/netbox/cargo/ab")
                },
            ]
        );
        assert!(plan.paths_to_identify().contains(&cache.as_path()));
    }
}
