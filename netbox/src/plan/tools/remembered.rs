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
//! The answers live in `/dev/shm/netbox-UID/tool-answers`, which no sandbox shows
//! (`store` says why), this user's own (0700, reached without following a link).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{owndir, query};

/// Changes whenever what an entry holds, or how its key is made, changes.
const FORMAT: u32 = 2;

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
    #[serde(with = "bridge::log::path_json::exact::pairs")]
    watched: Vec<(PathBuf, Identity)>,
    answer: String,
}

/// A tool's answer, and whether it came from the store.
struct Answer {
    text: String,
    remembered: bool,
}

/// What a tool says it depends on, asked only when it is asked.
pub struct Reads {
    /// The interpreter that ran, as a real path, when the tool can say: an answer is kept
    /// only when it is the one netbox followed the program to (a shim that chose another
    /// by files of its own would make the key wrong).
    pub ran: Option<PathBuf>,
    /// Every file it reads its settings from, present or not.
    pub files: Vec<PathBuf>,
}

/// Asks one tool its questions, each answered from the store when nothing it depends on
/// changed, else by the tool (and then kept). Where the program leads and the store are
/// found once, with the first question; what the tool reads is asked at most once, and
/// only when a question goes to the tool.
pub struct Asker<'a> {
    program: &'a str,
    untrusted: &'a [PathBuf],
    /// How the interpreter's file name starts (`python`, `node`): a program that leads
    /// elsewhere (a binary shim) is asked each time.
    runs: &'static str,
    /// What the tool reads (`None`: it could not say, and no answer is kept).
    reads: Box<dyn Fn() -> Option<Reads> + 'a>,
    said: std::cell::OnceCell<Option<Reads>>,
    /// The program as the first question named it, and where it leads.
    chain: std::cell::OnceCell<(PathBuf, Option<Chain>)>,
    store: std::cell::OnceCell<Option<owndir::OwnDir>>,
    asked: std::cell::Cell<usize>,
    remembered: std::cell::Cell<usize>,
}

impl<'a> Asker<'a> {
    pub fn new(
        program: &'a str,
        untrusted: &'a [PathBuf],
        runs: &'static str,
        reads: impl Fn() -> Option<Reads> + 'a,
    ) -> Asker<'a> {
        Asker {
            program,
            untrusted,
            runs,
            reads: Box::new(reads),
            said: std::cell::OnceCell::new(),
            chain: std::cell::OnceCell::new(),
            store: std::cell::OnceCell::new(),
            asked: std::cell::Cell::new(0),
            remembered: std::cell::Cell::new(0),
        }
    }

    /// The tool's answer to `args` (its output), remembered or asked.
    pub fn ask(&self, args: &[&str]) -> Option<String> {
        let command = query::prepared(self.program, args, &[], self.untrusted)?;
        let answer = self.answer(command)?;
        self.asked.set(self.asked.get() + 1);
        if answer.remembered {
            self.remembered.set(self.remembered.get() + 1);
        }
        Some(answer.text)
    }

    /// Whether every answer given was remembered: said on the start-up line.
    pub fn all_remembered(&self) -> bool {
        self.asked.get() > 0 && self.asked.get() == self.remembered.get()
    }

    fn answer(&self, command: Command) -> Option<Answer> {
        let asked = |text| Answer {
            text,
            remembered: false,
        };
        let program = Path::new(command.get_program());
        let Some(chain) = self.chain_of(program) else {
            return query::run(command).map(asked);
        };
        let key = key_of(&command, &chain.files);
        let store = self.store.get_or_init(|| store(self.untrusted)).as_ref();
        if let Some(text) = store.and_then(|dir| recall(dir, &key)) {
            return Some(Answer {
                text,
                remembered: true,
            });
        }
        // Seen before the tool is asked: a change while it answers shows at the next run.
        let watched: Option<Vec<(PathBuf, Identity)>> = self
            .said
            .get_or_init(|| (self.reads)())
            .as_ref()
            .filter(|reads| reads.ran.as_ref().is_none_or(|ran| *ran == chain.runs))
            .map(|reads| {
                chain
                    .files
                    .iter()
                    .chain(&chain.watched)
                    .chain(&reads.files)
                    .map(|file| (file.clone(), identity(file)))
                    .collect()
            });
        let answer = query::run(command)?;
        if let (Some(dir), Some(watched)) = (store, watched) {
            keep(dir, &key, watched, &answer);
        }
        Some(asked(answer))
    }

    /// Where `program` leads, when it leads to an interpreter named as `runs` says:
    /// followed once for the program the first question named (every question of one
    /// tool names the same; another would be followed on its own).
    fn chain_of(&self, program: &Path) -> Option<Chain> {
        let follow = || {
            program_chain(program, self.untrusted).filter(|chain| {
                chain
                    .runs
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(self.runs))
            })
        };
        let (first, chain) = self.chain.get_or_init(|| (program.to_owned(), follow()));
        if first == program {
            chain.clone()
        } else {
            follow()
        }
    }
}

