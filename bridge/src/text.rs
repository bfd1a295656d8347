//! Text the bridge writes that a client chose (a Host header, a detail quoting it): cut
//! to a bound, so neither a record nor a refusal's body grows with what was sent.

/// Longest `detail` a record (and a refusal's body) carries: a detail can quote what the
/// client sent (a Host header of 60 KB), and the log is the client's to fill otherwise.
pub const MAX_DETAIL_BYTES: usize = 512;

/// `text`, cut at a character boundary to at most `max` bytes, with "…" if it was cut.
pub fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
