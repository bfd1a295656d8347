//! Text a sandboxed command chose (file names, program paths, command lines), made safe
//! to put on a terminal or into a one-line comment: control characters (escape
//! sequences, carriage returns, newlines that would forge lines) and the Unicode
//! direction overrides (which reorder what is shown) are written as escapes.

/// `text` with every control or direction-override character escaped (`\n`, `\u{1b}`).
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_direction_override(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// U+202A..U+202E and U+2066..U+2069: embeddings, overrides and isolates.
fn is_direction_override(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn controls_and_overrides_are_escaped_and_the_rest_kept() {
        assert_eq!(printable("/tmp/ok-é"), "/tmp/ok-é");
        assert_eq!(printable("a\nb\r\u{1b}[2J"), "a\\nb\\r\\u{1b}[2J");
        assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
    }
}
