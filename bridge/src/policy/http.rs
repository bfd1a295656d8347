//! HTTP rules: which requests may pass inside a tunnel the bridge inspects, by method and
//! path, from an allowlist's `[[http]]` tables (or every request, under `--inspect`).
//!
//! ```toml
//! [[http]]
//! host = "registry.test"               # as in `allow`: HOST, *.SUFFIX, IP, CIDR, :PORTS
//! methods = ["GET", "HEAD"]            # any method if left out
//! paths = ["/simple/", "/packages/**"] # any path if left out
//! ```
//!
//! A path without `*` is a prefix that ends at a segment boundary (`/simple` matches
//! `/simple` and `/simple/x`, not `/simplex`); with one, a glob where `*` matches within a
//! segment and `**` across segments. The path judged is the one the server will act on:
//! a path a server could read as another (a segment of dots, spelled with `%2e` or not; an
//! escaped `/`, `\`, `;`, `?`, `#` or `%`; a raw `;` or `\`; an escaped control or
//! non-ASCII byte) is refused under a path rule rather than guessed at, since servers
//! disagree about what it means.

use std::sync::Arc;

use super::{Reason, RuleRef, RuleSpec};
use crate::target::Target;

/// One `[[http]]` table.
#[derive(Debug, Clone)]
pub struct HttpRule {
    pub spec: RuleSpec,
    /// Upper-case method names; `None`: any method.
    pub methods: Option<Vec<String>>,
    /// `None`: any path.
    pub paths: Option<Vec<PathPattern>>,
    /// A `[[git]]` table: only git's requests, for the repositories it lists.
    pub git: Option<super::git::GitScope>,
    pub origin: RuleRef,
}

/// A path prefix or glob, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern(String);

/// The requests a tunnel lets through once inspected.
#[derive(Debug, Clone)]
pub enum HttpCheck {
    /// Every `[[http]]` rule for the target: a request passes if one of them allows it.
    Rules(Vec<Arc<HttpRule>>),
    /// `--inspect` without a rule for the target: every request passes (and is logged).
    Any,
}

/// A request refused by the HTTP rules: why, for the log and the 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRefusal {
    pub reason: Reason,
    pub detail: String,
}

impl HttpRule {
    /// Parses a table's fields; errors say what to change.
    pub fn parse(
        host: &str,
        methods: Option<&[String]>,
        paths: Option<&[String]>,
        origin: RuleRef,
    ) -> Result<HttpRule, String> {
        let spec = RuleSpec::parse(host, super::Action::Allow)?;
        let methods = methods
            .map(|methods| {
                if methods.is_empty() {
                    return Err(
                        "methods = []: an empty list allows nothing; leave it out to \
                                allow any method"
                            .to_owned(),
                    );
                }
                methods.iter().map(|m| parse_method(m)).collect()
            })
            .transpose()?;
        let paths = paths
            .map(|paths| {
                if paths.is_empty() {
                    return Err("paths = []: an empty list allows nothing; leave it out to \
                                allow any path"
                        .to_owned());
                }
                paths.iter().map(|p| PathPattern::parse(p)).collect()
            })
            .transpose()?;
        Ok(HttpRule {
            spec,
            methods,
            paths,
            git: None,
            origin,
        })
    }

    /// A `[[git]]` table's rule: its host, held to `scope`.
    pub fn git(
        host: &str,
        scope: super::git::GitScope,
        origin: RuleRef,
    ) -> Result<HttpRule, String> {
        Ok(HttpRule {
            spec: RuleSpec::parse(host, super::Action::Allow)?,
            methods: None,
            paths: None,
            git: Some(scope),
            origin,
        })
    }

