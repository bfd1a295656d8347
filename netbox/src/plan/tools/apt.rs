//! apt: its sources, one-line (`sources.list`, `sources.list.d/*.list`) and deb822
//! (`sources.list.d/*.sources`, `URIs:`), where apt's own configuration says they are
//! (`apt-config dump`: `Dir`, `Dir::Etc`, `Dir::Etc::sourcelist`, `…::sourceparts`, which
//! `APT_CONFIG` and apt.conf.d can move).

use std::path::{Path, PathBuf};

use super::{query, Context, ToolRules};

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    let (list, parts) = match query::output("apt-config", &["dump"], ctx.untrusted) {
        Some(dump) => source_paths(&dump),
        None => {
            out.note("apt-config did not answer: apt's sources read from /etc/apt");
            source_paths("")
        }
    };
    let mut files = vec![list];
    if let Ok(entries) = std::fs::read_dir(&parts) {
        let mut more: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    // apt-config itself reads apt.conf and apt.conf.d, hidden or not: they say only where
    // the sources lie, which are the files checked here.
    for file in files {
        if file.exists() && out.skip_hidden(&file, ctx) {
            continue;
        }
        let uris = match file.extension().and_then(|e| e.to_str()) {
            Some("sources") => super::read_small(&file).map(|t| deb822_uris(&t)),
            Some("list") => super::read_small(&file).map(|t| one_line_uris(&t)),
            // sources.list itself, wherever apt's configuration names it.
            _ if file.parent() != Some(parts.as_path()) => {
                super::read_small(&file).map(|t| one_line_uris(&t))
            }
            _ => None,
        };
        let from_workspace = query::is_untrusted(&file, ctx.untrusted);
        for uri in uris.into_iter().flatten() {
            if uri.starts_with("mirror+") {
                out.note(format!(
                    "{uri} in {}: a mirror list, not followed",
                    file.display()
                ));
                continue;
            }
            out.add_from(
                &uri,
                format!("apt source {}", file.display()),
                from_workspace,
            );
        }
    }
    if out.rules.is_empty() {
        out.note("apt has no network source");
    }
    out
}

/// Where apt reads its sources, from `apt-config dump` (`Key "value";` lines); apt's
/// defaults for what it does not say.
fn source_paths(dump: &str) -> (PathBuf, PathBuf) {
    let value = |key: &str| {
        dump.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(" \"")?;
            rest.strip_suffix("\";").map(str::to_owned)
        })
    };
    // A relative setting is read against the one above it; an absolute one stands alone.
    let under = |parent: &Path, child: String| -> PathBuf {
        if child.starts_with('/') {
            PathBuf::from(child)
        } else {
            parent.join(child)
        }
    };
    let dir = under(Path::new("/"), value("Dir").unwrap_or_default());
    let etc = under(&dir, value("Dir::Etc").unwrap_or_else(|| "etc/apt".into()));
    let list = under(
        &etc,
        value("Dir::Etc::sourcelist").unwrap_or_else(|| "sources.list".into()),
    );
    let parts = under(
        &etc,
        value("Dir::Etc::sourceparts").unwrap_or_else(|| "sources.list.d".into()),
    );
    (list, parts)
}

/// The URI of each `deb`/`deb-src` line (after an optional `[options]` block).
fn one_line_uris(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("deb ") || l.starts_with("deb-src "))
        .filter_map(|line| {
            let rest = line.split_once(' ')?.1.trim_start();
            let rest = if rest.starts_with('[') {
                rest.split_once(']')?.1.trim_start()
            } else {
                rest
            };
            rest.split_whitespace().next().map(str::to_owned)
        })
        .collect()
}

/// Every URI of every `URIs:` field (stanzas with `Enabled: no` skipped). Field names
/// are read without regard to case, a field may go on over lines that start with a
/// space, `#` lines are comments, and a stanza ends at a blank line.
fn deb822_uris(text: &str) -> Vec<String> {
    let mut uris = Vec::new();
    let mut stanza: Vec<(String, String)> = Vec::new();
    let mut end_stanza = |stanza: &mut Vec<(String, String)>| {
        let field = |name: &str| -> Vec<String> {
            stanza
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .collect()
        };
        let disabled = field("Enabled")
            .iter()
            .any(|v| v.trim().eq_ignore_ascii_case("no"));
        if !disabled {
            for value in field("URIs") {
                uris.extend(value.split_whitespace().map(str::to_owned));
            }
        }
        stanza.clear();
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            end_stanza(&mut stanza);
        } else if line.starts_with('#') {
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = stanza.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
        } else if let Some((key, value)) = line.split_once(':') {
            stanza.push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    end_stanza(&mut stanza);
    uris
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_formats() {
        let one = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] https://apt.mirror.test/debian bookworm main\n\
                   deb-src http://src.test/debian bookworm main\n";
        assert_eq!(
            one_line_uris(one),
            ["https://apt.mirror.test/debian", "http://src.test/debian"]
        );
        let deb822 = "Types: deb\nURIs: https://a.test/debian https://b.test/debian\nSuites: x\n\n\
                      Types: deb\nURIs: https://off.test/\nEnabled: no\n \n\
                      # a comment\nTypes: deb\nuris: https://c.test/debian\n  https://d.test/debian\n\
                      Suites: bookworm\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n";
        assert_eq!(
            deb822_uris(deb822),
            [
                "https://a.test/debian",
                "https://b.test/debian",
                "https://c.test/debian",
                "https://d.test/debian"
            ]
        );
    }

    #[test]
    fn sources_are_where_apts_configuration_says() {
        let stock = "Dir \"/\";\nDir::State \"var/lib/apt\";\nDir::Etc \"etc/apt\";\n\
                     Dir::Etc::sourcelist \"sources.list\";\nDir::Etc::sourceparts \"sources.list.d\";\n";
        assert_eq!(
            source_paths(stock),
            (
                PathBuf::from("/etc/apt/sources.list"),
                PathBuf::from("/etc/apt/sources.list.d")
            )
        );
        let moved = "Dir \"/srv/chroot/\";\nDir::Etc \"etc/apt\";\n\
                     Dir::Etc::sourcelist \"/opt/apt/my.list\";\nDir::Etc::sourceparts \"parts\";\n";
        assert_eq!(
            source_paths(moved),
            (
                PathBuf::from("/opt/apt/my.list"),
                PathBuf::from("/srv/chroot/etc/apt/parts")
            )
        );
        assert_eq!(source_paths("").0, PathBuf::from("/etc/apt/sources.list"));
    }
}
