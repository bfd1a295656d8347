//! Where netbox runs (a container engine, Kubernetes, LXC, a CI runner; AppArmor's
//! restriction of user namespaces; user namespaces switched off), so that a step the
//! kernel refuses there is said as the setting that allows it, not as a bare EPERM. Read
//! from the marks each engine leaves (podman's /run/.containerenv, Docker's /.dockerenv,
//! the `container` variable systemd and LXC set, Kubernetes' service variables and
//! service-account mount) and from the kernel's own switches. Nothing here decides
//! anything: the sandbox is built or refused the same way wherever it runs.

use std::path::Path;

/// A container engine or orchestrator netbox can name a setting of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Podman,
    Docker,
    Kubernetes,
    Lxc,
    /// Another one that says it is a container (`container=...`): named as it says.
    Other,
}

/// What netbox found about the place it runs in.
#[derive(Debug, Clone, Default)]
pub struct Place {
    pub engine: Option<Engine>,
    /// The engine's own name for itself, when it gave one (`container=` value).
    pub engine_name: Option<String>,
    /// The CI service, when a known one's variables are set.
    pub ci: Option<&'static str>,
    /// /proc has paths covered by other mounts (an engine's masked paths): the kernel then
    /// refuses a user namespace a /proc of its own.
    pub proc_masked: bool,
    /// Ubuntu 24.04+: AppArmor refuses unprivileged user namespaces to unconfined programs.
    pub apparmor_restricts_userns: bool,
    /// A sysctl that switches user namespaces off, as `name=value`.
    pub userns_switched_off: Option<&'static str>,
    /// Root without CAP_SETFCAP (`--cap-drop ALL`): since Linux 5.12 the kernel lets no
    /// one map the host's uid 0 into a user namespace without it.
    pub root_without_setfcap: bool,
}

/// A step the sandbox needs that a place can refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Creating a user namespace (clone/unshare with CLONE_NEWUSER).
    UserNamespace,
    /// Mounting a /proc of the sandbox's own (pid namespace).
    OwnProc,
    /// Any other mount or namespace call a seccomp profile refused.
    Syscalls,
    /// A resource limit (`--cpus`, `--pids`) that needs a cgroup netbox may not write.
    Limits,
}

impl Place {
    /// Looks at the running system; never fails (what cannot be read is not known).
    pub fn detect() -> Place {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let said = env("container")
            .map(|v| v.to_string_lossy().into_owned())
            .or_else(|| read_trimmed("/run/systemd/container"));
        let engine =
            if Path::new("/run/.containerenv").exists() || said.as_deref() == Some("podman") {
                Some(Engine::Podman)
            } else if Path::new("/.dockerenv").exists() || said.as_deref() == Some("docker") {
                Some(Engine::Docker)
            } else if env("KUBERNETES_SERVICE_HOST").is_some()
                || Path::new("/var/run/secrets/kubernetes.io").exists()
            {
                Some(Engine::Kubernetes)
            } else if matches!(
                said.as_deref(),
                Some("lxc" | "lxc-libvirt" | "incus" | "lxd")
            ) || Path::new("/dev/lxd").exists()
            {
                Some(Engine::Lxc)
            } else if said.is_some() {
                Some(Engine::Other)
            } else {
                None
            };
        // A pod's containers are podman's or Docker's too, but its settings are the pod's.
        let engine = match engine {
            Some(Engine::Podman | Engine::Docker) if env("KUBERNETES_SERVICE_HOST").is_some() => {
                Some(Engine::Kubernetes)
            }
            other => other,
        };
        Place {
            engine,
            engine_name: said,
            ci: ci_service(&env),
            proc_masked: proc_is_masked(),
            apparmor_restricts_userns: read_trimmed(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            )
            .as_deref()
                == Some("1"),
            root_without_setfcap: nix::unistd::geteuid().is_root() && !has_setfcap(),
            userns_switched_off: if read_trimmed("/proc/sys/kernel/unprivileged_userns_clone")
                .as_deref()
                == Some("0")
            {
                Some("kernel.unprivileged_userns_clone=0")
            } else if read_trimmed("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
                Some("user.max_user_namespaces=0")
            } else {
                None
            },
        }
    }

