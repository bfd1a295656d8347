//! `netbox verify [OPTIONS]`: the live probe's control battery for the options a real run
//! would use, as a table (or `--json`). It is the same code path as every run's probe: a
//! sandbox is built with those options, `true` is its command, and the probe's report is
//! printed. Exit 0 only if every control held and the run succeeded.

use crate::cli::VerifyArgs;
use crate::error::WrapperError;
use crate::plan::config::SandboxConfig;
use crate::sandbox::probe::{Outcome, ProbeReport};

pub fn run(args: Box<VerifyArgs>) -> Result<u8, WrapperError> {
    let VerifyArgs { json, mut run } = *args;
    // verify must never vouch for something a run would not get, nor run a command.
    if run.disable_sandbox {
        return Err(WrapperError::Usage(
            "--disable-sandbox runs with no sandbox: there is nothing to verify".into(),
        ));
    }
    if !run.cmd.is_empty() {
        return Err(WrapperError::Usage(
            "netbox verify runs no command; drop everything after --".into(),
        ));
    }
    if run.fetch.is_some() {
        return Err(WrapperError::Usage(
            "netbox verify runs no command; drop --fetch".into(),
        ));
    }
    run.cmd = vec!["true".into()];
    run.quiet = true;
    let config = SandboxConfig::from_args(run)?;
    let mut report = None;
    let outcome = crate::commands::run::run_reporting(config, &mut report);
    let Some(report) = report else {
        // The sandbox never got as far as its probe: that error is the answer.
        return outcome.and(Err(WrapperError::Handshake(
            "the sandbox sent no probe report".into(),
        )));
    };
    let text = if json {
        serde_json::to_string_pretty(&report)
            .map_err(|e| WrapperError::Output(std::io::Error::other(e)))?
            + "\n"
    } else {
        table(&report)
    };
    crate::output::print_stdout(&text)?;
    match outcome {
        Ok(0) if report.passed => Ok(0),
        // A failed probe is the table's news; any other failure is said as well.
        Err(WrapperError::ProbeFailed(_)) => Ok(1),
        Err(e) => {
            crate::output::say(&format!("netbox: {e}"));
            Ok(1)
        }
        Ok(_) => Ok(1),
    }
}

/// One block per control: what must not be possible, what must be, the verdict.
fn table(report: &ProbeReport) -> String {
    let mut out = String::new();
    // Where it ran: what a control that fails here, or a setting, is to be read against.
    if let Some(place) = crate::place::Place::detect().describe() {
        out.push_str(&format!("running in {place}\n"));
    }
    for check in &report.checks {
        out.push_str(&format!(
            "{:<8} {}\n",
            if check.passed { "HOLDS" } else { "FAILS" },
            check.name
        ));
        out.push_str(&rows("must not", &check.forbidden));
        out.push_str(&rows("must", &check.control));
    }
    out.push_str(&format!(
        "{} of {} controls hold (probe took {} us)\n",
        report.checks.iter().filter(|c| c.passed).count(),
        report.checks.len(),
        report.duration_us
    ));
    out
}

fn rows(kind: &str, outcomes: &[Outcome]) -> String {
    outcomes
        .iter()
        .map(|o| {
            format!(
                "         {} {kind:<8} {}  ->  {}\n",
                if o.ok { "ok " } else { "BAD" },
                o.attempt,
                o.result
            )
        })
        .collect()
}
