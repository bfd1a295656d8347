//! SOCKS5 front end (RFC 1928): no-authentication CONNECT to a domain name, an IPv4 or an
//! IPv6 address, so `ALL_PROXY=socks5h://…` works for curl and for non-HTTP TCP. On a
//! listener that serves tenants (identity.rs), username/password authentication (RFC
//! 1929) instead, and nothing else: the user is the tenant, the password its token.
//!
//! The request runs the same pipeline as HTTP. Refusals use the reply code that says why
//! (0x02 not allowed by ruleset, 0x04 host unreachable, 0x05 connection refused…) and the
//! connection is then reset. BIND and UDP ASSOCIATE are refused with 0x07.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client_io::ClientIo;
use std::sync::Arc;

use crate::carry::tunnel;
use crate::conn::Conn;
use crate::egress::{self, Refusal};
use crate::log::{Attempt, End, Proto};
use crate::policy::Reason;
use crate::session::Session;
use crate::target::{normalise_host, Host, Target};

const VERSION: u8 = 0x05;
const METHOD_NO_AUTH: u8 = 0x00;
const METHOD_USER_PASSWORD: u8 = 0x02;
/// RFC 1929's own version byte, and its status for success (any other is failure).
const USER_PASSWORD_VERSION: u8 = 0x01;
const USER_PASSWORD_FAILED: u8 = 0x01;
const METHOD_NONE_ACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 0x01;
const ATYP_IPV4: u8 = 0x01;
const ATYP_DOMAIN: u8 = 0x03;
const ATYP_IPV6: u8 = 0x04;

/// Reply codes, RFC 1928 §6.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(crate) enum Reply {
    Succeeded = 0x00,
    GeneralFailure = 0x01,
    NotAllowed = 0x02,
    NetworkUnreachable = 0x03,
    HostUnreachable = 0x04,
    ConnectionRefused = 0x05,
    TtlExpired = 0x06,
    CommandNotSupported = 0x07,
    AddressTypeNotSupported = 0x08,
}

/// A request the client sent, or why it could not be read.
pub(crate) enum Request {
    Connect(Target),
    /// Refused; the reply code to send, unless one was already sent.
    Refused(Option<Reply>, Refusal),
}

