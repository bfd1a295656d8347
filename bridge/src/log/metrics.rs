//! What a standalone bridge has done, counted for its admin listener (`admin.rs`) in
//! Prometheus's text format (exposition format 0.0.4).
//!
//! Every attempt is counted where it is logged ([`crate::log::EventLog::record`]), before
//! the log's caps and rate limits, so the counters match the log line for line where
//! nothing was suppressed, and still count what was. Labels are only ones with few
//! values (session, protocol, decision, reason): never a host, which a client chooses.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::log::{Event, Proto};
use crate::policy::{Reason, Verdict};

/// Upper bounds of the DNS latency histogram's buckets, in seconds.
const DNS_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/// (session, proto, decision, reason): counting one allocates nothing once its key is in.
type AttemptKey = (Arc<str>, Proto, Verdict, Reason);

#[derive(Default)]
pub struct Metrics {
    attempts: Mutex<HashMap<AttemptKey, u64>>,
    /// Bytes by session, up (client to server) and down.
    bytes: Mutex<HashMap<Arc<str>, [u64; 2]>>,
    dns_buckets: [AtomicU64; DNS_BUCKETS.len()],
    dns_count: AtomicU64,
    dns_micros: AtomicU64,
    reloads: [AtomicU64; 2],
}

/// What the admin listener adds at each scrape: a gauge per session.
pub struct SessionGauge {
    pub session: String,
    pub open_connections: usize,
    /// The most it holds open at once (`open_connections` never passes it).
    pub max_connections: usize,
    pub policy_sha256: String,
    /// On a shared bridge's own session, whose connections are those that have not named
    /// a tenant: its lobby (lobby.rs).
    pub lobby: Option<LobbyGauge>,
}

/// A lobby's figures: its capacity (`--max-unidentified`; it holds up to `CEILING_FACTOR`
/// times as many while they are young) and the seats it has dropped so far.
pub struct LobbyGauge {
    pub capacity: usize,
    pub dropped: u64,
}

impl Metrics {
    /// Counts one logged attempt.
    pub fn count(&self, event: &Event) {
        let key = (
            Arc::clone(&event.session),
            event.proto,
            event.decision,
            event.reason,
        );
        *lock(&self.attempts).entry(key).or_default() += 1;
        if event.bytes_up > 0 || event.bytes_down > 0 {
            let mut bytes = lock(&self.bytes);
            let entry = bytes.entry(Arc::clone(&event.session)).or_default();
            entry[0] += event.bytes_up;
            entry[1] += event.bytes_down;
        }
    }

