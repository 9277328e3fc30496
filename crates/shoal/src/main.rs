//! The shoal command line. For now the pool commands work on the pool's devices
//! directly (found through the local registry); once the daemon runs, the same commands
//! become clients of its HTTP API.

mod allocator;
mod pool_cmd;
mod registry;
mod units;

use clap::{Parser, Subcommand};

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
    allocator::tune();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pool(cmd) => pool_cmd::run(cmd),
    };
    if let Err(e) = result {
        eprintln!("shoal: {e:#}");
        std::process::exit(1);
    }
}
