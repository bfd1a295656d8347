//! go: `go env GOPROXY GOSUMDB` (defaults included: go says them). `direct` in GOPROXY
//! means modules come from their own hosts, which no configuration names.

use super::{query, Context, ToolRules};

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    // The user's go settings (`go env -w` writes them): hidden, go in the sandbox does not
    // see them, so go is asked without them. (`GOROOT/go.env` is the toolchain's own
    // defaults, not the user's settings.)
    let env: &[(&str, &str)] = match goenv_file() {
        Some(file) if file.exists() && out.skip_hidden(&file, ctx) => &[("GOENV", "off")],
        _ => &[],
    };
    // Asked from `/` (query.rs): no go.mod or go.work of the workspace's (their toolchain
    // lines) comes into it.
    let Some(text) = query::output_with("go", &["env", "GOPROXY", "GOSUMDB"], env, ctx.untrusted)
    else {
        out.note("go did not answer `go env` (is it installed?)");
        return out;
    };
    let mut lines = text.lines();
    let proxy = lines.next().unwrap_or("");
    let sumdb = lines.next().unwrap_or("");
    for entry in proxy.split([',', '|']).map(str::trim) {
        match entry {
            "direct" => out.note(
                "GOPROXY includes direct: modules fetched from their own hosts need netbox learn",
            ),
            "off" | "" => {}
            url => out.add(url, "GOPROXY (go env)"),
        }
    }
    // GOSUMDB is `off`, a name (which is its host), or `name+key [url]`.
    match sumdb.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["off"] | [] => {}
        [_, url] => out.add(url, "GOSUMDB (go env)"),
        [name] => out.add(name.split('+').next().unwrap_or(name), "GOSUMDB (go env)"),
        _ => out.note(format!("GOSUMDB {sumdb:?} not understood")),
    }
    out
}

/// The file go keeps the user's settings in: `GOENV` (none if `off`), else `go/env` in
/// `XDG_CONFIG_HOME` or `~/.config` (os.UserConfigDir).
fn goenv_file() -> Option<std::path::PathBuf> {
    let absolute =
        |v: std::ffi::OsString| Some(std::path::PathBuf::from(v)).filter(|p| p.is_absolute());
    match std::env::var_os("GOENV") {
        Some(value) if value == "off" => None,
        Some(value) => absolute(value),
        None => {
            crate::plan::xdg_dir("XDG_CONFIG_HOME", ".config").map(|config| config.join("go/env"))
        }
    }
}
