//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), one per parser that takes
//! bytes an attacker chooses: a request head, a CONNECT authority, an allowlist, an
//! event-log line, a SOCKS5 request, a TLS ClientHello. Each must never panic, and each checks what it can of its own output.
//! The committed corpus (`fuzz/corpus/`) is replayed through them by this module's tests,
//! so `cargo test` keeps every input a fuzzer ever kept. Built only for those two uses.

use crate::front::head;
use crate::log::{read_record, Record};
use crate::policy::Policy;
use crate::target::Target;

/// The first-head check (front/head.rs): a whole head's length lies within the bytes.
pub fn http_head(data: &[u8]) {
    if let head::Check::Complete(len) = head::check(data) {
        assert!(len <= data.len(), "a head longer than its bytes");
    }
}

/// A CONNECT authority or Host: what parses, printed again, parses to the same target
/// (the bridge logs and compares the printed form).
pub fn authority(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = [
        Target::parse_authority(text),
        Target::parse_with_default_port(text, 443),
    ];
    for target in parsed.into_iter().flatten() {
        let again = Target::parse_authority(&target.to_string());
        assert_eq!(again.as_ref().ok(), Some(&target), "{text:?} -> {target}");
    }
}

/// An allowlist file: loads or is refused with a reason, and a loaded one prints.
pub fn allowlist(data: &[u8]) {
    let path =
        std::env::temp_dir().join(format!("netbox-fuzz-allowlist-{}.toml", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(policy) = Policy::load(std::slice::from_ref(&path)) {
        let _ = policy.canonical_text();
        let _ = policy.allow_count();
    }
    let _ = std::fs::remove_file(&path);
}

/// A SOCKS5 greeting and request, read from memory: a CONNECT it accepts names a port
/// and a target whose printed form parses to the same.
pub fn socks5_request(data: &[u8]) {
    use crate::front::socks5::{read_request, Request};
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    });
    let mut stream = tokio::io::join(data, tokio::io::sink());
    if let Ok(Request::Connect(target)) =
        runtime.block_on(read_request(&mut stream, None, &[], &mut None))
    {
        assert_ne!(target.port, 0, "a CONNECT to port 0");
        let again = Target::parse_authority(&target.to_string());
        assert_eq!(again.as_ref().ok(), Some(&target), "{target}");
    }
}

/// A tunnel's first bytes: a ClientHello read from them lies within them, and reads the
/// same from exactly its own bytes.
pub fn client_hello(data: &[u8]) {
    use crate::tls::client_hello::{read, Hello};
    if let Hello::ClientHello {
        server_name,
        consumed,
    } = read(data)
    {
        assert!(
            consumed <= data.len(),
            "a ClientHello longer than its bytes"
        );
        assert_eq!(
            read(&data[..consumed]),
            Hello::ClientHello {
                server_name,
                consumed
            }
        );
    }
}

/// An event-log line: read as its type, and a `net` record writes back to a line that
/// reads as the same.
pub fn event_record(data: &[u8]) {
    if let Record::Net(event) = read_record(data) {
        let line = serde_json::to_string(&event).expect("a record serialises");
        match read_record(line.as_bytes()) {
            Record::Net(again) => assert_eq!(
                serde_json::to_string(&again).expect("a record serialises"),
                line
            ),
            other => panic!("{line} read back as {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every input in the committed corpus, through its entry point.
    #[test]
    fn the_fuzz_corpus_replays_cleanly() {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        type Entry = fn(&[u8]);
        let targets: [(&str, Entry); 6] = [
            ("http_head", super::http_head),
            ("authority", super::authority),
            ("allowlist", super::allowlist),
            ("event_record", super::event_record),
            ("socks5_request", super::socks5_request),
            ("client_hello", super::client_hello),
        ];
        let mut replayed = 0;
        for (name, entry) in targets {
            let dir = corpus.join(name);
            let mut inputs: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .flatten()
                .map(|e| e.path())
                .collect();
            inputs.sort();
            assert!(!inputs.is_empty(), "no corpus for {name}");
            for input in inputs {
                entry(&std::fs::read(&input).unwrap());
                replayed += 1;
            }
        }
        assert!(replayed >= 4);
    }
}
