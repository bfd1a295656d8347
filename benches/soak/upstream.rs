//! The harness's own upstream: HTTP/1.1 on loopback whose body for `GET /N` is a
//! deterministic function of N, so every byte a client gets back can be checked.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The upstream's accept queue (the kernel caps it at net.core.somaxconn).
pub(crate) const UPSTREAM_BACKLOG: u32 = 4096;

/// SplitMix64's finaliser: a cheap, well-spread function of N.
pub(crate) fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Body of `GET /N`: 0 to 16 KiB, and 256 KiB more for one in 64, so that some responses
/// outgrow socket buffers and a slow reader makes the tunnel wait.
pub(crate) fn body(n: u64) -> Vec<u8> {
    let m = mix(n);
    let len =
        usize::try_from(m % 16_384).unwrap_or(0) + if m.is_multiple_of(64) { 256 << 10 } else { 0 };
    let mut out = Vec::with_capacity(len + 8);
    let mut k = 0u64;
    while out.len() < len {
        out.extend_from_slice(&mix(n ^ (k << 32)).to_le_bytes());
        k += 1;
    }
    out.truncate(len);
    out
}

// ---- the upstream ----

#[derive(Default)]
pub(crate) struct UpstreamStats {
    /// Requests for `denied.test` that reached the upstream: must stay 0.
    pub(crate) leaked: AtomicU64,
}

pub(crate) async fn start_upstream() -> (u16, Arc<UpstreamStats>) {
    // A deep accept queue (tokio's `bind` gives 128), so that a stall under load is the
    // bridge's, not the upstream's.
    let socket = tokio::net::TcpSocket::new_v4().expect("upstream socket");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind upstream");
    let listener = socket.listen(UPSTREAM_BACKLOG).expect("listen upstream");
    let port = listener.local_addr().expect("upstream address").port();
    let stats = Arc::new(UpstreamStats::default());
    let shared = Arc::clone(&stats);
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, Arc::clone(&shared)));
                }
                // Out of fds: the clients see it as a failed request; keep serving.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    });
    (port, stats)
}

/// Answers one `GET /N` with `body(N)` and closes.
pub(crate) async fn answer(mut stream: TcpStream, stats: Arc<UpstreamStats>) -> io::Result<()> {
    let head = read_head(&mut stream).await?;
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    if head.contains("host: denied.test") {
        stats.leaked.fetch_add(1, Ordering::Relaxed);
    }
    let n: u64 = head
        .strip_prefix("get /")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let body = body(n);
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

/// Reads one head, through its blank line. Neither peer here sends anything after a head
/// until it is answered, so a read never takes bytes beyond it.
pub(crate) async fn read_head(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 2048];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buf[..n]);
        if head.ends_with(b"\r\n\r\n") {
            return Ok(head);
        }
        if head.len() > 16 << 10 || head.windows(4).any(|w| w == b"\r\n\r\n") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bytes past the head",
            ));
        }
    }
}

// ---- clients ----
