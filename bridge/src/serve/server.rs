//! Accepts client connections on listeners that are already bound, each tied to one
//! session and its policy, and hands each connection to the right front end.
//!
//! The listeners come from the caller: netbox creates its listener inside the
//! sandbox's network namespace and passes the fd out, and a standalone bridge binds its
//! own. Every connection runs in its own task, and holds a place among its session's and
//! the bridge's connections: one past either limit is accepted all the same, so that it
//! is refused at once with a reason (never left waiting in the accept queue), and logged.
//! On a listener that serves tenants a connection first holds only a seat in its lobby
//! (lobby.rs), and takes its places once it has named its tenant: a client that names
//! none, whoever can reach the listener, takes nothing a tenant is served in. The seats
//! the lobby drops are summed up in the log once per [`DROPS_SUMMED_EVERY`], apart from
//! the refusal budgets; out of descriptors, the accept loop drops seats to make room.
//! Shutdown stops accepting, lets connections finish until the drain deadline, then tells
//! the rest to stop so that each is still logged.

use std::future::Future;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};

use crate::client_io::{ClientIo, Stream};
use crate::conn::BridgeConfig;
use crate::conn::{Conn, Shared, Slot};
use crate::egress::resolver::Resolver;
use crate::front;
use crate::log::{Attempt, End, EventLog, Proto};
use crate::policy::Reason;
use crate::session::Session;

/// A bound listening socket.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    /// A shared bridge's listener whose clients speak TLS (listener_tls.rs).
    Tls(TcpListener, crate::serve::listener_tls::ListenerTls),
    Unix(UnixListener, PathBuf),
    /// Capture (capture.rs): connections made without the proxy, to any address, on this
    /// listener's port.
    Captured(TcpListener),
    /// The sandbox's DNS stub (capture/dns.rs), answering for names allowed on `ports`.
    Dns(tokio::net::UdpSocket, Vec<u16>),
    /// The same over TCP (RFC 7766), for answers too large for UDP and resolvers that ask
    /// over TCP.
    DnsTcp(TcpListener, Vec<u16>),
}

/// A listener and the session whose policy governs every connection accepted on it.
#[derive(Debug)]
pub struct SessionListener {
    pub session: Arc<Session>,
    pub listener: Listener,
}

impl Listener {
    /// A new client, and where it comes from (none for a Unix socket's).
    async fn accept(&self) -> io::Result<(Stream, Option<std::net::SocketAddr>)> {
        match self {
            // The handshake is the connection's own task's (accept_loop), not this loop's.
            Listener::Tcp(l) | Listener::Tls(l, _) | Listener::Captured(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true).ok();
                Ok((Stream::Tcp(s), Some(peer)))
            }
            Listener::Unix(l, _) => Ok((Stream::Unix(l.accept().await?.0), None)),
            // Never accepted from here: served by `serve_dns` and `serve_dns_tcp`.
            Listener::Dns(..) | Listener::DnsTcp(..) => std::future::pending().await,
        }
    }

    /// Where this listener can be reached, for start-up messages.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map_or_else(|e| format!("tcp (unknown address: {e})"), |a| a.to_string()),
            Listener::Unix(_, path) => format!("unix:{}", path.display()),
            Listener::Tls(l, _) => l.local_addr().map_or_else(
                |e| format!("tls (unknown address: {e})"),
                |a| format!("{a} (TLS)"),
            ),
            Listener::Captured(l) => l.local_addr().map_or_else(
                |e| format!("capture (unknown address: {e})"),
                |a| format!("capture on {a}"),
            ),
            Listener::Dns(socket, _) => socket.local_addr().map_or_else(
                |e| format!("dns (unknown address: {e})"),
                |a| format!("dns on {a}"),
            ),
            Listener::DnsTcp(l, _) => l.local_addr().map_or_else(
                |e| format!("dns over tcp (unknown address: {e})"),
                |a| format!("dns over tcp on {a}"),
            ),
        }
    }
}

