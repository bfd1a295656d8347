//! Seats for connections that have not said who they are yet: a shared bridge's clients
//! before they name their tenant, and the admin listener's.
//!
//! Anyone who can reach such a listener can open these connections, so they have a budget
//! of their own, apart from the places tenants are served in, and a full lobby never turns
//! a newcomer away: a connection that is waiting is dropped to seat it. Refusing newcomers
//! instead would let whoever holds the seats (a connection that never finishes its head
//! costs nothing to keep open) deny every client that comes after.
//!
//! Whom to drop goes by source ([`Source`]: an IPv4 address, an IPv6 /64, this machine for
//! a Unix socket): the source that holds the most seats loses its oldest seat first, so
//! one source, however fast it opens connections, pushes out only its own. A client from a
//! source that holds fewer seats than some other is never dropped for a newcomer; only
//! when every source in the lobby holds as many (a flood from as many sources as there
//! are seats) is it dropped for being the one that has waited longest.
//!
//! Each connection has a [`GRACE`] to say who it is before a newcomer may push it out:
//! while the first to drop is younger, newcomers are seated past the capacity, up to
//! [`CEILING_FACTOR`] times it. A burst of clients that arrive faster than the bridge reads
//! their heads (each head already sent, waiting to be read) is then seated whole; only at
//! the ceiling is the first to drop dropped however young, so that the lobby's descriptors
//! stay bounded.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

/// How long a connection keeps its seat whatever comes after it, unless the lobby is at
/// its ceiling: a client on a slow network sends its head within it, and the bridge reads
/// a burst's heads within it.
pub const GRACE: Duration = Duration::from_secs(1);

/// The most seats a lobby gives while every connection in it is within its grace, as a
/// multiple of its capacity.
pub const CEILING_FACTOR: usize = 4;

/// Seats past their grace a newcomer frees at most: its own, and one more while the lobby
/// holds more than its capacity, so that it comes back to it as newcomers arrive, not all
/// at once (each drop is work: a reset; hundreds at one moment would hold up the clients
/// being served then).
const DROPS_PER_NEWCOMER: usize = 2;

/// Sources whose drops one summary counts apart, at most (a flood from more sources than
/// this still has every drop counted, in the total).
const MAX_SOURCES_COUNTED: usize = 1024;

/// Where a connection comes from, as the lobby tells its clients apart: one IPv4 address,
/// one IPv6 /64 (what one host or one subscriber's network is given: a client with a
/// /64 has all its addresses), or this machine (a Unix socket's clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Local,
    V4(Ipv4Addr),
    /// The first 64 bits of the address.
    V6(u64),
}

impl Source {
    /// The source of a client at `peer` (`None`: a Unix socket's). An IPv4 client of a
    /// dual-stack listener (`::ffff:a.b.c.d`) is its IPv4 address.
    pub fn of(peer: Option<SocketAddr>) -> Source {
        match peer.map(|p| p.ip()) {
            None => Source::Local,
            Some(IpAddr::V4(ip)) => Source::V4(ip),
            Some(IpAddr::V6(ip)) => match ip.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4),
                None => {
                    let octets = ip.octets();
                    let mut prefix = [0u8; 8];
                    prefix.copy_from_slice(&octets[..8]);
                    Source::V6(u64::from_be_bytes(prefix))
                }
            },
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Local => f.write_str("local"),
            Source::V4(ip) => write!(f, "{ip}"),
            Source::V6(prefix) => write!(f, "{}/64", Ipv6Addr::from(u128::from(*prefix) << 64)),
        }
    }
}

/// The seats of one listener's (or one set of listeners') newcomers.
#[derive(Debug)]
pub struct Lobby {
    capacity: usize,
    seats: Mutex<Seats>,
    /// How many seats are taken, for whoever waits for the lobby to empty (a drain).
    taken: watch::Sender<usize>,
}

