//! apt inside the sandbox. Run as root, apt drops to its `_apt` user to download, which the
//! sandbox's user namespace does not map (`E: setgroups 65534 failed`, `seteuid 42
//! failed`, `Method http has died`). When CMD may run apt (`--allow-tool apt`, or apt
//! itself as CMD), netbox lays an apt configuration in the sandbox's `/run` that keeps apt
//! as the user it runs as, after whatever configuration apt would have read, and points
//! `APT_CONFIG` at it: `apt-get` works with no flag.
//!
//! apt's own sandboxing is a second user on the same machine; in netbox, the sandbox is
//! the boundary, and apt runs as the user netbox maps to CMD.

use std::ffi::OsStr;
use std::path::Path;

/// Where the configuration lies inside the sandbox.
pub const APT_CONF: &str = "/run/netbox/apt.conf";

/// Programs of apt's that download, run as CMD.
const APT_PROGRAMS: [&str; 3] = ["apt", "apt-get", "aptitude"];

/// The configuration, if CMD may run apt: `tools` are `--allow-tool`'s, `program` is
/// CMD's, `apt_config` netbox's own `APT_CONFIG`.
pub fn for_run(
    tools: &[String],
    program: Option<&OsStr>,
    apt_config: Option<&OsStr>,
) -> Option<String> {
    let runs_apt = tools.iter().any(|t| t == "apt")
        || program
            .and_then(|p| Path::new(p).file_name())
            .and_then(OsStr::to_str)
            .is_some_and(|name| APT_PROGRAMS.contains(&name));
    if !runs_apt {
        return None;
    }
    // What apt would have read as its main file: the user's APT_CONFIG, else apt.conf.
    // (apt reads apt.conf.d beside it either way.) Included only if it exists: apt stops
    // on an #include it cannot open.
    let main = apt_config
        .map(Path::new)
        .filter(|p| p.is_absolute())
        .unwrap_or(Path::new("/etc/apt/apt.conf"));
    let include = match main.to_str() {
        Some(path) if main.is_file() && !path.contains(['"', '\n']) => {
            format!("#include \"{path}\";\n")
        }
        _ => String::new(),
    };
    Some(format!(
        "// netbox: apt stays the user it runs as (its _apt user is not mapped here).\n\
         {include}APT::Sandbox::User \"root\";\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_that_may_run_apt_gets_it_after_the_users_own() {
        assert!(for_run(&[], Some(OsStr::new("make")), None).is_none());
        let by_tool = for_run(&["apt".into()], Some(OsStr::new("make")), None).unwrap();
        assert!(
            by_tool.ends_with("APT::Sandbox::User \"root\";\n"),
            "{by_tool}"
        );
        assert!(for_run(&[], Some(OsStr::new("/usr/bin/apt-get")), None).is_some());
        let dir = std::env::temp_dir().join(format!("netbox-apt-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let own = dir.join("apt.conf");
        std::fs::write(&own, "").unwrap();
        let conf = for_run(&[], Some(OsStr::new("apt")), Some(own.as_os_str())).unwrap();
        let include = format!("#include \"{}\";", own.display());
        assert!(conf.find(&include) < conf.find("APT::Sandbox"), "{conf}");
        // A setting that names no file is not included (apt would stop on it).
        let missing = dir.join("missing.conf");
        let conf = for_run(&[], Some(OsStr::new("apt")), Some(missing.as_os_str())).unwrap();
        assert!(!conf.contains("#include"), "{conf}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
