//! pip (and uv, which reads the same index settings): `pip config list` gives what pip's
//! files and environment set (`index-url`, `extra-index-url`, `find-links`); without an
//! `index-url`, pip's own default index and the host its files come from are asked of pip
//! itself (its `PyPI` settings, with its own interpreter).

use super::{query, Context, ToolRules};

/// Printed by pip's own interpreter: its default index, then the host it serves files
/// from (pip's `models.index.PyPI`).
const DEFAULTS: &str = "from pip._internal.models.index import PyPI; \
                        print(PyPI.simple_url); print('https://' + PyPI.file_storage_domain + '/')";

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    // pip's own interpreter, isolated (-I: no current directory on its path, no PYTHON*
    // variables, no user site): `python -I -m pip` reads only pip's files and PIP_*.
    let interpreter = interpreter(ctx.untrusted).unwrap_or_else(|| "python3".to_owned());
    let Some(listed) = query::output(
        &interpreter,
        &["-I", "-m", "pip", "config", "list"],
        ctx.untrusted,
    ) else {
        out.note("pip did not answer `pip config list` (is it installed?)");
        return out;
    };
    let mut has_index = false;
    for (scope, key, value) in parse_config_list(&listed) {
        if !matches!(key.as_str(), "index-url" | "extra-index-url" | "find-links") {
            continue;
        }
        has_index |= key == "index-url";
        let source = if scope == ":env:" {
            format!(
                "{key} in the environment (PIP_{})",
                key.to_uppercase().replace('-', "_")
            )
        } else {
            format!("{key} in pip's {scope} configuration")
        };
        for url in value.split_whitespace() {
            out.add(url, source.clone());
        }
    }
    if !has_index {
        match query::output(&interpreter, &["-I", "-c", DEFAULTS], ctx.untrusted) {
            Some(defaults) => {
                for url in defaults.lines() {
                    out.add(url, "pip's default index (pip's own settings)");
                }
            }
            None => out.note("pip's default index could not be asked of pip itself"),
        }
    } else {
        out.note("an index may serve its files from another host: netbox learn finds it");
    }
    out
}

/// `scope.key='value'` lines, as `pip config list` prints them.
fn parse_config_list(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once('=')?;
            let (scope, key) = name.rsplit_once('.')?;
            let value = value.trim().trim_matches('\'').trim_matches('"');
            Some((scope.to_owned(), key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// The interpreter of the `pip` netbox would run, from its `#!` line (a Python one only,
/// itself outside the writable roots).
fn interpreter(untrusted: &[std::path::PathBuf]) -> Option<String> {
    let pip = query::trusted("pip", untrusted)?;
    let head = std::fs::read(&pip).ok()?;
    let first = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(first).ok()?.strip_prefix("#!")?;
    let program = line.split_whitespace().next()?;
    let program = program.contains("python").then(|| program.to_owned())?;
    query::trusted(&program, untrusted).map(|_| program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pips_config_list() {
        let text = "global.index-url='https://mirror.test/simple'\n\
                    :env:.extra-index-url='https://extra.test/simple https://more.test:8443/s'\n\
                    global.cert='/etc/ssl/certs/ca-certificates.crt'\n";
        let got = parse_config_list(text);
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0],
            (
                "global".into(),
                "index-url".into(),
                "https://mirror.test/simple".into()
            )
        );
        assert_eq!(got[1].0, ":env:");
        assert_eq!(got[1].1, "extra-index-url");
    }
}
