//! Asking a tool about itself: its config query or a one-line script run with its own
//! interpreter, with a deadline (a tool that hangs must not hang netbox's start).
//!
//! This runs on the host, before the sandbox, about a workspace that an earlier
//! sandboxed command may have written. So a tool is found only in absolute `PATH`
//! directories outside every writable root, runs from `/` (no project file of the
//! workspace's comes into it: netbox reads those itself), with an environment of the
//! caller's that holds only what says where things are and the tools' own settings (no
//! `NODE_OPTIONS`, `PYTHONPATH`, `LD_PRELOAD`, proxies), and a `PATH` of the trusted
//! directories only (an `#!/usr/bin/env node` finds no planted `node`); Python ignores
//! its current directory (`PYTHONSAFEPATH`; callers pass `-I` too), and go never switches
//! to another toolchain (`GOTOOLCHAIN=local`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a tool may take to answer.
const DEADLINE: Duration = Duration::from_secs(10);

/// Variables passed to a tool as they are.
const KEPT: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "APT_CONFIG",
    "GEMRC",
    "GOENV",
];

/// Prefixes of the tools' own settings, passed as they are (pyenv's version choice and
/// root only: not its hook path, which runs scripts).
const KEPT_PREFIXES: &[&str] = &[
    "PIP_",
    "PYENV_VERSION",
    "PYENV_ROOT",
    "npm_config_",
    "NPM_CONFIG_",
    "CARGO_",
    "RUSTUP_",
    "GOPROXY",
    "GOSUMDB",
    "GOPRIVATE",
    "GONOPROXY",
    "GONOSUMDB",
    "GOFLAGS",
];

/// Runs `program args` from `/` and returns its standard output, if it ran and exited 0
/// in time. `untrusted`: the writable roots, where the program (and anything on its
/// `PATH`) must not come from.
pub fn output(program: &str, args: &[&str], untrusted: &[PathBuf]) -> Option<String> {
    output_with(program, args, &[], untrusted)
}

/// [`output`], with `env` set on top of what is passed (`GOENV=off`).
pub fn output_with(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    untrusted: &[PathBuf],
) -> Option<String> {
    let program = trusted(program, untrusted)?;
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir("/")
        .env_clear()
        .env("PATH", trusted_path(untrusted))
        .env("PYTHONSAFEPATH", "1")
        .env("GOTOOLCHAIN", "local")
        // git: only the repository's own remotes are wanted; no global or system config
        // (where trace2 targets and the like would make it write files).
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        // pip writes no log wherever a config file says.
        .env("PIP_LOG", "/dev/null")
        .env("PIP_LOG_FILE", "/dev/null")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // Run from an npm script, npm_config_* are the project's .npmrc exported: not the
    // user's settings.
    let in_npm_script = std::env::var_os("npm_lifecycle_event").is_some()
        || std::env::var_os("npm_execpath").is_some();
    for (key, value) in std::env::vars_os() {
        let name = key.to_string_lossy();
        let npm_setting = name.starts_with("npm_config_") || name.starts_with("NPM_CONFIG_");
        let kept =
            KEPT.contains(&name.as_ref()) || KEPT_PREFIXES.iter().any(|p| name.starts_with(p));
        if kept && !(npm_setting && in_npm_script) {
            command.env(&key, value);
        }
    }
    command.envs(env.iter().copied());
    // npm asks its registry for a newer npm on its own (the update notifier), from the
    // host: a query makes no request, whatever the user's settings say.
    command.env("npm_config_update_notifier", "false");
    let mut child = command.spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = (&mut stdout).take(4 << 20).read_to_end(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < DEADLINE => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let text = reader.join().ok()?;
    status
        .success()
        .then(|| String::from_utf8_lossy(&text).into_owned())
}

/// The caller's `PATH` directories that are absolute, lie in no writable root, and hold
/// no interpreter a tool's `#!/usr/bin/env` would run that is a link into one.
fn trusted_dirs(untrusted: &[PathBuf]) -> Vec<PathBuf> {
    let Some(path) = std::env::var_os("PATH") else {
        return Vec::new();
    };
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .filter(|d| !is_untrusted(d, untrusted))
        .filter(|d| {
            ["node", "python3", "python", "sh", "bash", "env"]
                .iter()
                .all(|i| !d.join(i).exists() || !is_untrusted(&d.join(i), untrusted))
        })
        .collect()
}

fn trusted_path(untrusted: &[PathBuf]) -> std::ffi::OsString {
    std::env::join_paths(trusted_dirs(untrusted)).unwrap_or_default()
}

/// `program` as found in a trusted `PATH` directory (or as given, if it is a path
/// itself, which callers take from such a program).
pub fn trusted(program: &str, untrusted: &[PathBuf]) -> Option<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        let real = std::fs::canonicalize(&path).ok()?;
        return (!untrusted.iter().any(|u| real.starts_with(u))).then_some(path);
    }
    // The file itself too: a link in a trusted directory may lead into a root (`npm
    // link`).
    trusted_dirs(untrusted)
        .into_iter()
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
        .filter(|p| !is_untrusted(p, untrusted))
}

/// Whether `path` lies in a writable root (a file an earlier command may have written).
pub fn is_untrusted(path: &Path, untrusted: &[PathBuf]) -> bool {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    untrusted
        .iter()
        .any(|u| real.starts_with(u) || path.starts_with(u))
}
