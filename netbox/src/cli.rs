//! Command-line parsing (clap derive). Everything is validated here or in `config`
//! before anything else happens, so bad input fails with one line and exit 125.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};

/// `--version`: the release and the commit it was built from (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NETBOX_COMMIT"),
    ")"
);

/// Run untrusted commands behind an OS-enforced network and filesystem boundary.
///
/// netbox [OPTIONS] -- CMD [ARGS...] runs CMD in an empty network namespace whose only way
/// out is the egress bridge, with the filesystem read-only except the workspace and a
/// private temp root. Everything after `--` is CMD's, untouched.
#[derive(Debug, Parser)]
#[command(
    name = "netbox",
    version = VERSION,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// Parses netbox's command line. A run (`netbox [OPTIONS] -- CMD`) is tried first
    /// without the subcommands, whose arguments clap would otherwise build on every parse:
    /// ~50 µs of the start-up of every run (measured). A command line that parse accepts
    /// means the same to [`Cli`]: CMD comes only after `--`, so it has no word before `--`
    /// that could name a subcommand. Anything else (a subcommand, --help, --version, a
    /// mistake) is parsed by [`Cli`] itself, so what it prints is unchanged.
    pub fn parse_args() -> Result<Cli, clap::Error> {
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        Cli::parse_from_args(args)
    }

    fn parse_from_args(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
        match RunOnly::try_parse_from(&args) {
            Ok(RunOnly { run }) => Ok(Cli { command: None, run }),
            Err(_) => Cli::try_parse_from(args),
        }
    }
}

/// [`Cli`] without its subcommands: a run's options alone.
#[derive(Debug, Parser)]
#[command(name = "netbox")]
struct RunOnly {
    #[command(flatten)]
    run: RunArgs,
}

/// The network policy, shared by `netbox -- CMD` and `netbox bridge`.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Allowlist file (TOML; repeatable). With none and no --allow, every connection is refused.
    #[arg(long = "allowlist", value_name = "FILE")]
    pub allowlist: Vec<PathBuf>,

    /// Allow HOST[:PORTS], *.SUFFIX[:PORTS], IP or CIDR (repeatable).
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<String>,

    /// Deny HOST[:PORTS], *.SUFFIX[:PORTS], IP or CIDR (repeatable); deny wins over allow.
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<String>,

    /// Allow HOST[:PORTS] or *.SUFFIX[:PORTS], and let those names reach the private,
    /// loopback or documentation address their DNS returns (a company mirror), without
    /// opening that address for any other name (repeatable).
    #[arg(long = "allow-private", value_name = "RULE")]
    pub allow_private: Vec<String>,

    /// Allow the registries a package manager is configured for, asked of the tool's own
    /// configuration at run time: pip (uv), npm (yarn, pnpm), cargo, git, apt, go, maven (mvn), gem (bundle)
    /// (repeatable; `netbox tools NAME` shows what it would add).
    #[arg(long = "allow-tool", value_name = "NAME")]
    pub allow_tool: Vec<String>,

    /// The registries `--allow-tool` finds are internal: they may resolve to private,
    /// loopback or documentation addresses (as `--allow-private` rules).
    #[arg(long = "private-ok")]
    pub private_ok: bool,

    /// Inspect every tunnel to a TLS port (443 and an allowlist's tls_ports): TLS ends at
    /// the bridge, with a certificate from a CA made in memory for this session, which CMD
    /// trusts through its trust stores; each request is logged with its method and path.
    /// (An allowlist's [[http]] rules inspect their own hosts without this.)
    #[arg(long = "inspect")]
    pub inspect: bool,

    /// When inspecting, also trust this CA certificate (PEM) for upstreams, as CMD does
    /// through the sandbox's trust bundle: a private registry's CA (repeatable).
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,

    /// A credential CMD never holds: NAME gets a placeholder, and the bridge puts the real
    /// value (read from env:VAR, the default env:NAME, or file:PATH) in its place only in
    /// requests to HOSTS, which it inspects (repeatable; as an allowlist's [[secret]]).
    /// With --bridge, `--secret NAME` takes the placeholder of a secret the tenant's
    /// policy holds at that bridge, whose value never reaches this machine.
    #[arg(long = "secret", value_name = "NAME[=SOURCE]@HOST[,HOST]")]
    pub secret: Vec<String>,
}

