//! The bridge's use of the machine: fds and RSS, their peak, how long they take to come
//! back, its log's records and the listener's overflows.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checks::Checks;

/// fds the bridge may hold after a phase beyond its idle count before that is a leak.
pub(crate) const FD_MARGIN: usize = 4;

/// RSS the bridge may hold after a phase: twice idle plus this (glibc keeps some arenas).
pub(crate) const RSS_SLACK_KIB: u64 = 4 << 10;

/// How long fds and RSS get to come back after a phase: a moment for the last connections
/// to end and the bridge's once-a-second return of freed memory, then at most `SETTLE`.
pub(crate) const SETTLE_FIRST: Duration = Duration::from_secs(3);
pub(crate) const SETTLE: Duration = Duration::from_secs(15);

/// The bridge's open fds and resident memory.
#[derive(Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) fds: usize,
    pub(crate) rss_kib: u64,
}

impl Usage {
    pub(crate) fn read(pid: u32) -> Usage {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        Usage { fds, rss_kib }
    }

    pub(crate) fn show(self) -> String {
        format!("{} fds, RSS {:.1} MiB", self.fds, mib(self.rss_kib))
    }
}

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The most fds and RSS seen while a phase runs, sampled every 200 ms.
pub(crate) struct Peak {
    pub(crate) fds: AtomicU64,
    pub(crate) rss_kib: AtomicU64,
    pub(crate) stop: AtomicBool,
}

impl Peak {
    pub(crate) fn watch(pid: u32) -> Arc<Peak> {
        let peak = Arc::new(Peak {
            fds: AtomicU64::new(0),
            rss_kib: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let p = Arc::clone(&peak);
        std::thread::spawn(move || {
            while !p.stop.load(Ordering::Relaxed) {
                let u = Usage::read(pid);
                p.fds
                    .fetch_max(u64::try_from(u.fds).unwrap_or(0), Ordering::Relaxed);
                p.rss_kib.fetch_max(u.rss_kib, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        peak
    }

    pub(crate) fn end(&self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        format!(
            "peak {} fds, RSS {:.1} MiB",
            self.fds.load(Ordering::Relaxed),
            mib(self.rss_kib.load(Ordering::Relaxed))
        )
    }
}

/// Waits `SETTLE_FIRST`, then up to `SETTLE` more for fds and RSS to come back within the
/// bounds of `idle`.
pub(crate) async fn settle(pid: u32, idle: Usage) -> (Usage, Duration) {
    let started = Instant::now();
    tokio::time::sleep(SETTLE_FIRST).await;
    loop {
        let now = Usage::read(pid);
        if within(now, idle) || started.elapsed() > SETTLE_FIRST + SETTLE {
            return (now, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub(crate) fn rss_bound(idle: Usage) -> u64 {
    2 * idle.rss_kib + RSS_SLACK_KIB
}

pub(crate) fn within(now: Usage, idle: Usage) -> bool {
    now.fds <= idle.fds + FD_MARGIN && now.rss_kib <= rss_bound(idle)
}

// ---- the event log ----

/// `net` records by (decision, reason, host), and any cap records.
#[derive(Default)]
pub(crate) struct LogCount {
    pub(crate) by_kind: BTreeMap<String, u64>,
}

impl LogCount {
    /// Records written from byte `from` of the log on.
    pub(crate) fn read(log: &Path, from: u64) -> LogCount {
        let text = std::fs::read(log).unwrap_or_default();
        let start = usize::try_from(from).unwrap_or(usize::MAX).min(text.len());
        let mut count = LogCount::default();
        for line in text[start..]
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
        {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
                *count.by_kind.entry("unparsable".into()).or_default() += 1;
                continue;
            };
            let key = match v["type"].as_str() {
                Some("net") => format!(
                    "{} {} {}",
                    v["decision"].as_str().unwrap_or("?"),
                    v["reason"].as_str().unwrap_or("?"),
                    v["host"].as_str().unwrap_or("-")
                ),
                other => other.unwrap_or("?").to_owned(),
            };
            *count.by_kind.entry(key).or_default() += 1;
        }
        count
    }

    pub(crate) fn get(&self, key: &str) -> u64 {
        self.by_kind.get(key).copied().unwrap_or(0)
    }

    /// Waits up to 10 s for the log to hold `want` records of `key` (tunnels are logged
    /// when they end, a moment after the client has read its last byte).
    pub(crate) async fn wait_for(log: &Path, from: u64, want: &[(&str, u64)]) -> LogCount {
        let started = Instant::now();
        loop {
            let count = LogCount::read(log, from);
            let done = want.iter().all(|(key, n)| count.get(key) >= *n);
            if done || started.elapsed() > Duration::from_secs(10) {
                return count;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub(crate) fn show(&self) -> String {
        let parts: Vec<String> = self
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        parts.join("; ")
    }
}

/// Connections the kernel dropped at a full accept queue (`TcpExt: ListenOverflows`, every
/// listener of this network namespace): each client sends its SYN again a second later.
pub(crate) fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut tcp_ext = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (tcp_ext.next(), tcp_ext.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "ListenOverflows")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}

// ---- the run ----

pub(crate) fn check_usage(checks: &mut Checks, phase: &str, idle: Usage, after: Usage) {
    checks.check(
        &format!("no fd growth after the {phase} (<= idle + {FD_MARGIN})"),
        after.fds <= idle.fds + FD_MARGIN,
        format!("{} -> {} fds", idle.fds, after.fds),
    );
    checks.check(
        &format!(
            "RSS back after the {phase} (<= 2x idle + {} MiB)",
            RSS_SLACK_KIB >> 10
        ),
        after.rss_kib <= rss_bound(idle),
        format!(
            "{:.1} -> {:.1} MiB (bound {:.1})",
            mib(idle.rss_kib),
            mib(after.rss_kib),
            mib(rss_bound(idle))
        ),
    );
}
