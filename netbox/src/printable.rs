//! Text a sandboxed command chose (file names, program paths, command lines), made safe
//! to put on a terminal or into a one-line comment: control characters (escape
//! sequences, carriage returns, newlines that would forge lines) and the Unicode
//! direction overrides (which reorder what is shown) are written as escapes.

/// `text` with every control or direction-override character escaped (`\n`, `\u{1b}`).
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_invisible_format(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Invisible format characters that change how a line reads: direction marks,
/// embeddings, overrides and isolates (U+061C, U+200E/F, U+202A..E, U+2066..9), line and
/// paragraph separators (U+2028/9), zero-width and other format characters (U+00AD,
/// U+180E, U+200B..D, U+2060..4, U+206A..F, U+FEFF, U+FFF9..B), and what shows as
/// nothing: fillers (U+034F, U+115F, U+1160, U+17B4/5, U+3164, U+FFA0), variation
/// selectors (U+FE00..F, U+E0100..EF) and tags (U+E0000..7F).
fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{034f}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{3164}'
            | '\u{ffa0}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{e0000}'..='\u{e007f}'
            | '\u{e0100}'..='\u{e01ef}'
    )
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn controls_and_overrides_are_escaped_and_the_rest_kept() {
        assert_eq!(printable("/tmp/ok-é"), "/tmp/ok-é");
        assert_eq!(printable("a\nb\r\u{1b}[2J"), "a\\nb\\r\\u{1b}[2J");
        assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(printable("x\u{2028}z\u{200f}"), "x\\u{2028}z\\u{200f}");
    }
}
