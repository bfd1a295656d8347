//! cargo's home of netbox's (`--allow-tool cargo`): cargo keeps its cache beside its
//! settings, so CMD gets a `CARGO_HOME` of netbox's, into which the user's settings are
//! copied at each run, without their credentials and never from a path `--hide` covers.

use std::path::PathBuf;

use super::cargo::cargo_home;
use crate::plan::hidden::ToCopy;

/// Makes `home` (a `CARGO_HOME` of netbox's, which earlier runs could write) hold the
/// user's own settings and nothing else that cargo reads as settings or runs by name:
/// `config.toml` and `config` are copied afresh from the user's `CARGO_HOME` (or removed,
/// if the user has none), without their credentials ([`without_credentials`]); one that
/// `--hide` covers is not copied at all (the copy would carry past the cover what the user
/// hid). `credentials.toml` and `credentials` are removed (a planted `credential-provider`
/// would run), and so are `bin/` (cargo runs `cargo-NAME` from there before `PATH`, and
/// rustup puts it first on the toolchain's `PATH`) and what records installs into it. Each
/// file is replaced by rename, so a link an earlier run left there is replaced, not
/// followed; nothing is followed when removing. The downloaded crates stay: a cache one run
/// could poison serves only later runs of the same workspace. The other workspaces' homes
/// are left alone: no sandbox but their own workspace's sees them (cover.rs), and each is
/// seeded afresh before its own workspace's CMD starts. Returns the notes for the start-up
/// line.
pub(super) fn seed_home(
    home: &super::owndir::OwnDir,
    hidden: &[PathBuf],
) -> std::io::Result<Vec<String>> {
    use std::os::fd::AsFd;
    let dir = home.fd.as_fd();
    for name in ["bin", "env", ".crates.toml", ".crates2.json"] {
        super::owndir::remove_at(dir, name)?;
    }
    for name in ["credentials.toml", "credentials"] {
        super::owndir::remove_at(dir, name)?;
    }
    let mut notes = Vec::new();
    let user = cargo_home().filter(|u| u != &home.path);
    for name in ["config.toml", "config"] {
        let Some(source) = user.as_ref().map(|u| u.join(name)) else {
            super::owndir::remove_at(dir, name)?;
            continue;
        };
        let shown = source.display();
        let copy = match crate::plan::hidden::read_to_copy(&source, hidden, 1 << 20) {
            ToCopy::Text(text) => match cleaned(&text) {
                Ok((copy, removed)) => {
                    if !removed.is_empty() {
                        // A few named: a file of a thousand registries must not flood the line.
                        let mut named = removed.iter().take(4).cloned().collect::<Vec<_>>();
                        if removed.len() > 4 {
                            named.push(format!("{} more", removed.len() - 4));
                        }
                        notes.push(format!(
                            "{} in {shown} left out of netbox's copy (credentials stay outside \
                             the sandbox: cargo there cannot use them)",
                            named.join(", ")
                        ));
                    }
                    Some(copy)
                }
                Err(why) => {
                    notes.push(format!("{shown} not copied: {why}"));
                    None
                }
            },
            // Said only of a file there is: a hidden directory covers both names.
            ToCopy::Hidden(_) if !source.exists() => None,
            ToCopy::Hidden(by) => {
                notes.push(format!(
                    "{shown} is hidden (--hide {}): not copied into netbox's CARGO_HOME; \
                     cargo in the sandbox runs without its settings",
                    by.display()
                ));
                None
            }
            ToCopy::Absent => None,
            ToCopy::Unreadable(why) => {
                notes.push(format!("{shown} not copied: {why}"));
                None
            }
        };
        match copy {
            Some(text) => super::owndir::replace_at(dir, name, text.as_bytes())?,
            None => super::owndir::remove_at(dir, name)?,
        }
    }
    Ok(notes)
}

