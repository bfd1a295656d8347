//! go: `go env GOPROXY GOSUMDB` (defaults included: go says them). `direct` in GOPROXY
//! means modules come from their own hosts, which no configuration names.

use super::{query, Context, ToolRules};

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    // Asked from `/` (query.rs): no go.mod or go.work of the workspace's (their toolchain
    // lines) comes into it.
    let Some(text) = query::output("go", &["env", "GOPROXY", "GOSUMDB"], ctx.untrusted) else {
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
