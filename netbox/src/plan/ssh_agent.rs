//! `--ssh-agent`: CMD reaches the user's SSH agent (its socket allowed as `--allow-socket`
//! allows one), and the private keys in `~/.ssh` read empty (hidden as `--hide` hides), so
//! that ssh and git over SSH sign through the agent while no key is inside.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::WrapperError;
use crate::paths::exact_text::{path_of, text_of};

/// How many entries of one directory under `~/.ssh` are looked at, at most (a directory of
/// control sockets can hold thousands); past it, netbox says which directory it did not
/// finish.
const MAX_ENTRIES_PER_DIR: usize = 4096;

/// How many directories under `~/.ssh` are looked in, at most.
const MAX_DIRS: usize = 256;

/// How deep under `~/.ssh` keys are looked for (`~/.ssh/work/id_ed25519` is one down).
const MAX_DEPTH: usize = 3;

/// Largest ssh config file read for its `IdentityFile` lines.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Config files read at most: `~/.ssh/config` and what it includes.
const MAX_CONFIGS: usize = 64;

/// How much of a file is searched for a private key's first line (a PEM file may start with
/// `Bag Attributes` lines).
const KEY_HEAD_BYTES: u64 = 4096;

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

/// The private keys ssh would use, each by its real path (what `--hide` takes), and what
/// could not be searched whole (said on stderr: a key there stays readable).
#[derive(Debug, Default)]
pub struct Keys {
    pub found: Vec<PathBuf>,
    pub unsearched: Vec<String>,
}

/// Files under `home/.ssh` (a few directories deep, symlinked directories followed) that
/// hold an OpenSSH, PEM or PuTTY private key, and the files ssh's config (and what it
/// `Include`s) names by `IdentityFile`, wherever they are.
pub fn private_keys(home: Option<&Path>) -> Keys {
    let mut keys = Keys::default();
    let Some(home) = home else {
        return keys;
    };
    let dir = home.join(".ssh");
    let mut candidates = Vec::new();
    let mut pending = vec![(dir.clone(), 0)];
    let mut visited = std::collections::HashSet::new();
    while let Some((at, depth)) = pending.pop() {
        let Ok(real) = std::fs::canonicalize(&at) else {
            continue;
        };
        if !visited.insert(real) {
            continue;
        }
        if visited.len() > MAX_DIRS {
            keys.unsearched
                .push(format!("{} (over {MAX_DIRS} directories)", at.display()));
            break;
        }
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for (n, entry) in entries.flatten().enumerate() {
            if n >= MAX_ENTRIES_PER_DIR {
                keys.unsearched.push(format!(
                    "{} (over {MAX_ENTRIES_PER_DIR} entries)",
                    at.display()
                ));
                break;
            }
            let path = entry.path();
            // A symlink to a directory is followed (the visited set ends a loop).
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() && depth + 1 < MAX_DEPTH => {
                    pending.push((path, depth + 1));
                }
                // Only a regular file is opened to look at (never a device a link leads to).
                Ok(meta) if meta.is_file() => candidates.push(path),
                _ => {}
            }
        }
    }
    candidates.extend(identity_files(
        &dir.join("config"),
        home,
        &dir,
        &mut keys.unsearched,
    ));
    for path in candidates {
        let Ok(path) = std::fs::canonicalize(path) else {
            continue;
        };
        if is_private_key(&path) && !keys.found.contains(&path) {
            keys.found.push(path);
        }
    }
    keys.found.sort();
    keys
}

/// The files an ssh config names by `IdentityFile`, in it and in the files it `Include`s
/// (globs in a name's last part expanded, several names to a line), with `~`, `%d` and
/// `${VAR}` as ssh reads them. A path with another `%` token is left out: it names a file
/// per host, which the scan of `~/.ssh` finds if it lies there.
fn identity_files(
    config: &Path,
    home: &Path,
    ssh_dir: &Path,
    unsearched: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut configs = vec![config.to_owned()];
    let mut queued = std::collections::HashSet::new();
    let mut named_once = std::collections::HashSet::new();
    let mut read = 0;
    while let Some(config) = configs.pop() {
        // Each file once, by its real path: an `Include` of itself, or a thousand lines
        // naming one file, reads it once.
        let Ok(real) = std::fs::canonicalize(&config) else {
            continue;
        };
        if !queued.insert(real.clone()) {
            continue;
        }
        read += 1;
        if read > MAX_CONFIGS {
            unsearched.push(format!(
                "the ssh config files past {MAX_CONFIGS} ({} and others)",
                config.display()
            ));
            break;
        }
        if std::fs::metadata(&real).is_ok_and(|m| m.is_file() && m.len() > MAX_CONFIG_BYTES) {
            unsearched.push(format!(
                "{} (over {MAX_CONFIG_BYTES} bytes)",
                config.display()
            ));
            continue;
        }
        // As bytes: one byte that is not UTF-8 must not lose every line, nor a key named
        // in such bytes be looked for at another path (paths/exact_text.rs).
        let Ok(bytes) = bridge::small_file::read_small_bytes(&real, MAX_CONFIG_BYTES) else {
            continue;
        };
        let text = text_of(std::ffi::OsStr::from_bytes(&bytes));
        for line in text.lines() {
            let Some((key, value)) = config_line(line) else {
                continue;
            };
            if key.eq_ignore_ascii_case("identityfile") {
                files.extend(expand(value, home));
            } else if key.eq_ignore_ascii_case("include") {
                for name in value.split_ascii_whitespace() {
                    let Some(path) = expand(unquoted(name), home) else {
                        continue;
                    };
                    let named = ssh_dir.join(path);
                    if !named_once.insert(named.clone()) {
                        continue;
                    }
                    if configs.len() + read > 2 * MAX_CONFIGS {
                        unsearched.push(format!(
                            "{} and what else {} includes (over {MAX_CONFIGS} files)",
                            named.display(),
                            config.display()
                        ));
                        break;
                    }
                    configs.extend(matching(&named, unsearched));
                }
            }
        }
    }
    files
}