/// Where tools' caches go (`--cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolCache {
    /// `$XDG_CACHE_HOME/netbox/TOOL` (or `~/.cache/netbox/TOOL`), kept between runs.
    Netbox,
    /// The run's private /tmp: gone with the run.
    None,
}

/// What netbox says on stderr while CMD runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Show {
    /// The start-up line, and each attempt (an allowed tunnel once per host).
    All,
    /// Only refusals and blocked writes.
    Blocked,
    /// Nothing.
    None,
}

/// Where the sandbox's temp root comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TmpMode {
    /// A fresh tmpfs, private to this run (the default).
    Private,
    /// The host's /tmp, shared and writable.
    Host,
}

/// `netbox [OPTIONS] -- CMD`: run a command in the sandbox.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,

    /// The writable workspace (default: the current directory).
    #[arg(long = "workspace", value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// Another writable path (repeatable).
    #[arg(long = "write", value_name = "PATH")]
    pub write: Vec<PathBuf>,

    /// Make a path read-only even inside a writable root (repeatable).
    #[arg(long = "ro", value_name = "PATH")]
    pub read_only: Vec<PathBuf>,

    /// Show the host's SRC, writable, at DST too (repeatable): SRC is a writable root, as
    /// with --write, with its protections at DST as well. DST must exist, or lie under the
    /// sandbox's own /tmp.
    #[arg(long = "bind", num_args = 2, value_names = ["SRC", "DST"])]
    pub bind: Vec<PathBuf>,

    /// Show the host's SRC, read-only, at DST (repeatable): what the sandbox sees at SRC,
    /// hidden paths and all. DST must exist, or lie under the sandbox's own /tmp.
    #[arg(long = "ro-bind", num_args = 2, value_names = ["SRC", "DST"])]
    pub ro_bind: Vec<PathBuf>,

    /// Make a path empty inside the sandbox: an empty directory or an empty file (repeatable).
    #[arg(long = "hide", value_name = "PATH")]
    pub hide: Vec<PathBuf>,

    /// Protect a path like .git: read-only, and it cannot be created if missing (repeatable).
    #[arg(long = "protect", value_name = "PATH")]
    pub protect: Vec<PathBuf>,

    /// Let CMD write .git's objects, refs, logs and FETCH_HEAD (git fetch, commit-tree,
    /// update-ref of a branch HEAD does not name); the rest of .git stays read-only.
    #[arg(long = "allow-git-writes")]
    pub allow_git_writes: bool,

    /// Let the workspace or a --write path be your home directory (or hold it): only
    /// home's data becomes writable (its non-hidden entries, but those holding code);
    /// its top level and hidden files stay read-only.
    #[arg(long = "allow-home-write")]
    pub allow_home_write: bool,

    /// Give CMD a terminal of its own even when netbox is not run in one.
    #[arg(long = "tty", conflicts_with = "no_tty")]
    pub tty: bool,

    /// Never give CMD a terminal of its own (by default it gets one when netbox's standard
    /// input and output are terminals).
    #[arg(long = "no-tty")]
    pub no_tty: bool,

    /// Let CMD create user namespaces of its own (bwrap, podman, browsers' sandboxes).
    #[arg(long = "allow-nested-userns")]
    pub allow_nested_userns: bool,

    /// Let CMD use io_uring (refused by default with ENOSYS: its operations bypass the
    /// denied-write log and netbox's decision on each connect to a Unix socket, and it is a
    /// large kernel attack surface).
    #[arg(long = "allow-io-uring")]
    pub allow_io_uring: bool,

    /// Let CMD connect to this host Unix socket, e.g. an SSH agent: `--allow-socket
    /// '$SSH_AUTH_SOCK'` (netbox expands the variable). Repeatable; each connection is
    /// logged. Any other socket file but the sandbox's own is refused at connect.
    #[arg(long = "allow-socket", value_name = "PATH")]
    pub allow_socket: Vec<String>,

    /// Let CMD use your SSH agent ($SSH_AUTH_SOCK, as --allow-socket does) while the
    /// private keys in ~/.ssh read empty: ssh and git over SSH sign through the agent,
    /// which signs whatever CMD asks while the run lasts (use `ssh-add -c`).
    #[arg(long = "ssh-agent")]
    pub ssh_agent: bool,

    /// Do not capture connections made without the proxy: programs that ignore the proxy
    /// settings then find no network at all (only loopback), as without capture, and the
    /// sandbox's /etc/resolv.conf stays the host's.
    #[arg(long = "no-capture")]
    pub no_capture: bool,

    /// Leave the user's defaults file (~/.config/netbox/config.toml) unread.
    #[arg(long = "no-config")]
    pub no_config: bool,

    /// No network at all: an empty allowlist, said as such (the probe proves it as ever).
    /// Refused beside anything that would open a host (a rule, a tool, a bridge, a secret,
    /// the agent).
    #[arg(long = "no-network", conflicts_with_all = [
        "allow", "allowlist", "allow_tool", "allow_private", "bridge", "secret", "fetch",
        "fetch_allowlist", "ssh_agent", "private_ok", "inspect"
    ])]
    pub no_network: bool,

    /// Connections CMD may have open through the bridge at once; past it each new one is
    /// refused at once (503, or a SOCKS5 failure reply) and logged. At least 2: the live
    /// probe opens two at once.
    #[arg(long = "max-connections", value_name = "N",
          default_value_t = bridge::session::DEFAULT_SESSION_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(2..=1_000_000).map(|n| usize::try_from(n).unwrap_or(usize::MAX)))]
    pub max_connections: usize,

    /// HTTP status for refused requests (default 502, or 403 with --allow-tool npm, yarn
    /// or pnpm, which retry a 502 for a minute; see docs/bridge.md for what each client
    /// makes of it).
    #[arg(long = "refusal-status", value_name = "CODE",
          value_parser = clap::value_parser!(u16).range(400..=599))]
    pub refusal_status: Option<u16>,

    /// Where an `--allow-tool` tool's cache goes: a netbox-owned persistent directory per
    /// tool (`$XDG_CACHE_HOME/netbox/TOOL`), or `none` (the run's private /tmp).
    #[arg(long = "cache", value_enum, default_value_t = ToolCache::Netbox)]
    pub cache: ToolCache,

    /// Temp root: a private tmpfs, or the host's /tmp.
    #[arg(long = "tmp", value_enum, default_value_t = TmpMode::Private)]
    pub tmp: TmpMode,

    /// Event log (JSON lines; default: $XDG_STATE_HOME/netbox/sessions/ID.jsonl).
    #[arg(long = "log", value_name = "FILE")]
    pub log: Option<PathBuf>,

    /// No start-up line and no per-attempt lines on stderr (as --show none).
    #[arg(long)]
    pub quiet: bool,

    /// What stderr says while CMD runs: the start-up line and every attempt (all), only
    /// what was blocked (blocked), or nothing (none, as --quiet). The log has everything.
    #[arg(long = "show", value_enum, value_name = "WHAT")]
    pub show: Option<Show>,

    /// Kill the whole sandbox after this long (e.g. 30s, 5m) and exit 124, like timeout(1).
    #[arg(long = "timeout", value_name = "DURATION", value_parser = duration)]
    pub timeout: Option<std::time::Duration>,

    /// Cap CMD's address space (e.g. 512M, 2G; at least 32M): an allocation past it fails.
    #[arg(long = "memory", value_name = "SIZE", value_parser = crate::limits::parse_memory)]
    pub memory: Option<u64>,

    /// Largest file CMD may write (e.g. 1M, 10G): a write past it fails (SIGXFSZ, EFBIG).
    #[arg(long = "fsize", value_name = "SIZE", value_parser = crate::limits::parse_size)]
    pub fsize: Option<u64>,

    /// Most processes (threads included) CMD may have at once, itself included (at most
    /// 4096): a fork past it fails (EAGAIN).
    #[arg(long = "pids", value_name = "N", value_parser = crate::limits::parse_pids)]
    pub pids: Option<u64>,

    /// CPU time the whole sandbox may use, in CPUs (e.g. 0.5, 2): a cgroup's CPU quota,
    /// so it needs a cgroup v1 cpu hierarchy netbox may write to (root, here).
    #[arg(long = "cpus", value_name = "N", value_parser = crate::limits::parse_cpus)]
    pub cpus: Option<u64>,

    /// Start CMD with a minimal environment (PATH, HOME=/tmp, TERM, LANG, the proxy
    /// settings) instead of yours: nothing else of yours, secrets included, gets in.
    #[arg(long = "clean-env")]
    pub clean_env: bool,

    /// Set KEY=VALUE for CMD, or pass KEY through from your environment (repeatable).
    #[arg(long = "env", value_name = "KEY[=VALUE]")]
    pub env: Vec<String>,

    /// Set the KEY=VALUE lines of FILE for CMD (# comments and blank lines allowed).
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<PathBuf>,

    /// Fetch, then cut: run CMD1 (with `sh -c`) first, with the network the allowlist
    /// allows; then CMD in the same sandbox and filesystem with no network at all. If CMD1
    /// fails, CMD does not run and netbox exits with CMD1's status.
    #[arg(long = "fetch", value_name = "CMD1")]
    pub fetch: Option<String>,

    /// Allowlist for the --fetch phase (TOML; repeatable; added to --allowlist and --allow).
    #[arg(long = "fetch-allowlist", value_name = "FILE", requires = "fetch")]
    pub fetch_allowlist: Vec<PathBuf>,

    /// Send the sandbox's connections to a shared netbox bridge (`netbox bridge
    /// --tenants`) at http://HOST:PORT or https://HOST:PORT, which judges each one under
    /// this tenant's policy;
    /// the sandbox, the probe (which proves that bridge refuses its canary) and the log
    /// stay here. --allow, --allowlist and --allow-private do not go with it.
    #[arg(long = "bridge", value_name = "URL")]
    pub bridge: Option<String>,

    /// The file holding this tenant's credentials for --bridge: one line, TOKEN or
    /// TENANT:TOKEN.
    #[arg(long = "bridge-token-file", value_name = "FILE", requires = "bridge")]
    pub bridge_token_file: Option<PathBuf>,

    /// For an https:// --bridge: the CA (PEM) its certificate must come from (default:
    /// the CAs this system trusts).
    #[arg(long = "bridge-ca", value_name = "FILE", requires = "bridge")]
    pub bridge_ca: Option<PathBuf>,

    /// For an https:// --bridge that names tenants by certificates: this one (PEM).
    #[arg(long = "bridge-cert", value_name = "FILE", requires_all = ["bridge", "bridge_key"])]
    pub bridge_cert: Option<PathBuf>,

    /// The private key (PEM) of --bridge-cert.
    #[arg(long = "bridge-key", value_name = "FILE", requires = "bridge_cert")]
    pub bridge_key: Option<PathBuf>,

    /// Run CMD with no sandbox and no probe at all (says so on stderr).
    #[arg(long = "disable-sandbox", visible_alias = "yolo")]
    pub disable_sandbox: bool,

    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub cmd: Vec<std::ffi::OsString>,

    /// Learn mode (set by `netbox learn`, not a flag).
    #[arg(skip)]
    pub learn: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the egress-filtering proxy on its own.
    Bridge(Box<BridgeArgs>),
    /// Copy named files out of a directory a sandbox wrote, treating it as hostile.
    Export(ExportArgs),
    /// Prove every control for these options (the live probe's battery) and print it.
    #[command(
        mut_arg("cmd", |a| a.hide(true)),
        mut_arg("fetch", |a| a.hide(true)),
        mut_arg("fetch_allowlist", |a| a.hide(true)),
        mut_arg("disable_sandbox", |a| a.hide(true))
    )]
    Verify(Box<VerifyArgs>),
    /// Summarise a session log: what ran, the probe, network attempts, refused writes.
    Log(LogArgs),
    /// Run CMD letting it reach any public host, and write an allowlist of what it tried.
    #[command(
        mut_arg("fetch", |a| a.hide(true)),
        mut_arg("fetch_allowlist", |a| a.hide(true)),
        mut_arg("disable_sandbox", |a| a.hide(true)),
        mut_arg("allowlist", |a| a.help(
            "Allowlist file (TOML; repeatable) whose rules the learned file keeps; \
             what they do not allow is learned, not refused"
        ))
    )]
    Learn(Box<LearnArgs>),
    /// Show the rules `--allow-tool NAME` would add here, and where each comes from.
    Tools(ToolsArgs),
    /// Print one of netbox's documents (allowlist, running, secrets, bridge, git, logs,
    /// event-log); without a topic, the list.
    Docs(DocsArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell), e.g.
    /// `netbox completions bash > ~/.local/share/bash-completion/completions/netbox`.
    Completions(CompletionsArgs),
    /// Print netbox's man page (roff), e.g. `netbox man > ~/.local/share/man/man1/netbox.1`.
    Man,
}

