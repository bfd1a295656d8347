//! Text of bytes that may not be UTF-8, for the word splitting that finds paths in the
//! environment's values, and the way back: a path found in it names the very bytes the
//! value held. (Read lossily, `EDITOR=~/caf\xe9/ed` named `~/caf\u{fffd}/ed`, which is no
//! entry of home: the entry holding the editor was made writable.)
//!
//! Each byte that is not part of UTF-8 becomes a character of its own from the end of the
//! last private-use plane (U+10FF00 + the byte: U+10FF80 to U+10FFFF), which no splitter
//! takes for a delimiter; a real character from that range is written as its four bytes, each so
//! marked, so that every text this makes reads back to its bytes exactly.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The first character that stands for a byte: bytes that need one are all >= 0x80.
const MARKED: u32 = 0x10_FF00;

/// Whether `c` stands for a byte (`MARKED + byte`, the byte >= 0x80).
fn stands_for_a_byte(c: char) -> bool {
    (MARKED + 0x80..=MARKED + 0xFF).contains(&u32::from(c))
}

fn marked(byte: u8) -> char {
    char::from_u32(MARKED + u32::from(byte)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// `bytes` as text: UTF-8 as it is, each other byte marked.
pub fn text_of(bytes: &OsStr) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if stands_for_a_byte(c) {
                text.extend(c.to_string().bytes().map(marked));
            } else {
                text.push(c);
            }
        }
        text.extend(chunk.invalid().iter().copied().map(marked));
    }
    text
}

/// The path `text` (made by [`text_of`], or any part of it cut at other characters) names.
pub fn path_of(text: &str) -> PathBuf {
    if !text.chars().any(stands_for_a_byte) {
        return PathBuf::from(text);
    }
    let mut bytes = Vec::with_capacity(text.len());
    for c in text.chars() {
        if stands_for_a_byte(c) {
            // In range: MARKED + 0x80..=0xFF.
            bytes.push(u8::try_from(u32::from(c) - MARKED).unwrap_or(b'?'));
        } else {
            bytes.extend_from_slice(c.to_string().as_bytes());
        }
    }
    PathBuf::from(OsString::from_vec(bytes))
}

/// `text` (made by [`text_of`]) for a person or the event log: each byte that is not
/// UTF-8 as U+FFFD, as the log writes paths.
pub fn shown(text: &str) -> String {
    path_of(text).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bytes: &[u8]) {
        let text = text_of(OsStr::from_bytes(bytes));
        assert_eq!(path_of(&text).as_os_str().as_bytes(), bytes, "{text:?}");
    }

    #[test]
    fn every_text_reads_back_to_its_bytes() {
        round_trip(b"");
        round_trip(b"/home/me/tools/bin");
        round_trip(b"/home/me/caf\xe9/ed");
        round_trip(b"\xff\xfe\x80 \xc3( \xf0\x9f\x98");
        round_trip("/h/\u{10FF9A}/x \u{10FFFF}".as_bytes());
        round_trip("/h/\u{10FF7F}/ü".as_bytes());
        for byte in 0..=255u8 {
            round_trip(&[b'/', byte, b'/', byte, byte]);
        }
    }

    #[test]
    fn utf8_is_left_as_it_is_and_other_bytes_split_at_nothing() {
        assert_eq!(text_of(OsStr::new("/home/me/ü x")), "/home/me/ü x");
        let text = text_of(OsStr::from_bytes(b"a \xe9b:c\xe9"));
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || c.is_control() || c == ':')
            .collect();
        assert_eq!(words.len(), 3, "{words:?}");
        assert_eq!(path_of(words[1]).as_os_str().as_bytes(), b"\xe9b");
        assert_eq!(path_of(words[2]).as_os_str().as_bytes(), b"c\xe9");
        assert_eq!(shown(&text), "a \u{fffd}b:c\u{fffd}");
    }
}
