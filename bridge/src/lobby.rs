//! Seats for connections that have not said who they are yet: a shared bridge's clients
//! before they name their tenant, and the admin listener's.
//!
//! Anyone who can reach such a listener can open these connections, so they have a budget
//! of their own, apart from the places tenants are served in, and a full lobby never turns
//! a newcomer away: the connection that has waited longest is dropped to seat it. Refusing
//! newcomers instead would let whoever holds the seats (a connection that never finishes
//! its head costs nothing to keep open) deny every client that comes after. Dropping the
//! longest waiting makes a flood pay one new connection for each one it pushes out.
//!
//! Each connection has a [`GRACE`] to say who it is before a newcomer may push it out:
//! while every seat is younger, newcomers are seated past the capacity, up to
//! [`CEILING_FACTOR`] times it. A burst of clients that arrive faster than the bridge reads
//! their heads (each head already sent, waiting to be read) is then seated whole, and so is
//! a client under a flood of fewer than that many connections a second; only past the
//! ceiling (a flood of several thousand new connections a second with the defaults) is the
//! longest waiting dropped however young, so that the lobby's descriptors stay bounded.

use std::collections::BTreeMap;
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
/// at once (each drop is work: a log record, a reset; hundreds at one moment would hold up
/// the clients being served then).
const DROPS_PER_NEWCOMER: usize = 2;

/// The seats of one listener's (or one set of listeners') newcomers.
#[derive(Debug)]
pub struct Lobby {
    capacity: usize,
    seats: Mutex<Seats>,
    /// How many seats are taken, for whoever waits for the lobby to empty (a drain).
    taken: watch::Sender<usize>,
}

#[derive(Debug, Default)]
struct Seats {
    /// The next seat's number: seats are numbered in the order they were given.
    next: u64,
    /// The seats taken, by number (so the first is the one that has waited longest), each
    /// with when it was taken and what tells its connection it was dropped.
    taken: BTreeMap<u64, (Instant, Arc<Notify>)>,
}

/// One connection's seat, given back when dropped.
#[derive(Debug)]
pub struct Seat {
    number: u64,
    lobby: Arc<Lobby>,
    dropped: Arc<Notify>,
    given_back: bool,
}

/// Why a connection lost its seat, and what it was told: the lobby's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub capacity: usize,
}

impl Lobby {
    pub fn new(capacity: usize) -> Lobby {
        Lobby {
            capacity: capacity.max(1),
            seats: Mutex::new(Seats::default()),
            taken: watch::Sender::new(0),
        }
    }

    /// A seat for a new connection; when every seat is taken, the one that has waited
    /// longest, past its grace, is dropped for it (its [`Seat::dropped`] resolves), and
    /// one more past the capacity; at the ceiling the longest waiting however young.
    pub fn seat(self: &Arc<Lobby>) -> Seat {
        self.seat_at(Instant::now())
    }

    fn seat_at(self: &Arc<Lobby>, now: Instant) -> Seat {
        let dropped = Arc::new(Notify::new());
        let mut seats = self.lock();
        let ceiling = self.capacity.saturating_mul(CEILING_FACTOR);
        for _ in 0..DROPS_PER_NEWCOMER {
            let taken = seats.taken.len();
            let Some((_, (at, _))) = seats.taken.first_key_value() else {
                break;
            };
            let past_grace = now.saturating_duration_since(*at) >= GRACE;
            if !(taken >= self.capacity && past_grace || taken >= ceiling) {
                break;
            }
            if let Some((_, (_, longest))) = seats.taken.pop_first() {
                // Stored if its connection is not waiting on it yet: it sees it when it does.
                longest.notify_one();
            }
        }
        let number = seats.next;
        seats.next += 1;
        seats.taken.insert(number, (now, Arc::clone(&dropped)));
        self.taken.send_replace(seats.taken.len());
        Seat {
            number,
            lobby: Arc::clone(self),
            dropped,
            given_back: false,
        }
    }

    /// Seats taken now.
    pub fn len(&self) -> usize {
        self.lock().taken.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Resolves once no seat is taken.
    pub async fn emptied(&self) {
        let mut taken = self.taken.subscribe();
        // The sender lives as long as `self`: this only returns once the count is 0.
        let _ = taken.wait_for(|&n| n == 0).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seats> {
        // Every change under the lock is one insert or one remove: nothing half-done to
        // see after a panic.
        self.seats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives seat `number` back; `false` if it was no longer taken (it was dropped for a
    /// newer connection).
    fn release(&self, number: u64) -> bool {
        let mut seats = self.lock();
        let held = seats.taken.remove(&number).is_some();
        if held {
            self.taken.send_replace(seats.taken.len());
        }
        held
    }
}

impl Seat {
    /// Resolves if this seat was given to a newer connection: its connection must end.
    pub fn dropped(&self) -> impl std::future::Future<Output = Dropped> + Send + 'static {
        let dropped = Arc::clone(&self.dropped);
        let capacity = self.lobby.capacity;
        async move {
            dropped.notified().await;
            Dropped { capacity }
        }
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

    /// Seats taken `at` (offsets from one instant).
    fn seated(lobby: &Arc<Lobby>, start: Instant, at: &[u64]) -> Vec<Seat> {
        at.iter()
            .map(|ms| lobby.seat_at(start + Duration::from_millis(*ms)))
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
        let seats: Vec<Seat> = (0..2).map(|_| lobby.seat()).collect();
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
