//! Host Unix sockets the user lets a sandboxed command connect to: `--allow-socket PATH`
//! and `sockets = [...]` in allowlists (an SSH agent for `git push`, gpg-agent). Each is
//! checked here, once, for what can be known before the run (it is a socket now, and no
//! writable root holds it); which socket sits there is decided again at each connect
//! (supervise/unixsockets.rs), so an agent restarted during the run is still reached.

use std::path::{Component, Path, PathBuf};

use crate::error::WrapperError;

/// One host socket CMD may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedSocket {
    /// The path as given, variables expanded, absolute and without `.` or `//`: the
    /// name CMD connects by (it sees the same variable).
    pub named: PathBuf,
    /// The same path with the host's symlinks resolved at start: where netbox connects,
    /// never following a symlink at connect time.
    pub target: PathBuf,
    /// Where it was given (`--allow-socket`, or `FILE:LINE`), for messages.
    pub origin: String,
}

/// The allowed sockets of `--allow-socket` and the policy's `sockets = [...]`: every
/// mistake refused with one line before anything runs.
pub fn allowed(
    flags: &[String],
    policy: &bridge::Policy,
    cwd: &Path,
    write_roots: &[PathBuf],
) -> Result<Vec<AllowedSocket>, WrapperError> {
    // Byte for byte (paths/exact_text.rs): a socket path in bytes that are not UTF-8 is
    // that path, not an unset variable.
    let lookup = |name: &str| std::env::var_os(name).map(|v| crate::paths::exact_text::text_of(&v));
    let given = flags
        .iter()
        .map(|f| (f.clone(), "--allow-socket".to_owned()))
        .chain(
            policy
                .sockets()
                .iter()
                .map(|(s, at)| (s.clone(), format!("sockets in {at}"))),
        );
    let mut out: Vec<AllowedSocket> = Vec::new();
    for (text, origin) in given {
        let socket = one(&text, &origin, cwd, write_roots, &lookup)?;
        if !out.iter().any(|s| s.target == socket.target) {
            out.push(socket);
        }
    }
    Ok(out)
}

fn one(
    text: &str,
    origin: &str,
    cwd: &Path,
    write_roots: &[PathBuf],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<AllowedSocket, WrapperError> {
    let refuse = |why: String| WrapperError::Usage(format!("{origin} {text}: {why}"));
    let expanded = expand(text, lookup).map_err(refuse)?;
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        cwd.join(expanded)
    };
    let named = lexically_plain(&absolute).ok_or_else(|| {
        refuse("name it without `..` (CMD connects by this very name)".to_owned())
    })?;
    let target = std::fs::canonicalize(&named)
        .map_err(|e| refuse(format!("cannot be reached on the host: {e}")))?;
    let kind = std::fs::metadata(&target)
        .map_err(|e| refuse(format!("cannot be reached on the host: {e}")))?;
    if !std::os::unix::fs::FileTypeExt::is_socket(&kind.file_type()) {
        return Err(refuse("is not a Unix socket".to_owned()));
    }
    // A socket in a writable root could be swapped by CMD for one of the host's (renamed
    // or linked in from elsewhere in that root) and then let through: the sandbox's own
    // sockets there need no allowing.
    if let Some(root) = write_roots
        .iter()
        .find(|r| target.starts_with(r) || named.starts_with(r))
    {
        return Err(refuse(format!(
            "lies in the writable root {}, where CMD could put another socket in its place; \
             a socket the command binds itself there connects without allowing",
            root.display()
        )));
    }
    Ok(AllowedSocket {
        named,
        target,
        origin: origin.to_owned(),
    })
}

/// `$NAME`, `${NAME}` and a leading `~/` replaced; an unset or empty variable is an error
/// (an allowlist naming `$SSH_AUTH_SOCK` with no agent running must not become "").
fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    // As text of bytes, like the values put in (a character of the kind that stands for a
    // byte there is kept as itself).
    let text = crate::paths::exact_text::text_of(std::ffi::OsStr::new(text));
    let text = text.as_str();
    let mut out = String::new();
    let mut rest = text;
    if let Some(after) = rest.strip_prefix("~/") {
        let home = lookup("HOME")
            .filter(|h| !h.is_empty())
            .ok_or("HOME is not set, so ~ names nothing")?;
        out.push_str(&home);
        out.push('/');
        rest = after;
    }
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(inner) => {
                let end = inner.find('}').ok_or("a ${ without its }")?;
                (&inner[..end], &inner[end + 1..])
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("${name} is not a variable name"));
        }
        let value = lookup(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("{name} is not set"))?;
        out.push_str(&value);
        rest = tail;
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err("an empty path".to_owned());
    }
    Ok(crate::paths::exact_text::path_of(&out))
}

/// `path` without `.` components or repeated slashes; `None` if it has a `..`, which only
/// the filesystem can resolve.
pub fn lexically_plain(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => return None,
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_and_an_unset_one_is_refused() {
        let env = |name: &str| match name {
            "SSH_AUTH_SOCK" => Some("/tmp/ssh-x/agent.1".to_owned()),
            "HOME" => Some("/home/u".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            expand("$SSH_AUTH_SOCK", &env).unwrap(),
            PathBuf::from("/tmp/ssh-x/agent.1")
        );
        assert_eq!(
            expand("${HOME}/.gnupg/S.gpg-agent", &env).unwrap(),
            PathBuf::from("/home/u/.gnupg/S.gpg-agent")
        );
        assert_eq!(
            expand("~/run/x.sock", &env).unwrap(),
            PathBuf::from("/home/u/run/x.sock")
        );
        for bad in ["$NOPE", "$EMPTY", "${HOME", "$", "${A-B}", ""] {
            assert!(expand(bad, &env).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_plain_name_is_kept() {
        assert_eq!(
            lexically_plain(Path::new("/a//b/./c.sock")),
            Some(PathBuf::from("/a/b/c.sock"))
        );
        assert_eq!(lexically_plain(Path::new("/a/../c.sock")), None);
    }
}
