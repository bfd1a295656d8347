//! `--disable-sandbox`: CMD run with no boundary at all, said loudly.

use crate::error::WrapperError;

/// `--disable-sandbox`: CMD as it is, no protection, no probe, said loudly.
pub fn run_unsandboxed(config: &crate::cli::RunArgs) -> Result<u8, WrapperError> {
    if config.fetch.is_some() {
        return Err(WrapperError::Usage(
            "--fetch cuts the network between its two commands, which needs the sandbox; \
             drop --disable-sandbox"
                .into(),
        ));
    }
    if let Some(secret) = config.policy.secret.first() {
        return Err(WrapperError::Usage(format!(
            "--secret {secret}: with --disable-sandbox no bridge swaps a placeholder, and CMD \
             would hold the value itself; drop one of them"
        )));
    }
    let Some((program, args)) = config.cmd.split_first() else {
        return Err(WrapperError::Usage(
            "nothing to run: use netbox [OPTIONS] -- CMD [ARGS...]".into(),
        ));
    };
    crate::output::say(
        "netbox: sandbox disabled: CMD runs with no network filter, no filesystem protection and no probe",
    );
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .map_err(|source| WrapperError::Exec {
            cmd: program.to_string_lossy().into_owned(),
            source,
        })?;
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(i32::from(crate::error::EXIT_NETBOX_FAILURE));
    Ok(u8::try_from(code).unwrap_or(crate::error::EXIT_NETBOX_FAILURE))
}
