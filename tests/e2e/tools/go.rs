//! go: the module proxy go's settings name.

use std::process::Command;

use super::assert_refused_and_logged;
use crate::support::upstream::HttpServer;
use crate::support::{stderr, stdout, Run, TestDir};

/// `go run` of a module that needs another from a local module proxy that go's own
/// settings name (`GOPROXY`): `--allow-tool go` asks `go env` and finds it; the module
/// and build caches go to netbox's cache directory.
#[test]
fn go_fetches_modules_from_the_proxy_its_settings_name() {
    let dir = TestDir::new("tool-go");
    let proxy = dir.join("proxy");
    let server = HttpServer::start_tls_files(&dir.path, &["goproxy.test"], proxy.clone());
    let port = server.port();
    go_module(&proxy);
    let pins = dir.write("pins.toml", "[hosts]\n\"goproxy.test\" = \"127.0.0.1\"\n");
    let run = Run::new(&dir);
    std::fs::write(
        run.workspace.join("go.mod"),
        "module app\n\ngo 1.19\n\nrequire demo.test/hello v1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        run.workspace.join("main.go"),
        "package main\n\nimport (\n\t\"fmt\"\n\n\t\"demo.test/hello\"\n)\n\n\
         func main() { fmt.Println(hello.Greeting) }\n",
    )
    .unwrap();
    let ca_dir = TestDir::outside_tmp("tool-go-ca");
    let ca = ca_dir.join("ca.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let with = |extra: &[&str]| {
        let mut args = vec!["--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("GOPROXY", format!("https://goproxy.test:{port}"))
            .env("GOSUMDB", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("SSL_CERT_FILE", ca.display().to_string())
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    let out = with(&["--allow-tool", "go", "--private-ok"]).sh("go run .");
    assert_eq!(stdout(&out), "hello from the proxy\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("GOPROXY (go env)"),
        "{}",
        stderr(&out)
    );
    assert!(dir.join("cache-home/netbox/go").is_dir());
    // Control: without it (and with caches of its own: netbox gives none), refused.
    let ws = run.workspace.display().to_string();
    let out = with(&[])
        .env("GOMODCACHE", format!("{ws}/mod"))
        .env("GOCACHE", format!("{ws}/build"))
        .sh("go run .");
    assert_ne!(stdout(&out), "hello from the proxy\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("blocked CONNECT goproxy.test"),
        "{}",
        stderr(&out)
    );
    assert_refused_and_logged(&dir, "goproxy.test", &out);
}

/// The module `demo.test/hello v1.0.0` laid out as a module proxy serves it, under `proxy`:
/// its version list, info, go.mod and zip.
pub(crate) fn go_module(proxy: &std::path::Path) {
    let versions = proxy.join("demo.test/hello/@v");
    std::fs::create_dir_all(&versions).unwrap();
    let go_mod = "module demo.test/hello\n\ngo 1.19\n";
    std::fs::write(versions.join("list"), "v1.0.0\n").unwrap();
    std::fs::write(
        versions.join("v1.0.0.info"),
        "{\"Version\":\"v1.0.0\",\"Time\":\"2026-12-01T00:00:00Z\"}",
    )
    .unwrap();
    std::fs::write(versions.join("v1.0.0.mod"), go_mod).unwrap();
    let zipped = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
             \x20   z.writestr('demo.test/hello@v1.0.0/go.mod', sys.argv[2])\n\
             \x20   z.writestr('demo.test/hello@v1.0.0/hello.go', 'package hello\\n\\nconst Greeting = \"hello from the proxy\"\\n')\n",
        ])
        .arg(versions.join("v1.0.0.zip"))
        .arg(go_mod)
        .status()
        .unwrap();
    assert!(zipped.success());
}
