//! A standalone bridge's admin listener (`netbox bridge --admin ADDR`), apart from the
//! proxy listeners so that no client of the proxy reaches it: `GET /metrics` (Prometheus's
//! text format, metrics.rs), `GET /ready` (200 while the bridge can serve a new client;
//! 503 while every place under `--max-connections` is taken and once it drains, so a load
//! balancer sends new clients elsewhere) and `GET /healthz` (200 while it serves at all).
//!
//! On a shared bridge the admin listener may face the network, and its clients say nothing
//! of who they are: its connections sit in a lobby (lobby.rs), so a flood of connections
//! that never ask pushes out the oldest of them rather than keeping a health check out.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::conn::Capacity;
use crate::log::metrics::{Metrics, SessionGauge};
use crate::serve::server::Listener;
use crate::session::lobby::Lobby;

/// The paths every Prometheus scrape config and Kubernetes probe defaults to; the admin
/// listener is its own, so they name nothing of a proxied server's. The `/__netbox/` ones
/// of earlier releases answer too.
pub const METRICS_PATH: &str = "/metrics";
pub const READY_PATH: &str = "/ready";
/// Liveness: 200 while the bridge serves at all, full or draining (a probe that restarts
/// a full bridge would drop every connection it holds).
pub const HEALTH_PATH: &str = "/healthz";
const METRICS_PATHS: [&str; 2] = [METRICS_PATH, "/__netbox/metrics"];
const READY_PATHS: [&str; 3] = [READY_PATH, "/readyz", "/__netbox/ready"];
const HEALTH_PATHS: [&str; 2] = [HEALTH_PATH, "/livez"];

/// Admin connections served at once; past it, the oldest seat of the source that holds
/// the most (once it has waited a second, lobby.rs) is dropped for a new one. A scrape or
/// a health check is answered in milliseconds, and a client of another source than a
/// flood's is never the one dropped for it (unless the flood comes from as many sources as
/// the lobby has seats, `CEILING_FACTOR` times this many).
const MAX_ADMIN_CONNECTIONS: usize = 64;

/// A scraper that says nothing for this long is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The most one admin connection is served for, whatever it does: one that asks and never
/// reads cannot hold a place for longer.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);

/// What the admin listener reports.
pub struct Admin {
    pub metrics: Arc<Metrics>,
    /// The sessions' gauges as they are now (tenants come and go with reloads).
    pub sessions: Box<dyn Fn() -> Vec<SessionGauge> + Send + Sync>,
    /// False once the bridge has begun to drain.
    pub ready: AtomicBool,
    /// Whether the bridge has a place for a new client.
    pub capacity: Arc<Capacity>,
}

/// Serves the admin listener until the task is aborted.
pub async fn serve(listener: Listener, admin: Arc<Admin>) {
    let lobby = Arc::new(Lobby::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, peer)| (Io::Tcp(s), Some(peer))),
            Listener::Unix(l, _) => l.accept().await.map(|(s, _)| (Io::Unix(s), None)),
            _ => return,
        };
        let (io, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors: the admin lobby's first to drop make room, as the
                // proxy listeners' do (server.rs). Or a client gone mid-handshake: try
                // again shortly.
                if crate::serve::server::out_of_fds(&e) {
                    lobby.shed(MAX_ADMIN_CONNECTIONS / 4);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admin = Arc::clone(&admin);
        // Past its seats, the oldest seat of the source that holds the most is dropped
        // for the newcomer (lobby.rs): one source cannot push out another's scrape.
        let seat = lobby.seat(crate::session::lobby::Source::of(peer));
        tokio::spawn(async move {
            let dropped = seat.dropped();
            let service = service_fn(move |req| {
                let admin = Arc::clone(&admin);
                async move { Ok::<_, Infallible>(answer(&req, &admin)) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            // One request a connection, within a deadline, unless a newer connection
            // needs its seat first.
            builder.keep_alive(false);
            let served = async {
                let _ = match io {
                    Io::Tcp(s) => {
                        let served = builder.serve_connection(TokioIo::new(s), service);
                        tokio::time::timeout(CONNECTION_DEADLINE, served).await
                    }
                    Io::Unix(s) => {
                        let served = builder.serve_connection(TokioIo::new(s), service);
                        tokio::time::timeout(CONNECTION_DEADLINE, served).await
                    }
                };
            };
            tokio::select! {
                () = served => {}
                _ = dropped => {}
            }
            drop(seat);
        });
    }
}

enum Io {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

fn answer(req: &Request<Incoming>, admin: &Admin) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    let path = req.uri().path();
    match path {
        _ if METRICS_PATHS.contains(&path) => {
            let mut response = text(StatusCode::OK, admin.metrics.render(&(admin.sessions)()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        _ if READY_PATHS.contains(&path) && !admin.ready.load(Ordering::Relaxed) => {
            text(StatusCode::SERVICE_UNAVAILABLE, "draining\n".into())
        }
        _ if READY_PATHS.contains(&path) => match admin.capacity.full() {
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("full: {why}\n")),
            None => text(StatusCode::OK, "ready\n".into()),
        },
        _ if HEALTH_PATHS.contains(&path) => text(StatusCode::OK, "ok\n".into()),
        _ => text(
            StatusCode::NOT_FOUND,
            format!("netbox admin: {METRICS_PATH}, {READY_PATH} or {HEALTH_PATH}\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
