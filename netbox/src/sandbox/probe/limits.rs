//! The privilege and limit rows: capabilities dropped, io_uring refused, resource limits
//! and cgroup limits held, each with its control.

use std::ffi::CString;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use bridge::log::records::{Check, Outcome};

use super::verdict::{check, failed_check, refused, succeeded};
use super::ProbeInput;

pub(super) fn privileges(input: &ProbeInput) -> Check {
    // Lossy: netbox's own name there (`Name:`, cut at 15 bytes) may end inside a
    // character; the fields read are numbers.
    let status = std::fs::read("/proc/self/status").unwrap_or_default();
    let status = String::from_utf8_lossy(&status);
    let field = |name: &str| status_field(&status, name).unwrap_or("?").to_owned();
    let mut forbidden: Vec<Outcome> = ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
        .iter()
        .map(|name| {
            let value = field(name);
            Outcome {
                attempt: format!("hold any capability ({name})"),
                ok: value.chars().all(|c| c == '0') && !value.is_empty(),
                result: value,
            }
        })
        .collect();
    let nnp = field("NoNewPrivs:");
    forbidden.push(Outcome {
        attempt: "gain privileges on exec (no_new_privs must be 1)".into(),
        ok: nnp == "1",
        result: nnp,
    });
    forbidden.push(refused(
        "remount / read-write".into(),
        remount_root_rw(),
        &[libc::EPERM],
    ));
    if input.nested_userns_forbidden {
        forbidden.push(refused(
            "create a user namespace (ENOSPC)".into(),
            create_user_namespace(),
            &[libc::ENOSPC],
        ));
    }
    check("privileges dropped", forbidden, Vec::new())
}

/// io_uring, refused by netbox's filter as by a kernel without it (ENOSYS); the control: a
/// syscall just past io_uring's numbers (pidfd_open) still reaches the kernel.
pub(super) fn io_uring() -> Check {
    let setup = crate::sys::seccomp::try_io_uring_setup().map(drop);
    let forbidden = vec![refused(
        "set up an io_uring (ENOSYS)".into(),
        setup,
        &[libc::ENOSYS],
    )];
    let pidfd = crate::sys::process::pidfd_open(nix::unistd::getpid()).map(drop);
    let control = vec![succeeded("open a pidfd of its own".into(), pidfd)];
    check("io_uring refused", forbidden, control)
}

/// Tries to enter a new user namespace, which must not be possible (ENOSPC: the sandbox's
/// limit is 0). pid 1 tries itself: a failed unshare(2) costs ~3 µs against ~55 µs for a
/// failed clone(2) (measured), which allocates and frees a task and its kernel stack
/// before it gets to the namespace. Should it succeed, pid 1 is in a new user namespace,
/// the check fails and CMD never starts. unshare refuses a process the kernel still counts
/// more than one thread in (EINVAL): the mounting thread has been joined, but may not
/// have quite left; then a child tries instead.
pub(super) fn create_user_namespace() -> std::io::Result<()> {
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        Err(nix::errno::Errno::EINVAL) => {
            // pid 1 is single-threaded as far as user space goes: the probe starts no
            // thread.
            let child =
                crate::sys::process::clone_process(nix::sched::CloneFlags::CLONE_NEWUSER, || 0)?;
            let _ = nix::sys::wait::waitpid(child, None);
            Ok(())
        }
        result => result.map_err(std::io::Error::from),
    }
}