    /// The place in a few words (`a podman container on GitHub Actions`), or `None` on a
    /// plain machine.
    pub fn describe(&self) -> Option<String> {
        let engine = self.engine.map(|engine| match engine {
            Engine::Podman => "a podman container".to_owned(),
            Engine::Docker => "a Docker container".to_owned(),
            Engine::Kubernetes => "a Kubernetes pod".to_owned(),
            Engine::Lxc => "an LXC container".to_owned(),
            Engine::Other => format!(
                "a container ({})",
                crate::printable::printable(self.engine_name.as_deref().unwrap_or("unknown"))
            ),
        });
        let mut facts = Vec::new();
        if self.apparmor_restricts_userns {
            facts.push("AppArmor restricts user namespaces".to_owned());
        }
        if let Some(switch) = self.userns_switched_off {
            facts.push(format!("user namespaces off ({switch})"));
        }
        let base = match (engine, self.ci) {
            (Some(engine), Some(ci)) => Some(format!("{engine} on {ci}")),
            (Some(engine), None) => Some(engine),
            (None, Some(ci)) => Some(format!("a {ci} runner")),
            (None, None) => None,
        };
        match (base, facts.is_empty()) {
            (Some(base), true) => Some(base),
            (Some(base), false) => Some(format!("{base}; {}", facts.join("; "))),
            (None, false) => Some(facts.join("; ")),
            (None, true) => None,
        }
    }

    /// The engine and the CI service, in a few words, if any (what a fix is said for).
    fn engine_and_ci(&self) -> Option<String> {
        Place {
            apparmor_restricts_userns: false,
            userns_switched_off: None,
            ..self.clone()
        }
        .describe()
    }

    /// The setting that grants `need` here, as one sentence, when netbox knows it.
    pub fn fix(&self, need: Need) -> Option<String> {
        let here = self
            .engine_and_ci()
            .map_or_else(String::new, |d| format!("in {d}: "));
        let said = |fix: &str| Some(format!("{here}{fix}"));
        match need {
            Need::UserNamespace if self.root_without_setfcap => said(
                "root without CAP_SETFCAP may not map root into a user namespace (Linux \
                 5.12+): run netbox as a user other than root (--user 1000 for podman and \
                 Docker, runAsUser for Kubernetes), or keep CAP_SETFCAP (--cap-add SETFCAP)",
            ),
            Need::UserNamespace if self.apparmor_restricts_userns => said(
                "AppArmor refuses unprivileged user namespaces: load netbox's profile \
                 (deploy/apparmor/netbox, `apparmor_parser -r`), or set \
                 kernel.apparmor_restrict_unprivileged_userns=0",
            ),
            Need::UserNamespace if self.userns_switched_off.is_some() => {
                said(match self.userns_switched_off {
                    Some("kernel.unprivileged_userns_clone=0") => {
                        "unprivileged user namespaces are disabled: sysctl -w \
                         kernel.unprivileged_userns_clone=1"
                    }
                    _ => "user namespaces are disabled: sysctl -w user.max_user_namespaces=15000",
                })
            }
            Need::UserNamespace | Need::Syscalls => match self.engine {
                Some(Engine::Podman) => said(
                    "the container's seccomp profile refuses it: run the container with \
                     --security-opt seccomp=deploy/seccomp/netbox-podman.json (podman's \
                     default plus what netbox needs)",
                ),
                Some(Engine::Docker) => said(
                    "Docker's default seccomp profile refuses user namespaces: run the \
                     container with --security-opt seccomp=deploy/seccomp/netbox-docker.json \
                     (Docker's default plus what netbox needs)",
                ),
                Some(Engine::Kubernetes) => said(
                    "set the container's securityContext.seccompProfile to netbox's \
                     (type: Localhost, localhostProfile: netbox.json; deploy/kubernetes/\
                     pod-sandboxed.yaml)",
                ),
                Some(Engine::Lxc) => said(
                    "allow nesting: security.nesting=true (Incus, LXD), or \
                     lxc.include = /usr/share/lxc/config/nesting.conf (LXC)",
                ),
                Some(Engine::Other) => said(
                    "the container refuses it: allow unshare(CLONE_NEWUSER) and mount(2) in \
                     its seccomp profile",
                ),
                None => None,
            },
            Need::OwnProc if self.proc_masked => match self.engine {
                Some(Engine::Podman | Engine::Docker) => said(
                    "the container masks paths in /proc, so the kernel refuses the sandbox a \
                     /proc of its own: run the container with --security-opt \
                     systempaths=unconfined, and in a user namespace (--userns=auto, rootless \
                     podman, Docker's userns-remap) or as a user other than root: unmasked, a \
                     rootful container's root could write the host's /proc/sys",
                ),
                Some(Engine::Kubernetes) => said(
                    "the pod masks paths in /proc, so the kernel refuses the sandbox a /proc \
                     of its own: set securityContext.procMount: Unmasked (with hostUsers: \
                     false; deploy/kubernetes/pod-sandboxed.yaml)",
                ),
                Some(Engine::Lxc) => said(
                    "the container covers paths in /proc (lxcfs), so the kernel refuses the \
                     sandbox a /proc of its own: allow nesting (security.nesting=true, or \
                     lxc.mount.auto = proc:rw sys:rw cgroup:rw)",
                ),
                _ => said(
                    "paths in /proc are covered by other mounts, so the kernel refuses the \
                     sandbox a /proc of its own: run where /proc is not masked",
                ),
            },
            Need::OwnProc => None,
            Need::Limits => match self.engine {
                Some(Engine::Podman | Engine::Docker) => said(
                    "the container's own limits bind netbox and the command alike: set them \
                     on the container (--cpus, --memory, --pids-limit) and drop netbox's",
                ),
                Some(Engine::Kubernetes) => said(
                    "the pod's own limits bind netbox and the command alike: set the \
                     container's resources.limits and drop netbox's",
                ),
                Some(Engine::Lxc) => said(
                    "the container's own limits bind netbox and the command alike: set them \
                     on the container (limits.cpu, limits.memory, limits.processes) and drop \
                     netbox's",
                ),
                _ => None,
            },
        }
    }
}

