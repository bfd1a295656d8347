//! `--ssh-agent`: CMD reaches the user's SSH agent (its socket allowed as `--allow-socket`
//! allows one), and the private keys in `~/.ssh` read empty (hidden as `--hide` hides), so
//! that ssh and git over SSH sign through the agent while no key is inside.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::WrapperError;

/// How many entries of `~/.ssh` are looked at, at most: a directory of keys, not a tree.
const MAX_ENTRIES: usize = 1024;

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

/// The private keys in `home/.ssh` (files that start as OpenSSH, PEM or PuTTY private keys
/// do), each by its real path: what `--hide` would take.
pub fn private_keys(home: Option<&Path>) -> Vec<PathBuf> {
    let Some(dir) = home.map(|h| h.join(".ssh")) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for entry in entries.flatten().take(MAX_ENTRIES) {
        let Ok(path) = std::fs::canonicalize(entry.path()) else {
            continue;
        };
        if is_private_key(&path) && !keys.contains(&path) {
            keys.push(path);
        }
    }
    keys.sort();
    keys
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
        write("config", "Host git.test\n");
        let found: Vec<String> = private_keys(Some(&home))
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(found, ["deploy", "id_ed25519", "work.ppk"]);
        assert!(private_keys(Some(&home.join("none"))).is_empty());
        std::fs::remove_dir_all(&home).unwrap();
    }
}
