//! cargo: its configuration files (`.cargo/config.toml` in the project and each directory
//! above it, then `$CARGO_HOME/config.toml`) for source replacement (`[source.NAME]`) and
//! extra registries (`[registries.NAME]`), and `CARGO_REGISTRIES_NAME_INDEX`. cargo's
//! default registry is in no configuration file: it is taken from what cargo has cached
//! of it (`$CARGO_HOME/registry/index/HOST-HASH/`). A sparse index names the host its
//! crates download from in its `config.json` (`dl`, `api`): read from cargo's cache, or
//! fetched from the index at run time.

use std::path::{Path, PathBuf};

use super::{fetch, query, Context, ToolRules};

/// Sparse indexes whose config.json is fetched at most (all of a start-up's fetches, pip's
/// too, take at most [`fetch::ALL_FETCHES_DEADLINE`] together).
const MAX_FETCHES: usize = 4;

// Whole: cargo's configuration read in cargo's own order (files, environment, sources,
// each sparse index's config.json), each step refining what the last found.
pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let (cwd, policy) = (ctx.cwd, ctx.policy);
    let mut out = ToolRules::default();
    let home = cargo_home();
    let mut files: Vec<PathBuf> = cwd
        .ancestors()
        .flat_map(|d| [d.join(".cargo/config.toml"), d.join(".cargo/config")])
        .collect();
    if let Some(home) = &home {
        files.extend([home.join("config.toml"), home.join("config")]);
    }
    files.dedup();
    let mut default_replaced = false;
    let mut indexes: Vec<(String, bool)> = Vec::new();
    // The CA cargo trusts (`http.cainfo`, `CARGO_HTTP_CAINFO`), for reading an index's
    // config.json the way cargo would.
    let mut cainfo: Option<String> = std::env::var("CARGO_HTTP_CAINFO").ok();
    let mut cainfo_in_workspace = false;
    for file in files.iter().filter(|f| f.is_file()) {
        if out.skip_hidden(file, ctx) {
            continue;
        }
        let Some(config) = super::read_small(file).and_then(|t| t.parse::<toml::Table>().ok())
        else {
            out.note(format!(
                "cannot read cargo configuration {}",
                file.display()
            ));
            continue;
        };
        let found = registries_in(&config);
        default_replaced |= found.default_replaced;
        let from_workspace = query::is_untrusted(file, ctx.untrusted);
        if cainfo.is_none() {
            cainfo_in_workspace = from_workspace;
            cainfo = config
                .get("http")
                .and_then(|h| h.get("cainfo"))
                .and_then(|c| c.as_str())
                .map(str::to_owned);
        }
        for url in found.indexes {
            out.add_from(
                &url,
                format!("cargo configuration {}", file.display()),
                from_workspace,
            );
            indexes.push((url, from_workspace));
        }
    }
    for (key, value) in super::utf8_env() {
        if key.starts_with("CARGO_REGISTRIES_") && key.ends_with("_INDEX") {
            out.add(&value, format!("{key} in the environment"));
            indexes.push((value, false));
        }
    }
    let cached = home.as_deref().map(cached_indexes).unwrap_or_default();
    if !default_replaced {
        let defaults: Vec<&Cached> = cached.iter().filter(|c| c.dir_host.is_some()).collect();
        if defaults.is_empty() {
            out.note(
                "cargo's default registry is in no configuration file and cargo has cached \
                 none of it: run once with `netbox learn` to find its hosts",
            );
        }
        for index in defaults {
            if let Some(host) = &index.dir_host {
                let from_workspace = query::is_untrusted(&index.dir, ctx.untrusted);
                out.add_from(
                    host,
                    format!("cargo's cached index {}", index.dir.display()),
                    from_workspace,
                );
            }
        }
    }
    // A CA that a workspace file names, or that lies in a writable root, could have been
    // planted to forge an index's config.json: what it names is then the workspace's.
    let cainfo_planted = cainfo_in_workspace
        || cainfo
            .as_deref()
            .is_some_and(|c| query::is_untrusted(Path::new(c), ctx.untrusted));
    // Where each sparse index serves downloads from.
    let sparse: Vec<&(String, bool)> = indexes
        .iter()
        .filter(|(u, _)| u.starts_with("sparse+"))
        .collect();
    if sparse.len() > MAX_FETCHES {
        out.note(format!(
            "more than {MAX_FETCHES} sparse indexes: the download hosts of the rest are unknown"
        ));
    }
    for (url, from_workspace) in sparse.into_iter().take(MAX_FETCHES) {
        let base = url.trim_start_matches("sparse+").trim_end_matches('/');
        // As the bridge spells it (rule_of normalises: case, a final dot, IDNA), as the
        // cache's names and the policy's pins are: `INDEX.test.` is `index.test`.
        let host = super::rule_of(url).and_then(|r| r.rsplit_once(':').map(|(h, _)| h.to_owned()));
        let from_cache = cached.iter().find(|c| host.is_some() && c.dir_host == host);
        let mut why = None;
        let reach = if *from_workspace {
            fetch::Reach::PublicOnly
        } else if ctx.private_ok && !cainfo_planted {
            fetch::Reach::Private
        } else {
            fetch::Reach::AsTheToolWould
        };
        let document = match from_cache.and_then(|c| c.config.clone()) {
            Some(doc) => Some((doc, "cargo's cache of its config.json".to_owned())),
            // A name the user pinned (an internal host) is fetched from only for a
            // registry the user's own configuration names, not one a workspace file does.
            None if *from_workspace
                && host.as_deref().is_some_and(|h| {
                    policy
                        .pinned(&bridge::target::Host::Name(h.to_owned()))
                        .is_some()
                }) =>
            {
                why = Some(
                    "its name is one the allowlist pins, and a workspace file names it".to_owned(),
                );
                None
            }
            None => fetch::https_document(
                &format!("{base}/config.json"),
                cainfo.as_deref(),
                ctx,
                reach,
            )
            .map(|doc| (doc, format!("the config.json of {}", super::host_of(base))))
            .map_err(|e| why = Some(e))
            .ok(),
        };
        match document {
            Some((doc, source)) => {
                for url in download_hosts(&doc) {
                    out.add_from(
                        &url,
                        format!("dl/api in {source}"),
                        *from_workspace || cainfo_planted,
                    );
                }
            }
            // Named by its host: an index URL's path or query may hold a token.
            None => out.note(format!(
                "the config.json of the index at {} could not be read{}: where its crates \
                 download from is unknown (netbox learn finds it)",
                super::host_of(base),
                why.map(|why| format!(" ({why})")).unwrap_or_default()
            )),
        }
    }
    if default_replaced {
        // Said so the start-up line shows why no default is listed.
        out.note("crates-io is replaced by another source in cargo's configuration");
    }
    out
}

