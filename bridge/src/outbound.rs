//! The connection the bridge opened for a request: a TCP stream to the target (or to an
//! upstream proxy), or TLS to an upstream proxy over one (`https://` in `--bridge` and
//! `--upstream-proxy`).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

#[derive(Debug)]
pub enum Outbound {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Outbound {
    /// The TCP socket beneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Outbound::Tcp(tcp) => tcp,
            Outbound::Tls(tls) => tls.get_ref().0,
        }
    }

    /// The socket, when its bytes are the tunnel's own (a relay may then move them by
    /// syscalls, splice(2) among them).
    pub fn plain(&self) -> Option<&TcpStream> {
        match self {
            Outbound::Tcp(tcp) => Some(tcp),
            Outbound::Tls(_) => None,
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    /// Makes the close that follows a reset (SO_LINGER 0).
    pub fn set_zero_linger(&self) -> io::Result<()> {
        self.tcp().set_zero_linger()
    }
}

impl AsyncRead for Outbound {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Outbound::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Outbound::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Outbound {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Outbound::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Outbound::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Outbound::Tcp(s) => Pin::new(s).poll_flush(cx),
            Outbound::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Outbound::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Outbound::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
