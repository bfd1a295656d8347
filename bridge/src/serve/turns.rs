//! Turns at a costly piece of work (a TLS handshake's ClientHello: a key exchange and a
//! signature, listener_tls.rs), shared fairly between the sources that ask for it.
//!
//! A few turns are held at once in all, and each source ([`Source`]: an IPv4 address, an
//! IPv6 /64) holds or waits for one at most: its other askers queue behind it, apart. The
//! queue for the turns themselves (tokio's [`Semaphore`], first come first served) then
//! holds one asker per source, so a client waits for one turn of each other source at
//! most, however many connections a flood opens from its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::session::lobby::Source;

/// The turns, and each source's place in the queue for them.
#[derive(Debug)]
pub struct Turns {
    all: Arc<Semaphore>,
    sources: Mutex<HashMap<Source, Asking>>,
}

/// One source's askers: how many hold or wait for its place, and the place.
#[derive(Debug)]
struct Asking {
    askers: usize,
    place: Arc<Semaphore>,
}

/// A turn held (or, while [`Turns::take`] waits, asked for): given back when dropped.
#[must_use = "the turn is given back when dropped"]
pub struct Turn<'a> {
    turns: &'a Turns,
    source: Source,
    _place: Option<OwnedSemaphorePermit>,
    _turn: Option<OwnedSemaphorePermit>,
}

impl Turns {
    /// `at_once` turns (one at least) held at once in all.
    pub fn new(at_once: usize) -> Arc<Turns> {
        Arc::new(Turns {
            all: Arc::new(Semaphore::new(at_once.clamp(1, Semaphore::MAX_PERMITS))),
            sources: Mutex::new(HashMap::new()),
        })
    }

    /// A turn for `source`, once each asker of that source before it has had its own.
    /// Cancel-safe: a wait given up leaves nothing behind.
    pub async fn take(&self, source: Source) -> Turn<'_> {
        let place = {
            let mut sources = self.lock();
            let asking = sources.entry(source).or_insert_with(|| Asking {
                askers: 0,
                place: Arc::new(Semaphore::new(1)),
            });
            asking.askers += 1;
            Arc::clone(&asking.place)
        };
        // From here on, dropping `turn` counts this asker out.
        let mut turn = Turn {
            turns: self,
            source,
            _place: None,
            _turn: None,
        };
        // Neither semaphore is ever closed: `Err` cannot happen, and would hold nothing.
        turn._place = place.acquire_owned().await.ok();
        turn._turn = Arc::clone(&self.all).acquire_owned().await.ok();
        turn
    }

    /// Sources with an asker now.
    pub fn sources(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Source, Asking>> {
        // Every change under the lock is one insert, one count or one remove.
        self.sources.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut sources = self.turns.lock();
        if let Some(asking) = sources.get_mut(&self.source) {
            asking.askers -= 1;
            if asking.askers == 0 {
                sources.remove(&self.source);
            }
        }
        // The permits go back after this, as the fields are dropped.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    const FLOOD: Source = Source::V4(Ipv4Addr::new(192, 0, 2, 1));
    const OTHER: Source = Source::V4(Ipv4Addr::new(192, 0, 2, 2));

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_source_behind_a_flood_waits_for_one_turn_not_the_floods_queue() {
        runtime().block_on(async {
            let turns = Turns::new(1);
            let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
            // The flood's first turn is held; a hundred more of its askers queue.
            let held = turns.take(FLOOD).await;
            let mut waiting = Vec::new();
            for n in (0..100).chain([1000]) {
                let (turns, done_tx) = (Arc::clone(&turns), done_tx.clone());
                let source = if n == 1000 { OTHER } else { FLOOD };
                waiting.push(tokio::spawn(async move {
                    let _turn = turns.take(source).await;
                    tokio::task::yield_now().await;
                    let _ = done_tx.send(n);
                }));
                // Each asks before the next.
                tokio::task::yield_now().await;
            }
            drop(held);
            for task in waiting {
                task.await.unwrap();
            }
            let mut order = Vec::new();
            while let Ok(n) = done.try_recv() {
                order.push(n);
            }
            let at = order.iter().position(|&n| n == 1000).unwrap();
            assert!(
                at <= 1,
                "the other source waited for {at} of the flood's turns"
            );
            assert_eq!(order.len(), 101);
            assert_eq!(turns.sources(), 0, "nothing left behind");
        });
    }

    #[test]
    fn a_wait_given_up_leaves_nothing_behind() {
        runtime().block_on(async {
            let turns = Turns::new(1);
            let held = turns.take(FLOOD).await;
            let gave_up = tokio::time::timeout(Duration::from_millis(10), turns.take(OTHER)).await;
            assert!(gave_up.is_err(), "no turn was free");
            assert_eq!(turns.sources(), 1);
            drop(held);
            assert_eq!(turns.sources(), 0);
            let _again = turns.take(OTHER).await;
        });
    }
}
