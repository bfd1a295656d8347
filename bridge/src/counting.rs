//! A stream wrapper that counts the bytes it carries and notes when they last moved, for
//! the event log's byte totals and the idle timeout of forwarded HTTP requests (tunnels
//! count in their own copy loop).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Bytes written to (up) and read from (down) the wrapped upstream.
#[derive(Debug, Clone)]
pub struct Counters(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    up: AtomicU64,
    down: AtomicU64,
    since: Instant,
    last_activity_ms: AtomicU64,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters(Arc::new(Inner {
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            since: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
        }))
    }
}

impl Counters {
    /// `(up, down)`.
    pub fn get(&self) -> (u64, u64) {
        (
            self.0.up.load(Ordering::Relaxed),
            self.0.down.load(Ordering::Relaxed),
        )
    }

    /// When bytes last moved either way (creation, if never).
    pub fn last_activity(&self) -> Instant {
        self.0.since + Duration::from_millis(self.0.last_activity_ms.load(Ordering::Relaxed))
    }

    fn add(&self, up: bool, n: usize) {
        if n == 0 {
            return;
        }
        let counter = if up { &self.0.up } else { &self.0.down };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        let ms = u64::try_from(self.0.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_activity_ms.store(ms, Ordering::Relaxed);
    }
}

/// An upstream stream that counts.
pub struct Counted<T> {
    inner: T,
    counters: Counters,
}

impl<T> Counted<T> {
    pub fn new(inner: T, counters: Counters) -> Counted<T> {
        Counted { inner, counters }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.counters
            .add(false, buf.filled().len().saturating_sub(before));
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            self.counters.add(true, n);
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
