//! apt: its sources, one-line (`sources.list`, `sources.list.d/*.list`) and deb822
//! (`sources.list.d/*.sources`, `URIs:`).

use std::path::Path;

use super::ToolRules;

pub fn discover(etc_apt: &Path) -> ToolRules {
    let mut out = ToolRules::default();
    let mut files = vec![etc_apt.join("sources.list")];
    if let Ok(entries) = std::fs::read_dir(etc_apt.join("sources.list.d")) {
        let mut more: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let uris = match file.extension().and_then(|e| e.to_str()) {
            Some("sources") => deb822_uris(&text),
            Some("list") | None => one_line_uris(&text),
            _ => continue,
        };
        for uri in uris {
            if uri.starts_with("mirror+") {
                out.note(format!(
                    "{uri} in {}: a mirror list, not followed",
                    file.display()
                ));
                continue;
            }
            out.add(&uri, format!("apt source {}", file.display()));
        }
    }
    if out.rules.is_empty() {
        out.note("apt has no network source");
    }
    out
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

/// Every URI of every `URIs:` field (stanzas with `Enabled: no` skipped).
fn deb822_uris(text: &str) -> Vec<String> {
    let mut uris = Vec::new();
    for stanza in text.split("\n\n") {
        let disabled = stanza
            .lines()
            .any(|l| l.to_ascii_lowercase().replace(' ', "") == "enabled:no");
        if disabled {
            continue;
        }
        for line in stanza.lines() {
            if let Some(value) = line.strip_prefix("URIs:") {
                uris.extend(value.split_whitespace().map(str::to_owned));
            }
        }
    }
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
                      Types: deb\nURIs: https://off.test/\nEnabled: no\n";
        assert_eq!(
            deb822_uris(deb822),
            ["https://a.test/debian", "https://b.test/debian"]
        );
    }
}
