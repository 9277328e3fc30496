//! The shoal command line. For now the pool commands work on the pool's devices
//! directly (found through the local registry); once the daemon runs, the same commands
//! become clients of its HTTP API.

mod pool_cmd;
mod registry;
mod units;

use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc keeps block-sized buffers in its own segments (glibc would mmap and unmap
/// them at device speed). Two options matter for a storage engine: never hand freed
/// memory back to the OS (re-faulting it cost more than a third of the write path's
/// CPU), and no transparent huge pages (a fault then zeroes 2 MiB for a 128 KiB buffer).
fn tune_allocator() {
    const MI_OPTION_ALLOW_LARGE_OS_PAGES: libmimalloc_sys::mi_option_t = 6;
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: mi_option_set stores an integer in mimalloc's option table; it has no
    // pointer arguments and no preconditions, and is safe to call from any thread.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_LARGE_OS_PAGES, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
    }
}

#[derive(Parser)]
#[command(
    name = "shoal",
    version,
    about = "shoal: a storage appliance in software"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create, inspect, scrub, import and export pools.
    #[command(subcommand)]
    Pool(pool_cmd::PoolCommand),
}

fn main() {
    tune_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pool(cmd) => pool_cmd::run(cmd),
    };
    if let Err(e) = result {
        eprintln!("shoal: {e:#}");
        std::process::exit(1);
    }
}
