//! Address-space reservation, for the probe's `--memory` check.

use std::io;

/// Reserves `bytes` of address space and releases it again: inaccessible
/// (`PROT_NONE`) and `MAP_NORESERVE`, so it counts against RLIMIT_AS but not against the
/// kernel's overcommit accounting, and no page is ever touched. Fails as the kernel's
/// `mmap` does (ENOMEM past RLIMIT_AS).
pub fn reserve_and_release(bytes: usize) -> io::Result<()> {
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses (addr NULL, no
    // MAP_FIXED) cannot overlap or alias any existing memory; it is never accessed
    // (PROT_NONE), and exactly that range is unmapped again below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `addr` and `bytes` are exactly the mapping created above, which nothing
    // else refers to.
    if unsafe { libc::munmap(addr, bytes) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