/// Serves one SOCKS5 client to the end of its tunnel.
/// `header_timeout` is what is left of the head deadline after the first byte: for the
/// greeting, the credentials and the request.
// Whole: the protocol in the order it is spoken (greeting, credentials, request, reply,
// tunnel), under one deadline.
pub async fn serve(mut io: ClientIo, mut conn: Conn, header_timeout: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + header_timeout;
    let mut attempt = Attempt::since(conn.session.id.clone(), Proto::Socks5, conn.accepted);
    let listener_session = Arc::clone(&conn.session);
    let read = tokio::select! {
        read = tokio::time::timeout_at(
            deadline,
            read_greeting(&mut io, Some(&listener_session), &conn.client_names),
        ) => read,
        // The bridge is stopping: a request still on its way will not be served.
        () = conn.stopped() => return,
    };
    let (tenant, refused) = match read {
        Ok(Ok(Greeted::Named(tenant))) => (tenant, None),
        Ok(Ok(Greeted::Refused(refused))) => (None, Some(refused)),
        Ok(Err(e)) => (None, Some(malformed(&e))),
        Err(_) => (None, Some(timed_out())),
    };
    // From here on the connection is its tenant's, in one of its places: it left the
    // lobby once its credentials checked out, before its request.
    let mut over_limit = None;
    if let Some(session) = tenant {
        attempt.session = session.id.clone();
        match conn.as_tenant(session).await {
            Ok(tenant) => conn = tenant,
            // Refused once its request is in (still in the lobby meanwhile), as a
            // connection past a limit at its accept is.
            Err(why) => over_limit = Some(Refusal::new(Reason::ConnectionLimit, why)),
        }
    }
    let mut request = match refused {
        Some(refused) => refused,
        None => {
            let read = tokio::select! {
                read = tokio::time::timeout_at(deadline, read_connect(&mut io)) => read,
                () = conn.stopped() => return,
            };
            match read {
                Ok(Ok(request)) => request,
                Ok(Err(e)) => malformed(&e),
                Err(_) => timed_out(),
            }
        }
    };
    if let Some(refusal) = over_limit {
        request = Request::Refused(Some(Reply::GeneralFailure), refusal);
    }
    let target = match request {
        // Past a connection limit: the request is read only to be answered with why.
        Request::Connect(target) if conn.over_limit().is_some() => {
            attempt.target = Some(target);
            let why = conn.over_limit().unwrap_or_default().to_owned();
            let refusal = Refusal::new(Reason::ConnectionLimit, why);
            return refuse(io, &conn, attempt, Some(Reply::GeneralFailure), refusal).await;
        }
        Request::Connect(target) => target,
        Request::Refused(reply, refusal) => {
            return refuse(io, &conn, attempt, reply, refusal).await
        }
    };
    // Judged under the policy of now, not of when the client connected: a reload while it
    // sat in its handshake applies.
    let conn = conn.renewed();
    let upstream = match egress::open(&conn.egress(), &mut attempt, &target).await {
        Ok(upstream) => upstream,
        Err(refusal) => {
            let reply = reply_for(&refusal);
            return refuse(io, &conn, attempt, Some(reply), refusal).await;
        }
    };
    // The bound address is the host's side of the upstream connection: not the sandbox's
    // business, so the reply carries 0.0.0.0:0 (RFC 1928 leaves it to the server).
    let unspecified = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
    if write_reply(&mut io, Reply::Succeeded, unspecified)
        .await
        .is_err()
    {
        conn.shared
            .log
            .record(&attempt.finish(End::ClientError, 0, 0));
        return;
    }
    // What the client sent past its request (in one flight with it, as a TLS client's
    // first read may hold) is the tunnel's first bytes.
    let stats = match io.into_stream() {
        (Some(client), prefix) => {
            let relayed =
                crate::carry::carry(&conn, client, prefix, upstream, &target, &attempt).await;
            match relayed {
                Ok(stats) => stats,
                Err(refused) => {
                    refused.refuse(&mut attempt);
                    conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
                    return;
                }
            }
        }
        (None, _) => tunnel::TunnelStats {
            bytes_up: 0,
            bytes_down: 0,
            end: End::ClientError,
        },
    };
    conn.shared
        .log
        .record(&attempt.finish(stats.end, stats.bytes_up, stats.bytes_down));
}

fn malformed(e: &io::Error) -> Request {
    Request::Refused(
        Some(Reply::GeneralFailure),
        Refusal::new(Reason::BadRequest, format!("malformed SOCKS5 request: {e}")),
    )
}

fn timed_out() -> Request {
    Request::Refused(
        Some(Reply::GeneralFailure),
        Refusal::new(Reason::HeaderTimeout, "SOCKS5 request timed out"),
    )
}

/// What a greeting (and its credentials) came to.
pub(crate) enum Greeted {
    /// The request may follow: of this tenant (by its credentials or its certificate), or
    /// on a listener that serves none.
    Named(Option<Arc<Session>>),
    /// Refused, answered already.
    Refused(Request),
}

/// Reads the greeting, the credentials (when the listener's `session` serves tenants) and
/// the request: [`read_greeting`], then [`read_connect`]. The tenant the credentials name
/// goes to `tenant`. Generic over the stream so the fuzz target can drive it from memory
/// (fuzzing.rs).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) async fn read_request<S>(
    io: &mut S,
    session: Option<&Session>,
    client_names: &[String],
    tenant: &mut Option<Arc<Session>>,
) -> io::Result<Request>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match read_greeting(io, session, client_names).await? {
        Greeted::Named(named) => {
            *tenant = named;
            read_connect(io).await
        }
        Greeted::Refused(refused) => Ok(refused),
    }
}

