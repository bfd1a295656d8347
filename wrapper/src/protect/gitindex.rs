//! The gitlinks of a git index: the paths recorded with mode 160000, where git expects a
//! submodule. `git status` in the superproject enters each one whose `PATH/.git` is a
//! repository and reads that repository's config (`core.fsmonitor` runs a command), so
//! each of those `.git` entries is code to netbox (gitfiles(5), gitsubmodules(7)).
//!
//! Hand-written rather than a git library's: netbox reads one field (the mode) and the path
//! of each entry, at every start, and the libraries that parse the index (gix-index)
//! bring dozens of crates for the rest of git. The format is git's
//! Documentation/gitformat-index.txt: a 12-byte header (`DIRC`, version 2, 3 or 4, entry
//! count), then the entries (40 bytes of stat data with the mode at offset 24, the object
//! name, 16 bits of flags, 16 more in version 3+ when the extended bit is set, then the
//! path: NUL-terminated and padded to 8 bytes in versions 2 and 3, prefix-compressed in
//! version 4), then extensions, of which only `link` (a split index: the other entries
//! are in `sharedindex.<id>` beside it) matters here.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// The mode git records for a gitlink (a submodule's commit).
const GITLINK_MODE: u32 = 0o160000;

/// Longest path read from an entry (git's own limit is far below this).
const MAX_PATH_BYTES: usize = 64 << 10;

/// An index larger than this is not read (a repository with a few hundred thousand files
/// has an index of tens of MiB).
const MAX_INDEX_BYTES: u64 = 1 << 30;

/// Why an index could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a git index: {0}")]
    Format(&'static str),
}

fn format<T>(why: &'static str) -> Result<T, IndexError> {
    Err(IndexError::Format(why))
}

/// The gitlinks of the index at `path` (and of its shared index, for a split index), as
/// paths relative to the work tree. `hash_len` is the object name's length: 20 (SHA-1) or
/// 32 (SHA-256). A path that is not a plain relative path (empty, `.`, `..` or `.git`
/// components, which git itself refuses) is skipped. A missing index has no gitlinks.
pub fn gitlinks(path: &Path, hash_len: usize) -> Result<Vec<PathBuf>, IndexError> {
    let mut found = Vec::new();
    let shared = match read_index(path, hash_len, &mut found) {
        Err(IndexError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        other => other?,
    };
    if let Some(id) = shared {
        let shared_path = path.with_file_name(format!("sharedindex.{id}"));
        // The shared index may hold no link of its own.
        read_index(&shared_path, hash_len, &mut found)?;
    }
    found.sort();
    found.dedup();
    Ok(found)
}

/// Reads one index file, adding its gitlinks to `found`; returns the id of its shared
/// index if it is split.
fn read_index(
    path: &Path,
    hash_len: usize,
    found: &mut Vec<PathBuf>,
) -> Result<Option<String>, IndexError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let size = file.metadata()?.len();
    if size > MAX_INDEX_BYTES {
        return format("larger than 1 GiB");
    }
    let mut reader = Counted {
        inner: BufReader::with_capacity(64 << 10, file),
        read: 0,
    };
    parse_entries(&mut reader, hash_len, found)?;
    // Extensions follow until only the trailing checksum is left.
    let trailer = u64::try_from(hash_len).unwrap_or(u64::MAX);
    let mut shared = None;
    while size.saturating_sub(reader.read) > trailer {
        let mut head = [0u8; 8];
        reader.read_exact(&mut head)?;
        let len = u64::from(u32::from_be_bytes([head[4], head[5], head[6], head[7]]));
        if &head[..4] == b"link" && len >= trailer {
            let mut id = vec![0u8; hash_len];
            reader.read_exact(&mut id)?;
            if id.iter().any(|b| *b != 0) {
                shared = Some(id.iter().map(|b| format!("{b:02x}")).collect());
            }
            skip(&mut reader, len - trailer)?;
        } else {
            skip(&mut reader, len)?;
        }
    }
    Ok(shared)
}

