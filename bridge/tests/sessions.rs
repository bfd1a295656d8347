//! Several sessions on one bridge: each listener is bound to its own session and policy,
//! and no session can use another's. Real sockets on loopback, the library's `serve`.

// Test code: its sockets are at loopback literals, so std's and tokio's socket calls
// (clippy.toml) are allowed throughout.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use bridge::policy::{Action, Policy};
use bridge::{serve, BridgeConfig, EventLog, Listener, Session, SessionListener, Stderr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"upstream says hi").await;
            });
        }
    });
    port
}

fn session(id: &str, rules: &[String]) -> Arc<Session> {
    let mut policy = Policy::deny_all();
    for rule in rules {
        policy.add_rule(Action::Allow, rule, "--allow").unwrap();
    }
    Arc::new(Session::new(id, Arc::new(policy), 16))
}

/// Sends CONNECT and returns the status line.
async fn connect(bridge: u16, target: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", bridge)).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn each_listener_is_held_to_its_own_session_policy() {
    let (a_port, b_port) = (upstream().await, upstream().await);
    let dir = std::env::temp_dir().join(format!("netbox-sessions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("events.jsonl");
    let log = Arc::new(EventLog::open(Some(&log_path), Stderr::Quiet).unwrap());

    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    for (id, port) in [("alpha", a_port), ("beta", b_port)] {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        ports.push(l.local_addr().unwrap().port());
        listeners.push(SessionListener {
            session: session(id, &[format!("127.0.0.1:{port}")]),
            listener: Listener::Tcp(l),
        });
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listeners, BridgeConfig::default(), log, async {
        let _ = stop_rx.await;
    }));

    let (alpha, beta) = (ports[0], ports[1]);
    // Positive controls: each session reaches what its own policy allows.
    assert!(connect(alpha, &format!("127.0.0.1:{a_port}"))
        .await
        .contains(" 200"));
    assert!(connect(beta, &format!("127.0.0.1:{b_port}"))
        .await
        .contains(" 200"));
    // And never what only the other session allows.
    assert!(connect(alpha, &format!("127.0.0.1:{b_port}"))
        .await
        .contains(" 502"));
    assert!(connect(beta, &format!("127.0.0.1:{a_port}"))
        .await
        .contains(" 502"));

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("bridge drains on shutdown")
        .unwrap();

    let text = std::fs::read_to_string(&log_path).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 4, "{text}");
    for e in &events {
        let own = if e["session"] == "alpha" {
            a_port
        } else {
            b_port
        };
        let allowed = e["port"] == own;
        assert_eq!(e["decision"] == "allow", allowed, "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
