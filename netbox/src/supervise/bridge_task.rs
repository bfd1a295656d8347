//! The bridge serving the sandbox's listeners, from start to drained: stopped at
//! `--fetch`'s cut and at the end of the run.

use std::sync::Arc;

use bridge::{BridgeConfig, EventLog, SessionListener};

/// The bridge serving the sandbox's listeners, from start to drained.
pub(super) enum BridgeTask {
    Serving {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    },
    /// Told to stop: accepting no more, draining its connections.
    Stopping(tokio::task::JoinHandle<()>),
    Stopped,
}

impl BridgeTask {
    /// Serves `listeners` under `config` (its refusal status, inspector and upstream
    /// proxy; the rest is set here).
    pub(super) fn serve(
        listeners: Vec<SessionListener>,
        log: Arc<EventLog>,
        config: BridgeConfig,
    ) -> BridgeTask {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bridge::serve(
            listeners,
            BridgeConfig {
                trim_memory: Some(crate::sys::memory::return_free_pages),
                panic_on_host: crate::testhooks::hooks().bridge_panic_host(),
                ..config
            },
            log,
            async {
                let _ = stopped.await;
            },
        ));
        BridgeTask::Serving { stop, task }
    }

    /// Closes the listeners and starts the drain (if not already).
    pub(super) fn stop(&mut self) {
        *self = match std::mem::replace(self, BridgeTask::Stopped) {
            BridgeTask::Serving { stop, task } => {
                let _ = stop.send(());
                BridgeTask::Stopping(task)
            }
            other => other,
        };
    }

    pub(super) fn is_stopping(&self) -> bool {
        matches!(self, BridgeTask::Stopping(_))
    }

    /// Waits until a stopping bridge has drained (at once if it has; forever if it was
    /// never told to stop).
    pub(super) async fn stopped(&mut self) {
        match self {
            BridgeTask::Stopping(task) => {
                let _ = task.await;
                *self = BridgeTask::Stopped;
            }
            BridgeTask::Stopped => {}
            BridgeTask::Serving { .. } => std::future::pending().await,
        }
    }
}