/// `netbox completions`: the shell to write a script for.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `netbox docs`: the documents the binary carries.
#[derive(Debug, Args)]
pub struct DocsArgs {
    /// The document to print.
    #[arg(value_name = "TOPIC")]
    pub topic: Option<String>,
}

/// `netbox tools`: what `--allow-tool` finds.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Tools to ask (pip, uv, npm, yarn, pnpm, cargo, git, apt, go, maven, mvn, gem, bundle).
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,

    /// The registries are internal: read their documents from non-public addresses too,
    /// as `--allow-tool NAME --private-ok` would.
    #[arg(long = "private-ok")]
    pub private_ok: bool,
}

/// `netbox learn`: an allowlist from what a command tries.
#[derive(Debug, Args)]
pub struct LearnArgs {
    /// Write the allowlist here (replaced whole) instead of to stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Build it from an earlier session's refusals instead of running anything.
    #[arg(long = "from-log", value_name = "LOG")]
    pub from_log: Option<PathBuf>,

    #[command(flatten)]
    pub run: RunArgs,
}

/// `netbox log`: a session log, summarised.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// The event log to read (a file --log wrote, or one under the sessions directory).
    #[arg(value_name = "FILE", conflicts_with_all = ["last", "list", "prune"])]
    pub file: Option<PathBuf>,

    /// Read the newest session log of a run from this directory (its workspace, or one
    /// inside it); if there is none, the newest of all, said as such.
    #[arg(long, conflicts_with_all = ["list", "prune"])]
    pub last: bool,

    /// List the session logs, newest first: when, how it ended, workspace, command.
    #[arg(long, conflicts_with = "prune")]
    pub list: bool,

    /// With --list: only runs from this directory (their workspace, or one inside it).
    #[arg(long, requires = "list")]
    pub here: bool,

    /// With --list: only runs whose command line holds TEXT.
    #[arg(long = "command", value_name = "TEXT", requires = "list")]
    pub command: Option<String>,

    /// With --list: only runs of the last DURATION (e.g. 2h, 3days).
    #[arg(long, value_name = "DURATION", requires = "list", value_parser = duration)]
    pub since: Option<std::time::Duration>,

    /// With --list: only runs that did not end with CMD exiting 0.
    #[arg(long, requires = "list")]
    pub failed: bool,

    /// Remove session logs older than --keep-days, then the oldest past --max-size in all
    /// (a run does this too as it ends, with the defaults, once a day).
    #[arg(long)]
    pub prune: bool,

    /// Days a session log is kept.
    #[arg(
        long = "keep-days",
        value_name = "DAYS",
        default_value_t = 30,
        requires = "prune"
    )]
    pub keep_days: u64,

    /// The most the session logs may take together (e.g. 200M).
    #[arg(long = "max-size", value_name = "SIZE", default_value = "200M",
          value_parser = crate::limits::parse_size, requires = "prune")]
    pub max_size: u64,

    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `netbox verify`: the same options as a run, no command.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