/// One seat taken: when, by whom, and what tells its connection it was dropped.
#[derive(Debug)]
struct Taken {
    at: Instant,
    source: Source,
    dropped: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Seats {
    /// The next seat's number: seats are numbered in the order they were given.
    next: u64,
    /// The seats taken, by number (so the first is the one that has waited longest).
    taken: BTreeMap<u64, Taken>,
    /// Each source's seats, by number.
    by_source: HashMap<Source, BTreeSet<u64>>,
    /// Every source that holds a seat, the one that holds the most first; of two that hold
    /// as many, the one whose oldest seat is older. Its key is (seats, oldest seat).
    ranked: BTreeSet<(Reverse<usize>, u64, Source)>,
    /// Seats dropped since the last [`Lobby::take_dropped`], and by whom (some sources).
    dropped: u64,
    dropped_from: HashMap<Source, u64>,
    /// Seats dropped since the lobby opened.
    dropped_total: u64,
}

impl Seats {
    fn rank(&self, source: Source) -> Option<(Reverse<usize>, u64, Source)> {
        let seats = self.by_source.get(&source)?;
        Some((Reverse(seats.len()), *seats.first()?, source))
    }

    fn insert(&mut self, number: u64, taken: Taken) {
        let source = taken.source;
        if let Some(rank) = self.rank(source) {
            self.ranked.remove(&rank);
        }
        self.by_source.entry(source).or_default().insert(number);
        self.taken.insert(number, taken);
        if let Some(rank) = self.rank(source) {
            self.ranked.insert(rank);
        }
    }

    fn remove(&mut self, number: u64) -> Option<Taken> {
        let taken = self.taken.remove(&number)?;
        let source = taken.source;
        if let Some(rank) = self.rank(source) {
            self.ranked.remove(&rank);
        }
        if let Some(seats) = self.by_source.get_mut(&source) {
            seats.remove(&number);
            if seats.is_empty() {
                self.by_source.remove(&source);
            }
        }
        if let Some(rank) = self.rank(source) {
            self.ranked.insert(rank);
        }
        Some(taken)
    }

    /// The seat to drop first: the oldest of the source that holds the most.
    fn first_to_drop(&self) -> Option<(u64, Instant)> {
        let (_, oldest, _) = self.ranked.first()?;
        Some((*oldest, self.taken.get(oldest)?.at))
    }

    fn drop_seat(&mut self, number: u64) {
        let Some(taken) = self.remove(number) else {
            return;
        };
        // Stored if its connection is not waiting on it yet: it sees it when it does.
        taken.dropped.notify_one();
        self.dropped += 1;
        self.dropped_total += 1;
        let counted = self.dropped_from.len() < MAX_SOURCES_COUNTED;
        if counted || self.dropped_from.contains_key(&taken.source) {
            *self.dropped_from.entry(taken.source).or_default() += 1;
        }
    }
}

/// One connection's seat, given back when dropped.
#[derive(Debug)]
pub struct Seat {
    number: u64,
    lobby: Arc<Lobby>,
    dropped: Arc<Notify>,
    given_back: bool,
}

/// The seats a lobby dropped since it was last asked: how many, and the sources that lost
/// the most of them, with how many each ([`SOURCES_NAMED`] at most, the most first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drops {
    pub count: u64,
    pub from: Vec<(Source, u64)>,
}

/// Sources a summary of drops names, at most: the ones that lost the most.
pub const SOURCES_NAMED: usize = 16;

impl Lobby {
    pub fn new(capacity: usize) -> Lobby {
        Lobby {
            capacity: capacity.max(1),
            seats: Mutex::new(Seats::default()),
            taken: watch::Sender::new(0),
        }
    }

    /// A seat for a new connection from `source`; when every seat is taken, the first to
    /// drop (the oldest seat of the source that holds the most), past its grace, is dropped
    /// for it (its [`Seat::dropped`] resolves), and one more past the capacity; at the
    /// ceiling the first to drop however young.
    pub fn seat(self: &Arc<Lobby>, source: Source) -> Seat {
        self.seat_at(Instant::now(), source)
    }

    fn seat_at(self: &Arc<Lobby>, now: Instant, source: Source) -> Seat {
        let dropped = Arc::new(Notify::new());
        let mut seats = self.lock();
        let ceiling = self.ceiling();
        for _ in 0..DROPS_PER_NEWCOMER {
            let taken = seats.taken.len();
            let Some((first, at)) = seats.first_to_drop() else {
                break;
            };
            let past_grace = now.saturating_duration_since(at) >= GRACE;
            if !(taken >= self.capacity && past_grace || taken >= ceiling) {
                break;
            }
            seats.drop_seat(first);
        }
        let number = seats.next;
        seats.next += 1;
        let taken = Taken {
            at: now,
            source,
            dropped: Arc::clone(&dropped),
        };
        seats.insert(number, taken);
        self.taken.send_replace(seats.taken.len());
        Seat {
            number,
            lobby: Arc::clone(self),
            dropped,
            given_back: false,
        }
    }

