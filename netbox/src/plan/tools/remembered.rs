//! What pip and npm answered about their settings, kept for the next run: each question
//! starts the tool's interpreter (about 250 ms for npm, 450 ms for pip), and an agent that
//! passes `--allow-tool` on every command paid that every time.
//!
//! An answer is used again only while everything it could depend on is as it was when it
//! was given: the command itself (program, arguments, the environment and `PATH` it is
//! given: the key), the program and the interpreter its `#!` line names, and every file
//! the tool says it reads its settings from (pip's configuration files, npm's user, global
//! and builtin npmrc), absent ones too: one that appears is a change. Each file is compared
//! by path, device, inode, size, and modification and change times (a rewrite moves the
//! change time, whatever the modification time is set back to). The identities are taken
//! before the tool is asked, so a file changed while it answers makes the next run ask
//! again. When in doubt (a shell-script shim whose choice of interpreter netbox cannot
//! follow, a tool that does not say what it reads, a file of the store not as netbox wrote
//! it) the tool is asked: a stale answer could widen the policy, asking costs only time.
//!
//! The answers live in `$XDG_STATE_HOME/netbox/tool-answers` (this user's, 0700, reached
//! without following a link). A run whose writable roots hold it neither reads nor writes
//! it, and its sandbox gets it read-only (config/mod.rs), so no command can leave an answer
//! for a later run to act on.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{owndir, query};

/// Changes whenever what an entry holds, or how its key is made, changes.
const FORMAT: u32 = 1;

/// The largest entry read back (an answer is at most a few KiB).
const MAX_ENTRY_BYTES: u64 = 1 << 20;

/// Entries kept at most; past that the store is emptied and starts again.
const MAX_ENTRIES: usize = 256;

/// The identity of a file as `stat` gives it (links followed): device, inode, size,
/// modification and change time in seconds and nanoseconds. `None`: no such file.
type Identity = Option<[i64; 7]>;

#[derive(Serialize, Deserialize)]
struct Entry {
    format: u32,
    key: String,
    watched: Vec<(PathBuf, Identity)>,
    answer: String,
}

/// A tool's answer, and whether it came from the store.
pub struct Answer {
    pub text: String,
    pub remembered: bool,
}

/// `command`'s answer, from the store when nothing it depends on changed, else from the
/// tool (and then kept). `reads` is asked only when the tool is: the files the tool says
/// it reads its settings from (`None`: it could not say, and the answer is not kept).
pub fn answer(
    command: Command,
    untrusted: &[PathBuf],
    reads: impl FnOnce() -> Option<Vec<PathBuf>>,
) -> Option<Answer> {
    let asked = |text| Answer {
        text,
        remembered: false,
    };
    let Some(chain) = program_chain(Path::new(command.get_program()), untrusted) else {
        return query::run(command).map(asked);
    };
    let key = key_of(&command, &chain);
    let store = store(untrusted);
    if let Some(text) = store.as_ref().and_then(|dir| recall(dir, &key)) {
        return Some(Answer {
            text,
            remembered: true,
        });
    }
    // Seen before the tool is asked: a change while it answers shows at the next run.
    let watched: Option<Vec<(PathBuf, Identity)>> = reads().map(|files| {
        chain
            .into_iter()
            .chain(files)
            .map(|file| {
                let id = identity(&file);
                (file, id)
            })
            .collect()
    });
    let answer = query::run(command)?;
    if let (Some(dir), Some(watched)) = (store, watched) {
        keep(&dir, &key, watched, &answer);
    }
    Some(asked(answer))
}

/// Whether every answer a tool's discovery used was remembered: said on the start-up line.
#[derive(Default)]
pub struct Tally {
    asked: std::cell::Cell<usize>,
    remembered: std::cell::Cell<usize>,
}

impl Tally {
    /// Counts `answer`, and gives its text.
    pub fn count(&self, answer: Option<Answer>) -> Option<String> {
        let answer = answer?;
        self.asked.set(self.asked.get() + 1);
        if answer.remembered {
            self.remembered.set(self.remembered.get() + 1);
        }
        Some(answer.text)
    }

    pub fn all_remembered(&self) -> bool {
        self.asked.get() > 0 && self.asked.get() == self.remembered.get()
    }
}

