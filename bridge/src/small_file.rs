//! Reading a small file that anyone may have laid in its place.

use std::path::Path;

/// A file's text, at most `max_bytes` of it, if it is a regular file; anything else is an
/// error. The file may be anything: a FIFO someone planted (opened without blocking, where
/// an ordinary open would wait forever), a device, a sparse file of gigabytes.
pub fn read_small_file(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    String::from_utf8(read_small_bytes(path, max_bytes)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// [`read_small_file`]'s bytes, whatever their encoding.
pub fn read_small_bytes(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    // One byte more than allowed tells a file past the limit from one at it: cut short,
    // a file could mean something else (a number missing its last digits).
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max_bytes} bytes"),
        ));
    }
    Ok(bytes)
}
