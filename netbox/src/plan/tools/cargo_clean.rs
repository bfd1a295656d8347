//! What netbox's copy of the user's cargo settings leaves out (cargo_home.rs copies them
//! into the `CARGO_HOME` CMD gets): credentials cargo itself names, and secrets by an
//! exact rule of where they stand, each listed below. Everything else is copied as it
//! is: a token in an index URL's path (some hosted registries put one there), or a secret
//! under a name that does not say it is one. A file that must not reach CMD at all is one
//! to hide (`--hide`): then nothing of it is copied.
//!
//! Left out:
//! - each registry's (`[registry]`, `[registries.NAME]`) [`REGISTRY_SECRETS`],
//!   `[credential-alias]` and `http.proxy` (it may carry a user and password; netbox sets
//!   cargo's proxy itself);
//! - in every string, anywhere in the file (a list's items included): the user and
//!   password of every URL, that is, everything between `://` and the last `@` before
//!   the host ends (at the first `/` or blank), whatever characters it holds (an ssh URL
//!   keeps its user: the account, not a secret); the value of `--token` (the next word,
//!   or the next item of a list, or what follows `--token=`); and the value of each
//!   `NAME=VALUE` whose NAME says it is a secret ([`names_a_secret`]) where it starts a
//!   word or follows `?`, `&` or `;` (a query's parameter), up to the end of that word or
//!   parameter;
//! - each `[env]` variable whose name says it is a secret.

/// A cargo configuration's text as netbox copies it, and the names of what was left out.
pub(super) fn cleaned(text: &str) -> Result<(String, Vec<String>), String> {
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

/// Parts of a name (split at `_`, `-` and `.`, any case) that say it holds a secret.
const SECRET_PARTS: [&str; 9] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "APIKEY",
    "AUTH",
];

/// Two parts in a row that say so (`API_KEY`, `x-api-key`, `PRIVATE_KEY`).
const SECRET_PAIRS: [(&str, &str); 3] = [("API", "KEY"), ("PRIVATE", "KEY"), ("ACCESS", "KEY")];

/// Whether `name` says it holds a secret: one of its parts is one of [`SECRET_PARTS`], or
/// two in a row are one of [`SECRET_PAIRS`] (`GITHUB_TOKEN`, `private_token`,
/// `AWS_SECRET_ACCESS_KEY`, `NPM_AUTH`; not `RUSTFLAGS`, `KEY_PATH`).
pub(super) fn names_a_secret(name: &str) -> bool {
    let parts: Vec<String> = name
        .split(['_', '-', '.'])
        .map(str::to_ascii_uppercase)
        .collect();
    parts.iter().any(|p| SECRET_PARTS.contains(&p.as_str()))
        || parts
            .windows(2)
            .any(|w| SECRET_PAIRS.contains(&(w[0].as_str(), w[1].as_str())))
}

/// Removes from a cargo configuration what the module's rule leaves out, and returns the
/// names of what went (`registry.token`, `env.GITHUB_TOKEN`, `alias.pub: --token`).
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
    if let Some(env) = config.get_mut("env").and_then(toml::Value::as_table_mut) {
        let secret: Vec<String> = env.keys().filter(|k| names_a_secret(k)).cloned().collect();
        for name in secret {
            env.remove(&name);
            removed.push(format!("env.{name}"));
        }
    }
    // A table left empty by that goes too (`[registry]` alone would say nothing).
    for key in ["registry", "http", "env"] {
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
    let mut found = Found::default();
    for (key, value) in config.iter_mut() {
        clean_value(value, key, &mut found);
    }
    if found.url_users {
        removed.push("the user and password of URLs".into());
    }
    removed.extend(found.values);
    removed
}

/// What [`clean_value`] took out of strings: whether any URL's user, and where a
/// `--token` or secret-named value was (`alias.pub: --token`).
#[derive(Default)]
struct Found {
    url_users: bool,
    values: Vec<String>,
}

impl Found {
    fn value(&mut self, at: &str, what: &str) {
        let named = format!("{at}: {what}");
        if !self.values.contains(&named) {
            self.values.push(named);
        }
    }
}

