//! While the run goes on: the files the pins were chosen from (git config files, indexes,
//! hooks directories: plan/protect/sources.rs), looked at every [`POLL_PERIOD`]. When one
//! changed, the pins are chosen again (plan/protect/recheck.rs); a path now needed
//! read-only that no mount of the run covers stops the run (exit 125, one line naming
//! the repository, the setting and the path). Once more when the sandbox is gone: a
//! change CMD outran (it can plant a hook and exit between two looks) fails the run the
//! same way. Either way, each such path is handed to the check after the run, which says
//! whether it was made or changed during the run.
//!
//! A poll, not inotify: closing an inotify instance waits for an SRCU grace period (4–18
//! ms measured on kernel 6.18, pins.rs), which every `netbox -- true` would pay; a look
//! is a stat(2) per file. Measured (kernel 6.18, 2026-12-04, release build, a repository
//! with one commit): `netbox -- true` makes 23 more statx calls (the stamps at the start
//! and the last look), and 800 alternating runs differ by 0.01–0.06 ms in the median,
//! within the noise.

use std::time::Duration;

use crate::error::WrapperError;
use crate::plan::protect::recheck::{Recheck, Uncovered};
use crate::plan::protect::{Identity, Watched, WatchedAs};

/// How often the sources are looked at: CMD has this long, at most, to use a path that
/// became needed (the check after the run reports what it did with it). As often as the
/// connector's reaper looks.
pub const POLL_PERIOD: Duration = Duration::from_millis(100);

/// The pins, checked again when what they were chosen from changes.
pub struct GitWatch {
    recheck: Recheck,
    /// Paths that became needed or watched during the run, for the check after it.
    grown: Vec<Watched>,
    /// The first stop found: looking again finds nothing more to say.
    stopped: bool,
}

impl GitWatch {
    pub fn new(recheck: Recheck) -> GitWatch {
        GitWatch {
            recheck,
            grown: Vec::new(),
            stopped: false,
        }
    }

    /// Looks once: an error if the run must stop.
    pub fn look(&mut self) -> Result<(), WrapperError> {
        if self.stopped || self.recheck.changed().is_none() {
            return Ok(());
        }
        let outcome = match self.recheck.check() {
            Ok(outcome) => outcome,
            Err(e) => {
                self.stopped = true;
                return Err(WrapperError::Recheck {
                    source: Box::new(e),
                });
            }
        };
        self.grown.extend(outcome.newly_watched);
        for uncovered in &outcome.uncovered {
            self.grown.push(watched(uncovered));
        }
        match outcome.uncovered.into_iter().next() {
            Some(first) => {
                self.stopped = true;
                Err(WrapperError::PinsOutgrown {
                    repository: first.naming.repository.map(|r| r.shown),
                    setting: first.naming.setting,
                    // As the user would write it (`./x` read from a config is `x`).
                    named: first.naming.named.components().collect(),
                    path: first.path,
                })
            }
            None => Ok(()),
        }
    }

    /// What the check after the run should look at besides the start's watched paths.
    pub fn into_grown(self) -> Vec<Watched> {
        self.grown
    }
}

/// A path that became needed, as the check after the run looks at it: what is there now
/// is what the stop found (anything else there later is news), and a directory is looked
/// into (a hook planted in a hooks directory that was there before).
fn watched(uncovered: &Uncovered) -> Watched {
    let naming = &uncovered.naming;
    let whose = match &naming.repository {
        Some(r) => format!("for the repository {}", r.shown.display()),
        None => "in the shared git configuration".to_owned(),
    };
    Watched {
        path: uncovered.path.clone(),
        why: format!("{} {whose}, set on the host during the run", naming.setting),
        what: if uncovered.path.is_dir() {
            WatchedAs::Programs
        } else {
            WatchedAs::Path
        },
        was: Identity::of(&uncovered.path),
    }
}
