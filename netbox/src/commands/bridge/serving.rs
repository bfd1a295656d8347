//! A prepared bridge served: its listeners bound and announced, the admin listener, reloads
//! on SIGHUP or --watch, and the end (a signal, or a log that cannot be written), after
//! which its sockets' files are removed.

use std::sync::Arc;

use bridge::serve::listen::ListenAddr;
use bridge::{BridgeConfig, Policy, Session, SessionListener};

use super::reload::{self, Reloader};
use super::setup::TenantListener;
use super::Prepared;
use crate::error::WrapperError;

/// Binds every listener, says where the bridge listens, serves until a signal or a log
/// that cannot be written stops it, then removes its sockets' files.
pub(super) async fn serve(bridge: Prepared) -> Result<(), WrapperError> {
    let Prepared {
        addrs,
        admin_addr,
        metrics,
        log,
        log_name,
        fetched,
        mut config,
        session,
        tenant_listeners,
        listener_tls,
        reloader,
        watch,
    } = bridge;
    // Before anything listens: a SIGHUP from then on reloads, never ends the bridge.
    let hangup = reload::catch_hangup().map_err(WrapperError::Runtime)?;
    let listeners = bind(&addrs, &session, listener_tls.as_ref(), &tenant_listeners).await?;
    let log = Arc::new(log);
    // Each policy's record carries its hash, ~0.3 s of work for 10^6 names: taken before
    // the bridge says it listens, so that it answers a client that read the line at once.
    reloader.record_start(&log);
    crate::plan::tools::fetch::log_records(&log, &fetched.0, fetched.1);
    // A policy load frees what it parsed below the rules it keeps: a bridge that loaded
    // 10^6 names would otherwise hold ~50 bytes a rule it no longer uses.
    crate::sys::memory::return_free_pages();
    // Announced only once every listener is bound, so a client that reads this line can
    // connect to any of them; not at all if the log cannot be written (the bridge stops).
    if log.failure().is_none() {
        announce(&session, &listeners);
    }
    let admin = Arc::new(bridge::serve::admin::Admin {
        metrics: metrics.unwrap_or_default(),
        sessions: Box::new(gauges(Arc::clone(&reloader), Arc::clone(&session))),
        ready: std::sync::atomic::AtomicBool::new(true),
        capacity: Arc::clone(&config.capacity),
    });
    let admin_task = match &admin_addr {
        Some(addr) => Some(serve_admin(addr, &admin, &mut config).await?),
        None => None,
    };
    // No client reaches a listener of this bridge through it (another tenant's own),
    // and no registry a reload reads is fetched at one.
    config
        .own_listeners
        .extend(listeners.iter().filter_map(|sl| tcp_address(&sl.listener)));
    crate::plan::tools::fetch::listening_at(config.own_listeners.clone());
    let reloading = tokio::spawn(reload::reload_when_asked(
        reloader,
        Arc::clone(&log),
        watch,
        hangup,
    ));
    // A bridge that cannot log stops: what it lets through must be on record.
    let stop = {
        let log = Arc::clone(&log);
        let admin = Arc::clone(&admin);
        async move {
            tokio::select! {
                () = shutdown_signal() => {}
                () = log.failed() => {}
            }
            // Draining from here on: a load balancer asking sends new clients elsewhere.
            admin
                .ready
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
    };
    bridge::serve(listeners, config, Arc::clone(&log), stop).await;
    reloading.abort();
    if let Some(task) = admin_task {
        task.abort();
    }
    log.flush_suppressed();
    let sockets = addrs.iter().chain(tenant_listeners.iter().map(|(a, _)| a));
    for addr in sockets.chain(admin_addr.iter()) {
        if let ListenAddr::Unix(path) = addr {
            let _ = std::fs::remove_file(path);
        }
    }
    match log.failure() {
        Some(reason) => Err(WrapperError::EventLogWrite {
            path: log_name,
            reason,
        }),
        None => Ok(()),
    }
}

/// The `--listen` listeners (under `session`, with TLS where asked) and each tenant's own.
async fn bind(
    addrs: &[ListenAddr],
    session: &Arc<Session>,
    tls: Option<&bridge::serve::listener_tls::ListenerTls>,
    tenant_listeners: &[TenantListener],
) -> Result<Vec<SessionListener>, WrapperError> {
    let mut listeners = Vec::new();
    let every = addrs
        .iter()
        .map(|addr| (addr, session, tls))
        .chain(tenant_listeners.iter().map(|(addr, s)| (addr, s, None)));
    for (addr, session, tls) in every {
        if let ListenAddr::Unix(path) = addr {
            remove_stale_socket(path)?;
        }
        let listener = match (addr.bind().await?, tls) {
            (bridge::Listener::Tcp(tcp), Some(tls)) => bridge::Listener::Tls(tcp, tls.clone()),
            (listener, _) => listener,
        };
        listeners.push(SessionListener {
            session: Arc::clone(session),
            listener,
        });
    }
    Ok(listeners)
}

/// Says on stderr which tenants are served (the first `TENANT_LINES`) and where the bridge
/// listens, for whom.
fn announce(session: &Session, listeners: &[SessionListener]) {
    if let Some(tenants) = session.tenants() {
        let mut names: Vec<(&str, &Arc<Session>)> = tenants.sessions().collect();
        names.sort_by_key(|(name, _)| *name);
        for (name, tenant) in names.iter().take(TENANT_LINES) {
            crate::output::say(&format!(
                "netbox bridge: tenant {name}: session {}, {} allow rules",
                tenant.id,
                tenant.policy().allow_count()
            ));
        }
        if names.len() > TENANT_LINES {
            crate::output::say(&format!(
                "netbox bridge: and {} more tenants (each in the log's policy_loaded \
                 records)",
                names.len() - TENANT_LINES
            ));
        }
    }
    for sl in listeners {
        let whose = match sl.session.tenants() {
            Some(tenants) => format!(
                "session {}, clients name one of {} tenants",
                sl.session.id,
                tenants.len()
            ),
            None => format!(
                "session {}, {} allow rules",
                sl.session.id,
                sl.session.policy().allow_count()
            ),
        };
        crate::output::say(&format!(
            "netbox bridge: listening on {} ({whose})",
            sl.listener.describe(),
        ));
    }
}

/// Binds the admin listener and serves it; its address is one of the bridge's own, never
/// dialled.
async fn serve_admin(
    addr: &ListenAddr,
    admin: &Arc<bridge::serve::admin::Admin>,
    config: &mut BridgeConfig,
) -> Result<tokio::task::JoinHandle<()>, WrapperError> {
    if let ListenAddr::Unix(path) = addr {
        remove_stale_socket(path)?;
    }
    let listener = addr.bind().await?;
    config.own_listeners.extend(tcp_address(&listener));
    crate::output::say(&format!(
        "netbox bridge: admin on {} ({}, {} and {})",
        listener.describe(),
        bridge::serve::admin::METRICS_PATH,
        bridge::serve::admin::READY_PATH,
        bridge::serve::admin::HEALTH_PATH
    ));
    Ok(tokio::spawn(bridge::serve::admin::serve(
        listener,
        Arc::clone(admin),
    )))
}

fn tcp_address(listener: &bridge::Listener) -> Option<std::net::SocketAddr> {
    match listener {
        bridge::Listener::Tcp(l) | bridge::Listener::Tls(l, _) => l.local_addr().ok(),
        _ => None,
    }
}

/// The admin listener's gauges: the listeners' session and every tenant's, as they are
/// at each scrape.
fn gauges(
    reloader: Arc<Reloader>,
    session: Arc<Session>,
) -> impl Fn() -> Vec<bridge::log::metrics::SessionGauge> + Send + Sync {
    // Each policy's hash, kept while the session holds that policy: a scrape of a bridge
    // with a thousand tenants hashes only the policies reloaded since the last one.
    let hashes: std::sync::Mutex<HashedPolicies> = Default::default();
    move || {
        let mut hashes = hashes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut sessions = vec![Arc::clone(&session)];
        sessions.extend(
            reloader
                .sessions()
                .into_iter()
                .map(|(_, s)| s)
                .filter(|s| !Arc::ptr_eq(s, &session)),
        );
        // A tenant a reload removed is forgotten.
        hashes
            .0
            .retain(|id, _| sessions.iter().any(|s| s.id == *id));
        sessions
            .iter()
            .map(|s| bridge::log::metrics::SessionGauge {
                session: s.id.to_string(),
                open_connections: s.open_connections(),
                max_connections: s.connection_ceiling(),
                policy_sha256: hashes.of(&s.id, s.policy()),
                lobby: s.unidentified().map(|(capacity, dropped)| {
                    bridge::log::metrics::LobbyGauge { capacity, dropped }
                }),
            })
            .collect()
    }
}

/// Policies' hashes by session, with the policy each was taken of.
#[derive(Default)]
struct HashedPolicies(std::collections::HashMap<Arc<str>, (Arc<Policy>, String)>);

impl HashedPolicies {
    fn of(&mut self, session: &Arc<str>, policy: Arc<Policy>) -> String {
        match self.0.get(session) {
            Some((hashed, hash)) if Arc::ptr_eq(hashed, &policy) => hash.clone(),
            _ => {
                let hash = policy.sha256_hex();
                self.0.insert(Arc::clone(session), (policy, hash.clone()));
                hash
            }
        }
    }
}

/// Tenants named one by one at start; past it, a count (a fleet may have thousands).
const TENANT_LINES: usize = 10;

/// A socket file left by an earlier bridge would make bind fail; only sockets are removed.
/// One that a live process still listens on is not stale: taking its path would cut that
/// process off without a word (a second bridge started on the same path).
fn remove_stale_socket(path: &std::path::Path) -> Result<(), WrapperError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(_) if std::os::unix::net::UnixStream::connect(path).is_ok() => {
            Err(WrapperError::StaleSocket {
                path: path.to_owned(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "another process listens on it; give another path or stop that process",
                ),
            })
        }
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|source| WrapperError::StaleSocket {
                path: path.to_owned(),
                source,
            })
        }
        _ => Ok(()),
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without signal handlers the default action (terminate) still applies.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}
