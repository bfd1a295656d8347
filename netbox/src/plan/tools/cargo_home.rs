//! cargo's home of netbox's (`--allow-tool cargo`): cargo keeps its cache beside its
//! settings, so CMD gets a `CARGO_HOME` of netbox's, into which the user's settings are
//! copied at each run, without their credentials and never from a path `--hide` covers.

use std::path::PathBuf;

use super::cargo::cargo_home;
use super::cargo_clean::cleaned;
use crate::plan::hidden::ToCopy;

/// Makes `home` (a `CARGO_HOME` of netbox's, which earlier runs could write) hold the
/// user's own settings and nothing else that cargo reads as settings or runs by name:
/// `config.toml` and `config` are copied afresh from the user's `CARGO_HOME` (or removed,
/// if the user has none), without their credentials ([`without_credentials`]); one that
/// `--hide` covers is not copied at all (the copy would carry past the cover what the user
/// hid). `credentials.toml` and `credentials` are removed (a planted `credential-provider`
/// would run), and so are `bin/` (cargo runs `cargo-NAME` from there before `PATH`, and
/// rustup puts it first on the toolchain's `PATH`) and what records installs into it. Each
/// file is replaced by rename, so a link an earlier run left there is replaced, not
/// followed; nothing is followed when removing. The downloaded crates stay: a cache one run
/// could poison serves only later runs of the same workspace. The other workspaces' homes
/// are left alone: no sandbox but their own workspace's sees them (cover.rs), and each is
/// seeded afresh before its own workspace's CMD starts. Returns the notes for the start-up
/// line.
pub(super) fn seed_home(
    home: &super::owndir::OwnDir,
    hidden: &[PathBuf],
) -> std::io::Result<Vec<String>> {
    use std::os::fd::AsFd;
    let dir = home.fd.as_fd();
    for name in ["bin", "env", ".crates.toml", ".crates2.json"] {
        super::owndir::remove_at(dir, name)?;
    }
    for name in ["credentials.toml", "credentials"] {
        super::owndir::remove_at(dir, name)?;
    }
    let mut notes = Vec::new();
    let user = cargo_home().filter(|u| u != &home.path);
    for name in ["config.toml", "config"] {
        let Some(source) = user.as_ref().map(|u| u.join(name)) else {
            super::owndir::remove_at(dir, name)?;
            continue;
        };
        let shown = source.display();
        let copy = match crate::plan::hidden::read_to_copy(&source, hidden, 1 << 20) {
            ToCopy::Text(text) => match cleaned(&text) {
                Ok((copy, removed)) => {
                    if !removed.is_empty() {
                        // A few named: a file of a thousand registries must not flood the line.
                        let mut named = removed.iter().take(4).cloned().collect::<Vec<_>>();
                        if removed.len() > 4 {
                            named.push(format!("{} more", removed.len() - 4));
                        }
                        notes.push(format!(
                            "{} in {shown} left out of netbox's copy (credentials stay outside \
                             the sandbox: cargo there cannot use them)",
                            named.join(", ")
                        ));
                    }
                    Some(copy)
                }
                Err(why) => {
                    notes.push(format!("{shown} not copied: {why}"));
                    None
                }
            },
            // Said only of a file there is: a hidden directory covers both names.
            ToCopy::Hidden(_) if !source.exists() => None,
            ToCopy::Hidden(by) => {
                notes.push(format!(
                    "{shown} is hidden (--hide {}): not copied into netbox's CARGO_HOME; \
                     cargo in the sandbox runs without its settings",
                    by.display()
                ));
                None
            }
            ToCopy::Absent => None,
            ToCopy::Unreadable(why) => {
                notes.push(format!("{shown} not copied: {why}"));
                None
            }
        };
        match copy {
            Some(text) => super::owndir::replace_at(dir, name, text.as_bytes())?,
            None => super::owndir::remove_at(dir, name)?,
        }
    }
    Ok(notes)
}
