use std::io::{Read, Write};
use std::sync::Arc;

use super::*;

/// An HTTPS server on 127.0.0.1 for `reg.test`, on a thread of its own, answering every
/// request with `body`: its port and its CA (PEM, in a file).
fn serve(body: &'static str, dir: &std::path::Path) -> (u16, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["reg.test".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap(),
    );
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let connection = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            let mut tls = rustls::StreamOwned::new(connection, tcp);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && tls.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tls.write_all(answer.as_bytes());
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (port, ca_file)
}

/// A directory of its own under the system's temporary one.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("netbox-fetch-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A policy pinning `reg.test` to 127.0.0.1, as an allowlist's `[hosts]` does.
fn pinned(dir: &std::path::Path) -> bridge::Policy {
    let pins = dir.join("pins.toml");
    std::fs::write(&pins, "[hosts]\n\"reg.test\" = \"127.0.0.1\"\n").unwrap();
    bridge::Policy::load(&[pins]).unwrap()
}

fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

#[test]
fn a_registry_is_read_only_where_the_bridge_would_let_its_tool_reach_it() {
    let dir = scratch("reach");
    let (port, ca) = serve("{\"dl\":\"https://dl.test/\"}", &dir);
    let policy = pinned(&dir);
    let ctx = Context {
        cwd: &dir,
        untrusted: &[],
        policy: &policy,
        private_ok: true,
        hidden: &[],
        fetches: &Fetches::new(),
    };
    let url = format!("https://reg.test:{port}/config.json");
    let ca = ca.to_str().unwrap();
    // The user's own registry, said to be internal: its rule may reach 127.0.0.1.
    assert_eq!(
        https_document(&url, Some(ca), &ctx, Reach::Private).as_deref(),
        Ok("{\"dl\":\"https://dl.test/\"}")
    );
    // Anyone else's: a plain rule, which loopback (this machine's services) is not open to.
    let refused = https_document(&url, Some(ca), &ctx, Reach::AsTheToolWould).unwrap_err();
    assert!(
        refused.contains("refused as the bridge would")
            && refused.contains("127.0.0.1, a loopback address"),
        "{refused}"
    );
    // A CA named by a relative path would be read from the workspace.
    let relative = https_document(&url, Some("ca.pem"), &ctx, Reach::Private).unwrap_err();
    assert!(relative.contains("not an absolute path"), "{relative}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// netbox forks after asking the tools (STYLE.md rule 13): a fetch, DNS lookup and all,
/// must leave the process with the threads it had. Counted in a process of its own (this
/// test binary again, this test alone), where no other test starts threads meanwhile.
#[test]
fn a_fetch_leaves_no_thread_behind() {
    const ALONE: &str = "NETBOX_TEST_FETCH_ALONE";
    let name = "plan::tools::fetch::tests::a_fetch_leaves_no_thread_behind";
    if std::env::var_os(ALONE).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
        return;
    }
    let dir = scratch("threads");
    let (port, ca) = serve("counted", &dir);
    // Names nobody pinned go to this server, which is not there: hickory's client is
    // built and asks.
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dns = closed.local_addr().unwrap();
    drop(closed);
    resolve_as(bridge::DnsConfig::Servers(vec![dns]));
    let policy = pinned(&dir);
    let ctx = Context {
        cwd: &dir,
        untrusted: &[],
        policy: &policy,
        private_ok: true,
        hidden: &[],
        fetches: &Fetches::new(),
    };
    let before = threads();
    let read = https_document(
        &format!("https://reg.test:{port}/"),
        ca.to_str(),
        &ctx,
        Reach::Private,
    );
    assert_eq!(read.as_deref(), Ok("counted"));
    let unresolved =
        https_document("https://nowhere.test/", None, &ctx, Reach::Private).unwrap_err();
    assert!(
        unresolved.contains("cannot resolve nowhere.test"),
        "{unresolved}"
    );
    assert_eq!(threads(), before, "a thread outlived the fetch");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A standalone bridge asks the tools again at each reload, from a blocking task of its
/// running runtime: the fetch's own runtime starts and ends there too.
#[test]
fn a_fetch_runs_from_a_blocking_task_of_a_running_bridge() {
    let dir = scratch("reload");
    let (port, ca) = serve("reloaded", &dir);
    let running = tokio::runtime::Runtime::new().unwrap();
    let at = dir.clone();
    let read = running.block_on(async move {
        tokio::task::spawn_blocking(move || {
            let policy = pinned(&at);
            let ctx = Context {
                cwd: &at,
                untrusted: &[],
                policy: &policy,
                private_ok: true,
                hidden: &[],
                fetches: &Fetches::new(),
            };
            let url = format!("https://reg.test:{port}/");
            https_document(&url, ca.to_str(), &ctx, Reach::Private)
        })
        .await
        .unwrap()
    });
    assert_eq!(read.as_deref(), Ok("reloaded"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The user's own `allow_private` rule for a name lets its tool reach a registry there
/// from the sandbox, and so a fetch for a registry the user's settings name; never one a
/// workspace file names (read at a public address only). Each fetch made is recorded for
/// the event log.
#[test]
fn a_registry_a_workspace_file_names_is_read_at_a_public_address_only() {
    let dir = scratch("public-only");
    let (port, ca) = serve("{\"dl\":\"https://dl.test/\"}", &dir);
    let mut policy = pinned(&dir);
    policy
        .add_private_rule(&format!("reg.test:{port}"), "the user's allowlist")
        .unwrap();
    let fetches = Fetches::new();
    let ctx = Context {
        cwd: &dir,
        untrusted: &[],
        policy: &policy,
        private_ok: false,
        hidden: &[],
        fetches: &fetches,
    };
    let url = format!("https://reg.test:{port}/config.json");
    let ca = ca.to_str().unwrap();
    let refused = https_document(&url, Some(ca), &ctx, Reach::PublicOnly).unwrap_err();
    assert!(
        refused.contains(
            "reg.test resolves to 127.0.0.1, a loopback address, and a registry a workspace \
             file names is read only at a public address"
        ),
        "{refused}"
    );
    // Control: the user's own registry, under the same rule.
    assert_eq!(
        https_document(&url, Some(ca), &ctx, Reach::AsTheToolWould).as_deref(),
        Ok("{\"dl\":\"https://dl.test/\"}")
    );
    let records = fetches.take_records();
    assert_eq!(records.len(), 2);
    let log = dir.join("events.jsonl");
    let events = bridge::EventLog::open(Some(&log), bridge::Stderr::Quiet).unwrap();
    log_records(&events, "s1", records);
    drop(events);
    let written: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(&str, &str, &str)> = written
        .iter()
        .map(|r| {
            (
                r["session"].as_str().unwrap(),
                r["proto"].as_str().unwrap(),
                r["decision"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("s1", "fetch", "deny"), ("s1", "fetch", "allow")]);
    let _ = std::fs::remove_dir_all(&dir);
}
