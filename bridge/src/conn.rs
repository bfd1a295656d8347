//! What a connection carries through the front ends and the upstream dialer: the
//! bridge's tunables, the session it belongs to, what every connection shares, and the
//! connection's own context. It sits below the accept loop (`server`) and the front ends
//! that use it, so neither imports the other to reach it.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use http::StatusCode;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::egress::resolver::{DnsConfig, Resolver};
use crate::egress::Egress;
use crate::log::EventLog;
use crate::policy::Policy;
use crate::session::lobby::Seat;
use crate::session::Session;

/// Tunables, with defaults that suit a sandboxed build.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// Per-address upstream connect deadline.
    pub connect_timeout: Duration,
    /// Deadline for a client to send a complete request head (slowloris guard).
    pub header_timeout: Duration,
    /// On a listener that serves tenants: the deadline for a client to name its tenant,
    /// from its accept (TLS handshake, SOCKS5 greeting and credentials, first head), if
    /// shorter than `header_timeout`.
    pub identify_timeout: Duration,
    /// A tunnel with no bytes either way for this long is closed.
    pub idle_timeout: Duration,
    pub dns_timeout: Duration,
    pub dns: DnsConfig,
    /// Status for policy refusals (502 by design; some clients expect 403).
    pub refusal_status: StatusCode,
    /// Connections served at once across every session; past it (or past a session's own
    /// limit) each new one is refused at once, with a logged reason. On a listener that
    /// serves tenants a connection takes its place once it has named its tenant; before
    /// that it has a seat in its listener's lobby (lobby.rs).
    pub max_connections: usize,
    /// Where readiness (admin.rs) reads whether a new client can be served.
    pub capacity: Arc<crate::conn::Capacity>,
    /// How long shutdown waits for open connections before stopping them.
    pub drain_timeout: Duration,
    /// Returns the memory the allocator holds free to the system (memory.rs); called once
    /// many connections have closed.
    pub trim_memory: Option<fn()>,
    /// For tests of what a panic in the bridge does: a request for this host panics its
    /// connection's task. netbox sets it only in a build with the `test-hooks` feature.
    pub panic_on_host: Option<String>,
    /// The session CA and upstream trust for tunnels the policy inspects; without it such
    /// a tunnel is refused.
    pub inspector: Option<Arc<crate::tls::inspector::Inspector>>,
    /// Where this bridge listens (a standalone bridge's listeners, admin too): never
    /// dialled.
    pub own_listeners: Vec<std::net::SocketAddr>,
    /// The proxy connections go out through (`--upstream-proxy`, `netbox --bridge`), with
    /// the targets that go direct.
    pub upstream_proxy: Option<Arc<crate::egress::upstream_proxy::UpstreamProxy>>,
}

impl Default for BridgeConfig {
    fn default() -> BridgeConfig {
        BridgeConfig {
            connect_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            identify_timeout: DEFAULT_IDENTIFY_TIMEOUT,
            idle_timeout: Duration::from_secs(300),
            dns_timeout: Duration::from_secs(5),
            dns: DnsConfig::System,
            refusal_status: StatusCode::BAD_GATEWAY,
            max_connections: 4096,
            capacity: Arc::default(),
            drain_timeout: Duration::from_secs(5),
            trim_memory: None,
            panic_on_host: None,
            inspector: None,
            own_listeners: Vec::new(),
            upstream_proxy: None,
        }
    }
}

/// How long a client of a shared bridge has to name its tenant (`--identify-timeout`):
/// several round trips across a continent for the TLS handshake, a SOCKS5 greeting and its
/// credentials, half `--header-timeout`'s default.
pub const DEFAULT_IDENTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection past a limit waits for a place before it is refused: a client
/// that closes one connection and opens the next at once is not refused for the overlap.
pub(crate) const PLACE_WAIT: Duration = Duration::from_millis(500);

