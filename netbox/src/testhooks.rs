//! Deliberate breakage of single controls and pauses in race windows, so tests can watch
//! the live probe catch a broken control and can swap a path at the worst moment.
//!
//! The hooks are one `TestHooks` value, read from the environment once, when netbox
//! starts (`init`), and reached by the code that honours them through `hooks()`. Only a
//! build with the `test-hooks` feature (the test suite's) reads anything: in a release
//! build `hooks()` is a constant with every hook off, which the compiler folds away, so a
//! release build has no way to weaken anything.

use std::time::Duration;

/// Which controls to weaken, and where to pause.
#[derive(Debug, Clone, Copy)]
pub struct TestHooks {
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
    /// Answer network notifications without judging them (netbox's side).
    pub blind_net_watch: bool,
    /// Let every connect run as the kernel would, undecided (netbox's side): the probe's
    /// Unix socket row must fail.
    pub let_connects_run: bool,
    /// No denied-write filter at all, and no check of it: for benches/write_watch.sh's
    /// "the same run without the filter".
    pub no_write_watch: bool,
    /// Install no io_uring denial (the probe's row still runs).
    pub skip_io_uring_denial: bool,
    /// The bridge panics on a request for `bridge-panic.test` (BRIDGE_PANIC_HOST), so a
    /// test can see a panic stop the run.
    pub bridge_panic: bool,
    /// With capture, add no catch-all routes (`capture-routes`): the probe's capture row
    /// must fail.
    pub skip_capture_routes: bool,
    /// With capture, bring up a second link in capture's namespace
    /// (`capture-extra-link`): the probe's capture row must fail.
    pub extra_capture_link: bool,
    /// Print the session CA's private key on stderr (`show-ca-key`), so a test can search
    /// the disk for it.
    pub show_ca_key: bool,
    /// Mount what a path leads to without checking it is what netbox resolved (pid 1's
    /// side; the probe's check of the writable roots still runs).
    pub skip_identity_checks: bool,
    /// pid 1 waits this long before it mounts anything, so a test can swap a path then.
    pub mount_pause: Duration,
    /// `netbox export` waits this long between checking a file and reading it.
    pub export_pause: Duration,
    /// The git metadata check waits this long before each directory it reads, so a test
    /// can cancel it midway.
    pub audit_pause: Duration,
}

impl TestHooks {
    /// Every hook off: what a release build always has.
    #[cfg(not(feature = "test-hooks"))]
    const NONE: TestHooks = TestHooks {
        skip_read_only_root: false,
        skip_capability_drop: false,
        skip_limits: false,
        keep_nested_userns: false,
        keep_bridge_at_cut: false,
        blind_write_watch: false,
        blind_net_watch: false,
        let_connects_run: false,
        no_write_watch: false,
        skip_identity_checks: false,
        skip_io_uring_denial: false,
        bridge_panic: false,
        show_ca_key: false,
        skip_capture_routes: false,
        extra_capture_link: false,
        mount_pause: Duration::ZERO,
        export_pause: Duration::ZERO,
        audit_pause: Duration::ZERO,
    };

    /// From `NETBOX_TEST_BREAK` (a comma-separated list of `read-only-root`,
    /// `capability-drop`, `limits`, `nested-userns`, `cut`, `write-watch`,
    /// `no-write-watch`, `identity`, `io-uring`, `bridge-panic`) and
    /// `NETBOX_TEST_{MOUNT,EXPORT,AUDIT}_PAUSE_MS`.
    #[cfg(feature = "test-hooks")]
    fn from_env() -> TestHooks {
        let wanted = std::env::var("NETBOX_TEST_BREAK").unwrap_or_default();
        let broken = |name: &str| wanted.split(',').any(|w| w == name);
        let pause = |var: &str| {
            Duration::from_millis(
                std::env::var(var)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            )
        };
        TestHooks {
            skip_read_only_root: broken("read-only-root"),
            skip_capability_drop: broken("capability-drop"),
            skip_limits: broken("limits"),
            keep_nested_userns: broken("nested-userns"),
            keep_bridge_at_cut: broken("cut"),
            blind_write_watch: broken("write-watch"),
            blind_net_watch: broken("net-watch"),
            let_connects_run: broken("unix-sockets"),
            no_write_watch: broken("no-write-watch"),
            skip_identity_checks: broken("identity"),
            skip_io_uring_denial: broken("io-uring"),
            bridge_panic: broken("bridge-panic"),
            show_ca_key: broken("show-ca-key"),
            skip_capture_routes: broken("capture-routes"),
            extra_capture_link: broken("capture-extra-link"),
            mount_pause: pause("NETBOX_TEST_MOUNT_PAUSE_MS"),
            export_pause: pause("NETBOX_TEST_EXPORT_PAUSE_MS"),
            audit_pause: pause("NETBOX_TEST_AUDIT_PAUSE_MS"),
        }
    }
}

/// The host `bridge_panic` panics on.
pub const BRIDGE_PANIC_HOST: &str = "bridge-panic.test";

impl TestHooks {
    /// What the bridge's `panic_on_host` is set to.
    pub fn bridge_panic_host(&self) -> Option<String> {
        self.bridge_panic.then(|| BRIDGE_PANIC_HOST.to_owned())
    }
}

#[cfg(feature = "test-hooks")]
static HOOKS: std::sync::OnceLock<TestHooks> = std::sync::OnceLock::new();

/// Reads the hooks, once; `main` calls it first, before any thread or clone, so every
/// part of netbox (and the sandbox's pid 1, a copy of it) sees the same value.
pub fn init() {
    #[cfg(feature = "test-hooks")]
    HOOKS.get_or_init(TestHooks::from_env);
}

/// The hooks in force. Once `init` has run, a plain atomic load: no lock, no
/// allocation, so the child that starts CMD may call it while it shares pid 1's memory.
#[cfg(feature = "test-hooks")]
pub fn hooks() -> &'static TestHooks {
    HOOKS.get_or_init(TestHooks::from_env)
}

/// The hooks in force: every one off in a release build.
#[cfg(not(feature = "test-hooks"))]
pub fn hooks() -> &'static TestHooks {
    &TestHooks::NONE
}

/// Sleeps for `pause` when it is not zero (a test's window; zero in a release build).
pub fn pause(pause: Duration) {
    if !pause.is_zero() {
        std::thread::sleep(pause);
    }
}
