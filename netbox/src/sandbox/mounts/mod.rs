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
//!
//! Here the plan, made by netbox before the clone; `build` carries it out in pid 1.

mod build;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cli::TmpMode;
use crate::plan::protect::Protected;
use crate::sys::resolve::FileId;
pub use build::apply;

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
    /// Show what the sandbox has at `source` (its mounts on top included) at `target` too,
    /// read-only unless `writable` (`--bind`, `--ro-bind`).
    Alias {
        source: PathBuf,
        target: PathBuf,
        writable: bool,
    },
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
    /// When CMD may run apt: the apt configuration laid in `/run` (plan/apt_conf.rs).
    pub apt_conf: Option<String>,
}

impl MountPlan {
    /// The host paths whose identity the sandbox checks: every source, and every target
    /// that is not created fresh inside the sandbox.
    pub fn paths_to_identify(&self) -> Vec<&Path> {
        let made: Vec<&Path> = self
            .ops
            .iter()
            .filter_map(|op| match op {
                MountOp::Mkdir { target } | MountOp::MakeFile { target } => Some(target.as_path()),
                _ => None,
            })
            .collect();
        let targets = self.ops.iter().flat_map(|op| match op {
            MountOp::Anchor { target }
            | MountOp::ReadOnly { target }
            | MountOp::Opened { target }
            | MountOp::HideDir { target }
            | MountOp::HideFile { target }
            | MountOp::Cover { target, .. } => vec![target.as_path()],
            MountOp::Alias { source, target, .. } if made.contains(&target.as_path()) => {
                vec![source.as_path()]
            }
            MountOp::Alias { source, target, .. } => vec![source.as_path(), target.as_path()],
            _ => Vec::new(),
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
    /// `--bind` and `--ro-bind`, laid last: each shows its source as the plan left it.
    pub binds: &'a [crate::plan::config::Bind],
}

/// Lays out the plan: temp root, writable roots, then protections and hidden paths on top.
/// A covered directory goes on after the other roots and before the roots inside it,
/// which are attached onto the cover's mountpoints: so they stay writable, and nothing
/// else of it shows. `is_dir` says which paths are directories (the one filesystem fact
/// the plan needs).
// Whole: one pass over roots, covers and pins in the order their mounts must stack.
pub fn plan(layout: &Layout<'_>, is_dir: impl Fn(&Path) -> bool) -> MountPlan {
    let Layout {
        write_roots,
        tmp,
        protected,
        read_only,
        hidden,
        covered,
        binds: aliases,
    } = *layout;
    let tmp_dir = Path::new("/tmp");
    let mut plan = MountPlan {
        sources: Vec::new(),
        ops: Vec::new(),
        forbid_nested_userns: true,
        identities: BTreeMap::new(),
        trust: None,
        resolver: None,
        apt_conf: None,
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
    // Last, so each shows its source with every mount netbox laid there.
    for bind in aliases {
        if bind.fresh {
            let target = bind.target.clone();
            plan.ops.push(if is_dir(&bind.source) {
                MountOp::Mkdir { target }
            } else {
                MountOp::MakeFile { target }
            });
        }
        plan.ops.push(MountOp::Alias {
            source: bind.source.clone(),
            target: bind.target.clone(),
            writable: bind.writable,
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
                binds: &[],
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
                binds: &[],
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
                binds: &[],
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
                binds: &[],
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
                binds: &[],
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
    fn binds_go_on_last_and_a_fresh_target_is_made_not_identified() {
        use crate::plan::config::Bind;
        let binds = [
            Bind {
                source: p("/srv/data"),
                target: p("/w/data"),
                writable: false,
                fresh: false,
            },
            Bind {
                source: p("/var/cache/pip"),
                target: p("/tmp/pip"),
                writable: true,
                fresh: true,
            },
        ];
        let plan = plan(
            &Layout {
                write_roots: &[p("/w"), p("/var/cache/pip")],
                tmp: TmpMode::Private,
                protected: &[],
                read_only: &[],
                hidden: &[p("/srv/data/key")],
                covered: &[],
                binds: &binds,
            },
            |_| true,
        );
        // After the hidden paths, so each shows its source as the plan left it.
        let tail = &plan.ops[plan.ops.len() - 4..];
        assert_eq!(
            tail,
            [
                MountOp::HideDir {
                    target: p("/srv/data/key")
                },
                MountOp::Alias {
                    source: p("/srv/data"),
                    target: p("/w/data"),
                    writable: false
                },
                MountOp::Mkdir {
                    target: p("/tmp/pip")
                },
                MountOp::Alias {
                    source: p("/var/cache/pip"),
                    target: p("/tmp/pip"),
                    writable: true
                },
            ]
        );
        let wanted = plan.paths_to_identify();
        assert!(wanted.contains(&Path::new("/w/data")));
        assert!(wanted.contains(&Path::new("/srv/data")));
        assert!(!wanted.contains(&Path::new("/tmp/pip")));
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
                binds: &[],
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
                binds: &[],
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
