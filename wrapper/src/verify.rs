//! `netbox verify [OPTIONS]`: the live probe's control battery for the options a real run
//! would use, as a table (or `--json`). It is the same code path as every run's probe: a
//! sandbox is built with those options, `true` is its command, and the probe report the
//! run logged is printed. Exit 0 only if every control held.

use std::path::Path;

use crate::cli::VerifyArgs;
use crate::config::SandboxConfig;
use crate::error::WrapperError;
use crate::probe::{Outcome, ProbeReport};

pub fn run(args: VerifyArgs) -> Result<u8, WrapperError> {
    let mut run = args.run;
    run.cmd = vec!["true".into()];
    run.quiet = true;
    let config = SandboxConfig::from_args(run)?;
    let log = config.log_path.clone();
    let session = config.session_id.clone();
    let outcome = crate::run::run(config);
    let report = read_report(&log, &session).ok_or_else(|| match &outcome {
        Err(e) => WrapperError::Setup {
            step: "verify".into(),
            detail: format!("the sandbox did not get as far as its probe: {e}"),
            hint: None,
        },
        Ok(_) => WrapperError::Handshake("no probe record in the event log".into()),
    })?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", table(&report));
    }
    Ok(if report.passed && outcome.is_ok() {
        0
    } else {
        1
    })
}

/// The probe record of `session` in the event log at `path`.
fn read_report(path: &Path, session: &str) -> Option<ProbeReport> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["type"] == "probe" && v["session"] == session)
        .find_map(|v| serde_json::from_value(v).ok())
}

/// One block per control: what must be refused, what must succeed, the verdict.
fn table(report: &ProbeReport) -> String {
    let mut out = String::new();
    for check in &report.checks {
        out.push_str(&format!(
            "{:<8} {}\n",
            if check.passed { "HOLDS" } else { "FAILS" },
            check.name
        ));
        out.push_str(&rows("refused", &check.forbidden));
        out.push_str(&rows("works", &check.control));
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
                "         {} {kind:<7} {}  ->  {}\n",
                if o.ok { "ok " } else { "BAD" },
                o.attempt,
                o.result
            )
        })
        .collect()
}