/// `netbox export`: safe evidence export.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The directory the sandbox wrote.
    #[arg(long = "from", value_name = "DIR")]
    pub from: PathBuf,

    /// Where the copies go, made if missing (created files only; nothing there is
    /// overwritten).
    #[arg(long = "to", value_name = "DIR")]
    pub to: PathBuf,

    /// Largest file exported, in bytes.
    #[arg(long = "max-bytes", value_name = "N", default_value_t = 64 * 1024 * 1024)]
    pub max_bytes: u64,

    /// Files to copy, relative to --from; a directory is copied with every regular file
    /// under it (`.` for all of --from).
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
}

/// `netbox bridge`: a standalone egress proxy.
#[derive(Debug, Args)]
pub struct BridgeArgs {
    /// Where to listen: 127.0.0.1:PORT, [::1]:PORT or unix:PATH (repeatable; PORT 0 picks
    /// one). With --tenants, every client of these must name its tenant, and any address
    /// may be given (0.0.0.0:3128 in a container).
    #[arg(long = "listen", value_name = "ADDR")]
    pub listen: Vec<String>,

    /// Serve several tenants, each with its own allowlist, named by its clients'
    /// Proxy-Authorization or by a listener of its own (TOML; see docs/bridge.md). No
    /// policy flag then applies: a client that names no tenant is refused (407).
    #[arg(long = "tenants", value_name = "FILE")]
    pub tenants: Option<PathBuf>,