    /// Counts one DNS lookup the bridge made, and how long it took.
    pub fn dns_lookup(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        for (bucket, bound) in self.dns_buckets.iter().zip(DNS_BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.dns_count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.dns_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Counts one reload, put in force or refused.
    pub fn reload(&self, loaded: bool) {
        self.reloads[usize::from(!loaded)].fetch_add(1, Ordering::Relaxed);
    }

    /// Everything, as Prometheus's text format.
    // Whole: the families in the order a scraper reads them, a few lines each; split, that
    // order would be spread over as many functions.
    pub fn render(&self, sessions: &[SessionGauge]) -> String {
        let mut out = String::new();
        family(
            &mut out,
            "netbox_attempts_total",
            "counter",
            "Attempts logged, by session, protocol, decision and reason.",
        );
        // Sorted as the text, so that each scrape lists them in one order.
        let attempts: BTreeMap<(String, String, String, String), u64> = lock(&self.attempts)
            .iter()
            .map(|((session, proto, decision, reason), n)| {
                let key = (
                    session.to_string(),
                    spelled(proto),
                    spelled(decision),
                    spelled(reason),
                );
                (key, *n)
            })
            .collect();
        for ((session, proto, decision, reason), n) in &attempts {
            let _ = writeln!(
                out,
                "netbox_attempts_total{{session=\"{}\",proto=\"{}\",decision=\"{}\",reason=\"{}\"}} {n}",
                escaped(session),
                escaped(proto),
                escaped(decision),
                escaped(reason)
            );
        }
        family(
            &mut out,
            "netbox_bytes_total",
            "counter",
            "Bytes carried for attempts that have ended, by session and direction.",
        );
        let bytes: BTreeMap<String, [u64; 2]> = lock(&self.bytes)
            .iter()
            .map(|(session, counts)| (session.to_string(), *counts))
            .collect();
        for (session, [up, down]) in &bytes {
            for (direction, n) in [("up", up), ("down", down)] {
                let _ = writeln!(
                    out,
                    "netbox_bytes_total{{session=\"{}\",direction=\"{direction}\"}} {n}",
                    escaped(session)
                );
            }
        }
        family(
            &mut out,
            "netbox_open_connections",
            "gauge",
            "Client connections open now, by session.",
        );
        for s in sessions {
            let _ = writeln!(
                out,
                "netbox_open_connections{{session=\"{}\"}} {}",
                escaped(&s.session),
                s.open_connections
            );
        }
        family(
            &mut out,
            "netbox_max_connections",
            "gauge",
            "Client connections a session may have open at once.",
        );
        for s in sessions {
            let _ = writeln!(
                out,
                "netbox_max_connections{{session=\"{}\"}} {}",
                escaped(&s.session),
                s.max_connections
            );
        }
        family(
            &mut out,
            "netbox_max_unidentified",
            "gauge",
            "Connections that have not named a tenant past which one waiting a second is dropped for a newcomer (--max-unidentified).",
        );
        for (s, lobby) in sessions.iter().filter_map(|s| Some((s, s.lobby.as_ref()?))) {
            let _ = writeln!(
                out,
                "netbox_max_unidentified{{session=\"{}\"}} {}",
                escaped(&s.session),
                lobby.capacity
            );
        }
        family(
            &mut out,
            "netbox_unidentified_dropped_total",
            "counter",
            "Connections dropped before they named a tenant, for newer ones or to free descriptors.",
        );
        for (s, lobby) in sessions.iter().filter_map(|s| Some((s, s.lobby.as_ref()?))) {
            let _ = writeln!(
                out,
                "netbox_unidentified_dropped_total{{session=\"{}\"}} {}",
                escaped(&s.session),
                lobby.dropped
            );
        }
        family(
            &mut out,
            "netbox_policy_info",
            "gauge",
            "The policy each session is held to now, by the hash the log carries.",
        );
        for s in sessions {
            let _ = writeln!(
                out,
                "netbox_policy_info{{session=\"{}\",policy_sha256=\"{}\"}} 1",
                escaped(&s.session),
                escaped(&s.policy_sha256)
            );
        }
        family(
            &mut out,
            "netbox_policy_reloads_total",
            "counter",
            "Reloads, put in force or refused.",
        );
        for (outcome, n) in [("loaded", &self.reloads[0]), ("refused", &self.reloads[1])] {
            let _ = writeln!(
                out,
                "netbox_policy_reloads_total{{outcome=\"{outcome}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        family(
            &mut out,
            "netbox_dns_lookup_seconds",
            "histogram",
            "DNS lookups the bridge made (pinned hosts and IP literals are none).",
        );
        for (bucket, bound) in self.dns_buckets.iter().zip(DNS_BUCKETS) {
            let _ = writeln!(
                out,
                "netbox_dns_lookup_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.dns_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "netbox_dns_lookup_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let micros = self.dns_micros.load(Ordering::Relaxed);
        // Micro-seconds to seconds for display only: a sum of latencies, not an amount
        // anything is computed from.
        #[allow(clippy::cast_precision_loss)]
        let seconds = micros as f64 / 1e6;
        let _ = writeln!(out, "netbox_dns_lookup_seconds_sum {seconds}");
        let _ = writeln!(out, "netbox_dns_lookup_seconds_count {count}");
        out
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A value as the log spells it (the serde name of an enum).
fn spelled(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "unknown".to_owned(),
    }
}

/// A label value as the text format wants it: backslash, double quote and line feed
/// escaped.
fn escaped(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Attempt, End, Proto};

    #[test]
    fn attempts_and_bytes_are_counted_by_their_labels() {
        let m = Metrics::default();
        let mut a = Attempt::begin("s\"1".into(), Proto::HttpConnect);
        a.decision = crate::policy::Verdict::Allow;
        a.reason = crate::policy::Reason::AllowedByRule;
        m.count(&a.clone().finish(End::Closed, 10, 20));
        m.count(&a.finish(End::Closed, 1, 2));
        m.dns_lookup(Duration::from_millis(3));
        let text = m.render(&[]);
        assert!(text.contains(
            "netbox_attempts_total{session=\"s\\\"1\",proto=\"http_connect\",decision=\"allow\",reason=\"allowed_by_rule\"} 2"
        ), "{text}");
        assert!(text.contains("netbox_bytes_total{session=\"s\\\"1\",direction=\"down\"} 22"));
        assert!(text.contains("netbox_dns_lookup_seconds_bucket{le=\"0.0025\"} 0"));
        assert!(text.contains("netbox_dns_lookup_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("netbox_dns_lookup_seconds_count 1"));
    }
}
