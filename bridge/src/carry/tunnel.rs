//! Relays bytes both ways between a client and its upstream until both sides are done.
//!
//! Half-close is honoured: when one side stops sending (EOF), the other side's write half is
//! shut down and the opposite direction keeps flowing, so a client that sends its request
//! and shuts down writing still gets the whole response. The tunnel ends when both
//! directions reached EOF, when either side fails, when nothing moved for the idle
//! timeout, or when the bridge is told to stop. A side that broke the connection (a reset,
//! an error) gets the other side closed with a reset too, not a FIN that would read as a
//! clean end of the stream.
//!
//! Between two sockets (`relay_client`, every CONNECT and SOCKS5 tunnel) no buffer is held
//! while a direction waits: one is taken when bytes are there, 16 KiB, enough for a
//! request or a small response. A direction whose reads fill it is a bulk transfer and
//! moves on to splice(2) through a pipe of its own: the kernel moves the pages from one
//! socket to the other and they never cross into the bridge (measured in
//! benches/proxies.sh: the CPU per GiB tunnelled, and the RSS of 10,000 idle tunnels).
//! Other streams (`relay`) copy through buffers that grow while reads fill them.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use std::os::fd::{BorrowedFd, OwnedFd};

use bytes::Bytes;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::time::Instant;

use crate::client_io::{Socket, Stream};
use crate::log::End;

/// First read buffer per direction, in bytes: enough for a request or a small response,
/// and cheap to allocate for the many short tunnels a package install opens.
const RELAY_BUFFER_START_BYTES: usize = 16 * 1024;
/// The buffer doubles each time a read fills it, up to this; bulk transfers need large
/// reads to keep up with loopback. Measured here (benches/run.sh, 1 GiB from nginx):
/// 256 KiB reads reached 0.69-0.96x of direct, 1 MiB reads 0.97-1.01x.
const RELAY_BUFFER_MAX_BYTES: usize = 1024 * 1024;
/// What a splicing direction asks its pipe to hold: one splice moves up to this much
/// (the kernel keeps it at 64 KiB where it cannot grow the pipe, which still works).
const SPLICE_PIPE_BYTES: usize = 1024 * 1024;
/// Directions splicing at once, across the bridge, at most: each holds a pipe (two
/// descriptors), and a client that keeps many bulk tunnels open must not use up the
/// descriptors other connections are accepted and dialed with. Past it, bulk directions
/// copy through a buffer instead.
pub const MAX_SPLICING_DIRECTIONS: usize = 512;

/// Pipes open now (at most `MAX_SPLICING_DIRECTIONS`).
static PIPES_OPEN: AtomicUsize = AtomicUsize::new(0);

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
    mut upstream: crate::outbound::Outbound,
    idle: Duration,
    stop: impl Future<Output = ()>,
) -> TunnelStats {
    let sent = prefix.len() as u64;
    let prefix_failed = !prefix.is_empty()
        && (upstream.write_all(&prefix).await.is_err() || upstream.flush().await.is_err());
    let stats = if prefix_failed {
        TunnelStats {
            bytes_up: 0,
            bytes_down: 0,
            end: End::UpstreamError,
        }
    } else if let (Some(client_socket), Some(upstream_plain)) = (client.socket(), upstream.plain())
    {
        let upstream_socket = Socket::Tcp(upstream_plain);
        let flow = Flow::new();
        let upward = socket_pump(
            client_socket,
            upstream_socket,
            &flow,
            (Side::Client, Side::Upstream),
        );
        let downward = socket_pump(
            upstream_socket,
            client_socket,
            &flow,
            (Side::Upstream, Side::Client),
        );
        let mut stats = drive(upward, downward, &flow, idle, stop).await;
        stats.bytes_up += sent;
        stats
    } else {
        // A side's bytes are TLS records only its library can read: copied through
        // buffers, as an inspected tunnel's are.
        let mut stats = relay(&mut client, &mut upstream, idle, stop).await;
        stats.bytes_up += sent;
        stats
    };
    // A tunnel the bridge ended (idle, or shutting down) did not end cleanly either.
    let bridge_ended = matches!(stats.end, End::IdleTimeout | End::Shutdown);
    if stats.end == End::UpstreamError || bridge_ended {
        // A Unix socket has no reset; its client sees the end of the stream.
        client.set_zero_linger();
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
    let flow = Flow::new();
    let (client_read, client_write) = tokio::io::split(client);
    let (upstream_read, upstream_write) = tokio::io::split(upstream);
    let upward = pump(
        client_read,
        upstream_write,
        &flow,
        (Side::Client, Side::Upstream),
    );
    let downward = pump(
        upstream_read,
        client_write,
        &flow,
        (Side::Upstream, Side::Client),
    );
    drive(upward, downward, &flow, idle, stop).await
}

/// What a tunnel moved each way, and when bytes last moved.
struct Flow {
    start: Instant,
    last_activity_ms: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            start: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        }
    }

    /// `n` bytes moved from `from` to the other side.
    fn moved(&self, from: Side, n: usize) {
        let count = match from {
            Side::Client => &self.up,
            Side::Upstream => &self.down,
        };
        count.fetch_add(n as u64, Ordering::Relaxed);
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_activity_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_deadline(&self, idle: Duration) -> Instant {
        self.start + Duration::from_millis(self.last_activity_ms.load(Ordering::Relaxed)) + idle
    }
}