/// Reads the greeting (answering it) and the credentials when the listener's `session`
/// serves tenants (the tenants are asked when the credentials have come, so a reload
/// meanwhile applies); I/O errors mean the client spoke garbage or left. A client whose
/// certificate (`client_names`) names a tenant needs no credentials; credentials it gives
/// must name the same tenant.
pub(crate) async fn read_greeting<S>(
    io: &mut S,
    session: Option<&Session>,
    client_names: &[String],
) -> io::Result<Greeted>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let [version, method_count] = read_array::<2, _>(io).await?;
    if version != VERSION || method_count == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bad greeting"));
    }
    let mut methods = vec![0u8; usize::from(method_count)];
    io.read_exact(&mut methods).await?;
    let tenants = session.and_then(Session::tenants);
    let by_certificate = match tenants.as_ref().map(|t| t.from_client_names(client_names)) {
        Some(Err(why)) => {
            io.write_all(&[VERSION, METHOD_NONE_ACCEPTABLE]).await?;
            let refusal = Refusal::new(Reason::ProxyAuthRequired, why.detail());
            return Ok(Greeted::Refused(Request::Refused(None, refusal)));
        }
        Some(Ok(named)) => named,
        None => None,
    };
    let (method, refused) = match (&tenants, &by_certificate) {
        (None, _) => (
            METHOD_NO_AUTH,
            Refusal::new(Reason::Unsupported, "client offers no no-auth method"),
        ),
        (Some(_), Some(_)) if methods.contains(&METHOD_NO_AUTH) => (
            METHOD_NO_AUTH,
            Refusal::new(Reason::Unsupported, "client offers no no-auth method"),
        ),
        (Some(_), _) => (
            METHOD_USER_PASSWORD,
            Refusal::new(
                Reason::ProxyAuthRequired,
                "this bridge serves tenants: a SOCKS5 client must offer username/password \
                 authentication (user TENANT, password TOKEN)",
            ),
        ),
    };
    if !methods.contains(&method) {
        io.write_all(&[VERSION, METHOD_NONE_ACCEPTABLE]).await?;
        return Ok(Greeted::Refused(Request::Refused(None, refused)));
    }
    io.write_all(&[VERSION, method]).await?;
    if method == METHOD_NO_AUTH {
        // Named by its certificate, or a listener that serves no tenants.
        return Ok(Greeted::Named(by_certificate));
    }
    if tenants.is_some() {
        let [version] = read_array::<1, _>(io).await?;
        if version != USER_PASSWORD_VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad RFC 1929 version",
            ));
        }
        let user = read_field(io).await?;
        let password = read_field(io).await?;
        // The tenants of now, not of the greeting: a reload meanwhile (a revoked token, a
        // certificate's name moved) applies.
        let tenants = session.and_then(Session::tenants).unwrap_or_default();
        let named = tenants
            .from_client_names(client_names)
            .and_then(|certified| {
                let named = tenants.from_user_password(&user, &password)?;
                Ok((certified, named))
            })
            .and_then(|(certified, named)| match &certified {
                Some(certified) if !Arc::ptr_eq(certified, &named) => {
                    Err(crate::session::tenants::Unidentified::Unknown(
                        "the credentials name another tenant than the client certificate",
                    ))
                }
                _ => Ok(named),
            });
        return match named {
            Ok(session) => {
                io.write_all(&[USER_PASSWORD_VERSION, 0]).await?;
                Ok(Greeted::Named(Some(session)))
            }
            Err(why) => {
                io.write_all(&[USER_PASSWORD_VERSION, USER_PASSWORD_FAILED])
                    .await?;
                let refusal = Refusal::new(Reason::ProxyAuthRequired, why.detail());
                Ok(Greeted::Refused(Request::Refused(None, refusal)))
            }
        };
    }
    Ok(Greeted::Named(None))
}

