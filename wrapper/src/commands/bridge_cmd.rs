//! `netbox bridge`: the egress proxy on its own, on listeners it binds itself; with
//! `--tenants`, shared by several tenants, each under its own policy and session.

use std::collections::BTreeMap;
use std::sync::Arc;

use bridge::serve::listen::ListenAddr;
use bridge::{BridgeConfig, EventLog, Policy, Session, SessionListener, Stderr};

use super::bridge_reload::{Reloader, Served, TenantState};
use crate::cli::{BridgeArgs, PolicyArgs};
use crate::error::WrapperError;
use crate::plan::policy::{load_policy_with_tools, new_session_id};
use crate::plan::tenants::TenantPlan;

pub fn run(args: BridgeArgs) -> Result<(), WrapperError> {
    // Parse and validate everything before a runtime or socket exists.
    // A listener other machines can reach only where every client must name its tenant;
    // the admin listener, which serves counts and readiness, then too (a fleet's
    // Prometheus and health checks come from elsewhere). A tenant's own `listen`, which
    // asks no credentials, stays on loopback (plan::tenants).
    let parse = |text: &str| match args.tenants {
        Some(_) => ListenAddr::parse_network(text),
        None => text.parse(),
    };
    let addrs: Vec<ListenAddr> = args
        .listen
        .iter()
        .map(|a| parse(a))
        .collect::<Result<_, _>>()?;
    let admin_addr: Option<ListenAddr> = args.admin.as_deref().map(parse).transpose()?;
    // Counted only for an admin listener to report: otherwise nothing reads them.
    let metrics = admin_addr
        .as_ref()
        .map(|_| Arc::new(bridge::log::metrics::Metrics::default()));
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let untrusted = vec![cwd.clone()];
    let session_id = args.session.clone().unwrap_or_else(new_session_id);
    let dns = if args.dns.is_empty() {
        bridge::DnsConfig::System
    } else {
        bridge::DnsConfig::Servers(args.dns.clone())
    };
    // A registry's document read while the tools are asked (`tools = [...]`, now and at
    // each reload) is looked up as this bridge looks names up.
    crate::plan::tools::fetch::resolve_as(dns.clone());
    // What is read meanwhile is logged once the log is open.
    let fetches = crate::plan::tools::fetch::Fetches::new();
    let tenants = match &args.tenants {
        Some(path) => {
            refuse_policy_flags(&args.policy)?;
            Some(crate::plan::tenants::load(
                path,
                args.max_connections,
                None,
                &cwd,
                &fetches,
            )?)
        }
        None => None,
    };
    let own_listeners = tenants
        .iter()
        .flatten()
        .any(|tenant| !tenant.listen.is_empty());
    if addrs.is_empty() && !own_listeners {
        return Err(WrapperError::Usage(
            "netbox bridge needs somewhere to listen: give --listen 127.0.0.1:PORT (or a \
             tenant a listen = [...] of its own)"
                .into(),
        ));
    }
    let policy = match tenants {
        // Never used for a client: a listener that serves tenants refuses whoever names
        // none.
        Some(_) => Policy::deny_all(),
        None => {
            let (policy, tools, _) =
                load_policy_with_tools(&args.policy, &cwd, &untrusted, &[], &fetches)?;
            for line in tools {
                crate::output::say(&format!("netbox bridge: {line}"));
            }
            policy
        }
    };
    let inspector = inspector(&policy, &args, &session_id)?;
    let listener_tls = listener_tls(&args, &addrs, tenants.as_deref())?;
    let upstream_proxy = match &args.upstream_proxy {
        Some(url) => Some(Arc::new(crate::plan::upstream::upstream_proxy(
            "--upstream-proxy",
            url,
            &crate::plan::upstream::ProxyFiles {
                credentials: args.upstream_proxy_token_file.as_deref(),
                ca: args.upstream_proxy_ca.as_deref(),
                cert: args.upstream_proxy_cert.as_deref(),
                key: args.upstream_proxy_key.as_deref(),
            },
            args.no_proxy.as_deref(),
            false,
        )?)),
        None => None,
    };
    let stderr = if args.quiet {
        Stderr::Quiet
    } else {
        Stderr::Summary
    };
    let log_target = args
        .log
        .as_deref()
        .map(|l| bridge::log::LogTarget::parse(l.as_os_str()));
    let log_name = log_target
        .as_ref()
        .map(|t| std::path::PathBuf::from(t.to_string()))
        .unwrap_or_default();
    let log = EventLog::open_target(log_target.as_ref(), stderr)
        .map(|log| {
            let log = log.limit_refusals_per_minute(args.log_refusals_per_minute);
            match &metrics {
                Some(metrics) => log.with_metrics(Arc::clone(metrics)),
                None => log,
            }
        })
        .map_err(|source| bridge::BridgeError::OpenLog {
            path: log_name.clone(),
            source,
        })?;
    // Logged after the policies they were read for.
    let fetched = (session_id.clone(), fetches.take_records());
    let mut config = BridgeConfig {
        connect_timeout: args.connect_timeout,
        header_timeout: args.header_timeout,
        identify_timeout: args.identify_timeout,
        idle_timeout: args.idle_timeout,
        dns,
        refusal_status: http_status(args.refusal_status)?,
        max_connections: args.max_connections,
        trim_memory: Some(crate::sys::memory::return_free_pages),
        panic_on_host: crate::testhooks::hooks().bridge_panic_host(),
        inspector,
        drain_timeout: args.drain_timeout,
        upstream_proxy,
        ..BridgeConfig::default()
    };
    let can_inspect = config.inspector.is_some();
    let (session, tenant_listeners, served) = match (tenants, &args.tenants) {
        (Some(plans), Some(file)) => {
            let TenantsServed {
                gate,
                listeners,
                states,
            } = served_tenants(plans, &session_id, args.max_unidentified)?;
            let served = Served::Tenants {
                gate: Arc::clone(&gate),
                file: file.clone(),
                bridge_connections: args.max_connections,
                share: crate::plan::tenants::share_of(args.max_connections, states.len()),
                tenants: states,
            };
            (gate, listeners, served)
        }
        _ => {
            let session = Arc::new(Session::new(
                session_id,
                Arc::new(policy),
                args.max_connections,
            ));
            let served = Served::Alone {
                session: Arc::clone(&session),
                args: args.policy.clone(),
            };
            (session, Vec::new(), served)
        }
    };
    let mut reloader = Reloader::new(served, cwd, can_inspect);
    reloader.takes_certificates = args.client_ca.is_some();
    let reloader = Arc::new(reloader);
    let unidentified = match args.tenants {
        Some(_) => args.max_unidentified,
        None => 0,
    };
    if let Some(note) = crate::limits::open_file_note(args.max_connections, unidentified) {
        crate::output::say(&note);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WrapperError::Runtime)?;
    let served = runtime.block_on(async move {
        // Before anything listens: a SIGHUP from then on reloads, never ends the bridge.
        let hangup = super::bridge_reload::catch_hangup().map_err(WrapperError::Runtime)?;
        let mut listeners = Vec::new();
        let every = addrs
            .iter()
            .map(|addr| (addr, &session, listener_tls.as_ref()))
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
        // Announced only once every listener is bound, so a client that reads this line
        // can connect to any of them.
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
        for sl in &listeners {
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
        let log = Arc::new(log);
        reloader.record_start(&log);
        crate::plan::tools::fetch::log_records(&log, &fetched.0, fetched.1);
        let admin = Arc::new(bridge::serve::admin::Admin {
            metrics: metrics.unwrap_or_default(),
            sessions: Box::new(gauges(Arc::clone(&reloader), Arc::clone(&session))),
            ready: std::sync::atomic::AtomicBool::new(true),
            capacity: Arc::clone(&config.capacity),
        });
        let admin_task = match &admin_addr {
            Some(addr) => {
                if let ListenAddr::Unix(path) = addr {
                    remove_stale_socket(path)?;
                }
                let listener = addr.bind().await?;
                config.own_listeners.extend(tcp_address(&listener));
                crate::output::say(&format!(
                    "netbox bridge: admin on {} ({} and {})",
                    listener.describe(),
                    bridge::serve::admin::METRICS_PATH,
                    bridge::serve::admin::READY_PATH
                ));
                Some(tokio::spawn(bridge::serve::admin::serve(
                    listener,
                    Arc::clone(&admin),
                )))
            }
            None => None,
        };
        // No client reaches a listener of this bridge through it (another tenant's own),
        // and no registry a reload reads is fetched at one.
        config
            .own_listeners
            .extend(listeners.iter().filter_map(|sl| tcp_address(&sl.listener)));
        crate::plan::tools::fetch::listening_at(config.own_listeners.clone());
        let reloading = tokio::spawn(super::bridge_reload::reload_when_asked(
            reloader,
            Arc::clone(&log),
            args.watch,
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
    });
    // A reload still reading (a file on a hung mount) does not keep the bridge from
    // ending once it has drained.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

/// `--tls-cert`, `--tls-key` and `--client-ca`, read and checked: TLS for the `--listen`
/// listeners (TCP ones only), client certificates only where tenants can be named by them.
fn listener_tls(
    args: &BridgeArgs,
    addrs: &[ListenAddr],
    tenants: Option<&[TenantPlan]>,
) -> Result<Option<bridge::serve::listener_tls::ListenerTls>, WrapperError> {
    let by_certificate = tenants
        .iter()
        .flat_map(|t| t.iter())
        .any(|t| !t.client_names.is_empty());
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        if by_certificate {
            return Err(WrapperError::Usage(
                "the tenants file names tenants by client_names: give --tls-cert, --tls-key \
                 and --client-ca so that clients can present certificates"
                    .into(),
            ));
        }
        return Ok(None);
    };
    if addrs.iter().any(|a| matches!(a, ListenAddr::Unix(_))) {
        return Err(WrapperError::Usage(
            "--tls-cert is for TCP listeners: a unix: listener is reached only from this \
             machine, under its file permissions"
                .into(),
        ));
    }
    match (&args.client_ca, tenants, by_certificate) {
        (Some(_), None, _) => {
            return Err(WrapperError::Usage(
                "--client-ca names tenants by their certificates: it goes with --tenants".into(),
            ))
        }
        (None, Some(_), true) => {
            return Err(WrapperError::Usage(
                "the tenants file names tenants by client_names: give --client-ca, the CA \
                 that issues their certificates"
                    .into(),
            ))
        }
        _ => {}
    }
    let read = crate::plan::upstream::read_pem;
    let client_ca = match &args.client_ca {
        Some(path) => Some(read(path, "--client-ca")?),
        None => None,
    };
    bridge::serve::listener_tls::ListenerTls::new(
        &read(cert, "--tls-cert")?,
        &read(key, "--tls-key")?,
        client_ca.as_deref(),
    )
    .map(Some)
    .map_err(WrapperError::Usage)
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

/// With `--tenants` the policy is each tenant's, from the tenants file: a policy flag
/// beside it would be a policy no client gets.
fn refuse_policy_flags(policy: &PolicyArgs) -> Result<(), WrapperError> {
    let given = [
        ("--allowlist", !policy.allowlist.is_empty()),
        ("--allow", !policy.allow.is_empty()),
        ("--deny", !policy.deny.is_empty()),
        ("--allow-private", !policy.allow_private.is_empty()),
        ("--allow-tool", !policy.allow_tool.is_empty()),
        ("--private-ok", policy.private_ok),
        ("--inspect", policy.inspect),
        ("--upstream-ca", !policy.upstream_ca.is_empty()),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(WrapperError::Usage(format!(
            "{flag} with --tenants: each tenant's policy is its allowlist in the tenants file; \
             put the rule there"
        ))),
        None => Ok(()),
    }
}

/// Tenants named one by one at start; past it, a count (a fleet may have thousands).
const TENANT_LINES: usize = 10;

/// A tenant's own listener: whoever connects to it is that tenant.
type TenantListener = (ListenAddr, Arc<Session>);

struct TenantsServed {
    gate: Arc<Session>,
    listeners: Vec<TenantListener>,
    states: BTreeMap<String, TenantState>,
}

/// The tenants' sessions (id `SESSION/NAME`): the session of the listeners where clients
/// name their tenant (with `unidentified` seats for those that have not yet), the tenants'
/// own listeners, and each tenant as a reload sees it.
fn served_tenants(
    plans: Vec<TenantPlan>,
    session_id: &str,
    unidentified: usize,
) -> Result<TenantsServed, WrapperError> {
    for plan in &plans {
        for line in &plan.tool_lines {
            crate::output::say(&format!("netbox bridge: tenant {}: {line}", plan.name));
        }
    }
    let own: Vec<(String, Vec<ListenAddr>)> = plans
        .iter()
        .map(|p| (p.name.clone(), p.listen.clone()))
        .collect();
    let (tenants, states) =
        super::bridge_reload::build_tenants(plans, session_id, &BTreeMap::new())
            .map_err(|reason| WrapperError::Usage(format!("tenants file: {reason}")))?;
    let listeners = own
        .into_iter()
        .flat_map(|(name, addrs)| {
            let session = Arc::clone(&states[&name].session);
            addrs.into_iter().map(move |a| (a, Arc::clone(&session)))
        })
        .collect();
    let gate = Session::serving_tenants(session_id, Arc::new(tenants), unidentified);
    Ok(TenantsServed {
        gate: Arc::new(gate),
        listeners,
        states,
    })
}

/// The session CA, when the policy inspects, with its certificate written where
/// `--ca-cert` says (clients must trust it, and have no sandbox to be given it in).
fn inspector(
    policy: &bridge::Policy,
    args: &BridgeArgs,
    session: &str,
) -> Result<Option<Arc<bridge::tls::inspector::Inspector>>, WrapperError> {
    let inspection = crate::plan::inspection::prepare(policy, &args.policy)?;
    let (inspection, out) = match (inspection, &args.ca_cert) {
        (None, None) => return Ok(None),
        (None, Some(out)) => {
            return Err(WrapperError::Usage(format!(
                "--ca-cert {}: nothing is inspected; add --inspect, or an [[http]] rule to an \
                 allowlist",
                out.display()
            )))
        }
        (Some(_), None) => {
            return Err(WrapperError::Usage(
                "the policy inspects tunnels (--inspect or [[http]] rules): give --ca-cert \
                 FILE, where the bridge writes its session CA's certificate for clients to \
                 trust"
                    .into(),
            ))
        }
        (Some(inspection), Some(out)) => (inspection, out),
    };
    let inspector = crate::plan::inspection::session_ca(session, inspection.upstream)?;
    // Not through a symlink: in a shared directory another user could have laid one to
    // a file of yours.
    let written = {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(out)
            .and_then(|mut file| file.write_all(inspector.ca_pem().as_bytes()))
    };
    written.map_err(|source| WrapperError::Path {
        path: out.clone(),
        what: "--ca-cert",
        source,
    })?;
    Ok(Some(Arc::new(inspector)))
}

fn http_status(code: u16) -> Result<http::StatusCode, WrapperError> {
    http::StatusCode::from_u16(code)
        .map_err(|_| WrapperError::Usage(format!("--refusal-status {code} is not an HTTP status")))
}

/// A socket file left by an earlier bridge would make bind fail; only sockets are removed.
/// One that a live process still listens on is not stale: taking its path would cut that
/// process off without a word (a second bridge started on the same path, review 38).
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