/// A cargo configuration's text as netbox copies it: without its credentials, and the
/// names of what was left out.
fn cleaned(text: &str) -> Result<(String, Vec<String>), String> {
    let mut config: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("not TOML ({})", e.message()))?;
    let removed = without_credentials(&mut config);
    let copy = toml::to_string(&config).map_err(|e| format!("cannot be written back ({e})"))?;
    Ok((copy, removed))
}

/// What a registry table (`[registry]`, `[registries.NAME]`) holds that is a credential
/// or runs a program to fetch one (cargo's configuration reference and registry
/// authentication): the token itself, an asymmetric token's key and subject, and the
/// providers (`credential-process` is their unstable predecessor).
const REGISTRY_SECRETS: [&str; 6] = [
    "token",
    "secret-key",
    "secret-key-subject",
    "credential-provider",
    "credential-process",
    "global-credential-providers",
];

/// Removes from a cargo configuration what is a credential or fetches one, and returns
/// their names: each registry's [`REGISTRY_SECRETS`], `[credential-alias]` (the programs
/// providers name), `http.proxy` (it may carry a user and password; netbox sets cargo's
/// proxy itself) and the user and password of every URL in any value (an index, a git
/// source). Registries, source replacement and the rest stay as they were. Programs that
/// build (a linker, a runner, a `rustc-wrapper`) stay: they hold no credential, and CMD
/// could run them anyway.
fn without_credentials(config: &mut toml::Table) -> Vec<String> {
    let mut removed = Vec::new();
    let mut take = |table: Option<&mut toml::Table>, at: &str, keys: &[&str]| {
        for key in keys {
            if table.as_ref().is_some_and(|t| t.contains_key(*key)) {
                removed.push(format!("{at}{key}"));
            }
        }
        if let Some(table) = table {
            table.retain(|key, _| !keys.contains(&key));
        }
    };
    take(
        config
            .get_mut("registry")
            .and_then(toml::Value::as_table_mut),
        "registry.",
        &REGISTRY_SECRETS,
    );
    if let Some(registries) = config
        .get_mut("registries")
        .and_then(toml::Value::as_table_mut)
    {
        for (name, registry) in registries.iter_mut() {
            take(
                registry.as_table_mut(),
                &format!("registries.{name}."),
                &REGISTRY_SECRETS,
            );
        }
    }
    take(
        config.get_mut("http").and_then(toml::Value::as_table_mut),
        "http.",
        &["proxy"],
    );
    // A table left empty by that goes too (`[registry]` alone would say nothing).
    for key in ["registry", "http"] {
        if config
            .get(key)
            .and_then(toml::Value::as_table)
            .is_some_and(toml::Table::is_empty)
        {
            config.remove(key);
        }
    }
    if config.remove("credential-alias").is_some() {
        removed.push("credential-alias".into());
    }
    let mut in_urls = false;
    for (_, value) in config.iter_mut() {
        in_urls |= strip_url_users(value);
    }
    if in_urls {
        removed.push("the user and password of URLs".into());
    }
    removed
}

/// Removes the user and password from every URL among `value`'s strings, wherever they
/// lie in it; says whether any was.
fn strip_url_users(value: &mut toml::Value) -> bool {
    match value {
        toml::Value::String(text) => match url_without_user(text) {
            Some(bare) => {
                *text = bare;
                true
            }
            None => false,
        },
        toml::Value::Array(items) => items
            .iter_mut()
            .fold(false, |any, item| strip_url_users(item) | any),
        toml::Value::Table(table) => table
            .iter_mut()
            .fold(false, |any, (_, item)| strip_url_users(item) | any),
        _ => false,
    }
}

