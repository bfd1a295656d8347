//! Paths in JSON, whatever their bytes. A Unix path is bytes, and serde's own `Path`
//! refuses one that is not UTF-8: the whole record or message then fails to serialise
//! (a workspace named in Latin-1 lost its `session_start` record and failed its probe).
//! Used with `#[serde(with = "...")]` on every path field netbox writes.
//!
//! - [`text`]: for the event log, whose paths are strings: a path that is not UTF-8 is
//!   written with U+FFFD for each byte that is not, as `write_denied` writes CMD's paths.
//! - [`exact`]: for what netbox keeps or passes between its processes and must read back
//!   as it was (the record of an audit owed, the probe's writes): a UTF-8 path is its
//!   string, any other `{"bytes": [...]}`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Lossy text: the event log's paths.
pub mod text {
    use super::*;

    pub fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        path.to_string_lossy().serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PathBuf, D::Error> {
        String::deserialize(deserializer).map(PathBuf::from)
    }

    /// A list of paths, each as [`text`](self).
    pub mod list {
        use super::*;

        pub fn serialize<S: Serializer>(
            paths: &[PathBuf],
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(paths.iter().map(|p| p.to_string_lossy()))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Vec<PathBuf>, D::Error> {
            Vec::<String>::deserialize(deserializer)
                .map(|paths| paths.into_iter().map(PathBuf::from).collect())
        }
    }
}

/// A path as serialised whole: its text, or its bytes when it is not UTF-8.
#[derive(Serialize)]
#[serde(untagged)]
enum Exact<'a> {
    Text(&'a str),
    Bytes { bytes: &'a [u8] },
}

impl<'a> Exact<'a> {
    fn of(path: &'a Path) -> Exact<'a> {
        match path.to_str() {
            Some(text) => Exact::Text(text),
            None => Exact::Bytes {
                bytes: path.as_os_str().as_bytes(),
            },
        }
    }
}

/// [`Exact`] read back.
#[derive(Deserialize)]
#[serde(untagged)]
enum ExactOwned {
    Text(String),
    Bytes { bytes: Vec<u8> },
}

impl From<ExactOwned> for PathBuf {
    fn from(read: ExactOwned) -> PathBuf {
        match read {
            ExactOwned::Text(text) => PathBuf::from(text),
            ExactOwned::Bytes { bytes } => PathBuf::from(OsStr::from_bytes(&bytes)),
        }
    }
}

/// A path that must be read back byte for byte.
pub mod exact {
    use super::*;

    pub fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        Exact::of(path).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PathBuf, D::Error> {
        ExactOwned::deserialize(deserializer).map(PathBuf::from)
    }

    /// A list of paths, each [`exact`](self).
    pub mod list {
        use super::*;

        pub fn serialize<S: Serializer>(
            paths: &[PathBuf],
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(paths.iter().map(|p| Exact::of(p)))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Vec<PathBuf>, D::Error> {
            Vec::<ExactOwned>::deserialize(deserializer)
                .map(|paths| paths.into_iter().map(PathBuf::from).collect())
        }
    }

    /// An optional path, [`exact`](self) when there is one.
    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(
            path: &Option<PathBuf>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            path.as_deref().map(Exact::of).serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<PathBuf>, D::Error> {
            Option::<ExactOwned>::deserialize(deserializer).map(|path| path.map(PathBuf::from))
        }
    }

    /// Paths each with a value of its own, `(path, value)` pairs.
    pub mod pairs {
        use super::*;

        pub fn serialize<S: Serializer, T: Serialize>(
            pairs: &[(PathBuf, T)],
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(pairs.iter().map(|(path, value)| (Exact::of(path), value)))
        }

        pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
            deserializer: D,
        ) -> Result<Vec<(PathBuf, T)>, D::Error> {
            Vec::<(ExactOwned, T)>::deserialize(deserializer).map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(path, value)| (PathBuf::from(path), value))
                    .collect()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Kept {
        #[serde(with = "exact")]
        one: PathBuf,
        #[serde(with = "exact::list")]
        many: Vec<PathBuf>,
        #[serde(with = "exact::option")]
        maybe: Option<PathBuf>,
        #[serde(with = "exact::pairs")]
        pairs: Vec<(PathBuf, u32)>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Logged {
        #[serde(with = "text")]
        one: PathBuf,
        #[serde(with = "text::list")]
        many: Vec<PathBuf>,
    }

    fn latin1() -> PathBuf {
        PathBuf::from(OsStr::from_bytes(b"/tmp/caf\xe9/\xff\n\"x"))
    }

    #[test]
    fn exact_paths_come_back_byte_for_byte_and_utf8_ones_stay_strings() {
        let kept = Kept {
            one: latin1(),
            many: vec![PathBuf::from("/tmp/ok"), latin1()],
            maybe: Some(latin1()),
            pairs: vec![(latin1(), 7), (PathBuf::from("/w"), 8)],
        };
        let json = serde_json::to_string(&kept).unwrap();
        assert!(json.contains(r#""many":["/tmp/ok",{"bytes":["#), "{json}");
        assert_eq!(serde_json::from_str::<Kept>(&json).unwrap(), kept);
        let none = Kept {
            maybe: None,
            ..kept
        };
        let json = serde_json::to_string(&none).unwrap();
        assert!(json.contains(r#""maybe":null"#));
        assert_eq!(serde_json::from_str::<Kept>(&json).unwrap(), none);
        // What serde's own `Path` wrote (before this module) still reads.
        let old = r#"{"one":"/a","many":["/b"],"maybe":"/c","pairs":[["/d",1]]}"#;
        let read: Kept = serde_json::from_str(old).unwrap();
        assert_eq!(read.maybe, Some(PathBuf::from("/c")));
        assert_eq!(read.pairs, vec![(PathBuf::from("/d"), 1)]);
    }

    #[test]
    fn logged_paths_are_always_strings() {
        let logged = Logged {
            one: latin1(),
            many: vec![latin1(), PathBuf::from("/tmp/ok")],
        };
        let json = serde_json::to_string(&logged).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["one"], "/tmp/caf\u{fffd}/\u{fffd}\n\"x");
        assert_eq!(value["many"][1], "/tmp/ok");
        // What this module is for: serde's own `Path` refuses it.
        assert!(serde_json::to_string(&latin1()).is_err());
    }
}
