//! Opens the upstream connection to addresses that were already checked. It takes socket
//! addresses, never names, so it cannot resolve anything behind the policy's back.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

/// Why no upstream connection could be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to {addr}: {source}")]
pub struct DialError {
    pub addr: SocketAddr,
    #[source]
    pub source: io::Error,
}

/// Tries each address in order with a per-address deadline; returns the first connection.
pub async fn dial(addrs: &[SocketAddr], timeout: Duration) -> Result<TcpStream, DialError> {
    let mut last = None;
    for &addr in addrs {
        // A SocketAddr the pipeline admitted: nothing is looked up.
        #[allow(clippy::disallowed_methods)]
        let attempt = tokio::time::timeout(timeout, TcpStream::connect(addr)).await;
        let error = match attempt {
            Ok(Ok(stream)) => {
                // Latency over batching: interactive protocols ride these tunnels.
                stream.set_nodelay(true).ok();
                return Ok(stream);
            }
            Ok(Err(e)) => e,
            Err(_) => io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        };
        last = Some(DialError {
            addr,
            source: error,
        });
    }
    Err(last.unwrap_or_else(|| DialError {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source: io::Error::new(io::ErrorKind::AddrNotAvailable, "no address to dial"),
    }))
}
