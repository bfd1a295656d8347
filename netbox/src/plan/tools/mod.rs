//! `--allow-tool NAME`: the hosts a package manager will reach, found in its own
//! configuration at run time. Nothing here names a public registry: where a
//! tool's built-in default is in no configuration file, it is asked of the tool itself
//! (its config query, its installed modules, what it cached of an index), and where a
//! registry serves files from a host nothing names, that is said, pointing to learn mode.
//!
//! Each tool has a module with one `discover` function; what it finds is a list of rules
//! (`host:port`), each with where it came from, and notes for the start-up line. Each
//! tool's cache is a directory of netbox's (`caches`, owndir.rs); cargo's holds its
//! settings too, copied there by cargo_home.rs.

mod caches;
mod urls;

mod apt;
mod cargo;
mod cargo_clean;
mod cargo_home;
mod cover;
pub(crate) mod fetch;
mod gem;
mod git;
mod go;
mod maven;
mod npm;
mod owndir;
mod pip;
mod query;
mod reach;
mod remembered;

pub use caches::{caches, Cache, CacheFor};
use std::path::Path;
pub use urls::{host_of, rule_of, without_credentials};

pub use cover::cache_homes_to_cover;

/// One rule a tool needs, and where it came from ("index-url in /etc/pip.conf").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRule {
    pub rule: String,
    pub source: String,
    /// It came from a file in a writable root (the workspace's `.npmrc`, its git remotes):
    /// an earlier command may have written it, so `--private-ok` does not apply to it.
    pub from_workspace: bool,
}

/// What discovery needs: where the command runs, the writable roots (nothing from them
/// is run, and what is read from them is marked), and the policy's pins.
pub struct Context<'a> {
    pub cwd: &'a Path,
    pub untrusted: &'a [std::path::PathBuf],
    /// What `--hide` covers: a tool's settings there are not read, as the tool in the
    /// sandbox will not see them.
    pub hidden: &'a [std::path::PathBuf],
    pub policy: &'a bridge::policy::Policy,
    /// The user said the registries are internal (`--private-ok`): a registry document
    /// the user's own settings name may be read from a non-public address.
    pub private_ok: bool,
    /// What the registry documents read share: one deadline, and their records.
    pub fetches: &'a fetch::Fetches,
}

/// Rules one tool may add at most: a configuration listing thousands of registries is
/// not one to follow.
const MAX_RULES_PER_TOOL: usize = 64;

/// What one tool contributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolRules {
    pub rules: Vec<ToolRule>,
    /// What could not be found, said on the start-up line and by `netbox tools`.
    pub notes: Vec<String>,
    /// Advice that holds on every run alike: said by `netbox tools` alone, not on each
    /// run's start-up line.
    pub asides: Vec<String>,
    /// Every answer of the tool's came from an earlier run's, nothing it depends on
    /// having changed since (remembered.rs).
    pub remembered: bool,
}

impl ToolRules {
    /// Adds the rule for a URL a tool's configuration names. `source` may hold text
    /// from a file an earlier command wrote (a git remote's name): it is escaped here,
    /// once, for every place it is shown.
    fn add(&mut self, url_or_host: &str, source: impl Into<String>) {
        self.add_from(url_or_host, source, false);
    }

    /// [`ToolRules::add`] for what a file in a writable root named.
    fn add_from(&mut self, url_or_host: &str, source: impl Into<String>, from_workspace: bool) {
        if let Some(rule) = rule_of(url_or_host) {
            // Counted apart, so the workspace's files cannot crowd out the user's own.
            let alike = self
                .rules
                .iter()
                .filter(|r| r.from_workspace == from_workspace)
                .count();
            if alike >= MAX_RULES_PER_TOOL {
                // Past the cap on notes: the workspace's notes must not hide it.
                if !self.notes.iter().any(|n| n.starts_with("more than")) {
                    self.notes.push(format!(
                        "more than {MAX_RULES_PER_TOOL} registries: the rest are left out"
                    ));
                }
                return;
            }
            if !self.rules.iter().any(|r| r.rule == rule) {
                self.rules.push(ToolRule {
                    rule,
                    source: crate::printable::printable(&without_credentials(&source.into())),
                    from_workspace,
                });
            }
        } else if !url_or_host.trim().is_empty() && url_or_host.contains("://") {
            // Not a URL netbox could read: its host alone (what stands before its last
            // `@` may be credentials, and its path and query may hold a token).
            let shown = host_of(url_or_host.trim());
            let note = match address_rule(url_or_host.trim()) {
                // A registry by address (a mirror inside a company, often): the rule the
                // user can give, and why a tool's setting is not enough.
                Some(rule) => format!(
                    "{shown} names its registry by address, and netbox takes only names from \
                     a tool's settings (an address there would open it to every command): \
                     give --allow {rule}, or a name for it ([hosts] pins one to it)"
                ),
                None => format!(
                    "{shown} is not a registry address netbox allows (a name and one port only)"
                ),
            };
            self.note(crate::printable::printable(&note));
        }
    }

