//! Where netbox's threads run. On a kernel that does not preempt itself (PREEMPT_NONE, the
//! default of many distribution and VM kernels), a new thread is often queued on its
//! creator's CPU and waits there until the creator sleeps, even with another CPU idle:
//! measured ~0.35 ms for the sandbox's mounting thread, queued behind the creation of the
//! network namespace. Moving it is a hint: any failure leaves things as they were.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The calling thread.
const THIS_THREAD: Pid = Pid::from_raw(0);

/// Moves the calling thread to any CPU it may use but `cpu`, if there is one, and keeps
/// it off `cpu` (for a thread that ends soon).
pub fn move_off(cpu: usize) {
    if let Ok(allowed) = sched_getaffinity(THIS_THREAD) {
        if let Some(others) = without(allowed, cpu) {
            let _ = sched_setaffinity(THIS_THREAD, &others);
        }
    }
}

/// `allowed` without `cpu`, if some CPU is left.
fn without(mut allowed: CpuSet, cpu: usize) -> Option<CpuSet> {
    allowed.unset(cpu).ok()?;
    (0..CpuSet::count())
        .any(|c| allowed.is_set(c).unwrap_or(false))
        .then_some(allowed)
}
