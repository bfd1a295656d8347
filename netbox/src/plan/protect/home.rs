//! The places under a home directory that run code later, outside the sandbox: pinned
//! read-only wherever a writable root holds one (`--write ~/.config`, say), with a
//! placeholder where one is missing (at its first missing component). A writable home
//! itself never holds one: it is split so that only data is writable (homesplit/); this
//! list is for the places a user makes writable by name.
//!
//! Chosen by what reads them without asking: shells and login sessions, the desktop and
//! systemd's user manager, tools that run commands from their configuration (git, ssh,
//! npm, pip, cargo, docker and kubectl credential helpers, aws `credential_process`,
//! gdb, tmux), directories on `PATH` or on a language's load path, and caches or toolchain
//! homes whose contents run as they are (`npx`'s packages, pip's wheels, cargo's unpacked
//! crates with their `build.rs`, rustup's and pyenv's toolchains). More can be added with
//! `--protect`.

use super::placeholders::{BASH_LOGIN, BASH_PROFILE, EMPTY_CONFIG};
use super::Placeholder;

/// A file: a missing one gets an empty file, which every reader takes as "no settings"
/// (but bash's login files, which say which file a login shell reads: placeholders.rs).
const FILE: Placeholder = EMPTY_CONFIG;
/// A directory: a missing one gets an empty directory.
const DIR: Placeholder = Placeholder::Dir;

/// Relative to home, with the shape a missing one takes.
pub const CODE_PATHS: &[(&str, Placeholder)] = &[
    // Shells, login sessions, readline.
    (".bashrc", FILE),
    (".bash_profile", BASH_PROFILE),
    (".bash_login", BASH_LOGIN),
    (".bash_logout", FILE),
    (".bash_aliases", FILE),
    (".bashrc.d", DIR),
    (".bash_completion", FILE),
    (".local/share/bash-completion", DIR),
    (".p10k.zsh", FILE),
    (".fzf.bash", FILE),
    (".profile", FILE),
    (".zshrc", FILE),
    (".zshenv", FILE),
    (".zprofile", FILE),
    (".zlogin", FILE),
    (".zlogout", FILE),
    (".cshrc", FILE),
    (".tcshrc", FILE),
    (".login", FILE),
    (".logout", FILE),
    (".inputrc", FILE),
    (".pam_environment", FILE),
    (".xprofile", FILE),
    (".xsession", FILE),
    (".xsessionrc", FILE),
    (".xinitrc", FILE),
    (".oh-my-zsh", DIR),
    (".config/fish", DIR),
    (".config/environment.d", DIR),
    (".config/autostart", DIR),
    (".config/systemd", DIR),
    (".local/share/systemd", DIR),
    (".config/user-tmpfiles.d", DIR),
    (".local/share/user-tmpfiles.d", DIR),
    (".local/share/dbus-1", DIR),
    (".config/dconf", DIR),
    (".local/share/gnome-shell", DIR),
    (".config/plasma-workspace", DIR),
    (".config/pipewire", DIR),
    (".config/user-dirs.dirs", FILE),
    (".config/pkcs11", DIR),
    (".pki", DIR),
    (".local/share/applications", DIR),
    (".config/direnv", DIR),
    (".direnvrc", FILE),
    // Directories on PATH or a load path.
    ("bin", DIR),
    (".local/bin", DIR),
    (".local/lib", DIR),
    ("node_modules", DIR),
    // Tools that run commands named in their configuration, or hold keys and trust.
    (".gitconfig", FILE),
    (".config/git", DIR),
    (".ssh", DIR),
    (".gnupg", DIR),
    (".docker", DIR),
    (".kube", DIR),
    (".aws", DIR),
    (".netrc", FILE),
    (".curlrc", FILE),
    (".wgetrc", FILE),
    (".gdbinit", FILE),
    (".tmux.conf", FILE),
    (".config/tmux", DIR),
    (".screenrc", FILE),
    (".lesskey", FILE),
    (".config/lesskey", FILE),
    (".config/gdb", DIR),
    (".lldbinit", FILE),
    (".pdbrc", FILE),
    (".hgrc", FILE),
    (".config/containers", DIR),
    (".config/go", DIR),
    (".terraformrc", FILE),
    (".config/mise", DIR),
    (".local/share/direnv", DIR),
    (".local/state/nvim", DIR),
    (".config/gh", DIR),
    (".local/share/gh", DIR),
    // Package managers: configuration, and what they run from their caches.
    (".npmrc", FILE),
    (".yarnrc", FILE),
    (".yarnrc.yml", FILE),
    (".npm/_npx", DIR),
    (".pypirc", FILE),
    (".pip", DIR),
    (".config/pip", DIR),
    (".cache/pip", DIR),
    (".condarc", FILE),
    (".cargo", DIR),
    (".rustup", DIR),
    (".gemrc", FILE),
    (".bundle", DIR),
    (".m2", DIR),
    (".gradle", DIR),
    (".terraform.d", DIR),
    (".mavenrc", FILE),
    (".cache/pre-commit", DIR),
    (".cache/go-build", DIR),
    (".cache/node", DIR),
    (".cache/deno", DIR),
    (".local/share/pipx", DIR),
    (".local/share/uv", DIR),
    (".local/share/pnpm", DIR),
    (".gem", DIR),
    (".local/share/gem", DIR),
    (".config/gem", DIR),
    (".krew", DIR),
    (".ansible", DIR),
    (".azure", DIR),
    (".jupyter", DIR),
    // Interpreter and toolchain homes.
    (".pyenv", DIR),
    (".nvm", DIR),
    (".volta", DIR),
    (".bun", DIR),
    (".deno", DIR),
    (".sdkman", DIR),
    ("go/bin", DIR),
    (".ipython", DIR),
    (".irbrc", FILE),
    (".pryrc", FILE),
    (".Rprofile", FILE),
    (".Renviron", FILE),
    // Editors, which run their configuration and plugins.
    (".vimrc", FILE),
    (".gvimrc", FILE),
    (".exrc", FILE),
    (".vim", DIR),
    (".config/nvim", DIR),
    (".local/share/nvim", DIR),
    (".emacs", FILE),
    (".emacs.d", DIR),
    (".emacs.el", FILE),
    (".config/emacs", DIR),
    (".config/vim", DIR),
    (".config/Code", DIR),
    (".vscode-server", DIR),
    // Project names that apply to every directory below (direnv, editors), here too.
    (".envrc", FILE),
    (".vscode", DIR),
    (".idea", DIR),
];

/// Where a place of the list is: under home, and for `.config/…`, `.local/share/…` and
/// `.local/state/…` also under `XDG_CONFIG_HOME`, `XDG_DATA_HOME`, `XDG_STATE_HOME`.
pub fn places(home: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut places = vec![home.join(name)];
    for (prefix, var) in [
        (".config/", "XDG_CONFIG_HOME"),
        (".local/share/", "XDG_DATA_HOME"),
        (".local/state/", "XDG_STATE_HOME"),
    ] {
        if let (Some(rest), Some(base)) = (name.strip_prefix(prefix), std::env::var_os(var)) {
            let base = std::path::PathBuf::from(base);
            if base.is_absolute() {
                places.push(base.join(rest));
            }
        }
    }
    places
}
