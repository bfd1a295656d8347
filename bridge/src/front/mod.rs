//! The front end: one listener speaks both HTTP/1.1 proxy and SOCKS5, told apart by the
//! first byte (SOCKS5 greetings start with version byte 0x05; no HTTP method does).

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
    let timeout = conn.shared.config.header_timeout;
    let started = tokio::time::Instant::now();
    match tokio::time::timeout(timeout, io.peek_first_byte()).await {
        Ok(Ok(Some(SOCKS5_VERSION))) => socks5::serve(io, conn).await,
        // The head deadline covers the whole head, first byte included.
        Ok(Ok(Some(_))) => http::serve(io, conn, timeout.saturating_sub(started.elapsed())).await,
        // Closed or failed before saying anything: nothing was attempted.
        Ok(Ok(None)) | Ok(Err(_)) => {}
        Err(_) => {
            let mut attempt = Attempt::begin(conn.session.id.clone(), Proto::Http);
            attempt.reason = Reason::HeaderTimeout;
            attempt.detail = Some(format!("client sent nothing for {timeout:?}"));
            conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
            io.reset_on_close();
        }
    }
}