    /// Drops up to `n` seats, the first to drop first, however young (the bridge is out of
    /// descriptors: a newcomer cannot even be accepted); how many it dropped.
    pub fn shed(&self, n: usize) -> usize {
        let mut seats = self.lock();
        let mut shed = 0;
        while shed < n {
            let Some((first, _)) = seats.first_to_drop() else {
                break;
            };
            seats.drop_seat(first);
            shed += 1;
        }
        self.taken.send_replace(seats.taken.len());
        shed
    }

    /// The seats dropped since the last call, if any.
    pub fn take_dropped(&self) -> Option<Drops> {
        let mut seats = self.lock();
        let count = std::mem::take(&mut seats.dropped);
        let mut from: Vec<(Source, u64)> = std::mem::take(&mut seats.dropped_from)
            .into_iter()
            .collect();
        // The most first; of two that lost as many, the lower: one answer for one count.
        from.sort_unstable_by_key(|(source, n)| (Reverse(*n), *source));
        from.truncate(SOURCES_NAMED);
        (count > 0).then_some(Drops { count, from })
    }

    /// Seats dropped since the lobby opened.
    pub fn dropped_total(&self) -> u64 {
        self.lock().dropped_total
    }

    /// Seats taken now.
    pub fn len(&self) -> usize {
        self.lock().taken.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The seats past which one waiting past its grace is dropped for a newcomer.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The most seats taken at once.
    pub fn ceiling(&self) -> usize {
        self.capacity.saturating_mul(CEILING_FACTOR)
    }

    /// Resolves once no seat is taken.
    pub async fn emptied(&self) {
        let mut taken = self.taken.subscribe();
        // The sender lives as long as `self`: this only returns once the count is 0.
        let _ = taken.wait_for(|&n| n == 0).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seats> {
        // Every change under the lock leaves the seats, their sources and their ranks in
        // step before anything can panic (none of it allocates between the three).
        self.seats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives seat `number` back; `false` if it was no longer taken (it was dropped for a
    /// newer connection).
    fn release(&self, number: u64) -> bool {
        let mut seats = self.lock();
        let held = seats.remove(number).is_some();
        if held {
            self.taken.send_replace(seats.taken.len());
        }
        held
    }
}

impl Seat {
    /// Resolves if this seat was given to a newer connection: its connection must end.
    pub fn dropped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let dropped = Arc::clone(&self.dropped);
        async move { dropped.notified().await }
    }

    /// Leaves the lobby (the connection has said who it is); `false` if the seat had
    /// already been given to a newer connection, which then ends this one.
    pub fn leave(mut self) -> bool {
        self.given_back = true;
        self.lobby.release(self.number)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if !self.given_back {
            self.lobby.release(self.number);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_dropped(seat: &Seat) -> bool {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_millis(20), seat.dropped())
                .await
                .is_ok()
        })
    }

    const ONE: Source = Source::V4(Ipv4Addr::new(192, 0, 2, 1));
    const TWO: Source = Source::V4(Ipv4Addr::new(192, 0, 2, 2));
    const THREE: Source = Source::V4(Ipv4Addr::new(192, 0, 2, 3));

    /// Seats taken `at` (offsets from one instant), all from one source.
    fn seated(lobby: &Arc<Lobby>, start: Instant, at: &[u64]) -> Vec<Seat> {
        seated_from(lobby, start, ONE, at)
    }

    fn seated_from(lobby: &Arc<Lobby>, start: Instant, source: Source, at: &[u64]) -> Vec<Seat> {
        at.iter()
            .map(|ms| lobby.seat_at(start + Duration::from_millis(*ms), source))
            .collect()
    }

    #[test]
    fn a_full_lobby_drops_the_longest_waiting_past_its_grace_for_a_newcomer() {
        let lobby = Arc::new(Lobby::new(3));
        let start = Instant::now();
        let seats = seated(&lobby, start, &[0, 10, 20]);
        assert_eq!(lobby.len(), 3);
        // The control: while there is room nobody is dropped.
        assert!(seats.iter().all(|s| !is_dropped(s)));
        let after_grace = 1_000 + 15;
        let fourth = seated(&lobby, start, &[after_grace]).remove(0);
        assert_eq!(lobby.len(), 3, "the lobby holds its capacity, no more");
        assert!(is_dropped(&seats[0]), "the longest waiting is dropped");
        assert!(!is_dropped(&seats[1]) && !is_dropped(&seats[2]) && !is_dropped(&fourth));
        let fifth = seated(&lobby, start, &[1_030]).remove(0);
        assert!(is_dropped(&seats[1]));
        assert!(!is_dropped(&seats[2]) && !is_dropped(&fourth) && !is_dropped(&fifth));
        // Within its grace, a seat is not given away: the lobby holds one more.
        let sixth = seated(&lobby, start, &[1_030]).remove(0);
        assert!(is_dropped(&seats[2]), "seats[2] is past its grace");
        let seventh = seated(&lobby, start, &[1_031]).remove(0);
        assert_eq!(lobby.len(), 4);
        assert!([&fourth, &fifth, &sixth, &seventh]
            .iter()
            .all(|s| !is_dropped(s)));
        // A dropped seat, given back late, frees nobody else's.
        drop(seats);
        assert_eq!(lobby.len(), 4);
        assert!(!is_dropped(&fourth) && !is_dropped(&fifth));
    }

    #[test]
    fn a_burst_within_the_grace_is_seated_whole_up_to_the_ceiling() {
        let lobby = Arc::new(Lobby::new(3));
        let start = Instant::now();
        let ceiling = 3 * CEILING_FACTOR;
        let burst = seated(&lobby, start, &vec![5; ceiling]);
        assert_eq!(lobby.len(), ceiling);
        assert!(
            burst.iter().all(|s| !is_dropped(s)),
            "nobody past the grace"
        );
        // At the ceiling the longest waiting goes, however young.
        let more = seated(&lobby, start, &[6, 7]);
        assert_eq!(lobby.len(), ceiling);
        assert!(is_dropped(&burst[0]) && is_dropped(&burst[1]));
        assert!(!is_dropped(&burst[2]) && more.iter().all(|s| !is_dropped(s)));
        // Once past their grace, the lobby comes back towards its capacity as newcomers
        // arrive, two seats given back for each, none of the newcomers'.
        let late = seated(&lobby, start, &[2_000; 3]);
        assert_eq!(lobby.len(), ceiling - 3);
        let later = seated(&lobby, start, &[3_100; 6]);
        assert_eq!(lobby.len(), 6);
        assert!(late.iter().all(is_dropped) && !later.iter().any(is_dropped));
        // (The first two were seen dropped above.)
        assert!(burst[2..].iter().chain(&more).all(is_dropped));
    }

    #[test]
    fn a_flood_from_one_source_pushes_out_only_its_own_seats() {
        let lobby = Arc::new(Lobby::new(4));
        let start = Instant::now();
        // A client that is slow to say who it is, then a flood from elsewhere, faster than
        // the grace, far past the ceiling.
        let slow = seated_from(&lobby, start, TWO, &[0]).remove(0);
        let flood = seated_from(&lobby, start, ONE, &[1; 100]);
        assert_eq!(lobby.len(), lobby.ceiling());
        assert!(
            !is_dropped(&slow),
            "the flood pushed out a client of another source"
        );
        let kept = flood.iter().filter(|s| !is_dropped(s)).count();
        assert_eq!(kept, lobby.ceiling() - 1, "the flood keeps the rest");
        // And past its grace, the slow client is still not the one to go: the flood's
        // source holds more.
        let _later = seated_from(&lobby, start, ONE, &[1_500; 10]);
        assert!(!is_dropped(&slow));
        // The control: a flood whose every connection is another source's (as many
        // sources as seats) leaves the one that has waited longest the first to go, the
        // slow client with it.
        let mut sources = (0..200u32).map(|n| Source::V6(u64::from(n) << 16));
        let spread: Vec<Seat> = (0..lobby.ceiling() * 2)
            .map(|_| {
                lobby.seat_at(
                    start + Duration::from_millis(1_600),
                    sources.next().unwrap(),
                )
            })
            .collect();
        assert!(
            is_dropped(&slow),
            "every source held one seat: the oldest went"
        );
        assert!(!spread.last().is_some_and(is_dropped));
        assert_eq!(lobby.len(), lobby.ceiling());
    }

    #[test]
    fn of_two_sources_the_one_holding_more_loses_first_and_as_many_the_older() {
        let lobby = Arc::new(Lobby::new(3));
        let start = Instant::now();
        let a = seated_from(&lobby, start, ONE, &[0]);
        let b = seated_from(&lobby, start, TWO, &[10, 20]);
        // Past their grace, at capacity: TWO holds more, its oldest goes though ONE's
        // waited longer.
        let c = seated_from(&lobby, start, THREE, &[1_500]).remove(0);
        assert!(is_dropped(&b[0]) && !is_dropped(&a[0]) && !is_dropped(&b[1]));
        // Now each holds one: the one waiting longest goes (ONE's).
        let _d = seated_from(&lobby, start, THREE, &[1_600]);
        assert!(is_dropped(&a[0]) && !is_dropped(&b[1]) && !is_dropped(&c));
        let drops = lobby.take_dropped().unwrap();
        assert_eq!(drops.count, 2);
        assert_eq!(lobby.take_dropped(), None, "counted once");
        assert_eq!(lobby.dropped_total(), 2);
    }

    #[test]
    fn shedding_takes_the_fullest_sources_seats_however_young() {
        let lobby = Arc::new(Lobby::new(8));
        let start = Instant::now();
        let one = seated_from(&lobby, start, TWO, &[0]).remove(0);
        let flood = seated_from(&lobby, start, ONE, &[5; 5]);
        assert_eq!(lobby.shed(3), 3);
        assert!(flood[..3].iter().all(is_dropped) && !flood[3..].iter().any(is_dropped));
        assert!(!is_dropped(&one));
        assert_eq!(lobby.len(), 3);
        let drops = lobby.take_dropped().unwrap();
        assert_eq!((drops.count, drops.from), (3, vec![(ONE, 3)]));
        assert_eq!(lobby.shed(10), 3, "no more than are seated");
        assert!(lobby.is_empty());
    }

    #[test]
    fn sources_are_addresses_and_ipv6_prefixes() {
        let at = |s: &str| Source::of(Some(s.parse().unwrap()));
        assert_eq!(at("192.0.2.1:1"), at("192.0.2.1:2"));
        assert_ne!(at("192.0.2.1:1"), at("192.0.2.2:1"));
        assert_eq!(at("[::ffff:192.0.2.1]:1"), at("192.0.2.1:9"));
        assert_eq!(at("[2001:db8:1:2::1]:1"), at("[2001:db8:1:2:ffff::9]:1"));
        assert_ne!(at("[2001:db8:1:2::1]:1"), at("[2001:db8:1:3::1]:1"));
        assert_eq!(at("[2001:db8:1:2::1]:1").to_string(), "2001:db8:1:2::/64");
        assert_eq!(Source::of(None).to_string(), "local");
    }

    #[test]
    fn a_seat_left_is_nobody_to_drop() {
        let lobby = Arc::new(Lobby::new(2));
        let start = Instant::now();
        let mut seats = seated(&lobby, start, &[0, 0]);
        let waiting = seats.pop().unwrap();
        let named = seats.pop().unwrap();
        assert!(named.leave(), "it held its seat when it left");
        assert_eq!(lobby.len(), 1);
        let newcomer = seated(&lobby, start, &[2_000]).remove(0);
        assert!(!is_dropped(&waiting) && !is_dropped(&newcomer));
        // Past the capacity again: the one still waiting goes, and leaving late says so.
        let _last = seated(&lobby, start, &[2_001]);
        assert!(is_dropped(&waiting));
        assert!(!waiting.leave(), "its seat was given away before it left");
        assert_eq!(lobby.len(), 2);
    }

    #[test]
    fn the_lobby_empties_when_every_seat_is_given_back() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let lobby = Arc::new(Lobby::new(4));
        let seats: Vec<Seat> = (0..2).map(|_| lobby.seat(ONE)).collect();
        runtime.block_on(async {
            let waiting = tokio::time::timeout(Duration::from_millis(20), lobby.emptied());
            assert!(waiting.await.is_err(), "two seats are taken");
            drop(seats);
            let waiting = tokio::time::timeout(Duration::from_millis(20), lobby.emptied());
            assert!(waiting.await.is_ok());
        });
        assert!(lobby.is_empty());
    }
}
