//! pip (and uv, which reads the same index settings): `pip config list` gives what pip's
//! files and environment set (`index-url`, `extra-index-url`, `find-links`); without an
//! `index-url`, pip's own default index and the host its files come from are asked of pip
//! itself (its `PyPI` settings, with its own interpreter).

use super::{query, remembered, Context, ToolRules};

/// Printed by pip's own interpreter: its default index, then the host it serves files
/// from (pip's `models.index.PyPI`).
const DEFAULTS: &str = "from pip._internal.models.index import PyPI; \
                        print(PyPI.simple_url); print('https://' + PyPI.file_storage_domain + '/')";

/// Printed by pip's own interpreter, as JSON: the interpreter that ran, every file pip
/// reads its settings from (present or not), and what else its answers come from (pip's
/// own code, the directory it is installed in and each `.pth` file there, which run at
/// start, the standard library's directory, where a `sitecustomize.py` would, a virtual
/// environment's settings). What a remembered answer watches (remembered.rs).
const READS: &str = "import json, os, sys, pip\n\
from pip._internal.configuration import Configuration\n\
files = [f for _, fs in Configuration(isolated=False).iter_config_files() for f in fs]\n\
here = os.path.dirname(os.path.realpath(pip.__file__))\n\
site = os.path.dirname(here)\n\
files += [os.path.join(site, f) for f in sorted(os.listdir(site)) if f.endswith('.pth')]\n\
files += [os.path.dirname(os.__file__), os.path.join(os.path.dirname(os.__file__), 'sitecustomize.py'), os.path.join(site, 'sitecustomize.py')]\n\
files += [os.path.join(here, '__init__.py'), site,\n\
          os.path.join(here, '_internal', 'models', 'index.py'),\n\
          os.path.join(here, '_internal', 'configuration.py'),\n\
          os.path.join(here, '_internal', 'commands', 'configuration.py'),\n\
          os.path.join(sys.prefix, 'pyvenv.cfg')]\n\
print(json.dumps({'ran': os.path.realpath(sys.executable), 'files': files}))\n";

/// What [`READS`] prints.
#[derive(serde::Deserialize)]
struct PipReads {
    ran: std::path::PathBuf,
    files: Vec<std::path::PathBuf>,
}

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    // pip's own interpreter, isolated (-I: no current directory on its path, no PYTHON*
    // variables, no user site): `python -I -m pip` reads only pip's files and PIP_*.
    let interpreter = interpreter(ctx.untrusted).unwrap_or_else(|| "python3".to_owned());
    // What pip reads: asked only when an answer is not remembered.
    let reads = || {
        let text = query::output(&interpreter, &["-I", "-c", READS], ctx.untrusted)?;
        let said: PipReads = serde_json::from_str(text.trim()).ok()?;
        Some(remembered::Reads {
            ran: Some(said.ran),
            files: said.files,
        })
    };
    let asker = remembered::Asker::new(&interpreter, ctx.untrusted, "python", reads);
    let ask = |args: &[&str]| asker.ask(args);
    // pip's files that `--hide` covers: pip in the sandbox does not see them, so pip is
    // asked without them.
    let hidden = if ctx.hidden.is_empty() {
        Vec::new()
    } else {
        let debug = ask(&["-I", "-m", "pip", "config", "debug"]).unwrap_or_default();
        files_in_config_debug(&debug)
            .into_iter()
            .filter(|file| out.skip_hidden(std::path::Path::new(file), ctx))
            .collect::<Vec<String>>()
    };
    let listed = if hidden.is_empty() {
        ask(&["-I", "-m", "pip", "config", "list"])
    } else {
        let mut args = vec!["-I", "-c", LIST_WITHOUT];
        args.extend(hidden.iter().map(String::as_str));
        ask(&args)
    };
    let Some(listed) = listed else {
        out.note(if hidden.is_empty() {
            "pip did not answer `pip config list` (is it installed?)"
        } else {
            "pip's settings could not be read without the hidden files: none is allowed"
        });
        return out;
    };
    let settings = parse_config_list(&listed);
    // The CA pip trusts (`cert`), to read an index the way pip would.
    let cert = settings
        .iter()
        .find(|(_, key, _)| key == "cert")
        .map(|(_, _, value)| value.clone());
    let mut has_index = false;
    let mut indexes: Vec<String> = Vec::new();
    for (scope, key, value) in settings {
        if !matches!(key.as_str(), "index-url" | "extra-index-url" | "find-links") {
            continue;
        }
        has_index |= key == "index-url";
        if key != "find-links" {
            indexes.extend(value.split_whitespace().map(str::to_owned));
        }
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
        match ask(&["-I", "-c", DEFAULTS]) {
            Some(defaults) => {
                for url in defaults.lines() {
                    out.add(url, "pip's default index (pip's own settings)");
                }
            }
            None => out.note("pip's default index could not be asked of pip itself"),
        }
    }
    out.remembered = asker.all_remembered();
    add_file_hosts(&mut out, &indexes, cert.as_deref(), ctx);
    out
}

