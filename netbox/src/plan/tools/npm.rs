//! npm (and yarn and pnpm, which read npm's registry settings): `npm config get
//! registry` gives the registry npm uses (its default included), `npm config list --json`
//! the scoped ones (`@scope:registry`).

use std::path::Path;

use super::{query, remembered, Context, ToolRules};

/// The files npm reads its settings from, as npm says and where its own installation
/// keeps its builtin npmrc: what a remembered answer watches (remembered.rs). Asked from
/// `/`, so `/.npmrc` is the project's.
fn reads(untrusted: &[std::path::PathBuf]) -> Option<Vec<std::path::PathBuf>> {
    // npm-cli.js, in bin/ of npm's own directory; anything else (a binary shim choosing
    // an npm by files of its own) is asked each time.
    let cli = std::fs::canonicalize(query::trusted("npm", untrusted)?).ok()?;
    if cli.file_name()? != "npm-cli.js" {
        return None;
    }
    let own = cli.parent()?.parent()?.to_owned();
    let said = query::output(
        "npm",
        &["config", "get", "userconfig", "globalconfig"],
        untrusted,
    )?;
    let mut files: Vec<std::path::PathBuf> = said
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(_, file)| std::path::PathBuf::from(file.trim()))
        .collect();
    if files.len() != 2 {
        return None;
    }
    files.extend([own.join("npmrc"), own.join("package.json")]);
    files.push(std::path::PathBuf::from("/.npmrc"));
    Some(files)
}

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    // What npm reads: asked only when an answer is not remembered.
    let asker = remembered::Asker::new("npm", ctx.untrusted, "node", || {
        let files = reads(ctx.untrusted)?;
        Some(remembered::Reads { ran: None, files })
    });
    let ask = |args: &[&str]| asker.ask(args);
    // The user's and the global .npmrc, where npm says they are: one `--hide` covers is
    // given to npm as /dev/null (what npm in the sandbox reads there: nothing). npm's
    // builtin npmrc, in its own installation, is no user's setting.
    let mut without: Vec<String> = Vec::new();
    if !ctx.hidden.is_empty() {
        let files = ask(&["config", "get", "userconfig", "globalconfig"]).unwrap_or_default();
        for (key, file) in files.lines().filter_map(|l| l.split_once('=')) {
            let file = Path::new(file.trim());
            let known = matches!(key, "userconfig" | "globalconfig");
            if known && file.exists() && out.skip_hidden(file, ctx) {
                without.push(format!("--{key}=/dev/null"));
            }
        }
    }
    let with = |args: &[&'static str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(without.iter().map(String::as_str));
        ask(&all)
    };
    // npm's own settings (its default, the user's and the global .npmrc, npm_config_*),
    // asked from `/`: no project file comes into npm itself.
    match with(&["config", "get", "registry"]) {
        Some(registry) => out.add(registry.trim(), "npm config get registry"),
        None => {
            out.note("npm did not answer `npm config get registry` (is it installed?)");
            return out;
        }
    }
    if let Some(json) = with(&["config", "list", "--json"]) {
        for (key, url) in scoped_registries(&json) {
            out.add(&url, format!("{key} in npm's configuration"));
        }
    }
    // The project's own .npmrc, read here (not by npm, which would act on all of it).
    if let Some(npmrc) = project_npmrc(ctx.cwd).filter(|f| !out.skip_hidden(f, ctx)) {
        let from_workspace = query::is_untrusted(&npmrc, ctx.untrusted);
        let text = super::read_small(&npmrc).unwrap_or_default();
        for (key, url) in registries_in_npmrc(&text) {
            out.add_from(
                &url,
                format!("{key} in {}", npmrc.display()),
                from_workspace,
            );
        }
    }
    out.remembered = asker.all_remembered();
    out.asides
        .push("a registry may serve tarballs from another host: netbox learn finds it".into());
    out
}

/// The `.npmrc` of the project `cwd` is in: beside the nearest `package.json` above it.
fn project_npmrc(cwd: &Path) -> Option<std::path::PathBuf> {
    let root = cwd.ancestors().find(|d| d.join("package.json").is_file())?;
    let npmrc = root.join(".npmrc");
    std::fs::symlink_metadata(&npmrc)
        .is_ok_and(|m| m.is_file())
        .then_some(npmrc)
}

/// `registry` and `@scope:registry` lines of an `.npmrc` (ini: `key = value`).
fn registries_in_npmrc(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with(['#', ';']))
        .filter_map(|l| {
            let (key, value) = l.split_once('=')?;
            let (key, value) = (key.trim(), value.trim().trim_matches('"'));
            (key == "registry" || (key.starts_with('@') && key.ends_with(":registry")))
                .then(|| (key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `@scope:registry` keys of `npm config list --json`.
fn scoped_registries(json: &str) -> Vec<(String, String)> {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str(json) else {
        return Vec::new();
    };
    map.into_iter()
        .filter(|(key, _)| key.starts_with('@') && key.ends_with(":registry"))
        .filter_map(|(key, value)| Some((key, value.as_str()?.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_project_npmrc() {
        let text = "; comment\nregistry = https://npm.test/\n@corp:registry=\"https://corp.test/\"\ncafile=/x\n";
        assert_eq!(
            registries_in_npmrc(text),
            [
                ("registry".to_owned(), "https://npm.test/".to_owned()),
                ("@corp:registry".to_owned(), "https://corp.test/".to_owned())
            ]
        );
    }

    #[test]
    fn finds_scoped_registries() {
        let json = r#"{"registry":"https://main.test/","@corp:registry":"https://npm.corp.test:8443/","cafile":"/x"}"#;
        assert_eq!(
            scoped_registries(json),
            [(
                "@corp:registry".to_owned(),
                "https://npm.corp.test:8443/".to_owned()
            )]
        );
    }
}
