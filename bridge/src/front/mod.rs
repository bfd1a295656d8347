//! The front end: one listener speaks both HTTP/1.1 proxy and SOCKS5, told apart by the
//! first byte (SOCKS5 greetings start with version byte 0x05; no HTTP method does).

pub mod capture;
pub mod dns;
mod forward;
pub(crate) mod head;
pub mod http;
pub mod socks5;

use crate::client_io::ClientIo;
use crate::conn::Conn;
use crate::log::{Attempt, End, Proto};
use crate::policy::Reason;

/// First byte of every SOCKS5 message (RFC 1928 §3).
const SOCKS5_VERSION: u8 = 0x05;

/// Serves one client connection to its end.
pub async fn handle(io: ClientIo, conn: Conn) {
    handle_from(io, conn, tokio::time::Instant::now()).await;
}

/// [`handle`] for a connection accepted at `started`: its head deadline counts from then
/// (a TLS client's handshake is part of it).
pub(crate) async fn handle_from(mut io: ClientIo, conn: Conn, started: tokio::time::Instant) {
    let timeout = conn.first_head_timeout();
    // Past a limit, a place freed a moment later is still this connection's: a client that
    // closes one connection and opens the next at once is not refused for the overlap.
    let conn = conn.wait_for_place(crate::conn::PLACE_WAIT).await;
    let first_byte = tokio::select! {
        first = tokio::time::timeout(timeout.saturating_sub(started.elapsed()), io.peek_first_byte()) => first,
        // The bridge is stopping: nothing was asked yet.
        () = conn.stopped() => return,
    };
    // The head deadline covers the whole head, first byte included.
    let left = timeout.saturating_sub(started.elapsed());
    match first_byte {
        Ok(Ok(Some(SOCKS5_VERSION))) => socks5::serve(io, conn, left).await,
        Ok(Ok(Some(_))) => http::serve(io, conn, left).await,
        // Closed or failed before saying anything: nothing was attempted.
        Ok(Ok(None)) | Ok(Err(_)) => {}
        Err(_) => {
            let mut attempt = Attempt::since(conn.session.id.clone(), Proto::Http, conn.accepted);
            attempt.reason = Reason::HeaderTimeout;
            attempt.detail = Some(format!("client sent nothing for {timeout:?}"));
            conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
            io.reset_on_close();
        }
    }
}