/// Whether the bridge can take a new client now: a place free among its connections
/// (`--max-connections`), once it serves. A client that has not named its tenant yet needs
/// none (it has a seat in the lobby, which is never full to a newcomer); once it names one
/// it does.
#[derive(Debug, Default)]
pub struct Capacity {
    places: OnceLock<(Arc<Semaphore>, usize)>,
}

impl Capacity {
    /// Watches the bridge's places, `max` of them (server.rs, as it starts serving).
    pub(crate) fn watch(&self, places: Arc<Semaphore>, max: usize) {
        // Set once: a second `serve` with the same config reports on the first.
        let _ = self.places.set((places, max));
    }

    /// Why the bridge cannot serve a new client now, if it cannot.
    pub fn full(&self) -> Option<String> {
        let (places, max) = self.places.get()?;
        (places.available_permits() == 0).then(|| {
            format!(
                "every one of the bridge's {max} connection places is taken (--max-connections)"
            )
        })
    }
}

/// What every connection shares.
pub struct Shared {
    pub config: BridgeConfig,
    pub log: Arc<EventLog>,
    pub resolver: Resolver,
    /// Fires when open connections must stop (after the drain deadline).
    pub stop: watch::Receiver<bool>,
    /// The bridge's places, one per open connection across every session.
    pub(crate) connections: Arc<Semaphore>,
    /// How many there are.
    pub(crate) max_connections: usize,
}

/// One accepted connection's context. It holds the connection's slot under the limits;
/// tasks that outlive the handler (a CONNECT tunnel after hyper hands it over, a forwarded
/// request's upstream) clone `slot`, so the slot is freed only when the last of them ends
/// and shutdown drains them all.
pub struct Conn {
    pub session: Arc<Session>,
    /// The session's policy when this connection (or this request of it) started: one
    /// attempt is judged under one policy from its decision to its last check.
    pub policy: Arc<Policy>,
    pub shared: Arc<Shared>,
    pub slot: Arc<Slot>,
    /// The names of the certificate the client gave on a TLS listener (listener_tls.rs),
    /// verified against `--client-ca`; none otherwise.
    pub client_names: Arc<[String]>,
    /// When the connection was accepted: what its first request's records measure from
    /// (one dropped or timed out before it asked anything included).
    pub accepted: std::time::Instant,
}

/// What a connection holds under the bridge's limits.
pub enum Slot {
    /// A place among the session's connections and among the bridge's.
    Served {
        _session: OwnedSemaphorePermit,
        _bridge: OwnedSemaphorePermit,
    },
    /// Past a limit: its request is read only to be refused (`why`), holding a place among
    /// the refusals in flight, which are bounded too.
    OverLimit {
        why: String,
        _refusing: OwnedSemaphorePermit,
    },
    /// On a listener that serves tenants, until the client's first request has named its
    /// tenant: a seat in the listener's lobby, no place among the bridge's; or, once a
    /// client certificate has named it, already that tenant's places (`Conn::as_tenant`
    /// takes them out).
    Unidentified(Mutex<Lobbied>),
    /// On a listener that serves tenants, once the client has named one: a place among
    /// that tenant's connections and among the bridge's.
    Tenant {
        _tenant: OwnedSemaphorePermit,
        _bridge: OwnedSemaphorePermit,
    },
}

/// Where a client of a listener that serves tenants stands before its first request is in.
pub enum Lobbied {
    /// In the lobby.
    Seated(Seat),
    /// Named by its certificate (listener_tls.rs): out of the lobby, in `tenant`'s places.
    Placed {
        tenant: Arc<Session>,
        places: TenantPlaces,
    },
    /// Its places went to the connection as its tenant's.
    Left,
}

/// A place among a tenant's connections and one among the bridge's.
pub struct TenantPlaces {
    tenant: OwnedSemaphorePermit,
    bridge: OwnedSemaphorePermit,
}

impl Slot {
    /// Why a connection in this slot is refused, if it is past a limit.
    fn over_limit(&self) -> Option<&str> {
        match self {
            Slot::OverLimit { why, .. } => Some(why),
            Slot::Served { .. } | Slot::Unidentified(_) | Slot::Tenant { .. } => None,
        }
    }

