//! `[[git]]` tables: what an allowed git host lets out. A host's tunnels are inspected, and
//! each request must be one of git's own over HTTP (smart or dumb) for a repository the
//! table lists: `fetch` for clones and fetches, `push` for pushes.
//!
//! ```toml
//! [[git]]
//! host = "git.test"          # as in `allow`
//! fetch = ["org/*"]          # any repository if left out
//! push = ["org/app"]         # none if left out
//! ```
//!
//! A repository is its path on the host without a leading `/` or a trailing `.git`; `*`
//! matches within one segment, `**` across them. A push is known by git's own endpoints
//! (`info/refs?service=git-receive-pack`, `git-receive-pack`), so one to a repository
//! outside `push` is refused at its first request, before a byte of it goes upstream.

use super::http::{ambiguous_path, glob_matches, HttpRefusal};
use super::Reason;

/// What one `[[git]]` table allows.
#[derive(Debug, Clone)]
pub struct GitScope {
    /// `None`: any repository may be fetched.
    fetch: Option<Vec<String>>,
    push: Vec<String>,
}

/// What a request does to a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Fetch,
    Push,
}

impl GitScope {
    pub fn parse(fetch: Option<&[String]>, push: Option<&[String]>) -> Result<GitScope, String> {
        let patterns = |list: &[String], key: &str| -> Result<Vec<String>, String> {
            list.iter()
                .map(|p| {
                    let repo = repository(p);
                    let bad = repo.is_empty()
                        || repo
                            .split('/')
                            .any(|s| s.is_empty() || s == "." || s == "..")
                        || repo.chars().any(|c| c.is_control() || c.is_whitespace())
                        || repo.contains(['?', '#', '\\', '%', ';']);
                    if bad {
                        return Err(format!(
                            "{key}: {p:?} is not a repository path (org/name, with * and **)"
                        ));
                    }
                    Ok(repo.to_owned())
                })
                .collect()
        };
        if fetch.is_some_and(<[String]>::is_empty) {
            return Err(
                "fetch = []: an empty list allows nothing; leave it out to let any \
                        repository be fetched"
                    .into(),
            );
        }
        Ok(GitScope {
            fetch: fetch.map(|f| patterns(f, "fetch")).transpose()?,
            push: patterns(push.unwrap_or_default(), "push")?,
        })
    }

    /// Whether the request `method` on `path` (with `query`) is a fetch or push this
    /// scope allows; `origin` names the table in a refusal.
    pub(super) fn allows(
        &self,
        method: &str,
        path: &str,
        query: &str,
        origin: &str,
    ) -> Result<(), HttpRefusal> {
        let refused = |reason, detail: String| Err(HttpRefusal { reason, detail });
        if let Some(why) = ambiguous_path(path) {
            return refused(Reason::PathNotAllowed, format!("the path {path:?} {why}"));
        }
        let Some((operation, repo)) = classify(method, path, query) else {
            return refused(
                Reason::PathNotAllowed,
                format!(
                    "{method} {path:?} is not one of git's requests, the only ones [[git]] at \
                     {origin} lets through"
                ),
            );
        };
        let repo = repository(repo);
        let (allowed, key) = match operation {
            Operation::Fetch => (
                self.fetch
                    .as_ref()
                    .is_none_or(|list| list.iter().any(|p| matches(p, repo))),
                "fetch",
            ),
            Operation::Push => (self.push.iter().any(|p| matches(p, repo)), "push"),
        };
        if allowed {
            return Ok(());
        }
        let listed = match (operation, &self.fetch) {
            (Operation::Fetch, Some(list)) => list.join(", "),
            (Operation::Push, _) if self.push.is_empty() => "none".into(),
            _ => self.push.join(", "),
        };
        refused(
            Reason::PathNotAllowed,
            format!(
                "a {key} of {repo:?} is not among the repositories [[git]] at {origin} lets \
                 {key} ({listed})"
            ),
        )
    }
}

fn matches(pattern: &str, repo: &str) -> bool {
    glob_matches(pattern.as_bytes(), repo.as_bytes())
}

/// A repository's path as patterns name it: no leading `/`, no trailing `.git`.
fn repository(path: &str) -> &str {
    let path = path.trim_start_matches('/');
    path.strip_suffix(".git").unwrap_or(path)
}

