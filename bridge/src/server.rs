//! Accepts client connections on listeners that are already bound, each tied to one
//! session and its policy, and hands each connection to the right front end.
//!
//! The listeners come from the caller: the wrapper creates its listener inside the
//! sandbox's network namespace and passes the fd out, and a standalone bridge binds its
//! own. Every connection runs in its own task, bounded by a semaphore. Shutdown stops
//! accepting, lets connections finish until the drain deadline, then tells the rest to stop
//! so that each is still logged.

use std::future::Future;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};

use crate::client_io::{ClientIo, Stream};
pub use crate::conn::{BridgeConfig, Session};
use crate::conn::{Conn, Shared};
use crate::front;
use crate::log::EventLog;
use crate::resolver::Resolver;

/// A bound listening socket.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// A listener and the session whose policy governs every connection accepted on it.
#[derive(Debug)]
pub struct SessionListener {
    pub session: Arc<Session>,
    pub listener: Listener,
}

impl Listener {
    async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                s.set_nodelay(true).ok();
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => Ok(Stream::Unix(l.accept().await?.0)),
        }
    }

    /// Where this listener can be reached, for start-up messages.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map_or_else(|e| format!("tcp (unknown address: {e})"), |a| a.to_string()),
            Listener::Unix(_, path) => format!("unix:{}", path.display()),
        }
    }
}

/// Serves every listener until `shutdown` resolves, then drains.
pub async fn serve(
    listeners: Vec<SessionListener>,
    config: BridgeConfig,
    log: Arc<EventLog>,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let resolver = Resolver::new(&config.dns, config.dns_timeout);
    let max = config.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let drain = config.drain_timeout;
    let shared = Arc::new(Shared {
        config,
        log,
        resolver,
        stop: stop_rx,
    });
    let (quit_tx, quit_rx) = watch::channel(false);
    let mut loops = Vec::new();
    for sl in listeners {
        let shared = Arc::clone(&shared);
        let permits = Arc::clone(&permits);
        let quit = quit_rx.clone();
        loops.push(tokio::spawn(accept_loop(sl, shared, permits, quit)));
    }
    shutdown.await;
    quit_tx.send_replace(true);
    for l in loops {
        let _ = l.await;
    }
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(drain, permits.acquire_many(all))
        .await
        .is_err()
    {
        stop_tx.send_replace(true);
        // Stopped connections log and exit promptly; give them a moment to do so.
        let _ = tokio::time::timeout(Duration::from_secs(2), permits.acquire_many(all)).await;
    }
}

async fn accept_loop(
    sl: SessionListener,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    mut quit: watch::Receiver<bool>,
) {
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = quit.wait_for(|&q| q) => return,
        };
        let stream = tokio::select! {
            accepted = sl.listener.accept() => accepted,
            _ = quit.wait_for(|&q| q) => return,
        };
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                // Out of fds or a client that vanished mid-handshake: keep serving,
                // after a short pause so an fd shortage does not spin.
                let _ = writeln!(
                    std::io::stderr(),
                    "netbox: bridge accept on {}: {e}",
                    sl.listener.describe()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let conn = Conn {
            session: Arc::clone(&sl.session),
            shared: Arc::clone(&shared),
            slot: Arc::new(permit),
        };
        tokio::spawn(front::handle(ClientIo::new(stream), conn));
    }
}
