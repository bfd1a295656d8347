//! A step of building the sandbox's filesystem that failed: what it was, and the kernel's
//! error. Below both the mounts and the run directory's files, which each report one.

/// Where a step failed, for the error message.
#[derive(Debug)]
pub struct MountError {
    pub step: String,
    pub source: std::io::Error,
}