    /// A client's slot while it has not named its tenant: its seat in the lobby.
    pub(crate) fn unidentified(seat: Seat) -> Slot {
        Slot::Unidentified(Mutex::new(Lobbied::Seated(seat)))
    }

    /// Whether the connection is still in the lobby (it has not named its tenant).
    fn seated(&self) -> bool {
        match self {
            Slot::Unidentified(lobbied) => {
                matches!(*lock(lobbied), Lobbied::Seated(_))
            }
            _ => false,
        }
    }

    /// A place among the session's and the bridge's connections, if both have one free.
    pub(crate) fn try_served(session: &Session, shared: &Shared) -> Option<Slot> {
        let session = Arc::clone(&session.connections).try_acquire_owned().ok()?;
        let bridge = Arc::clone(&shared.connections).try_acquire_owned().ok()?;
        Some(Slot::Served {
            _session: session,
            _bridge: bridge,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every change under these locks is one replacement: nothing half-done to see.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::memory::connection_closed();
    }
}

impl Conn {
    /// What the egress pipeline needs of this connection to dial for it.
    pub fn egress(&self) -> Egress<'_> {
        let config = &self.shared.config;
        Egress {
            policy: &self.policy,
            resolver: &self.shared.resolver,
            addresses: &self.session.addresses,
            own_listeners: &config.own_listeners,
            connect_timeout: config.connect_timeout,
            upstream_proxy: config.upstream_proxy.as_ref(),
            panic_on_host: config.panic_on_host.as_deref(),
        }
    }

    /// A connection past a limit waits up to `wait` for a place to free up, and is served
    /// if one does; any other is returned as it is.
    pub async fn wait_for_place(self, wait: Duration) -> Conn {
        if self.over_limit().is_none() {
            return self;
        }
        let places = async {
            let session = Arc::clone(&self.session.connections)
                .acquire_owned()
                .await
                .ok()?;
            let bridge = Arc::clone(&self.shared.connections)
                .acquire_owned()
                .await
                .ok()?;
            Some(Slot::Served {
                _session: session,
                _bridge: bridge,
            })
        };
        match tokio::time::timeout(wait, places).await {
            Ok(Some(slot)) => Conn {
                slot: Arc::new(slot),
                ..self
            },
            _ => self,
        }
    }

    /// Why this connection is to be refused before anything else, if it is past a limit.
    pub fn over_limit(&self) -> Option<&str> {
        self.slot.over_limit()
    }

    /// This connection as the tenant `session`'s: it leaves its seat in the lobby and
    /// takes one of that tenant's places and one of the bridge's (waiting a moment for
    /// one, as a connection past the limit at its accept does), or takes the places its
    /// certificate already took; `Err` with why when there is none (a connection still in
    /// the lobby then keeps its seat there).
    pub async fn as_tenant(&self, session: Arc<Session>) -> Result<Conn, String> {
        // A connection past the listener's limit stays past it, whoever it names.
        if let Some(why) = self.over_limit() {
            return Err(why.to_owned());
        }
        let places = match &*self.slot {
            Slot::Unidentified(lobbied) => {
                let was = std::mem::replace(&mut *lock(lobbied), Lobbied::Left);
                match was {
                    Lobbied::Placed { tenant, places } if Arc::ptr_eq(&tenant, &session) => places,
                    Lobbied::Seated(seat) => match self.tenant_places(&session).await {
                        Ok(places) => {
                            if !seat.leave() {
                                return Err(
                                    "dropped before it named its tenant, for a newer connection"
                                        .into(),
                                );
                            }
                            places
                        }
                        Err(why) => {
                            *lock(lobbied) = Lobbied::Seated(seat);
                            return Err(why);
                        }
                    },
                    // Another tenant's places (a reload moved the certificate's name
                    // meanwhile) are given back first.
                    Lobbied::Placed { .. } | Lobbied::Left => self.tenant_places(&session).await?,
                }
            }
            _ => self.tenant_places(&session).await?,
        };
        Ok(Conn {
            policy: session.policy(),
            session,
            shared: Arc::clone(&self.shared),
            slot: Arc::new(Slot::Tenant {
                _tenant: places.tenant,
                _bridge: places.bridge,
            }),
            client_names: Arc::clone(&self.client_names),
            accepted: self.accepted,
        })
    }

    /// A client whose certificate names its tenant `session` (right after its TLS
    /// handshake) leaves the lobby at once for that tenant's places, so that nothing done
    /// to the lobby reaches it while it sends its request. Without a place free it stays
    /// seated, and its request is refused as any is once it comes.
    pub async fn named_by_certificate(&self, session: Arc<Session>) {
        let Slot::Unidentified(lobbied) = &*self.slot else {
            return;
        };
        let seat = {
            let mut lobbied = lock(lobbied);
            match std::mem::replace(&mut *lobbied, Lobbied::Left) {
                Lobbied::Seated(seat) => seat,
                other => {
                    *lobbied = other;
                    return;
                }
            }
        };
        match self.tenant_places(&session).await {
            Ok(places) => {
                // Dropped meanwhile, it holds nothing: the accept loop ends it.
                if seat.leave() {
                    *lock(lobbied) = Lobbied::Placed {
                        tenant: session,
                        places,
                    };
                }
            }
            Err(_) => *lock(lobbied) = Lobbied::Seated(seat),
        }
    }

    /// One of `session`'s places and one of the bridge's (waiting up to [`PLACE_WAIT`]
    /// for the bridge's); `Err` with why when there is none.
    async fn tenant_places(&self, session: &Session) -> Result<TenantPlaces, String> {
        let tenant = Arc::clone(&session.connections)
            .try_acquire_owned()
            .map_err(|_| {
                format!(
                    "tenant session {} already has {} connections open (max_connections in \
                     the tenants file)",
                    session.id, session.max_connections
                )
            })?;
        let places = &self.shared.connections;
        let bridge = match Arc::clone(places).try_acquire_owned() {
            Ok(bridge) => bridge,
            Err(_) => tokio::time::timeout(PLACE_WAIT, Arc::clone(places).acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or_else(|| {
                    format!(
                        "the bridge already has {} connections open (--max-connections)",
                        self.shared.max_connections
                    )
                })?,
        };
        Ok(TenantPlaces { tenant, bridge })
    }

    /// How long this connection has for its first request head, from its accept: a client
    /// that has not named its tenant yet has the shorter of the head and identify
    /// deadlines.
    pub fn first_head_timeout(&self) -> Duration {
        let config = &self.shared.config;
        if self.slot.seated() {
            config.header_timeout.min(config.identify_timeout)
        } else {
            config.header_timeout
        }
    }

    /// A new connection of `session`, in `slot`, under the session's policy of now.
    pub fn new(session: Arc<Session>, shared: Arc<Shared>, slot: Slot) -> Conn {
        Conn {
            policy: session.policy(),
            session,
            shared,
            slot: Arc::new(slot),
            client_names: Arc::from([]),
            accepted: std::time::Instant::now(),
        }
    }

    /// Another handle on this connection, for a task that outlives its handler: under the
    /// same policy.
    pub fn share(&self) -> Conn {
        Conn {
            session: Arc::clone(&self.session),
            policy: Arc::clone(&self.policy),
            shared: Arc::clone(&self.shared),
            slot: Arc::clone(&self.slot),
            client_names: Arc::clone(&self.client_names),
            accepted: self.accepted,
        }
    }

    /// This connection for its next request: under the session's policy of now.
    pub fn renewed(&self) -> Conn {
        Conn {
            policy: self.session.policy(),
            ..self.share()
        }
    }

    /// Resolves when the bridge tells open connections to stop.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stop = self.shared.stop.clone();
        async move {
            // An error means the sender is gone, which also means stop.
            let _ = stop.wait_for(|&s| s).await;
        }
    }
}