/// The escape the capability drop must prevent; EPERM is the expected answer.
pub(super) fn remount_root_rw() -> std::io::Result<()> {
    let root = CString::new("/").unwrap_or_default();
    nix::mount::mount(
        None::<&str>,
        root.as_c_str(),
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT | nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(std::io::Error::from)
}

/// The resource-limit control, run in a forked child of pid 1 with the limits applied as
/// CMD gets them: each requested limit must be set (hard and soft), an allocation or a
/// write past it must fail, and one inside it must succeed.
pub(super) fn resource_limits(input: &ProbeInput) -> Check {
    const NAME: &str = "resource limits";
    let child_failed =
        |detail: String| failed_check(NAME, "run the limit checks in a child", detail);
    let (reader, writer) = match nix::unistd::pipe() {
        Ok(pair) => pair,
        Err(e) => return child_failed(e.to_string()),
    };
    // pid 1 is single-threaded: the probe starts no thread.
    let child = match crate::sys::process::fork() {
        Ok(crate::sys::process::Forked::Child) => {
            drop(reader);
            let outcomes = limit_outcomes(input);
            let mut writer = std::fs::File::from(writer);
            let ok = serde_json::to_writer(&mut writer, &outcomes).is_ok();
            crate::sys::process::exit_child(if ok { 0 } else { 1 })
        }
        Ok(crate::sys::process::Forked::Parent { child }) => child,
        Err(e) => return child_failed(e.to_string()),
    };
    drop(writer);
    let mut text = String::new();
    let read = std::fs::File::from(reader).read_to_string(&mut text);
    let _ = nix::sys::wait::waitpid(child, None);
    match read
        .ok()
        .and_then(|_| serde_json::from_str::<(Vec<Outcome>, Vec<Outcome>)>(&text).ok())
    {
        Some((forbidden, control)) => check(NAME, forbidden, control),
        None => child_failed("the child reported nothing".into()),
    }
}

/// In the probe's child: applies the limits and tries each. Returns (forbidden, control).
pub(super) fn limit_outcomes(input: &ProbeInput) -> (Vec<Outcome>, Vec<Outcome>) {
    use nix::sys::resource::{getrlimit, Resource};
    let limits = input.limits;
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    if let Err(e) = crate::limits::apply(&limits) {
        forbidden.push(Outcome {
            attempt: "set the limits".into(),
            result: e.to_string(),
            ok: false,
        });
        return (forbidden, control);
    }
    let is_set = |resource, value: u64, unit: &str| {
        let got = getrlimit(resource);
        Outcome {
            attempt: format!("{resource:?} is {value} {unit}, soft and hard"),
            ok: got == Ok((value, value)),
            result: format!("{got:?}"),
        }
    };
    if let Some(bytes) = limits.memory {
        control.push(is_set(Resource::RLIMIT_AS, bytes, "bytes"));
        forbidden.push(reservation(bytes, false));
        // This child is a copy of pid 1, whose own footprint counts against the limit;
        // half of what is left must still be available.
        let used = vm_size().unwrap_or(u64::MAX);
        control.push(reservation(bytes.saturating_sub(used) / 2, true));
    }
    if let Some(bytes) = limits.file_size {
        control.push(is_set(Resource::RLIMIT_FSIZE, bytes, "bytes"));
        let (refused_write, allowed_write) = file_size_attempts(&input.temp_dir, bytes);
        forbidden.push(refused_write);
        control.push(allowed_write);
    }
    if let (Some(pids), Some(count)) = (limits.pids, limits.sandbox_pids()) {
        // Set for root too, where a cgroup does the enforcing (cgroup.rs).
        control.push(is_set(Resource::RLIMIT_NPROC, count, "processes"));
        let (refused_fork, allowed_forks) = process_attempts(pids);
        forbidden.push(refused_fork);
        control.push(allowed_forks);
    }
    (forbidden, control)
}

/// Each cgroup limit reads back on the cgroup that holds it, the sandbox is in that
/// cgroup's child, and neither the limit nor a way back out of the cgroup is writable.
pub(super) fn cgroup_limits(input: &ProbeInput) -> Check {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut forbidden = Vec::new();
    let mut control = Vec::new();
    let mut homes = Vec::new();
    for limit in &input.cgroup_limits {
        let value = std::fs::read_to_string(&limit.file);
        control.push(Outcome {
            attempt: format!("{} reads {}", limit.file.display(), limit.value),
            ok: value.as_deref().is_ok_and(|v| v.trim() == limit.value),
            result: match &value {
                Ok(v) => v.trim().to_owned(),
                Err(e) => e.to_string(),
            },
        });
        forbidden.push(refused(
            format!("open {} for writing", limit.file.display()),
            open_for_writing(&limit.file),
            &[libc::EROFS, libc::EACCES, libc::EPERM],
        ));
        if !homes.contains(&limit.home_procs) {
            homes.push(limit.home_procs.clone());
            let member = own.lines().find(|line| {
                let mut fields = line.splitn(3, ':');
                let controllers = fields.nth(1).unwrap_or("");
                controllers.split(',').any(|c| c == limit.controller)
                    && fields.next() == Some(limit.member_of.as_str())
            });
            control.push(Outcome {
                attempt: format!("in the {} cgroup {}", limit.controller, limit.member_of),
                ok: member.is_some(),
                result: member.unwrap_or("not a member").to_owned(),
            });
            forbidden.push(refused(
                format!("leave it: open {} for writing", limit.home_procs.display()),
                open_for_writing(&limit.home_procs),
                &[libc::EROFS, libc::EACCES, libc::EPERM],
            ));
        }
    }
    check("cgroup limits", forbidden, control)
}

/// Opens an existing file for writing without writing or truncating anything.
pub(super) fn open_for_writing(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path).map(drop)
}