/// The directory of answers, `/dev/shm/netbox-UID/tool-answers` (made if missing, each
/// step this user's, 0700, reached without following a link), when no writable root
/// overlaps it (by path or identity: a host's bind mount of it elsewhere).
///
/// Why there: every sandbox lays its own `/dev` (and `/run`), and no writable root, bind
/// source or alias may lie under them, so no command sees the store, let alone writes it,
/// under any name, whatever roots this run or a concurrent one was given. A directory in
/// the home, hidden by path, was reachable through an alias or a renamed parent. The
/// answers may hold what a tool printed of its settings (a token in an index URL): that
/// stays out of every sandbox too. Another user's directory of that name is refused.
fn store(untrusted: &[PathBuf]) -> Option<owndir::OwnDir> {
    let own = format!("netbox-{}", nix::unistd::geteuid().as_raw());
    let place = Path::new(SHARED_MEMORY).join(&own).join(STORE);
    if untrusted.iter().any(|root| overlap(&place, root)) {
        return None;
    }
    let (real, fd) = owndir::open_cache_home(Path::new(SHARED_MEMORY), None, None).ok()?;
    let (dir, _) = owndir::open_own(&real, fd, &[&own, STORE]).ok()?;
    if untrusted.iter().any(|root| overlap(&dir.path, root)) {
        return None;
    }
    Some(dir)
}

/// Where the store is made: a tmpfs of the host's that no sandbox shows.
const SHARED_MEMORY: &str = "/dev/shm";

/// The store's name.
const STORE: &str = "tool-answers";

/// Whether `a` and `b` overlap: one is the other or lies inside it.
fn overlap(a: &Path, b: &Path) -> bool {
    contains(a, b) || contains(b, a)
}

/// Whether `inner` is `outer` or lies inside it: by path (as given and as resolved) or by
/// the identity of a directory on its way (another name for `outer`, a bind mount of it).
/// A path that does not exist yet is compared by the part of it that does.
fn contains(outer: &Path, inner: &Path) -> bool {
    let resolved = crate::plan::homesplit::resolve_existing_prefix;
    let real_inner = resolved(inner);
    inner.starts_with(outer)
        || real_inner.starts_with(resolved(outer))
        || identity_of_existing(outer).is_some_and(|id| {
            real_inner
                .ancestors()
                .any(|up| identity_of_existing(up) == Some(id))
        })
}

