//! Paths as netbox takes them apart: joining a path found below another onto a second
//! base (the one step that the other-names mapping, the home split and the write judge
//! each take), and, in `exact_text`, text of bytes that may not be UTF-8 whose words read
//! back to the very bytes (the environment's values, git's configuration).

pub mod exact_text;

use std::path::{Path, PathBuf};

/// `base` joined with `rest`, with no `/` added after it for an empty rest (`join` of an
/// empty path would end a file's path in `/`, which then names no file).
pub fn join_below(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(rest)
    }
}
