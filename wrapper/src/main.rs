//! `netbox`: run untrusted commands behind an OS-enforced boundary.
//!
//! This crate is the command line. It knows nothing about HTTP: the egress proxy lives in
//! the `bridge` crate and is driven from here.
//!
//! Modules:
//! - `cli`: argument parsing (clap derive)
//! - `bridge_cmd`: `netbox bridge`, the standalone proxy
//! - `error`: `WrapperError`, and the only place exit codes are chosen
//!
//! `main` is synchronous on purpose: the sandbox forks before any runtime or thread exists,
//! so a tokio runtime is only ever built by the subcommand that needs one.

mod bridge_cmd;
mod cli;
mod error;

use std::process::ExitCode;

use clap::Parser;

use crate::error::{WrapperError, EXIT_NETBOX_FAILURE};

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let result = match cli.command {
        cli::Command::Bridge(args) => bridge_cmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

/// Prints `netbox: ` and the error chain on one line, then a hint if there is one.
fn report(error: &WrapperError) -> ExitCode {
    let mut line = format!("netbox: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        line.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    eprintln!("{line}");
    if let Some(hint) = error.hint() {
        eprintln!("hint: {hint}");
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
