//! Deliberate breakage of single controls, so tests can watch the live probe catch it.
//! Compiled in only with the `test-hooks` feature (the test suite's build); a release build
//! has no way to weaken anything.

/// Which controls to weaken.
#[derive(Debug, Clone, Copy, Default)]
pub struct Breakage {
    /// Leave `/` writable (skip the recursive read-only flag).
    pub skip_read_only_root: bool,
    /// Keep capabilities (skip the drop).
    pub skip_capability_drop: bool,
    /// Set no resource limit (for the probe's checks and for CMD alike), and write no
    /// cgroup limit.
    pub skip_limits: bool,
    /// Leave user.max_user_namespaces as it was.
    pub keep_nested_userns: bool,
    /// At `--fetch`'s cut, keep the bridge serving (netbox's side).
    pub keep_bridge_at_cut: bool,
    /// Answer write notifications without judging them (netbox's side).
    pub blind_write_watch: bool,
    /// No denied-write filter at all, and no check of it: for benches/write_watch.sh's
    /// "the same run without the filter".
    pub no_write_watch: bool,
    /// Mount what a path leads to without checking it is what netbox resolved (pid 1's
    /// side; the probe's check of the writable roots still runs).
    pub skip_identity_checks: bool,
    /// Not a breakage: pid 1 waits this long before it mounts anything
    /// (`NETBOX_TEST_MOUNT_PAUSE_MS`), so a test can swap a path in that window.
    pub mount_pause_ms: u64,
}

/// Test builds: sleeps for `NETBOX_TEST_EXPORT_PAUSE_MS` between checking a file and
/// reading it, so a test can change the file in that window. Release builds: nothing.
pub fn pause_export() {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var("NETBOX_TEST_EXPORT_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Test builds: sleeps for `NETBOX_TEST_AUDIT_PAUSE_MS` before each directory the git
/// metadata check reads, so a test can cancel it midway. Release builds: nothing.
pub fn pause_audit() {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var("NETBOX_TEST_AUDIT_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

impl Breakage {
    /// From `NETBOX_TEST_BREAK` (`read-only-root`, `capability-drop`, `limits`,
    /// `nested-userns`, `cut`, `write-watch`, `no-write-watch`, `identity`), test builds
    /// only.
    pub fn from_env() -> Breakage {
        #[cfg(feature = "test-hooks")]
        {
            let wanted = std::env::var("NETBOX_TEST_BREAK").unwrap_or_default();
            Breakage {
                skip_read_only_root: wanted.split(',').any(|w| w == "read-only-root"),
                skip_capability_drop: wanted.split(',').any(|w| w == "capability-drop"),
                skip_limits: wanted.split(',').any(|w| w == "limits"),
                keep_nested_userns: wanted.split(',').any(|w| w == "nested-userns"),
                keep_bridge_at_cut: wanted.split(',').any(|w| w == "cut"),
                blind_write_watch: wanted.split(',').any(|w| w == "write-watch"),
                no_write_watch: wanted.split(',').any(|w| w == "no-write-watch"),
                skip_identity_checks: wanted.split(',').any(|w| w == "identity"),
                mount_pause_ms: std::env::var("NETBOX_TEST_MOUNT_PAUSE_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            }
        }
        #[cfg(not(feature = "test-hooks"))]
        Breakage::default()
    }
}