/// Cleans every string in `value` (at key path `at`), lists and tables included.
fn clean_value(value: &mut toml::Value, at: &str, found: &mut Found) {
    match value {
        toml::Value::String(text) => clean_string(text, at, found),
        toml::Value::Array(items) => {
            let mut after_token = false;
            for item in items.iter_mut() {
                if let toml::Value::String(text) = item {
                    if after_token {
                        text.clear();
                        found.value(at, "--token");
                        after_token = false;
                        continue;
                    }
                    after_token = text == "--token";
                } else {
                    after_token = false;
                }
                clean_value(item, at, found);
            }
        }
        toml::Value::Table(table) => {
            for (key, item) in table.iter_mut() {
                clean_value(item, &format!("{at}.{key}"), found);
            }
        }
        _ => {}
    }
}

/// Cleans one string: every URL's user and password, the value of `--token`, and the
/// value of each `NAME=VALUE` whose name says it is a secret (at a word's start, or
/// after `?`, `&` or `;`).
fn clean_string(text: &mut String, at: &str, found: &mut Found) {
    if let Some(bare) = without_url_users(text) {
        *text = bare;
        found.url_users = true;
    }
    let mut out = String::with_capacity(text.len());
    let mut after_token = false;
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let blank = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..blank]);
        rest = &rest[blank..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..end];
        rest = &rest[end..];
        if word.is_empty() {
            continue;
        }
        if after_token {
            found.value(at, "--token");
            after_token = false;
            continue;
        }
        if word == "--token" {
            after_token = true;
            out.push_str(word);
            continue;
        }
        if word.starts_with("--token=") {
            found.value(at, "--token");
            out.push_str("--token=");
            continue;
        }
        // Each parameter: the word's start, and what follows `?`, `&` or `;`.
        let mut from = 0;
        for (i, c) in word.char_indices().chain([(word.len(), ' ')]) {
            if i < word.len() && !matches!(c, '?' | '&' | ';') {
                continue;
            }
            let part = &word[from..i];
            match part.split_once('=') {
                Some((name, _)) if is_name(name) && names_a_secret(name) => {
                    found.value(at, &format!("{name}="));
                    out.push_str(name);
                    out.push('=');
                }
                _ => out.push_str(part),
            }
            if i < word.len() {
                out.push(c);
            }
            from = i + c.len_utf8();
        }
    }
    *text = out;
}

