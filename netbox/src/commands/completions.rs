//! `netbox completions SHELL` and `netbox man`: the shell completion script and the man
//! page, made from the same command-line definition that parses netbox's arguments, so
//! neither can fall behind a flag (clap_complete and clap_mangen write them).

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::error::WrapperError;

pub fn completions(args: &CompletionsArgs) -> Result<u8, WrapperError> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "netbox", &mut script);
    crate::output::print_stdout(&String::from_utf8_lossy(&script)).map(|()| 0)
}

pub fn man() -> Result<u8, WrapperError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(WrapperError::Spawn)?;
    crate::output::print_stdout(&String::from_utf8_lossy(&page)).map(|()| 0)
}
