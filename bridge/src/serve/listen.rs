//! Listen addresses for a standalone bridge. Loopback TCP and Unix sockets: a bridge
//! reachable from the network would be an open proxy into the host's view of the world.
//! Only a bridge that asks every client who it is (`--tenants`) may listen on other
//! addresses ([`ListenAddr::parse_network`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};

use crate::serve::error::BridgeError;
use crate::serve::server::Listener;

/// Where a standalone bridge listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for ListenAddr {
    type Err = BridgeError;

    /// [`ListenAddr::parse_network`], loopback or `unix:` only.
    fn from_str(text: &str) -> Result<ListenAddr, BridgeError> {
        let addr = ListenAddr::parse_network(text)?;
        if !addr.is_loopback_or_unix() {
            return Err(BridgeError::ListenAddr {
                addr: text.to_owned(),
                reason: "only loopback addresses may be listened on here (a bridge reachable \
                         from the network must ask every client who it is: --tenants)",
            });
        }
        Ok(addr)
    }
}

impl ListenAddr {
    /// Any TCP address (`0.0.0.0:3128`, `[::]:3128`, an interface's), or `unix:PATH`: for
    /// listeners whose every client must name a tenant.
    pub fn parse_network(text: &str) -> Result<ListenAddr, BridgeError> {
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
        Ok(ListenAddr::Tcp(addr))
    }

    /// Whether only this machine can connect.
    pub fn is_loopback_or_unix(&self) -> bool {
        match self {
            ListenAddr::Tcp(addr) => addr.ip().is_loopback(),
            ListenAddr::Unix(_) => true,
        }
    }

    /// Binds the listener; must run inside a tokio runtime.
    pub async fn bind(&self) -> Result<Listener, BridgeError> {
        let bind_error = |source| BridgeError::Bind {
            addr: self.to_string(),
            source,
        };
        match self {
            ListenAddr::Tcp(addr) => {
                // A SocketAddr, parsed from --listen: nothing is looked up.
                #[allow(clippy::disallowed_methods)]
                let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
                deepen_backlog(&listener).map_err(bind_error)?;
                Ok(Listener::Tcp(listener))
            }
            ListenAddr::Unix(path) => {
                let listener = UnixListener::bind(path).map_err(bind_error)?;
                deepen_backlog(&listener).map_err(bind_error)?;
                Ok(Listener::Unix(listener, path.clone()))
            }
        }
    }
}

/// Connections the kernel queues for a listener before it is accepted from (the system
/// caps it at `net.core.somaxconn`, 4096 by default since Linux 5.4).
pub const LISTEN_BACKLOG: i32 = 4096;

/// Raises a listening socket's accept queue to [`LISTEN_BACKLOG`]. std and tokio listen
/// with 128: a burst of a few thousand connects (a package manager's parallel downloads,
/// measured with benches/soak.sh) overflowed it, and each connection dropped there waited
/// for its SYN to be sent again, 1, 3, 7 s later. listen(2) again on a listening socket
/// only changes the queue's length.
pub fn deepen_backlog(listener: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    let backlog = nix::sys::socket::Backlog::new(LISTEN_BACKLOG).map_err(std::io::Error::from)?;
    nix::sys::socket::listen(listener, backlog).map_err(std::io::Error::from)
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}
