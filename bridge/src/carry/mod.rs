//! What an opened tunnel (CONNECT's or SOCKS5's) carries, as its policy says: HTTP the
//! bridge inspects request by request (inspect), TLS checked to name the tunnel's host
//! (tls_check), or other bytes as they are (tunnel). `http_relay` sends one HTTP request on
//! and its response back, for an inspected tunnel and the forward path alike.

pub(crate) mod http_relay;
pub mod inspect;
pub(crate) mod secret_swap;
pub(crate) mod tls_check;
pub mod tunnel;

use bytes::Bytes;

use crate::client_io::Stream;
use crate::conn::Conn;
use crate::log::Attempt;
use crate::target::Target;
use tls_check::HelloRefusal;
use tunnel::TunnelStats;

/// Carries an opened tunnel to `target` to its end, `prefix` (what the client sent before
/// it opened) first. `opened`: the tunnel's attempt so far. On a refusal the client has
/// been cut off already; the caller logs it.
pub async fn carry(
    conn: &Conn,
    client: Stream,
    prefix: Bytes,
    upstream: crate::outbound::Outbound,
    target: &Target,
    opened: &Attempt,
) -> Result<TunnelStats, HelloRefusal> {
    let policy = &conn.policy;
    let config = &conn.shared.config;
    let Some(check) = policy.http_check(target) else {
        return tls_check::relay(
            client,
            prefix,
            upstream,
            target,
            policy,
            config,
            conn.stopped(),
        )
        .await;
    };
    crate::carry::inspect::serve(
        conn,
        config.inspector.as_deref(),
        check,
        (client, prefix),
        upstream,
        target,
        opened,
    )
    .await
}
