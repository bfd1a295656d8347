//! `--bind SRC DST` and `--ro-bind SRC DST`: the host's SRC shows at DST as well, as the
//! sandbox sees it at SRC: a hidden file under SRC reads empty at DST, a `.git` under a
//! writable SRC is read-only at DST, and a read-only bind refuses writes. A DST that would
//! cover the workspace, lie in a protected path, or does not exist is one line and 125.

use crate::support::{git, stderr, stdout, Run, TestDir};

#[test]
fn a_host_path_shows_at_another_path_with_its_protections() {
    // Outside the host's /tmp: the sandbox has its own.
    let dir = TestDir::outside_tmp("binds");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), "hello\n").unwrap();
    std::fs::write(src.join("secret.txt"), "the key\n").unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    git(&data, &["init", "-q"]);
    let run = Run::new(&dir);
    std::fs::create_dir_all(run.workspace.join("mnt")).unwrap();
    let mnt = run.workspace.join("mnt");
    let run = run.args_from(&[
        "--ro-bind",
        src.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "--hide",
        src.join("secret.txt").to_str().unwrap(),
        "--bind",
        data.to_str().unwrap(),
        "/tmp/data",
    ]);
    let out = run.sh("cat mnt/a.txt\n\
         wc -c < mnt/secret.txt\n\
         touch mnt/new 2>/dev/null && echo wrote || echo refused\n\
         echo w > /tmp/data/w.txt && echo wrote-data\n\
         touch /tmp/data/.git/hooks/x 2>/dev/null && echo hook || echo hook-refused\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "hello\n0\nrefused\nwrote-data\nhook-refused\n",
        "{}",
        stderr(&out)
    );
    // The writable bind wrote the host's SRC (the control); nothing else changed.
    assert_eq!(std::fs::read_to_string(data.join("w.txt")).unwrap(), "w\n");
    assert!(!src.join("new").exists());
    assert!(!data.join(".git/hooks/x").exists());
    assert_eq!(
        std::fs::read_to_string(src.join("secret.txt")).unwrap(),
        "the key\n"
    );
    // The probe proved both: the read-only one refuses, the writable one is SRC itself.
    let probe = run.probe();
    let checks = probe["checks"].as_array().unwrap();
    let bound = checks
        .iter()
        .find(|c| c["name"] == "bound paths")
        .expect("a bound-paths row");
    assert_eq!(bound["passed"], true, "{bound:#}");
    assert!(bound.to_string().contains("/ws/mnt"), "{bound:#}");
    let roots = checks
        .iter()
        .find(|c| c["name"] == "read-only root, writable roots")
        .unwrap();
    assert!(
        roots.to_string().contains("/tmp/data is the directory"),
        "{roots:#}"
    );

    // A directory not itself a root, shown at a fresh place in the private /tmp.
    let out = Run::new(&dir)
        .args_from(&["--ro-bind", src.to_str().unwrap(), "/tmp/view"])
        .sh("cat /tmp/view/a.txt; touch /tmp/view/x 2>/dev/null && echo wrote || echo refused");
    assert_eq!(stdout(&out), "hello\nrefused\n", "{}", stderr(&out));

    // Mistakes: one line each, exit 125, nothing run.
    // `/` and the sandbox's own directories as SRC would show the host's terminals,
    // devices and processes.
    std::fs::create_dir_all(run.workspace.join("p")).unwrap();
    let p = run.workspace.join("p");
    for src in ["/", "/dev", "/proc", "/run"] {
        let out = Run::new(&dir)
            .args_from(&["--ro-bind", src, p.to_str().unwrap()])
            .sh("echo ran");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{src}: {err}");
        assert!(err.contains("SRC may not be /"), "{src}: {err}");
        assert!(stdout(&out).is_empty());
    }
    let ws = run.workspace.to_str().unwrap().to_owned();
    std::fs::create_dir_all(run.workspace.join(".git")).unwrap();
    let src = src.to_str().unwrap();
    for (dst, says) in [
        (ws.clone(), "would cover the writable root"),
        (format!("{ws}/.git"), "keeps read-only or hidden"),
        (format!("{ws}/missing"), "DST must exist"),
        ("relative/path".to_owned(), "must be an absolute path"),
        ("/proc/self".to_owned(), "the sandbox's own"),
    ] {
        let out = Run::new(&dir)
            .args_from(&["--ro-bind", src, &dst])
            .sh("echo ran");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{dst}: {err}");
        assert!(err.contains(says), "{dst}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(stdout(&out).is_empty());
    }
}

/// netbox's cache home is covered in the sandbox (every workspace's caches are there): a
/// source in it is refused with one line, not left to fail at mount. Control: a sibling
/// outside it binds.
#[test]
fn a_source_in_netboxs_cache_home_is_refused_up_front() {
    let dir = TestDir::outside_tmp("bind-cache-home");
    let other = dir.join("cache-home/netbox/another-workspace");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("a.txt"), "cached\n").unwrap();
    let beside = dir.join("beside");
    std::fs::create_dir_all(&beside).unwrap();
    std::fs::write(beside.join("a.txt"), "beside\n").unwrap();
    let run = Run::new(&dir);
    let view = run.workspace.join("view");
    std::fs::create_dir_all(&view).unwrap();
    let cache_home = dir.join("cache-home").display().to_string();
    let bind = |src: &std::path::Path| {
        Run::new(&dir)
            .env("XDG_CACHE_HOME", cache_home.clone())
            .args_from(&["--ro-bind", src.to_str().unwrap(), view.to_str().unwrap()])
            .sh("cat view/a.txt")
    };
    let out = bind(&beside);
    assert_eq!(stdout(&out), "beside\n", "{}", stderr(&out));
    let out = bind(&other);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("netbox's cache home"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(stdout(&out).is_empty());
}
