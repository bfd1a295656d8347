//! `netbox bridge`: the egress proxy on its own, on listeners it binds itself; with
//! `--tenants`, shared by several tenants, each under its own policy and session.

use std::sync::Arc;

use bridge::serve::listen::ListenAddr;
use bridge::{BridgeConfig, EventLog, Policy, Session, Stderr};

mod reload;
mod serving;
mod setup;

use crate::cli::BridgeArgs;
use crate::error::WrapperError;
use crate::plan::policy::{load_policy_with_tools, new_session_id};
use crate::plan::tenants::TenantPlan;
use reload::{Reloader, Served};
use serving::serve;
use setup::{
    http_status, inspector, listener_tls, refuse_policy_flags, served_tenants, TenantListener,
    TenantsServed,
};

pub fn run(args: BridgeArgs) -> Result<(), WrapperError> {
    let bridge = prepare(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WrapperError::Runtime)?;
    let served = runtime.block_on(serve(bridge));
    // A reload still reading (a file on a hung mount) does not keep the bridge from
    // ending once it has drained.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

/// Everything `netbox bridge` serves with, parsed and checked before a runtime or a socket
/// exists.
struct Prepared {
    addrs: Vec<ListenAddr>,
    admin_addr: Option<ListenAddr>,
    /// Counted only for an admin listener to report.
    metrics: Option<Arc<bridge::log::metrics::Metrics>>,
    log: EventLog,
    log_name: std::path::PathBuf,
    /// What was fetched while the tools were asked, logged after the policies it was for.
    fetched: (String, Vec<crate::plan::tools::fetch::FetchRecord>),
    config: BridgeConfig,
    /// The session of the `--listen` listeners (on a shared bridge, the one where clients
    /// name their tenant).
    session: Arc<Session>,
    tenant_listeners: Vec<TenantListener>,
    listener_tls: Option<bridge::serve::listener_tls::ListenerTls>,
    reloader: Arc<Reloader>,
    watch: bool,
}

// Whole: the arguments taken in the order each depends on the last (addresses, tenants,
// policy, TLS, the upstream proxy, the log, the sessions), every check before any socket.
fn prepare(args: BridgeArgs) -> Result<Prepared, WrapperError> {
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
            crate::plan::policy::refuse_secrets_at_bridge(policy)?
        }
    };
    let inspects = match &tenants {
        Some(plans) => plans.iter().any(|plan| plan.policy.inspects()),
        None => policy.inspects(),
    };
    let inspector = inspector(inspects, &args, &session_id)?;
    let listener_tls = listener_tls(&args, &addrs, tenants.as_deref())?;
    let upstream_proxy = upstream_proxy(&args)?;
    let (log, log_name) = open_log(&args, metrics.as_ref())?;
    // Logged after the policies they were read for.
    let fetched = (session_id.clone(), fetches.take_records());
    let config = BridgeConfig {
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
    let (session, tenant_listeners, served) = sessions(&args, tenants, policy, session_id)?;
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
    Ok(Prepared {
        addrs,
        admin_addr,
        metrics,
        log,
        log_name,
        fetched,
        config,
        session,
        tenant_listeners,
        listener_tls,
        reloader,
        watch: args.watch,
    })
}

/// `--upstream-proxy` with its files, read and checked.
fn upstream_proxy(
    args: &BridgeArgs,
) -> Result<Option<Arc<bridge::egress::upstream_proxy::UpstreamProxy>>, WrapperError> {
    let proxy = match &args.upstream_proxy {
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
    Ok(proxy)
}

/// The event log `--log` names (standard error's summary unless `--quiet`), counted into
/// `metrics` when an admin listener reports them, and the name it is reported by.
fn open_log(
    args: &BridgeArgs,
    metrics: Option<&Arc<bridge::log::metrics::Metrics>>,
) -> Result<(EventLog, std::path::PathBuf), WrapperError> {
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
            match metrics {
                Some(metrics) => log.with_metrics(Arc::clone(metrics)),
                None => log,
            }
        })
        .map_err(|source| bridge::BridgeError::OpenLog {
            path: log_name.clone(),
            source,
        })?;
    Ok((log, log_name))
}

/// The sessions a bridge serves: with `--tenants`, the one where clients name their tenant
/// and each tenant's (with its own listeners); otherwise one under `policy`. And what a
/// reload is to read again for them.
fn sessions(
    args: &BridgeArgs,
    tenants: Option<Vec<TenantPlan>>,
    policy: Policy,
    session_id: String,
) -> Result<(Arc<Session>, Vec<TenantListener>, Served), WrapperError> {
    let sessions = match (tenants, &args.tenants) {
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
    Ok(sessions)
}
