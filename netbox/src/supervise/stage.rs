//! Where a run stands, as netbox knows it from the sandbox's messages. Each message pid 1
//! may send is expected in one stage only; anything else is a broken handshake. The
//! transitions themselves, which log and answer, are `Supervisor`'s methods (mod.rs):
//!
//! ```text
//! SettingUp ──ProbeChecks──▶ ProbeWritesDue ──ProbeWatched──▶ Running        (proven)
//!                                                       ├───▶ Fetching       (proven, --fetch)
//!                                                       └───▶ Refused        (a check failed)
//! Fetching ──FetchDone 0──▶ Cutting ──(bridge drained, Cut sent)──Probe──▶ Running | Refused
//!          └─FetchDone n──▶ FetchFailed
//! Running ──Done──▶ Done
//! ```

use crate::sandbox::probe::ProbeReport;

pub enum Stage {
    /// pid 1 sets up and runs the first live probe: nothing is proven, and nothing of
    /// CMD's exists.
    SettingUp,
    /// The first probe's checks arrived; the writes it made under the write filter (and
    /// what was checked after them) come next.
    ProbeWritesDue(ProbeReport),
    /// Proven, with `--fetch`: CMD1 runs, with the bridge.
    Fetching,
    /// `--fetch`'s CMD1 succeeded: the bridge closes, then pid 1 is told (`told`) and
    /// probes again before CMD may start.
    Cutting { told: bool },
    /// Proven (with `--fetch`, the cut proven too): CMD was told to start.
    Running,
    /// A probe found a control that does not hold: CMD was not started, and the sandbox
    /// is stopped.
    Refused,
    /// `--fetch`'s CMD1 failed: pid 1 has ended everything of it and exits with its
    /// status.
    FetchFailed { status: i32 },
    /// pid 1 said nothing of CMD's is left, with CMD's status: its last word.
    Done { status: i32 },
}

impl Stage {
    /// Whether the first probe has reported (passed or not).
    pub fn probed(&self) -> bool {
        !matches!(self, Stage::SettingUp | Stage::ProbeWritesDue(_))
    }

    /// With `--fetch`: CMD1 succeeded and CMD has not been proven safe to start yet.
    pub fn between_phases(&self) -> bool {
        matches!(self, Stage::Cutting { .. })
    }

    /// pid 1 has ended every process of the run's commands.
    pub fn nothing_left(&self) -> bool {
        matches!(self, Stage::FetchFailed { .. } | Stage::Done { .. })
    }

    /// CMD's status, once pid 1 has reported it.
    pub fn status(&self) -> Option<i32> {
        match self {
            Stage::Done { status } => Some(*status),
            _ => None,
        }
    }
}
