//! `--ssh-agent`: CMD reaches the user's SSH agent (its socket allowed as `--allow-socket`
//! allows one), and the private keys in `~/.ssh` read empty (hidden as `--hide` hides), so
//! that ssh and git over SSH sign through the agent while no key is inside.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::WrapperError;

/// How many entries under `~/.ssh` are looked at, at most: a directory of keys, not a tree.
const MAX_ENTRIES: usize = 1024;

/// How deep under `~/.ssh` keys are looked for (`~/.ssh/work/id_ed25519` is one down).
const MAX_DEPTH: usize = 3;

/// Largest ssh config file read for its `IdentityFile` lines.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The agent's socket, as `--allow-socket` takes it (netbox expands the variable).
pub fn socket() -> Result<String, WrapperError> {
    match std::env::var_os("SSH_AUTH_SOCK") {
        Some(path) if !path.is_empty() => Ok("$SSH_AUTH_SOCK".into()),
        _ => Err(WrapperError::Usage(
            "--ssh-agent: SSH_AUTH_SOCK is not set; start an agent (eval \"$(ssh-agent)\") \
             and add your keys (ssh-add -c KEY)"
                .into(),
        )),
    }
}

/// The private keys ssh would use: files under `home/.ssh` (a few directories deep) that
/// start as OpenSSH, PEM or PuTTY private keys do, and the files ssh's config names by
/// `IdentityFile` wherever they are, each by its real path: what `--hide` would take.
pub fn private_keys(home: Option<&Path>) -> Vec<PathBuf> {
    let Some(home) = home else {
        return Vec::new();
    };
    let dir = home.join(".ssh");
    let mut candidates = Vec::new();
    let mut pending = vec![(dir.clone(), 0)];
    let mut seen = 0;
    while let Some((at, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                break;
            }
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() && depth + 1 < MAX_DEPTH => {
                    pending.push((path, depth + 1));
                }
                Ok(kind) if kind.is_dir() => {}
                _ => candidates.push(path),
            }
        }
    }
    candidates.extend(identity_files(&dir.join("config"), home, &dir));
    let mut keys = Vec::new();
    for path in candidates {
        let Ok(path) = std::fs::canonicalize(path) else {
            continue;
        };
        if is_private_key(&path) && !keys.contains(&path) {
            keys.push(path);
        }
    }
    keys.sort();
    keys
}

/// The files an ssh config names by `IdentityFile`, in it and in the files it `Include`s
/// (one level; globs are not expanded), with `~` and `%d` as ssh reads them. A path with
/// another `%` token is left out: it names a file per host, which the scan of `~/.ssh`
/// finds if it lies there.
fn identity_files(config: &Path, home: &Path, ssh_dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut configs = vec![(config.to_owned(), true)];
    while let Some((config, may_include)) = configs.pop() {
        let Ok(text) = bridge::small_file::read_small_file(&config, MAX_CONFIG_BYTES) else {
            continue;
        };
        for line in text.lines() {
            let Some((key, value)) = config_line(line) else {
                continue;
            };
            let Some(path) = expand(value, home) else {
                continue;
            };
            if key.eq_ignore_ascii_case("identityfile") {
                files.push(path);
            } else if key.eq_ignore_ascii_case("include")
                && may_include
                && !value.contains(['*', '?', '['])
            {
                configs.push((ssh_dir.join(path), false));
            }
        }
    }
    files
}

/// A config line's keyword and argument (`Key value`, `Key=value`, quotes taken off).
fn config_line(line: &str) -> Option<(&str, &str)> {
    let line = line.trim();
    if line.starts_with('#') {
        return None;
    }
    let (key, value) = line.split_once(|c: char| c == '=' || c.is_whitespace())?;
    let value = value.trim_start_matches(|c: char| c == '=' || c.is_whitespace());
    Some((key, value.trim().trim_matches('"')))
}

/// A config path as ssh reads it: `~/` and `%d` are the home directory; a path with any
/// other `%` token is per host, and left out.
fn expand(value: &str, home: &Path) -> Option<PathBuf> {
    let value = match value.strip_prefix("~/") {
        Some(rest) => return (!rest.contains('%')).then(|| home.join(rest)),
        None => value.replace("%d", &home.to_string_lossy()),
    };
    (!value.contains('%') && !value.is_empty()).then(|| PathBuf::from(value))
}

/// Whether the file's first bytes are a private key's.
fn is_private_key(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = Vec::new();
    if file.take(128).read_to_end(&mut head).is_err() {
        return false;
    }
    let head = String::from_utf8_lossy(&head);
    (head.starts_with("-----BEGIN ") && head.contains("PRIVATE KEY-----"))
        || head.starts_with("PuTTY-User-Key-File")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_keys_are_found_by_what_they_hold_not_by_name() {
        let home = std::env::temp_dir().join(format!("netbox-ssh-keys-{}", std::process::id()));
        let ssh = home.join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        let write = |name: &str, text: &str| std::fs::write(ssh.join(name), text).unwrap();
        write("id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n");
        write("deploy", "-----BEGIN RSA PRIVATE KEY-----\nabc\n");
        write("work.ppk", "PuTTY-User-Key-File-3: ssh-ed25519\n");
        write("id_ed25519.pub", "ssh-ed25519 AAAA user@host\n");
        write("known_hosts", "git.test ssh-ed25519 AAAA\n");
        std::fs::create_dir_all(ssh.join("work/old")).unwrap();
        write(
            "work/nested_key",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
        );
        write(
            "work/old/deeper_key",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
        );
        // Keys kept outside ~/.ssh, named by the config or a file it includes.
        std::fs::create_dir_all(home.join("keys")).unwrap();
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n";
        std::fs::write(home.join("keys/named_key"), key).unwrap();
        std::fs::write(home.join("keys/included_key"), key).unwrap();
        std::fs::write(home.join("keys/per_host_key"), key).unwrap();
        write(
            "config",
            "Host git.test\n  IdentityFile ~/keys/named_key\n  IdentityFile=%d/keys/%h_key\n\
             Include work/extra.conf\n# IdentityFile ~/keys/per_host_key\n",
        );
        write(
            "work/extra.conf",
            "Host *\n\tIdentityFile \"%d/keys/included_key\"\n",
        );
        let mut found: Vec<String> = private_keys(Some(&home))
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                "deeper_key",
                "deploy",
                "id_ed25519",
                "included_key",
                "named_key",
                "nested_key",
                "work.ppk"
            ]
        );
        assert!(private_keys(Some(&home.join("none"))).is_empty());
        std::fs::remove_dir_all(&home).unwrap();
    }
}