pub(super) fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// What one configuration file says about registries.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Found {
    pub indexes: Vec<String>,
    pub default_replaced: bool,
}

pub(super) fn registries_in(config: &toml::Table) -> Found {
    let mut found = Found::default();
    let sources = config.get("source").and_then(|s| s.as_table());
    for (name, source) in sources.into_iter().flatten() {
        if let Some(url) = source.get("registry").and_then(|v| v.as_str()) {
            found.indexes.push(url.to_owned());
        }
        if name == "crates-io" && source.get("replace-with").is_some() {
            found.default_replaced = true;
        }
    }
    let registries = config.get("registries").and_then(|s| s.as_table());
    for (_, registry) in registries.into_iter().flatten() {
        if let Some(url) = registry.get("index").and_then(|v| v.as_str()) {
            found.indexes.push(url.to_owned());
        }
    }
    found
}

/// One index cargo has cached: its directory, the host its name starts with (a sparse
/// index's `HOST-HASH`; a git index's directory is named the same way), and its cached
/// `config.json`.
struct Cached {
    dir: PathBuf,
    dir_host: Option<String>,
    config: Option<String>,
}

fn cached_indexes(cargo_home: &Path) -> Vec<Cached> {
    let Ok(entries) = std::fs::read_dir(cargo_home.join("registry/index")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // Normalised as the bridge does, so that it compares with rule_of's hosts.
            let dir_host = name
                .rsplit_once('-')
                .filter(|(host, _)| host.contains('.'))
                .and_then(|(host, _)| match bridge::target::normalise_host(host) {
                    Ok(bridge::target::Host::Name(name)) => Some(name),
                    _ => None,
                });
            let config = super::read_small(&e.path().join("config.json"));
            Cached {
                dir: e.path(),
                dir_host,
                config,
            }
        })
        .collect()
}

/// The `dl` and `api` URLs of a sparse index's `config.json`.
fn download_hosts(config_json: &str) -> Vec<String> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(config_json) else {
        return Vec::new();
    };
    ["dl", "api"]
        .iter()
        .filter_map(|k| value.get(*k).and_then(|v| v.as_str()).map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_replacement_and_registries() {
        let config: toml::Table = r#"
            [source.crates-io]
            replace-with = "mirror"
            [source.mirror]
            registry = "sparse+https://index.mirror.test/"
            [registries.corp]
            index = "https://git.corp.test/index.git"
        "#
        .parse()
        .unwrap();
        let found = registries_in(&config);
        assert!(found.default_replaced);
        assert_eq!(
            found.indexes,
            [
                "sparse+https://index.mirror.test/",
                "https://git.corp.test/index.git"
            ]
        );
        assert_eq!(
            download_hosts(
                r#"{"dl":"https://dl.mirror.test/api/v1/crates","api":"https://mirror.test"}"#
            ),
            [
                "https://dl.mirror.test/api/v1/crates",
                "https://mirror.test"
            ]
        );
    }
}
