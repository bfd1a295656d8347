//! netbox's one error type, and the only place exit codes are chosen.

use std::path::{Path, PathBuf};

/// Exit status for netbox's own failures (as `env`, `timeout` and podman use).
pub const EXIT_NETBOX_FAILURE: u8 = 125;
/// The run was killed at --timeout (as timeout(1) reports it).
pub const EXIT_TIMEOUT: u8 = 124;
/// CMD exists but could not be executed (as a shell reports it).
pub const EXIT_NOT_EXECUTABLE: u8 = 126;
/// CMD was not found (as a shell reports it).
pub const EXIT_NOT_FOUND: u8 = 127;

/// Why netbox could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum WrapperError {
    #[error("{0}")]
    Usage(String),
    #[error("invalid rule {rule:?} in {flag}: {reason}")]
    Rule {
        flag: &'static str,
        rule: String,
        reason: String,
    },
    #[error(transparent)]
    Bridge(#[from] bridge::BridgeError),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot use {what} {}", path.display())]
    Path {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("protected path {} is a symlink, which netbox cannot pin read-only", path.display())]
    ProtectedSymlink { path: PathBuf },
    #[error("{what} {}: {} is a symlink inside the writable root {}, which CMD could point elsewhere", path.display(), link.display(), root.display())]
    SymlinkInRoot {
        what: &'static str,
        path: PathBuf,
        link: PathBuf,
        root: PathBuf,
    },
    #[error("{what} {}: {} is a symbolic link (to {target}), which netbox {command} does not follow: a sandbox that could write there could have pointed it anywhere", path.display(), link.display())]
    WalkThroughSymlink {
        /// The subcommand that walked (`export`, `learn`).
        command: &'static str,
        what: &'static str,
        path: PathBuf,
        link: PathBuf,
        /// Where it points, printable (the sandbox may have chosen it).
        target: String,
    },
    #[error("--hide {}: {} is a symlink, which the host could point elsewhere during the run", path.display(), link.display())]
    HideThroughSymlink { path: PathBuf, link: PathBuf },
    #[error("submodule {} lies beyond the symlink {}, which netbox cannot pin read-only", submodule.display(), path.display())]
    SubmoduleSymlink { path: PathBuf, submodule: PathBuf },
    #[error("cannot tell which submodules {} records: {reason}", path.display())]
    GitIndex { path: PathBuf, reason: String },
    #[error("{} has {links} names (hard links, as a local `git clone` makes): with --allow-git-writes CMD could rewrite it, and with it the file's other names, which may lie outside every writable root", path.display())]
    GitDataHardLink {
        path: PathBuf,
        links: u64,
        /// The git directory it belongs to.
        repository: PathBuf,
    },
    #[error("cannot check {} for hard links to files outside it: it holds more than {limit} entries", path.display())]
    GitDataUnchecked { path: PathBuf, limit: usize },
    #[error("cannot tell what the git config {} makes git run: {reason}", path.display())]
    GitConfig { path: PathBuf, reason: String },
    #[error("cannot create the read-only placeholder {}", path.display())]
    Placeholder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} changed while netbox was starting ({reason}); nothing ran", path.display())]
    PathChanged { path: PathBuf, reason: String },
    #[error("the writable root {} {} your home directory{}, where CMD could plant code that runs later outside the sandbox (~/.bashrc, ~/.local/bin, ~/.config/autostart, ...)", root.display(), if root == home { "is" } else { "holds" }, if root == home { String::new() } else { format!(" {}", home.display()) })]
    HomeWritable { root: PathBuf, home: PathBuf },
    #[error("the writable root {} holds the settings or data of every program of yours, where CMD could plant code that runs later outside the sandbox", root.display())]
    SharedHomeDirWritable { root: PathBuf },
    #[error("{} cannot be a writable root: {}{}", crate::printable::printable(&root.to_string_lossy()), seen_as.as_ref().map(|other| format!("it shows at {} too (a bind mount), and there ", printable_path(other))).unwrap_or_default(), kept_as.why(seen_as.as_deref().unwrap_or(root), kept))]
    RootKeptReadOnly {
        root: PathBuf,
        /// The root's other name that lies in the kept path, where its own does not.
        seen_as: Option<PathBuf>,
        kept: PathBuf,
        kept_as: KeptAs,
    },
    #[error("the writable root {} holds {}, a mount that shows {} there too, which stays read-only here", printable_path(root), printable_path(mount), printable_path(other))]
    RootHoldsOtherName {
        root: PathBuf,
        mount: PathBuf,
        other: PathBuf,
    },
    #[error("the writable root {} reaches {} by another name (a mount shows the same directory at both), and your home's rules go by its paths", printable_path(root), printable_path(other))]
    RootIsHomeByOtherName { root: PathBuf, other: PathBuf },
    #[error("user namespaces are not available to this user")]
    UsernsUnavailable {
        #[source]
        source: std::io::Error,
        hint: String,
    },
    #[error("sandbox setup failed at {step}: {detail}")]
    Setup {
        step: String,
        detail: String,
        hint: Option<String>,
    },
    #[error("pinned path {} was removed or replaced on the host during the run (a program outside the sandbox deleted it or saved over it by rename), which made it writable in the sandbox; the run was stopped. {}", path.display(), pin_lost_advice(path))]
    PinLost { path: PathBuf },
    #[error("{setting} {} now names {}, which the sandbox can write{}: git's configuration changed on the host during the run, so the run was stopped. Make such changes (git config, npm install running husky, git submodule add) after netbox finishes, or start the run again to have the new path pinned", repository.as_ref().map_or("in the shared git configuration".to_owned(), |r| format!("for the repository {}", r.display())), named.display(), if path == named { String::new() } else { format!(" at {}", path.display()) })]
    PinsOutgrown {
        /// Where the repository is (its work tree's top), if the path is named for one.
        repository: Option<PathBuf>,
        setting: String,
        /// What the setting names.
        named: PathBuf,
        /// What must be read-only for it: the path, or its first missing directory.
        path: PathBuf,
    },
    #[error("git's configuration, index or hooks changed on the host during the run, and netbox cannot tell what they now name; the run was stopped")]
    Recheck {
        #[source]
        source: Box<WrapperError>,
    },
    #[error("cannot write the event log {}: {reason}; the run was stopped", path.display())]
    EventLogWrite { path: PathBuf, reason: String },
    #[error("live probe failed: {0}")]
    ProbeFailed(String),
    #[error("cannot start the sandbox")]
    Spawn(#[source] std::io::Error),
    #[error("lost contact with the sandbox: {0}")]
    Handshake(String),
    #[error("cannot write the output")]
    Output(#[source] std::io::Error),
    #[error("cannot run {cmd}")]
    Exec {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot remove stale socket {}", path.display())]
    StaleSocket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `path` as a shell word for a hint: bare where that is safe, else single-quoted.
fn shell_quote(path: &std::path::Path) -> String {
    let text = crate::printable::printable(&path.to_string_lossy());
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

impl WrapperError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            WrapperError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                EXIT_NOT_FOUND
            }
            WrapperError::Exec { .. } => EXIT_NOT_EXECUTABLE,
            _ => EXIT_NETBOX_FAILURE,
        }
    }

    /// A line telling the user how to fix it, when we know.
    pub fn hint(&self) -> Option<String> {
        match self {
            // A URL given as a rule: the rule it meant.
            WrapperError::Rule { rule, .. } if rule.contains("://") => {
                let meant = rule_from_url(rule);
                Some(match meant {
                    Some(meant) => format!("rules are HOST[:PORT], not URLs; did you mean {meant}?"),
                    None => "rules are HOST[:PORT], not URLs (host.test:443)".into(),
                })
            }
            WrapperError::Rule {
                flag: "--allow-tool",
                ..
            } => Some(
                "--allow-tool takes a tool's name; `netbox tools NAME` shows what it would open"
                    .into(),
            ),
            WrapperError::Rule { .. } => Some(
                "rules look like host.test, host.test:443, *.host.test:80,443, 10.0.0.0/8:5432, [::1]:8080"
                    .into(),
            ),
            WrapperError::Bridge(bridge::BridgeError::Policy(_)) => {
                Some("`netbox docs allowlist` shows the file's format".into())
            }
            WrapperError::UsernsUnavailable { hint, .. } => Some(hint.clone()),
            WrapperError::Setup { hint, .. } => hint.clone(),
            WrapperError::ProtectedSymlink { .. } => Some(
                "replace the symlink with the file, or choose a workspace that does not contain it"
                    .into(),
            ),
            WrapperError::HideThroughSymlink { .. } => Some(
                "hide the real path (realpath PATH), or the directory that holds the link".into(),
            ),
            WrapperError::WalkThroughSymlink { .. } => Some(
                "name the directory itself, with no link on the way, once you know the link is yours"
                    .into(),
            ),
            WrapperError::SymlinkInRoot { .. } => Some(
                "name the file the link points to (realpath PATH), or replace the link with the file"
                    .into(),
            ),
            WrapperError::SubmoduleSymlink { .. } => Some(
                "replace the symlink with the directory, or choose a workspace that does not contain it"
                    .into(),
            ),
            WrapperError::HomeWritable { .. } => Some(
                "start netbox in a project directory, or --write only the directories CMD needs; --allow-home-write makes only home's data writable"
                    .into(),
            ),
            WrapperError::RootKeptReadOnly { kept_as, .. } => Some(kept_as.hint().into()),
            WrapperError::RootHoldsOtherName { root, .. } if root.as_path() == std::path::Path::new("/tmp") => Some(
                "leave /tmp private to the run (the default, without --tmp host)".into(),
            ),
            WrapperError::RootHoldsOtherName { .. } => Some(
                "unmount it, or --write the places CMD needs that do not hold it".into(),
            ),
            WrapperError::RootIsHomeByOtherName { other, .. } => Some(format!(
                "name it by its path under your home ({}), or unmount the other name",
                printable_path(other)
            )),
            WrapperError::SharedHomeDirWritable { .. } => Some(
                "--write the one program's directory CMD needs (~/.config/tool), or pass --allow-home-write"
                    .into(),
            ),
            WrapperError::PathChanged { .. } => Some(
                "another process renamed or replaced it, or a directory above it; find out which before running again"
                    .into(),
            ),
            WrapperError::GitIndex { .. } => Some(
                "check the repository with `git status`; netbox pins every submodule's .git and must read the index to find them"
                    .into(),
            ),
            WrapperError::GitDataHardLink { repository, .. } => Some(format!(
                "give the repository objects of its own: git -C {} repack -a -d && git -C {} prune-packed (or clone with --no-hardlinks); or run without --allow-git-writes",
                shell_quote(repository),
                shell_quote(repository),
            )),
            WrapperError::GitDataUnchecked { path, .. } => Some(format!(
                "pack its loose objects (git gc in the repository of {}), or run without --allow-git-writes",
                path.display()
            )),
            WrapperError::GitConfig { .. } => Some(
                "make the file readable, or remove it; netbox pins what git's configuration names and must read it to know what that is"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// An error and its causes, on one line (`a: b: c`).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        // An error that says its cause in its own message (`{source}` in its text) is not
        // followed by the cause again.
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(&format!(": {said}"));
        }
        source = cause.source();
    }
    text
}

/// `HOST:PORT` of a URL given where a rule was wanted (`https://r.test/simple` →
/// `r.test:443`), for the hint.
fn rule_from_url(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let port = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        "ssh" | "git+ssh" => "22",
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    if host_port.is_empty() {
        return None;
    }
    let has_port = host_port
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !host_port.ends_with(']');
    Some(if has_port {
        host_port.to_owned()
    } else {
        format!("{host_port}:{port}")
    })
}

/// What to do when a pin was lost, by what the path is.
fn pin_lost_advice(path: &std::path::Path) -> &'static str {
    let in_git_dir = path.components().any(|c| c.as_os_str() == ".git");
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let git_part = matches!(
        name,
        "index" | "config" | "config.worktree" | "commondir" | "hooks"
    );
    if in_git_dir || name == ".git" {
        // A `.git` directory is pinned whole (a commit replacing its index does not lose
        // it): what was lost is the directory, a `.git` file, or what a link led to.
        "A git command on the host replaced part of the repository: run it after netbox \
         finishes"
    } else if git_part {
        // A bare repository that is a writable root: its parts that run code are pinned
        // one by one, and `git config` on the host replaces one.
        "A git command on the host (git config) rewrites it in this bare repository, whose \
         parts that run code are pinned one by one: run it after netbox finishes"
    } else {
        "Leave it unchanged while netbox runs (an editor or a credential refresher that saves \
         by rename replaces it; protect or hide its directory instead with --protect or \
         --hide DIR), then run again"
    }
}

