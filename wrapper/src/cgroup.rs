//! `--pids` for root: RLIMIT_NPROC does not bind a process whose real uid is host root
//! (kernel/fork.c exempts INIT_USER), so when netbox runs as root the sandbox is started in
//! a pids cgroup of its own instead, below netbox's own cgroup in the cgroup v1 pids
//! hierarchy. For every other user the rlimit holds (counted per user namespace, so only
//! the sandbox's own processes count) and no cgroup is needed. Either way the live probe
//! proves the limit (probe.rs); a host with neither gets an error naming `--pids`.
//!
//! The sandbox is put in the cgroup by birth: netbox moves itself in, clones pid 1 (which
//! inherits the cgroup), and moves itself back, all while it is still single-threaded, so
//! no process of the sandbox ever runs outside it.
//!
//! Two levels: the limit is set on `netbox-SESSION` and the sandbox lives in
//! `netbox-SESSION/sandbox`. The cgroup files belong to host root, as the sandbox's
//! processes do when netbox runs as root: a CMD that reached the hierarchy (a nested user
//! and cgroup namespace) could rewrite its own cgroup's `pids.max`, but never its
//! parent's, which binds it all the same. (Nested user namespaces are refused outright
//! for host root — config.rs — since through them CMD could also write the other
//! hierarchies' files of netbox's own cgroups; the two levels are a second wall.)

use std::path::{Path, PathBuf};

use crate::error::WrapperError;

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

/// A pids cgroup made for one run; removed again on drop, once the sandbox is gone.
pub struct PidsCgroup {
    /// `netbox-SESSION`, which holds the limit.
    dir: PathBuf,
    /// `netbox-SESSION/sandbox`, where the sandbox lives.
    inner: PathBuf,
    home: PathBuf,
}

impl PidsCgroup {
    /// Creates `netbox-SESSION` in netbox's own pids cgroup, allowing `max` processes.
    pub fn create(session: &str, max: u64) -> Result<PidsCgroup, WrapperError> {
        let home = own_pids_cgroup().ok_or_else(|| {
            WrapperError::Usage(
                "--pids cannot be enforced here: netbox runs as root, which RLIMIT_NPROC \
                 does not bind, and there is no cgroup v1 pids hierarchy to use instead; \
                 run netbox as an ordinary user"
                    .into(),
            )
        })?;
        let dir = home.join(format!("netbox-{session}"));
        let failed = |what: &str, dir: &Path, e: std::io::Error| WrapperError::Setup {
            step: "pids cgroup".into(),
            detail: format!("{what} {}: {e}", dir.display()),
            hint: None,
        };
        std::fs::create_dir(&dir).map_err(|e| failed("create", &dir, e))?;
        // From here on, dropping the value removes the directories again.
        let inner = dir.join("sandbox");
        let cgroup = PidsCgroup { dir, inner, home };
        std::fs::write(cgroup.dir.join("pids.max"), max.to_string())
            .map_err(|e| failed("set pids.max in", &cgroup.dir, e))?;
        std::fs::create_dir(&cgroup.inner).map_err(|e| failed("create", &cgroup.inner, e))?;
        Ok(cgroup)
    }

    /// Moves the calling process into the cgroup.
    pub fn enter(&self) -> Result<(), WrapperError> {
        move_self(&self.inner)
    }

    /// Moves the calling process back to where it was.
    pub fn leave(&self) -> Result<(), WrapperError> {
        move_self(&self.home)
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // The sandbox has been reaped; its processes leave the cgroup as they exit, which
        // can trail the reap by a moment. CMD may have made cgroups of its own below.
        for _ in 0..100 {
            if remove_tree(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        crate::say(&format!(
            "netbox: warning: could not remove the pids cgroup {}",
            self.dir.display()
        ));
    }
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

fn move_self(dir: &Path) -> Result<(), WrapperError> {
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).map_err(|e| {
        WrapperError::Setup {
            step: "pids cgroup".into(),
            detail: format!("join {}: {e}", dir.display()),
            hint: None,
        }
    })
}

/// netbox's own cgroup in the v1 pids hierarchy, if there is one it may write to.
fn own_pids_cgroup() -> Option<PathBuf> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroups.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "pids")
            .then(|| path.to_owned())
    })?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        // "... mountpoint options - fstype source superoptions"
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split(' ');
        let (fstype, _, super_options) = (right.next()?, right.next()?, right.next()?);
        let is_pids = fstype == "cgroup" && super_options.split(',').any(|o| o == "pids");
        let root = left.split(' ').nth(3)?;
        let mount_point = left.split(' ').nth(4)?;
        (is_pids && root == "/").then(|| PathBuf::from(mount_point))
    })?;
    let dir = mount.join(own.trim_start_matches('/'));
    nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK)
        .is_ok()
        .then_some(dir)
}
