//! What the connects and sends netbox makes for CMD may hold at once (connector.rs,
//! sender.rs): bytes read from CMD and file descriptors (copies of CMD's sockets and of
//! the fds its messages pass, the files its addresses name). Both lie outside CMD's own
//! limits (`--memory`, RLIMIT_NOFILE) and inside netbox's, which the proxy and the log
//! need too, so they are bounded here: a worker that needs more waits until some is given
//! back (or its caller is gone); the watcher's thread, which must never wait, is told no.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Bytes and descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount {
    pub bytes: usize,
    pub fds: usize,
}

pub struct Budget {
    left: Mutex<Amount>,
    freed: Condvar,
    capacity: Amount,
}

/// An amount taken from a `Budget`, given back when dropped.
pub struct Held {
    budget: Arc<Budget>,
    amount: Amount,
}

impl Budget {
    pub fn new(capacity: Amount) -> Arc<Budget> {
        Arc::new(Budget {
            left: Mutex::new(capacity),
            freed: Condvar::new(),
            capacity,
        })
    }

    /// What a single call may ask for at most (more is cut to this).
    fn clamp(&self, want: Amount) -> Amount {
        Amount {
            bytes: want.bytes.min(self.capacity.bytes),
            fds: want.fds.min(self.capacity.fds),
        }
    }

    /// Takes `want` if that much is left now.
    pub fn try_take(self: &Arc<Self>, want: Amount) -> Option<Held> {
        let want = self.clamp(want);
        let mut left = self.left.lock().ok()?;
        if !covers(&left, want) {
            return None;
        }
        Some(self.held(&mut left, want))
    }

    /// Takes `want` once that much is left; `None` if the caller is gone meanwhile
    /// (`caller_waits`, asked now and then while waiting).
    pub fn take(self: &Arc<Self>, want: Amount, caller_waits: &dyn Fn() -> bool) -> Option<Held> {
        let want = self.clamp(want);
        let mut left = self.left.lock().ok()?;
        while !covers(&left, want) {
            let (guard, _) = self
                .freed
                .wait_timeout(left, Duration::from_millis(100))
                .ok()?;
            left = guard;
            if !covers(&left, want) && !caller_waits() {
                return None;
            }
        }
        Some(self.held(&mut left, want))
    }

    /// Takes `want` out of `left` (which covers it).
    fn held(self: &Arc<Self>, left: &mut Amount, want: Amount) -> Held {
        left.bytes -= want.bytes;
        left.fds -= want.fds;
        Held {
            budget: Arc::clone(self),
            amount: want,
        }
    }
}

/// Whether `left` holds `want`.
fn covers(left: &Amount, want: Amount) -> bool {
    left.bytes >= want.bytes && left.fds >= want.fds
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut left) = self.budget.left.lock() {
            left.bytes += self.amount.bytes;
            left.fds += self.amount.fds;
        }
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_held_comes_back_and_a_wait_ends_with_its_caller() {
        let budget = Budget::new(Amount { bytes: 10, fds: 2 });
        let held = budget.try_take(Amount { bytes: 8, fds: 2 }).unwrap();
        assert!(budget.try_take(Amount { bytes: 1, fds: 1 }).is_none());
        assert!(budget
            .take(Amount { bytes: 3, fds: 0 }, &|| false)
            .is_none());
        drop(held);
        assert!(budget.try_take(Amount { bytes: 10, fds: 2 }).is_some());
        // More than the whole budget is cut to it rather than waited for in vain.
        assert!(budget
            .take(Amount { bytes: 99, fds: 0 }, &|| true)
            .is_some());
    }
}
