//! `netbox`: run untrusted commands behind an OS-enforced boundary.
//!
//! This crate is the command line. It knows nothing about HTTP: the egress proxy lives in
//! the `bridge` crate and is driven from here.
//!
//! The layers, top to bottom (ARCHITECTURE.md draws them; `architecture.rs` checks that
//! no `crate::` path runs upward):
//! - `commands/`: one file per subcommand; `run` is `netbox -- CMD`
//! - `supervise/`: netbox after the clone: the bridge, the probe's records, signals, the
//!   denied-write watch and judge, session records, the git audit
//! - `sandbox/`: the sandbox's pid 1, its steps in order (`namespaces`, `mounts`, `caps`,
//!   `probe`, then `init` runs CMD), and `handshake`, the channel to netbox
//! - `plan/`: netbox before the clone: configuration, protected paths, the policy and the
//!   tools' registries, limits, cgroups, CMD's environment, host sockets
//! - below them all: `cli`, `error` (the only place exit codes are chosen), `output`,
//!   `printable`, `terminal`, `limits`, `cpu`, `testhooks` (feature `test-hooks` only), and
//!   `sys/`, every unsafe syscall wrapper
//!
//! `main` is synchronous on purpose: the sandbox forks before any runtime or thread exists,
//! so a tokio runtime is only ever built by the subcommand that needs one.

// Every unsafe call goes through `sys/`, where each block says which invariant makes it
// sound; anywhere else `unsafe` is an error (the bridge forbids it outright).
#![deny(unsafe_code)]

mod cli;
mod commands;
mod cpu;
mod error;
mod limits;
mod output;
mod paths;
mod place;
mod plan;
mod printable;
mod sandbox;
mod supervise;
#[allow(unsafe_code)]
mod sys;
mod terminal;
mod testhooks;

#[cfg(test)]
mod architecture;

use std::process::ExitCode;

use crate::error::{WrapperError, EXIT_NETBOX_FAILURE};

fn main() -> ExitCode {
    // First: every file made before this moment is older than the run (gitaudit).
    supervise::gitaudit::note_start();
    stop_on_panic();
    testhooks::init();
    raise_open_file_limit();
    let cli = match cli::Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let result = match cli.command {
        Some(cli::Command::Bridge(args)) => commands::bridge::run(*args).map(|()| 0),
        Some(cli::Command::Export(args)) => commands::export::run(&args),
        Some(cli::Command::Verify(args)) => commands::verify::run(args),
        Some(cli::Command::Log(args)) => commands::log::run(&args),
        Some(cli::Command::Learn(args)) => commands::learn::run(args),
        Some(cli::Command::Tools(args)) => plan::tools::run(&args),
        Some(cli::Command::Docs(args)) => commands::docs::run(&args),
        Some(cli::Command::Completions(args)) => commands::completions::completions(&args),
        Some(cli::Command::Man) => commands::completions::man(),
        None if cli.run.disable_sandbox => commands::run::run_unsandboxed(&cli.run),
        None => plan::config::SandboxConfig::from_args(cli.run).and_then(commands::run::run),
    };
    supervise::reap_left_behind();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => report(&e),
    }
}

/// A panic anywhere in netbox is a broken invariant in what holds the boundary, so the
/// run stops at once with 125 rather than unwind one thread and go on (a bridge task that
/// died mid-request, a write watcher gone quiet). Exiting takes the sandbox with it: pid 1
/// dies with netbox (PR_SET_PDEATHSIG), and CMD with pid 1, so a panic never leaves CMD
/// running, let alone with more network than it had. What the event log holds so far is
/// on disk: it is written a line at a time.
fn stop_on_panic() {
    std::panic::set_hook(Box::new(|info| {
        // First the sandbox, before anything that could block (a full stderr pipe).
        supervise::kill_sandbox_now();
        // What CMD left on the terminal must not hide it.
        let reset = if terminal::owed_on_stderr() {
            terminal::reset()
        } else {
            String::new()
        };
        let line = format!(
            "{reset}netbox: internal error, the run was stopped: {} (please report this)\n",
            printable::printable(&info.to_string())
        );
        say_unless_blocked(line.as_bytes());
        sys::process::exit_at_once(i32::from(EXIT_NETBOX_FAILURE));
    }));
}

