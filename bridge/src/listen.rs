//! Listen addresses for a standalone bridge. Only loopback TCP and Unix sockets: a bridge
//! reachable from the network would be an open proxy into the host's view of the world.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};

use crate::error::BridgeError;
use crate::server::Listener;

/// Where a standalone bridge listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for ListenAddr {
    type Err = BridgeError;

    fn from_str(text: &str) -> Result<ListenAddr, BridgeError> {
        let invalid = |reason| BridgeError::ListenAddr {
            addr: text.to_owned(),
            reason,
        };
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(invalid("unix: needs a path"));
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        let addr: SocketAddr = text
            .parse()
            .map_err(|_| invalid("expected 127.0.0.1:PORT, [::1]:PORT or unix:PATH"))?;
        if !addr.ip().is_loopback() {
            return Err(invalid("only loopback addresses may be listened on"));
        }
        Ok(ListenAddr::Tcp(addr))
    }
}

impl ListenAddr {
    /// Binds the listener; must run inside a tokio runtime.
    pub async fn bind(&self) -> Result<Listener, BridgeError> {
        let bind_error = |source| BridgeError::Bind {
            addr: self.to_string(),
            source,
        };
        match self {
            ListenAddr::Tcp(addr) => Ok(Listener::Tcp(
                TcpListener::bind(addr).await.map_err(bind_error)?,
            )),
            ListenAddr::Unix(path) => Ok(Listener::Unix(
                UnixListener::bind(path).map_err(bind_error)?,
                path.clone(),
            )),
        }
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}