/// What keeps a path from being written in the sandbox, for [`WrapperError::RootKeptReadOnly`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptAs {
    /// netbox's own protection: code, keys or settings that programs outside the sandbox
    /// run or trust.
    Protected,
    /// A repository's git data (its hooks, config, index), pinned read-only.
    GitData,
    /// `--protect`.
    ProtectFlag,
    /// `--ro`.
    ReadOnly,
    /// `--hide`, or a path netbox hides (its session logs, secret files, keys).
    Hidden,
}

impl KeptAs {
    /// Why `root` cannot be written, `kept` being what keeps it (itself or a parent).
    fn why(self, root: &Path, kept: &Path) -> String {
        let (it, makes) = match self {
            KeptAs::Protected => (
                "netbox keeps",
                " read-only (programs outside the sandbox run or trust what it holds: code, keys, settings)",
            ),
            KeptAs::GitData => (
                "netbox keeps",
                " read-only (a repository's git data: what git runs and trusts)",
            ),
            KeptAs::ProtectFlag => ("--protect makes", " read-only"),
            KeptAs::ReadOnly => ("--ro makes", " read-only"),
            KeptAs::Hidden => ("the sandbox hides", ""),
        };
        if root == kept {
            format!("{it} it{makes}")
        } else {
            let kept = crate::printable::printable(&kept.to_string_lossy());
            format!("it lies in {kept}, which {it}{makes}")
        }
    }

