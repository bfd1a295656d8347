//! git: the workspace's remotes (`git config --get-regexp remote.*.url`) and its
//! submodules' URLs (`.gitmodules`). An scp-like address (`git@host:path`) is SSH, port 22.

use super::{query, Context, ToolRules};

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let cwd = ctx.cwd.to_string_lossy().into_owned();
    let gitmodules = ctx.cwd.join(".gitmodules").to_string_lossy().into_owned();
    let mut out = ToolRules::default();
    let remotes = query::output(
        "git",
        &["-C", &cwd, "config", "--get-regexp", r"^remote\..*\.url$"],
        ctx.untrusted,
    )
    .unwrap_or_default();
    let modules = query::output(
        "git",
        &[
            "config",
            "-f",
            &gitmodules,
            "--get-regexp",
            r"^submodule\..*\.url$",
        ],
        ctx.untrusted,
    )
    .unwrap_or_default();
    for (text, what) in [
        (remotes, "git remote"),
        (modules, "submodule in .gitmodules"),
    ] {
        for line in text.lines() {
            let Some((key, url)) = line.split_once(' ') else {
                continue;
            };
            let url = scp_like_to_ssh(url.trim());
            // The workspace's own: an earlier command may have written it.
            out.add_from(&url, format!("{what} {key}"), true);
        }
    }
    if out.rules.is_empty() {
        out.note("the workspace has no git remote with a network address");
    }
    out
}

/// `user@host:path` (scp-like syntax) as `ssh://user@host/path`; anything else as is.
fn scp_like_to_ssh(url: &str) -> String {
    if url.contains("://") {
        return url.to_owned();
    }
    match url.split_once(':') {
        Some((host, path)) if !host.contains('/') && !host.is_empty() => {
            format!("ssh://{host}/{path}")
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scp_like_addresses_are_ssh() {
        assert_eq!(
            scp_like_to_ssh("git@forge.test:team/app.git"),
            "ssh://git@forge.test/team/app.git"
        );
        assert_eq!(
            scp_like_to_ssh("https://forge.test/a.git"),
            "https://forge.test/a.git"
        );
        assert_eq!(
            super::super::rule_of(&scp_like_to_ssh("git@forge.test:a.git")).unwrap(),
            "forge.test:22"
        );
    }
}
