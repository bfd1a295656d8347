//! The one pipeline every request runs, whatever protocol named it:
//! policy → resolve → classify each address → dial an admitted address.
//!
//! Each step records what it found in the [`Attempt`], so the log shows the rule, the
//! resolved addresses and the address dialed. Any step can refuse; a refusal happens
//! before anything is sent upstream, and the dialer only ever sees checked addresses.
//! netbox's own fetches ([`crate::egress::fetch`]) take the same steps ([`decide`], [`admit`],
//! then the dialer): nothing in netbox looks a name up or judges an address otherwise.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::outbound::Outbound;

use super::{Egress, Refusal};
use crate::egress::upstream_proxy::UpstreamProxy;
use crate::ipclass::IpClass;
use crate::log::Attempt;
use crate::policy::{Reason, Verdict};
use crate::target::{Host, Target};

/// Addresses tried per request at most: each can take the full connect timeout.
pub(crate) const MAX_DIAL_ADDRESSES: usize = 8;
/// Resolved addresses written to the log at most.
const MAX_LOGGED_ADDRESSES: usize = 32;

/// The IPv4 address a NAT64 or 6to4 address stands for.
fn inner_ipv4(addr: std::net::IpAddr) -> Option<std::net::Ipv4Addr> {
    match addr {
        std::net::IpAddr::V6(v6) => crate::ipclass::embedded_ipv4(v6),
        std::net::IpAddr::V4(_) => None,
    }
}

/// Runs the pipeline for `target`, filling in `attempt` as it goes: a connection to
/// `target` itself, or a tunnel to it through the upstream proxy.
pub async fn open(
    egress: &Egress<'_>,
    attempt: &mut Attempt,
    target: &Target,
) -> Result<Outbound, Refusal> {
    open_as(egress, attempt, target, Carrying::Tunnel)
        .await
        .map(|(stream, _)| stream)
}

/// [`open`] for the forward path: through an upstream proxy, the connection is to the
/// proxy itself, which is returned too (the requests go to it in absolute form).
pub async fn open_for_requests(
    egress: &Egress<'_>,
    attempt: &mut Attempt,
    target: &Target,
) -> Result<(Outbound, Option<ViaProxy>), Refusal> {
    open_as(egress, attempt, target, Carrying::Requests).await
}

/// A connection to an upstream proxy, for requests to a target it is to reach.
pub struct ViaProxy {
    pub proxy: Arc<UpstreamProxy>,
    /// The target as the proxy is told it: as the client named it, or the address this
    /// policy pinned the name to (which only this policy knows).
    pub named: Target,
}

/// What a connection through an upstream proxy will carry.
#[derive(Clone, Copy)]
enum Carrying {
    /// Bytes, through a CONNECT tunnel.
    Tunnel,
    /// HTTP requests in absolute form, sent to the proxy itself.
    Requests,
}

/// `refusal`, recorded in `attempt`.
fn refuse(attempt: &mut Attempt, refusal: Refusal) -> Refusal {
    attempt.reason = refusal.reason;
    attempt.detail = Some(refusal.detail.clone());
    refusal
}