    /// How to get what was meant.
    fn hint(self) -> &'static str {
        match self {
            KeptAs::Protected => {
                "--write a directory of CMD's own instead, and point the tool at it with its own setting (a cache or home directory)"
            }
            KeptAs::GitData => {
                "--allow-git-writes makes a repository's objects and refs writable (never its hooks or config)"
            }
            KeptAs::ProtectFlag | KeptAs::ReadOnly => {
                "--write a directory outside it, or drop the flag that keeps it read-only"
            }
            KeptAs::Hidden => {
                "--write a directory outside it (a --hide, or what netbox hides: its session logs, secret files, keys)"
            }
        }
    }
}

/// A path for a message, control characters shown escaped.
fn printable_path(path: &std::path::Path) -> String {
    crate::printable::printable(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_message_already_says_is_not_said_twice() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let said = WrapperError::Bridge(bridge::BridgeError::Policy(
            bridge::policy::PolicyError::Read {
                file: "/x.toml".into(),
                source: io(),
            },
        ));
        let text = chain(&said);
        assert_eq!(text.matches(&io().to_string()).count(), 1, "{text}");
        // A cause the message does not say is still said.
        let exec = WrapperError::Exec {
            cmd: "x".into(),
            source: io(),
        };
        assert_eq!(chain(&exec), format!("cannot run x: {}", io()));
    }

    #[test]
    fn a_url_given_as_a_rule_gets_the_rule_it_meant() {
        let error = |rule: &str| WrapperError::Rule {
            flag: "--allow",
            rule: rule.into(),
            reason: "invalid".into(),
        };
        let hint = |rule: &str| error(rule).hint().unwrap();
        assert!(hint("https://registry.test/simple").ends_with("did you mean registry.test:443?"));
        assert!(hint("http://u:p@mirror.test:8080/x").ends_with("did you mean mirror.test:8080?"));
        assert!(hint("host.test:x").starts_with("rules look like"));
    }
}
