//! Where a log's records go and how a target is opened: a file appended whole lines at a
//! time, standard output, or a collector's Unix datagram socket.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Where a log's records go (`--log`): a file, standard output (`-`), or a Unix datagram
/// socket (`unix:PATH`), one record per datagram, for a collector such as Vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    File(std::path::PathBuf),
    Stdout,
    Datagram(std::path::PathBuf),
}

impl LogTarget {
    /// `-`, `unix:PATH`, or a file's path.
    pub fn parse(text: &std::ffi::OsStr) -> LogTarget {
        use std::os::unix::ffi::OsStrExt;
        let bytes = text.as_bytes();
        if bytes == b"-" {
            LogTarget::Stdout
        } else if let Some(path) = bytes.strip_prefix(b"unix:") {
            LogTarget::Datagram(std::ffi::OsStr::from_bytes(path).into())
        } else {
            LogTarget::File(text.into())
        }
    }
}

impl std::fmt::Display for LogTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogTarget::File(path) => write!(f, "{}", path.display()),
            LogTarget::Stdout => write!(f, "standard output"),
            LogTarget::Datagram(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// How long a record may wait for a reader that takes nothing (a collector that stopped
/// reading, a pipe nobody drains) before the log counts as one that cannot be written,
/// which stops what it records rather than holding every connection that logs.
pub(super) const LOG_WRITE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// An open log target.
pub(super) enum Sink {
    File(File),
    /// Standard output: a pipe or a terminal, which a stalled reader can keep full.
    Stream(File),
    Datagram(std::os::unix::net::UnixDatagram),
}

impl Sink {
    /// One record, whole: one write to a file (O_APPEND keeps it in one piece), one
    /// datagram to a socket (a short send is an error: the record would be cut).
    pub(super) fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        match self {
            Sink::File(f) => f.write_all(line).and_then(|()| f.flush()),
            Sink::Stream(f) => {
                use std::os::fd::AsFd;
                let mut fds = [nix::poll::PollFd::new(
                    f.as_fd(),
                    nix::poll::PollFlags::POLLOUT,
                )];
                let deadline = nix::poll::PollTimeout::try_from(LOG_WRITE_DEADLINE)
                    .unwrap_or(nix::poll::PollTimeout::MAX);
                match nix::poll::poll(&mut fds, deadline) {
                    Ok(0) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the log's reader took nothing for 5 s",
                    )),
                    Ok(_) => f.write_all(line).and_then(|()| f.flush()),
                    Err(e) => Err(io::Error::from(e)),
                }
            }
            Sink::Datagram(socket) => match socket.send(line)? {
                sent if sent == line.len() => Ok(()),
                _ => Err(io::Error::other("a record did not fit one datagram")),
            },
        }
    }
}

/// Opens a log for appending. A crash can leave its last line half written: a newline
/// first then keeps the next record from being glued onto it (and lost with it).
pub(super) fn open_after_whole_lines(path: &Path) -> io::Result<File> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    // Private when made here: a log holds command lines, paths and hosts another user of
    // the machine has no business reading (a file that exists keeps its mode).
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    if file.seek(SeekFrom::End(0))? > 0 {
        file.seek(SeekFrom::End(-1))?;
        let mut last = [0u8; 1];
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            file.write_all(b"\n")?;
        }
    }
    Ok(file)
}
