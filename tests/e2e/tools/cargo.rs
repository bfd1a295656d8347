//! cargo: a sparse registry set through source replacement, its download host, and a
//! `CARGO_HOME` of netbox's that starts afresh each run.

use std::process::Command;

use super::assert_refused_and_logged;
use crate::support::upstream::HttpServer;
use crate::support::{stderr, stdout, Run, TestDir};

/// Whether this user can run cargo: rustup's cargo lives in its installer's home
/// (/root/.cargo here), and another user may have none to run.
pub(crate) fn cargo_runs() -> bool {
    let usable = Command::new("cargo").arg("--version").output();
    usable.is_ok_and(|o| o.status.success())
}

/// A sparse cargo registry under `dir`, served at `https://index.test:PORT/`, holding the
/// crate `demo 1.0.0`, whose download is served from `https://dl.test:PORT/` as only the
/// index's own `config.json` says.
pub(crate) fn cargo_registry(dir: &TestDir) -> HttpServer {
    let root = dir.join("registry");
    std::fs::create_dir_all(&root).unwrap();
    let server = HttpServer::start_tls_files(&dir.path, &["index.test", "dl.test"], root.clone());
    let port = server.port();
    std::fs::write(
        root.join("config.json"),
        format!(r#"{{"dl":"https://dl.test:{port}/crates"}}"#),
    )
    .unwrap();
    cargo_crate(dir, &root, &root.join("crates"));
    server
}

/// The crate `demo 1.0.0`: its entry in the sparse index at `index`, its download under
/// `downloads` (as `{crate}/{version}/download`).
pub(crate) fn cargo_crate(dir: &TestDir, index: &std::path::Path, downloads: &std::path::Path) {
    std::fs::create_dir_all(index.join("de/mo")).unwrap();
    let src = dir.join("crate-src/demo-1.0.0");
    std::fs::create_dir_all(src.join("src")).unwrap();
    std::fs::write(
        src.join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"1.0.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        src.join("src/lib.rs"),
        "pub fn hi() -> &'static str { \"hi\" }\n",
    )
    .unwrap();
    let download = downloads.join("demo/1.0.0");
    std::fs::create_dir_all(&download).unwrap();
    let packed = Command::new("tar")
        .arg("czf")
        .arg(download.join("download"))
        .arg("-C")
        .arg(dir.join("crate-src"))
        .arg("demo-1.0.0")
        .status()
        .unwrap();
    assert!(packed.success());
    let cksum = crate::support::file_sha256(&download.join("download"));
    std::fs::write(
        index.join("de/mo/demo"),
        format!(
            "{{\"name\":\"demo\",\"vers\":\"1.0.0\",\"deps\":[],\"cksum\":\"{cksum}\",\"features\":{{}},\"yanked\":false}}\n"
        ),
    )
    .unwrap();
}

/// `cargo fetch` from a local sparse registry set through source replacement in the
/// project's `.cargo/config.toml`, whose crates download from a second host that only
/// the index's own `config.json` names: `--allow-tool cargo` finds both.
#[test]
fn cargo_fetches_from_a_replaced_source_and_its_download_host() {
    // The test then has nothing to run; it runs as the user who installed cargo.
    if !cargo_runs() {
        eprintln!("cargo is not runnable by this user: nothing to test");
        return;
    }
    TestDir::remove_leftovers_outside_tmp("tool-cargo");
    // The registry is set above the workspace (where cargo looks too), outside /tmp so the
    // sandbox sees it: a workspace file would not be taken as internal.
    let dir = TestDir::outside_tmp("tool-cargo");
    let server = cargo_registry(&dir);
    let port = server.port();
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"index.test\" = \"127.0.0.1\"\n\"dl.test\" = \"127.0.0.1\"\n",
    );
    let run = Run::new(&dir);
    let ws = &run.workspace;
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(dir.join(".cargo")).unwrap();
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() { println!(\"{}\", demo::hi()); }\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ndemo = \"1\"\n",
    )
    .unwrap();
    // The CA outside every writable root: one in the workspace could have been planted
    // to forge the index's config.json (checked below).
    let ca = dir.join("test-ca.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let cargo_config = |ca: &std::path::Path| {
        format!(
            "[source.crates-io]\nreplace-with = \"local\"\n\n[source.local]\nregistry = \"sparse+https://index.test:{port}/\"\n\n\
             [http]\ncainfo = \"{}\"\n\n[net]\nretry = 0\n",
            ca.display()
        )
    };
    std::fs::write(dir.join(".cargo/config.toml"), cargo_config(&ca)).unwrap();
    let cache_home = dir.join("cache-home").display().to_string();
    let with = |extra: &[&str]| {
        let mut args = vec!["--quiet", "--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("XDG_CACHE_HOME", cache_home.clone())
    };
    let out =
        with(&["--allow-tool", "cargo", "--private-ok"]).sh("cargo fetch --quiet && echo FETCHED");
    assert_eq!(stdout(&out), "FETCHED\n", "{}", stderr(&out));
    let via_dl = Run::new(&dir).events().into_iter().any(|e| {
        e["type"] == "net"
            && e["host"] == "dl.test"
            && e["decision"] == "allow"
            && e["rule"]["file"]
                .as_str()
                .unwrap_or("")
                .contains("config.json")
    });
    assert!(
        via_dl,
        "the download host was not allowed by its config.json rule"
    );
    // The crate went to cargo's cache in netbox's directory, not the user's CARGO_HOME.
    let cached = std::fs::read_dir(dir.join("cache-home/netbox/cargo"))
        .unwrap()
        .flatten()
        .any(|e| e.path().join("registry/cache").is_dir());
    assert!(cached, "no registry cache in netbox's cargo home");

    // A CA in the workspace could have been planted to forge config.json: the download
    // host it names is allowed, but not trusted to reach a private address.
    let planted = ws.join("planted-ca.pem");
    std::fs::copy(&ca, &planted).unwrap();
    std::fs::write(dir.join(".cargo/config.toml"), cargo_config(&planted)).unwrap();
    let probe = format!(
        "curl -s -o /dev/null -w '%{{http_code}}' --cacert {} https://dl.test:{port}/config.json",
        ca.display()
    );
    let out = with(&["--allow-tool", "cargo", "--private-ok"]).sh(&probe);
    assert_eq!(stdout(&out), "000", "{}", stderr(&out));
    // Positive control: the same request with the CA outside the workspace.
    std::fs::write(dir.join(".cargo/config.toml"), cargo_config(&ca)).unwrap();
    let out = with(&["--allow-tool", "cargo", "--private-ok"]).sh(&probe);
    assert_eq!(stdout(&out), "200", "{}", stderr(&out));

    // Control: without --allow-tool (and a writable CARGO_HOME of its own), nothing is
    // fetched.
    let cargo_home = format!("CARGO_HOME={}/.cargo-home", ws.display());
    let out = with(&["--env", &cargo_home]).sh("cargo fetch --quiet && echo FETCHED");
    assert_ne!(stdout(&out), "FETCHED\n", "{}", stderr(&out));
    assert_refused_and_logged(&dir, "index.test", &out);
}

/// With `--allow-tool cargo`, CMD's `CARGO_HOME` is netbox's, writable, and holds the
/// user's own settings afresh at each run: what an earlier run wrote there as settings
/// or programs (a `rustc-wrapper`, credentials with a provider, a link, a `cargo-NAME`
/// in `bin/`) is gone by the next.
#[test]
fn cargos_home_of_netboxs_gets_the_users_settings_afresh_each_run() {
    let dir = TestDir::new("tool-cargo-home");
    let user = TestDir::outside_tmp("tool-cargo-user-home");
    user.write("config.toml", "[net]\nretry = 0\n");
    let with = || {
        Run::new(&dir)
            .args_from(&["--quiet", "--allow-tool", "cargo"])
            .env("CARGO_HOME", user.path.display().to_string())
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    let plant = "cat \"$CARGO_HOME/config.toml\"; \
                 printf '[build]\\nrustc-wrapper = \"/tmp/evil\"\\n' > \"$CARGO_HOME/config.toml\"; \
                 echo '[registry]' > \"$CARGO_HOME/credentials.toml\"; \
                 ln -s /etc/passwd \"$CARGO_HOME/config\"; \
                 mkdir \"$CARGO_HOME/bin\" && echo planted > \"$CARGO_HOME/bin/cargo-clippy\"; \
                 echo \"$CARGO_HOME\"";
    let out = with().sh(plant);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("[net]\nretry = 0\n"), "{text}");
    let home = text.lines().last().unwrap().to_owned();
    assert!(
        home.starts_with(&dir.join("cache-home/netbox/cargo").display().to_string()),
        "{home}"
    );
    // Positive control: the planting took (it would be read by a later run).
    assert!(std::path::Path::new(&home)
        .join("credentials.toml")
        .exists());
    let out = with().sh("cat \"$CARGO_HOME/config.toml\"; ls -A \"$CARGO_HOME\"");
    assert_eq!(
        stdout(&out),
        "[net]\nretry = 0\nconfig.toml\n",
        "{}",
        stderr(&out)
    );
    // The user's own settings were never touched.
    assert_eq!(
        std::fs::read_to_string(user.join("config.toml")).unwrap(),
        "[net]\nretry = 0\n"
    );
}