    /// Whether `file` lies in what `--hide` covers (plan/hidden.rs): the tool in the
    /// sandbox does not see it, so nothing it names is allowed, and the start-up line says
    /// so. Every tool's discovery asks this of each settings file it reads or has its tool
    /// read.
    fn skip_hidden(&mut self, file: &Path, ctx: &Context<'_>) -> bool {
        let Some(by) = crate::plan::hidden::covering(file, ctx.hidden) else {
            return false;
        };
        self.note(format!(
            "{} is hidden (--hide {}): what it names is not allowed",
            file.display(),
            by.display()
        ));
        true
    }

    fn note(&mut self, note: impl Into<String>) {
        let note = without_credentials(&note.into());
        if self.notes.len() < MAX_NOTES_PER_TOOL {
            let mut note = note;
            if note.chars().count() > MAX_NOTE_CHARS {
                note = note.chars().take(MAX_NOTE_CHARS).collect::<String>() + "…";
            }
            self.notes.push(note);
        } else if self.notes.len() == MAX_NOTES_PER_TOOL {
            self.notes.push("and more notes, left out".to_owned());
        }
    }
}

/// Notes one tool may add, and their length: text a workspace file chose must not flood
/// the start-up line.
const MAX_NOTES_PER_TOOL: usize = 6;
const MAX_NOTE_CHARS: usize = 300;

/// One line for the start-up line: `pip: 2 hosts (pip's default index …)`, and what
/// could not be found.
pub fn summary(tool: &str, found: &ToolRules, named_at: &str) -> String {
    let hosts = found.rules.len();
    let plural = if hosts == 1 { "" } else { "s" };
    let mut sources: Vec<&str> = found.rules.iter().map(|r| r.source.as_str()).collect();
    sources.dedup();
    if sources.len() > 4 {
        sources.truncate(4);
        sources.push("…");
    }
    let mut line = format!("{tool}: {hosts} host{plural}");
    if !sources.is_empty() {
        line.push_str(&format!(" ({})", sources.join("; ")));
    }
    if named_at != "--allow-tool" {
        line.push_str(&format!(" [{named_at}]"));
    }
    if found.remembered {
        line.push_str(", as an earlier run was told (its settings unchanged)");
    }
    for note in &found.notes {
        line.push_str(&format!("; {note}"));
    }
    crate::printable::printable(&line)
}

/// After a run that had attempts refused: when CMD's program is a tool `--allow-tool`
/// did not name, and that tool's own settings name a refused target, the flag that opens
/// what they name. Asked only then (a tool's answer can take half a second).
pub fn hint_after_refusals(
    cmd: &[std::ffi::OsString],
    given: &[String],
    refused: &[String],
    cwd: &Path,
) -> Option<String> {
    let tool = tool_of_program(cmd)?;
    if refused.is_empty() || given.iter().any(|g| g == tool) {
        return None;
    }
    let policy = bridge::policy::Policy::deny_all();
    let untrusted = vec![std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_owned())];
    let fetches = fetch::Fetches::new();
    let ctx = Context {
        cwd,
        untrusted: &untrusted,
        hidden: &[],
        policy: &policy,
        private_ok: false,
        fetches: &fetches,
    };
    let found = discover(tool, &ctx).ok()?;
    let named = refused
        .iter()
        .find(|target| found.rules.iter().any(|r| &r.rule == *target))?;
    Some(format!(
        "netbox: hint: {} is a registry {tool}'s settings name; --allow-tool {tool} allows \
         what they name (netbox tools {tool} lists it)",
        crate::printable::printable(named)
    ))
}

