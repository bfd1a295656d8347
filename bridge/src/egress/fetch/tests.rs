use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::log::{End, Proto};
use crate::policy::Action;
use crate::policy::Verdict;

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

/// The settings a run's fetch has: the system's resolver configuration (names here are
/// pinned), no listener of a bridge's, all the time a fetch may take.
fn dial(ca: &str) -> Dial<'_> {
    Dial {
        dns: &DnsConfig::System,
        own_listeners: &[],
        ca_pem: Some(ca.as_bytes()),
        public_only: false,
        within: DEADLINE,
    }
}

async fn read(url: &str, policy: &Policy, ca: &str) -> Result<String, FetchError> {
    https_document(url, policy, &dial(ca)).await.document
}

#[tokio::test]
async fn a_document_the_policy_allows_is_read_and_one_it_refuses_is_not_asked_for() {
    let (port, ca, heads) = server(|_| ok("{\"dl\":\"https://dl.test/\"}")).await;
    let url = format!("https://reg.test:{port}/config.json");
    let got = read(&url, &policy(true), &ca).await;
    assert_eq!(got.as_deref(), Ok("{\"dl\":\"https://dl.test/\"}"));
    let head = heads.lock().unwrap()[0].clone();
    assert!(head.starts_with("GET /config.json HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("host: reg.test:{port}\r\n")),
        "{head}"
    );

    // A rule that may not reach a non-public address: loopback is this machine's own.
    let refused = read(&url, &policy(false), &ca).await.unwrap_err();
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
    let refused = read(&url, &denied, &ca).await.unwrap_err();
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
        async move { read(&url, &policy(true), &ca).await }
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

/// A standalone bridge reloading its tools reads registries while it listens: one of its
/// own listeners is never dialed, as a client's CONNECT to it is refused, whatever rule
/// opens the address. Control: the same fetch with no listener of the bridge's there.
#[tokio::test]
async fn a_listener_of_the_bridges_own_is_never_fetched_from() {
    let (port, ca, heads) = server(|_| ok("read")).await;
    let url = format!("https://reg.test:{port}/config.json");
    let listener: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let own = [listener];
    let at_own = Dial {
        own_listeners: &own,
        ..dial(&ca)
    };
    let fetched = https_document(&url, &policy(true), &at_own).await;
    let refused = fetched.document.unwrap_err();
    assert!(
        matches!(&refused, FetchError::Refused { detail, .. }
            if detail.contains("is this bridge's own listener")),
        "{refused:?}"
    );
    // Every address at every port: `0.0.0.0` on the same port is this machine's too.
    let every: [SocketAddr; 1] = [format!("0.0.0.0:{port}").parse().unwrap()];
    let at_every = Dial {
        own_listeners: &every,
        ..dial(&ca)
    };
    let refused = https_document(&url, &policy(true), &at_every)
        .await
        .document;
    assert!(
        matches!(&refused, Err(FetchError::Refused { .. })),
        "{refused:?}"
    );
    assert!(heads.lock().unwrap().is_empty(), "the listener was asked");
    // Control: no listener of the bridge's there.
    assert_eq!(read(&url, &policy(true), &ca).await.as_deref(), Ok("read"));
    assert_eq!(heads.lock().unwrap().len(), 1);
}

/// A URL a workspace file chose is read only at a public address, whatever the policy
/// opens: here an `allow_private` rule for the name, and an IP rule for the address, both
/// of which a sandboxed client's request would pass. Control: the same policy without
/// `public_only` reads it.
#[tokio::test]
async fn a_public_only_fetch_dials_no_address_the_policy_opens_beyond_public() {
    let (port, ca, heads) = server(|_| ok("read")).await;
    let url = format!("https://reg.test:{port}/config.json");
    let mut opened = policy(false);
    opened
        .add_rule(Action::Allow, "127.0.0.1:*", "test")
        .unwrap();
    for policy in [policy(true), opened] {
        let public_only = Dial {
            public_only: true,
            ..dial(&ca)
        };
        let fetched = https_document(&url, &policy, &public_only).await;
        let refused = fetched.document.unwrap_err();
        assert!(
            matches!(&refused, FetchError::NotPublic(detail)
                if detail.contains("resolves to 127.0.0.1, a loopback address")),
            "{refused:?}"
        );
        let event = fetched.event.unwrap();
        assert_eq!(
            (event.decision, event.reason, event.end),
            (Verdict::Deny, Reason::NonPublicAddress, End::Refused)
        );
        assert_eq!(event.dialed, None);
        // Control: not public-only, the same policy lets it be read.
        assert_eq!(read(&url, &policy, &ca).await.as_deref(), Ok("read"));
    }
    assert_eq!(heads.lock().unwrap().len(), 2);
}

/// Each fetch gives back its record, as the bridge records a client's request: the
/// target, the addresses resolved and dialed, the rule, what the registry answered.
#[tokio::test]
async fn a_fetch_is_recorded_as_a_request_is() {
    let (port, ca, _) = server(|_| ok("twelve bytes")).await;
    let url = format!("https://user:secret@reg.test:{port}/t0ken/config.json?k=v");
    let fetched = https_document(&url, &policy(true), &dial(&ca)).await;
    assert_eq!(fetched.document.as_deref(), Ok("twelve bytes"));
    let event = fetched.event.unwrap();
    assert_eq!(event.proto, Proto::Fetch);
    assert_eq!(event.method.as_deref(), Some("GET"));
    assert_eq!(
        (event.host.as_deref(), event.port),
        (Some("reg.test"), Some(port))
    );
    assert_eq!((event.decision, event.end), (Verdict::Allow, End::Closed));
    assert_eq!(
        event.resolved,
        ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        event.dialed,
        Some(format!("127.0.0.1:{port}").parse().unwrap())
    );
    assert_eq!((event.status, event.bytes_down), (Some(200), 12));
    assert!(event.rule.is_some());
    // Nothing of the URL's path, query or credentials, which may hold a token.
    let line = serde_json::to_string(&event).unwrap();
    for secret in ["t0ken", "k=v", "secret", "user"] {
        assert!(!line.contains(secret), "{line}");
    }
    // A refusal is recorded too, and a URL that is none is not.
    let refused = https_document(&url, &policy(false), &dial(&ca)).await;
    let event = refused.event.unwrap();
    assert_eq!(
        (event.decision, event.reason, event.end),
        (Verdict::Deny, Reason::NonPublicAddress, End::Refused)
    );
    assert!(
        https_document("http://reg.test/", &policy(true), &dial(&ca))
            .await
            .event
            .is_none()
    );
}

/// A fetch takes no longer than it is given: a registry that accepts and never answers
/// is left at the time given (the caller's share of what its start-up's fetches may take).
#[tokio::test]
async fn a_fetch_takes_no_longer_than_it_is_given() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let accepted = tokio::spawn(async move {
        let (held, _) = silent.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(held);
    });
    let (_, ca, _) = server(|_| ok("")).await;
    let url = format!("https://reg.test:{port}/config.json");
    let short = Dial {
        within: Duration::from_millis(400),
        ..dial(&ca)
    };
    let started = std::time::Instant::now();
    let fetched = https_document(&url, &policy(true), &short).await;
    let took = started.elapsed();
    assert_eq!(
        fetched.document,
        Err(FetchError::Timeout(Duration::from_millis(400)))
    );
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    let event = fetched.event.unwrap();
    assert_eq!(event.reason, Reason::UpstreamTimeout);
    assert!(event.dialed.is_some(), "{event:?}");
    accepted.abort();
}
