//! CMD's standard input, when netbox was given a file as its own (`netbox -- CMD < file`):
//! a pipe that a thread of netbox's feeds from the file, instead of the file itself.
//!
//! An open file is a way to its inode on the mount it was opened through, here the
//! host's, writable one: opening `/proc/self/fd/0` again for writing (proc(5): the link
//! reopens the file, with permission checked on the inode and that mount) would let CMD
//! rewrite a host file it was only given to read, whatever the sandbox's read-only mounts
//! say (measured: kernel 6.18). A pipe has no such way back. What is lost is seeking: a
//! command that seeks its standard input sees a pipe. Standard output and error are left
//! as they are: CMD is meant to write them (it can also reopen one to read what the file
//! held before).

use std::io;
use std::os::fd::AsFd;

/// The file netbox was given as standard input, and the pipe CMD reads it from.
pub struct StdinRelay {
    file: std::fs::File,
    pipe: std::fs::File,
}

impl StdinRelay {
    /// If standard input is a file (regular, or a block device), puts the read end of a
    /// new pipe in its place and keeps the file for [`StdinRelay::start`]. Netbox must
    /// still be single-threaded (fd 0 is replaced under everything).
    pub fn take_over_if_file() -> io::Result<Option<StdinRelay>> {
        let Ok(stat) = nix::sys::stat::fstat(std::io::stdin()) else {
            // No standard input at all: nothing to relay.
            return Ok(None);
        };
        let kind = stat.st_mode & libc::S_IFMT;
        if kind != libc::S_IFREG && kind != libc::S_IFBLK {
            return Ok(None);
        }
        // A copy above 2, close-on-exec (F_DUPFD_CLOEXEC): the sandbox never gets it.
        let file = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        // fd 0 becomes the pipe's read end (dup2 clears close-on-exec on it).
        nix::unistd::dup2_stdin(&read)?;
        drop(read);
        Ok(Some(StdinRelay {
            file,
            pipe: std::fs::File::from(write),
        }))
    }

    /// Copies the file into the pipe on a thread of its own, until the file ends or CMD
    /// stops reading (the thread ends with netbox).
    pub fn start(self) {
        let StdinRelay { mut file, mut pipe } = self;
        let _ = std::thread::Builder::new()
            .name("netbox-stdin".into())
            .spawn(move || {
                // Signals are the main thread's business (netbox forwards them, and its
                // git metadata check looks for Ctrl-C among its own blocked ones).
                let _ = nix::sys::signal::SigSet::all().thread_block();
                let _ = io::copy(&mut file, &mut pipe);
            });
    }
}
