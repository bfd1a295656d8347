//! What a tool's configuration names, made into rules: a URL's host and port, never its
//! credentials (which are cut from anything shown).

/// `text` with the credentials of every URL in it left out (`https://user:token@host/`
/// → `https://host/`; a query string or fragment → `?…`, `#…`; `;params` → `;…`):
/// sources and notes are shown and logged.
pub fn without_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        // The user and password run to the last `@` before the path (or a blank),
        // whatever they hold (`#` and `?` too); a query or fragment right after the host
        // is cut as below.
        let authority_end = rest
            .find(|c: char| c.is_whitespace() || c == '/')
            .unwrap_or(rest.len());
        let host_from = rest[..authority_end].rfind('@').map_or(0, |i| i + 1);
        let host = &rest[host_from..authority_end];
        if let Some(cut) = host.find(['?', '#', ';']) {
            out.push_str(&host[..cut]);
            out.push(host.as_bytes()[cut] as char);
            out.push('…');
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '>' | ')'))
                .map_or(rest.len(), |e| e.max(authority_end));
            rest = &rest[end..];
            continue;
        }
        out.push_str(host);
        rest = &rest[authority_end..];
        // The path, up to where the URL ends; past `?`, `#` or `;` nothing is kept.
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '>' | ')'))
            .unwrap_or(rest.len());
        let path = &rest[..end];
        match path.find(['?', '#', ';']) {
            Some(cut) => {
                out.push_str(&path[..cut]);
                out.push(path.as_bytes()[cut] as char);
                out.push('…');
            }
            None => out.push_str(path),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    // npm's `//host/:_authToken=…` and the like: every value after a key that says so,
    // spaces around `=` allowed.
    let lower = out.to_ascii_lowercase();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for key in ["_authtoken", "_auth", "_password", "token", "password"] {
        for (at, _) in lower.match_indices(key) {
            let after = &lower[at + key.len()..];
            let spaces = after.len() - after.trim_start().len();
            let Some(value) = after.trim_start().strip_prefix('=') else {
                continue;
            };
            let from = at + key.len() + spaces + 1 + (value.len() - value.trim_start().len());
            let end = lower[from..]
                .find(char::is_whitespace)
                .map_or(lower.len(), |e| from + e);
            if end > from {
                cuts.push((from, end));
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup_by(|later, earlier| later.0 < earlier.1);
    for (from, end) in cuts.into_iter().rev() {
        out.replace_range(from..end, "…");
    }
    out
}

/// A URL as the start-up line may name it: its scheme and host (and port), nothing of its
/// user, path, query or fragment (`https://u:p@h.test:8443/t0k/x?a=b` →
/// `https://…@h.test:8443`).
pub fn host_of(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.split(['/', '?', '#']).next().unwrap_or("").to_owned();
    };
    let authority = rest.split('/').next().unwrap_or("");
    let (user, host) = match authority.rsplit_once('@') {
        Some((_, host)) => ("…@", host),
        None => ("", authority),
    };
    let host = host.split(['?', '#', ';']).next().unwrap_or("");
    format!("{scheme}://{user}{host}")
}

/// `host:port` for a URL (`https://h:8443/x` → `h:8443`, `http://h/` → `h:80`), or a
/// bare `host[:port]` (443 when no port is given), the host spelled as the bridge
/// normalises it (`https://H.Test./` → `h.test:443`); `None` for what is no network
/// address (`file:`, a path), an address, or this machine's own name.
pub fn rule_of(url_or_host: &str) -> Option<String> {
    // A name and one numeric port only: a tool's configuration (which an earlier command
    // may have written into the workspace) must not open an address, a wildcard, every
    // port or a range (`127.0.0.1:*`, `*.com:*`, `[::1]:1-65535`). The name as the bridge
    // normalises it (case, a final dot, IDNA; an address in any spelling is an address),
    // so that every check and comparison below and after sees what the bridge will.
    let target = target_of(url_or_host)?;
    let bridge::target::Host::Name(name) = target.host else {
        return None;
    };
    // `localhost` and its subdomains are this machine (RFC 6761), never a registry.
    let is_localhost = name == "localhost"
        || name.ends_with(".localhost")
        || name.starts_with("localhost.")
        || name.starts_with("ip6-localhost")
        || name.starts_with("ip6-loopback");
    if is_localhost {
        return None;
    }
    let rule = format!("{name}:{}", target.port);
    bridge::policy::RuleSpec::parse(&rule, bridge::policy::Action::Allow)
        .ok()
        .map(|_| rule)
}

/// The target a URL (or a bare `host[:port]`) names, as the bridge spells it, with the
/// scheme's port when none is written; `None` for what is no network address.
pub fn target_of(url_or_host: &str) -> Option<bridge::target::Target> {
    let text = url_or_host.trim();
    // Cargo's and others' prefixes: `sparse+https://…`, `git+https://…`, `registry+…`.
    let text = text
        .strip_prefix("sparse+")
        .or_else(|| text.strip_prefix("registry+"))
        .or_else(|| text.strip_prefix("git+"))
        .unwrap_or(text);
    let (default_port, rest) = if let Some(rest) = text.strip_prefix("https://") {
        (443, rest)
    } else if let Some(rest) = text.strip_prefix("http://") {
        (80, rest)
    } else if let Some(rest) = text.strip_prefix("ssh://") {
        (22, rest)
    } else if text.contains("://") || text.starts_with('/') || text.is_empty() {
        return None;
    } else {
        (443, text)
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() {
        return None;
    }
    let rule = if authority.starts_with('[') {
        if authority.contains("]:") {
            authority.to_owned()
        } else {
            format!("{authority}:{default_port}")
        }
    } else if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    bridge::target::Target::parse_authority(&rule).ok()
}
