//! The summary table: each invariant and target with its verdict.

/// Invariants, each with the figure it was judged on, and targets, which are printed
/// PASS or MISS and fail nothing.
#[derive(Default)]
pub(crate) struct Checks(pub(crate) Vec<(String, Verdict, String)>);

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Verdict {
    Ok,
    Fail,
    Pass,
    Miss,
}

impl Checks {
    pub(crate) fn check(&mut self, name: &str, ok: bool, figure: impl ToString) {
        let verdict = if ok { Verdict::Ok } else { Verdict::Fail };
        self.0.push((name.to_owned(), verdict, figure.to_string()));
    }

    pub(crate) fn target(&mut self, name: &str, met: bool, figure: impl ToString) {
        let verdict = if met { Verdict::Pass } else { Verdict::Miss };
        self.0.push((name.to_owned(), verdict, figure.to_string()));
    }

    pub(crate) fn print(&self) -> bool {
        println!("\n== summary");
        for (name, verdict, figure) in &self.0 {
            let word = match verdict {
                Verdict::Ok => "ok",
                Verdict::Fail => "FAIL",
                Verdict::Pass => "PASS",
                Verdict::Miss => "MISS",
            };
            println!("{word:<4} {name:<46} {figure}");
        }
        self.0
            .iter()
            .all(|(_, verdict, _)| *verdict != Verdict::Fail)
    }
}
