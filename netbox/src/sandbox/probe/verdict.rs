//! How a row's outcomes become its verdict: each attempt that must be refused (with one of
//! the expected errors) and each control that must succeed, and the row passes only if
//! every one did and at least one forbidden attempt was made.

use bridge::log::records::{Check, Outcome};

/// A check that could not even be tried: `attempt` failed with `result`.
pub fn failed_check(name: &str, attempt: &str, result: String) -> Check {
    let outcome = Outcome {
        attempt: attempt.to_owned(),
        result,
        ok: false,
    };
    check(name, vec![outcome], Vec::new())
}

pub fn check(name: &str, forbidden: Vec<Outcome>, control: Vec<Outcome>) -> Check {
    let passed = !forbidden.is_empty() && forbidden.iter().chain(&control).all(|o| o.ok);
    Check {
        name: name.to_owned(),
        forbidden: bounded(forbidden),
        control: bounded(control),
        passed,
    }
}

/// Outcomes a check reports one by one at most; the rest are said as one (a home split
/// into hundreds of writable roots, thousands of pinned submodules): the report travels
/// to netbox in one message of bounded size, and goes into the log.
pub(super) const MAX_OUTCOMES_SHOWN: usize = 24;

pub(super) fn bounded(mut outcomes: Vec<Outcome>) -> Vec<Outcome> {
    if outcomes.len() <= MAX_OUTCOMES_SHOWN {
        return outcomes;
    }
    let rest = outcomes.split_off(MAX_OUTCOMES_SHOWN - 1);
    let failed = rest.iter().find(|o| !o.ok);
    outcomes.push(Outcome {
        attempt: format!("{} more like these", rest.len()),
        ok: failed.is_none(),
        result: match failed {
            Some(o) => format!("{}: {}", o.attempt, o.result),
            None => "all as expected".into(),
        },
    });
    outcomes
}

/// An attempt that must fail with one of `expected`.
pub(super) fn refused(attempt: String, result: std::io::Result<()>, expected: &[i32]) -> Outcome {
    match result {
        Ok(()) => Outcome {
            attempt,
            result: "succeeded".into(),
            ok: false,
        },
        Err(e) => Outcome {
            attempt,
            ok: e.raw_os_error().is_some_and(|n| expected.contains(&n)),
            result: e.to_string(),
        },
    }
}

pub(super) fn succeeded(attempt: String, result: std::io::Result<()>) -> Outcome {
    match result {
        Ok(()) => Outcome {
            attempt,
            result: "ok".into(),
            ok: true,
        },
        Err(e) => Outcome {
            attempt,
            result: e.to_string(),
            ok: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ok: bool) -> Outcome {
        Outcome {
            attempt: "x".into(),
            result: String::new(),
            ok,
        }
    }

    #[test]
    fn a_row_passes_only_when_every_attempt_went_as_it_must() {
        assert!(check("row", vec![outcome(true)], vec![outcome(true)]).passed);
        assert!(!check("row", vec![outcome(false)], vec![outcome(true)]).passed);
        assert!(!check("row", vec![outcome(true)], vec![outcome(false)]).passed);
        // A row that tried nothing forbidden proves nothing.
        assert!(!check("row", Vec::new(), vec![outcome(true)]).passed);
        assert!(!failed_check("row", "set up", "no".into()).passed);
    }

    #[test]
    fn a_refusal_counts_only_with_an_expected_error() {
        let erofs = || Err(std::io::Error::from_raw_os_error(libc::EROFS));
        assert!(refused("w".into(), erofs(), &[libc::EROFS]).ok);
        assert!(!refused("w".into(), erofs(), &[libc::EACCES]).ok);
        assert!(!refused("w".into(), Ok(()), &[libc::EROFS]).ok);
        assert!(succeeded("c".into(), Ok(())).ok);
        assert!(!succeeded("c".into(), erofs()).ok);
    }

    #[test]
    fn many_outcomes_are_said_as_one_without_hiding_a_failure() {
        let many: Vec<Outcome> = (0..100).map(|i| outcome(i != 70)).collect();
        let shown = bounded(many);
        assert_eq!(shown.len(), MAX_OUTCOMES_SHOWN);
        assert!(
            !shown.last().unwrap().ok,
            "the failure past the cut must still show"
        );
        assert!(
            !check(
                "row",
                (0..100).map(|i| outcome(i != 70)).collect(),
                Vec::new()
            )
            .passed
        );
        let fine: Vec<Outcome> = (0..100).map(|_| outcome(true)).collect();
        assert!(bounded(fine).last().unwrap().ok);
    }
}
