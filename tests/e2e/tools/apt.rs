//! apt: the repository apt's own configuration names, unprivileged.

use std::process::Command;

use super::assert_refused_and_logged;
use crate::support::upstream::HttpServer;
use crate::support::{stderr, stdout, Run, TestDir};

/// `apt-get update` and `apt-get download`, unprivileged, from a local repository that
/// apt's own configuration names (`APT_CONFIG`, whose sources list lies elsewhere than
/// /etc/apt): `--allow-tool apt` asks apt where its sources are and finds it.
#[test]
fn apt_downloads_from_the_repository_its_configuration_names() {
    let dir = TestDir::new("tool-apt");
    let repo = dir.join("repo");
    std::fs::create_dir_all(dir.join("pkg/DEBIAN")).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["apt-mirror.test"], repo.clone());
    let port = server.port();
    // A package, and a flat repository's index and release file for it.
    let control = "Package: netbox-demo\nVersion: 1.0\nArchitecture: all\n\
                   Maintainer: test <test@example.test>\nDescription: demo\n";
    std::fs::write(dir.join("pkg/DEBIAN/control"), control).unwrap();
    let deb = repo.join("netbox-demo_1.0_all.deb");
    let built = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zgzip", "--build"])
        .arg(dir.join("pkg"))
        .arg(&deb)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let packages = format!(
        "{control}Filename: ./netbox-demo_1.0_all.deb\nSize: {}\nSHA256: {}\n",
        std::fs::metadata(&deb).unwrap().len(),
        crate::support::file_sha256(&deb)
    );
    std::fs::write(repo.join("Packages"), &packages).unwrap();
    std::fs::write(
        repo.join("Release"),
        format!(
            "Suite: stable\nCodename: stable\nDate: Tue, 01 Dec 2026 00:00:00 UTC\n\
             Architectures: all amd64\nSHA256:\n {} {} Packages\n",
            crate::support::file_sha256(&repo.join("Packages")),
            packages.len()
        ),
    )
    .unwrap();
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"apt-mirror.test\" = \"127.0.0.1\"\n",
    );
    let run = Run::new(&dir);
    // apt's settings outside every writable root; its lists and downloads in the
    // workspace. As root, apt would switch to its own user, which the sandbox's user
    // namespace does not map: netbox keeps it who it is, with no setting here.
    let conf = TestDir::outside_tmp("tool-apt-conf");
    std::fs::copy(server.ca.as_ref().unwrap(), conf.join("ca.pem")).unwrap();
    conf.write(
        "sources.list",
        &format!("deb [trusted=yes] https://apt-mirror.test:{port}/ ./\n"),
    );
    conf.write("status", "");
    let ws = run.workspace.display().to_string();
    let at = conf.path.display().to_string();
    let apt_conf = conf.write(
        "apt.conf",
        &format!(
            "Dir::Etc::sourcelist \"{at}/sources.list\";\n\
             Dir::Etc::sourceparts \"{at}/none.d\";\n\
             Dir::State \"{ws}/apt/state\";\nDir::State::status \"{at}/status\";\n\
             Dir::Cache \"{ws}/apt/cache\";\nAcquire::https::CaInfo \"{at}/ca.pem\";\n\
             Acquire::Retries \"0\";\nDebug::NoLocking \"true\";\n"
        ),
    );
    let download = "mkdir -p apt/state/lists/partial apt/cache/archives/partial && \
                    apt-get -qq update && apt-get -qq download netbox-demo && ls *.deb";
    let with = |extra: &[&str]| {
        let mut args = vec!["--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("APT_CONFIG", apt_conf.display().to_string())
    };
    let out = with(&["--allow-tool", "apt", "--private-ok"]).sh(download);
    assert_eq!(
        stdout(&out),
        "netbox-demo_1.0_all.deb\n",
        "{}",
        stderr(&out)
    );
    // apt read the user's configuration through netbox's, which keeps it its user.
    let shown = with(&["--allow-tool", "apt", "--private-ok"])
        .log_at(dir.join("apt-config.jsonl"))
        .sh("echo \"$APT_CONFIG\"; apt-config dump | grep -E '^(APT::Sandbox::User|Dir::Etc::sourcelist) '");
    assert_eq!(
        stdout(&shown),
        format!(
            "/run/netbox/apt.conf\nAPT::Sandbox::User \"root\";\n\
             Dir::Etc::sourcelist \"{at}/sources.list\";\n"
        ),
        "{}",
        stderr(&shown)
    );
    assert!(
        stderr(&out).contains(&format!("apt source {at}/sources.list")),
        "{}",
        stderr(&out)
    );
    // Control: without it, refused.
    std::fs::remove_file(run.workspace.join("netbox-demo_1.0_all.deb")).unwrap();
    let _ = std::fs::remove_dir_all(run.workspace.join("apt"));
    // (apt itself as CMD would get netbox's configuration too; bash is CMD here, so the
    // control gives apt the setting that keeps it its user.)
    let out = with(&[])
        .env(
            "APT_CONFIG",
            conf.write(
                "control.conf",
                &format!(
                    "#include \"{}\";\nAPT::Sandbox::User \"root\";\n",
                    apt_conf.display()
                ),
            )
            .display()
            .to_string(),
        )
        .sh(download);
    assert_ne!(
        stdout(&out),
        "netbox-demo_1.0_all.deb\n",
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("blocked CONNECT apt-mirror.test"),
        "{}",
        stderr(&out)
    );
    assert_refused_and_logged(&dir, "apt-mirror.test", &out);
}
