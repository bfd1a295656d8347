//! Real upstream servers on 127.0.0.1:0, each on its own threads, stopped with the test.
//!
//! `HttpServer` speaks enough HTTP/1.1 for the tests: `GET /hello`, `GET /bytes/N` (N bytes
//! of a fixed pattern), `POST /sha256` (hex SHA-256 of the body, Content-Length or
//! chunked), `/headers` (any method: the request head echoed back) and `GET /sleep/MS` (answers
//! after MS milliseconds). With a TLS identity it
//! serves the same over HTTPS for a name signed by a CA made for the test. Others serve
//! files (a registry's static layout) or git repositories (`git http-backend`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::sha256_hex;

/// The pattern `/bytes/N` serves: byte i is `i * 7 mod 251`, so shifts are caught.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from(i * 7 % 251).unwrap())
        .collect()
}

/// A server's side of one TLS connection.
type TlsStream = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

/// An HTTP (or HTTPS) server for tests.
pub struct HttpServer {
    pub addr: SocketAddr,
    /// For HTTPS: the CA certificate file curl should trust.
    pub ca: Option<PathBuf>,
}

impl HttpServer {
    pub fn start() -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = serve_http(stream);
                });
            }
        });
        HttpServer { addr, ca: None }
    }

    /// HTTPS for `names`, with a CA generated for this test and written to `dir/ca.pem`.
    pub fn start_tls(dir: &Path, names: &[&str]) -> HttpServer {
        HttpServer::start_tls_config(dir, tls_config(names))
    }

    /// The same, with P-256 its only key exchange: a client that offers an X25519 share
    /// first (rustls's and curl's default) is asked again (a HelloRetryRequest).
    pub fn start_tls_asking_again(dir: &Path, names: &[&str]) -> HttpServer {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.kx_groups = vec![rustls::crypto::ring::kx_group::SECP256R1];
        HttpServer::start_tls_config(dir, tls_config_with(names, Arc::new(provider)))
    }

    fn start_tls_config(
        dir: &Path,
        (config, ca_pem): (rustls::ServerConfig, String),
    ) -> HttpServer {
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_pem).unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let config = Arc::clone(&config);
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let tls = rustls::StreamOwned::new(conn, stream);
                    let _ = serve_http(tls);
                });
            }
        });
        HttpServer { addr, ca: Some(ca) }
    }

    /// Plain HTTP serving the files under `root` (GET only; 404 for anything else).
    pub fn start_files(root: PathBuf) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let root = root.clone();
                std::thread::spawn(move || {
                    let _ = serve_files(stream, &root);
                });
            }
        });
        HttpServer { addr, ca: None }
    }

    /// HTTPS for `names`, serving the files under `root` (GET only; 404 for anything
    /// else): a registry's static layout. Files may be written after it starts.
    pub fn start_tls_files(dir: &Path, names: &[&str], root: PathBuf) -> HttpServer {
        HttpServer::start_tls_serving(dir, names, root, serve_files)
    }

    /// HTTPS for `names`, serving the repositories under `root` with git's own smart HTTP
    /// server (`git http-backend`, run as CGI per request): clone, fetch and push.
    pub fn start_tls_git(dir: &Path, names: &[&str], root: PathBuf) -> HttpServer {
        HttpServer::start_tls_serving(dir, names, root, serve_git)
    }

    /// HTTPS for `names`, each connection served from `root` by `serve`.
    fn start_tls_serving(
        dir: &Path,
        names: &[&str],
        root: PathBuf,
        serve: fn(TlsStream, &Path) -> std::io::Result<()>,
    ) -> HttpServer {
        let (config, ca_pem) = tls_config(names);
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_pem).unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let config = Arc::clone(&config);
                let root = root.clone();
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let _ = serve(rustls::StreamOwned::new(conn, stream), &root);
                });
            }
        });
        HttpServer { addr, ca: Some(ca) }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// GET PATH → the file `root/PATH` (for a directory, its `index.json`; no `..`),
/// keep-alive; anything else 404.
fn serve_files<S: Read + Write>(stream: S, root: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request)? == 0 {
            return Ok(());
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
        }
        let mut parts = request.split(' ');
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = path.split('?').next().unwrap_or("").trim_start_matches('/');
        let file = (method == "GET" && !path.split('/').any(|c| c == ".."))
            .then(|| {
                let at = root.join(path);
                let at = if at.is_dir() {
                    at.join("index.json")
                } else {
                    at
                };
                std::fs::read(at).ok()
            })
            .flatten();
        let stream = reader.get_mut();
        match file {
            Some(body) => {
                let kind = if body.starts_with(b"<") {
                    "text/html"
                } else if body.starts_with(b"{") {
                    "application/json"
                } else {
                    "application/octet-stream"
                };
                write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )?;
                stream.write_all(&body)?;
            }
            None => {
                stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 10\r\n\r\nnot found\n",
                )?;
            }
        }
        stream.flush()?;
    }
}

/// Each request handed to `git http-backend` as CGI (RFC 3875), its answer sent back with
/// a length, keep-alive. A push is allowed (`REMOTE_USER` is set).
fn serve_git<S: Read + Write>(stream: S, root: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let Some(request) = read_request(&mut reader)? else {
            return Ok(());
        };
        let reply = git_reply(&request, root)?;
        let stream = reader.get_mut();
        stream.write_all(&reply)?;
        stream.flush()?;
    }
}

