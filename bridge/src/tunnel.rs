//! Relays bytes both ways between a client and its upstream until both sides are done.
//!
//! Half-close is honoured: when one side stops sending (EOF), the other side's write half is
//! shut down and the opposite direction keeps flowing, so a client that sends its request
//! and shuts down writing still gets the whole response. The tunnel ends when both
//! directions reached EOF, when either side fails, when nothing moved for the idle
//! timeout, or when the bridge is told to stop. A side that broke the connection (a reset,
//! an error) gets the other side closed with a reset too, not a FIN that would read as a
//! clean end of the stream. Buffers start small (most tunnels carry
//! a few requests) and grow while reads fill them (bulk downloads need large reads).

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::client_io::Stream;
use crate::log::End;

/// First read buffer per direction, in bytes: enough for a request or a small response,
/// and cheap to allocate for the many short tunnels a package install opens.
const RELAY_BUFFER_START_BYTES: usize = 16 * 1024;
/// The buffer doubles each time a read fills it, up to this; bulk transfers need large
/// reads to keep up with loopback. Measured here (benches/run.sh, 1 GiB from nginx):
/// 256 KiB reads reached 0.69-0.96x of direct, 1 MiB reads 0.97-1.01x.
const RELAY_BUFFER_MAX_BYTES: usize = 1024 * 1024;

/// What a finished tunnel moved, and how it ended.
#[derive(Debug, Clone, Copy)]
pub struct TunnelStats {
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub end: End,
}

/// Which side failed, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Upstream,
}

/// Relays between an accepted client and its upstream until done, `prefix` (bytes the
/// client sent before the tunnel opened) first. When one side failed, the other is
/// closed with a reset (SO_LINGER 0), and both are when the bridge ended the tunnel (idle
/// timeout, shutdown): an upstream that reset or stalled mid-download must not look, to
/// the client, like a download that ended.
pub async fn relay_client(
    mut client: Stream,
    prefix: Bytes,
    mut upstream: TcpStream,
    idle: Duration,
    stop: impl Future<Output = ()>,
) -> TunnelStats {
    let sent = prefix.len() as u64;
    let stats = if !prefix.is_empty() && upstream.write_all(&prefix).await.is_err() {
        TunnelStats {
            bytes_up: 0,
            bytes_down: 0,
            end: End::UpstreamError,
        }
    } else {
        let mut stats = relay(&mut client, &mut upstream, idle, stop).await;
        stats.bytes_up += sent;
        stats
    };
    // A tunnel the bridge ended (idle, or shutting down) did not end cleanly either.
    let bridge_ended = matches!(stats.end, End::IdleTimeout | End::Shutdown);
    if stats.end == End::UpstreamError || bridge_ended {
        // A Unix socket has no reset; its client sees the end of the stream.
        if let Stream::Tcp(tcp) = &client {
            tcp.set_zero_linger().ok();
        }
    }
    if stats.end == End::ClientError || bridge_ended {
        upstream.set_zero_linger().ok();
    }
    stats
}

/// Relays until done. `stop` resolves when the bridge shuts down.
pub async fn relay<C, U>(
    client: C,
    upstream: U,
    idle: Duration,
    stop: impl Future<Output = ()>,
) -> TunnelStats
where
    C: AsyncRead + AsyncWrite,
    U: AsyncRead + AsyncWrite,
{
    let start = Instant::now();
    let last_activity_ms = AtomicU64::new(0);
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let (client_read, client_write) = tokio::io::split(client);
    let (upstream_read, upstream_write) = tokio::io::split(upstream);

    let activity = || {
        let ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        last_activity_ms.store(ms, Ordering::Relaxed);
    };
    let upward = pump(
        client_read,
        upstream_write,
        &up,
        &activity,
        (Side::Client, Side::Upstream),
    );
    let downward = pump(
        upstream_read,
        client_write,
        &down,
        &activity,
        (Side::Upstream, Side::Client),
    );
    tokio::pin!(upward, downward, stop);
    let (mut up_done, mut down_done) = (false, false);
    let end = loop {
        let idle_deadline =
            start + Duration::from_millis(last_activity_ms.load(Ordering::Relaxed)) + idle;
        tokio::select! {
            result = &mut upward, if !up_done => match result {
                Ok(()) => up_done = true,
                Err(side) => break failure(side),
            },
            result = &mut downward, if !down_done => match result {
                Ok(()) => down_done = true,
                Err(side) => break failure(side),
            },
            () = tokio::time::sleep_until(idle_deadline) => {
                let last = Duration::from_millis(last_activity_ms.load(Ordering::Relaxed));
                if start + last + idle <= Instant::now() {
                    break End::IdleTimeout;
                }
            }
            () = &mut stop => break End::Shutdown,
        }
        if up_done && down_done {
            break End::Closed;
        }
    };
    TunnelStats {
        bytes_up: up.load(Ordering::Relaxed),
        bytes_down: down.load(Ordering::Relaxed),
        end,
    }
}

fn failure(side: Side) -> End {
    match side {
        Side::Client => End::ClientError,
        Side::Upstream => End::UpstreamError,
    }
}

/// Copies one direction until EOF, then shuts down the writer (half-close).
async fn pump<R, W>(
    mut reader: R,
    mut writer: W,
    count: &AtomicU64,
    activity: &impl Fn(),
    (from, to): (Side, Side),
) -> Result<(), Side>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; RELAY_BUFFER_START_BYTES];
    loop {
        let n = reader.read(&mut buf).await.map_err(|_| from)?;
        if n == buf.len() && buf.len() < RELAY_BUFFER_MAX_BYTES {
            buf.resize(buf.len() * 2, 0);
        }
        if n == 0 {
            // Peer already gone is not a failure of this direction.
            return match writer.shutdown().await {
                Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(to),
                _ => Ok(()),
            };
        }
        writer.write_all(&buf[..n]).await.map_err(|_| to)?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity();
    }
}