/// Runs both directions until both are done, one fails, nothing moved for `idle`, or
/// `stop` resolves.
async fn drive(
    upward: impl Future<Output = Result<(), Side>>,
    downward: impl Future<Output = Result<(), Side>>,
    flow: &Flow,
    idle: Duration,
    stop: impl Future<Output = ()>,
) -> TunnelStats {
    tokio::pin!(upward, downward, stop);
    let (mut up_done, mut down_done) = (false, false);
    let end = loop {
        tokio::select! {
            result = &mut upward, if !up_done => match result {
                Ok(()) => up_done = true,
                Err(side) => break failure(side),
            },
            result = &mut downward, if !down_done => match result {
                Ok(()) => down_done = true,
                Err(side) => break failure(side),
            },
            () = tokio::time::sleep_until(flow.idle_deadline(idle)) => {
                if flow.idle_deadline(idle) <= Instant::now() {
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
        bytes_up: flow.up.load(Ordering::Relaxed),
        bytes_down: flow.down.load(Ordering::Relaxed),
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
    flow: &Flow,
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
        // A TLS writer may hold what it took (its records wait for a full socket to
        // drain): without a flush, a request's last bytes could wait for a next write
        // that never comes. A socket's flush does nothing.
        writer.flush().await.map_err(|_| to)?;
        flow.moved(from, n);
    }
}

/// Copies one direction between two sockets until EOF, then shuts the writer down
/// (half-close): through a buffer taken only while bytes are there, then, once a read
/// fills it, by splice(2) through a pipe.
async fn socket_pump(
    reader: Socket<'_>,
    writer: Socket<'_>,
    flow: &Flow,
    (from, to): (Side, Side),
) -> Result<(), Side> {
    loop {
        // The buffer is taken once bytes are there: a waiting direction holds none.
        let (buf, n) = reader
            .when_ready(Interest::READABLE, || {
                let mut buf = vec![0u8; RELAY_BUFFER_START_BYTES];
                read(reader.fd(), &mut buf).map(|n| (buf, n))
            })
            .await
            .map_err(|_| from)?;
        if n == 0 {
            return end_of_stream(writer, to);
        }
        writer.write_all(&buf[..n]).await.map_err(|_| to)?;
        flow.moved(from, n);
        if n == buf.len() {
            break;
        }
    }
    // A bulk transfer. Past the bridge's pipes, or out of descriptors, the bytes go
    // through a buffer, as for a stream that is not a socket.
    let Ok(pipe) = Pipe::new() else {
        return buffered_pump(reader, writer, flow, (from, to)).await;
    };
    loop {
        let n = reader
            .when_ready(Interest::READABLE, || pipe.fill_from(reader.fd()))
            .await
            .map_err(|_| from)?;
        if n == 0 {
            return end_of_stream(writer, to);
        }
        let mut left = n;
        while left > 0 {
            left -= writer
                .when_ready(Interest::WRITABLE, || pipe.drain_to(writer.fd(), left))
                .await
                .map_err(|_| to)?;
        }
        flow.moved(from, n);
    }
}

/// The copy for a bulk direction that has no pipe: a buffer that grows while reads fill
/// it, as `pump`'s.
async fn buffered_pump(
    reader: Socket<'_>,
    writer: Socket<'_>,
    flow: &Flow,
    (from, to): (Side, Side),
) -> Result<(), Side> {
    let mut buf = vec![0u8; RELAY_BUFFER_START_BYTES * 2];
    loop {
        let n = reader
            .when_ready(Interest::READABLE, || read(reader.fd(), &mut buf))
            .await
            .map_err(|_| from)?;
        if n == 0 {
            return end_of_stream(writer, to);
        }
        writer.write_all(&buf[..n]).await.map_err(|_| to)?;
        flow.moved(from, n);
        if n == buf.len() && buf.len() < RELAY_BUFFER_MAX_BYTES {
            buf.resize(buf.len() * 2, 0);
        }
    }
}

/// The reader is done: the writer's side is told (a peer already gone is not a failure
/// of this direction).
fn end_of_stream(writer: Socket<'_>, to: Side) -> Result<(), Side> {
    match writer.shutdown_write() {
        Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(to),
        _ => Ok(()),
    }
}

fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    nix::unistd::read(fd, buf).map_err(io::Error::from)
}

/// The pipe one splicing direction moves its bytes through.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let taken = PIPES_OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
            (open < MAX_SPLICING_DIRECTIONS).then_some(open + 1)
        });
        if taken.is_err() {
            return Err(io::Error::other(
                "the bridge splices as many directions as it may",
            ));
        }
        let (read, write) = match nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC) {
            Ok(ends) => ends,
            Err(e) => {
                PIPES_OPEN.fetch_sub(1, Ordering::AcqRel);
                return Err(e.into());
            }
        };
        // Larger moves, fewer syscalls; where the system's pipe limits refuse, the
        // default size does the same job in more steps.
        let size = i32::try_from(SPLICE_PIPE_BYTES).unwrap_or(i32::MAX);
        let _ = nix::fcntl::fcntl(&write, FcntlArg::F_SETPIPE_SZ(size));
        Ok(Pipe { read, write })
    }

    /// Moves what the socket has (up to the pipe's size) into the empty pipe.
    fn fill_from(&self, socket: BorrowedFd<'_>) -> io::Result<usize> {
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        nix::fcntl::splice(socket, None, &self.write, None, SPLICE_PIPE_BYTES, flags)
            .map_err(io::Error::from)
    }

    /// Moves up to `len` bytes from the pipe to the socket.
    fn drain_to(&self, socket: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        nix::fcntl::splice(&self.read, None, socket, None, len, flags).map_err(io::Error::from)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        PIPES_OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
// Test code: its sockets are at loopback literals (clippy.toml).
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::net::TcpStream;

    /// A side that holds what it is given until flushed (as a TLS stream may, its records
    /// waiting for a full socket) passes on a request's bytes without a next write to
    /// push them.
    #[tokio::test]
    async fn a_writer_that_buffers_is_flushed_after_each_write() {
        let (client, mut client_peer) = tokio::io::duplex(64 * 1024);
        let (upstream, mut server) = tokio::io::duplex(64 * 1024);
        let upstream = tokio::io::BufWriter::with_capacity(64 * 1024, upstream);
        let relay = tokio::spawn(relay(
            client,
            upstream,
            Duration::from_secs(30),
            std::future::pending(),
        ));
        client_peer
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut got = [0u8; 18];
        let read = tokio::time::timeout(Duration::from_secs(5), server.read_exact(&mut got)).await;
        assert!(read.is_ok(), "the request waited in the writer's buffer");
        assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
        relay.abort();
    }

    /// A connected loopback pair.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dialed = TcpStream::connect(listener.local_addr().unwrap());
        let (dialed, accepted) = tokio::join!(dialed, listener.accept());
        (dialed.unwrap(), accepted.unwrap().0)
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| u8::try_from(i % 251).unwrap_or(0) ^ seed)
            .collect()
    }

    /// 4 MiB each way through `relay_client`, each side half-closing when done: what
    /// arrives is what was sent, and the counts say so.
    async fn both_ways_intact() -> TunnelStats {
        let (mut client, client_end) = pair().await;
        let (upstream_end, mut server) = pair().await;
        let relay = tokio::spawn(relay_client(
            Stream::Tcp(client_end),
            Bytes::from_static(b"prefix:"),
            crate::outbound::Outbound::Tcp(upstream_end),
            Duration::from_secs(30),
            std::future::pending(),
        ));
        let (up, down) = (pattern(4 << 20, 1), pattern(4 << 20, 2));
        let (client_side, server_side) = tokio::join!(
            async {
                client.write_all(&up).await.unwrap();
                client.shutdown().await.unwrap();
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got
            },
            async {
                server.write_all(&down).await.unwrap();
                server.shutdown().await.unwrap();
                let mut got = Vec::new();
                server.read_to_end(&mut got).await.unwrap();
                got
            }
        );
        assert!(client_side == down, "downward bytes differ");
        assert_eq!(&server_side[..7], b"prefix:");
        assert!(server_side[7..] == up[..], "upward bytes differ");
        relay.await.unwrap()
    }

    #[test]
    fn bulk_directions_arrive_intact_spliced_and_when_no_pipe_is_left() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for pipes_left in [true, false] {
            // No other test here tunnels, so the bridge-wide count is this test's own.
            if !pipes_left {
                PIPES_OPEN.store(MAX_SPLICING_DIRECTIONS, Ordering::SeqCst);
            }
            let stats = runtime.block_on(both_ways_intact());
            assert_eq!(stats.end, End::Closed, "pipes left: {pipes_left}");
            assert_eq!(stats.bytes_up, (4 << 20) + 7);
            assert_eq!(stats.bytes_down, 4 << 20);
            let open = PIPES_OPEN.load(Ordering::SeqCst);
            let expected = if pipes_left {
                0
            } else {
                MAX_SPLICING_DIRECTIONS
            };
            assert_eq!(open, expected, "every pipe given back");
        }
        PIPES_OPEN.store(0, Ordering::SeqCst);
    }
}
