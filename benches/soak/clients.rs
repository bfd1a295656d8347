//! The clients: allowed and denied attempts through the bridge, their tallies, the load
//! phase, and the slow and normal clients of the slowloris phase.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::upstream::{body, read_head};

/// One attempt that takes longer than this is counted as a timeout.
pub(crate) const ATTEMPT_DEADLINE: Duration = Duration::from_secs(30);

/// Why one attempt failed: a kind to count by, and the first example's detail.
pub(crate) struct Failure {
    pub(crate) kind: &'static str,
    pub(crate) detail: String,
}

pub(crate) fn failure(kind: &'static str, detail: impl ToString) -> Failure {
    Failure {
        kind,
        detail: detail.to_string(),
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Ctx {
    pub(crate) bridge: SocketAddr,
    pub(crate) port: u16,
    /// Header lines a CONNECT carries besides Host (a tenant's Proxy-Authorization).
    pub(crate) extra: &'static str,
}

/// CONNECT up.test, then GET /N through the tunnel: the body must be `body(N)` exactly.
pub(crate) async fn allowed(ctx: Ctx, n: u64) -> Result<(), Failure> {
    let mut s = TcpStream::connect(ctx.bridge)
        .await
        .map_err(|e| failure("connect", e))?;
    s.set_nodelay(true).ok();
    let target = format!("up.test:{}", ctx.port);
    let connect = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{}\r\n",
        ctx.extra
    );
    s.write_all(connect.as_bytes())
        .await
        .map_err(|e| failure("io", e))?;
    let reply = read_head(&mut s).await.map_err(|e| failure("io", e))?;
    if !reply.starts_with(b"HTTP/1.1 200") {
        return Err(failure("refused", first_line(&reply)));
    }
    let get = format!("GET /{n} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    s.write_all(get.as_bytes())
        .await
        .map_err(|e| failure("io", e))?;
    let mut response = Vec::new();
    s.read_to_end(&mut response)
        .await
        .map_err(|e| failure("io", e))?;
    let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(failure("bad_response", first_line(&response)));
    };
    let (head, got) = (&response[..end], &response[end + 4..]);
    let want = body(n);
    let length = format!("content-length: {}", want.len());
    if !head.starts_with(b"HTTP/1.1 200")
        || !String::from_utf8_lossy(head)
            .to_ascii_lowercase()
            .contains(&length)
    {
        return Err(failure("bad_response", first_line(head)));
    }
    if got != want.as_slice() {
        let at = got.iter().zip(&want).position(|(a, b)| a != b);
        return Err(failure(
            "wrong_bytes",
            format!(
                "GET /{n}: {} bytes, want {}; first difference at {at:?}",
                got.len(),
                want.len()
            ),
        ));
    }
    Ok(())
}

/// CONNECT denied.test: must be refused with 502 and the policy reason, never tunnelled.
pub(crate) async fn denied(ctx: Ctx) -> Result<(), Failure> {
    let mut s = TcpStream::connect(ctx.bridge)
        .await
        .map_err(|e| failure("connect", e))?;
    let target = format!("denied.test:{}", ctx.port);
    let connect = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{}\r\n",
        ctx.extra
    );
    // The bridge may reset before it has read all of it; its answer says what happened.
    let _ = s.write_all(connect.as_bytes()).await;
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match s.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(failure("io", e)),
        }
    }
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    if got.starts_with(b"HTTP/1.1 502") && text.contains("x-netbox-reason: policy") {
        Ok(())
    } else if got.starts_with(b"HTTP/1.1 200") {
        Err(failure("not_refused", first_line(&got)))
    } else if got.is_empty() {
        Err(failure("no_answer", "closed without a reply"))
    } else {
        Err(failure("other_answer", first_line(&got)))
    }
}

pub(crate) fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(120)
        .collect()
}

/// Attempt N of a run: one in `deny_every` is denied.
pub(crate) fn is_denied(n: u64, deny_every: u64) -> bool {
    n % deny_every == deny_every - 1
}

/// Outcomes of one kind of attempt.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) ok: u64,
    pub(crate) failures: BTreeMap<&'static str, (u64, String)>,
    pub(crate) latencies: Vec<Duration>,
}

impl Tally {
    pub(crate) fn add(&mut self, outcome: Result<(), Failure>, took: Duration) {
        self.latencies.push(took);
        match outcome {
            Ok(()) => self.ok += 1,
            Err(f) => self.failures.entry(f.kind).or_insert((0, f.detail)).0 += 1,
        }
    }

    pub(crate) fn merge(&mut self, other: Tally) {
        self.ok += other.ok;
        for (kind, (count, detail)) in other.failures {
            self.failures.entry(kind).or_insert((0, detail)).0 += count;
        }
        self.latencies.extend(other.latencies);
    }

    pub(crate) fn failed(&self) -> u64 {
        self.failures.values().map(|(n, _)| n).sum()
    }

