//! A shared bridge speaking TLS to its clients (`--tls-cert`, `--tls-key`), and naming a
//! tenant by the client certificate a CA of the operator's issued (`--client-ca`, each
//! tenant's `client_names`): real curl as an HTTPS-proxy client, with and without
//! certificates, against a real local server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::upstream::HttpServer;
use crate::support::{curl, netbox_bin, sha256_hex, stderr, stdout, Bridge, TestDir};

const SECRET_A: &str = "mtls-a-Pq8Vx3Nm6Rt1Kz";

/// A CA of the test's own, which signs certificates for the names it is given.
struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (a name with `://` is a URI), its key, written to
    /// `dir/NAME.pem` and `dir/NAME.key`.
    fn issue(&self, dir: &TestDir, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        use rcgen::{CertificateParams, KeyPair, SanType};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) if n.contains("://") => SanType::URI((*n).try_into().unwrap()),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            })
            .collect();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            dir.write(&format!("{file}.pem"), &cert.pem()),
            dir.write(&format!("{file}.key"), &key.serialize_pem()),
        )
    }
}

/// team-a may reach a.test and is named by runner-a.ci.test or its token; team-b reaches
/// b.test and is named by a SPIFFE ID. Returns the tenants file.
fn tenants(dir: &TestDir, port: u16) -> PathBuf {
    for (file, host) in [("a.toml", "a.test"), ("b.toml", "b.test")] {
        dir.write(
            file,
            &format!("allow_private = [\"{host}:{port}\"]\n[hosts]\n\"{host}\" = \"127.0.0.1\"\n"),
        );
    }
    dir.write(
        "tenants.toml",
        &format!(
            "[tenants.team-a]\nallowlist = [\"a.toml\"]\nsecrets = [\"sha256:{}\"]\n\
             client_names = [\"Runner-A.ci.test.\"]\n\
             [tenants.team-b]\nallowlist = [\"b.toml\"]\n\
             client_names = [\"spiffe://corp.test/team-b\"]\n",
            sha256_hex(SECRET_A.as_bytes())
        ),
    )
}

/// curl through the bridge as an HTTPS proxy; with `cert`, presenting it. The status
/// curl printed, its exit code, and what it said on stderr.
fn fetch(
    bridge: &Bridge,
    server_ca: &Path,
    cert: Option<&(PathBuf, PathBuf)>,
    user: Option<&str>,
    url: &str,
    tunnel: bool,
) -> (String, i32, String) {
    let proxy = match user {
        Some(user) => format!("https://{user}@{}", bridge.addr),
        None => format!("https://{}", bridge.addr),
    };
    let ca = server_ca.display().to_string();
    let mut args = vec!["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-x", &proxy];
    args.extend(["--proxy-cacert", &ca]);
    let (cert_arg, key_arg);
    if let Some((cert, key)) = cert {
        cert_arg = cert.display().to_string();
        key_arg = key.display().to_string();
        args.extend(["--proxy-cert", &cert_arg, "--proxy-key", &key_arg]);
    }
    if tunnel {
        args.push("-p");
    }
    args.push(url);
    let out = curl(&args);
    (stdout(&out), out.status.code().unwrap_or(-1), stderr(&out))
}

