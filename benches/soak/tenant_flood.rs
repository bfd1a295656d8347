//! Phase (e): a shared bridge flooded by connections that name no tenant, while a
//! tenant's clients are timed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bridge::{Bridge, TENANT_TOKEN};
use crate::checks::Checks;
use crate::clients::{ms, normal_client, percentile, slow_client, Ctx, SlowStats, Tally};
use crate::knobs::Knobs;
use crate::knobs::NORMAL_CLIENTS;
use crate::usage::Peak;

/// A slow head that names no tenant, as the attack on a shared bridge was written.
pub(crate) const UNNAMED_HEAD: &[u8] = b"CONNECT x";

/// How long a flood connection waits to open again once the bridge dropped it.
pub(crate) const FLOOD_REOPEN: Duration = Duration::from_secs(1);

/// How many times the quiet p99 a tenant's p99 under the flood may be.
pub(crate) const FLOOD_P99_TARGET: f64 = 2.0;

/// A tenant's clients on `shared` (with the token) and on `own` (its own listener),
/// `NORMAL_CLIENTS` in all, until `stop`: (allowed, denied) outcomes.
pub(crate) async fn tenant_clients(
    shared: Ctx,
    own: Ctx,
    k: &Knobs,
    stop: &Arc<AtomicBool>,
    base: u64,
) -> (Tally, Tally) {
    let clients: Vec<_> = (0..NORMAL_CLIENTS)
        .map(|i| {
            let ctx = if i % 2 == 0 { shared } else { own };
            tokio::spawn(normal_client(
                ctx,
                base | (i as u64) << 32,
                k.deny_every,
                Arc::clone(stop),
            ))
        })
        .collect();
    let (mut allowed, mut denied) = (Tally::default(), Tally::default());
    for c in clients {
        let (a, d) = c.await.expect("tenant client");
        allowed.merge(a);
        denied.merge(d);
    }
    (allowed, denied)
}

pub(crate) async fn tenant_flood(k: &Knobs, dir: &Path, port: u16, checks: &mut Checks) {
    println!("\n== (e) a shared bridge under a flood of slow heads that name no tenant");
    // Half the flood would have taken every place of a bridge that gave them places.
    let places = (k.flood / 2).max(2 * NORMAL_CLIENTS + 16);
    let mut bridge = Bridge::start_shared(k, dir, port, places);
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("t:{TENANT_TOKEN}"));
    let extra: &'static str =
        Box::leak(format!("Proxy-Authorization: Basic {basic}\r\n").into_boxed_str());
    let shared = Ctx {
        bridge: bridge.addr,
        port,
        extra,
    };
    let own = Ctx {
        bridge: bridge.others[0],
        port,
        extra: "",
    };
    println!(
        "shared listener {}, the tenant's own {}; --max-connections {places}; flood of {} \
         for {} s, each opening again {} s after it is dropped",
        shared.bridge,
        own.bridge,
        k.flood,
        k.flood_secs,
        FLOOD_REOPEN.as_secs()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let quiet_run = tenant_clients(shared, own, k, &stop, 3 << 40);
    // As long as under the flood, so that both p99s are of as many requests.
    let timer = async {
        tokio::time::sleep(Duration::from_secs(k.flood_secs)).await;
        stop.store(true, Ordering::Relaxed);
    };
    let ((mut quiet, quiet_denied), ()) = tokio::join!(quiet_run, timer);
    println!("quiet bridge, tenant allowed: {}", quiet.describe());

    let stats = Arc::new(SlowStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Peak::watch(bridge.pid());
    let opening = Instant::now();
    let head: Arc<[u8]> = UNNAMED_HEAD.into();
    // The flood runs on threads of its own, as an attacker's machine would: the tenant's
    // clients are timed waiting on the bridge, not on this harness's handling of the flood.
    let attacker = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("the flood's runtime");
    let flood: Vec<_> = (0..k.flood)
        .map(|_| {
            attacker.spawn(slow_client(
                shared,
                Arc::clone(&head),
                FLOOD_REOPEN,
                Arc::clone(&stats),
                Arc::clone(&stop),
            ))
        })
        .collect();
    let want = u64::try_from(k.flood).unwrap_or(u64::MAX);
    while stats.opened.load(Ordering::Relaxed) < want && opening.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{} flood connections open after {:.1} s",
        stats.opened.load(Ordering::Relaxed),
        opening.elapsed().as_secs_f64()
    );
    let flooded_run = tenant_clients(shared, own, k, &stop, 4 << 40);
    let timer = async {
        tokio::time::sleep(Duration::from_secs(k.flood_secs)).await;
        stop.store(true, Ordering::Relaxed);
    };
    let ((mut flooded, mut flooded_denied), ()) = tokio::join!(flooded_run, timer);
    for f in flood {
        let _ = f.await;
    }
    attacker.shutdown_background();
    let dropped = stats.dropped.lock().map(|d| d.len()).unwrap_or(0);
    println!(
        "{} flood connections in {} s ({} refused at connect), {dropped} dropped by the \
         bridge; {}",
        stats.opened.load(Ordering::Relaxed),
        k.flood_secs,
        stats.connect_failed.load(Ordering::Relaxed),
        peak.end()
    );
    println!(
        "under the flood, tenant allowed: {}\nunder the flood, tenant denied:  {}",
        flooded.describe(),
        flooded_denied.describe()
    );
    checks.check(
        "flood: every tenant request served",
        flooded.failed() == 0 && flooded.ok > 0 && quiet.failed() == 0 && quiet.ok > 0,
        format!("{} of {}", flooded.ok, flooded.attempts()),
    );
    checks.check(
        "flood: every tenant denied request refused",
        flooded_denied.failed() == 0 && quiet_denied.failed() == 0,
        format!("{} of {}", flooded_denied.ok, flooded_denied.attempts()),
    );
    let (p99_quiet, p99_flood) = (
        percentile(&quiet.latencies, 99),
        percentile(&flooded.latencies, 99),
    );
    let ratio = p99_flood.as_secs_f64() / p99_quiet.as_secs_f64().max(1e-6);
    let verdict = if ratio <= FLOOD_P99_TARGET {
        "PASS"
    } else {
        "MISS"
    };
    println!(
        "tenant p99: quiet {}, under the flood {} ({ratio:.2}x): {verdict} (target: within \
         {FLOOD_P99_TARGET}x)",
        ms(p99_quiet),
        ms(p99_flood)
    );
    checks.target(
        &format!("flood: tenant p99 within {FLOOD_P99_TARGET}x of quiet"),
        ratio <= FLOOD_P99_TARGET,
        format!("{} -> {} ({ratio:.2}x)", ms(p99_quiet), ms(p99_flood)),
    );
    checks.check(
        "flood: the shared bridge is still running",
        bridge.alive(),
        format!("pid {}", bridge.pid()),
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(bridge.pid()).unwrap_or(0)),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = bridge.child.wait();
}