/// A config line's keyword and argument (`Key value`, `Key=value`), the argument's quotes
/// taken off.
fn config_line(line: &str) -> Option<(&str, &str)> {
    // ssh splits and trims at ASCII whitespace; a name may hold U+00A0.
    let line = line.trim_ascii();
    if line.starts_with('#') {
        return None;
    }
    let (key, value) = line.split_once(|c: char| c == '=' || c.is_ascii_whitespace())?;
    let value = value.trim_start_matches(|c: char| c == '=' || c.is_ascii_whitespace());
    Some((key, unquoted(value.trim_ascii())))
}

fn unquoted(value: &str) -> &str {
    value.trim_matches(|c| c == '"' || c == '\'')
}

/// A config path as ssh reads it: `~/` and `%d` are the home directory, `${VAR}` the
/// variable; a path with any other `%` token is per host, and left out, as is one naming a
/// variable that is not set. `value` and the result are byte for byte (exact_text).
fn expand(value: &str, home: &Path) -> Option<PathBuf> {
    let home = text_of(home.as_os_str());
    let mut value = match value.strip_prefix("~/") {
        Some(rest) => format!("{home}/{rest}"),
        None => value.replace("%d", &home),
    };
    // One pass, on from after each value put in: a value is not expanded again (ssh does
    // not), so one that names itself cannot loop.
    let mut from = 0;
    while let Some(found) = value[from..].find("${") {
        let start = from + found;
        let end = start + value[start..].find('}')?;
        let var = text_of(&std::env::var_os(&value[start + 2..end])?);
        value.replace_range(start..=end, &var);
        from = start + var.len();
    }
    (!value.contains('%') && !value.is_empty()).then(|| path_of(&value))
}

/// The files a name of `Include` stands for: itself, or, with `*` or `?` in its last part,
/// the files of its directory that part matches.
fn matching(path: &Path, unsearched: &mut Vec<String>) -> Vec<PathBuf> {
    let Some(pattern) = path.file_name().map(std::ffi::OsStr::as_bytes) else {
        return Vec::new();
    };
    if !pattern.iter().any(|b| matches!(b, b'*' | b'?')) {
        return vec![path.to_owned()];
    }
    let Some(dir) = path.parent() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .take(MAX_ENTRIES_PER_DIR)
        .filter(|e| wildcard(pattern, e.file_name().as_bytes()))
        .map(|e| e.path())
        .collect();
    found.sort();
    if found.len() > MAX_CONFIGS {
        unsearched.push(format!(
            "the files past {MAX_CONFIGS} that Include {} names",
            path.display()
        ));
        found.truncate(MAX_CONFIGS);
    }
    found
}

