//! The client side of one bridge connection: a TCP or Unix stream that can end with a TCP
//! reset instead of a FIN.
//!
//! A refusal must reach the client and then cut the connection hard (SO_LINGER 0), so that
//! nothing the client sends after it is read and nothing can be mistaken for a tunnel.
//! hyper owns the stream while it writes the refusal, so the front end raises a shared flag
//! and this type acts on it: `poll_shutdown` skips the FIN and `Drop` sets zero linger, so
//! the close that follows is an RST. hyper flushes the response before it shuts down, so
//! the client has the 502 in its receive queue before the RST arrives.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use nix::sys::socket::{recv, MsgFlags};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A stream accepted from a client.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A client of a listener that speaks TLS (listener_tls.rs).
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// A client stream plus its "reset on close" flag, and bytes already read from it that
/// are to be read again first (the first request head, read and checked by the front end
/// before hyper sees it).
#[derive(Debug)]
pub struct ClientIo {
    stream: Option<Stream>,
    reset: Arc<AtomicBool>,
    unread: bytes::Bytes,
    /// What the first look at a TLS stream read (TLS cannot be peeked at): the stream's
    /// first bytes, which every read returns before the stream's next.
    peeked: bytes::Bytes,
}

impl Stream {
    /// The socket, for a relay that waits on it and moves bytes by syscalls; none for TLS,
    /// whose bytes only its library can read.
    pub(crate) fn socket(&self) -> Option<Socket<'_>> {
        match self {
            Stream::Tcp(tcp) => Some(Socket::Tcp(tcp)),
            Stream::Unix(unix) => Some(Socket::Unix(unix)),
            Stream::Tls(_) => None,
        }
    }

    /// The address the client dialled (for a captured connection, its destination).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Stream::Tcp(tcp) => tcp.local_addr().ok(),
            Stream::Unix(_) => None,
            Stream::Tls(tls) => tls.get_ref().0.local_addr().ok(),
        }
    }

    /// Makes the close that follows a reset (SO_LINGER 0). A Unix socket has no reset; it
    /// just closes.
    pub(crate) fn set_zero_linger(&self) {
        match self {
            Stream::Tcp(tcp) => tcp.set_zero_linger().ok(),
            Stream::Tls(tls) => tls.get_ref().0.set_zero_linger().ok(),
            Stream::Unix(_) => None,
        };
    }
}

impl ClientIo {
    /// A new client connection, marked for reset until a request on it is accepted for
    /// routing: a client that sends garbage or nothing is cut off hard.
    pub fn new(stream: Stream) -> ClientIo {
        ClientIo {
            stream: Some(stream),
            reset: Arc::new(AtomicBool::new(true)),
            unread: bytes::Bytes::new(),
            peeked: bytes::Bytes::new(),
        }
    }

    /// Puts `bytes`, read from the stream, back in front of what it has not sent yet.
    pub fn unread(&mut self, bytes: bytes::Bytes) {
        debug_assert!(self.unread.is_empty());
        self.unread = bytes;
    }

    /// Reads from the stream itself (never from what was put back), for the front end's
    /// first look at a connection.
    pub async fn read_more(&mut self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        use tokio::io::AsyncReadExt;
        if !self.peeked.is_empty() {
            let peeked = std::mem::take(&mut self.peeked);
            buf.extend_from_slice(&peeked);
            return Ok(peeked.len());
        }
        match self.stream.as_mut() {
            Some(stream) => stream.read_buf(buf).await,
            None => Err(io::Error::from(io::ErrorKind::NotConnected)),
        }
    }

