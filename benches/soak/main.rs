//! Load and soak of `netbox bridge`: loopback only, bounded in count
//! and time.
//!
//! Run by `benches/soak.sh`, which builds the release binary and passes it as
//! `NETBOX_BIN`. The harness starts its own upstream (HTTP/1.1 on 127.0.0.1:0 whose body
//! for `GET /N` is a deterministic function of N, so every byte can be checked) and a
//! bridge whose allowlist pins `up.test` to 127.0.0.1 and denies `denied.test` (pinned to
//! the same upstream, so a wrongly allowed one would show up there). Then, each printing
//! its figures:
//!
//! - (a) idle: the bridge's fd count (`/proc/PID/fd`) and RSS (`VmRSS`);
//! - (b) load: `CONNECTIONS` connections, `CONCURRENCY` at once, one in `DENY_EVERY` a
//!   CONNECT to `denied.test` (must be refused with 502), the rest CONNECT + GET with the
//!   body compared byte for byte;
//! - (c) after: fds and RSS back near idle, and one log record per attempt;
//! - (d) slowloris: `SLOW` connections each sending one byte of a request head a second
//!   (reconnecting when dropped) for `SLOW_SECS`, while a few clients go on with normal
//!   requests and their latency is measured; then fds and RSS again;
//! - (e) a shared bridge (`--tenants`, `--max-connections` half of `FLOOD`) under a flood
//!   of `FLOOD` connections that name no tenant, each sending `CONNECT x` and a byte a
//!   second and opening again a second after it is dropped, for `FLOOD_SECS`, while a
//!   tenant's clients (through the shared listener with its token, and through its own
//!   listener) are timed: their p99 under the flood against a quiet bridge's (timed as
//!   long, just before), PASS within 2x, MISS past it (a target, printed; loopback
//!   latencies of a few milliseconds are too noisy on a shared machine to fail a run on),
//!   and every request served (an invariant). The flood runs on threads of its own.
//!
//! Exit status 1 if an invariant fails (listed in the summary table), 2 on a usage error.

// A benchmark: its sockets are at loopback literals and the addresses it is given, so
// std's and tokio's socket calls (clippy.toml) are allowed throughout.
#![allow(clippy::disallowed_methods)]

mod bridge;
mod checks;
mod clients;
mod knobs;
mod slowloris;
mod tenant_flood;
mod upstream;
mod usage;

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::bridge::Bridge;
use crate::checks::Checks;
use crate::clients::{load, Ctx};
use crate::knobs::Knobs;
use crate::knobs::NORMAL_CLIENTS;
use crate::slowloris::slowloris;
use crate::tenant_flood::tenant_flood;
use crate::upstream::start_upstream;
use crate::usage::{check_usage, listen_overflows, log_len, settle, LogCount, Peak, Usage};

/// Requests made before the idle reading, so that it is of a bridge that has served.
const WARM_UP: u64 = 200;

/// Raises this process's soft fd limit to the hard one (the bridge does so itself).
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    getrlimit(Resource::RLIMIT_NOFILE).map_or(0, |(soft, _)| soft)
}

