//! `netbox`: run untrusted commands behind an OS-enforced boundary.
//!
//! This crate is the command line. It knows nothing about HTTP: the egress proxy lives in
//! the `bridge` crate and is driven from here.
//!
//! Modules, in the order a run uses them:
//! - `cli`: argument parsing (clap derive); `config`: the validated run configuration
//! - `protect`: which paths stay read-only (submodules included); `hostsockets`: host
//!   Unix sockets to hide;
//!   `mounts`: the mount plan and its syscalls; `pins`: pid 1 watching the pins
//! - `env`: CMD's environment (proxy settings); `limits`: --memory and --fsize;
//!   `stdin_relay`: a file given as standard input reaches CMD through a pipe
//! - `run`: netbox's side of a run: plan, clone the sandbox, placeholders; then
//!   `supervise`: bridge, probe log, signals, pin watch, exit status; then `gitaudit`:
//!   the git metadata CMD left in the writable roots
//! - `sandbox`: the sandbox's pid 1, created by clone(2) in new namespaces; its steps in
//!   order: `namespaces`, `mounts`, `caps`, `probe`, then `init` runs CMD
//! - `handshake`: the typed parent/sandbox channel; `sys/`: every unsafe syscall wrapper
//! - `bridge_cmd`: `netbox bridge`, the standalone proxy; `export`: `netbox export`;
//!   `verify`: `netbox verify`, the probe's battery as a table
//! - `testhooks`: deliberate breakage for tests (feature `test-hooks` only)
//! - `error`: `WrapperError`, and the only place exit codes are chosen
//!
//! `main` is synchronous on purpose: the sandbox forks before any runtime or thread exists,
//! so a tokio runtime is only ever built by the subcommand that needs one.

mod bridge_cmd;
mod caps;
mod cgroup;
mod cli;
mod config;
mod cpu;
mod env;
mod error;
mod export;
mod gitaudit;
mod handshake;
mod homesplit;
mod hostsockets;
mod init;
mod learn;
mod limits;
mod logview;
mod mounts;
mod namespaces;
mod pins;
mod printable;
mod probe;
mod protect;
mod resolved;
mod run;
mod sandbox;
mod session;
mod stdin_relay;
mod supervise;
mod sys;
mod terminal;
mod testhooks;
mod tools;
mod verify;
mod writejudge;
mod writewatch;

use std::process::ExitCode;

use crate::error::{WrapperError, EXIT_NETBOX_FAILURE};

fn main() -> ExitCode {
    raise_open_file_limit();
    let cli = match cli::Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let result = match cli.command {
        Some(cli::Command::Bridge(args)) => bridge_cmd::run(args).map(|()| 0),
        Some(cli::Command::Export(args)) => export::run(&args),
        Some(cli::Command::Verify(args)) => verify::run(args),
        Some(cli::Command::Log(args)) => logview::run(&args),
        Some(cli::Command::Learn(args)) => learn::run(args),
        Some(cli::Command::Tools(args)) => tools::run(&args),
        None if cli.run.disable_sandbox => run::run_unsandboxed(&cli.run),
        None => config::SandboxConfig::from_args(cli.run).and_then(run::run),
    };
    supervise::reap_left_behind();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => report(&e),
    }
}

/// Raises the soft limit on open files to the hard one: a run holds one fd for each
/// writable root until its sandbox is set up, and a home split into its entries
/// (homesplit.rs) can have more than the usual soft limit of 1024.
fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

/// Writes one line to stderr. A closed stderr is not a reason to fail a run (eprintln!
/// would panic on it).
pub fn say(line: &str) {
    bridge::terminal::say(line);
}

/// Writes a command's output (a report, an allowlist) to stdout, whole, and flushes it.
pub fn print_stdout(text: &str) -> Result<(), WrapperError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(WrapperError::Output)
}

/// Prints `netbox: ` and the error chain on one line, then a hint if there is one.
fn report(error: &WrapperError) -> ExitCode {
    say(&format!("netbox: {}", error::chain(error)));
    if let Some(hint) = error.hint() {
        say(&format!("hint: {hint}"));
    }
    ExitCode::from(error.exit_code())
}

/// clap's own messages, but with netbox's exit status for mistakes.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_NETBOX_FAILURE),
    }
}
