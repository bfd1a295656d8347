//! Capture: connections that reach the bridge without a proxy. Inside the sandbox every
//! address is local (pid 1's catch-all routes), so a program that ignores the proxy
//! settings and dials an address lands on the bridge's listener for that port, and the
//! accepted socket's local address is the one it dialled. That is the target: the name a
//! session address was handed out for by the DNS stub (dns.rs, session/addresses.rs), or the
//! address itself. From there it is a tunnel like CONNECT's: policy, resolution, the
//! address checks, the dial, and what the tunnel carries (a TLS port's ClientHello must
//! name the target; on port 80 each request's Host must, answered with a 403 otherwise).
//! A refusal before the tunnel opens is a reset.

use std::net::SocketAddr;
use std::time::Duration;

use crate::client_io::ClientIo;
use crate::conn::Conn;
use crate::log::{Attempt, End, Proto};
use crate::policy::{HttpCheck, Reason};
use crate::target::{canonical_ip, Host, Target};

/// The port whose captured connections must carry HTTP naming their target.
const HTTP_PORT: u16 = 80;

/// Serves one captured connection, which was dialled to `dialled`.
pub async fn serve(io: ClientIo, conn: Conn, dialled: SocketAddr) {
    let conn = conn.wait_for_place(Duration::from_millis(500)).await;
    let mut attempt = Attempt::begin(conn.session.id.clone(), Proto::Captured);
    let host = match conn.session.addresses.name_for(dialled.ip()) {
        Some(name) => Host::Name(name),
        None => Host::Ip(canonical_ip(dialled.ip())),
    };
    let target = Target {
        host,
        port: dialled.port(),
    };
    if let Some(why) = conn.over_limit() {
        attempt.target = Some(target);
        attempt.reason = Reason::ConnectionLimit;
        attempt.detail = Some(why.to_owned());
        conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
        io.reset_on_close();
        return;
    }
    let upstream = match crate::egress::open(&conn.egress(), &mut attempt, &target).await {
        Ok(upstream) => upstream,
        Err(_) => {
            // The attempt carries the refusal's reason and detail.
            conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
            io.reset_on_close();
            return;
        }
    };
    let (client, unread) = io.into_stream();
    let Some(client) = client else {
        conn.shared
            .log
            .record(&attempt.finish(End::ClientError, 0, 0));
        return;
    };
    let policy = &conn.policy;
    // Port 80 is read request by request (as an inspected tunnel is, with the HTTP rules
    // for the host or none), so every request, not only the first on a kept-alive
    // connection, must name the target in its Host: a server picks its site by it.
    let carried = if target.port == HTTP_PORT {
        let check = policy.http_check(&target).unwrap_or(HttpCheck::Any);
        let inspector = conn.shared.config.inspector.as_deref();
        crate::carry::inspect::serve(
            &conn,
            inspector,
            check,
            (client, unread),
            upstream,
            &target,
            &attempt,
        )
        .await
    } else {
        crate::carry::carry(&conn, client, unread, upstream, &target, &attempt).await
    };
    match carried {
        Ok(stats) => {
            conn.shared
                .log
                .record(&attempt.finish(stats.end, stats.bytes_up, stats.bytes_down));
        }
        Err(refused) => {
            refused.refuse(&mut attempt);
            conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
        }
    }
}