/// The CI service whose variables are set, if any.
fn ci_service(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<&'static str> {
    [
        ("GITHUB_ACTIONS", "GitHub Actions"),
        ("GITLAB_CI", "GitLab CI"),
        ("BUILDKITE", "Buildkite"),
        ("CIRCLECI", "CircleCI"),
        ("JENKINS_URL", "Jenkins"),
        ("TF_BUILD", "Azure Pipelines"),
        ("CI", "CI"),
    ]
    .into_iter()
    .find(|(var, _)| env(var).is_some_and(|v| v != "false" && v != "0"))
    .map(|(_, name)| name)
}

/// Whether a mount covers a path inside /proc (podman's and Docker's masked and read-only
/// paths, lxcfs's files): the kernel's "too revealing" rule then refuses a new procfs to
/// anyone but the host's root. binfmt_misc (and systemd's automount of it) lies on an
/// empty directory, which the rule allows.
fn proc_is_masked() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|table| {
        table.lines().any(|line| {
            let at = line.split(' ').nth(4).unwrap_or("");
            let kind = line
                .split(" - ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .unwrap_or("");
            at.starts_with("/proc/") && !matches!(kind, "binfmt_misc" | "autofs")
        })
    })
}

/// Whether CAP_SETFCAP (31) is in this process's effective set.
fn has_setfcap() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << 31) != 0)
    })
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_podman_container_with_masked_proc_is_told_the_setting() {
        let place = Place {
            engine: Some(Engine::Podman),
            proc_masked: true,
            ..Place::default()
        };
        let fix = place.fix(Need::OwnProc).unwrap();
        assert!(fix.starts_with("in a podman container: "), "{fix}");
        assert!(
            fix.contains("--security-opt systempaths=unconfined"),
            "{fix}"
        );
    }

    #[test]
    fn a_plain_machine_is_not_described_and_has_no_proc_fix() {
        let place = Place::default();
        assert_eq!(place.describe(), None);
        assert_eq!(place.fix(Need::OwnProc), None);
        assert_eq!(place.fix(Need::Syscalls), None);
    }

    #[test]
    fn apparmor_comes_before_the_engine_for_user_namespaces() {
        let place = Place {
            engine: Some(Engine::Docker),
            ci: Some("GitHub Actions"),
            apparmor_restricts_userns: true,
            ..Place::default()
        };
        assert_eq!(
            place.describe().unwrap(),
            "a Docker container on GitHub Actions; AppArmor restricts user namespaces"
        );
        assert!(place
            .fix(Need::UserNamespace)
            .unwrap()
            .contains("deploy/apparmor/netbox"));
    }
}