    /// Serve `GET /metrics` (Prometheus text format), `GET /ready` (503 while every
    /// --max-connections place is taken, and once draining) and `GET /healthz` on this
    /// separate listener: 127.0.0.1:PORT, [::1]:PORT or unix:PATH (with --tenants, any
    /// address).
    #[arg(long = "admin", value_name = "ADDR")]
    pub admin: Option<String>,

    /// On SIGTERM or SIGINT: stop accepting, let open connections finish for this long,
    /// then end them (each still logged).
    #[arg(long = "drain-timeout", value_name = "DURATION", default_value = "5s",
          value_parser = duration)]
    pub drain_timeout: std::time::Duration,

    /// Reload the policies when a file they were read from changes (looked at every
    /// second), as on SIGHUP: a file that does not load keeps the policies before it.
    #[arg(long = "watch")]
    pub watch: bool,

    /// Speak TLS on the --listen listeners (an HTTPS proxy) with this certificate chain
    /// (PEM), so that clients' credentials and requests do not cross the network in the
    /// clear. Read at start.
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// With --tls-cert and --tenants: take client certificates this CA (PEM) issued; one
    /// whose DNS or URI name a tenant's client_names lists names that tenant. A client
    /// without a certificate still names its tenant by Proxy-Authorization.
    #[arg(long = "client-ca", value_name = "FILE", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,

    /// Go out through this proxy (http://HOST:PORT or https://HOST:PORT), as a network whose only way out is a
    /// company proxy needs: tunnels as CONNECT, plain HTTP in absolute form. Names go to
    /// it unresolved (it resolves them); the policy still judges each first.
    #[arg(long = "upstream-proxy", value_name = "URL")]
    pub upstream_proxy: Option<String>,

    /// The file holding the credentials for --upstream-proxy: one line, TOKEN (sent as
    /// Bearer) or USER:PASSWORD (sent as Basic).
    #[arg(
        long = "upstream-proxy-token-file",
        value_name = "FILE",
        requires = "upstream_proxy"
    )]
    pub upstream_proxy_token_file: Option<PathBuf>,

    /// For an https:// --upstream-proxy: the CA (PEM) its certificate must come from
    /// (default: the CAs this system trusts).
    #[arg(
        long = "upstream-proxy-ca",
        value_name = "FILE",
        requires = "upstream_proxy"
    )]
    pub upstream_proxy_ca: Option<PathBuf>,

    /// For an https:// --upstream-proxy that asks for a client certificate: this one (PEM).
    #[arg(long = "upstream-proxy-cert", value_name = "FILE", requires_all = ["upstream_proxy", "upstream_proxy_key"])]
    pub upstream_proxy_cert: Option<PathBuf>,

    /// The private key (PEM) of --upstream-proxy-cert.
    #[arg(
        long = "upstream-proxy-key",
        value_name = "FILE",
        requires = "upstream_proxy_cert"
    )]
    pub upstream_proxy_key: Option<PathBuf>,

    /// Hosts reached directly, not through --upstream-proxy: names (each with the names
    /// under it), IP addresses and CIDR blocks, separated by commas, as NO_PROXY lists them.
    #[arg(long = "no-proxy", value_name = "LIST", requires = "upstream_proxy")]
    pub no_proxy: Option<String>,

    /// When the policy inspects (--inspect, [[http]] rules): write the session CA's
    /// certificate (PEM) to FILE, for clients to trust. Its key stays in memory.
    #[arg(long = "ca-cert", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    #[command(flatten)]
    pub policy: PolicyArgs,

    /// Append one JSON line per attempt to FILE; `-` writes them to standard output,
    /// `unix:PATH` sends each as one datagram to a Unix socket a collector listens on.
    #[arg(long = "log", value_name = "FILE")]
    pub log: Option<PathBuf>,

    /// No per-attempt summary on stderr.
    #[arg(long)]
    pub quiet: bool,

    /// Session id written into every log line (default: generated).
    #[arg(long = "session", value_name = "ID")]
    pub session: Option<String>,

    /// Ask these DNS servers (IP:PORT, repeatable) instead of /etc/resolv.conf.
    #[arg(long = "dns", value_name = "ADDR")]
    pub dns: Vec<std::net::SocketAddr>,

    /// HTTP status for policy refusals.
    #[arg(long = "refusal-status", value_name = "CODE", default_value_t = 502,
          value_parser = clap::value_parser!(u16).range(400..=599))]
    pub refusal_status: u16,

    /// Close a tunnel after this long with no traffic (e.g. 300s, 5m).
    #[arg(long = "idle-timeout", value_name = "DURATION", default_value = "300s",
          value_parser = duration)]
    pub idle_timeout: std::time::Duration,

    /// Give up on an upstream address after this long.
    #[arg(long = "connect-timeout", value_name = "DURATION", default_value = "10s",
          value_parser = duration)]
    pub connect_timeout: std::time::Duration,

    /// Drop a client that has not sent a full request head after this long.
    #[arg(long = "header-timeout", value_name = "DURATION", default_value = "10s",
          value_parser = duration)]
    pub header_timeout: std::time::Duration,

    /// Connections open at once; past it each new one is refused at once (503, or a
    /// SOCKS5 failure reply) and logged. With --tenants, a client of the --listen
    /// listeners takes its place once it has named its tenant.
    #[arg(long = "max-connections", value_name = "N",
          default_value_t = bridge::session::DEFAULT_SESSION_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| usize::try_from(n).unwrap_or(usize::MAX)))]
    pub max_connections: usize,

    /// With --tenants: clients of the --listen listeners that have not named their tenant
    /// yet (by a client certificate, SOCKS5 credentials or Proxy-Authorization), held
    /// apart from --max-connections; past it, the oldest connection of the source (IPv4
    /// address, IPv6 /64) holding the most is dropped for the newcomer once it has waited
    /// a second (while those are younger, up to 4 x N are held). A client is dropped for a
    /// flood only if the flood comes from as many sources as there are seats.
    #[arg(long = "max-unidentified", value_name = "N", requires = "tenants",
          default_value_t = bridge::session::DEFAULT_UNIDENTIFIED_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| usize::try_from(n).unwrap_or(usize::MAX)))]
    pub max_unidentified: usize,

    /// With --tenants: drop a client of the --listen listeners that has not named its
    /// tenant this long after it connected (TLS handshake included); --header-timeout, if
    /// shorter, still applies.
    #[arg(long = "identify-timeout", value_name = "DURATION", requires = "tenants",
          default_value = "5s", value_parser = longer_than_zero)]
    pub identify_timeout: std::time::Duration,

    /// Refusals each session (the bridge's own, each tenant's) writes to the event log
    /// per minute at most; past it they are counted, and each minute's count is logged as
    /// one `net_suppressed` record of that session.
    #[arg(long = "log-refusals-per-minute", value_name = "N", default_value_t = 6000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub log_refusals_per_minute: u64,
}