/// The directory of answers, when it lies in no writable root: made if missing.
fn store(untrusted: &[PathBuf]) -> Option<owndir::OwnDir> {
    let base = state_dir()?;
    if query::is_untrusted(&base, untrusted) {
        return None;
    }
    let (real, fd) = owndir::open_cache_home(&base, None, None).ok()?;
    if untrusted.iter().any(|root| real.starts_with(root)) {
        return None;
    }
    owndir::open_own(&real, fd, &["tool-answers"])
        .ok()
        .map(|(dir, _)| dir)
}

/// `$XDG_STATE_HOME/netbox` (or `~/.local/state/netbox`), where the store is.
fn state_dir() -> Option<PathBuf> {
    crate::plan::xdg_dir("XDG_STATE_HOME", ".local/state").map(|base| base.join("netbox"))
}

/// The store's directory when it lies in one of `roots`, made first if missing, so the
/// sandbox can lay it read-only: a command given its parent to write must not be able to
/// leave an answer for a later run.
pub fn store_in_roots(roots: &[PathBuf]) -> Option<PathBuf> {
    let base = state_dir()?;
    let inside = |path: &Path| roots.iter().any(|root| path.starts_with(root));
    let real_base = std::fs::canonicalize(&base).ok();
    if !inside(&base) && !real_base.as_deref().is_some_and(inside) {
        return None;
    }
    let (real, fd) = owndir::open_cache_home(&base, None, None).ok()?;
    owndir::open_own(&real, fd, &["tool-answers"])
        .ok()
        .map(|(dir, _)| dir.path)
}

/// The program and the interpreter its `#!` line names (through `env`, as the caller's
/// trusted `PATH` finds it), as real paths. `None` when the interpreter is a shell (a
/// shim deciding what runs by files of its own) other than pyenv's, whose files are added.
fn program_chain(program: &Path, untrusted: &[PathBuf]) -> Option<Vec<PathBuf>> {
    let real = std::fs::canonicalize(program).ok()?;
    let mut chain = vec![real.clone()];
    let Some(interpreter) = interpreter_of(&real) else {
        return Some(chain);
    };
    let interpreter = match interpreter.strip_prefix("env:") {
        Some(name) => query::trusted(name, untrusted)?,
        None => PathBuf::from(interpreter),
    };
    let interpreter = std::fs::canonicalize(interpreter).ok()?;
    // An interpreter that is itself a script: not followed further.
    interpreter_of(&interpreter).is_none().then_some(())?;
    let name = interpreter.file_name()?.to_str()?;
    let shell = matches!(name, "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh");
    chain.push(interpreter.clone());
    if shell {
        chain.extend(pyenv_version_files(&real)?);
    }
    Some(chain)
}

/// The interpreter `file`'s `#!` line names: a path, or `env:NAME` for `/usr/bin/env
/// NAME`. `None` for a file that is no script.
fn interpreter_of(file: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let read = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if Path::new(first).file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        return Some(format!("env:{name}"));
    }
    Some(first.to_owned())
}

/// The files pyenv's shim `shim` decides the Python version by, asked from `/` as netbox
/// asks (`PYENV_VERSION` is in the key): `/.python-version` and the global version file.
/// `None` for a shell script that is no pyenv shim.
fn pyenv_version_files(shim: &Path) -> Option<Vec<PathBuf>> {
    let text = std::fs::read(shim).ok()?;
    let text = text.get(..text.len().min(4096))?;
    if !text.windows(5).any(|w| w == b"pyenv") {
        return None;
    }
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))?;
    // The versions installed too: a version file naming a prefix ("3.11") picks the
    // newest that matches.
    Some(vec![
        PathBuf::from("/.python-version"),
        root.join("version"),
        root.join("versions"),
    ])
}

/// What the answer is filed under: the command as it would run (program, arguments, its
/// whole environment, where it runs), the real paths of the program and its interpreter
/// (a link moved to another version is another key), and netbox's version.
fn key_of(command: &Command, chain: &[PathBuf]) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    part(&FORMAT.to_le_bytes());
    part(env!("CARGO_PKG_VERSION").as_bytes());
    part(command.get_program().as_encoded_bytes());
    for arg in command.get_args() {
        part(arg.as_encoded_bytes());
    }
    let mut env: Vec<_> = command.get_envs().collect();
    env.sort();
    for (name, value) in env {
        part(name.as_encoded_bytes());
        part(value.map_or(b"\0unset".as_slice(), |v| v.as_encoded_bytes()));
    }
    for file in chain {
        part(file.as_os_str().as_encoded_bytes());
    }
    part(
        command
            .get_current_dir()
            .map_or(b"".as_slice(), |d| d.as_os_str().as_encoded_bytes()),
    );
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn identity(path: &Path) -> Identity {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Some([
        as_i64(meta.dev()),
        as_i64(meta.ino()),
        as_i64(meta.size()),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    ])
}

