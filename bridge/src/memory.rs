//! Giving back what a burst of connections freed. glibc's malloc keeps freed memory in its
//! arenas and returns only the top of each by itself: measured, 1,000 idle tunnels took a
//! bridge from 4.6 to 36.6 MB of RSS, and it stayed at 36.6 MB once they had all closed.
//! So once many connections have closed, the bridge asks malloc to return every free page,
//! at most once a second, through the function its caller gives (`BridgeConfig::trim_memory`:
//! `malloc_trim`, an unsafe call this crate leaves to netbox's `sys/`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Connections closed since the bridge started.
static CLOSED: AtomicU64 = AtomicU64::new(0);

/// Closed connections worth a trim: fewer hold too little to matter.
const TRIM_AFTER_CLOSED: u64 = 64;

/// Counts one closed connection.
pub fn connection_closed() {
    CLOSED.fetch_add(1, Ordering::Relaxed);
}

/// Calls `trim` once a second when enough connections have closed since the last call;
/// runs until dropped.
pub async fn return_freed_memory(trim: fn()) {
    let mut trimmed_at = CLOSED.load(Ordering::Relaxed);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let closed = CLOSED.load(Ordering::Relaxed);
        if closed - trimmed_at >= TRIM_AFTER_CLOSED {
            trimmed_at = closed;
            // A few milliseconds of work on a large heap: off the runtime's threads.
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    }
}