/// Reads the header and every entry.
fn parse_entries(
    reader: &mut impl BufRead,
    hash_len: usize,
    found: &mut Vec<PathBuf>,
) -> Result<(), IndexError> {
    let mut header = [0u8; 12];
    reader.read_exact(&mut header)?;
    if &header[..4] != b"DIRC" {
        return format("no DIRC signature");
    }
    let version = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if !(2..=4).contains(&version) {
        return format("unknown index version");
    }
    let count = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    // Stat data (40 bytes), the object name, then 16 bits of flags.
    let fixed = 40 + hash_len + 2;
    let mut head = vec![0u8; fixed];
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        reader.read_exact(&mut head)?;
        let mode = u32::from_be_bytes([head[24], head[25], head[26], head[27]]);
        let flags = u16::from_be_bytes([head[fixed - 2], head[fixed - 1]]);
        let mut entry_len = fixed;
        if version >= 3 && flags & 0x4000 != 0 {
            let mut extended = [0u8; 2];
            reader.read_exact(&mut extended)?;
            entry_len += 2;
        }
        let path = if version == 4 {
            let strip = read_varint(reader)?;
            let keep = previous
                .len()
                .checked_sub(usize::try_from(strip).unwrap_or(usize::MAX))
                .map_or_else(|| format("prefix longer than the previous path"), Ok)?;
            previous.truncate(keep);
            read_until_nul(reader, &mut previous)?;
            previous.clone()
        } else {
            let mut path = Vec::new();
            read_until_nul(reader, &mut path)?;
            // Padded with 1 to 8 NULs (the terminating one included) to a multiple of 8.
            let padded = (entry_len + path.len() + 8) & !7;
            skip(
                reader,
                u64::try_from(padded - entry_len - path.len() - 1).unwrap_or(0),
            )?;
            path
        };
        if mode == GITLINK_MODE {
            if let Some(path) = plain_relative(&path) {
                found.push(path);
            }
        }
    }
    Ok(())
}

/// Reads a path up to its NUL into `into` (appending), at most `MAX_PATH_BYTES` long.
fn read_until_nul(reader: &mut impl BufRead, into: &mut Vec<u8>) -> Result<(), IndexError> {
    let mut limited = reader.take(u64::try_from(MAX_PATH_BYTES).unwrap_or(u64::MAX) + 1);
    limited.read_until(0, into)?;
    if into.last() != Some(&0) {
        return format("a path is unterminated or too long");
    }
    into.pop();
    if into.is_empty() {
        return format("an empty path");
    }
    Ok(())
}

/// Git's offset varint (varint.c): 7 bits a byte, most significant first, each
/// continuation adding one.
fn read_varint(reader: &mut impl Read) -> Result<u64, IndexError> {
    let mut byte = [0u8; 1];
    reader.read_exact(&mut byte)?;
    let mut value = u64::from(byte[0] & 0x7f);
    while byte[0] & 0x80 != 0 {
        value = value
            .checked_add(1)
            .filter(|v| v.leading_zeros() >= 7)
            .map_or_else(|| format("varint overflow"), Ok)?;
        reader.read_exact(&mut byte)?;
        value = (value << 7) | u64::from(byte[0] & 0x7f);
    }
    Ok(value)
}

fn skip(reader: &mut impl Read, bytes: u64) -> Result<(), IndexError> {
    let skipped = std::io::copy(&mut reader.take(bytes), &mut std::io::sink())?;
    if skipped != bytes {
        return format("truncated");
    }
    Ok(())
}

/// `raw` as a relative path of plain components, or `None`.
fn plain_relative(raw: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let plain = raw
        .split(|b| *b == b'/')
        .all(|c| !matches!(c, b"" | b"." | b".." | b".git"));
    plain.then(|| PathBuf::from(std::ffi::OsStr::from_bytes(raw)))
}

/// A reader that counts what was read through it.
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += u64::try_from(n).unwrap_or(0);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.read += u64::try_from(amount).unwrap_or(0);
        self.inner.consume(amount);
    }
}

