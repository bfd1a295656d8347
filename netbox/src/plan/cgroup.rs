//! Limits enforced by cgroup v1 controllers: `--cpus` (the `cpu` controller's CFS quota;
//! no rlimit shares out CPU time), `--pids` when netbox runs as host root (RLIMIT_NPROC
//! does not bind a process whose real uid is host root: kernel/fork.c exempts INIT_USER),
//! and, as root, a `memory` cgroup on top of `--memory`'s RLIMIT_AS, which also counts
//! resident memory, page cache and the private /tmp's pages, for the sandbox as a whole.
//! An ordinary user's `--pids` and `--memory` hold through rlimits alone (limits.rs);
//! `--cpus` needs a hierarchy netbox may write to, and without one it is an error naming
//! `--cpus`, never a silent no-op. The live probe reads every value back (probe.rs).
//!
//! The sandbox is put in the cgroups by birth: netbox moves itself in, clones pid 1 (which
//! inherits them), and moves itself back, all while it is still single-threaded, so no
//! process of the sandbox ever runs outside them.
//!
//! Two levels per controller: the limits are set on `netbox-SESSION` and the sandbox lives
//! in `netbox-SESSION/sandbox`. The cgroup files belong to host root, as the sandbox's
//! processes do when netbox runs as root: a CMD that reached the hierarchy (a nested user
//! and cgroup namespace) could rewrite its own cgroup's files, but never its parent's,
//! which bind it all the same. (Nested user namespaces are refused outright for host root
//! — config.rs — and the hierarchies are on read-only mounts in the sandbox; the two
//! levels are a further wall.)

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::WrapperError;
use crate::limits::Limits;

/// The CFS period the `--cpus` quota is a share of (the kernel's default, 100 ms).
pub const CPU_PERIOD_US: u64 = 100_000;

/// Whether this process's real uid is host root, the one RLIMIT_NPROC does not bind. Root
/// of a container's user namespace is bound like anyone else (its uid maps elsewhere).
pub fn is_host_root() -> bool {
    nix::unistd::getuid().is_root()
        && std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|map| {
            map.lines().any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                matches!(fields.as_slice(), ["0", "0", _])
            })
        })
}

/// One limit file as the probe checks it: the value must read back, the file must not be
/// writable, and the sandbox must be in `member_of` in that controller's hierarchy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CgroupLimit {
    pub controller: String,
    /// The limit file, on `netbox-SESSION`.
    #[serde(with = "bridge::log::path_json::exact")]
    pub file: PathBuf,
    pub value: String,
    /// The sandbox's cgroup, as /proc/self/cgroup names it.
    pub member_of: String,
    /// Where netbox came from, which the sandbox must not be able to move back to.
    #[serde(with = "bridge::log::path_json::exact")]
    pub home_procs: PathBuf,
}

/// What one controller must be given, and what to say if it cannot be.
struct Wanted {
    controller: &'static str,
    settings: Vec<(&'static str, String)>,
    /// Without this controller the limit does not hold at all (otherwise an rlimit does).
    unenforceable: Option<String>,
}

/// `why`, and inside a container the setting that does the same there (its cgroup tree
/// is the engine's, read-only to netbox, even as root).
fn with_place(why: &str) -> String {
    match crate::place::Place::detect().fix(crate::place::Need::Limits) {
        Some(fix) => format!("{why}; {fix}"),
        None => why.to_owned(),
    }
}

fn wanted(limits: &Limits, root: bool) -> Vec<Wanted> {
    let mut wanted = Vec::new();
    if let (true, Some(max)) = (root, limits.sandbox_pids()) {
        wanted.push(Wanted {
            controller: "pids",
            settings: vec![("pids.max", max.to_string())],
            unenforceable: Some(with_place(
                "--pids cannot be enforced here: netbox runs as root, which RLIMIT_NPROC \
                 does not bind, and there is no cgroup v1 pids hierarchy to use instead; \
                 run netbox as an ordinary user",
            )),
        });
    }
    if let Some(millis) = limits.cpu_millis {
        wanted.push(Wanted {
            controller: "cpu",
            settings: vec![
                ("cpu.cfs_period_us", CPU_PERIOD_US.to_string()),
                (
                    "cpu.cfs_quota_us",
                    (millis * CPU_PERIOD_US / 1000).to_string(),
                ),
            ],
            unenforceable: Some(with_place(
                "--cpus cannot be enforced here: it needs a cgroup v1 cpu hierarchy netbox \
                 may write to (no rlimit shares out CPU time), which usually takes root; \
                 drop --cpus, or run netbox as root",
            )),
        });
    }
    if let (true, Some(bytes)) = (root, limits.memory) {
        // The kernel keeps the limit in whole pages; asking for that is what reads back.
        let page = 4096;
        wanted.push(Wanted {
            controller: "memory",
            settings: vec![("memory.limit_in_bytes", (bytes / page * page).to_string())],
            unenforceable: None,
        });
    }
    wanted
}

/// The run's cgroups, one per controller it needs; removed again on drop, once the
/// sandbox is gone.
pub struct SandboxCgroups {
    groups: Vec<Group>,
}

struct Group {
    controller: &'static str,
    /// `netbox-SESSION`, which holds the limits.
    dir: PathBuf,
    /// `netbox-SESSION/sandbox`, where the sandbox lives.
    inner: PathBuf,
    /// netbox's own cgroup, to go back to.
    home: PathBuf,
    /// `inner` as /proc/self/cgroup names it.
    member_of: String,
    settings: Vec<(&'static str, String)>,
}

impl SandboxCgroups {
    /// Makes the cgroups `limits` need (none for most runs), with the limits set.
    pub fn create(session: &str, limits: &Limits) -> Result<SandboxCgroups, WrapperError> {
        let mut made = SandboxCgroups { groups: Vec::new() };
        let none = limits.pids.is_none() && limits.memory.is_none() && limits.cpu_millis.is_none();
        if none {
            return Ok(made);
        }
        for want in wanted(limits, is_host_root()) {
            let Some((home, path)) = own_cgroup(want.controller) else {
                match want.unenforceable {
                    Some(why) => return Err(WrapperError::Usage(why)),
                    None => continue,
                }
            };
            let name = format!("netbox-{session}");
            let dir = home.join(&name);
            let failed = |what: &str, dir: &Path, e: std::io::Error| WrapperError::Setup {
                step: format!("{} cgroup", want.controller),
                detail: format!("{what} {}: {e}", dir.display()),
                hint: None,
            };
            std::fs::create_dir(&dir).map_err(|e| failed("create", &dir, e))?;
            // From here on, dropping `made` removes the directories again.
            let inner = dir.join("sandbox");
            made.groups.push(Group {
                controller: want.controller,
                dir: dir.clone(),
                inner: inner.clone(),
                home,
                member_of: format!("{}/{name}/sandbox", path.trim_end_matches('/')),
                settings: want.settings.clone(),
            });
            // Test builds can leave the limits unset, for the probe to catch.
            let settings = if crate::testhooks::hooks().skip_limits {
                &[][..]
            } else {
                &want.settings[..]
            };
            for (file, value) in settings {
                std::fs::write(dir.join(file), value)
                    .map_err(|e| failed(&format!("set {file} to {value} in"), &dir, e))?;
            }
            std::fs::create_dir(&inner).map_err(|e| failed("create", &inner, e))?;
        }
        Ok(made)
    }