/// Serves every listener until `shutdown` resolves, then drains.
// Whole: start every listener, wait for the end, drain, in that order, on shared state.
pub async fn serve(
    listeners: Vec<SessionListener>,
    config: BridgeConfig,
    log: Arc<EventLog>,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let resolver = Resolver::new(&config.dns, config.dns_timeout, log.metrics().cloned());
    // The bridge's limit is never below one of its sessions' own (a lobby's seats are
    // none of its places).
    let max = listeners
        .iter()
        .filter(|l| l.session.lobby().is_none())
        .map(|l| l.session.max_connections)
        .fold(config.max_connections, usize::max)
        .clamp(1, Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(max));
    config.capacity.watch(Arc::clone(&permits), max);
    // Each lobby once, with the session its drops are logged under.
    let mut lobbies: Vec<(Arc<crate::session::lobby::Lobby>, Arc<str>)> = Vec::new();
    for l in &listeners {
        if let Some(lobby) = l.session.lobby() {
            if !lobbies.iter().any(|(seen, _)| Arc::ptr_eq(seen, lobby)) {
                lobbies.push((Arc::clone(lobby), Arc::clone(&l.session.id)));
            }
        }
    }
    let refusing = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    let drain = config.drain_timeout;
    let shared = Arc::new(Shared {
        config,
        log,
        resolver,
        stop: stop_rx,
        connections: Arc::clone(&permits),
        max_connections: max,
    });
    let (quit_tx, quit_rx) = watch::channel(false);
    let mut loops = Vec::new();
    for sl in listeners {
        let shared = Arc::clone(&shared);
        let limits = Limits {
            bridge_max: max,
            refusing: Arc::clone(&refusing),
            lobbies: lobbies.iter().map(|(lobby, _)| Arc::clone(lobby)).collect(),
        };
        let quit = quit_rx.clone();
        if let Listener::Dns(..) = sl.listener {
            sl.session.addresses.serve();
            loops.push(tokio::spawn(serve_dns(sl, shared, quit)));
            continue;
        }
        if let Listener::DnsTcp(..) = sl.listener {
            loops.push(tokio::spawn(serve_dns_tcp(sl, shared, quit)));
            continue;
        }
        loops.push(tokio::spawn(accept_loop(sl, shared, limits, quit)));
    }
    let returning = shared
        .config
        .trim_memory
        .map(|trim| tokio::spawn(crate::memory::return_freed_memory(trim)));
    let summing = (!lobbies.is_empty()).then(|| {
        let (lobbies, log) = (lobbies.clone(), Arc::clone(&shared.log));
        tokio::spawn(async move {
            let mut every = tokio::time::interval(DROPS_SUMMED_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The first tick is at once: nothing to say yet.
            every.tick().await;
            loop {
                every.tick().await;
                log_drops(&lobbies, &log, DROPS_SUMMED_EVERY);
            }
        })
    });
    let summed_since = tokio::time::Instant::now();
    shutdown.await;
    if let Some(returning) = returning {
        returning.abort();
    }
    quit_tx.send_replace(true);
    for l in loops {
        let _ = l.await;
    }
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    // The lobbies first: a client that names its tenant while the bridge drains takes a
    // place then, and is served as any open connection is.
    let drained = || async {
        for (lobby, _) in &lobbies {
            lobby.emptied().await;
        }
        let _ = permits.acquire_many(all).await;
    };
    if tokio::time::timeout(drain, drained()).await.is_err() {
        stop_tx.send_replace(true);
        // Stopped connections log and exit promptly; give them a moment to do so.
        let _ = tokio::time::timeout(Duration::from_secs(2), drained()).await;
    }
    if let Some(summing) = summing {
        summing.abort();
        // What was dropped since the last summary (its interval is at most this long).
        let since = summed_since.elapsed().min(DROPS_SUMMED_EVERY);
        log_drops(&lobbies, &shared.log, since);
    }
}

/// How often the seats a lobby dropped are summed up in one `unidentified_dropped`
/// record: a flood of connections that name no tenant writes one record per interval,
/// whatever its rate, and takes nothing of any session's refusal budget.
pub const DROPS_SUMMED_EVERY: Duration = Duration::from_secs(5);

/// Writes one `unidentified_dropped` record for each lobby that dropped seats since the
/// last, over `interval`.
fn log_drops(
    lobbies: &[(Arc<crate::session::lobby::Lobby>, Arc<str>)],
    log: &EventLog,
    interval: Duration,
) {
    for (lobby, session) in lobbies {
        let Some(drops) = lobby.take_dropped() else {
            continue;
        };
        let record = crate::log::records::UnidentifiedDropped {
            count: drops.count,
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            max_unidentified: lobby.capacity(),
            from: drops
                .from
                .into_iter()
                .map(|(source, n)| (source.to_string(), n))
                .collect(),
        };
        log.record_as("unidentified_dropped", session, &record);
    }
}

/// Over-limit connections answered at once; past this many, one is cut off unanswered
/// (and logged), so a flood of them costs a bounded number of tasks.
const MAX_REFUSALS_IN_FLIGHT: usize = 256;

/// The bridge's limit and the refusals' places (the connections' own places are in
/// `Shared` and each `Session`), and every lobby of the bridge's listeners.
struct Limits {
    bridge_max: usize,
    refusing: Arc<Semaphore>,
    lobbies: Vec<Arc<crate::session::lobby::Lobby>>,
}

/// Seats dropped from each lobby each time an accept finds the bridge out of descriptors:
/// enough for the clients queued behind a flood's to be accepted in a few rounds.
const SHED_WHEN_OUT_OF_FDS: usize = 64;

/// Whether an accept failed for want of a descriptor (the process's, or the system's).
pub(crate) fn out_of_fds(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    )
}