fn identity_of_existing(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Where a program leads: its real path and its interpreter's (the key), the
/// interpreter that will run (the last of them), and what chose it (watched).
#[derive(Clone)]
struct Chain {
    files: Vec<PathBuf>,
    runs: PathBuf,
    watched: Vec<PathBuf>,
}

/// The program and the interpreter its `#!` line names (through `env`, as the caller's
/// trusted `PATH` finds it), as real paths. A shell script is followed only when it is a
/// pyenv shim whose Python netbox can find as pyenv would; `None` otherwise (a shim
/// deciding what runs by files netbox does not know).
fn program_chain(program: &Path, untrusted: &[PathBuf]) -> Option<Chain> {
    let real = std::fs::canonicalize(program).ok()?;
    let Some(interpreter) = interpreter_of(&real) else {
        return Some(Chain {
            files: vec![real.clone()],
            runs: real,
            watched: Vec::new(),
        });
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
    if !shell {
        return Some(Chain {
            files: vec![real, interpreter.clone()],
            runs: interpreter,
            watched: Vec::new(),
        });
    }
    let (python, watched) = pyenv_python(&real, program.file_name()?)?;
    Some(Chain {
        files: vec![real, interpreter, python.clone()],
        runs: python,
        watched,
    })
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

/// The Python pyenv's shim `shim` (run as `program`, from `/`, as netbox asks) would run,
/// found as pyenv finds it: the root the shim itself names, the version `PYENV_VERSION`,
/// `/.python-version` or the root's `version` file names, that version's `bin/PROGRAM`.
/// Also the files and directories that choice and pyenv's hooks depend on. `None` for a
/// shell script that is no pyenv shim, the `system` version (whatever `PATH` holds), or a
/// version not installed under the name given.
fn pyenv_python(shim: &Path, program: &std::ffi::OsStr) -> Option<(PathBuf, Vec<PathBuf>)> {
    let text = std::fs::read(shim).ok()?;
    let text = String::from_utf8_lossy(text.get(..text.len().min(4096))?).into_owned();
    let root = text.lines().find_map(|line| {
        let value = line.trim().strip_prefix("export PYENV_ROOT=")?;
        Some(PathBuf::from(value.trim_matches('"')))
    })?;
    if !root.is_absolute() {
        return None;
    }
    // The pyenv the shim runs must be the root's own: one installed elsewhere (a package,
    // Homebrew) brings hooks and programs of its prefix, not watched here.
    let runs_own = text.lines().any(|line| {
        line.trim()
            .strip_prefix("exec \"")
            .and_then(|rest| rest.split('"').next())
            .is_some_and(|program| Path::new(program) == root.join("libexec/pyenv"))
    });
    runs_own.then_some(())?;
    let first_word = |file: &Path| -> Option<String> {
        let text = std::fs::read_to_string(file).ok()?;
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_owned)
    };
    let version = match std::env::var("PYENV_VERSION") {
        Ok(v) if !v.is_empty() => v.split(':').next()?.to_owned(),
        _ => first_word(Path::new("/.python-version"))
            .or_else(|| first_word(&root.join("version")))?,
    };
    let plain = !version.contains('/') && !matches!(version.as_str(), "." | ".." | "system");
    plain.then_some(())?;
    let versions = root.join("versions");
    let python = std::fs::canonicalize(versions.join(&version).join("bin").join(program)).ok()?;
    let mut watched = vec![
        PathBuf::from("/.python-version"),
        root.join("version"),
        versions.join(&version),
        versions,
    ];
    // pyenv itself and every hook it runs (a hook may set a variable pip reads): each
    // file and directory, so an edit to one is a change.
    let mut hooks = vec![
        root.join("libexec"),
        root.join("pyenv.d"),
        PathBuf::from("/etc/pyenv.d"),
        PathBuf::from("/usr/etc/pyenv.d"),
        PathBuf::from("/usr/local/etc/pyenv.d"),
        PathBuf::from("/usr/lib/pyenv/hooks"),
    ];
    // A plugin's hooks are in its etc/pyenv.d, its programs (on pyenv's PATH) in bin; a
    // plugin added changes the directory.
    let plugins = root.join("plugins");
    watched.push(plugins.clone());
    let mut each: Vec<PathBuf> = std::fs::read_dir(&plugins)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|plugin| [plugin.path().join("etc/pyenv.d"), plugin.path().join("bin")])
        .collect();
    each.sort();
    hooks.extend(each);
    let mut budget = MAX_WATCHED_HOOK_FILES;
    for dir in hooks {
        every_entry(&dir, &mut watched, &mut budget)?;
    }
    Some((python, watched))
}

/// Files and directories of pyenv's and its hooks' watched at most: past that, pyenv's
/// answers are not remembered.
const MAX_WATCHED_HOOK_FILES: usize = 2048;

/// `dir` and everything under it (links not followed), into `out`; `None` past `budget`.
fn every_entry(dir: &Path, out: &mut Vec<PathBuf>, budget: &mut usize) -> Option<()> {
    *budget = budget.checked_sub(1)?;
    out.push(dir.to_owned());
    let meta = std::fs::symlink_metadata(dir);
    if !meta.is_ok_and(|m| m.is_dir()) {
        return Some(());
    }
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .ok()?;
    names.sort();
    for path in names {
        every_entry(&path, out, budget)?;
    }
    Some(())
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
    // Each group counted first: no arrangement of one group's parts reads as another's.
    part(&(command.get_args().len() as u64).to_le_bytes());
    for arg in command.get_args() {
        part(arg.as_encoded_bytes());
    }
    let mut env: Vec<_> = command.get_envs().collect();
    env.sort();
    part(&(env.len() as u64).to_le_bytes());
    for (name, value) in env {
        part(name.as_encoded_bytes());
        part(value.map_or(b"\0unset".as_slice(), |v| v.as_encoded_bytes()));
    }
    part(&(chain.len() as u64).to_le_bytes());
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
    // An entry watches at least the program it was asked of: one watching nothing is not
    // netbox's.
    let unchanged =
        !entry.watched.is_empty() && entry.watched.iter().all(|(path, id)| identity(path) == *id);
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
        // A pyenv shim leads to the version its root's files name, by the root the shim
        // itself names; `system`, or a version not installed by that name, is not followed.
        let root = dir.join("pyenv");
        std::fs::create_dir_all(root.join("versions/3.9.1/bin")).unwrap();
        std::fs::write(root.join("versions/3.9.1/bin/python3"), "").unwrap();
        let shim = write(
            "e",
            &format!(
                "#!/usr/bin/env bash\nexport PYENV_ROOT=\"{0}\"\nexec \"{0}/libexec/pyenv\" exec \"$program\" \"$@\"\n",
                root.display()
            ),
        );
        let python = std::ffi::OsStr::new("python3");
        let as_pyenv_would =
            std::env::var_os("PYENV_VERSION").is_none() && !Path::new("/.python-version").exists();
        if as_pyenv_would {
            std::fs::write(root.join("version"), "# chosen\n3.9.1\n").unwrap();
            let (found, watched) = pyenv_python(&shim, python).unwrap();
            assert!(found.ends_with("versions/3.9.1/bin/python3"));
            assert!(watched.contains(&root.join("version")));
            for version in ["system", "3.9", "../../x"] {
                std::fs::write(root.join("version"), format!("{version}\n")).unwrap();
                assert!(pyenv_python(&shim, python).is_none(), "{version}");
            }
        }
        let other = write("f", "#!/usr/bin/env bash\nexec asdf exec\n");
        assert!(pyenv_python(&other, python).is_none());
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