/// The tool CMD's program is, if it is one netbox asks: by its file name (`pip3.12`,
/// `npx`, `apt-get`), or `python -m pip`.
fn tool_of_program(cmd: &[std::ffi::OsString]) -> Option<&'static str> {
    let name = Path::new(cmd.first()?).file_name()?.to_str()?;
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match base {
        "pip" => "pip",
        "python" if cmd.windows(2).any(|w| w[0] == "-m" && w[1] == "pip") => "pip",
        "uv" => "uv",
        "npm" | "npx" => "npm",
        "yarn" => "yarn",
        "pnpm" => "pnpm",
        "cargo" => "cargo",
        "go" => "go",
        "apt" | "apt-get" => "apt",
        "mvn" => "maven",
        "gem" => "gem",
        "bundle" => "bundle",
        _ => return None,
    })
}

/// `netbox tools NAME...`: prints what each tool would add, as allowlist lines.
pub fn run(args: &crate::cli::ToolsArgs) -> Result<u8, crate::error::WrapperError> {
    let cwd = std::env::current_dir().map_err(|source| crate::error::WrapperError::Path {
        path: ".".into(),
        what: "current directory",
        source,
    })?;
    let mut text = String::from("allow = [\n");
    let policy = bridge::policy::Policy::deny_all();
    // As a run from here would see it: the current directory is the workspace.
    let untrusted = vec![std::fs::canonicalize(&cwd).unwrap_or_else(|_| cwd.clone())];
    // No event log here: what was read is what this prints.
    let fetches = fetch::Fetches::new();
    let ctx = Context {
        cwd: &cwd,
        untrusted: &untrusted,
        hidden: &[],
        policy: &policy,
        private_ok: args.private_ok,
        fetches: &fetches,
    };
    for name in &args.names {
        let found = discover(name, &ctx).map_err(|reason| crate::error::WrapperError::Rule {
            flag: "netbox tools",
            rule: name.clone(),
            reason,
        })?;
        text.push_str(&format!("    # {name}\n"));
        let rules: Vec<String> = found.rules.iter().map(|r| r.rule.clone()).collect();
        let reached = reach::non_public(&rules);
        for (rule, reached) in found.rules.iter().zip(reached) {
            let quoted = serde_json::to_string(&rule.rule).unwrap_or_default();
            let source = crate::printable::printable(&rule.source);
            text.push_str(&format!("    {quoted}, # {source}\n"));
            let advice = reached.and_then(|(ip, class)| {
                reach::advice(&rule.rule, ip, class, args.private_ok, rule.from_workspace)
            });
            if let Some(advice) = advice {
                let advice = crate::printable::printable(&advice);
                text.push_str(&format!("    # {advice}\n"));
            }
        }
        for note in found.notes.iter().chain(&found.asides) {
            text.push_str(&format!(
                "    # note: {}\n",
                crate::printable::printable(note)
            ));
        }
    }
    text.push_str("]\n");
    crate::output::print_stdout(&text).map(|()| 0)
}

/// A configuration file's text, if it is a regular file of at most 1 MiB (a workspace
/// file may be anything: a FIFO, a sparse file of gigabytes).
/// The environment's variables whose name and value are both UTF-8 (a registry URL in
/// other bytes is none netbox reads): `std::env::vars` panics on any other.
fn utf8_env() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

fn read_small(path: &Path) -> Option<String> {
    crate::plan::read_small_file(path, 1 << 20).ok()
}

/// Variables by which a tool's own settings can come from elsewhere than the user's
/// files: where one points into a writable root, all that tool's rules are taken as the
/// workspace's (an earlier command could have written them).
fn settings_elsewhere(tool: &str) -> &'static [&'static str] {
    // Compared without regard to case (npm reads npm_config_* in any case).
    match tool {
        "npm" => &[
            "npm_config_userconfig",
            "npm_config_globalconfig",
            "npm_config_prefix",
            "npm_config_cache",
            "npm_config_logs_dir",
            "npm_config_logs-dir",
        ],
        "pip" => &[
            "PIP_CONFIG_FILE",
            "XDG_CONFIG_HOME",
            "VIRTUAL_ENV",
            "PYENV_ROOT",
        ],
        "cargo" => &["CARGO_HOME", "RUSTUP_HOME"],
        "go" => &["GOENV", "XDG_CONFIG_HOME", "GOROOT"],
        "apt" => &["APT_CONFIG"],
        // gem loads the plugins of the gems in its paths when it starts.
        "gem" => &[
            "GEMRC",
            "GEM_HOME",
            "GEM_PATH",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
        ],
        _ => &[],
    }
}

