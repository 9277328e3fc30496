//! The process allocator of shoal's binaries (the command line, the daemon, the pool
//! benchmark, which includes this file by path so both run the same settings).
//!
//! mimalloc keeps block-sized buffers in its own segments (glibc would mmap and unmap
//! them at device speed). Two options matter for a storage engine: never hand freed
//! memory back to the OS (re-faulting it cost more than a third of the write path's
//! CPU), and no transparent huge pages (a fault then zeroes 2 MiB for a 128 KiB buffer).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Call first thing in `main`.
pub fn tune() {
    const MI_OPTION_ALLOW_LARGE_OS_PAGES: libmimalloc_sys::mi_option_t = 6;
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: mi_option_set stores an integer in mimalloc's option table; it has no
    // pointer arguments and no preconditions, and is safe to call from any thread.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_LARGE_OS_PAGES, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
    }
}
