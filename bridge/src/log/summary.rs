//! The human side of the log: one line on stderr per event, and prose for each reason.

use crate::policy::{Reason, Verdict};

use super::{Event, Proto};

/// The stderr line for an event.
pub fn summary(e: &Event) -> String {
    let verb = match (e.proto, e.method.as_deref()) {
        (Proto::HttpConnect, _) => "CONNECT".to_owned(),
        (Proto::Socks5, _) => "SOCKS5".to_owned(),
        (Proto::Captured, _) => "captured".to_owned(),
        (Proto::Dns, _) => "DNS lookup of".to_owned(),
        (Proto::Fetch, _) => "netbox's own GET of".to_owned(),
        (Proto::Inspected, Some(method)) => format!(
            "{} {}",
            printable_ascii(method),
            printable_ascii(e.path.as_deref().unwrap_or("?"))
        ),
        (_, Some(method)) => method.to_owned(),
        (_, None) => "request".to_owned(),
    };
    let target = match (&e.host, e.port) {
        (Some(host), Some(port)) if host.contains(':') => format!("[{host}]:{port}"),
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.clone(),
        _ => "(unparsed)".to_owned(),
    };
    let rule = e
        .rule
        .as_ref()
        .map(|r| format!(" [{r}]"))
        .unwrap_or_default();
    match e.decision {
        // A request's bytes up are its body's (a GET has none): its status says more.
        Verdict::Allow if matches!(e.proto, Proto::HttpForward | Proto::Inspected) => format!(
            "netbox: allowed {verb} {target}{} ({}{}{} B down, {} ms){rule}",
            e.dialed.map(|d| format!(" via {d}")).unwrap_or_default(),
            e.status.map(|s| format!("{s}, ")).unwrap_or_default(),
            if e.bytes_up > 0 {
                format!("{} B sent, ", e.bytes_up)
            } else {
                String::new()
            },
            e.bytes_down,
            e.duration_ms,
        ),
        Verdict::Allow => format!(
            "netbox: allowed {verb} {target}{} ({} B up, {} B down, {} ms){rule}",
            e.dialed.map(|d| format!(" via {d}")).unwrap_or_default(),
            e.bytes_up,
            e.bytes_down,
            e.duration_ms,
        ),
        Verdict::Deny => format!(
            "netbox: blocked {verb} {target} ({}){rule}",
            e.detail.as_deref().unwrap_or(describe(e.reason)),
        ),
    }
}

/// What an allowed event is said once for: its kind and target (`CONNECT a.test:443`), so
/// that a tool's fifteen connections to its registry are one line.
pub fn allowed_key(e: &Event) -> String {
    format!(
        "{:?} {} {:?} {}",
        e.proto,
        e.method.as_deref().unwrap_or(""),
        e.host,
        e.port.unwrap_or(0)
    )
}

/// Prose for a reason, for people.
pub fn describe(reason: Reason) -> &'static str {
    match reason {
        Reason::AllowedByRule => "allowed by rule",
        Reason::Learning => "learn mode",
        Reason::PublicAddress => "public address",
        Reason::OpenedByRule => "address opened by rule",
        Reason::DeniedByRule => "denied by rule",
        Reason::NotAllowed => "not on allowlist",
        Reason::NonPublicAddress => "resolves to a non-public address",
        Reason::ResolveFailed => "name did not resolve",
        Reason::UpstreamUnreachable => "upstream unreachable",
        Reason::UpstreamTimeout => "upstream did not answer in time",
        Reason::BadRequest => "malformed request",
        Reason::HeaderTooLarge => "request header too large",
        Reason::HeaderTimeout => "request header timed out",
        Reason::Unsupported => "unsupported request",
        Reason::ConnectionLimit => "too many connections open",
        Reason::ServerNameMismatch => "TLS asks for another host",
        Reason::NoServerName => "TLS names no host",
        Reason::NotTls => "not TLS on a TLS port",
        Reason::MethodNotAllowed => "method not allowed by the HTTP rules",
        Reason::PathNotAllowed => "path not allowed by the HTTP rules",
        Reason::HostMismatch => "request names another host than its tunnel",
        Reason::UpstreamNotTrusted => "upstream certificate not trusted",
        Reason::ProxyAuthRequired => "names no tenant of this bridge",
        Reason::Relayed => "relayed to the bridge that judges",
        Reason::UpstreamProxy => "the upstream proxy refused or failed",
        Reason::SecretMisdirected => "a secret's placeholder sent to a host it does not go to",
    }
}

/// Text a client chose, for a terminal line: no control characters, at most 120 bytes.
fn printable_ascii(text: &str) -> String {
    let shown: String = text
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .take(120)
        .collect();
    shown
}