/// The answer filed under `key`, if its entry is this user's own regular file, whole, of
/// this format, and every file it watched is as it was.
fn recall(dir: &owndir::OwnDir, key: &str) -> Option<String> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    use std::io::Read;
    let fd = openat(
        dir.fd.as_fd(),
        key,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .ok()?;
    let stat = fstat(fd.as_fd()).ok()?;
    let regular = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
    let own = stat.st_uid == nix::unistd::geteuid().as_raw();
    if !regular || !own || stat.st_mode & 0o022 != 0 {
        return None;
    }
    let mut text = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_ENTRY_BYTES + 1)
        .read_to_end(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_ENTRY_BYTES {
        return None;
    }
    let entry: Entry = serde_json::from_slice(&text).ok()?;
    let unchanged = entry.watched.iter().all(|(path, id)| identity(path) == *id);
    (entry.format == FORMAT && entry.key == key && unchanged).then_some(entry.answer)
}

/// Files `answer` under `key`. A store that cannot be written is no error: the next run
/// asks the tool.
fn keep(dir: &owndir::OwnDir, key: &str, watched: Vec<(PathBuf, Identity)>, answer: &str) {
    let entry = Entry {
        format: FORMAT,
        key: key.to_owned(),
        watched,
        answer: answer.to_owned(),
    };
    let Ok(text) = serde_json::to_vec(&entry) else {
        return;
    };
    if text.len() as u64 > MAX_ENTRY_BYTES {
        return;
    }
    let names: Vec<String> = nix::dir::Dir::openat(
        dir.fd.as_fd(),
        ".",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
        nix::sys::stat::Mode::empty(),
    )
    .map(|mut listing| {
        listing
            .iter()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "." && n != "..")
            .take(MAX_ENTRIES + 1)
            .collect()
    })
    .unwrap_or_default();
    if names.len() > MAX_ENTRIES {
        // Answers for programs and settings long gone: start again.
        for name in &names {
            let _ = owndir::remove_at(dir.fd.as_fd(), name);
        }
    }
    let _ = owndir::replace_at(dir.fd.as_fd(), key, &text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripts_interpreter_is_read_from_its_first_line() {
        let dir = std::env::temp_dir().join(format!("netbox-remembered-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let of = |name: &str, text: &str| interpreter_of(&write(name, text));
        assert_eq!(
            of("a", "#!/usr/bin/python3 -I\nx"),
            Some("/usr/bin/python3".into())
        );
        assert_eq!(of("b", "#!/usr/bin/env node\n"), Some("env:node".into()));
        assert_eq!(
            of("c", "#!/usr/bin/env -S node --x\n"),
            Some("env:node".into())
        );
        assert_eq!(of("d", "\x7fELF...."), None);
        let shim = write(
            "e",
            "#!/usr/bin/env bash\nexec \"/x/.pyenv/libexec/pyenv\" exec\n",
        );
        assert!(pyenv_version_files(&shim).is_some());
        let other = write("f", "#!/usr/bin/env bash\nexec asdf exec\n");
        assert_eq!(pyenv_version_files(&other), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_key_is_the_whole_command() {
        let command = |arg: &str, value: &str| {
            let mut c = Command::new("/usr/bin/npm");
            c.arg(arg).env_clear().env("HOME", value).current_dir("/");
            c
        };
        let chain = [PathBuf::from("/usr/share/npm/bin/npm-cli.js")];
        let base = key_of(&command("get", "/h"), &chain);
        assert_eq!(base, key_of(&command("get", "/h"), &chain));
        assert_ne!(base, key_of(&command("list", "/h"), &chain));
        assert_ne!(base, key_of(&command("get", "/other"), &chain));
        let moved = [PathBuf::from("/usr/share/npm-11/bin/npm-cli.js")];
        assert_ne!(base, key_of(&command("get", "/h"), &moved));
        assert_eq!(base.len(), 64);
    }
}