/// Starts processes until the limit: pid 1 and this child are two of the sandbox's
/// `pids + 1`, so `pids - 1` more must start and the next must fail with EAGAIN. The
/// children wait on a pipe and exit together when it closes.
pub(super) fn process_attempts(pids: u64) -> (Outcome, Outcome) {
    let allowed = pids - 1;
    let mut started = Vec::new();
    let mut refusal = None;
    match nix::unistd::pipe() {
        Ok((hold, release)) => {
            for _ in 0..=allowed {
                // Single-threaded: this is a forked child of pid 1, which starts no thread.
                match crate::sys::process::fork() {
                    Ok(crate::sys::process::Forked::Child) => {
                        drop(release);
                        let mut byte = [0u8; 1];
                        let _ = nix::unistd::read(&hold, &mut byte);
                        crate::sys::process::exit_child(0)
                    }
                    Ok(crate::sys::process::Forked::Parent { child }) => started.push(child),
                    Err(e) => {
                        refusal = Some(e);
                        break;
                    }
                }
            }
            drop(release);
            for child in &started {
                let _ = nix::sys::wait::waitpid(*child, None);
            }
        }
        Err(e) => refusal = Some(std::io::Error::from(e)),
    }
    let count = started.len() as u64;
    let past = match refusal {
        Some(e) if count == allowed => Err(e),
        Some(e) => Err(std::io::Error::other(format!(
            "only {count} started before: {e}"
        ))),
        None => Ok(()),
    };
    (
        refused(
            format!("start a process past the {pids} CMD may have"),
            past,
            &[libc::EAGAIN],
        ),
        Outcome {
            attempt: format!("start {allowed} processes"),
            ok: count >= allowed,
            result: format!("{count} started"),
        },
    )
}

/// Reserves (never touches) `bytes` of address space; `expect_ok` says which answer is
/// right. Only RLIMIT_AS can refuse it: it is not counted as committed memory, so a limit
/// above the machine's RAM is checked as well as a small one.
pub(super) fn reservation(bytes: u64, expect_ok: bool) -> Outcome {
    let attempt = format!("reserve {} MiB of address space", bytes >> 20);
    if bytes == 0 {
        return Outcome {
            attempt,
            result: "netbox's own footprint already fills the limit".into(),
            ok: false,
        };
    }
    let got = usize::try_from(bytes)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EOVERFLOW))
        .and_then(crate::sys::memory::reserve_and_release);
    if expect_ok {
        succeeded(attempt, got)
    } else {
        refused(attempt, got, &[libc::ENOMEM])
    }
}

/// Writes one byte at the last offset the limit allows (must work) and one past it (must
/// fail with EFBIG), in an unnamed file in the temp root, sparse so nothing is stored.
pub(super) fn file_size_attempts(temp_dir: &Path, bytes: u64) -> (Outcome, Outcome) {
    use std::os::unix::fs::FileExt;
    // A blocked SIGXFSZ leaves the write to fail with EFBIG instead of killing the child.
    let mut xfsz = nix::sys::signal::SigSet::empty();
    xfsz.add(nix::sys::signal::Signal::SIGXFSZ);
    let _ = xfsz.thread_block();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(temp_dir);
    let write_at = |offset| match &file {
        Ok(file) => file.write_at(b"x", offset).map(drop),
        // io::Error is not Clone: both attempts report the open's failure.
        Err(e) => Err(e.raw_os_error().map_or_else(
            || std::io::Error::other(e.to_string()),
            std::io::Error::from_raw_os_error,
        )),
    };
    let (past, inside) = (write_at(bytes), write_at(bytes - 1));
    (
        refused(
            format!("write a byte at offset {bytes}"),
            past,
            &[libc::EFBIG],
        ),
        succeeded(format!("write a byte at offset {}", bytes - 1), inside),
    )
}

/// This process's address-space size in bytes (VmSize in /proc/self/status).
pub(super) fn vm_size() -> Option<u64> {
    let status = std::fs::read("/proc/self/status").ok()?;
    let status = String::from_utf8_lossy(&status);
    let kib: u64 = status_field(&status, "VmSize:")?
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// The value of the line `name` (e.g. `CapEff:`) in a /proc/PID/status text, trimmed.
pub(super) fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_field_is_read_by_its_name() {
        let status = "Name:\tx\nCapEff:\t0000000000000000\nVmSize:\t  2048 kB\n";
        assert_eq!(status_field(status, "CapEff:"), Some("0000000000000000"));
        assert_eq!(status_field(status, "VmSize:"), Some("2048 kB"));
        assert_eq!(status_field(status, "CapBnd:"), None);
    }
}
