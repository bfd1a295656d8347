//! pip: a local simple index its configuration names, and the files host its pages name.

use std::process::Command;

use super::assert_refused_and_logged;
use crate::support::upstream::HttpServer;
use crate::support::{stderr, stdout, Run, TestDir};

/// A pip registry's static layout under `dir/index`, served over HTTPS for
/// `pypi.mirror.test` (the index) and `files.mirror.test` (its files), with one wheel
/// (`demopkg`) built in it: the server, the layout's root and the wheel's SHA-256. The
/// project's page is the caller's to write.
pub(crate) fn pip_registry(dir: &TestDir) -> (HttpServer, std::path::PathBuf, String) {
    let root = dir.join("index");
    std::fs::create_dir_all(root.join("simple/demopkg")).unwrap();
    let server = HttpServer::start_tls_files(
        &dir.path,
        &["pypi.mirror.test", "files.mirror.test"],
        root.clone(),
    );
    let wheel = build_wheel(&root);
    let sha = crate::support::file_sha256(&wheel);
    (server, root, sha)
}

/// A wheel `demopkg-1.0` (pure Python), built by hand: a zip with its module, METADATA,
/// WHEEL and RECORD.
pub(crate) fn build_wheel(dir: &std::path::Path) -> std::path::PathBuf {
    let wheel = dir.join("demopkg-1.0-py3-none-any.whl");
    let script = r#"
import sys, zipfile
out = sys.argv[1]
files = {
    "demopkg/__init__.py": "GREETING = 'demopkg says hi'\n",
    "demopkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demopkg\nVersion: 1.0\n",
    "demopkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = "".join(f"{name},,\n" for name in files) + "demopkg-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(out, "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr("demopkg-1.0.dist-info/RECORD", record)
"#;
    let built = Command::new("python3")
        .args(["-c", script])
        .arg(&wheel)
        .status()
        .unwrap();
    assert!(built.success());
    wheel
}

/// `pip install` from a local simple index that the user's pip configuration names
/// (`PIP_INDEX_URL`), whose files live on a second host that only the index's own pages
/// name: `--allow-tool pip` finds both.
#[test]
fn pip_installs_from_the_index_its_configuration_names_and_its_files_host() {
    let dir = TestDir::new("tool-pip");
    let (server, root, sha) = pip_registry(&dir);
    let port = server.port();
    // The file server answers a directory with its index.json: HTML pages here. No `pip`
    // project: netbox reads the first one the index lists.
    std::fs::write(
        root.join("simple/index.json"),
        "<html><body><a href=\"/simple/demopkg/\">demopkg</a></body></html>\n",
    )
    .unwrap();
    // A page may link anything: hosts on other ports (an index's files are on 443, 80 or
    // its own port) are not taken, and two file hosts at most.
    let odd: String = (0..50)
        .map(|i| format!("<a href=\"https://odd{i}.test:{}/x.whl\">x</a>", 22 + i))
        .collect();
    let more: String = (0..5)
        .map(|i| format!("<a href=\"https://cdn{i}.test/x.whl\">x</a>"))
        .collect();
    std::fs::write(
        root.join("simple/demopkg/index.json"),
        format!(
            "<html><body><a href=\"https://files.mirror.test:{port}/demopkg-1.0-py3-none-any.whl#sha256={sha}\">demopkg-1.0-py3-none-any.whl</a>{odd}{more}</body></html>\n"
        ),
    )
    .unwrap();
    let pins = dir.write(
        "pins.toml",
        "[hosts]\n\"pypi.mirror.test\" = \"127.0.0.1\"\n\"files.mirror.test\" = \"127.0.0.1\"\n",
    );
    let run = Run::new(&dir);
    // The CA outside every writable root (one in the workspace could have been planted to
    // forge the index's pages: what they name would not be trusted with --private-ok).
    let ca_dir = TestDir::outside_tmp("tool-pip-ca");
    let ca = ca_dir.join("test-ca.pem");
    std::fs::copy(server.ca.as_ref().unwrap(), &ca).unwrap();
    let index = format!("https://pypi.mirror.test:{port}/simple/");
    let with = |extra: &[&str]| {
        let mut args = vec!["--allowlist", pins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Run::new(&dir)
            .args_from(&args)
            .env("PIP_INDEX_URL", index.clone())
            .env("PIP_CERT", ca.display().to_string())
            .env("PIP_RETRIES", "0")
            .env("PIP_FIND_LINKS", "")
            .env(
                "XDG_CACHE_HOME",
                dir.join("cache-home").display().to_string(),
            )
    };
    // TLS is not what is tested here (pip 23 did not take the test CA through a proxy):
    // the index is a trusted host. pip's own status is not used: pyenv's shim fails the
    // install when it cannot rehash its read-only shims, after installing.
    let install =
        "pip install --quiet --trusted-host pypi.mirror.test --trusted-host files.mirror.test \
                   --no-deps --target deps demopkg; \
                   PYTHONPATH=deps python3 -c 'import demopkg; print(demopkg.GREETING)'";
    // Without --allow-tool, the index pip's settings name is refused, and netbox says the
    // flag once pip is done (CMD is pip itself).
    let out = with(&[]).argv(&[
        "pip",
        "install",
        "--quiet",
        "--trusted-host",
        "pypi.mirror.test",
        "--no-deps",
        "--target",
        "deps",
        "demopkg",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "netbox: hint: pypi.mirror.test:{port} is a registry pip's settings name; \
             --allow-tool pip allows what they name"
        )),
        "{}",
        stderr(&out)
    );
    let out = with(&["--allow-tool", "pip", "--private-ok"]).sh(install);
    assert_eq!(stdout(&out), "demopkg says hi\n", "{}", stderr(&out));

    // The start-up line says where the files host came from: the index, its files host
    // and one more (cdn0), none of the odd ports.
    assert!(
        stderr(&out).contains(&format!(
            "pip: 3 hosts (index-url in the environment (PIP_INDEX_URL); files on https://pypi.mirror.test:{port}/simple/demopkg/)"
        )),
        "{}",
        stderr(&out)
    );
    assert!(dir.join("cache-home/netbox/pip").is_dir());
    // A CA in the workspace could have been planted to forge the index's pages: the
    // files host they name is allowed, but not trusted to reach a private address.
    std::fs::remove_dir_all(run.workspace.join("deps")).unwrap();
    let planted_ca = run.workspace.join("planted-ca.pem");
    std::fs::copy(&ca, &planted_ca).unwrap();
    let out = with(&["--allow-tool", "pip", "--private-ok"])
        .env("PIP_CERT", planted_ca.display().to_string())
        .sh(install);
    assert_ne!(stdout(&out), "demopkg says hi\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("blocked CONNECT files.mirror.test"),
        "{}",
        stderr(&out)
    );
    // Control: without it, refused.
    let _ = std::fs::remove_dir_all(run.workspace.join("deps"));
    let out = with(&["--quiet"]).sh(install);
    assert_ne!(stdout(&out), "demopkg says hi\n", "{}", stderr(&out));
    assert_refused_and_logged(&dir, "pypi.mirror.test", &out);
}