/// Writes `line` to stderr if it can take it within 200 ms, bypassing std's lock (a thread
/// that panicked while holding it, or a CMD that filled a pipe nobody reads, must not
/// keep netbox from exiting).
fn say_unless_blocked(line: &[u8]) {
    use std::os::fd::AsFd;
    let stderr = std::io::stderr();
    let mut ready = [nix::poll::PollFd::new(
        stderr.as_fd(),
        nix::poll::PollFlags::POLLOUT,
    )];
    if nix::poll::poll(&mut ready, nix::poll::PollTimeout::from(200u8)).unwrap_or(0) > 0 {
        // At most PIPE_BUF bytes: a pipe with room takes them in one write.
        let _ = nix::unistd::write(stderr.as_fd(), &line[..line.len().min(libc::PIPE_BUF)]);
    }
}

/// Raises the soft limit on open files to the hard one: a run holds one fd for each
/// writable root until its sandbox is set up, and a home split into its entries
/// (homesplit/) can have more than the usual soft limit of 1024.
fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

/// Prints `netbox: ` and the error chain on one line, then a hint if there is one.
fn report(error: &WrapperError) -> ExitCode {
    // Escaped whole: a path in a message may come from a config or a name CMD chose, and
    // its control characters must not reach the terminal as such.
    output::say(&format!(
        "netbox: {}",
        printable::printable(&error::chain(error))
    ));
    if let Some(hint) = error.hint() {
        output::say(&format!("hint: {}", printable::printable(&hint)));
    }
    ExitCode::from(error.exit_code())
}

/// clap's own messages, but with netbox's exit status for mistakes.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    // A flag of bubblewrap's or docker's: clap would guess a netbox flag that merely looks
    // alike (`--bind` → `--bridge`); say what netbox does instead.
    if let Some((flag, instead)) = peer_flag(e) {
        output::say(&format!("netbox: netbox has no {flag}: {instead}"));
        return ExitCode::from(EXIT_NETBOX_FAILURE);
    }
    let _ = e.print();
    if let Some(meant) = missing_separator(e) {
        output::say(&format!("hint: a command to run goes after `--`: {meant}"));
    }
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_NETBOX_FAILURE),
    }
}

/// What netbox does where another sandbox's flag was given.
const PEER_FLAGS: [(&[&str], &str); 4] = [
    (
        &[
            "--bind-try",
            "--ro-bind-try",
            "--dev-bind",
            "--volume",
            "--mount",
        ],
        "the host's files are seen at their own paths, read-only; --write PATH makes one \
         writable, --ro PATH read-only, --hide PATH empty, and --bind SRC DST or \
         --ro-bind SRC DST shows SRC at DST too (netbox docs running)",
    ),
    (
        &[
            "--unshare-net",
            "--unshare-all",
            "--network",
            "--net",
            "--share-net",
        ],
        "CMD's network is always an empty namespace whose only way out is the bridge, which \
         allows what --allow and --allowlist name and nothing else; --no-network says none \
         at all (netbox docs running)",
    ),
    (
        &[
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-user",
        ],
        "netbox always does it: CMD has namespaces of its own and dies with netbox",
    ),
    (
        &["--tmpfs"],
        "CMD's /tmp is private to the run; --tmp host shares the host's",
    ),
];

/// The other sandbox's flag clap found unknown, with what netbox does instead.
fn peer_flag(e: &clap::Error) -> Option<(String, &'static str)> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = word.split_once('=').map_or(word.as_str(), |(flag, _)| flag);
    PEER_FLAGS
        .iter()
        .find(|(flags, _)| flags.contains(&flag))
        .map(|(_, instead)| (flag.to_owned(), *instead))
}

/// `netbox curl …`: clap finds no subcommand `curl`; what was meant is `netbox -- curl …`,
/// with `--` before the first word that is neither an option nor a subcommand.
fn missing_separator(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand
    ) {
        return None;
    }
    let Some(ContextValue::String(word)) = e
        .get(ContextKind::InvalidArg)
        .or_else(|| e.get(ContextKind::InvalidSubcommand))
    else {
        return None;
    };
    if word.starts_with('-') {
        return None;
    }
    // Lossy: an argument that is not UTF-8 is shown, not a panic.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.iter().any(|a| a == "--") {
        return None;
    }
    let at = args.iter().position(|a| a == word)?;
    let mut meant = vec!["netbox".to_owned()];
    meant.extend(args[..at].iter().cloned());
    meant.push("--".to_owned());
    meant.extend(args[at..].iter().cloned());
    Some(crate::printable::printable(&meant.join(" ")))
}
