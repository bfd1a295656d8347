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

/// What an index records that netbox pins.
#[derive(Debug, Default)]
pub struct Scan {
    /// Its gitlinks, relative to the work tree, sorted.
    pub gitlinks: Vec<PathBuf>,
    /// The shared index a split index reads its other entries from: as much the index as
    /// the index itself.
    pub shared_index: Option<PathBuf>,
}

/// The gitlinks of the index at `path` (and of its shared index, for a split index), as
/// paths relative to the work tree. `hash_len` is the object name's length: 20 (SHA-1) or
/// 32 (SHA-256). A path that is not a plain relative path (empty, `.`, `..` or `.git`
/// components, which git itself refuses) is skipped. A missing index has no gitlinks.
pub fn gitlinks(path: &Path, hash_len: usize) -> Result<Scan, IndexError> {
    let mut modes = Vec::new();
    let mut own = Vec::new();
    let link = match read_index(path, hash_len, |i, mode, name| {
        modes.push(mode);
        if mode == GITLINK_MODE {
            own.push((i, name.to_vec()));
        }
    }) {
        Err(IndexError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Scan::default())
        }
        other => other?,
    };
    let mut found: Vec<PathBuf> = Vec::new();
    let mut scan = Scan::default();
    match link {
        None => found.extend(own.iter().filter_map(|(_, name)| plain_relative(name))),
        Some(link) => {
            // The first entries replace, in order, the shared entries the replace bitmap
            // marks (their names may be empty: the shared entry's is meant); the rest are
            // added. Shared entries the delete bitmap marks are gone.
            let replaced = link.replaced.len();
            found.extend(
                own.iter()
                    .filter(|(i, _)| *i >= replaced)
                    .filter_map(|(_, name)| plain_relative(name)),
            );
            let shared_path = path.with_file_name(format!("sharedindex.{}", link.id));
            let replacing: std::collections::HashMap<u64, usize> = link
                .replaced
                .iter()
                .enumerate()
                .map(|(rank, position)| (*position, rank))
                .collect();
            let deleted: std::collections::HashSet<u64> = link.deleted.into_iter().collect();
            let mut unmatched = false;
            read_index(&shared_path, hash_len, |i, mode, name| {
                let i = u64::try_from(i).unwrap_or(u64::MAX);
                if deleted.contains(&i) {
                    return;
                }
                let mode = match replacing.get(&i) {
                    Some(rank) => match modes.get(*rank) {
                        Some(mode) => *mode,
                        None => {
                            unmatched = true;
                            mode
                        }
                    },
                    None => mode,
                };
                if mode == GITLINK_MODE {
                    found.extend(plain_relative(name));
                }
            })?;
            if unmatched {
                return format("the split index replaces more entries than it has");
            }
            scan.shared_index = Some(shared_path);
        }
    }
    found.sort();
    found.dedup();
    scan.gitlinks = found;
    Ok(scan)
}

/// A split index's `link` extension: its shared index and the two bitmaps.
struct Link {
    id: String,
    deleted: Vec<u64>,
    replaced: Vec<u64>,
}

/// Reads one index file, calling `entry` with each entry's position, mode and name (empty
/// for a split index's replacing entries); returns its `link`, if it is split.
fn read_index(
    path: &Path,
    hash_len: usize,
    entry: impl FnMut(usize, u32, &[u8]),
) -> Result<Option<Link>, IndexError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return format("not a regular file");
    }
    let size = meta.len();
    if size > MAX_INDEX_BYTES {
        return format("larger than 1 GiB");
    }
    let mut reader = Counted {
        inner: BufReader::with_capacity(64 << 10, file),
        read: 0,
    };
    parse_entries(&mut reader, hash_len, entry)?;
    // Extensions follow until only the trailing checksum is left.
    let trailer = u64::try_from(hash_len).unwrap_or(u64::MAX);
    let mut link = None;
    while size.saturating_sub(reader.read) > trailer {
        let mut head = [0u8; 8];
        reader.read_exact(&mut head)?;
        let len = u64::from(u32::from_be_bytes([head[4], head[5], head[6], head[7]]));
        if &head[..4] != b"link" {
            skip(&mut reader, len)?;
            continue;
        }
        if len < trailer || len > 1 << 28 {
            return format("a link extension of impossible length");
        }
        let mut data = vec![0u8; usize::try_from(len).unwrap_or(0)];
        reader.read_exact(&mut data)?;
        let (id, bitmaps) = data.split_at(hash_len);
        if id.iter().all(|b| *b == 0) {
            continue;
        }
        let (deleted, used) = ewah_positions(bitmaps)?;
        let (replaced, _) = ewah_positions(&bitmaps[used..])?;
        link = Some(Link {
            id: id.iter().map(|b| format!("{b:02x}")).collect(),
            deleted,
            replaced,
        });
    }
    Ok(link)
}