/// Reads the request that follows the greeting.
pub(crate) async fn read_connect<S>(io: &mut S) -> io::Result<Request>
where
    S: tokio::io::AsyncRead + Unpin,
{
    let [version, command, _reserved, address_type] = read_array::<4, _>(io).await?;
    if version != VERSION {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bad version"));
    }
    let host = match address_type {
        ATYP_IPV4 => Ok(Host::Ip(IpAddr::V4(Ipv4Addr::from(
            read_array::<4, _>(io).await?,
        )))),
        ATYP_IPV6 => Ok(Host::Ip(crate::target::canonical_ip(IpAddr::V6(
            Ipv6Addr::from(read_array::<16, _>(io).await?),
        )))),
        ATYP_DOMAIN => {
            let [len] = read_array::<1, _>(io).await?;
            let mut name = vec![0u8; usize::from(len)];
            io.read_exact(&mut name).await?;
            let name = String::from_utf8_lossy(&name).into_owned();
            normalise_host(&name).map_err(|e| format!("SOCKS5 target: {e}"))
        }
        other => {
            return Ok(Request::Refused(
                Some(Reply::AddressTypeNotSupported),
                Refusal::new(Reason::BadRequest, format!("address type {other:#04x}")),
            ))
        }
    };
    let port = u16::from_be_bytes(read_array::<2, _>(io).await?);
    if command != CMD_CONNECT {
        return Ok(Request::Refused(
            Some(Reply::CommandNotSupported),
            Refusal::new(
                Reason::Unsupported,
                format!("SOCKS5 command {command:#04x}"),
            ),
        ));
    }
    match host {
        Ok(host) if port != 0 => Ok(Request::Connect(Target { host, port })),
        Ok(_) => Ok(Request::Refused(
            Some(Reply::GeneralFailure),
            Refusal::new(Reason::BadRequest, "SOCKS5 target port 0"),
        )),
        Err(detail) => Ok(Request::Refused(
            Some(Reply::GeneralFailure),
            Refusal::new(Reason::BadRequest, detail),
        )),
    }
}

/// A field of the RFC 1929 request (its user, its password): a length byte and that many
/// bytes.
async fn read_field<S>(io: &mut S) -> io::Result<Vec<u8>>
where
    S: tokio::io::AsyncRead + Unpin,
{
    let [len] = read_array::<1, _>(io).await?;
    let mut field = vec![0u8; usize::from(len)];
    io.read_exact(&mut field).await?;
    Ok(field)
}

async fn read_array<const N: usize, S>(io: &mut S) -> io::Result<[u8; N]>
where
    S: tokio::io::AsyncRead + Unpin,
{
    let mut buf = [0u8; N];
    io.read_exact(&mut buf).await?;
    Ok(buf)
}

fn reply_for(refusal: &Refusal) -> Reply {
    match (refusal.reason, refusal.io_kind) {
        (Reason::DeniedByRule | Reason::NotAllowed | Reason::NonPublicAddress, _) => {
            Reply::NotAllowed
        }
        (Reason::ResolveFailed, _) => Reply::HostUnreachable,
        (_, Some(io::ErrorKind::ConnectionRefused)) => Reply::ConnectionRefused,
        (_, Some(io::ErrorKind::TimedOut)) => Reply::TtlExpired,
        (_, Some(io::ErrorKind::NetworkUnreachable)) => Reply::NetworkUnreachable,
        (Reason::UpstreamUnreachable, _) => Reply::HostUnreachable,
        _ => Reply::GeneralFailure,
    }
}

async fn write_reply(io: &mut ClientIo, reply: Reply, bound: SocketAddr) -> io::Result<()> {
    let mut message = vec![VERSION, reply as u8, 0x00];
    match bound.ip() {
        IpAddr::V4(ip) => {
            message.push(ATYP_IPV4);
            message.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            message.push(ATYP_IPV6);
            message.extend_from_slice(&ip.octets());
        }
    }
    message.extend_from_slice(&bound.port().to_be_bytes());
    io.write_all(&message).await?;
    io.flush().await
}

/// Logs, sends the reply code, and resets the connection.
async fn refuse(
    mut io: ClientIo,
    conn: &Conn,
    mut attempt: Attempt,
    reply: Option<Reply>,
    refusal: Refusal,
) {
    attempt.reason = refusal.reason;
    attempt.detail = Some(refusal.detail);
    conn.shared.log.record(&attempt.finish(End::Refused, 0, 0));
    let unspecified = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
    // The client may already be gone; the reset below happens either way.
    if let Some(reply) = reply {
        let _ = write_reply(&mut io, reply, unspecified).await;
    }
    io.reset_on_close();
}
