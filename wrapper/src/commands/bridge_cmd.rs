//! `netbox bridge`: the egress proxy on its own, on listeners it binds itself.

use std::sync::Arc;

use bridge::listen::ListenAddr;
use bridge::{BridgeConfig, EventLog, Session, SessionListener, Stderr};

use crate::cli::BridgeArgs;
use crate::error::WrapperError;
use crate::plan::policy::{load_policy_with_tools, new_session_id};

pub fn run(args: BridgeArgs) -> Result<(), WrapperError> {
    // Parse and validate everything before a runtime or socket exists.
    let addrs: Vec<ListenAddr> = args
        .listen
        .iter()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let untrusted = vec![cwd.clone()];
    let (policy, tools, _) = load_policy_with_tools(&args.policy, &cwd, &untrusted)?;
    for line in tools {
        crate::output::say(&format!("netbox bridge: {line}"));
    }
    let session_id = args.session.clone().unwrap_or_else(new_session_id);
    let inspector = inspector(&policy, &args, &session_id)?;
    let stderr = if args.quiet {
        Stderr::Quiet
    } else {
        Stderr::Summary
    };
    let log = EventLog::open(args.log.as_deref(), stderr)
        .map(|log| log.limit_refusals_per_minute(args.log_refusals_per_minute))
        .map_err(|source| bridge::BridgeError::OpenLog {
            path: args.log.clone().unwrap_or_default(),
            source,
        })?;
    let config = BridgeConfig {
        connect_timeout: args.connect_timeout,
        header_timeout: args.header_timeout,
        idle_timeout: args.idle_timeout,
        dns: if args.dns.is_empty() {
            bridge::DnsConfig::System
        } else {
            bridge::DnsConfig::Servers(args.dns.clone())
        },
        refusal_status: http_status(args.refusal_status)?,
        max_connections: args.max_connections,
        trim_memory: Some(crate::sys::memory::return_free_pages),
        panic_on_host: crate::testhooks::hooks().bridge_panic_host(),
        inspector,
        ..BridgeConfig::default()
    };
    let session = Arc::new(Session::new(
        session_id,
        Arc::new(policy),
        args.max_connections,
    ));
    if let Some(note) = crate::limits::open_file_note(args.max_connections) {
        crate::output::say(&note);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WrapperError::Runtime)?;
    runtime.block_on(async move {
        let mut listeners = Vec::new();
        for addr in &addrs {
            if let ListenAddr::Unix(path) = addr {
                remove_stale_socket(path)?;
            }
            listeners.push(SessionListener {
                session: Arc::clone(&session),
                listener: addr.bind().await?,
            });
        }
        // Announced only once every listener is bound, so a client that reads this line
        // can connect to any of them.
        for sl in &listeners {
            crate::output::say(&format!(
                "netbox bridge: listening on {} (session {}, {} allow rules)",
                sl.listener.describe(),
                session.id,
                session.policy.allow_count()
            ));
        }
        let log = Arc::new(log);
        // A bridge that cannot log stops: what it lets through must be on record.
        let stop = {
            let log = Arc::clone(&log);
            async move {
                tokio::select! {
                    () = shutdown_signal() => {}
                    () = log.failed() => {}
                }
            }
        };
        bridge::serve(listeners, config, Arc::clone(&log), stop).await;
        log.flush_suppressed();
        for addr in &addrs {
            if let ListenAddr::Unix(path) = addr {
                let _ = std::fs::remove_file(path);
            }
        }
        match log.failure() {
            Some(reason) => Err(WrapperError::EventLogWrite {
                path: args.log.clone().unwrap_or_default(),
                reason,
            }),
            None => Ok(()),
        }
    })
}

/// The session CA, when the policy inspects, with its certificate written where
/// `--ca-cert` says (clients must trust it, and have no sandbox to be given it in).
fn inspector(
    policy: &bridge::Policy,
    args: &BridgeArgs,
    session: &str,
) -> Result<Option<Arc<bridge::inspect::Inspector>>, WrapperError> {
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
fn remove_stale_socket(path: &std::path::Path) -> Result<(), WrapperError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
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
