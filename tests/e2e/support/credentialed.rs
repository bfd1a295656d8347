//! A server that answers only the one credential it was started with, as a private
//! registry or git host does: HTTPS for names signed by a CA made for the test, files under
//! a root (a registry's static layout) and git repositories there (`git http-backend`).
//!
//! A request is let in when it carries the token as `Authorization` (`TOKEN`, `Bearer
//! TOKEN`, `token TOKEN`, or `Basic` whose user or password is it) or as a query's
//! `token=`; else 401 with a Basic challenge (what makes git and pip ask for credentials).
//! `/echo` answers with what the request carried (its `Authorization` and query, in the
//! body and in `X-Echo`), and `/redirect/HOST:PORT/PATH` with a 302 to that host.
//! `/reflect`, open to anyone as a 404 page is, hands back what came in every place a
//! server can: its reason phrase, a `Location`, and the body, plain and in base64;
//! `/compressed` answers in gzip whatever was asked. Every
//! credential a request carried is kept, for the test to see what reached the server.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;

use super::upstream::{git_reply, read_request, tls_config, ReadRequest};

pub struct CredentialedServer {
    pub addr: SocketAddr,
    /// The CA certificate file a client should trust.
    pub ca: PathBuf,
    seen: Arc<Mutex<Vec<String>>>,
}

impl CredentialedServer {
    /// Serves `root` over HTTPS for `names` to requests carrying `token`.
    pub fn start(dir: &Path, names: &[&str], root: PathBuf, token: &str) -> CredentialedServer {
        let (config, ca_pem) = tls_config(names);
        let ca = dir.join("credentialed-ca.pem");
        std::fs::write(&ca, ca_pem).unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let token = token.to_owned();
        {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let config = Arc::clone(&config);
                    let (root, token, seen) = (root.clone(), token.clone(), Arc::clone(&seen));
                    std::thread::spawn(move || {
                        let Ok(conn) = rustls::ServerConnection::new(config) else {
                            return;
                        };
                        let tls = rustls::StreamOwned::new(conn, stream);
                        let _ = serve(tls, &root, &token, &seen);
                    });
                }
            });
        }
        CredentialedServer { addr, ca, seen }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request that reached the server, in order: its Host, target and
    /// `Authorization`, space-separated.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve<S: std::io::Read + Write>(
    stream: S,
    root: &Path,
    token: &str,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let Some(request) = read_request(&mut reader)? else {
            return Ok(());
        };
        let (method, target) = request.method_and_target();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let authorization = request.header("authorization").unwrap_or_default();
        let host = request.header("host").unwrap_or_default();
        seen.lock()
            .unwrap()
            .push(format!("{host} {target} {authorization}"));
        let reply = if path == "/reflect" {
            let b64 = base64::engine::general_purpose::STANDARD;
            let body = format!(
                "authorization: {authorization}\nquery: {query}\nbase64: {}\n",
                b64.encode(format!("{authorization} {query}"))
            );
            response(
                &format!("404 No such token {authorization} {query}"),
                &format!("Location: /login?{query}\r\nX-Reflect: {authorization}\r\n"),
                body.as_bytes(),
            )
        } else if path == "/compressed" {
            // Sent compressed whatever the client asked for, as a misbehaving server does.
            response(
                "200 OK",
                "Content-Encoding: gzip\r\n",
                b"\x1f\x8b not searched",
            )
        } else if let Some(to) = path.strip_prefix("/redirect/") {
            response("302 Found", &format!("Location: https://{to}\r\n"), b"")
        } else if !carries(&authorization, query, token) {
            response(
                "401 Unauthorized",
                "WWW-Authenticate: Basic realm=\"netbox-test\"\r\n",
                b"credentials needed\n",
            )
        } else if path == "/echo" {
            let body = format!("authorization: {authorization}\nquery: {query}\n");
            let echo = format!("X-Echo: {authorization}\r\n");
            response("200 OK", &echo, body.as_bytes())
        } else if is_git(path, query) {
            git_reply(&request, root)?
        } else {
            files(method, path, root, &request)
        };
        let stream = reader.get_mut();
        stream.write_all(&reply)?;
        stream.flush()?;
    }
}

/// Whether the request carries `token` in any of the ways a client sends one.
fn carries(authorization: &str, query: &str, token: &str) -> bool {
    let basic = authorization
        .strip_prefix("Basic ")
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .map(|d| String::from_utf8_lossy(&d).into_owned());
    let in_basic = basic.is_some_and(|b| {
        let (user, password) = b.split_once(':').unwrap_or((&b, ""));
        user == token || password == token
    });
    authorization == token
        || authorization.strip_prefix("Bearer ") == Some(token)
        || authorization.strip_prefix("token ") == Some(token)
        || in_basic
        || query.split('&').any(|p| p == format!("token={token}"))
}

fn is_git(path: &str, query: &str) -> bool {
    path.ends_with("/info/refs")
        || path.ends_with("/git-upload-pack")
        || path.ends_with("/git-receive-pack")
        || query.starts_with("service=git-")
}

/// GET PATH: the file `root/PATH` (a directory's `index.json`; no `..`); PUT PATH: the
/// body saved there (a publish); anything else 404.
fn files(method: &str, path: &str, root: &Path, request: &ReadRequest) -> Vec<u8> {
    let path = path.trim_start_matches('/');
    if path.split('/').any(|c| c == "..") {
        return response("404 Not Found", "", b"not found\n");
    }
    let at = root.join(path);
    if method == "PUT" {
        if let Some(parent) = at.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        return match std::fs::write(&at, &request.body) {
            Ok(()) => response("200 OK", "", b"{\"ok\":true}\n"),
            Err(_) => response("500 Internal Server Error", "", b"cannot save\n"),
        };
    }
    let at = if at.is_dir() {
        at.join("index.json")
    } else {
        at
    };
    match std::fs::read(at) {
        Ok(body) if method == "GET" || method == "HEAD" => {
            let kind = if body.starts_with(b"<") {
                "text/html"
            } else if body.starts_with(b"{") {
                "application/json"
            } else {
                "application/octet-stream"
            };
            response("200 OK", &format!("Content-Type: {kind}\r\n"), &body)
        }
        _ => response("404 Not Found", "", b"not found\n"),
    }
}

fn response(status: &str, fields: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\n{fields}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}