/// Most bits a bitmap may mark: more than an index of 1 GiB could have entries for.
const MAX_BITMAP_BITS: u64 = 1 << 28;

/// The set bits of an EWAH-compressed bitmap (git's ewah/ewah_io.c: bit count, word
/// count, the 64-bit words, the position of the last run word, all big-endian), and how
/// many bytes it took. Each run word holds a run bit, a run length (32 bits) of words all
/// that bit, and a count (31 bits) of literal words that follow it.
fn ewah_positions(data: &[u8]) -> Result<(Vec<u64>, usize), IndexError> {
    let be32 = |at: usize| -> Result<u64, IndexError> {
        data.get(at..at + 4)
            .map(|b| u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            .map_or_else(|| format("a truncated bitmap"), Ok)
    };
    let bits = be32(0)?;
    let words = usize::try_from(be32(4)?).unwrap_or(usize::MAX);
    if bits > MAX_BITMAP_BITS {
        return format("a bitmap larger than any index");
    }
    let word_bytes = words
        .checked_mul(8)
        .map_or_else(|| format("a bitmap too large"), Ok)?;
    let end = 8usize
        .checked_add(word_bytes)
        .and_then(|e| e.checked_add(4))
        .filter(|e| *e <= data.len())
        .map_or_else(|| format("a truncated bitmap"), Ok)?;
    let word = |i: usize| {
        let at = 8 + i * 8;
        let mut b = [0u8; 8];
        b.copy_from_slice(&data[at..at + 8]);
        u64::from_be_bytes(b)
    };
    let mut set = Vec::new();
    let mut position: u64 = 0;
    let mut i = 0;
    while i < words {
        let run_word = word(i);
        i += 1;
        let run_length = ((run_word >> 1) & 0xffff_ffff) * 64;
        if run_word & 1 != 0 {
            if position + run_length > bits {
                return format("a bitmap run past its size");
            }
            set.extend(position..position + run_length);
        }
        position += run_length;
        let literals = usize::try_from(run_word >> 33).unwrap_or(usize::MAX);
        for _ in 0..literals {
            if i >= words {
                return format("a bitmap's literal words run past its end");
            }
            let literal = word(i);
            i += 1;
            for bit in 0..64 {
                if literal & (1 << bit) != 0 {
                    set.push(position + bit);
                }
            }
            position += 64;
        }
        if position > bits + 64 {
            return format("a bitmap past its size");
        }
    }
    set.retain(|p| *p < bits);
    Ok((set, end))
}

/// Reads the header and every entry, calling `entry` with each.
fn parse_entries(
    reader: &mut impl BufRead,
    hash_len: usize,
    mut entry: impl FnMut(usize, u32, &[u8]),
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
    let mut path: Vec<u8> = Vec::new();
    for i in 0..count {
        reader.read_exact(&mut head)?;
        let mode = u32::from_be_bytes([head[24], head[25], head[26], head[27]]);
        let flags = u16::from_be_bytes([head[fixed - 2], head[fixed - 1]]);
        let mut entry_len = fixed;
        if version >= 3 && flags & 0x4000 != 0 {
            let mut extended = [0u8; 2];
            reader.read_exact(&mut extended)?;
            entry_len += 2;
        }
        let name: &[u8] = if version == 4 {
            let strip = read_varint(reader)?;
            let keep = previous
                .len()
                .checked_sub(usize::try_from(strip).unwrap_or(usize::MAX))
                .map_or_else(|| format("prefix longer than the previous path"), Ok)?;
            previous.truncate(keep);
            read_until_nul(reader, &mut previous)?;
            if previous.len() > MAX_PATH_BYTES {
                return format("a path is too long");
            }
            &previous
        } else {
            path.clear();
            read_until_nul(reader, &mut path)?;
            // Padded with 1 to 8 NULs (the terminating one included) to a multiple of 8.
            let padded = (entry_len + path.len() + 8) & !7;
            skip(
                reader,
                u64::try_from(padded - entry_len - path.len() - 1).unwrap_or(0),
            )?;
            &path
        };
        entry(usize::try_from(i).unwrap_or(usize::MAX), mode, name);
    }
    Ok(())
}

/// Reads a path up to its NUL into `into` (appending), at most `MAX_PATH_BYTES` of it.
/// It may be empty: a split index's replacing entries have no name of their own.
fn read_until_nul(reader: &mut impl BufRead, into: &mut Vec<u8>) -> Result<(), IndexError> {
    let mut limited = reader.take(u64::try_from(MAX_PATH_BYTES).unwrap_or(u64::MAX) + 1);
    limited.read_until(0, into)?;
    if into.last() != Some(&0) {
        return format("a path is unterminated or too long");
    }
    into.pop();
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
    let sha256 = super::gitconfig::read(&common_dir.join("config"))
        .unwrap_or_default()
        .iter()
        .any(|e| {
            e.section == "extensions"
                && e.key == "objectformat"
                && e.value
                    .as_deref()
                    .is_some_and(|v| v.eq_ignore_ascii_case("sha256"))
        });
    if sha256 {
        32
    } else {
        20
    }
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

    /// Records `path` in the index with `mode` and object `sha`, as git does.
    fn add_entry(dir: &Path, mode: &str, sha: &str, path: &str) {
        git(
            dir,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("{mode},{sha},{path}"),
            ],
        );
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
                add_entry(&dir, mode, sha, path);
            }
            if version != "2" {
                // An extended flag (skip-worktree) is what version 3 adds to an entry.
                git(&dir, &["update-index", "--skip-worktree", "a.txt"]);
            }
            git(&dir, &["update-index", "--index-version", version]);
            let written = std::fs::read(dir.join(".git/index")).unwrap();
            assert_eq!(written[7].to_string(), version, "git wrote another version");
            let got = gitlinks(&dir.join(".git/index"), 20).unwrap().gitlinks;
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
        add_entry(&dir, "160000", COMMIT, "shared");
        git(&dir, &["update-index", "--split-index"]);
        add_entry(&dir, "160000", COMMIT, "later");
        let shared = std::fs::read_dir(dir.join(".git"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("sharedindex."));
        assert!(shared, "git wrote no shared index");
        let got = gitlinks(&dir.join(".git/index"), 20).unwrap();
        assert_eq!(
            got.gitlinks,
            vec![PathBuf::from("later"), PathBuf::from("shared")]
        );
        assert!(got.shared_index.is_some_and(|p| p.exists()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What git writes once `core.splitIndex` is on and entries change: replacing entries
    /// with empty names (a file turned into a gitlink among them), and deletions.
    #[test]
    fn a_split_index_with_replaced_and_deleted_entries() {
        let dir = repo("split-replace");
        for (mode, sha, path) in [
            ("100644", BLOB, "a.txt"),
            ("100644", BLOB, "becomes-gitlink"),
            ("160000", COMMIT, "goes-away"),
            ("160000", COMMIT, "stays"),
            ("100644", BLOB, "z.txt"),
        ] {
            add_entry(&dir, mode, sha, path);
        }
        git(&dir, &["update-index", "--split-index"]);
        git(&dir, &["update-index", "--force-remove", "goes-away"]);
        git(
            &dir,
            &[
                "update-index",
                "--replace",
                "--cacheinfo",
                &format!("160000,{COMMIT},becomes-gitlink"),
            ],
        );
        git(
            &dir,
            &[
                "update-index",
                "--cacheinfo",
                &format!("100644,{COMMIT},a.txt"),
            ],
        );
        let got = gitlinks(&dir.join(".git/index"), 20).unwrap();
        assert!(got.shared_index.is_some());
        assert_eq!(
            got.gitlinks,
            vec![PathBuf::from("becomes-gitlink"), PathBuf::from("stays")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_index_has_none_and_a_broken_one_is_an_error() {
        let dir = repo("broken");
        assert!(gitlinks(&dir.join(".git/index"), 20)
            .unwrap()
            .gitlinks
            .is_empty());
        add_entry(&dir, "160000", COMMIT, "lib");
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
            "[core]\n[Extensions]\n\tobjectFormat = sha256 ; a comment\n",
        )
        .unwrap();
        assert_eq!(object_name_len(&dir), 32);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
