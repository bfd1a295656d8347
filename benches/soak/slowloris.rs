//! Phase (d): slow connections dripping a request head while normal clients go on.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checks::Checks;
use crate::clients::{
    ms, normal_client, percentile, slow_client, slow_head, Ctx, SlowStats, Tally,
};
use crate::knobs::{Knobs, NORMAL_CLIENTS};
use crate::usage::{check_usage, listen_overflows, log_len, settle, LogCount, Peak, Usage};

/// A slow connection must be dropped within the head deadline plus this.
pub(crate) const DROP_GRACE: Duration = Duration::from_secs(5);

pub(crate) async fn slowloris(
    k: &Knobs,
    ctx: Ctx,
    pid: u32,
    idle: Usage,
    log: &Path,
    checks: &mut Checks,
) {
    println!("\n== (d) slowloris");
    // Normal clients' latency on a quiet bridge first, to compare with.
    let stop = Arc::new(AtomicBool::new(false));
    let quiet: Vec<_> = (0..NORMAL_CLIENTS)
        .map(|i| {
            tokio::spawn(normal_client(
                ctx,
                1 << 40 | (i as u64) << 32,
                k.deny_every,
                Arc::clone(&stop),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut qa, mut qd) = (Tally::default(), Tally::default());
    for q in quiet {
        let (a, d) = q.await.expect("normal client");
        qa.merge(a);
        qd.merge(d);
    }
    println!("quiet bridge, normal allowed: {}", qa.describe());

    let log_from = log_len(log);
    let stats = Arc::new(SlowStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Peak::watch(pid);
    let overflows = listen_overflows();
    let opening = Instant::now();
    let head: Arc<[u8]> = slow_head(ctx.port).into();
    let slow: Vec<_> = (0..k.slow)
        .map(|_| {
            tokio::spawn(slow_client(
                ctx,
                Arc::clone(&head),
                Duration::ZERO,
                Arc::clone(&stats),
                Arc::clone(&stop),
            ))
        })
        .collect();
    let want = u64::try_from(k.slow).unwrap_or(u64::MAX);
    while stats.opened.load(Ordering::Relaxed) < want && opening.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{} slow connections open after {:.1} s; bridge {}",
        stats.opened.load(Ordering::Relaxed),
        opening.elapsed().as_secs_f64(),
        Usage::read(pid).show()
    );
    let normal: Vec<_> = (0..NORMAL_CLIENTS)
        .map(|i| {
            tokio::spawn(normal_client(
                ctx,
                2 << 40 | (i as u64) << 32,
                k.deny_every,
                Arc::clone(&stop),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(k.slow_secs)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut na, mut nd) = (Tally::default(), Tally::default());
    for n in normal {
        let (a, d) = n.await.expect("normal client");
        na.merge(a);
        nd.merge(d);
    }
    for s in slow {
        let _ = s.await;
    }
    let mut dropped = stats.dropped.lock().map(|d| d.clone()).unwrap_or_default();
    dropped.sort();
    let deadline = Duration::from_secs(k.header_timeout_secs);
    let opened = stats.opened.load(Ordering::Relaxed);
    println!(
        "{opened} slow connections in {} s ({} refused at connect), {} dropped by the bridge \
         after min {} / median {} / max {}, {} still open at the end; {}",
        k.slow_secs,
        stats.connect_failed.load(Ordering::Relaxed),
        dropped.len(),
        ms(dropped.first().copied().unwrap_or_default()),
        ms(percentile(&dropped, 50)),
        ms(dropped.last().copied().unwrap_or_default()),
        stats.left.load(Ordering::Relaxed),
        peak.end()
    );
    println!(
        "during, normal allowed: {}\nduring, normal denied:  {}",
        na.describe(),
        nd.describe()
    );
    println!(
        "accept-queue overflows (kernel, every listener): {}",
        listen_overflows() - overflows
    );
    checks.check(
        "slowloris: normal allowed requests all served",
        na.failed() == 0 && na.ok > 0 && qa.failed() == 0,
        format!(
            "{} of {}, p99 {} (quiet p99 {})",
            na.ok,
            na.attempts(),
            ms(percentile(&na.latencies, 99)),
            ms(percentile(&qa.latencies, 99))
        ),
    );
    checks.check(
        "slowloris: normal denied requests all refused",
        nd.failed() == 0 && qd.failed() == 0,
        format!("{} of {}", nd.ok, nd.attempts()),
    );
    let latest = dropped.last().copied().unwrap_or_default();
    checks.check(
        &format!(
            "slowloris: slow heads dropped by the deadline + {} s",
            DROP_GRACE.as_secs()
        ),
        !dropped.is_empty() && latest <= deadline + DROP_GRACE,
        format!("{} dropped, latest after {}", dropped.len(), ms(latest)),
    );

    let (after, waited) = settle(pid, idle).await;
    println!("after {:.1} s: {}", waited.as_secs_f64(), after.show());
    check_usage(checks, "slowloris", idle, after);
    // Each slow connection is one refusal: timed out by the bridge, or, if the phase ended
    // first, closed by its client mid-head (a bad request). Which of the two a connection
    // ending at that moment becomes is a race, so only the sum is exact.
    let (timed_out, cut_short) = ("deny header_timeout -", "deny bad_request -");
    let settled_at = Instant::now();
    let mut logged = LogCount::read(log, log_from);
    while logged.get(timed_out) + logged.get(cut_short) < opened
        && settled_at.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
        logged = LogCount::read(log, log_from);
    }
    println!("log: {}", logged.show());
    checks.check(
        "slowloris: every slow connection logged once",
        logged.get(timed_out) + logged.get(cut_short) == opened
            && logged.get(timed_out) >= dropped.len() as u64,
        format!(
            "{} header_timeout + {} bad_request records, {opened} connections ({} dropped)",
            logged.get(timed_out),
            logged.get(cut_short),
            dropped.len()
        ),
    );
}