/// A variable's or parameter's name: letters, digits, `_`, `-` and `.`.
fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `text` with the user and password of every URL in it removed, or `None` if it has
/// none: for each `://`, what stands before the last `@` before the host ends (the first
/// `/`, blank or quote after it) goes, whatever it holds (`#`, `?`, `:`). An ssh URL
/// (`ssh://`, `git+ssh://`) keeps its user, the account, and loses a password.
pub(super) fn without_url_users(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let before = &rest[..at];
        let scheme_from = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let is_ssh = before[scheme_from..].ends_with("ssh");
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        let end = rest
            .find(|c: char| c == '/' || c.is_whitespace() || matches!(c, '"' | '\''))
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        match authority.rfind('@') {
            Some(host_at) => {
                let user = &authority[..host_at];
                let kept = if is_ssh {
                    user.split_once(':').map_or(user, |(name, _)| name)
                } else {
                    ""
                };
                changed |= kept != user;
                if !kept.is_empty() {
                    out.push_str(kept);
                    out.push('@');
                }
                out.push_str(&authority[host_at + 1..]);
            }
            None => out.push_str(authority),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    changed.then_some(out)
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

    /// Secrets where the rule says: `[env]` by name, `--token`'s value, secret-named
    /// `NAME=VALUE` words and query parameters, every URL's user in one string; what the
    /// rule leaves (a path token, an innocent name) stays, as documented.
    #[test]
    fn secrets_in_env_aliases_runners_and_queries_are_left_out_by_their_names() {
        let text = r#"
            [registries.cloudsmith]
            index = "sparse+https://dl.cloudsmith.test/PATH-TOKEN-KEPT/org/repo/cargo/"
            [registries.query]
            index = "sparse+https://index.corp.test/index/?private_token=SECRET-QUERY&page=1"
            [registries.frag]
            index = "sparse+https://u:SECRET#FRAG@index.frag.test/"
            [env]
            GITHUB_TOKEN = "SECRET-ENV"
            NPM_TOKEN = { value = "SECRET-ENV-TABLE", force = true }
            MIRRORS = "https://a:SECRET-FIRST@one.test/ https://b:SECRET-SECOND@two.test/"
            OPENSSL_DIR = "/opt/ssl"
            [alias]
            pub = "publish --registry corp --token SECRET-ALIAS"
            pub2 = ["publish", "--token", "SECRET-ALIAS-LIST"]
            pub3 = "publish --token=SECRET-ALIAS-EQ"
            b = "build --release"
            [target.x86_64-unknown-linux-gnu]
            runner = ["env", "AWS_SECRET_ACCESS_KEY=SECRET-RUNNER", "KEY_PATH=/k", "sh", "-c"]
        "#;
        let (copy, removed) = cleaned(text).unwrap();
        // Each planted value (a name may say SECRET itself).
        assert!(
            !copy.contains("SECRET-") && !copy.contains("SECRET#"),
            "{copy}"
        );
        let kept: toml::Table = copy.parse().unwrap();
        assert_eq!(
            kept["registries"]["query"]["index"].as_str(),
            Some("sparse+https://index.corp.test/index/?private_token=&page=1")
        );
        assert_eq!(
            kept["registries"]["frag"]["index"].as_str(),
            Some("sparse+https://index.frag.test/")
        );
        assert_eq!(
            kept["env"]["MIRRORS"].as_str(),
            Some("https://one.test/ https://two.test/")
        );
        assert_eq!(kept["env"]["OPENSSL_DIR"].as_str(), Some("/opt/ssl"));
        assert!(kept["env"].get("GITHUB_TOKEN").is_none());
        assert_eq!(
            kept["alias"]["pub"].as_str(),
            Some("publish --registry corp --token ")
        );
        assert_eq!(kept["alias"]["pub3"].as_str(), Some("publish --token="));
        assert_eq!(kept["alias"]["b"].as_str(), Some("build --release"));
        assert_eq!(kept["alias"]["pub2"][2].as_str(), Some(""));
        let runner = &kept["target"]["x86_64-unknown-linux-gnu"]["runner"];
        assert_eq!(runner[1].as_str(), Some("AWS_SECRET_ACCESS_KEY="));
        assert_eq!(runner[2].as_str(), Some("KEY_PATH=/k"));
        // What the rule does not reach stays: a token in an index's path.
        assert!(copy.contains("PATH-TOKEN-KEPT"), "{copy}");
        for name in [
            "env.GITHUB_TOKEN",
            "env.NPM_TOKEN",
            "alias.pub: --token",
            "alias.pub2: --token",
            "target.x86_64-unknown-linux-gnu.runner: AWS_SECRET_ACCESS_KEY=",
            "registries.query.index: private_token=",
        ] {
            assert!(removed.iter().any(|r| r == name), "{name} in {removed:?}");
        }
    }

    #[test]
    fn urls_lose_their_user_and_password_but_ssh_keeps_its_account() {
        let cases = [
            ("https://u:p@h.test/x", Some("https://h.test/x")),
            ("sparse+https://tok@h.test/", Some("sparse+https://h.test/")),
            ("https://u:p#q?r:s@h.test/", Some("https://h.test/")),
            (
                "x https://a:1@one.test y https://b:2@two.test/p",
                Some("x https://one.test y https://two.test/p"),
            ),
            ("https://h.test/a@b", None),
            ("ssh://git@h.test/i.git", None),
            ("ssh://git:pw@h.test/i.git", Some("ssh://git@h.test/i.git")),
            ("git+ssh://git:pw@h.test/", Some("git+ssh://git@h.test/")),
            ("no url", None),
        ];
        for (url, want) in cases {
            assert_eq!(without_url_users(url).as_deref(), want, "{url}");
        }
    }

    #[test]
    fn names_that_say_they_are_secrets() {
        for name in [
            "GITHUB_TOKEN",
            "private_token",
            "AWS_SECRET_ACCESS_KEY",
            "x-api-key",
            "DB.PASSWORD",
            "NPM_AUTH",
        ] {
            assert!(names_a_secret(name), "{name}");
        }
        for name in [
            "RUSTFLAGS",
            "KEY_PATH",
            "OPENSSL_DIR",
            "TOKENIZER",
            "AUTHOR",
        ] {
            assert!(!names_a_secret(name), "{name}");
        }
    }
}