    /// A handle that, once set, makes the eventual close a reset.
    pub fn reset_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.reset)
    }

    /// Marks the connection for reset; the close that follows (drop) sends an RST.
    pub fn reset_on_close(&self) {
        self.reset.store(true, Ordering::Relaxed);
    }

    /// Reads the first byte without consuming it; `None` if the client closed first.
    pub async fn peek_first_byte(&mut self) -> io::Result<Option<u8>> {
        let mut byte = [0u8; 1];
        let n = match self.stream.as_ref() {
            // TLS cannot be peeked at: what is read is put back, to be read first.
            Some(Stream::Tls(_)) => {
                if self.peeked.is_empty() {
                    let mut buf = bytes::BytesMut::with_capacity(4096);
                    self.read_more(&mut buf).await?;
                    self.peeked = buf.freeze();
                }
                return Ok(self.peeked.first().copied());
            }
            Some(Stream::Tcp(tcp)) => tcp.peek(&mut byte).await?,
            Some(Stream::Unix(unix)) => loop {
                unix.readable().await?;
                let peeked = unix.try_io(Interest::READABLE, || {
                    recv(unix.as_raw_fd(), &mut byte, MsgFlags::MSG_PEEK).map_err(io::Error::from)
                });
                match peeked {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    other => break other?,
                }
            },
            None => 0,
        };
        Ok((n == 1).then_some(byte[0]))
    }

    /// Takes the stream out (for a tunnel), with the bytes put back and not read again yet
    /// (they come first), leaving nothing to reset on drop.
    pub fn into_stream(mut self) -> (Option<Stream>, bytes::Bytes) {
        let first = match (self.peeked.is_empty(), self.unread.is_empty()) {
            (true, _) => std::mem::take(&mut self.unread),
            (false, true) => std::mem::take(&mut self.peeked),
            (false, false) => {
                let mut both = bytes::BytesMut::from(&self.peeked[..]);
                both.extend_from_slice(&self.unread);
                both.freeze()
            }
        };
        (self.stream.take(), first)
    }

    fn stream_mut(&mut self) -> io::Result<Pin<&mut Stream>> {
        match self.stream.as_mut() {
            Some(s) => Ok(Pin::new(s)),
            None => Err(io::Error::from(io::ErrorKind::NotConnected)),
        }
    }
}

impl Drop for ClientIo {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Relaxed) {
            if let Some(stream) = &self.stream {
                // Zero linger: close() discards nothing already delivered on loopback and
                // sends RST instead of FIN.
                stream.set_zero_linger();
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        for first in [&mut this.peeked, &mut this.unread] {
            if !first.is_empty() {
                let n = first.len().min(buf.remaining());
                buf.put_slice(&first.split_to(n));
                return Poll::Ready(Ok(()));
            }
        }
        match this.stream_mut() {
            Ok(s) => s.poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream_mut() {
            Ok(s) => s.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream_mut() {
            Ok(s) => s.poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reset.load(Ordering::Relaxed) {
            // No FIN: the drop that follows resets the connection.
            return Poll::Ready(Ok(()));
        }
        match this.stream_mut() {
            Ok(s) => s.poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// One side of a tunnel as a socket: waited on for readiness and moved through by
/// syscalls on its descriptor.
#[derive(Clone, Copy)]
pub(crate) enum Socket<'a> {
    Tcp(&'a TcpStream),
    Unix(&'a UnixStream),
}

impl Socket<'_> {
    /// Runs `io` once the socket is ready for `interest`, again each time it would block.
    pub(crate) async fn when_ready<R>(
        self,
        interest: Interest,
        mut io: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        loop {
            let result = match self {
                Socket::Tcp(tcp) => {
                    tcp.ready(interest).await?;
                    tcp.try_io(interest, &mut io)
                }
                Socket::Unix(unix) => {
                    unix.ready(interest).await?;
                    unix.try_io(interest, &mut io)
                }
            };
            match result {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// Writes all of `buf`, waiting whenever the socket's buffer is full.
    pub(crate) async fn write_all(self, buf: &[u8]) -> io::Result<()> {
        let mut sent = 0;
        while sent < buf.len() {
            sent += self
                .when_ready(Interest::WRITABLE, || write(self.fd(), &buf[sent..]))
                .await?;
        }
        Ok(())
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Tcp(tcp) => tcp.as_fd(),
            Socket::Unix(unix) => unix.as_fd(),
        }
    }

    /// No more bytes this way (the half-close).
    pub(crate) fn shutdown_write(self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.fd().as_raw_fd();
        nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Write).map_err(io::Error::from)
    }
}

fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    nix::unistd::write(fd, buf).map_err(io::Error::from)
}