impl Limits {
    /// A place for a new connection of `session`, or, past a limit, a place to refuse it
    /// (`front::handle` still waits a moment for a place to free up); `Err` with why when
    /// even the refusals are full.
    fn place(&self, session: &Session, shared: &Shared) -> Result<Slot, String> {
        if let Some(served) = Slot::try_served(session, shared) {
            return Ok(served);
        }
        let why = if session.connections.available_permits() == 0 {
            format!(
                "this session already has {} connections open ({})",
                session.max_connections, session.limit_named
            )
        } else {
            format!(
                "the bridge already has {} connections open",
                self.bridge_max
            )
        };
        match Arc::clone(&self.refusing).try_acquire_owned() {
            Ok(refusing) => Ok(Slot::OverLimit {
                why,
                _refusing: refusing,
            }),
            Err(_) => Err(why),
        }
    }
}

/// Answers the sandbox's DNS questions until the bridge stops (capture/dns.rs).
async fn serve_dns(sl: SessionListener, shared: Arc<Shared>, mut quit: watch::Receiver<bool>) {
    let Listener::Dns(socket, ports) = &sl.listener else {
        return;
    };
    let mut buf = vec![0u8; crate::front::dns::MAX_UDP_MESSAGE];
    loop {
        let received = tokio::select! {
            received = socket.recv_from(&mut buf) => received,
            _ = quit.wait_for(|&q| q) => return,
        };
        let Ok((n, from)) = received else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let answer = crate::front::dns::answer(&buf[..n], &sl.session, ports, &shared.log);
        if let Some(answer) = answer {
            // A lost answer is the client's to ask again, as over any UDP.
            let _ = socket.send_to(&answer, from).await;
        }
    }
}

/// DNS over TCP connections served at once at most; past it a new one waits in the
/// listen queue.
const MAX_DNS_TCP_CONNECTIONS: usize = 64;