    pub(crate) fn attempts(&self) -> u64 {
        self.ok + self.failed()
    }

    /// "N ok, M failed; kind: count, e.g. \"detail\"; latency p50 p99 max; K took over 1 s".
    pub(crate) fn describe(&mut self) -> String {
        self.latencies.sort();
        let mut text = format!("{} ok, {} failed", self.ok, self.failed());
        for (kind, (count, detail)) in &self.failures {
            text += &format!("; {kind}: {count}, e.g. {detail:?}");
        }
        if !self.latencies.is_empty() {
            text += &format!(
                "; latency p50 {} p99 {} max {}; {} took over 1 s",
                ms(percentile(&self.latencies, 50)),
                ms(percentile(&self.latencies, 99)),
                ms(*self.latencies.last().unwrap_or(&Duration::ZERO)),
                self.latencies
                    .iter()
                    .filter(|&&l| l > Duration::from_secs(1))
                    .count()
            );
        }
        text
    }
}

pub(crate) fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted
        .get((sorted.len().saturating_sub(1)) * p / 100)
        .copied()
        .unwrap_or_default()
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// One attempt, allowed or denied by its number, bounded by `ATTEMPT_DEADLINE`.
pub(crate) async fn attempt(
    ctx: Ctx,
    n: u64,
    deny_every: u64,
    allowed_t: &mut Tally,
    denied_t: &mut Tally,
) {
    let started = Instant::now();
    let deny = is_denied(n, deny_every);
    let run = async {
        if deny {
            denied(ctx).await
        } else {
            allowed(ctx, n).await
        }
    };
    let outcome = match tokio::time::timeout(ATTEMPT_DEADLINE, run).await {
        Ok(outcome) => outcome,
        Err(_) => Err(failure(
            "timeout",
            format!("attempt {n}: {ATTEMPT_DEADLINE:?}"),
        )),
    };
    let tally = if deny { denied_t } else { allowed_t };
    tally.add(outcome, started.elapsed());
}

/// Attempts `first..first + count`, `concurrency` at once; (allowed, denied) outcomes.
pub(crate) async fn load(
    ctx: Ctx,
    first: u64,
    count: u64,
    concurrency: usize,
    deny_every: u64,
) -> (Tally, Tally) {
    let next = Arc::new(AtomicU64::new(first));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let (mut a, mut d) = (Tally::default(), Tally::default());
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= first + count {
                        return (a, d);
                    }
                    attempt(ctx, n, deny_every, &mut a, &mut d).await;
                }
            })
        })
        .collect();
    let (mut a, mut d) = (Tally::default(), Tally::default());
    for w in workers {
        let (wa, wd) = w.await.expect("load worker");
        a.merge(wa);
        d.merge(wd);
    }
    (a, d)
}

// ---- the slowloris ----

/// The head a slow client sends a byte a second: longer than any run lets it finish.
pub(crate) fn slow_head(port: u16) -> Vec<u8> {
    format!(
        "GET http://up.test:{port}/slow HTTP/1.1\r\nHost: up.test:{port}\r\nX-Slow: {}\r\n\r\n",
        "s".repeat(4096)
    )
    .into_bytes()
}

#[derive(Default)]
pub(crate) struct SlowStats {
    pub(crate) opened: AtomicU64,
    pub(crate) connect_failed: AtomicU64,
    /// Connections the bridge ended, and after how long each.
    pub(crate) dropped: Mutex<Vec<Duration>>,
    /// Connections still open when the phase ended (closed by the client).
    pub(crate) left: AtomicU64,
}

/// One slow client: `head` a byte a second until the bridge drops it, then again after
/// `pause`, until `stop`.
pub(crate) async fn slow_client(
    ctx: Ctx,
    head: Arc<[u8]>,
    pause: Duration,
    stats: Arc<SlowStats>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(ctx.bridge).await else {
            stats.connect_failed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        stats.opened.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let mut buf = [0u8; 512];
        for byte in head.iter().cycle() {
            if stop.load(Ordering::Relaxed) {
                stats.left.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // A write or read that fails, or any answer, means the bridge ended it.
            if s.write_all(std::slice::from_ref(byte)).await.is_err() {
                break;
            }
            tokio::select! {
                _ = s.read(&mut buf) => break,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        stats
            .dropped
            .lock()
            .expect("slow stats")
            .push(started.elapsed());
        tokio::time::sleep(pause).await;
    }
}

/// Normal requests, one after another, until `stop`: (allowed, denied) outcomes.
pub(crate) async fn normal_client(
    ctx: Ctx,
    mut n: u64,
    deny_every: u64,
    stop: Arc<AtomicBool>,
) -> (Tally, Tally) {
    let (mut a, mut d) = (Tally::default(), Tally::default());
    while !stop.load(Ordering::Relaxed) {
        attempt(ctx, n, deny_every, &mut a, &mut d).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (a, d)
}

// ---- the bridge and /proc ----