    /// Moves the calling process into every cgroup.
    pub fn enter(&self) -> Result<(), WrapperError> {
        self.groups
            .iter()
            .try_for_each(|g| move_self(g.controller, &g.inner))
    }

    /// Moves the calling process back to where it was.
    pub fn leave(&self) -> Result<(), WrapperError> {
        self.groups
            .iter()
            .try_for_each(|g| move_self(g.controller, &g.home))
    }

    /// The `tasks` file of the sandbox's cpu cgroup, if `--cpus` made one: a thread of
    /// netbox's that works for the sandbox joins it, to share CMD's quota.
    pub fn cpu_tasks(&self) -> Option<PathBuf> {
        self.groups
            .iter()
            .find(|g| g.controller == "cpu")
            .map(|g| g.inner.join("tasks"))
    }

    /// Whether no cgroup was needed (the run has no --pids, --memory or --cpus limit).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Every limit file, for the probe.
    pub fn limits(&self) -> Vec<CgroupLimit> {
        self.groups
            .iter()
            .flat_map(|g| {
                g.settings.iter().map(|(file, value)| CgroupLimit {
                    controller: g.controller.to_owned(),
                    file: g.dir.join(file),
                    value: value.clone(),
                    member_of: g.member_of.clone(),
                    home_procs: g.home.join("cgroup.procs"),
                })
            })
            .collect()
    }
}

impl Drop for SandboxCgroups {
    fn drop(&mut self) {
        for group in &self.groups {
            remove_when_empty(group);
        }
    }
}

/// The sandbox has been reaped; its processes leave the cgroup as they exit, which can
/// trail the reap by a moment. CMD may have made cgroups of its own below.
fn remove_when_empty(group: &Group) {
    for _ in 0..100 {
        if remove_tree(&group.dir).is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    crate::output::say(&format!(
        "netbox: warning: could not remove the {} cgroup {}",
        group.controller,
        group.dir.display()
    ));
}

/// Removes a cgroup and every cgroup below it, deepest first (a cgroup directory holds
/// only its control files, which go with it).
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

fn move_self(controller: &str, dir: &Path) -> Result<(), WrapperError> {
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).map_err(|e| {
        WrapperError::Setup {
            step: format!("{controller} cgroup"),
            detail: format!("join {}: {e}", dir.display()),
            hint: None,
        }
    })
}

/// netbox's own cgroup in the v1 hierarchy of `controller`, if there is one it may write
/// to: its directory, and its path as /proc/self/cgroup names it.
fn own_cgroup(controller: &str) -> Option<(PathBuf, String)> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroups.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_owned())
    })?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        // "... mountpoint options - fstype source superoptions"
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split(' ');
        let (fstype, _, super_options) = (right.next()?, right.next()?, right.next()?);
        let has = fstype == "cgroup" && super_options.split(',').any(|o| o == controller);
        let root = left.split(' ').nth(3)?;
        let mount_point = left.split(' ').nth(4)?;
        (has && root == "/").then(|| PathBuf::from(mount_point))
    })?;
    let dir = mount.join(own.trim_start_matches('/'));
    nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK)
        .is_ok()
        .then_some((dir, own))
}