/// Prints what `pip config list` prints, but for the files named as its arguments (pip's
/// own `Configuration`, with those left out of the files it loads).
const LIST_WITHOUT: &str = "import sys\n\
from pip._internal.configuration import Configuration\n\
hidden = set(sys.argv[1:])\n\
c = Configuration(isolated=False)\n\
files = c.iter_config_files\n\
c.iter_config_files = lambda: [(v, [f for f in fs if f not in hidden]) for v, fs in files()]\n\
c.load()\n\
for key, value in sorted(c.items()):\n    print('%s=%r' % (key, value))\n";

/// The files `pip config debug` lists as existing (`  PATH, exists: True`).
fn files_in_config_debug(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("  ")?.strip_suffix(", exists: True"))
        .filter(|file| !file.starts_with(' '))
        .map(str::to_owned)
        .collect()
}

/// Indexes whose pages are read at most.
const MAX_INDEXES_READ: usize = 4;

/// Hosts one index's page may add: an index serves its files from one or two places.
const MAX_FILE_HOSTS: usize = 2;

/// Links read of one page at most.
const MAX_LINKS: usize = 10_000;

/// Adds the hosts the configured indexes serve their files from, as the indexes' own
/// pages say (a simple index links each file, often on another host). What a page names
/// is text the index chose: it may reach a private address with `--private-ok` only if
/// it lies in the index's own domain and pip's `cert` is outside every writable root (a
/// planted CA could forge the page).
fn add_file_hosts(out: &mut ToolRules, indexes: &[String], cert: Option<&str>, ctx: &Context<'_>) {
    let cert_planted =
        cert.is_some_and(|c| query::is_untrusted(std::path::Path::new(c), ctx.untrusted));
    for index in indexes.iter().take(MAX_INDEXES_READ) {
        let shown = super::without_credentials(index);
        match file_hosts(index, cert, ctx, !cert_planted) {
            Ok((page, hosts)) => {
                let page = super::without_credentials(&page);
                for host in hosts {
                    let trusted = !cert_planted && same_domain(&host, index);
                    out.add_from(&host, format!("files on {page}"), !trusted);
                }
            }
            Err(why) => out.note(format!(
                "{shown} was not read ({why}): if it serves files from another host, netbox learn finds it"
            )),
        }
    }
}

/// Whether two URLs' hosts share their registrable domain (`files.mirror.corp` and
/// `pypi.mirror.corp`; not `a.co.uk` and `b.co.uk`, nor two names under a hosting
/// service's suffix), by the Public Suffix List.
fn same_domain(a: &str, b: &str) -> bool {
    // rule_of's host is spelled as the bridge normalises it (case, a final dot, IDNA).
    let domain = |url: &str| {
        let rule = super::rule_of(url)?;
        let (host, _) = rule.rsplit_once(':')?;
        psl::domain_str(host).map(str::to_owned)
    };
    domain(a).is_some_and(|d| Some(d) == domain(b))
}

/// Where `index` serves files from: the page of one project it holds (`pip`, which a
/// mirror of the default index has, or else the first project it lists), and the hosts
/// other than the index's own that the page links files on: on port 443, 80 or the
/// index's own, two at most. Or why not.
fn file_hosts(
    index: &str,
    cert: Option<&str>,
    ctx: &Context<'_>,
    trusted_cert: bool,
) -> Result<(String, Vec<String>), String> {
    let index_rule = super::rule_of(index).ok_or("not an address netbox reads")?;
    let index_port = index_rule.rsplit_once(':').map_or("", |r| r.1).to_owned();
    // pip's indexes are its own settings, asked only where no writable root holds them
    // (`settings_elsewhere`): none is a workspace file's.
    let reach = if ctx.private_ok && trusted_cert {
        super::fetch::Reach::Private
    } else {
        super::fetch::Reach::AsTheToolWould
    };
    let get = |url: &str| super::fetch::https_document(url, cert, ctx, reach);
    let base = format!("{}/", index.trim_end_matches('/'));
    let pip_page = format!("{base}pip/");
    let (page_url, page) = match get(&pip_page) {
        Ok(page) => (pip_page, page),
        Err(_) => {
            let listing = get(&base)?;
            let first = links(&listing).into_iter().next();
            // Only a page on the index itself.
            let url = first
                .and_then(|first| absolute(&first, &base))
                .filter(|url| super::rule_of(url).as_ref() == Some(&index_rule))
                .ok_or("its listing links no project page on the index")?;
            let page = get(&url)?;
            (url, page)
        }
    };
    let mut seen = std::collections::HashSet::new();
    let mut hosts: Vec<String> = Vec::new();
    for link in links(&page).into_iter().take(MAX_LINKS) {
        let Some(url) = absolute(&link, &page_url) else {
            continue;
        };
        let Some(rule) = super::rule_of(&url) else {
            continue;
        };
        let port = rule.rsplit_once(':').map_or("", |(_, p)| p);
        let usual_port = port == "443" || port == "80" || port == index_port;
        if rule != index_rule && usual_port && seen.insert(rule) {
            hosts.push(url);
            if hosts.len() == MAX_FILE_HOSTS {
                break;
            }
        }
    }
    Ok((page_url, hosts))
}

