//! Who a connection serves: a session (one sandboxed run, one standalone bridge, or one
//! tenant of a shared bridge) with its policy and connection budget; on a shared bridge's
//! listener, the tenants a client must name (`tenants`) and the seats of those that have not
//! yet (`lobby`); and the addresses a session's DNS stub handed out (`addresses`). Plain
//! data and the locks around it: nothing here serves a connection.

pub mod addresses;
pub mod lobby;
pub mod tenants;

use std::sync::{Arc, PoisonError, RwLock};

use tokio::sync::Semaphore;

use crate::policy::Policy;
use addresses::SessionAddresses;
use lobby::Lobby;
use tenants::Tenants;

/// Connections one session may have open at once, unless it says otherwise.
pub const DEFAULT_SESSION_CONNECTIONS: usize = 1024;

/// Connections of a shared bridge that have not named their tenant yet, at once
/// (`--max-unidentified`): past it the oldest seat of the source that holds the most,
/// once it has waited a second, is dropped for a newcomer (lobby.rs). While those are
/// younger, `CEILING_FACTOR` times as many are seated: a burst of a thousand clients, whose
/// heads the bridge has not read yet, is seated whole.
pub const DEFAULT_UNIDENTIFIED_CONNECTIONS: usize = 256;

/// One sandboxed run (or one standalone bridge, or one of its tenants): an id, the policy
/// it is held to, and its connection budget. A standalone bridge's policy can be replaced
/// while it runs (a reload): each connection, and each request of a keep-alive one, is
/// judged under the policy it started with ([`Conn::policy`]).
#[derive(Debug)]
pub struct Session {
    pub id: Arc<str>,
    policy: RwLock<Arc<Policy>>,
    /// Connections this session may have open at once (`--max-connections`).
    pub max_connections: usize,
    /// Where that limit is set, for the refusal that says it was reached.
    pub limit_named: &'static str,
    /// Its places, one per open connection.
    pub(crate) connections: Arc<Semaphore>,
    /// The addresses its DNS stub handed out, by name (capture).
    pub addresses: SessionAddresses,
    /// On a shared bridge's listener: the tenants a client must name (identity.rs); each
    /// request is then served under its tenant's session, and this one's policy (which
    /// refuses everything) is never used for it.
    tenants: Option<RwLock<Arc<Tenants>>>,
    /// With `tenants`: the seats of the clients that have not named one yet (lobby.rs),
    /// which take none of the bridge's places.
    lobby: Option<Arc<Lobby>>,
}

impl Session {
    pub fn new(id: impl Into<Arc<str>>, policy: Arc<Policy>, max_connections: usize) -> Session {
        let max_connections = max_connections.clamp(1, Semaphore::MAX_PERMITS);
        Session {
            id: id.into(),
            policy: RwLock::new(policy),
            max_connections,
            limit_named: "--max-connections",
            connections: Arc::new(Semaphore::new(max_connections)),
            addresses: SessionAddresses::default(),
            tenants: None,
            lobby: None,
        }
    }

    /// The session of a listener that serves `tenants`: refusals of clients that named
    /// none are logged under its id. Its connections are those that have not named a
    /// tenant yet, in a lobby of `unidentified` seats (lobby.rs).
    pub fn serving_tenants(
        id: impl Into<Arc<str>>,
        tenants: Arc<Tenants>,
        unidentified: usize,
    ) -> Session {
        let base = Session::new(id, Arc::new(Policy::deny_all()), unidentified);
        Session {
            tenants: Some(RwLock::new(tenants)),
            lobby: Some(Arc::new(Lobby::new(base.max_connections))),
            limit_named: "--max-unidentified",
            ..base
        }
    }

    /// Connections of this session open now (on a listener that serves tenants, those
    /// that have not named one yet).
    pub fn open_connections(&self) -> usize {
        match &self.lobby {
            Some(lobby) => lobby.len(),
            None => self
                .max_connections
                .saturating_sub(self.connections.available_permits()),
        }
    }

    /// The most connections this session holds open at once: its limit, or on a listener
    /// that serves tenants, its lobby's ceiling (`CEILING_FACTOR` times
    /// `--max-unidentified`), which [`Session::open_connections`] never passes.
    pub fn connection_ceiling(&self) -> usize {
        self.lobby
            .as_ref()
            .map_or(self.max_connections, |lobby| lobby.ceiling())
    }

    /// On a listener that serves tenants: its lobby's capacity (`--max-unidentified`) and
    /// the seats it has dropped for newer connections so far.
    pub fn unidentified(&self) -> Option<(usize, u64)> {
        let lobby = self.lobby.as_ref()?;
        Some((lobby.capacity(), lobby.dropped_total()))
    }

    /// The lobby of a listener that serves tenants.
    pub(crate) fn lobby(&self) -> Option<&Arc<Lobby>> {
        self.lobby.as_ref()
    }

    /// The session of a tenant of a shared bridge: its limit is set in the tenants file.
    pub fn of_tenant(
        id: impl Into<Arc<str>>,
        policy: Arc<Policy>,
        max_connections: usize,
    ) -> Session {
        Session {
            limit_named: "max_connections in the tenants file",
            ..Session::new(id, policy, max_connections)
        }
    }

    /// The policy new connections are judged under.
    pub fn policy(&self) -> Arc<Policy> {
        // A panic while the lock was held cannot have left half a pointer: the value is
        // only ever replaced whole.
        Arc::clone(&self.policy.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the policy for connections and requests that start from now on; those
    /// under way keep theirs.
    pub fn replace_policy(&self, policy: Arc<Policy>) {
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = policy;
    }

    /// The tenants its clients must name, if it serves tenants.
    pub fn tenants(&self) -> Option<Arc<Tenants>> {
        let tenants = self.tenants.as_ref()?;
        Some(Arc::clone(
            &tenants.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }

    /// Replaces the tenants (a reload); `false` if this session serves none.
    pub fn replace_tenants(&self, new: Arc<Tenants>) -> bool {
        match &self.tenants {
            Some(tenants) => {
                *tenants.write().unwrap_or_else(PoisonError::into_inner) = new;
                true
            }
            None => false,
        }
    }
}