/// The first variable (and its value) by which the environment points `tool`'s settings
/// into a writable root.
fn redirected_into_root(tool: &str, untrusted: &[std::path::PathBuf]) -> Option<String> {
    let watched = settings_elsewhere(tool);
    std::env::vars_os().find_map(|(key, value)| {
        let key = key.to_string_lossy();
        if !watched.iter().any(|w| w.eq_ignore_ascii_case(&key)) {
            return None;
        }
        // Each part of a path list (`GEMRC=a:b`, `GEM_PATH`); a relative one is read
        // from where the tool starts, which is no writable root.
        std::env::split_paths(&value)
            .find(|path| path.is_absolute() && query::is_untrusted(path, untrusted))
            .map(|path| format!("{key}={}", path.display()))
    })
}

/// The tools `--allow-tool` knows.
pub const TOOLS: &[&str] = &["pip", "npm", "cargo", "git", "apt", "go", "maven", "gem"];

/// Names that mean one of the tools (uv reads pip's index settings; yarn and pnpm npm's).
pub fn canonical(name: &str) -> Option<&'static str> {
    match name {
        "pip" | "pip3" | "uv" => Some("pip"),
        "npm" | "yarn" | "pnpm" => Some("npm"),
        "cargo" => Some("cargo"),
        "git" => Some("git"),
        "apt" | "apt-get" => Some("apt"),
        "go" => Some("go"),
        "maven" | "mvn" => Some("maven"),
        "gem" | "bundle" | "bundler" => Some("gem"),
        _ => None,
    }
}