/// The links of a simple index page: `href` values of its HTML, or the `url` of each
/// file and the `name` of each project of its JSON form (PEP 691).
fn links(page: &str) -> Vec<String> {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(page) {
        let files = json.get("files").and_then(|f| f.as_array());
        let projects = json.get("projects").and_then(|p| p.as_array());
        let file_urls = files
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("url")?.as_str().map(str::to_owned));
        let project_pages = projects
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("name")?.as_str().map(|n| format!("{n}/")));
        return file_urls.chain(project_pages).collect();
    }
    let mut found = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find("href=") {
        rest = &rest[at + 5..];
        let quote = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => q,
            _ => continue,
        };
        let Some(end) = rest[1..].find(quote) else {
            break;
        };
        found.push(rest[1..=end].replace("&amp;", "&"));
        rest = &rest[end + 1..];
    }
    found
}

/// `link` as an absolute URL, read against the page at `page_url`.
fn absolute(link: &str, page_url: &str) -> Option<String> {
    if link.starts_with("https://") || link.starts_with("http://") {
        return Some(link.to_owned());
    }
    if let Some(rest) = link.strip_prefix("//") {
        return Some(format!("https://{rest}"));
    }
    let (scheme, after) = page_url.split_once("://")?;
    if link.starts_with('/') {
        let authority = after.split('/').next()?;
        return Some(format!("{scheme}://{authority}{link}"));
    }
    if link.contains(':') && !link.contains('/') || link.split('/').next()?.contains(':') {
        // Another scheme (`mailto:`, `file:`): no network address.
        return None;
    }
    let dir = &page_url[..page_url.rfind('/')? + 1];
    Some(format!("{dir}{link}"))
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
    fn simple_index_pages_name_their_links() {
        let html = "<a href=\"https://files.test/packages/a/b/demo-1.0.whl#sha256=00\">x</a>\n\
                    <a href='../../demo-0.9.tar.gz'>y</a><a href=\"/simple/other/\">z</a>";
        assert_eq!(
            links(html),
            [
                "https://files.test/packages/a/b/demo-1.0.whl#sha256=00",
                "../../demo-0.9.tar.gz",
                "/simple/other/"
            ]
        );
        let json = r#"{"meta":{"api-version":"1.0"},"name":"demo",
            "files":[{"filename":"demo-1.0.whl","url":"https://files.test/demo-1.0.whl"}]}"#;
        assert_eq!(links(json), ["https://files.test/demo-1.0.whl"]);
        let listing = r#"{"meta":{"api-version":"1.0"},"projects":[{"name":"demo"}]}"#;
        assert_eq!(links(listing), ["demo/"]);
    }

    #[test]
    fn a_files_host_is_the_indexs_own_only_in_its_domain() {
        let index = "https://pypi.mirror.corp.test/simple/";
        assert!(same_domain("https://files.mirror.corp.test/x.whl", index));
        assert!(!same_domain("https://files.elsewhere.test/x.whl", index));
        assert!(!same_domain("https://b.test/", "https://a.test/"));
        assert!(!same_domain("https://127.0.0.1/", "https://127.0.0.2/"));
        assert!(!same_domain(
            "https://evil.co.uk/",
            "https://mycorp.co.uk/simple/"
        ));
        assert!(same_domain(
            "https://files.mycorp.co.uk/",
            "https://mycorp.co.uk/simple/"
        ));
        assert!(same_domain(
            "https://FILES.mirror.test./x",
            index.replace("corp.", "").as_str()
        ));
    }

    #[test]
    fn links_are_read_against_their_page() {
        let page = "https://mirror.test:8443/simple/demo/";
        let cases = [
            ("https://files.test/x.whl", Some("https://files.test/x.whl")),
            ("//files.test/x.whl", Some("https://files.test/x.whl")),
            ("/p/x.whl", Some("https://mirror.test:8443/p/x.whl")),
            ("x.whl", Some("https://mirror.test:8443/simple/demo/x.whl")),
            ("mailto:someone", None),
            ("file:///x.whl", None),
        ];
        for (link, want) in cases {
            assert_eq!(absolute(link, page).as_deref(), want, "{link}");
        }
    }

    #[test]
    fn reads_the_files_pip_config_debug_lists() {
        let text = "env_var:\n  PIP_CERT='/x'\nenv:\nglobal:\n  /etc/xdg/pip/pip.conf, exists: False\n  \
                    /etc/pip.conf, exists: True\n    global.cert: /x\nuser:\n  /home/u/.config/pip/pip.conf, exists: True\n";
        assert_eq!(
            files_in_config_debug(text),
            ["/etc/pip.conf", "/home/u/.config/pip/pip.conf"]
        );
    }

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
