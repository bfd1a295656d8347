//! Where netbox and the sandbox run while it sets up and proves itself. On a kernel that
//! does not preempt itself (PREEMPT_NONE, the default of many distribution and VM
//! kernels), a task woken by one that goes on working is often queued on the waker's CPU
//! and waits there until the waker sleeps, even with another CPU idle: a new thread behind
//! its creator (measured ~0.35 ms for the sandbox's mounting thread, behind the creation
//! of the network namespace), netbox behind the sandbox that hands it its listeners or
//! connects to its bridge (a Unix-socket message and a loopback connection both wake with
//! the hint that the waker sleeps next; the probe waited ~0.13 ms for the bridge).
//!
//! So from the clone until the probe has reported, netbox keeps to the CPU it cloned on,
//! pid 1 keeps off it, and pid 1's mounting thread keeps off pid 1's CPU; netbox and pid 1
//! allow themselves every CPU again before anything of CMD's starts (measured: 5.31 ->
//! 4.99 ms for `netbox -- true`). These are hints: a failure leaves things as they were,
//! and with one CPU there is nothing to spread.

use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The calling thread.
const THIS_THREAD: Pid = Pid::from_raw(0);

/// The CPUs the calling thread may use.
pub fn allowed() -> Option<CpuSet> {
    sched_getaffinity(THIS_THREAD).ok()
}

/// The CPU the caller runs on.
pub fn current() -> Option<usize> {
    sched_getcpu().ok()
}

/// Keeps `task` off `cpu`, within `allowed`, if another CPU is left.
pub fn keep_off(task: Pid, allowed: CpuSet, cpu: usize) {
    if let Some(others) = without(allowed, cpu) {
        let _ = sched_setaffinity(task, &others);
    }
}

/// Moves the calling thread off `cpu`: to another CPU it may use now or, if it may use no
/// other, of `fallback`.
pub fn move_off(cpu: usize, fallback: Option<CpuSet>) {
    let others = allowed()
        .and_then(|now| without(now, cpu))
        .or_else(|| fallback.and_then(|set| without(set, cpu)));
    if let Some(others) = others {
        let _ = sched_setaffinity(THIS_THREAD, &others);
    }
}

/// Keeps the calling thread on `cpu` alone.
pub fn stay_on(cpu: usize) {
    let mut one = CpuSet::new();
    if one.set(cpu).is_ok() {
        let _ = sched_setaffinity(THIS_THREAD, &one);
    }
}

/// Allows the calling thread every CPU of `allowed` again: what netbox itself was
/// allowed. Where that is every CPU the host lets it use, the thread asks for all of them
/// instead (the kernel keeps it within its cgroup's cpuset), so that, like any process
/// started without netbox, CMD follows a cpuset that grows later; `allowed` itself only
/// where it was narrower (netbox started under taskset).
pub fn allow(allowed: CpuSet) {
    let mut every = CpuSet::new();
    for cpu in 0..CpuSet::count() {
        let _ = every.set(cpu);
    }
    if sched_setaffinity(THIS_THREAD, &every).is_ok()
        && sched_getaffinity(THIS_THREAD).is_ok_and(|now| now == allowed)
    {
        return;
    }
    let _ = sched_setaffinity(THIS_THREAD, &allowed);
}

/// `allowed` without `cpu`, if some CPU is left.
fn without(mut allowed: CpuSet, cpu: usize) -> Option<CpuSet> {
    allowed.unset(cpu).ok()?;
    (0..CpuSet::count())
        .any(|c| allowed.is_set(c).unwrap_or(false))
        .then_some(allowed)
}
