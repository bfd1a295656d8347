//! gem (and bundler): gem's sources as its settings files and its own defaults set them,
//! asked of RubyGems with ruby itself (not the `gem` command, which loads the plugins of
//! the gems in its paths: code a sandboxed run could have put in the user's gem
//! directory); the project's `Gemfile` names its `source`s (the workspace's, so
//! marked); bundler's mirrors come from `BUNDLE_MIRROR__*` in the environment and in the
//! user's and the project's `.bundle/config`.

use std::path::PathBuf;

use super::{query, Context, ToolRules};

/// RubyGems loaded without its plugins; its configuration (`/etc/gemrc`, `~/.gemrc`,
/// `GEMRC`) read, which sets its sources.
const SOURCES: &str = "require 'rubygems'; Gem.configuration; puts Gem.sources";

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    // No gem paths at all: RubyGems would load the highest version of a default gem it
    // needs (psych, to read the settings) from any of them, the user's own gem directory
    // and a system one a run may have been given to write included. Ruby's own default
    // gems are still found where ruby keeps them.
    let no_gems = [
        ("GEM_HOME", "/nonexistent/netbox"),
        ("GEM_PATH", "/nonexistent/netbox"),
    ];
    match query::output_with(
        "ruby",
        &["--disable-gems", "-e", SOURCES],
        &no_gems,
        ctx.untrusted,
    ) {
        Some(listed) => {
            for url in listed.lines().filter(|l| l.contains("://")) {
                out.add(url, "gem sources (gem's settings and defaults)");
            }
        }
        None => out.note("ruby did not say gem's sources (is it installed?)"),
    }
    let gemfile = ctx.cwd.join("Gemfile");
    if let Some(text) = super::read_small(&gemfile) {
        for url in gemfile_sources(&text) {
            out.add_from(&url, format!("source in {}", gemfile.display()), true);
        }
    }
    for (key, value) in std::env::vars() {
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
