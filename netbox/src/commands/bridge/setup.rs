//! The parts of a bridge that are read and checked before it serves: TLS for its
//! listeners, inspection's CA, the tenants' sessions and listeners, the refusal status.

use std::collections::BTreeMap;
use std::sync::Arc;

use bridge::serve::listen::ListenAddr;
use bridge::Session;

use super::reload::{self, TenantState};
use crate::cli::{BridgeArgs, PolicyArgs};
use crate::error::WrapperError;
use crate::plan::tenants::TenantPlan;

/// `--tls-cert`, `--tls-key` and `--client-ca`, read and checked: TLS for the `--listen`
/// listeners (TCP ones only), client certificates only where tenants can be named by them.
pub(super) fn listener_tls(
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

/// With `--tenants` the policy is each tenant's, from the tenants file: a policy flag
/// beside it would be a policy no client gets.
pub(super) fn refuse_policy_flags(policy: &PolicyArgs) -> Result<(), WrapperError> {
    let given = [
        ("--allowlist", !policy.allowlist.is_empty()),
        ("--allow", !policy.allow.is_empty()),
        ("--deny", !policy.deny.is_empty()),
        ("--allow-private", !policy.allow_private.is_empty()),
        ("--allow-tool", !policy.allow_tool.is_empty()),
        ("--private-ok", policy.private_ok),
        ("--inspect", policy.inspect),
        ("--secret", !policy.secret.is_empty()),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(WrapperError::Usage(format!(
            "{flag} with --tenants: each tenant's policy is its allowlist in the tenants file; \
             put the rule there"
        ))),
        None => Ok(()),
    }
}

/// A tenant's own listener: whoever connects to it is that tenant.
pub(super) type TenantListener = (ListenAddr, Arc<Session>);

pub(super) struct TenantsServed {
    pub(super) gate: Arc<Session>,
    pub(super) listeners: Vec<TenantListener>,
    pub(super) states: BTreeMap<String, TenantState>,
}

/// The tenants' sessions (id `SESSION/NAME`): the session of the listeners where clients
/// name their tenant (with `unidentified` seats for those that have not yet), the tenants'
/// own listeners, and each tenant as a reload sees it.
pub(super) fn served_tenants(
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
    let (tenants, states) = reload::build_tenants(plans, session_id, &BTreeMap::new())
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
pub(super) fn inspector(
    inspects: bool,
    args: &BridgeArgs,
    session: &str,
) -> Result<Option<Arc<bridge::tls::inspector::Inspector>>, WrapperError> {
    let inspection = crate::plan::inspection::prepare_if(inspects, &args.policy)?;
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
                "the policy inspects tunnels (--inspect, [[http]] or [[secret]] tables): give \
                 --ca-cert FILE, where the bridge writes its session CA's certificate for \
                 clients to trust"
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

pub(super) fn http_status(code: u16) -> Result<http::StatusCode, WrapperError> {
    http::StatusCode::from_u16(code)
        .map_err(|_| WrapperError::Usage(format!("--refusal-status {code} is not an HTTP status")))
}