async fn open_as(
    egress: &Egress<'_>,
    attempt: &mut Attempt,
    target: &Target,
    carrying: Carrying,
) -> Result<(Outbound, Option<ViaProxy>), Refusal> {
    attempt.target = Some(target.clone());
    // A dial again for a request (its kept connection closed) starts from nothing: what an
    // earlier dial found is not this one's.
    attempt.decision = Verdict::Deny;
    attempt.resolved.clear();
    attempt.dialed = None;
    attempt.via = None;
    attempt.opened_by = None;
    if egress.panic_on_host == Some(target.host.to_string().as_str()) {
        panic!("test hook: a request for {}", target.host);
    }
    // The DNS stub's addresses are the sandbox's own: never dialled, whatever a rule says
    // (capture maps one it handed out back to its name before this).
    if let Host::Ip(ip) = &target.host {
        if egress.addresses.serving() && crate::session::addresses::is_session_range(*ip) {
            let detail = format!(
                "{ip} is an address of the sandbox's DNS stub that names nothing: connect to \
                 the name"
            );
            return Err(refuse(attempt, Refusal::new(Reason::NotAllowed, detail)));
        }
    }
    // The bridge's own name is answered by the bridge itself (offer.rs), never dialled
    // nor passed on to a bridge this one relays to, whatever a rule says: passed on, it
    // would get CMD the placeholders of every secret the far bridge holds for the tenant.
    if matches!(&target.host, Host::Name(name) if name == crate::offer::OFFER_HOST) {
        let detail = format!(
            "{} is this bridge's own name: it answers GET http://{}/ alone",
            crate::offer::OFFER_HOST,
            crate::offer::OFFER_HOST
        );
        return Err(refuse(attempt, Refusal::new(Reason::BadRequest, detail)));
    }
    let policy = egress.policy;
    let decision = decide(policy, target, attempt)?;
    // Through an upstream proxy, a name goes as it was given: the proxy resolves it. An IP
    // target, or a name this policy pins to addresses, is held to this policy's address
    // rules below first (and a pinned name goes as its address), unless the bridge it
    // relays to judges everything.
    let proxy = egress.upstream_proxy.filter(|proxy| proxy.carries(target));
    if let Some(proxy) = proxy {
        let unpinned_name =
            matches!(target.host, Host::Name(_)) && policy.pinned(&target.host).is_none();
        if policy.is_relaying() || unpinned_name {
            return through(proxy, egress, attempt, target.clone(), carrying)
                .await
                .map_err(|refusal| refuse(attempt, refusal));
        }
    }

    let mut admitted = admit(
        egress.resolver,
        policy,
        &decision,
        target,
        egress.own_listeners,
        attempt,
    )
    .await?;

    if let (Some(proxy), Some((addr, rule))) = (proxy, admitted.first()) {
        attempt.opened_by.clone_from(rule);
        let named = Target {
            host: Host::Ip(addr.ip()),
            port: target.port,
        };
        return through(proxy, egress, attempt, named, carrying)
            .await
            .map_err(|refusal| refuse(attempt, refusal));
    }
    admitted.truncate(MAX_DIAL_ADDRESSES);
    let candidates: Vec<SocketAddr> = admitted.iter().map(|(addr, _)| *addr).collect();
    match super::dialer::dial(&candidates, egress.connect_timeout).await {
        Ok(stream) => {
            attempt.dialed = stream.peer_addr().ok();
            // A non-public address needed an IP/CIDR rule of its own: name it too.
            attempt.opened_by = admitted
                .iter()
                .find(|(addr, _)| Some(*addr) == attempt.dialed)
                .and_then(|(_, rule)| rule.clone());
            attempt.decision = Verdict::Allow;
            Ok((Outbound::Tcp(stream), None))
        }
        Err(e) => {
            let mut refusal = Refusal::new(Reason::UpstreamUnreachable, e.to_string());
            refusal.io_kind = Some(e.source.kind());
            attempt.dialed = Some(e.addr);
            Err(refuse(attempt, refusal))
        }
    }
}

/// The policy's decision on `target`, recorded in `attempt`: an allow, or the refusal.
pub(crate) fn decide(
    policy: &crate::policy::Policy,
    target: &Target,
    attempt: &mut Attempt,
) -> Result<crate::policy::Decision, Refusal> {
    let decision = policy.decide(target);
    attempt.rule = decision.rule.clone();
    attempt.reason = decision.reason;
    if !decision.is_allow() {
        let detail = match &decision.rule {
            Some(rule) => format!("denied by rule {:?} at {rule}", rule.text),
            None => "not on allowlist".to_owned(),
        };
        return Err(refuse(attempt, Refusal::new(decision.reason, detail)));
    }
    Ok(decision)
}

