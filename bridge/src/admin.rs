//! A standalone bridge's admin listener (`netbox bridge --admin ADDR`), apart from the
//! proxy listeners so that no client of the proxy reaches it: `GET /__netbox/metrics`
//! (Prometheus's text format, metrics.rs) and `GET /__netbox/ready` (200 while the bridge
//! takes connections, 503 once it drains, so a load balancer sends new clients elsewhere).

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
use tokio::sync::Semaphore;

use crate::metrics::{Metrics, SessionGauge};
use crate::server::Listener;

pub const METRICS_PATH: &str = "/__netbox/metrics";
pub const READY_PATH: &str = "/__netbox/ready";

/// Admin connections served at once; more wait to be accepted.
const MAX_ADMIN_CONNECTIONS: usize = 16;

/// A scraper that says nothing for this long is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The most one admin connection is served for, whatever it does: one that asks and never
/// reads cannot hold a place for longer (review 38).
const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);

/// What the admin listener reports.
pub struct Admin {
    pub metrics: Arc<Metrics>,
    /// The sessions' gauges as they are now (tenants come and go with reloads).
    pub sessions: Box<dyn Fn() -> Vec<SessionGauge> + Send + Sync>,
    /// False once the bridge has begun to drain.
    pub ready: AtomicBool,
}

/// Serves the admin listener until the task is aborted.
pub async fn serve(listener: Listener, admin: Arc<Admin>) {
    let places = Arc::new(Semaphore::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let Ok(place) = Arc::clone(&places).acquire_owned().await else {
            return;
        };
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| Io::Tcp(s)),
            Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Io::Unix(s)),
            _ => return,
        };
        let Ok(io) = accepted else {
            // Out of descriptors, or a client gone mid-handshake: try again shortly.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let admin = Arc::clone(&admin);
        tokio::spawn(async move {
            let _place = place;
            let service = service_fn(move |req| {
                let admin = Arc::clone(&admin);
                async move { Ok::<_, Infallible>(answer(&req, &admin)) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            // One request a connection, within a deadline.
            builder.keep_alive(false);
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
    match req.uri().path() {
        METRICS_PATH => {
            let mut response = text(StatusCode::OK, admin.metrics.render(&(admin.sessions)()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        READY_PATH if admin.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n".into()),
        READY_PATH => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n".into()),
        _ => text(
            StatusCode::NOT_FOUND,
            format!("netbox admin: {METRICS_PATH} or {READY_PATH}\n"),
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