/// `git http-backend`'s answer to one request, as a whole HTTP/1.1 response.
pub(super) fn git_reply(request: &ReadRequest, root: &Path) -> std::io::Result<Vec<u8>> {
    let header = |name: &str| request.header(name);
    let body = &request.body;
    let (method, target) = request.method_and_target();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut backend = std::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("GIT_PROTOCOL", header("git-protocol").unwrap_or_default())
        .env("REMOTE_USER", "tester")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut input = backend.stdin.take().unwrap();
    let body = body.clone();
    let writer = std::thread::spawn(move || input.write_all(&body));
    let output = backend.wait_with_output()?;
    let _ = writer.join();
    let out = output.stdout;
    let (cgi_head, reply) = match out.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(at) => (&out[..at], &out[at + 4..]),
        None => match out.windows(2).position(|w| w == b"\n\n") {
            Some(at) => (&out[..at], &out[at + 2..]),
            None => (&out[..0], &out[..]),
        },
    };
    let mut status = "200 OK".to_owned();
    let mut fields = String::new();
    for line in String::from_utf8_lossy(cgi_head).lines() {
        match line.strip_prefix("Status:") {
            Some(s) => status = s.trim().to_owned(),
            None if !line.is_empty() => fields.push_str(&format!("{line}\r\n")),
            None => {}
        }
    }
    let mut response = format!(
        "HTTP/1.1 {status}\r\n{fields}Content-Length: {}\r\n\r\n",
        reply.len()
    )
    .into_bytes();
    response.extend_from_slice(reply);
    Ok(response)
}

pub(super) fn tls_config(names: &[&str]) -> (rustls::ServerConfig, String) {
    tls_config_with(names, Arc::new(rustls::crypto::ring::default_provider()))
}

/// A CA made for the test and a certificate it signs for `names`, written as PEM files for
/// a server outside this process (a Python one in a namespace of the test's): returns the
/// CA's, the certificate's and its key's paths, in `dir`.
pub fn tls_identity_files(dir: &Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    let (ca_pem, leaf, key) = tls_identity(names);
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca_pem).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// A CA (its certificate, PEM), and a certificate it signs for `names` with its key.
fn tls_identity(names: &[&str]) -> (String, rcgen::Certificate, rcgen::KeyPair) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "netbox test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    (ca_cert.pem(), leaf, leaf_key)
}

fn tls_config_with(
    names: &[&str],
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> (rustls::ServerConfig, String) {
    let (ca_pem, leaf, leaf_key) = tls_identity(names);
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    (config, ca_pem)
}

/// One request read off a connection: its head's lines as sent (the request line first,
/// the blank line last) and its body (by Content-Length, or chunked).
pub(super) struct ReadRequest {
    pub head: Vec<String>,
    pub body: Vec<u8>,
}

impl ReadRequest {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.iter().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    pub fn method_and_target(&self) -> (&str, &str) {
        let mut parts = self.head[0].trim_end().split(' ');
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
    }
}

/// The next request on a connection, or `None` once the client is gone.
pub(super) fn read_request<R: BufRead>(reader: &mut R) -> std::io::Result<Option<ReadRequest>> {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let end = line == "\r\n";
        head.push(line);
        if end {
            break;
        }
    }
    let mut request = ReadRequest {
        head,
        body: Vec::new(),
    };
    if let Some(len) = request.header("content-length") {
        request.body = vec![0u8; len.parse().unwrap_or(0)];
        reader.read_exact(&mut request.body)?;
    } else if request
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        request.body = read_chunked(reader)?;
    }
    Ok(Some(request))
}

fn serve_http<S: Read + Write>(stream: S) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let Some(request) = read_request(&mut reader)? else {
            return Ok(());
        };
        let header = |name: &str| request.header(name);
        let (head, body) = (&request.head, &request.body);
        let (method, path) = request.method_and_target();
        let reply: Vec<u8> = match (method, path) {
            ("GET", "/hello") => b"hello from upstream\n".to_vec(),
            (_, "/headers") => head.concat().into_bytes(),
            ("POST", "/sha256") => format!("{}\n", sha256_hex(body)).into_bytes(),
            ("GET", p) if p.starts_with("/bytes/") => pattern(p[7..].parse().unwrap_or(0)),
            ("GET", p) if p.starts_with("/sleep/") => {
                let ms = p[7..].parse().unwrap_or(0);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                b"slept\n".to_vec()
            }
            _ => b"not found\n".to_vec(),
        };
        let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let stream = reader.get_mut();
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n{}\r\n",
            reply.len(),
            if close { "Connection: close\r\n" } else { "Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n" },
        )?;
        stream.write_all(&reply)?;
        stream.flush()?;
        if close {
            return Ok(());
        }
    }
}

fn read_chunked<R: BufRead>(reader: &mut R) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        let mut chunk = vec![0u8; size + 2];
        reader.read_exact(&mut chunk)?;
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// A raw TCP server that reads until the client half-closes, then answers with the byte
/// count and SHA-256 of what it received, and closes. It proves half-close is honoured.
pub struct SinkServer {
    pub addr: SocketAddr,
}

impl SinkServer {
    pub fn start() -> SinkServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || sink(stream));
            }
        });
        SinkServer { addr }
    }
}

fn sink(mut stream: TcpStream) {
    let mut got = Vec::new();
    if stream.read_to_end(&mut got).is_ok() {
        let _ = writeln!(stream, "{} {}", got.len(), sha256_hex(&got));
    }
}
