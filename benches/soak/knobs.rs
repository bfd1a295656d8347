//! What to run, read from the environment.

use std::path::PathBuf;

/// Clients making normal requests while the slowloris runs (and a tenant's under the flood).
pub(crate) const NORMAL_CLIENTS: usize = 4;

/// What to run, from the environment (defaults: the full run).
pub(crate) struct Knobs {
    pub(crate) netbox: PathBuf,
    pub(crate) connections: u64,
    pub(crate) concurrency: usize,
    pub(crate) deny_every: u64,
    pub(crate) slow: usize,
    pub(crate) slow_secs: u64,
    pub(crate) flood: usize,
    pub(crate) flood_secs: u64,
    pub(crate) header_timeout_secs: u64,
    pub(crate) max_connections: usize,
}

impl Knobs {
    pub(crate) fn from_env() -> Result<Knobs, String> {
        fn num<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
            match std::env::var(name) {
                Ok(v) => v.parse().map_err(|_| format!("{name}={v} is not a number")),
                Err(_) => Ok(default),
            }
        }
        let netbox = std::env::var_os("NETBOX_BIN")
            .map(PathBuf::from)
            .ok_or("NETBOX_BIN must name the netbox binary (benches/soak.sh sets it)")?;
        let header_timeout_secs = num("HEADER_TIMEOUT", 10)?;
        let concurrency = num("CONCURRENCY", 2_000)?.max(1);
        let slow = num("SLOW", 10_000)?;
        // Room for the slowloris and the normal clients: past it new connections are
        // refused with 503, which is the budget at work, not service stopping. Set
        // MAX_CONNECTIONS below SLOW to watch that (the normal clients' check then fails).
        let max_connections = num(
            "MAX_CONNECTIONS",
            concurrency.max(slow + NORMAL_CLIENTS) + 256,
        )?;
        Ok(Knobs {
            netbox,
            connections: num("CONNECTIONS", 100_000)?,
            concurrency,
            deny_every: num("DENY_EVERY", 4)?.max(1),
            slow,
            flood: num("FLOOD", slow)?,
            // Long enough for the flood to be dropped at its head deadline and come back.
            flood_secs: num("FLOOD_SECS", header_timeout_secs * 3 / 2 + 1)?,
            // Long enough for the slow connections to be dropped and come back twice.
            slow_secs: num("SLOW_SECS", header_timeout_secs * 5 / 2)?,
            header_timeout_secs,
            max_connections,
        })
    }
}

// ---- bodies: what the upstream sends for `GET /N`, recomputed by the client ----
