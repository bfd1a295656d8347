//! Where netbox and the sandbox's helper thread run while the sandbox sets up. On a kernel
//! that does not preempt itself (PREEMPT_NONE, the default of many distribution and VM
//! kernels), a task woken by one that goes on working is often queued on the waker's CPU
//! and waits there until the waker sleeps, even with another CPU idle: a new thread behind
//! its creator (measured ~0.35 ms for the sandbox's mounting thread, behind the creation
//! of the network namespace), netbox behind the sandbox that hands it its listeners or
//! connects to its bridge (a Unix-socket message and a loopback connection both wake with
//! the hint that the waker sleeps next; the probe waited ~0.13 ms for the bridge).
//!
//! So from the hand-over of the listeners until the probe has reported, netbox keeps to
//! one CPU, and pid 1's mounting thread keeps off pid 1's CPU. netbox's CPU is the one it
//! cloned on, unless pid 1 (which usually starts there, and stays) says, as it hands the
//! listeners over, that it runs there: then another. Sharing pid 1's CPU, netbox could
//! answer none of the probe's requests to the bridge until the probe stopped to wait for
//! them (measured: a run 0.13 ms longer).
//!
//! The sandbox's pid 1 itself is never given an affinity: CMD inherits from it exactly the
//! CPUs (and the kernel's record of what was asked for, Linux 6.2+) that it would have had
//! without netbox. These are hints: a failure leaves things as they were, and with one CPU
//! there is nothing to spread.

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

/// Moves the calling thread (one that ends soon) to another CPU it may use than `cpu`.
pub fn move_off(cpu: usize) {
    if let Some(others) = allowed().and_then(|now| without(now, cpu)) {
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

/// Allows the calling thread every CPU of `allowed` again.
pub fn allow(allowed: CpuSet) {
    let _ = sched_setaffinity(THIS_THREAD, &allowed);
}

/// The CPU of `allowed` to keep to while `theirs` (if known) is busy: `mine` unless that
/// is `theirs`, else the first other one; `mine` when there is no other.
pub fn apart_from(allowed: &CpuSet, mine: usize, theirs: Option<usize>) -> usize {
    if theirs != Some(mine) {
        return mine;
    }
    (0..CpuSet::count())
        .find(|&c| c != mine && allowed.is_set(c).unwrap_or(false))
        .unwrap_or(mine)
}

/// Gives the CPU up after waking a task that should run now: one woken by a message (or a
/// new process) is queued on the waker's CPU when it can, and there waits until the waker
/// sleeps (see above).
pub fn let_the_woken_run() {
    std::thread::yield_now();
}

/// Gives the CPU up until a new thread says it has moved off this one (`moved`), for a
/// millisecond at most: until then it waits behind its creator.
pub fn wait_until_moved(moved: &std::sync::atomic::AtomicBool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1);
    while !moved.load(std::sync::atomic::Ordering::Acquire) && std::time::Instant::now() < deadline
    {
        std::thread::yield_now();
    }
}

/// `allowed` without `cpu`, if some CPU is left.
fn without(mut allowed: CpuSet, cpu: usize) -> Option<CpuSet> {
    allowed.unset(cpu).ok()?;
    (0..CpuSet::count())
        .any(|c| allowed.is_set(c).unwrap_or(false))
        .then_some(allowed)
}