/// Resolve → classify → admit, for `target` allowed by `decision`: the addresses it may be
/// dialed at, each with the rule that opened it (a non-public one needs one), in the
/// resolver's order. Each address is classified by the routing table
/// ([`crate::local_routes::classify_here`]: the machine's own public addresses are its own, not
/// public), and none of `own_listeners` is ever one. `attempt` records what was resolved
/// and, on a refusal, why. Every connection the bridge makes for a client goes through
/// this, and so does every fetch netbox makes itself ([`crate::egress::fetch`]).
pub(crate) async fn admit(
    resolver: &crate::egress::resolver::Resolver,
    policy: &crate::policy::Policy,
    decision: &crate::policy::Decision,
    target: &Target,
    own_listeners: &[SocketAddr],
    attempt: &mut Attempt,
) -> Result<Vec<(SocketAddr, Option<crate::policy::RuleRef>)>, Refusal> {
    let addrs = match resolver.resolve(&target.host, policy).await {
        Ok(addrs) => addrs,
        Err(e) => {
            let detail = format!("cannot resolve {}: {e}", target.host);
            return Err(refuse(attempt, Refusal::new(Reason::ResolveFailed, detail)));
        }
    };
    attempt.resolved = addrs.iter().take(MAX_LOGGED_ADDRESSES).copied().collect();

    let mut admitted = Vec::new();
    let mut first_refused = None;
    let mut own_listener = None;
    for &addr in &addrs {
        // A listener of this bridge's own (another tenant's, the admin one) is never a
        // destination, whatever a rule opens: through it a client would come back in as
        // someone else.
        let dialed = SocketAddr::new(addr, target.port);
        let class = crate::local_routes::classify_here(addr);
        if is_own_listener(own_listeners, dialed, class) {
            own_listener.get_or_insert(dialed);
            continue;
        }
        let verdict = policy.admit_for(decision, addr, class, target.port);
        if verdict.is_allow() {
            admitted.push((SocketAddr::new(addr, target.port), verdict.rule));
        } else if first_refused.is_none() {
            first_refused = Some((addr, verdict));
        }
    }
    if let (true, Some(own)) = (admitted.is_empty(), own_listener) {
        let detail = format!("{own} is this bridge's own listener: not reachable through it");
        return Err(refuse(
            attempt,
            Refusal::new(Reason::NonPublicAddress, detail),
        ));
    }
    if admitted.is_empty() {
        let Some((addr, verdict)) = first_refused else {
            let detail = format!("{} has no address", target.host);
            return Err(refuse(attempt, Refusal::new(Reason::ResolveFailed, detail)));
        };
        attempt.refused_class = verdict.class;
        // A tool's registry (its rule came from --allow-tool): one flag opens every one, and
        // it is said first, so that following the first advice fixes every host of every
        // tool at once.
        let tool_rule = decision
            .rule
            .as_ref()
            .filter(|rule| {
                verdict.rule.is_none() && rule.file.starts_with(crate::policy::TOOL_RULE_PREFIX)
            })
            .map(|rule| rule.file.clone());
        let detail = match (&verdict.rule, verdict.class) {
            (Some(rule), _) => format!("{addr} denied by rule {:?} at {rule}", rule.text),
            (None, Some(class))
                if tool_rule.is_some() && crate::policy::private_service_class(class) =>
            {
                format!(
                    "{host} resolves to {addr}, a {} address; it is a registry of {}: \
                     --private-ok lets every --allow-tool registry reach internal addresses \
                     (for this name alone: --allow-private {host}:{port})",
                    class.describe(),
                    tool_rule.as_deref().unwrap_or_default(),
                    host = target.host,
                    port = target.port,
                )
            }
            (None, Some(class)) if inner_ipv4(addr).is_some() => format!(
                "{} resolves to {addr}, which a gateway turns into {}, a {} address; open that \
                 IPv4 address with an IP/CIDR rule if you mean it",
                target.host,
                inner_ipv4(addr).unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
                class.describe()
            ),
            (None, Some(class @ (IpClass::Loopback | IpClass::ThisMachine))) => format!(
                "{host} resolves to {addr}, a {} address (this machine's own services); \
                 open it with an IP/CIDR rule if you mean it, or let this exact name reach it: \
                 --allow-private {host}:{port} (in an allowlist: allow_private = [\"{host}:{port}\"])",
                class.describe(),
                host = target.host,
                port = target.port,
            ),
            (None, Some(class)) if crate::policy::private_service_class(class) => format!(
                "{host} resolves to {addr}, a {} address; to let this name reach it: \
                 --allow-private {host}:{port} (in an allowlist: allow_private = [\"{host}:{port}\"])",
                class.describe(),
                host = target.host,
                port = target.port,
            ),
            (None, Some(class)) => format!(
                "{} resolves to {addr}, a {} address; open it with an IP/CIDR rule",
                target.host,
                class.describe()
            ),
            (None, None) => format!("{addr} refused"),
        };
        let detail = match tool_rule {
            Some(tool) if !detail.contains("--private-ok") => format!(
                "{detail}; it is a registry of {tool}: --private-ok lets every --allow-tool \
                 registry reach internal addresses"
            ),
            _ => detail,
        };
        if verdict.rule.is_some() {
            attempt.rule = verdict.rule;
        }
        return Err(refuse(attempt, Refusal::new(verdict.reason, detail)));
    }
    Ok(admitted)
}