/// The length of a repository's object names: 32 bytes if its config sets
/// `extensions.objectFormat = sha256`, else 20 (SHA-1). `common_dir` holds that config.
pub fn object_name_len(common_dir: &Path) -> usize {
    let config = std::fs::File::open(common_dir.join("config"))
        .map(|f| {
            let mut text = String::new();
            let _ = f.take(1 << 20).read_to_string(&mut text);
            text
        })
        .unwrap_or_default();
    let mut in_extensions = false;
    for line in config.lines() {
        let line = line.trim();
        if let Some(section) = line.strip_prefix('[') {
            in_extensions = section
                .trim_end_matches(']')
                .trim()
                .eq_ignore_ascii_case("extensions");
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_extensions
            && key.trim().eq_ignore_ascii_case("objectformat")
            && value
                .trim()
                .trim_matches('"')
                .eq_ignore_ascii_case("sha256")
        {
            return 32;
        }
    }
    20
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git is needed for these tests");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    fn repo(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("netbox-gitindex-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q"]);
        dir
    }

    const COMMIT: &str = "1ed07c15e9288a1f55775b0d310961bc7e9ecd7d";
    const BLOB: &str = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";

    /// An index git itself wrote, in each version, with files and gitlinks at paths that
    /// share prefixes (version 4 compresses them) and one long enough to need the
    /// extended name length.
    #[test]
    fn finds_the_gitlinks_git_wrote_in_every_version() {
        let long = format!("deep/{}/sub", "d".repeat(5000));
        for version in ["2", "3", "4"] {
            let dir = repo(&format!("v{version}"));
            for (mode, sha, path) in [
                ("100644", BLOB, "a.txt"),
                ("160000", COMMIT, "lib"),
                ("100644", BLOB, "lib2/file"),
                ("160000", COMMIT, "vendor/one"),
                ("160000", COMMIT, "vendor/onetwo"),
                ("100644", BLOB, "vendor/x"),
                ("160000", COMMIT, long.as_str()),
            ] {
                git(
                    &dir,
                    &[
                        "update-index",
                        "--add",
                        "--cacheinfo",
                        &format!("{mode},{sha},{path}"),
                    ],
                );
            }
            if version != "2" {
                // An extended flag (skip-worktree) is what version 3 adds to an entry.
                git(&dir, &["update-index", "--skip-worktree", "a.txt"]);
            }
            git(&dir, &["update-index", "--index-version", version]);
            let written = std::fs::read(dir.join(".git/index")).unwrap();
            assert_eq!(written[7].to_string(), version, "git wrote another version");
            let got = gitlinks(&dir.join(".git/index"), 20).unwrap();
            assert_eq!(
                got,
                vec![
                    PathBuf::from(&long),
                    PathBuf::from("lib"),
                    PathBuf::from("vendor/one"),
                    PathBuf::from("vendor/onetwo"),
                ],
                "version {version}"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_split_index_is_read_with_its_shared_part() {
        let dir = repo("split");
        git(
            &dir,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{COMMIT},shared"),
            ],
        );
        git(&dir, &["update-index", "--split-index"]);
        git(
            &dir,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{COMMIT},later"),
            ],
        );
        let shared = std::fs::read_dir(dir.join(".git"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("sharedindex."));
        assert!(shared, "git wrote no shared index");
        let got = gitlinks(&dir.join(".git/index"), 20).unwrap();
        assert_eq!(got, vec![PathBuf::from("later"), PathBuf::from("shared")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_index_has_none_and_a_broken_one_is_an_error() {
        let dir = repo("broken");
        assert!(gitlinks(&dir.join(".git/index"), 20).unwrap().is_empty());
        git(
            &dir,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{COMMIT},lib"),
            ],
        );
        let index = std::fs::read(dir.join(".git/index")).unwrap();
        for cut in [4, 11, 12, 40, 70, index.len() - 21] {
            std::fs::write(dir.join("cut"), &index[..cut]).unwrap();
            assert!(gitlinks(&dir.join("cut"), 20).is_err(), "cut at {cut}");
        }
        std::fs::write(dir.join("cut"), b"not an index at all").unwrap();
        assert!(matches!(
            gitlinks(&dir.join("cut"), 20),
            Err(IndexError::Format(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unsafe_paths_are_skipped() {
        for (raw, ok) in [
            (&b"lib"[..], true),
            (b"a/b", true),
            (b"a/../b", false),
            (b"./a", false),
            (b"a//b", false),
            (b"/abs", false),
            (b"a/.git/b", false),
            (b".gitx", true),
        ] {
            assert_eq!(
                plain_relative(raw).is_some(),
                ok,
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn sha256_repositories_are_recognised_by_their_config() {
        let dir = std::env::temp_dir().join(format!("netbox-objfmt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config"), "[core]\n\tbare = false\n").unwrap();
        assert_eq!(object_name_len(&dir), 20);
        std::fs::write(
            dir.join("config"),
            "[core]\n[Extensions]\n\tobjectFormat = sha256\n",
        )
        .unwrap();
        assert_eq!(object_name_len(&dir), 32);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