/// Whether `name` matches `pattern`, whose `*` stands for any run of bytes and `?` for one
/// (as ssh's `Include` reads them; a leading dot is matched as any other byte).
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether the file holds a private key: a PEM or OpenSSH `-----BEGIN … PRIVATE KEY-----`
/// line in its first bytes (after any `Bag Attributes` lines), or a PuTTY key file.
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
    if file.take(KEY_HEAD_BYTES).read_to_end(&mut head).is_err() {
        return false;
    }
    let head = String::from_utf8_lossy(&head);
    head.starts_with("PuTTY-User-Key-File")
        || head
            .lines()
            .any(|l| l.starts_with("-----BEGIN ") && l.ends_with("PRIVATE KEY-----"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(keys: &Keys) -> Vec<String> {
        let mut found: Vec<String> = keys
            .found
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        found.sort();
        found
    }

    #[test]
    fn private_keys_are_found_by_what_they_hold_not_by_name() {
        let home = std::env::temp_dir().join(format!("netbox-ssh-keys-{}", std::process::id()));
        let ssh = home.join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        let write = |name: &str, text: &[u8]| std::fs::write(ssh.join(name), text).unwrap();
        let key = b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n";
        write("id_ed25519", key);
        write("deploy", b"-----BEGIN RSA PRIVATE KEY-----\nabc\n");
        write("work.ppk", b"PuTTY-User-Key-File-3: ssh-ed25519\n");
        write("id_ed25519.pub", b"ssh-ed25519 AAAA user@host\n");
        write("known_hosts", b"git.test ssh-ed25519 AAAA\n");
        // A PEM file as a PKCS#12 export writes it.
        write(
            "exported",
            b"Bag Attributes\n    localKeyID: 01\n-----BEGIN PRIVATE KEY-----\nabc\n",
        );
        std::fs::create_dir_all(ssh.join("work/old")).unwrap();
        write("work/nested_key", key);
        write("work/old/deeper_key", key);
        // A directory of keys reached through a symlink, and a link loop.
        std::fs::create_dir_all(home.join("dotkeys")).unwrap();
        std::fs::write(home.join("dotkeys/linked_key"), key).unwrap();
        std::os::unix::fs::symlink(home.join("dotkeys"), ssh.join("linked")).unwrap();
        std::os::unix::fs::symlink(&ssh, ssh.join("work/loop")).unwrap();
        // Keys kept outside ~/.ssh, named by the config or the files it includes.
        std::fs::create_dir_all(home.join("keys")).unwrap();
        for name in [
            "named_key",
            "included_key",
            "glob_key",
            "quoted_key",
            "var_key",
            "per_host_key",
        ] {
            std::fs::write(home.join("keys").join(name), key).unwrap();
        }
        std::env::set_var("NETBOX_TEST_SSH_KEYS", home.join("keys"));
        // A byte that is not UTF-8 (a Latin-1 comment) must not lose the other lines.
        write(
            "config",
            b"# caf\xe9\nHost git.test\n  IdentityFile ~/keys/named_key\n  IdentityFile=%d/keys/%h_key\n\
              Include work/extra.conf config.d/*.conf\n# IdentityFile ~/keys/per_host_key\n\
              IdentityFile '~/keys/quoted_key'\nIdentityFile ${NETBOX_TEST_SSH_KEYS}/var_key\n",
        );
        write(
            "work/extra.conf",
            b"Host *\n\tIdentityFile \"%d/keys/included_key\"\n",
        );
        std::fs::create_dir_all(ssh.join("config.d")).unwrap();
        write("config.d/10-work.conf", b"IdentityFile ~/keys/glob_key\n");
        let keys = private_keys(Some(&home));
        assert_eq!(
            names(&keys),
            [
                "deeper_key",
                "deploy",
                "exported",
                "glob_key",
                "id_ed25519",
                "included_key",
                "linked_key",
                "named_key",
                "nested_key",
                "quoted_key",
                "var_key",
                "work.ppk"
            ]
        );
        assert!(keys.unsearched.is_empty(), "{:?}", keys.unsearched);
        assert!(private_keys(Some(&home.join("none"))).found.is_empty());
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn a_directory_too_large_to_search_is_said_and_the_others_still_searched() {
        let home = std::env::temp_dir().join(format!("netbox-ssh-many-{}", std::process::id()));
        let ssh = home.join(".ssh");
        std::fs::create_dir_all(ssh.join("sockets")).unwrap();
        std::fs::create_dir_all(ssh.join("w1")).unwrap();
        for i in 0..MAX_ENTRIES_PER_DIR + 10 {
            std::fs::write(ssh.join(format!("sockets/s{i}")), "").unwrap();
        }
        std::fs::write(
            ssh.join("w1/key"),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
        )
        .unwrap();
        let keys = private_keys(Some(&home));
        assert_eq!(names(&keys), ["key"]);
        assert_eq!(keys.unsearched.len(), 1, "{:?}", keys.unsearched);
        assert!(keys.unsearched[0].contains("sockets"));
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn a_config_that_loops_or_fans_out_ends_and_says_what_it_left() {
        let home = std::env::temp_dir().join(format!("netbox-ssh-fan-{}", std::process::id()));
        let ssh = home.join(".ssh");
        std::fs::create_dir_all(ssh.join("conf.d")).unwrap();
        // A variable that names itself is put in once, not again.
        std::env::set_var("NETBOX_TEST_SSH_LOOP", "${NETBOX_TEST_SSH_LOOP}");
        assert_eq!(
            expand("${NETBOX_TEST_SSH_LOOP}/id", &home),
            Some(PathBuf::from("${NETBOX_TEST_SSH_LOOP}/id"))
        );
        // A config that includes itself a thousand times, and seventy files by a glob.
        let mut config = String::new();
        for _ in 0..1000 {
            config.push_str("Include config\n");
        }
        config.push_str("Include conf.d/*\n");
        std::fs::write(ssh.join("config"), config).unwrap();
        for i in 0..70 {
            std::fs::write(
                ssh.join(format!("conf.d/{i:02}")),
                format!("IdentityFile ~/k{i}\n"),
            )
            .unwrap();
        }
        let keys = private_keys(Some(&home));
        assert!(
            keys.unsearched.iter().any(|u| u.contains("conf.d")),
            "{:?}",
            keys.unsearched
        );
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn include_patterns_match_as_ssh_reads_them() {
        assert!(wildcard(b"*.conf", b"10-work.conf"));
        assert!(wildcard(b"a?c*", b"abcdef"));
        assert!(!wildcard(b"*.conf", b"work.conf.bak"));
        assert!(wildcard(b"*", b""));
        assert!(!wildcard(b"?", b""));
    }
}