/// `url` without its user and password (`sparse+https://u:tok@h/` → `sparse+https://h/`),
/// or `None` if it has none. An ssh URL keeps its user (`ssh://git@host/`: the account,
/// not a secret) and loses a password.
fn url_without_user(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (user, host_and_rest) = match rest[..authority_end].rfind('@') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => return None,
    };
    let kept_user = if scheme.ends_with("ssh") {
        match user.split_once(':') {
            Some((name, _)) => name,
            None => return None,
        }
    } else {
        ""
    };
    let at = if kept_user.is_empty() { "" } else { "@" };
    Some(format!("{scheme}://{kept_user}{at}{host_and_rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_netbox_copies_keeps_the_registries_and_loses_every_credential() {
        let text = r#"
            credential-alias.op = ["op-cred", "--vault", "SECRET-ALIAS"]
            [registry]
            default = "corp"
            token = "SECRET-DEFAULT"
            global-credential-providers = ["cargo:token", "op"]
            secret-key = "k3.secret.SECRET-PASETO"
            secret-key-subject = "SECRET-SUBJECT"
            [registries.corp]
            index = "sparse+https://ci:SECRET-INDEX@index.corp.test/"
            token = "SECRET-CORP"
            credential-provider = ["op-cred", "SECRET-ARG"]
            credential-process = "SECRET-PROCESS"
            [registries.git-one]
            index = "ssh://git:SECRET-SSH@forge.test/index.git"
            [source.crates-io]
            replace-with = "mirror"
            [source.mirror]
            registry = "sparse+https://index.mirror.test/"
            [source.vendored]
            git = "https://SECRET-GIT@forge.test/vendored.git"
            [http]
            proxy = "http://me:SECRET-PROXY@proxy.test:3128"
            cainfo = "/etc/corp-ca.pem"
            [net]
            retry = 0
            [target.x86_64-unknown-linux-gnu]
            linker = "clang"
        "#;
        let (copy, removed) = cleaned(text).unwrap();
        assert!(!copy.contains("SECRET"), "{copy}");
        for key in [
            "registry.token",
            "registry.global-credential-providers",
            "registry.secret-key",
            "registries.corp.token",
            "registries.corp.credential-provider",
            "registries.corp.credential-process",
            "credential-alias",
            "http.proxy",
        ] {
            assert!(removed.iter().any(|r| r == key), "{key} in {removed:?}");
        }
        // Positive control: registries, source replacement and the rest stay, and the
        // planted values were there to find.
        assert_eq!(text.matches("SECRET").count(), 11);
        let kept: toml::Table = copy.parse().unwrap();
        let found = super::super::cargo::registries_in(&kept);
        assert!(found.default_replaced);
        assert_eq!(
            found.indexes,
            [
                "sparse+https://index.mirror.test/",
                "sparse+https://index.corp.test/",
                "ssh://git@forge.test/index.git",
            ]
        );
        assert_eq!(kept["registry"]["default"].as_str(), Some("corp"));
        assert_eq!(
            kept["source"]["vendored"]["git"].as_str(),
            Some("https://forge.test/vendored.git")
        );
        assert_eq!(kept["http"]["cainfo"].as_str(), Some("/etc/corp-ca.pem"));
        assert_eq!(kept["net"]["retry"].as_integer(), Some(0));
        assert_eq!(
            kept["target"]["x86_64-unknown-linux-gnu"]["linker"].as_str(),
            Some("clang")
        );
        // Nothing to remove: said so, and the settings as they were.
        let (copy, removed) = cleaned("[net]\nretry = 0\n").unwrap();
        assert_eq!((copy.as_str(), removed.len()), ("[net]\nretry = 0\n", 0));
        assert!(cleaned("[registry\ntoken = 1").is_err());
    }

    #[test]
    fn urls_lose_their_user_and_password_but_ssh_keeps_its_account() {
        let cases = [
            ("https://u:p@h.test/x", Some("https://h.test/x")),
            ("sparse+https://tok@h.test/", Some("sparse+https://h.test/")),
            ("https://h.test/a@b", None),
            ("ssh://git@h.test/i.git", None),
            ("ssh://git:pw@h.test/i.git", Some("ssh://git@h.test/i.git")),
            ("git+ssh://git:pw@h.test/", Some("git+ssh://git@h.test/")),
            ("no url", None),
        ];
        for (url, want) in cases {
            assert_eq!(url_without_user(url).as_deref(), want, "{url}");
        }
    }
}
