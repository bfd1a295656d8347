//! npm (and yarn and pnpm, which read npm's registry settings): `npm config get
//! registry` gives the registry npm uses (its default included), `npm config list --json`
//! the scoped ones (`@scope:registry`).

use std::path::Path;

use super::{query, ToolRules};

pub fn discover(cwd: &Path) -> ToolRules {
    let mut out = ToolRules::default();
    match query::output("npm", &["config", "get", "registry"], cwd, cwd) {
        Some(registry) => out.add(registry.trim(), "npm config get registry"),
        None => {
            out.note("npm did not answer `npm config get registry` (is it installed?)");
            return out;
        }
    }
    if let Some(json) = query::output("npm", &["config", "list", "--json"], cwd, cwd) {
        for (key, url) in scoped_registries(&json) {
            out.add(&url, format!("{key} in npm's configuration"));
        }
    }
    out.note("a registry may serve tarballs from another host: netbox learn finds it");
    out
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