    /// Whether this rule lets `method` on `path` (with `query`) through; `Err` says why
    /// not.
    fn allows(&self, method: &str, path: &str, query: &str) -> Result<(), HttpRefusal> {
        if let Some(git) = &self.git {
            return git.allows(method, path, query, &self.origin.to_string());
        }
        if let Some(methods) = &self.methods {
            if !methods.iter().any(|m| m == method) {
                return Err(HttpRefusal {
                    reason: Reason::MethodNotAllowed,
                    detail: format!(
                        "{} is not among the methods rule {} allows ({})",
                        printable(method),
                        self.origin,
                        methods.join(", ")
                    ),
                });
            }
        }
        if let Some(paths) = &self.paths {
            if let Some(why) = ambiguous_path(path) {
                return Err(HttpRefusal {
                    reason: Reason::PathNotAllowed,
                    detail: format!("the path {} {why}", printable(path)),
                });
            }
            if !paths.iter().any(|p| p.matches(path)) {
                let listed: Vec<&str> = paths.iter().map(|p| p.0.as_str()).collect();
                return Err(HttpRefusal {
                    reason: Reason::PathNotAllowed,
                    detail: format!(
                        "the path {} is not under the paths rule {} allows ({})",
                        printable(path),
                        self.origin,
                        listed.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }
}

impl HttpCheck {
    /// The rules that matched `target`, for the tunnel's record.
    pub fn rules(&self) -> &[Arc<HttpRule>] {
        match self {
            HttpCheck::Rules(rules) => rules,
            HttpCheck::Any => &[],
        }
    }

    /// Whether `method` on `path` (the request's path, without its query; `query` beside
    /// it, which `[[git]]` rules read) may pass: the rule that let it, if a rule did. A
    /// refusal names the first rule's reason.
    pub fn judge(
        &self,
        method: &str,
        path: &str,
        query: &str,
    ) -> Result<Option<RuleRef>, HttpRefusal> {
        let rules = match self {
            HttpCheck::Any => return Ok(None),
            HttpCheck::Rules(rules) => rules,
        };
        let mut first_refusal = None;
        for rule in rules {
            match rule.allows(method, path, query) {
                Ok(()) => return Ok(Some(rule.origin.clone())),
                Err(refusal) => {
                    first_refusal.get_or_insert(refusal);
                }
            }
        }
        Err(first_refusal.unwrap_or(HttpRefusal {
            reason: Reason::PathNotAllowed,
            detail: "no HTTP rule covers this request".into(),
        }))
    }
}

impl PathPattern {
    fn parse(text: &str) -> Result<PathPattern, String> {
        if !text.starts_with('/') {
            return Err(format!("path {text:?} must start with /"));
        }
        if let Some(bad) = text
            .chars()
            .find(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '\\'))
        {
            return Err(format!(
                "path {text:?} holds {bad:?}; a path rule matches the path alone"
            ));
        }
        if ambiguous_path(text).is_some() {
            return Err(format!(
                "path {text:?} holds a dot segment or an encoded slash, which no request \
                 matching it could pass with"
            ));
        }
        Ok(PathPattern(text.to_owned()))
    }

    /// Whether a request's path matches: a prefix at a segment boundary, or a glob.
    pub fn matches(&self, path: &str) -> bool {
        let pattern = self.0.as_bytes();
        if !pattern.contains(&b'*') {
            return match path.as_bytes().strip_prefix(pattern) {
                Some(rest) => rest.is_empty() || pattern.ends_with(b"/") || rest[0] == b'/',
                None => false,
            };
        }
        glob_matches(pattern, path.as_bytes())
    }
}

/// `*` within one segment, `**` across them. Written here rather than taken from a glob
/// crate because it is these two rules alone, over bytes; a table over (pattern, path)
/// positions reads a hostile 60 KB path once per pattern byte, never more.
pub(super) fn glob_matches(pattern: &[u8], path: &[u8]) -> bool {
    // reach[j]: the pattern so far can match path[..j].
    let mut reach = vec![false; path.len() + 1];
    reach[0] = true;
    let mut i = 0;
    while i < pattern.len() {
        let mut next = vec![false; path.len() + 1];
        if pattern[i] == b'*' {
            let across = pattern.get(i + 1) == Some(&b'*');
            let mut open = false;
            for j in 0..=path.len() {
                open = (open && (across || path[j - 1] != b'/')) || reach[j];
                next[j] = open;
            }
            i += if across { 2 } else { 1 };
        } else {
            for j in 1..=path.len() {
                next[j] = reach[j - 1] && path[j - 1] == pattern[i];
            }
            i += 1;
        }
        reach = next;
    }
    reach[path.len()]
}

/// Why a server might read `path` as another path than its text says, if it might. The
/// path is decoded once (only to look at it; it is matched as sent): a byte that decodes
/// to a separator or a delimiter (`/ \ ; ? #`), to `%` (decoded twice by some), to a
/// control or non-ASCII byte (or carries one raw), or an escape that is not two hex digits (`%u002e`, `%c0%ae`
/// is non-ASCII), is refused; so are a raw `;` or `\` (servlet path parameters, Windows
/// separators), and a segment of dots (and spaces) alone (`.`, `..`, `...`, `.. `), which
/// servers resolve, strip or trim in their own ways.
pub(super) fn ambiguous_path(path: &str) -> Option<&'static str> {
    let bytes = path.as_bytes();
    if bytes.iter().any(|b| matches!(b, b';' | b'\\')) {
        return Some("holds a ';' or a backslash");
    }
    // Raw as escaped: a server that maps Unicode (NFKC, Windows best fit) reads
    // `．．／` as `../`.
    if !path.is_ascii() {
        return Some("holds a non-ASCII character");
    }
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            decoded.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = |b: Option<&u8>| b.and_then(|b| char::from(*b).to_digit(16));
        let (Some(high), Some(low)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
            return Some("holds a '%' that is not an escape of two hex digits");
        };
        let byte = u8::try_from(high * 16 + low).unwrap_or(0);
        if matches!(byte, b'/' | b'\\' | b';' | b'?' | b'#' | b'%') {
            return Some("holds an escaped separator or delimiter");
        }
        if byte.is_ascii_control() || !byte.is_ascii() {
            return Some("holds an escaped control or non-ASCII byte");
        }
        decoded.push(byte);
        i += 3;
    }
    let dots_only = decoded
        .split(|b| *b == b'/')
        .any(|segment| segment.contains(&b'.') && segment.iter().all(|b| matches!(b, b'.' | b' ')));
    dots_only.then_some("holds a segment of dots")
}

/// Parses a method name: an HTTP token, upper-cased (the methods servers know are).
fn parse_method(text: &str) -> Result<String, String> {
    let token = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(format!("method {text:?} is not an HTTP method name"));
    }
    Ok(text.to_ascii_uppercase())
}

/// Text from the client, safe for a log detail and a one-line response.
fn printable(text: &str) -> String {
    format!("{:?}", crate::text::bounded(text.to_owned(), 200))
}

/// The rules among `rules` that cover `target`.
pub(super) fn matching(rules: &[Arc<HttpRule>], target: &Target) -> Vec<Arc<HttpRule>> {
    rules
        .iter()
        .filter(|r| r.spec.matches(target))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> PathPattern {
        PathPattern::parse(text).unwrap()
    }

    #[test]
    fn a_prefix_ends_at_a_segment_boundary() {
        let p = pattern("/simple");
        assert!(p.matches("/simple") && p.matches("/simple/") && p.matches("/simple/x/y"));
        assert!(!p.matches("/simplex") && !p.matches("/") && !p.matches("/other/simple"));
        let p = pattern("/simple/");
        assert!(p.matches("/simple/") && p.matches("/simple/pkg"));
        assert!(!p.matches("/simple"));
    }

    #[test]
    fn a_star_stays_in_its_segment_and_two_cross_them() {
        let p = pattern("/packages/*.whl");
        assert!(p.matches("/packages/a-1.0.whl"));
        assert!(!p.matches("/packages/x/a.whl") && !p.matches("/packages/a.whl.exe"));
        let p = pattern("/packages/**");
        assert!(p.matches("/packages/") && p.matches("/packages/x/y/z.tar.gz"));
        assert!(!p.matches("/packagesx/y"));
        let p = pattern("/a/**/b");
        assert!(p.matches("/a/x/y/b") && p.matches("/a//b") && !p.matches("/a/b/c"));
    }

    /// The obvious backtracking matcher, for small inputs only.
    fn backtracking(pattern: &[u8], path: &[u8]) -> bool {
        match pattern {
            [] => path.is_empty(),
            [b'*', b'*', rest @ ..] => (0..=path.len()).any(|i| backtracking(rest, &path[i..])),
            [b'*', rest @ ..] => (0..=path.len())
                .take_while(|&i| i == 0 || path[i - 1] != b'/')
                .any(|i| backtracking(rest, &path[i..])),
            [c, rest @ ..] => path.first() == Some(c) && backtracking(rest, &path[1..]),
        }
    }

    proptest::proptest! {
        #[test]
        fn the_glob_agrees_with_backtracking(pattern in "[ab/*]{0,8}", path in "[ab/]{0,10}") {
            proptest::prop_assert_eq!(
                glob_matches(pattern.as_bytes(), path.as_bytes()),
                backtracking(pattern.as_bytes(), path.as_bytes()),
                "{:?} against {:?}", pattern, path
            );
        }
    }

    #[test]
    fn a_hostile_path_is_matched_in_linear_time() {
        let p = pattern("/*a*a*a*a*a*a*a*a*b");
        let path = format!("/{}", "a".repeat(60_000));
        let started = std::time::Instant::now();
        assert!(!p.matches(&path));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn paths_a_server_could_read_otherwise_are_refused_under_a_path_rule() {
        let origin = RuleRef {
            file: "t.toml".into(),
            line: 1,
            text: "x".into(),
        };
        let rule = HttpRule::parse(
            "registry.test",
            Some(&["get".into(), "HEAD".into()]),
            Some(&["/simple/".into()]),
            origin,
        )
        .unwrap();
        let check = HttpCheck::Rules(vec![Arc::new(rule)]);
        assert!(check.judge("GET", "/simple/pkg/", "").is_ok());
        assert!(check.judge("HEAD", "/simple/", "").is_ok());
        let refused = |method: &str, path: &str| check.judge(method, path, "").unwrap_err().reason;
        assert_eq!(refused("POST", "/simple/pkg/"), Reason::MethodNotAllowed);
        assert_eq!(refused("get", "/simple/pkg/"), Reason::MethodNotAllowed);
        for path in [
            "/admin",
            "/simple/../admin",
            "/simple/%2e%2e/admin",
            "/simple/.%2E/admin",
            "/simple/..;/admin",
            "/simple/%2fadmin",
            "/simple\\..\\admin",
            "/simple/./x",
            "/simple/%2e%2e%3b/admin",
            "/simple/..%20/admin",
            "/simple/.../admin",
            "/simple/%c0%ae%c0%ae/admin",
            "/simple/%u002e%u002e/admin",
            "/simple/%252e%252e/admin",
            "/simple/x;.whl",
            "/simple/x%3f.whl",
            "/simple/x%23.whl",
            "/simple/x%00.whl",
            "/simple/%zz",
            "/simple/\u{ff0e}\u{ff0e}\u{ff0f}admin",
            "/simple/\u{2025}/admin",
        ] {
            assert_eq!(refused("GET", path), Reason::PathNotAllowed, "{path}");
        }
    }

    #[test]
    fn mistakes_in_a_rule_are_errors() {
        let origin = RuleRef {
            file: "t.toml".into(),
            line: 1,
            text: "x".into(),
        };
        let parse = |methods: Option<&[String]>, paths: Option<&[String]>| {
            HttpRule::parse("a.test", methods, paths, origin.clone())
        };
        assert!(parse(Some(&[]), None).is_err());
        assert!(parse(None, Some(&[])).is_err());
        assert!(parse(Some(&["GE T".into()]), None).is_err());
        for bad in ["simple/", "/a?b", "/a/../b", "/a#b", "/a\\b"] {
            assert!(parse(None, Some(&[bad.into()])).is_err(), "{bad}");
        }
    }
}
