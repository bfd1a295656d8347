//! The wrapper's one error type, and the only place exit codes are chosen.

use std::path::PathBuf;

/// Exit status for netbox's own failures (as `env`, `timeout` and podman use).
pub const EXIT_NETBOX_FAILURE: u8 = 125;

/// Why netbox could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum WrapperError {
    #[error("{0}")]
    Usage(String),
    #[error("invalid rule {rule:?} in {flag}: {reason}")]
    Rule {
        flag: &'static str,
        rule: String,
        reason: String,
    },
    #[error(transparent)]
    Bridge(#[from] bridge::BridgeError),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot remove stale socket {}", path.display())]
    StaleSocket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl WrapperError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        EXIT_NETBOX_FAILURE
    }

    /// A line telling the user how to fix it, when we know.
    pub fn hint(&self) -> Option<String> {
        match self {
            WrapperError::Rule { .. } => Some(
                "rules look like host.test, host.test:443, *.host.test:80,443, 10.0.0.0/8:5432, [::1]:8080"
                    .into(),
            ),
            WrapperError::Bridge(bridge::BridgeError::Policy(_)) => {
                Some("see allowlists/README.md for the file format".into())
            }
            _ => None,
        }
    }
}