fn main() -> ExitCode {
    let knobs = match Knobs::from_env() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    let fd_limit = raise_fd_limit();
    // Every slow connection and, under load, each client and its upstream end are ours.
    let needed = (knobs.slow.max(knobs.flood) + NORMAL_CLIENTS).max(2 * knobs.concurrency) + 256;
    if u64::try_from(needed).unwrap_or(u64::MAX) > fd_limit {
        eprintln!(
            "soak: needs {needed} fds, the limit is {fd_limit}: lower SLOW or CONCURRENCY, \
             or raise ulimit -Hn"
        );
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let passed = runtime.block_on(run(&knobs, fd_limit));
    println!("total time {:.0} s", started.elapsed().as_secs_f64());
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn run(k: &Knobs, fd_limit: u64) -> bool {
    let dir = std::env::temp_dir().join(format!("netbox-soak.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("work directory");
    let (port, upstream) = start_upstream().await;
    let mut bridge = Bridge::start(k, &dir, port);
    let ctx = Ctx {
        bridge: bridge.addr,
        port,
        extra: "",
    };
    let pid = bridge.pid();
    let mut checks = Checks::default();
    println!(
        "soak: bridge pid {pid} on {}, upstream 127.0.0.1:{port}; {} connections, {} at once, \
         1 in {} denied; slowloris {} for {} s; --max-connections {}, --header-timeout {} s; \
         fd limit {fd_limit}",
        bridge.addr,
        k.connections,
        k.concurrency,
        k.deny_every,
        k.slow,
        k.slow_secs,
        k.max_connections,
        k.header_timeout_secs
    );

    // (a) idle, after a warm-up so that it is a bridge that has served.
    println!("\n== (a) idle");
    let at_start = Usage::read(pid);
    let (mut wa, mut wd) = load(ctx, 0, WARM_UP, 4, k.deny_every).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = Usage::read(pid);
    println!(
        "at start: {}; after {WARM_UP} requests: {}",
        at_start.show(),
        idle.show()
    );
    println!(
        "warm-up allowed: {}\nwarm-up denied: {}",
        wa.describe(),
        wd.describe()
    );

    // (b) load
    println!("\n== (b) load");
    let log_from = log_len(&bridge.log);
    let peak = Peak::watch(pid);
    let overflows = listen_overflows();
    let load_started = Instant::now();
    let (mut allowed_t, mut denied_t) =
        load(ctx, WARM_UP, k.connections, k.concurrency, k.deny_every).await;
    let took = load_started.elapsed();
    println!(
        "{} connections in {:.1} s ({:.0}/s); {}",
        k.connections,
        took.as_secs_f64(),
        k.connections as f64 / took.as_secs_f64(),
        peak.end()
    );
    println!(
        "allowed: {}\ndenied:  {}",
        allowed_t.describe(),
        denied_t.describe()
    );
    println!(
        "accept-queue overflows (kernel, every listener): {}",
        listen_overflows() - overflows
    );
    checks.check(
        "every allowed request byte-exact",
        allowed_t.failed() == 0 && wa.failed() == 0,
        format!("{} of {}", allowed_t.ok, allowed_t.attempts()),
    );
    checks.check(
        "every denied CONNECT refused (502, policy)",
        denied_t.failed() == 0 && wd.failed() == 0,
        format!("{} of {}", denied_t.ok, denied_t.attempts()),
    );

    // (c) after
    println!("\n== (c) after the load");
    let (after, waited) = settle(pid, idle).await;
    println!("after {:.1} s: {}", waited.as_secs_f64(), after.show());
    check_usage(&mut checks, "load", idle, after);
    let up_key = "allow allowed_by_rule up.test";
    let deny_key = "deny denied_by_rule denied.test";
    let logged = LogCount::wait_for(
        &bridge.log,
        log_from,
        &[
            (up_key, allowed_t.attempts()),
            (deny_key, denied_t.attempts()),
        ],
    )
    .await;
    println!("log: {}", logged.show());
    checks.check(
        "every allowed attempt logged as allowed",
        logged.get(up_key) == allowed_t.attempts(),
        format!(
            "{} records, {} attempts",
            logged.get(up_key),
            allowed_t.attempts()
        ),
    );
    checks.check(
        "every denied attempt logged as denied",
        logged.get(deny_key) == denied_t.attempts(),
        format!(
            "{} records, {} attempts",
            logged.get(deny_key),
            denied_t.attempts()
        ),
    );
    let leaked = upstream.leaked.load(Ordering::Relaxed);
    checks.check(
        "no denied request reached the upstream",
        leaked == 0,
        leaked,
    );

    // (d) slowloris
    if k.slow > 0 {
        slowloris(k, ctx, pid, idle, &bridge.log, &mut checks).await;
    }

    // (e) a shared bridge under a flood of connections that name no tenant
    if k.flood > 0 {
        tenant_flood(k, &dir, port, &mut checks).await;
    }

    checks.check(
        "the bridge is still running",
        bridge.alive(),
        format!("pid {pid}"),
    );
    let said = bridge.said.lock().map(|s| s.clone()).unwrap_or_default();
    if !said.is_empty() {
        println!("\nbridge stderr ({} lines, first 10):", said.len());
        for line in said.iter().take(10) {
            println!("  {line}");
        }
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = bridge.child.wait();
    let passed = checks.print();
    if passed {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("kept for a look: {}", dir.display());
    }
    passed
}
