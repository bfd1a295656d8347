//! Address space: reservation, for the probe's `--memory` check, and keeping pid 1's own
//! footprint small.

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

/// Returns every page malloc holds free to the system, in every arena (glibc keeps what a
/// burst of connections freed; see bridge/src/memory.rs). Nothing elsewhere.
pub fn return_free_pages() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes a size by value and only walks malloc's own arenas, under
    // their locks; any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Makes every thread of this process allocate from the one malloc arena. glibc gives each
/// new thread an arena of its own, which reserves 64 MiB of address space for the life of
/// the process: in pid 1, whose footprint counts against `--memory` (the probe's check runs
/// in a copy of it), a short-lived helper thread must not leave that behind.
pub fn share_one_malloc_arena() {
    // SAFETY: mallopt only changes the allocator's tuning; M_ARENA_MAX with 1 is a
    // documented setting, and it is called while the process has a single thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
