//! gem (and bundler): gem's sources as its settings set them (`:sources:` of the system
//! `/etc/gemrc`, the user's `~/.gemrc` or `~/.config/gem/gemrc`, then each file `GEMRC`
//! lists; the last that names sources wins, as RubyGems merges them), else RubyGems' own
//! default, read from its installed `rubygems/defaults.rb` (`Gem.default_sources`).
//! Nothing of ruby is run: RubyGems loads plugins, a newer psych and `site_ruby` files
//! from places a sandboxed run may have been given to write. The project's `Gemfile`
//! names its `source`s (the workspace's, so marked); bundler's mirrors come from
//! `BUNDLE_MIRROR__*` in the environment and the user's and the project's
//! `.bundle/config`.

use std::path::PathBuf;

use super::{query, Context, ToolRules};

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    // The last file that names sources wins; a hidden one names none (gem in the sandbox
    // does not see it).
    let configured = gemrc_files().into_iter().rev().find_map(|file| {
        let sources = sources_in(&super::read_small(&file)?)?;
        (!out.skip_hidden(&file, ctx)).then_some((file, sources))
    });
    match configured {
        Some((file, sources)) => {
            let from_workspace = query::is_untrusted(&file, ctx.untrusted);
            for url in sources {
                out.add_from(
                    &url,
                    format!("sources in {}", file.display()),
                    from_workspace,
                );
            }
        }
        None => match default_sources(ctx.untrusted) {
            Some((file, sources)) => {
                for url in sources {
                    out.add(&url, format!("RubyGems' default ({})", file.display()));
                }
            }
            None => out.note("RubyGems' default sources were not found (is ruby installed?)"),
        },
    }
    let gemfile = ctx.cwd.join("Gemfile");
    if let Some(text) = super::read_small(&gemfile).filter(|_| !out.skip_hidden(&gemfile, ctx)) {
        for url in gemfile_sources(&text) {
            out.add_from(&url, format!("source in {}", gemfile.display()), true);
        }
    }
    for (key, value) in super::utf8_env() {
        if key.starts_with("BUNDLE_MIRROR__") {
            out.add(&value, format!("{key} in the environment"));
        }
    }
    let mut configs: Vec<PathBuf> = vec![ctx.cwd.join(".bundle/config")];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        configs.push(home.join(".bundle/config"));
    }
    for file in configs {
        let Some(text) = super::read_small(&file) else {
            continue;
        };
        if out.skip_hidden(&file, ctx) {
            continue;
        }
        let from_workspace = query::is_untrusted(&file, ctx.untrusted);
        for url in bundle_mirrors(&text) {
            out.add_from(
                &url,
                format!("mirror in {}", file.display()),
                from_workspace,
            );
        }
    }
    out
}

/// The gemrc files RubyGems reads, in its order: the system's, the user's (`GEMRC`
/// whole, or `~/.gemrc` if it exists, or the XDG one), then each part of `GEMRC`.
fn gemrc_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/gemrc")];
    let gemrc = std::env::var_os("GEMRC");
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match (&gemrc, &home) {
        (Some(list), _) => files.push(PathBuf::from(list)),
        (None, Some(home)) if home.join(".gemrc").exists() => files.push(home.join(".gemrc")),
        (None, Some(home)) => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".config"));
            files.push(config.join("gem/gemrc"));
        }
        (None, None) => {}
    }
    if let Some(list) = gemrc {
        files.extend(std::env::split_paths(&list));
    }
    files
}

/// The `:sources:` list of a gemrc (YAML: a block of `- URL` lines or a `[a, b]` list).
fn sources_in(yaml: &str) -> Option<Vec<String>> {
    let mut lines = yaml.lines();
    let first = lines.find(|l| l.starts_with(":sources:") || l.starts_with("sources:"))?;
    let rest = first.split_once(':').map(|(_, r)| r).unwrap_or("");
    let rest = rest.strip_prefix("sources:").unwrap_or(rest).trim();
    let unquote = |v: &str| v.trim().trim_matches(['"', '\'']).to_owned();
    if let Some(inline) = rest.strip_prefix('[') {
        let inline = inline.split(']').next().unwrap_or("");
        return Some(
            inline
                .split(',')
                .map(unquote)
                .filter(|v| !v.is_empty())
                .collect(),
        );
    }
    let mut sources = Vec::new();
    for line in lines {
        let item = line.trim_start();
        if let Some(value) = item.strip_prefix("- ") {
            sources.push(unquote(value));
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            break;
        }
    }
    Some(sources)
}

