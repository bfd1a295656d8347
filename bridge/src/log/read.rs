//! A log line read back, as the same types the writers serialise: `netbox log`, `netbox
//! learn` and the tests read records this way, so a renamed field breaks a test instead of
//! a reader.

use crate::log::records::{self, Stamped};

use super::{Event, SCHEMA_VERSION};

/// A log line read back.
#[derive(Debug)]
pub enum Record {
    /// A network attempt, as [`Event`] wrote it.
    Net(Box<Event>),
    SessionStart(Box<Stamped<records::SessionStart>>),
    SessionEnd(Box<Stamped<records::SessionEnd>>),
    Phase(Box<Stamped<records::Phase>>),
    WriteDenied(Box<Stamped<records::WriteDenied>>),
    DirectAttempt(Box<Stamped<records::DirectAttempt>>),
    Probe(Box<Stamped<records::Probe>>),
    NetCapped(Box<Stamped<records::NetCapped>>),
    NetSuppressed(Box<Stamped<records::Suppressed>>),
    WriteDeniedSuppressed(Box<Stamped<records::Suppressed>>),
    DirectAttemptSuppressed(Box<Stamped<records::Suppressed>>),
    SocketAllowed(Box<Stamped<records::SocketAllowed>>),
    GitAudit(Box<Stamped<records::GitAudit>>),
    GitMetadataCreated(Box<Stamped<records::GitMetadataCreated>>),
    PolicyLoaded(Box<Stamped<records::PolicyLoaded>>),
    PolicyReloadFailed(Box<Stamped<records::PolicyReloadFailed>>),
    UnidentifiedDropped(Box<Stamped<records::UnidentifiedDropped>>),
    /// A record of a type this version does not write, by name, with its fields.
    Other(String, serde_json::Value),
    /// A record of a newer layout than this reader knows (its `schema_version`): not
    /// guessed at.
    Newer(u64),
    /// Not a record: not JSON, no type, or a record of a known type that is not one.
    Unreadable,
}

impl Record {
    /// The session that wrote it, if it is a record at all.
    pub fn session(&self) -> Option<&str> {
        Some(match self {
            Record::Net(r) => &r.session,
            Record::SessionStart(r) => &r.session,
            Record::SessionEnd(r) => &r.session,
            Record::Phase(r) => &r.session,
            Record::WriteDenied(r) => &r.session,
            Record::DirectAttempt(r) => &r.session,
            Record::Probe(r) => &r.session,
            Record::NetCapped(r) => &r.session,
            Record::NetSuppressed(r) => &r.session,
            Record::WriteDeniedSuppressed(r) => &r.session,
            Record::DirectAttemptSuppressed(r) => &r.session,
            Record::SocketAllowed(r) => &r.session,
            Record::GitAudit(r) => &r.session,
            Record::GitMetadataCreated(r) => &r.session,
            Record::PolicyLoaded(r) => &r.session,
            Record::PolicyReloadFailed(r) => &r.session,
            Record::UnidentifiedDropped(r) => &r.session,
            Record::Other(_, fields) => fields["session"].as_str().unwrap_or(""),
            Record::Newer(_) | Record::Unreadable => return None,
        })
    }
}

/// Reads one line of an event log.
pub fn read_record(line: &[u8]) -> Record {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
        return Record::Unreadable;
    };
    let version = value["schema_version"].as_u64().unwrap_or(0);
    if version > u64::from(SCHEMA_VERSION) {
        return Record::Newer(version);
    }
    fn typed<T: serde::de::DeserializeOwned>(
        value: serde_json::Value,
        wrap: impl FnOnce(Box<T>) -> Record,
    ) -> Record {
        serde_json::from_value::<T>(value).map_or(Record::Unreadable, |r| wrap(Box::new(r)))
    }
    match value["type"].as_str() {
        Some("net") => typed(value, Record::Net),
        Some("session_start") => typed(value, Record::SessionStart),
        Some("session_end") => typed(value, Record::SessionEnd),
        Some("phase") => typed(value, Record::Phase),
        Some("write_denied") => typed(value, Record::WriteDenied),
        Some("direct_attempt") => typed(value, Record::DirectAttempt),
        Some("direct_attempt_suppressed") => typed(value, Record::DirectAttemptSuppressed),
        Some("socket_allowed") => typed(value, Record::SocketAllowed),
        Some("probe") => typed(value, Record::Probe),
        Some("net_capped") => typed(value, Record::NetCapped),
        Some("net_suppressed") => typed(value, Record::NetSuppressed),
        Some("write_denied_suppressed") => typed(value, Record::WriteDeniedSuppressed),
        Some("git_audit") => typed(value, Record::GitAudit),
        Some("git_metadata_created") => typed(value, Record::GitMetadataCreated),
        Some("policy_loaded") => typed(value, Record::PolicyLoaded),
        Some("policy_reload_failed") => typed(value, Record::PolicyReloadFailed),
        Some("unidentified_dropped") => typed(value, Record::UnidentifiedDropped),
        Some(kind) => Record::Other(kind.to_owned(), value),
        None => Record::Unreadable,
    }
}