/// The last step through an upstream proxy: a tunnel to `named`, or a connection to the
/// proxy for requests to it; `attempt` names the proxy and its address.
async fn through(
    proxy: &Arc<UpstreamProxy>,
    egress: &Egress<'_>,
    attempt: &mut Attempt,
    named: Target,
    carrying: Carrying,
) -> Result<(Outbound, Option<ViaProxy>), Refusal> {
    attempt.via = Some(proxy.name.clone());
    let timeout = egress.connect_timeout;
    let resolver = egress.resolver;
    let stream = match carrying {
        Carrying::Tunnel => proxy.connect(resolver, &named, timeout).await?,
        Carrying::Requests => proxy.dial(resolver, timeout).await?,
    };
    attempt.dialed = stream.peer_addr().ok();
    attempt.decision = Verdict::Allow;
    let via = ViaProxy {
        proxy: Arc::clone(proxy),
        named,
    };
    Ok((stream, Some(via)))
}

/// Whether `dialed` reaches one of this bridge's own listeners: one bound there, or one
/// bound at every address (`0.0.0.0`, `[::]`, which takes IPv4 too) on that port, when
/// `dialed` is an address of this machine, of any class (a pod's own 10.x is private, and
/// reaches its listeners as loopback does).
fn is_own_listener(own: &[SocketAddr], dialed: SocketAddr, class: IpClass) -> bool {
    let this_machine = || {
        let ip = crate::target::canonical_ip(dialed.ip());
        let inner = match ip {
            std::net::IpAddr::V6(v6) => crate::ipclass::embedded_ipv4(v6),
            std::net::IpAddr::V4(_) => None,
        };
        matches!(class, IpClass::Loopback | IpClass::ThisMachine)
            || ip.is_unspecified()
            || crate::local_routes::is_local(ip)
            || inner.is_some_and(|v4| crate::local_routes::is_local(v4.into()))
    };
    own.iter().any(|listener| {
        *listener == dialed
            || (listener.ip().is_unspecified()
                && listener.port() == dialed.port()
                && this_machine())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_at_every_address_is_reached_at_any_of_this_machines() {
        let own: Vec<SocketAddr> = vec!["0.0.0.0:3128".parse().unwrap()];
        let at = |text: &str, class| is_own_listener(&own, text.parse().unwrap(), class);
        assert!(at("127.0.0.1:3128", IpClass::Loopback));
        // Whatever class an address has, the kernel says whether it is this machine's.
        assert!(at("127.0.0.2:3128", IpClass::Private));
        assert!(at("[::ffff:127.0.0.3]:3128", IpClass::Private));
        assert!(!at("192.0.2.4:3128", IpClass::Private));
        assert!(!at("127.0.0.1:3129", IpClass::Loopback));
        let own: Vec<SocketAddr> = vec!["127.0.0.1:3128".parse().unwrap()];
        assert!(is_own_listener(
            &own,
            "127.0.0.1:3128".parse().unwrap(),
            IpClass::Loopback
        ));
        assert!(!is_own_listener(
            &own,
            "127.0.0.2:3128".parse().unwrap(),
            IpClass::Loopback
        ));
    }
}
