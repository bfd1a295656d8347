//! A stream wrapper that counts the bytes it carries, for the event log's byte totals on
//! forwarded HTTP requests (tunnels count in their own copy loop).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes written to (up) and read from (down) the wrapped upstream.
#[derive(Debug, Clone, Default)]
pub struct Counters(Arc<(AtomicU64, AtomicU64)>);

impl Counters {
    /// `(up, down)`.
    pub fn get(&self) -> (u64, u64) {
        (
            self.0 .0.load(Ordering::Relaxed),
            self.0 .1.load(Ordering::Relaxed),
        )
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
        let read = buf.filled().len().saturating_sub(before);
        self.counters.0 .1.fetch_add(read as u64, Ordering::Relaxed);
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
            self.counters.0 .0.fetch_add(n as u64, Ordering::Relaxed);
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
