//! The bridge crate's one error type: what a caller must report to a person.

use std::path::PathBuf;

use crate::policy::PolicyError;

/// Something the bridge could not set up.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("invalid listen address {addr:?}: {reason}")]
    ListenAddr { addr: String, reason: &'static str },
    #[error("cannot listen on {addr}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open event log {}", path.display())]
    OpenLog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