/// Answers DNS over TCP (two-byte length, then the message; several per connection) until
/// the bridge stops. A connection that says nothing for the header timeout is closed.
async fn serve_dns_tcp(sl: SessionListener, shared: Arc<Shared>, mut quit: watch::Receiver<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Listener::DnsTcp(listener, ports) = &sl.listener else {
        return;
    };
    let places = Arc::new(Semaphore::new(MAX_DNS_TCP_CONNECTIONS));
    loop {
        // Waiting for a place watches for the end too: with every place held,
        // the bridge must still stop at once.
        let place = tokio::select! {
            place = Arc::clone(&places).acquire_owned() => place,
            _ = quit.wait_for(|&q| q) => return,
        };
        let Ok(place) = place else {
            return;
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = quit.wait_for(|&q| q) => return,
        };
        let Ok((mut stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let session = Arc::clone(&sl.session);
        let shared = Arc::clone(&shared);
        let ports = ports.clone();
        tokio::spawn(async move {
            let _place = place;
            let timeout = shared.config.header_timeout;
            loop {
                let mut length = [0u8; 2];
                let read = tokio::time::timeout(timeout, stream.read_exact(&mut length)).await;
                if !matches!(read, Ok(Ok(_))) {
                    return;
                }
                let mut query = vec![0u8; usize::from(u16::from_be_bytes(length))];
                let read = tokio::time::timeout(timeout, stream.read_exact(&mut query)).await;
                if !matches!(read, Ok(Ok(_))) {
                    return;
                }
                let answered = crate::front::dns::answer(&query, &session, &ports, &shared.log);
                let Some(answer) = answered else {
                    return;
                };
                let Ok(length) = u16::try_from(answer.len()) else {
                    return;
                };
                let mut framed = length.to_be_bytes().to_vec();
                framed.extend_from_slice(&answer);
                if stream.write_all(&framed).await.is_err() {
                    return;
                }
            }
        });
    }
}

// Whole: one select over accepting, the limits and the stop, whose arms share the loop's
// state.
async fn accept_loop(
    sl: SessionListener,
    shared: Arc<Shared>,
    limits: Limits,
    mut quit: watch::Receiver<bool>,
) {
    let mut last_said = None;
    loop {
        let stream = tokio::select! {
            accepted = sl.listener.accept() => accepted,
            _ = quit.wait_for(|&q| q) => return,
        };
        let (stream, peer) = match stream {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of fds: whoever waits longest in a lobby, of the source that holds
                // most of it, is dropped to make room (nobody is seated to be dropped for
                // a newcomer that cannot even be accepted). A connection that waits to
                // name its tenant holds a descriptor and nothing else.
                let shed: usize = if out_of_fds(&e) {
                    limits
                        .lobbies
                        .iter()
                        .map(|lobby| lobby.shed(SHED_WHEN_OUT_OF_FDS))
                        .sum()
                } else {
                    0
                };
                // Keep serving, after a short pause so an fd shortage does not spin;
                // said once a second at most (stderr may be the user's terminal).
                if last_said
                    .is_none_or(|at: tokio::time::Instant| at.elapsed() >= Duration::from_secs(1))
                {
                    let shed = if shed > 0 {
                        format!(
                            " (dropped {shed} connections that had not named a tenant to make \
                             room)"
                        )
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        std::io::stderr(),
                        "netbox: bridge accept on {}: {e}{shed}",
                        sl.listener.describe()
                    );
                    last_said = Some(tokio::time::Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let source = crate::session::lobby::Source::of(peer);
        // A client of a lobby has a seat there, never refused (a seat of the source that
        // holds the most is dropped for it), until it names its tenant.
        let (slot, dropped) = match sl.session.lobby() {
            Some(lobby) => {
                let seat = lobby.seat(source);
                let dropped = seat.dropped();
                (Ok(Slot::unidentified(seat)), Some(dropped))
            }
            None => (limits.place(&sl.session, &shared), None),
        };
        let slot = match slot {
            Ok(slot) => slot,
            Err(why) => {
                // Too many refusals in flight to answer this one: cut off (a reset), and
                // logged all the same.
                let mut attempt = Attempt::begin(sl.session.id.clone(), Proto::Http);
                attempt.reason = Reason::ConnectionLimit;
                attempt.detail = Some(format!("{why}; cut off unanswered"));
                shared.log.record(&attempt.finish(End::Refused, 0, 0));
                ClientIo::new(stream).reset_on_close();
                continue;
            }
        };
        let conn = Conn::new(Arc::clone(&sl.session), Arc::clone(&shared), slot);
        if let Listener::Captured(_) = sl.listener {
            match stream.local_addr() {
                Some(dialled) => {
                    tokio::spawn(crate::front::capture::serve(
                        ClientIo::new(stream),
                        conn,
                        dialled,
                    ));
                }
                None => ClientIo::new(stream).reset_on_close(),
            }
            continue;
        }
        let tls = match &sl.listener {
            Listener::Tls(_, tls) => Some(tls.clone()),
            _ => None,
        };
        let served = async move {
            match (tls, stream) {
                (Some(tls), Stream::Tcp(tcp)) => serve_tls(tls, tcp, source, conn).await,
                (_, stream) => front::handle(ClientIo::new(stream), conn).await,
            }
        };
        match dropped {
            None => tokio::spawn(served),
            Some(dropped) => tokio::spawn(async move {
                tokio::select! {
                    () = served => {}
                    // Its seat went to a newer connection (or made room for one) before
                    // it named its tenant: ended (a reset, as every connection that has
                    // not sent a whole request is), and counted in the lobby's next
                    // `unidentified_dropped` record.
                    () = dropped => {}
                }
            }),
        };
    }
}

/// A client of a TLS listener: the handshake within the first head's deadline (a failed
/// one is logged), then served as any other, with its certificate's names. A client whose
/// certificate names its tenant leaves the lobby for that tenant's places right away.
async fn serve_tls(
    tls: crate::serve::listener_tls::ListenerTls,
    tcp: tokio::net::TcpStream,
    source: crate::session::lobby::Source,
    mut conn: Conn,
) {
    use crate::serve::listener_tls::HandshakeFailed;
    let deadline = conn.first_head_timeout();
    let started = tokio::time::Instant::now();
    let accepted = tokio::select! {
        accepted = tls.accept(tcp, source, deadline) => accepted,
        () = conn.stopped() => return,
    };
    match accepted {
        Ok((stream, names)) => {
            conn.client_names = Arc::from(names);
            let named = conn
                .session
                .tenants()
                .and_then(|tenants| tenants.from_client_names(&conn.client_names).ok())
                .flatten();
            if let Some(tenant) = named {
                conn.named_by_certificate(tenant).await;
            }
            let io = ClientIo::new(Stream::Tls(Box::new(stream)));
            front::handle_from(io, conn, started).await;
        }
        Err(failed) => {
            let mut attempt = Attempt::since(conn.session.id.clone(), Proto::Http, conn.accepted);
            attempt.reason = match failed {
                HandshakeFailed::TimedOut(_) => Reason::HeaderTimeout,
                HandshakeFailed::Failed(_) => Reason::BadRequest,
            };
            attempt.detail = Some(failed.to_string());
            conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
        }
    }
}