/// Asks `name`'s configuration, as seen from `cwd` (project files count). An unknown
/// tool is an error naming the known ones.
pub fn discover(name: &str, ctx: &Context<'_>) -> Result<ToolRules, String> {
    let tool = canonical(name).ok_or_else(|| {
        format!(
            "unknown tool {name:?}; known: {} (and uv, yarn, pnpm, apt-get, mvn, bundle)",
            TOOLS.join(", ")
        )
    })?;
    // The tool would be run on settings an earlier command may have written (its log,
    // trace or hook settings can make it write files or run code): not asked at all.
    if let Some(var) = redirected_into_root(tool, ctx.untrusted) {
        let mut skipped = ToolRules::default();
        skipped.note(format!(
            "not asked: {var} points its settings into a writable root, which an earlier command could have written"
        ));
        return Ok(skipped);
    }
    let mut found = match tool {
        "pip" => pip::discover(ctx),
        "npm" => npm::discover(ctx),
        "cargo" => cargo::discover(ctx),
        "git" => git::discover(ctx),
        "apt" => apt::discover(ctx),
        "maven" => maven::discover(ctx),
        "gem" => gem::discover(ctx),
        _ => go::discover(ctx),
    };
    // Run from an npm script, npm's settings in the environment are the project's own
    // .npmrc's (npm exports them as npm_config_*).
    let from_npm_script = tool == "npm"
        && ["npm_lifecycle_event", "npm_execpath", "npm_command"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
    if from_npm_script {
        for rule in &mut found.rules {
            rule.from_workspace = true;
        }
    }
    Ok(found)
}

/// `ADDR:PORT` of a URL whose host is an IP address (`http://10.1.2.3:3141/simple/` →
/// `10.1.2.3:3141`, the scheme's port when none is written), as an `--allow` rule: what
/// [`rule_of`] leaves out.
fn address_rule(url: &str) -> Option<String> {
    urls::target_of(url)
        .filter(|target| matches!(target.host, bridge::target::Host::Ip(_)))
        .map(|target| target.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_a_program_is() {
        let of = |argv: &[&str]| {
            let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            tool_of_program(&argv)
        };
        assert_eq!(of(&["pip3.12", "install", "x"]), Some("pip"));
        assert_eq!(
            of(&["/usr/bin/python3", "-m", "pip", "install"]),
            Some("pip")
        );
        assert_eq!(of(&["python3", "script.py"]), None);
        assert_eq!(of(&["npx", "x"]), Some("npm"));
        assert_eq!(of(&["apt-get", "install"]), Some("apt"));
        assert_eq!(of(&["bash", "-c", "pip install x"]), None);
        assert_eq!(of(&[]), None);
    }

    #[test]
    fn a_registry_named_by_address_gets_the_rule_to_give() {
        assert_eq!(
            address_rule("http://10.1.2.3:3141/simple/").as_deref(),
            Some("10.1.2.3:3141")
        );
        assert_eq!(
            address_rule("https://user:tok@10.1.2.3/simple").as_deref(),
            Some("10.1.2.3:443")
        );
        assert_eq!(
            address_rule("http://[fd00::1]:8080/").as_deref(),
            Some("[fd00::1]:8080")
        );
        assert_eq!(address_rule("https://pypi.corp.test/simple"), None);
        assert_eq!(address_rule("ftp://10.1.2.3/"), None);
    }

    #[test]
    fn credentials_are_left_out_of_what_is_shown() {
        let cases = [
            (
                "files on https://alice:S3cret@idx.test:8443/simple/pip/",
                "files on https://idx.test:8443/simple/pip/",
            ),
            (
                "https://tok@a.test/x?token=abc could not be read",
                "https://a.test/x?… could not be read",
            ),
            ("http://a.test/p@q", "http://a.test/p@q"),
            ("no url here", "no url here"),
            ("https://alice:s3c;r)e't@idx.test/x", "https://idx.test/x"),
            (
                "https://idx.test/simple/#token=SECRET",
                "https://idx.test/simple/#…",
            ),
            ("https://a.test/x;jsessionid=abc y", "https://a.test/x;… y"),
            (
                "https://u:SECRET#FRAG@index.frag.test/ could not be read",
                "https://index.frag.test/ could not be read",
            ),
            (
                "https://a:S1@one.test/ https://b:S2?x@two.test",
                "https://one.test/ https://two.test",
            ),
            ("https://a.test?token=S3 y", "https://a.test?… y"),
            (
                "//npm.test/:_authToken=SECRET in .npmrc",
                "//npm.test/:_authToken=… in .npmrc",
            ),
            (
                "_auth = A1 and //x.test/:_authToken=B2 and token=C3",
                "_auth = … and //x.test/:_authToken=… and token=…",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(without_credentials(text), want, "{text}");
        }
    }

    #[test]
    fn a_url_netbox_cannot_read_is_shown_by_its_host_alone() {
        let mut found = ToolRules::default();
        found.add("https://eve:GIT SECRET2@bad host/r.git", "git remote");
        assert!(found.rules.is_empty());
        assert!(!found.notes[0].contains("SECRET"), "{:?}", found.notes);
        assert!(
            found.notes[0].contains("bad host is not a registry address"),
            "{:?}",
            found.notes
        );
    }

    #[test]
    fn the_workspaces_rules_cannot_crowd_out_the_users() {
        let mut found = ToolRules::default();
        for i in 0..100 {
            found.add_from(&format!("https://w{i}.test/"), "Gemfile", true);
        }
        found.add("https://mirror.corp.test/", "the user's settings");
        assert!(found.rules.iter().any(|r| r.rule == "mirror.corp.test:443"));
        assert_eq!(found.rules.len(), MAX_RULES_PER_TOOL + 1);
        for i in 0..100 {
            found.note(format!("note {i}"));
        }
        assert_eq!(found.notes.len(), MAX_NOTES_PER_TOOL + 1);
    }

    #[test]
    fn urls_become_host_port_rules() {
        let cases = [
            ("https://mirror.test/simple", Some("mirror.test:443")),
            ("http://mirror.test:8080/x", Some("mirror.test:8080")),
            ("sparse+https://index.test/", Some("index.test:443")),
            ("ssh://git@forge.test:2222/a.git", Some("forge.test:2222")),
            ("https://user:pw@mirror.test/", Some("mirror.test:443")),
            ("https://[2001:db8::1]/x", None),
            ("http://127.0.0.1:8080/", None),
            ("http://127.0.0.1:*/", None),
            ("https://*.com:*/", None),
            ("http://[::1]:1-65535/", None),
            ("https://mirror.test:0/", None),
            ("http://localhost:18080/", None),
            ("http://a.localhost/", None),
            ("http://localhost./", None),
            ("http://localhost.localdomain/", None),
            ("http://ip6-localhost/", None),
            // Spellings the bridge reads as the same host: one rule, in its one spelling.
            ("https://Mirror.TEST./x", Some("mirror.test:443")),
            ("https://ｍｉｒｒｏｒ.test/", Some("mirror.test:443")),
            ("https://ｌｏｃａｌｈｏｓｔ/", None),
            ("https://LOCALHOST./", None),
            ("https://ａ.ｌｏｃａｌｈｏｓｔ:8443/", None),
            ("https://0x7f000001/", None),
            ("https://１２７.０.０.１/", None),
            ("file:///opt/wheels", None),
            ("/opt/wheels", None),
            ("", None),
        ];
        for (url, want) in cases {
            assert_eq!(rule_of(url).as_deref(), want, "{url}");
        }
    }
}