/// A git request's operation and the repository path it names, if it is one of git's:
/// smart HTTP's `info/refs` (its `service` says which), `git-upload-pack` and
/// `git-receive-pack`, or a dumb fetch under a `NAME.git` directory.
fn classify<'a>(method: &str, path: &'a str, query: &str) -> Option<(Operation, &'a str)> {
    let reads = method == "GET" || method == "HEAD";
    if let Some(repo) = path.strip_suffix("/info/refs") {
        if !reads {
            return None;
        }
        // Only the query git itself sends: a server decodes `%73ervice`, repeats, or
        // other parameters in ways this check would not, so anything else is refused.
        let operation = match query {
            "" | "service=git-upload-pack" => Operation::Fetch,
            "service=git-receive-pack" => Operation::Push,
            _ => return None,
        };
        return Some((operation, repo));
    }
    if !query.is_empty() {
        return None;
    }
    if let Some(repo) = path.strip_suffix("/git-upload-pack") {
        return (method == "POST").then_some((Operation::Fetch, repo));
    }
    if let Some(repo) = path.strip_suffix("/git-receive-pack") {
        return (method == "POST").then_some((Operation::Push, repo));
    }
    // Dumb HTTP: the files of a bare repository, `NAME.git/objects/…`, `NAME.git/HEAD`.
    let at = path.find(".git/")?;
    let (repo, rest) = path.split_at(at + 4);
    let dumb = ["/HEAD", "/objects/"]
        .iter()
        .any(|p| rest == *p || (p.ends_with('/') && rest.starts_with(p)));
    (reads && dumb).then_some((Operation::Fetch, repo))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(fetch: Option<&[&str]>, push: &[&str]) -> GitScope {
        let owned = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        GitScope::parse(fetch.map(owned).as_deref(), Some(&owned(push))).unwrap()
    }

    #[test]
    fn pushes_go_only_to_the_repositories_listed() {
        let s = scope(Some(&["org/*"]), &["org/app"]);
        let ok = |m: &str, p: &str, q: &str| s.allows(m, p, q, "t:1").is_ok();
        assert!(ok(
            "GET",
            "/org/app.git/info/refs",
            "service=git-receive-pack"
        ));
        assert!(ok("POST", "/org/app.git/git-receive-pack", ""));
        assert!(ok("POST", "/org/app/git-receive-pack", ""));
        assert!(!ok(
            "GET",
            "/org/other.git/info/refs",
            "service=git-receive-pack"
        ));
        assert!(!ok("POST", "/org/other.git/git-receive-pack", ""));
        assert!(!ok("POST", "/org/app.git/sub/git-receive-pack", ""));
        // Fetches: any repository under org/, one level.
        assert!(ok(
            "GET",
            "/org/other.git/info/refs",
            "service=git-upload-pack"
        ));
        assert!(ok("POST", "/org/other.git/git-upload-pack", ""));
        assert!(ok("GET", "/org/other.git/objects/ab/cdef", ""));
        assert!(!ok("POST", "/else/x.git/git-upload-pack", ""));
        assert!(!ok("POST", "/org/a/b.git/git-upload-pack", ""));
    }

    #[test]
    fn what_is_not_git_or_is_ambiguous_is_refused() {
        let s = scope(None, &["org/app"]);
        let ok = |m: &str, p: &str, q: &str| s.allows(m, p, q, "t:1").is_ok();
        assert!(!ok("GET", "/org/app", ""));
        assert!(!ok("GET", "/api/v1/repos", ""));
        assert!(!ok("PUT", "/org/app.git/info/refs", ""));
        assert!(!ok("GET", "/org/app.git/git-upload-pack", ""));
        // Two services, an escaped name, other parameters: a server might read any.
        for query in [
            "%73ervice=git-receive-pack",
            "service=git-upload-pack&x=1",
            "service=git-%75pload-pack",
            "x=1&service=git-upload-pack",
            "service=git-upload-pack&",
        ] {
            assert!(!ok("GET", "/org/app.git/info/refs", query), "{query}");
        }
        assert!(!ok(
            "GET",
            "/org/other.git/info/refs",
            "service=git-upload-pack&service=git-receive-pack"
        ));
        assert!(!ok("POST", "/org/other.git/git-receive-pack", "x=1"));
        for path in [
            "/org/app/../other.git/git-receive-pack",
            "/org/app%2f..%2fother.git/git-receive-pack",
            "/org/app;x/../other.git/git-receive-pack",
        ] {
            assert!(!ok("POST", path, ""), "{path}");
        }
    }

    #[test]
    fn a_table_without_push_lets_none_and_mistakes_are_errors() {
        let s = GitScope::parse(None, None).unwrap();
        let refused = s
            .allows("POST", "/org/app.git/git-receive-pack", "", "t:1")
            .unwrap_err();
        assert!(refused.detail.contains("(none)"), "{}", refused.detail);
        assert!(GitScope::parse(Some(&[]), None).is_err());
        for bad in [
            "", "/", "org//app", "org/../x", "org/a b", "org/a?b", "org/%2e",
        ] {
            assert!(
                GitScope::parse(None, Some(&[bad.to_owned()])).is_err(),
                "{bad}"
            );
        }
    }
}
