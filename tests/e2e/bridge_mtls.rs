//! A shared bridge speaking TLS to its clients (`--tls-cert`, `--tls-key`), and naming a
//! tenant by the client certificate a CA of the operator's issued (`--client-ca`, each
//! tenant's `client_names`): real curl as an HTTPS-proxy client, with and without
//! certificates, against a real local server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::upstream::HttpServer;
use crate::support::{curl, netbox_bin, sha256_hex, stderr, stdout, Bridge, TestDir};

const SECRET_A: &str = "mtls-a-Pq8Vx3Nm6Rt1Kz";
const SECRET_B: &str = "mtls-b-Lw2Hy7Dc4Sj9Ub";

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

    /// A certificate for `names` (a name with `://`, or written `uri:NAME`, is a URI), its
    /// key, written to `dir/NAME.pem` and `dir/NAME.key`.
    fn issue(&self, dir: &TestDir, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        use rcgen::{CertificateParams, KeyPair, SanType};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names
            .iter()
            .map(
                |n| match (n.parse::<std::net::IpAddr>(), n.strip_prefix("uri:")) {
                    (Ok(ip), _) => SanType::IpAddress(ip),
                    (_, Some(uri)) => SanType::URI(uri.try_into().unwrap()),
                    _ if n.contains("://") => SanType::URI((*n).try_into().unwrap()),
                    _ => SanType::DnsName((*n).try_into().unwrap()),
                },
            )
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
             [tenants.team-b]\nallowlist = [\"b.toml\"]\nsecrets = [\"sha256:{}\"]\n\
             client_names = [\"spiffe://corp.test/team-b\"]\n",
            sha256_hex(SECRET_A.as_bytes()),
            sha256_hex(SECRET_B.as_bytes())
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
    let TlsBridge {
        bridge,
        server_ca,
        client_ca,
        runner_a,
        ..
    } = tls_bridge(&dir, p);
    let runner_b = client_ca.issue(&dir, "runner-b", &["spiffe://corp.test/team-b"]);
    let stranger = client_ca.issue(&dir, "stranger", &["stranger.ci.test"]);
    let rogue = Ca::new("another CA").issue(&dir, "rogue", &["runner-a.ci.test"]);
    let arg = |p: &Path| p.display().to_string();
    let ca = server_ca.as_path();
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
    // A name of one type never stands for the other (a CA constrained to DNS names still
    // signs any URI): team-a's DNS name as a URI is no one's.
    let uri_not_dns = client_ca.issue(&dir, "uri-not-dns", &["uri:runner-a.ci.test"]);
    assert_eq!(
        fetch(&bridge, ca, Some(&uri_not_dns), None, &a_url, false).0,
        "407"
    );
    // Every name counts: team-b's among twenty others still makes two tenants.
    let mut many: Vec<String> = (0..20).map(|i| format!("filler-{i}.ci.test")).collect();
    many.insert(0, "runner-a.ci.test".into());
    many.push("spiffe://corp.test/team-b".into());
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let two = client_ca.issue(&dir, "two-tenants", &many);
    assert_eq!(fetch(&bridge, ca, Some(&two), None, &a_url, false).0, "407");
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

    // Every attempt above is logged (the last, the plain HTTP one, as the bridge gives up
    // on it, which may be after curl has).
    let events = bridge.events(15);
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

/// A TLS bridge with client certificates, and the files its clients need.
struct TlsBridge {
    bridge: Bridge,
    server_ca: PathBuf,
    /// The CA of the bridge's --client-ca, for more client certificates.
    client_ca: Ca,
    runner_a: (PathBuf, PathBuf),
    other_ca: PathBuf,
}

fn tls_bridge(dir: &TestDir, port: u16) -> TlsBridge {
    let server_ca = Ca::new("bridge CA");
    let (cert, key) = server_ca.issue(dir, "bridge", &["127.0.0.1"]);
    let client_ca = Ca::new("runners CA");
    let client_ca_file = dir.write("client-ca.pem", &client_ca.pem);
    let runner_a = client_ca.issue(dir, "runner-a", &["runner-a.ci.test"]);
    let file = tenants(dir, port);
    let arg = |p: &Path| p.display().to_string();
    let bridge = Bridge::start_args(
        dir,
        &[
            "--tenants".into(),
            arg(&file),
            "--tls-cert".into(),
            arg(&cert),
            "--tls-key".into(),
            arg(&key),
            "--client-ca".into(),
            arg(&client_ca_file),
        ],
    );
    TlsBridge {
        bridge,
        server_ca: dir.write("server-ca.pem", &server_ca.pem),
        client_ca,
        runner_a,
        other_ca: dir.write("other-ca.pem", &Ca::new("another CA").pem),
    }
}

#[test]
fn a_sandbox_reaches_its_tls_bridge_with_a_client_certificate() {
    let http = HttpServer::start();
    let p = http.port();
    let remote_dir = TestDir::new("mtls-remote");
    let remote = tls_bridge(&remote_dir, p);
    let url = format!("https://{}", remote.bridge.addr);
    let arg = |p: &Path| p.display().to_string();
    // The key where CMD, which sees the host's /var/tmp, could name it.
    let outside = TestDir::outside_tmp("mtls-key");
    let key = outside.write(
        "runner-a.key",
        &std::fs::read_to_string(&remote.runner_a.1).unwrap(),
    );
    let with = |dir: &TestDir, ca: &Path, cert: bool| {
        let mut run = crate::support::Run::new(dir)
            .args_from(&["--bridge", &url, "--bridge-ca"])
            .arg(arg(ca));
        if cert {
            run = run
                .arg("--bridge-cert")
                .arg(arg(&remote.runner_a.0))
                .arg("--bridge-key")
                .arg(arg(&key));
        }
        run
    };
    // The certificate names team-a: its host both ways, the other tenant's refused, the
    // key empty to CMD.
    let dir = TestDir::new("mtls-run");
    let run = with(&dir, &remote.server_ca, true);
    let out = run.sh(&format!(
        "curl -sS http://a.test:{p}/hello; curl -sS -p http://a.test:{p}/hello; \
         curl -sS -o /dev/null -w '%{{http_code}}\\n' http://b.test:{p}/hello; \
         wc -c < {key}",
        key = key.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "hello from upstream\nhello from upstream\n502\n0\n"
    );
    let there = remote.bridge.events(4);
    let team_a = |host: &str| {
        there
            .iter()
            .filter(|e| e["host"] == host && e["session"] == "e2e/team-a")
            .count()
    };
    assert_eq!(team_a("a.test"), 2, "{there:?}");
    assert_eq!(team_a("b.test"), 1, "{there:?}");
    assert_eq!(team_a("netbox-probe-canary.invalid"), 1, "{there:?}");

    // A certificate file that holds the key too, beside another key file: CMD could read
    // the key there (only the key's file is hidden), so it is refused.
    let bundle = outside.write(
        "bundle.pem",
        &(std::fs::read_to_string(&remote.runner_a.0).unwrap()
            + &std::fs::read_to_string(&key).unwrap()),
    );
    let dir = TestDir::new("mtls-run-bundle");
    let out = crate::support::Run::new(&dir)
        .args_from(&["--bridge", &url, "--bridge-ca"])
        .arg(arg(&remote.server_ca))
        .arg("--bridge-cert")
        .arg(arg(&bundle))
        .arg("--bridge-key")
        .arg(arg(&key))
        .sh("true");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("holds a private key"),
        "{}",
        stderr(&out)
    );

    // A bridge whose certificate another CA issued, and a client with no certificate (and
    // no token): the probe fails and CMD never runs.
    for (case, ca, cert) in [
        ("another CA", remote.other_ca.as_path(), true),
        ("no client certificate", remote.server_ca.as_path(), false),
    ] {
        let dir = TestDir::new("mtls-run-refused");
        let run = with(&dir, ca, cert);
        let out = run.sh("touch ran");
        assert_eq!(out.status.code(), Some(125), "{case}: {}", stderr(&out));
        assert!(stderr(&out).contains("live probe failed"), "{case}");
        assert!(!run.workspace.join("ran").exists(), "{case}");
    }
}

#[test]
fn a_bridge_goes_out_through_an_https_upstream_proxy_with_its_certificate() {
    let http = HttpServer::start();
    let p = http.port();
    let remote_dir = TestDir::new("mtls-upstream");
    let remote = tls_bridge(&remote_dir, p);
    let arg = |p: &Path| p.display().to_string();
    let dir = TestDir::new("mtls-front");
    let front = Bridge::start(
        &dir,
        "allow = [\"a.test:*\", \"b.test:*\"]\n",
        &[
            "--upstream-proxy",
            &format!("https://{}", remote.bridge.addr),
            "--upstream-proxy-ca",
            &arg(&remote.server_ca),
            "--upstream-proxy-cert",
            &arg(&remote.runner_a.0),
            "--upstream-proxy-key",
            &arg(&remote.runner_a.1),
        ],
    );
    let get = |url: &str, tunnel: bool| {
        let proxy = front.proxy_url();
        let mut args = vec!["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-x", &proxy];
        if tunnel {
            args.push("-p");
        }
        args.push(url);
        stdout(&curl(&args))
    };
    // team-a's policy over there: a.test through, b.test refused there (the front's own
    // allowlist lets both by).
    assert_eq!(get(&format!("http://a.test:{p}/hello"), false), "200");
    assert_eq!(get(&format!("http://a.test:{p}/hello"), true), "200");
    // Refused over there: a tunnel's refusal comes back as that bridge's own reason; a
    // forwarded request's answer is passed on as it came (from a company proxy, its own
    // answers cannot be told from its servers').
    assert_eq!(get(&format!("http://b.test:{p}/hello"), false), "502");
    let out = curl(&[
        "-sS",
        "-p",
        "-x",
        &front.proxy_url(),
        &format!("http://b.test:{p}/hello"),
    ]);
    assert!(stderr(&out).contains("response 502"), "{}", stderr(&out));
    let records: Vec<_> = front
        .events(4)
        .into_iter()
        .filter(|e| e["host"] == "b.test")
        .collect();
    let tunnel = records
        .iter()
        .find(|e| e["proto"] == "http_connect")
        .unwrap();
    assert_eq!(tunnel["reason"], "not_allowed", "{tunnel}");
    assert!(tunnel["via"].as_str().unwrap().starts_with("https://"));
    let forwarded = records
        .iter()
        .find(|e| e["proto"] == "http_forward")
        .unwrap();
    assert_eq!(forwarded["status"], 502, "{forwarded}");
}

/// A TLS client of the bridge presenting `cert`, trusting `ca` for the bridge.
fn tls_to(
    bridge: &Bridge,
    ca: &Path,
    cert: &(PathBuf, PathBuf),
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<_> = CertificateDer::pem_file_iter(&cert.0)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&cert.1).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(bridge.addr.ip().into());
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(bridge.addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

#[test]
fn a_socks5_client_over_tls_is_named_by_its_certificate_and_loses_no_byte() {
    use std::io::{Read, Write};
    let dir = TestDir::new("bridge-mtls-socks");
    let http = HttpServer::start();
    let p = http.port();
    let remote = tls_bridge(&dir, p);
    let connect = |host: &str| {
        let mut request = vec![0x05, 0x01, 0x00, 0x03, u8::try_from(host.len()).unwrap()];
        request.extend_from_slice(host.as_bytes());
        request.extend_from_slice(&p.to_be_bytes());
        request
    };
    // No credentials: the certificate names team-a. The greeting, the request and the
    // tunnel's first bytes go in one flight; none is lost.
    let mut tls = tls_to(&remote.bridge, &remote.server_ca, &remote.runner_a);
    let mut flight = vec![0x05, 0x01, 0x00];
    flight.extend(connect("a.test"));
    flight.extend_from_slice(b"GET /hello HTTP/1.0\r\nHost: a.test\r\n\r\n");
    tls.write_all(&flight).unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(&answer[..2], &[0x05, 0x00], "{text}");
    assert_eq!(&answer[2..4], &[0x05, 0x00], "{text}");
    assert!(text.ends_with("hello from upstream\n"), "{text}");
    drop(tls);
    // Credentials for another tenant than the certificate's: refused at authentication.
    let mut tls = tls_to(&remote.bridge, &remote.server_ca, &remote.runner_a);
    let mut greeting = vec![0x05, 0x01, 0x02, 0x01, 6];
    greeting.extend_from_slice(b"team-b");
    greeting.push(u8::try_from(SECRET_B.len()).unwrap());
    greeting.extend_from_slice(SECRET_B.as_bytes());
    tls.write_all(&greeting).unwrap();
    let mut reply = [0u8; 4];
    tls.read_exact(&mut reply).unwrap();
    assert_eq!(reply, [0x05, 0x02, 0x01, 0x01]);
    let events = remote.bridge.events(2);
    assert!(
        events.iter().any(|e| e["session"] == "e2e/team-a"
            && e["host"] == "a.test"
            && e["proto"] == "socks5"),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e["detail"]
            .as_str()
            .is_some_and(|d| d.contains("another tenant than the client certificate"))),
        "{events:?}"
    );
}