/// A duration as humantime reads it (`30s`, `5m`, `1h30m`), with a message that says so:
/// humantime's own (`expected number at 0`) names neither the form nor a way out.
fn duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text).map_err(|_| {
        "a duration is a number and a unit, such as 30s, 5m or 1h30m (for no limit, leave \
         the option out)"
            .into()
    })
}

/// A duration that is not zero (`--identify-timeout 0s` would drop every client before
/// it could name its tenant, at random as its bytes happen to be read).
fn longer_than_zero(text: &str) -> Result<std::time::Duration, String> {
    match duration(text) {
        Ok(duration) if duration.is_zero() => {
            Err("must be longer than zero (a client needs time to name its tenant)".into())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(args: &[&str]) -> (String, String) {
        let args: Vec<std::ffi::OsString> = std::iter::once("netbox")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect();
        let fast = format!(
            "{:?}",
            Cli::parse_from_args(args.clone()).map_err(|e| e.kind())
        );
        let full = format!("{:?}", Cli::try_parse_from(args).map_err(|e| e.kind()));
        (fast, full)
    }

    #[test]
    fn the_identify_deadline_defaults_to_the_bridges() {
        let parsed = Cli::try_parse_from(["netbox", "bridge", "--tenants", "t.toml"]).unwrap();
        let Some(Command::Bridge(args)) = parsed.command else {
            panic!("not the bridge command");
        };
        assert_eq!(
            args.identify_timeout,
            bridge::conn::DEFAULT_IDENTIFY_TIMEOUT
        );
        assert_eq!(
            args.max_unidentified,
            bridge::session::DEFAULT_UNIDENTIFIED_CONNECTIONS
        );
        // Only with --tenants: without it every client is the bridge's own.
        for flag in ["--identify-timeout=1s", "--max-unidentified=8"] {
            let parsed = Cli::try_parse_from(["netbox", "bridge", "--listen", "127.0.0.1:0", flag]);
            assert!(parsed.is_err(), "{flag} without --tenants");
        }
        // A deadline of zero would drop every client before it could name its tenant.
        let zero = Cli::try_parse_from([
            "netbox",
            "bridge",
            "--tenants",
            "t.toml",
            "--identify-timeout",
            "0s",
        ]);
        let said = zero.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(said.contains("longer than zero"), "{said}");
    }

    #[test]
    fn a_run_parses_as_the_full_command_line_does() {
        let lines: &[&[&str]] = &[
            &["--", "true"],
            &[],
            &[
                "--quiet",
                "--allow",
                "registry.test:443",
                "--",
                "curl",
                "-sS",
                "x",
            ],
            &[
                "--workspace",
                "log",
                "--log",
                "learn",
                "--",
                "verify",
                "--",
                "bridge",
            ],
            &[
                "--tmp=host",
                "--write",
                "export",
                "--timeout",
                "5s",
                "--",
                "sh",
                "-c",
                "exit 3",
            ],
            &[
                "--fetch",
                "make fetch",
                "--fetch-allowlist",
                "a.toml",
                "--",
                "make",
            ],
            &["--yolo", "--", "true"],
            &["log", "--last"],
            &["learn", "-o", "out.toml", "--", "true"],
            &["verify"],
            &["help"],
            &["--help"],
            &["-h"],
            &["--version"],
            &["-V"],
            &["--fetch-allowlist", "a.toml", "--", "true"],
            &["--bogus", "--", "true"],
            &["true"],
            &["--quiet", "log"],
            &["--tmp", "nowhere", "--", "true"],
        ];
        for line in lines {
            let (fast, full) = both(line);
            assert_eq!(fast, full, "{line:?}");
        }
        // The positive control: a run really takes the short way, and a subcommand not.
        assert!(RunOnly::try_parse_from(["netbox", "--quiet", "--", "true"]).is_ok());
        assert!(RunOnly::try_parse_from(["netbox", "log", "--last"]).is_err());
    }
}