#[test]
fn a_client_certificate_names_its_tenant_on_a_tls_listener() {
    let dir = TestDir::new("bridge-mtls");
    let http = HttpServer::start();
    let p = http.port();
    let server_ca = Ca::new("bridge CA");
    let (bridge_cert, bridge_key) = server_ca.issue(&dir, "bridge", &["127.0.0.1"]);
    let server_ca_file = dir.write("server-ca.pem", &server_ca.pem);
    let client_ca = Ca::new("runners CA");
    let client_ca_file = dir.write("client-ca.pem", &client_ca.pem);
    let runner_a = client_ca.issue(&dir, "runner-a", &["runner-a.ci.test"]);
    let runner_b = client_ca.issue(&dir, "runner-b", &["spiffe://corp.test/team-b"]);
    let stranger = client_ca.issue(&dir, "stranger", &["stranger.ci.test"]);
    let rogue = Ca::new("another CA").issue(&dir, "rogue", &["runner-a.ci.test"]);
    let file = tenants(&dir, p);
    let arg = |p: &Path| p.display().to_string();
    let bridge = Bridge::start_args(
        &dir,
        &[
            "--tenants".into(),
            arg(&file),
            "--tls-cert".into(),
            arg(&bridge_cert),
            "--tls-key".into(),
            arg(&bridge_key),
            "--client-ca".into(),
            arg(&client_ca_file),
        ],
    );
    let ca = server_ca_file.as_path();
    let (a_url, b_url) = (
        format!("http://a.test:{p}/hello"),
        format!("http://b.test:{p}/hello"),
    );

    // Positive controls: each certificate's tenant reaches its own host, forwarded and
    // tunnelled, through TLS to the bridge.
    for tunnel in [false, true] {
        let got = fetch(&bridge, ca, Some(&runner_a), None, &a_url, tunnel);
        assert_eq!(got.0, "200", "{got:?} {:?}", bridge.events(0));
        assert_eq!(
            fetch(&bridge, ca, Some(&runner_b), None, &b_url, tunnel).0,
            "200"
        );
    }
    // A large download through a tunnel inside TLS arrives whole.
    let big = format!("http://a.test:{p}/bytes/3000000");
    let out = curl(&[
        "-sS",
        "-p",
        "-x",
        &format!("https://{}", bridge.addr),
        "--proxy-cacert",
        &arg(ca),
        "--proxy-cert",
        &arg(&runner_a.0),
        "--proxy-key",
        &arg(&runner_a.1),
        &big,
    ]);
    assert_eq!(out.stdout.len(), 3_000_000, "{}", stderr(&out));
    // Neither reaches the other's host.
    assert_eq!(
        fetch(&bridge, ca, Some(&runner_a), None, &b_url, false).0,
        "502"
    );
    assert_eq!(
        fetch(&bridge, ca, Some(&runner_b), None, &a_url, false).0,
        "502"
    );
    // No certificate: the token still names team-a; nothing names no one.
    let a_user = format!("team-a:{SECRET_A}");
    assert_eq!(
        fetch(&bridge, ca, None, Some(&a_user), &a_url, false).0,
        "200"
    );
    assert_eq!(fetch(&bridge, ca, None, None, &a_url, false).0, "407");
    // A certificate the CA issued for no tenant's name, and credentials for another
    // tenant than the certificate's: 407.
    assert_eq!(
        fetch(&bridge, ca, Some(&stranger), None, &a_url, false).0,
        "407"
    );
    assert_eq!(
        fetch(&bridge, ca, Some(&runner_b), Some(&a_user), &b_url, false).0,
        "407"
    );
    // A certificate of another CA, for team-a's very name: refused in the handshake.
    let (code, exit, said) = fetch(&bridge, ca, Some(&rogue), None, &a_url, false);
    assert_ne!(exit, 0, "{code} {said}");
    assert_eq!(code, "000", "{said}");
    // Plain HTTP to the TLS listener: no request is read.
    let out = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-x",
        &bridge.proxy_url(),
        &a_url,
    ]);
    assert_ne!(stdout(&out), "200");

    let events = bridge.events(12);
    let by = |host: &str, session: &str, decision: &str| {
        events
            .iter()
            .filter(|e| e["host"] == host && e["session"] == session && e["decision"] == decision)
            .count()
    };
    assert!(by("a.test", "e2e/team-a", "allow") >= 4, "{events:?}");
    assert!(by("b.test", "e2e/team-b", "allow") >= 2, "{events:?}");
    assert_eq!(by("b.test", "e2e/team-a", "deny"), 1, "{events:?}");
    assert_eq!(by("a.test", "e2e/team-b", "deny"), 1, "{events:?}");
    let handshakes = events
        .iter()
        .filter(|e| {
            e["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("TLS handshake failed"))
        })
        .count();
    assert_eq!(
        handshakes, 2,
        "the rogue certificate and plain HTTP: {events:?}"
    );
    assert!(bridge.stderr().iter().any(|l| l.contains("(TLS)")));
}

#[test]
fn client_names_need_tls_and_a_client_ca() {
    let dir = TestDir::new("bridge-mtls-mistakes");
    let file = tenants(&dir, 9);
    let ca = Ca::new("a CA");
    let (cert, key) = ca.issue(&dir, "bridge", &["127.0.0.1"]);
    let ca_file = dir.write("ca.pem", &ca.pem);
    let arg = |p: &Path| p.display().to_string();
    let cases: [(Vec<String>, &str); 4] = [
        (
            vec!["--tenants".into(), arg(&file)],
            "give --tls-cert, --tls-key and --client-ca",
        ),
        (
            vec![
                "--tenants".into(),
                arg(&file),
                "--tls-cert".into(),
                arg(&cert),
                "--tls-key".into(),
                arg(&key),
            ],
            "give --client-ca",
        ),
        (
            vec![
                "--allow".into(),
                "x.test".into(),
                "--tls-cert".into(),
                arg(&cert),
                "--tls-key".into(),
                arg(&key),
                "--client-ca".into(),
                arg(&ca_file),
            ],
            "it goes with --tenants",
        ),
        (
            vec![
                "--allow".into(),
                "x.test".into(),
                "--tls-cert".into(),
                arg(&cert),
                "--tls-key".into(),
                arg(&ca_file),
            ],
            "--tls-key",
        ),
    ];
    for (args, said) in cases {
        let out = Command::new(netbox_bin())
            .args(["bridge", "--listen", "127.0.0.1:0"])
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let text = stderr(&out);
        assert!(text.contains(said), "{args:?}: {text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}
