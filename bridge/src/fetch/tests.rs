use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::policy::Action;

/// A CA (PEM) and a TLS server config for `names`, signed by it.
fn identity(names: &[&str]) -> (String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    (ca.pem(), Arc::new(config))
}

/// An HTTPS server on 127.0.0.1 for `reg.test`: each request's head is kept, and answered
/// with `answer(path)` (a whole response). Returns its port, its CA and the heads.
async fn server(answer: fn(&str) -> Vec<u8>) -> (u16, String, Arc<std::sync::Mutex<Vec<String>>>) {
    let (ca, config) = identity(&["reg.test"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = Arc::clone(&heads);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && tls.read(&mut byte).await.unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                kept.lock().unwrap().push(head);
                let _ = tls.write_all(&answer(&path)).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, ca, heads)
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `reg.test` pinned to 127.0.0.1, with the rule a tool's registry gets: one that may
/// reach a private address (the user's own registry, with `--private-ok`) or not.
fn policy(private: bool) -> Policy {
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pins = std::env::temp_dir().join(format!(
        "netbox-fetch-pins-{}-{made}.toml",
        std::process::id()
    ));
    std::fs::write(&pins, "[hosts]\n\"reg.test\" = \"127.0.0.1\"\n").unwrap();
    let mut policy = Policy::load(std::slice::from_ref(&pins)).unwrap();
    let _ = std::fs::remove_file(&pins);
    if private {
        policy.add_private_rule("reg.test:1-65535", "test").unwrap();
    } else {
        policy
            .add_rule(Action::Allow, "reg.test:1-65535", "test")
            .unwrap();
    }
    policy
}

#[tokio::test]
async fn a_document_the_policy_allows_is_read_and_one_it_refuses_is_not_asked_for() {
    let (port, ca, heads) = server(|_| ok("{\"dl\":\"https://dl.test/\"}")).await;
    let url = format!("https://reg.test:{port}/config.json");
    let read = https_document(&url, &policy(true), &DnsConfig::System, Some(ca.as_bytes())).await;
    assert_eq!(read.as_deref(), Ok("{\"dl\":\"https://dl.test/\"}"));
    let head = heads.lock().unwrap()[0].clone();
    assert!(head.starts_with("GET /config.json HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("host: reg.test:{port}\r\n")),
        "{head}"
    );

    // A rule that may not reach a non-public address: loopback is this machine's own.
    let refused = https_document(
        &url,
        &policy(false),
        &DnsConfig::System,
        Some(ca.as_bytes()),
    )
    .await
    .unwrap_err();
    let FetchError::Refused { reason, detail } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(*reason, Reason::NonPublicAddress);
    assert!(
        detail.contains("resolves to 127.0.0.1, a loopback address"),
        "{detail}"
    );
    // A deny rule of the policy's wins, as it does for a client.
    let mut denied = policy(true);
    denied.add_rule(Action::Deny, "reg.test:*", "test").unwrap();
    let refused = https_document(&url, &denied, &DnsConfig::System, Some(ca.as_bytes()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            FetchError::Refused {
                reason: Reason::DeniedByRule,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(
        heads.lock().unwrap().len(),
        1,
        "a refused fetch reached the server"
    );
}

#[tokio::test]
async fn only_the_ca_given_is_trusted_and_no_redirect_is_followed() {
    let (port, ca, heads) = server(|path| match path {
        "/moved" => {
            b"HTTP/1.1 301 Moved\r\nLocation: /config.json\r\nContent-Length: 0\r\n\r\n".to_vec()
        }
        "/big" => {
            let mut big = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
            big.resize(big.len() + MAX_DOCUMENT_BYTES + 10, b'x');
            big
        }
        _ => ok("fine"),
    })
    .await;
    let get = |path: &str, ca: &str| {
        let (url, ca) = (format!("https://reg.test:{port}{path}"), ca.to_owned());
        async move { https_document(&url, &policy(true), &DnsConfig::System, Some(ca.as_bytes())).await }
    };
    // Another CA's certificate for the same name is not this server's.
    let (other_ca, _) = identity(&["reg.test"]);
    let failed = get("/", &other_ca).await.unwrap_err();
    assert!(
        matches!(&failed, FetchError::Failed(e) if e.contains("TLS")),
        "{failed:?}"
    );
    // Control: with its own CA.
    assert_eq!(get("/", &ca).await.as_deref(), Ok("fine"));
    let moved = get("/moved", &ca).await.unwrap_err();
    assert!(
        matches!(&moved, FetchError::Failed(e) if e.contains("301")),
        "{moved:?}"
    );
    let big = get("/big", &ca).await.unwrap_err();
    assert!(
        matches!(&big, FetchError::Failed(e) if e.contains("larger than")),
        "{big:?}"
    );
    let paths: Vec<String> = heads
        .lock()
        .unwrap()
        .iter()
        .map(|h| h.split(' ').nth(1).unwrap_or("").to_owned())
        .collect();
    // The redirect's target was never asked for.
    assert_eq!(paths, ["/", "/moved", "/big"]);
}

#[test]
fn a_url_is_read_only_as_https_to_a_name() {
    let parse = |url: &str| DocumentUrl::parse(url);
    let url = parse("https://Reg.Test/simple/pip/#frag").unwrap();
    assert_eq!(url.target.to_string(), "reg.test:443");
    assert_eq!(
        (url.path.as_str(), url.host_header().as_str()),
        ("/simple/pip/", "reg.test")
    );
    let url = parse("https://reg.test:8443?x=1").unwrap();
    assert_eq!(
        (url.path.as_str(), url.host_header().as_str()),
        ("/?x=1", "reg.test:8443")
    );
    assert_eq!(url.basic, None);
    // Credentials go as a client of the URL sends them (percent-decoded).
    let url = parse("https://al%40ice:p%3Ass@reg.test/").unwrap();
    assert_eq!(url.basic.as_deref(), Some("Basic YWxAaWNlOnA6c3M="));
    for refused in [
        "http://reg.test/",
        "ftp://reg.test/",
        "https://127.0.0.1/",
        "https://[::1]:443/",
        "https://reg.test/a b",
        "https://reg.test:99999/",
        "https:///x",
    ] {
        assert!(
            matches!(parse(refused), Err(FetchError::Url(_))),
            "{refused}"
        );
    }
    assert_eq!(percent_decoded("%41%2g%+1%"), b"A%2g%+1%");
}