/// RubyGems' `Gem.default_sources`, read (not run) from the `rubygems/defaults.rb` beside
/// the `ruby` on a trusted `PATH` directory (`PREFIX/lib/ruby/VERSION/`).
fn default_sources(untrusted: &[PathBuf]) -> Option<(PathBuf, Vec<String>)> {
    let ruby = std::fs::canonicalize(query::trusted("ruby", untrusted)?).ok()?;
    let prefix = ruby.parent()?.parent()?;
    let lib = prefix.join("lib/ruby");
    let mut versions: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .flatten()
        .map(|e| e.path().join("rubygems/defaults.rb"))
        .filter(|p| p.is_file() && !query::is_untrusted(p, untrusted))
        .collect();
    versions.sort();
    let file = versions.pop()?;
    let sources = default_sources_in(&super::read_small(&file)?);
    (!sources.is_empty()).then_some((file, sources))
}

/// The URLs in the body of `def self.default_sources` (`%w[URL ...]` or quoted strings).
fn default_sources_in(ruby: &str) -> Vec<String> {
    let Some(start) = ruby.find("def self.default_sources") else {
        return Vec::new();
    };
    let body = &ruby[start..];
    let body = &body[..body.find("\n  end").unwrap_or(body.len())];
    body.split(|c: char| c.is_whitespace() || matches!(c, '[' | ']' | '"' | '\'' | ','))
        .filter(|w| w.starts_with("https://") || w.starts_with("http://"))
        .map(str::to_owned)
        .collect()
}

/// The URL of each `source "URL"` line of a Gemfile (with or without a block).
fn gemfile_sources(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("source")?;
            let rest = rest.trim_start_matches(['(', ' ', '\t']);
            let quote = rest.chars().next().filter(|q| *q == '"' || *q == '\'')?;
            let rest = &rest[1..];
            rest.find(quote).map(|end| rest[..end].to_owned())
        })
        .collect()
}

/// The values of `BUNDLE_MIRROR__…: "URL"` lines of a bundler config (YAML, one level).
fn bundle_mirrors(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            // The key holds a URL's colon: the value starts after `: `.
            let (key, value) = line.split_once(": ")?;
            key.trim()
                .trim_matches(['"', '\''])
                .starts_with("BUNDLE_MIRROR__")
                .then(|| value.trim().trim_matches(['"', '\'']).to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemrc_sources_block_and_inline() {
        let block = "---\n:update_sources: true\n:sources:\n- https://gems.corp.test/\n  - 'https://more.test:8443/'\n:verbose: true\n";
        assert_eq!(
            sources_in(block).unwrap(),
            ["https://gems.corp.test/", "https://more.test:8443/"]
        );
        let inline = ":sources: [\"https://a.test/\", https://b.test/]\n";
        assert_eq!(
            sources_in(inline).unwrap(),
            ["https://a.test/", "https://b.test/"]
        );
        assert_eq!(sources_in(":verbose: true\n"), None);
    }

    #[test]
    fn rubygems_default_sources_are_read_not_run() {
        let defaults = "module Gem\n  def self.default_sources\n    %w[https://gems.default.test/]\n  end\n\n  \
                        def self.other\n    'https://not-this.test/'\n  end\nend\n";
        assert_eq!(default_sources_in(defaults), ["https://gems.default.test/"]);
    }

    #[test]
    fn gemfile_sources_with_and_without_blocks() {
        let gemfile = "source \"https://gems.mirror.test\"\n\
                       gem 'rake'\n\
                       source 'https://private.test:8443/' do\n  gem 'secret'\nend\n\
                       source(\"https://third.test/\")\n# source \"https://commented.test\"\n";
        assert_eq!(
            gemfile_sources(gemfile),
            [
                "https://gems.mirror.test",
                "https://private.test:8443/",
                "https://third.test/"
            ]
        );
    }

    #[test]
    fn bundler_mirrors() {
        let config = "---\nBUNDLE_PATH: \"vendor/bundle\"\n\
                      BUNDLE_MIRROR__HTTPS://GEMS__EXAMPLE__TEST/: \"https://gems.corp.test/\"\n";
        assert_eq!(bundle_mirrors(config), ["https://gems.corp.test/"]);
    }
}
