//! The shoal command line. While `shoal serve` runs, the admin commands are clients of
//! its HTTP API (`admin.rs`); otherwise they work on the pool's devices directly,
//! found through the local registry.

mod admin;
mod alerts_cmd;
mod allocator;
mod bench_cmd;
mod demo;
mod fs_cmd;
mod iscsi_cmd;
mod mount_cmd;
mod mount_helper;
mod pool_cmd;
mod pool_devices_cmd;
mod pool_host;
mod registry;
mod replication_cmd;
mod schedule_cmd;
mod serve;
mod share_cmd;
mod snapshot_cmd;
mod stream_cmd;
mod units;
mod volume_cmd;

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
    /// Create, list, inspect and change filesystems (datasets).
    #[command(subcommand)]
    Fs(fs_cmd::FsCommand),
    /// Create, list, inspect, grow and change volumes (datasets served as disks).
    #[command(subcommand)]
    Volume(volume_cmd::VolumeCommand),
    /// Serve volumes over iSCSI: targets, their LUNs, allowed initiators and CHAP.
    #[command(subcommand)]
    Iscsi(iscsi_cmd::IscsiCommand),
    /// Take, list, destroy and roll back to snapshots (`pool/fs@name`).
    #[command(subcommand)]
    Snapshot(snapshot_cmd::SnapshotCommand),
    /// The daemon's alerts, newest first (`shoal alerts ack [ID]` acknowledges).
    Alerts(alerts_cmd::AlertsArgs),
    /// Replicate filesystems to another shoal daemon, and fail over to a replica.
    #[command(subcommand)]
    Replication(replication_cmd::ReplicationCommand),
    /// Write a snapshot as a stream to standard output: `shoal send tank/home@mon`, or
    /// only the changes since an older snapshot with `--from @sun`.
    Send {
        /// pool/filesystem@snapshot
        snapshot: String,
        /// The base of an incremental stream: an older snapshot of the same filesystem
        /// (`@name` or `pool/fs@name`), which the receiver must hold as its latest.
        #[arg(long, short = 'i')]
        from: Option<String>,
        /// Every snapshot of the filesystem up to this one (after `--from`'s, with it),
        /// each as an incremental on the one before: the receiver gets them all.
        #[arg(long, short = 'R')]
        replicate: bool,
        /// Send the rest of a stream a `receive --resumable` was cut in, from the
        /// point its token names (printed by the receive; the positional names the
        /// filesystem the stream came from).
        #[arg(long, short = 't', conflicts_with_all = ["from", "replicate"])]
        resume: Option<String>,
    },
    /// Receive a stream from standard input into a filesystem: a full stream creates
    /// it, an incremental applies on its latest snapshot (rolled back to first);
    /// several streams one after another (`send -R`) apply in turn.
    Receive {
        /// pool/filesystem
        dataset: String,
        /// Keep what arrived if the stream is cut, and print the token to resume it
        /// with (`shoal send --resume TOKEN`); a resumed stream needs this too.
        #[arg(long, short = 's')]
        resumable: bool,
        #[arg(long)]
        json: bool,
    },
    /// Mount a filesystem on a local directory (FUSE); runs until unmounted.
    Mount {
        /// pool/filesystem
        dataset: String,
        mountpoint: std::path::PathBuf,
        /// ro, rw, allow_other (comma separated)
        #[arg(short = 'o')]
        options: Vec<String>,
    },
    /// Unmount a shoal filesystem; its mount process commits and exits.
    Unmount { mountpoint: std::path::PathBuf },
    /// Run the daemon: serve shared filesystems over NFSv3, NFSv4.1 and NFSv4.2 until SIGTERM.
    Serve(Box<serve::ServeArgs>),
    /// Try shoal: a pool of device files under ./shoal-demo, a filesystem shared over
    /// NFS, served until Ctrl-C; prints how to mount it.
    Demo(demo::DemoArgs),
    /// Share filesystems over NFS, change export rules, list exports (needs the daemon).
    #[command(subcommand)]
    Share(share_cmd::ShareCommand),
    /// Set the password of the browser UI and the admin API (kept hashed in the state
    /// directory; a running daemon uses it at the next login).
    Passwd {
        /// Read the password from standard input (one line) instead of asking twice.
        #[arg(long)]
        stdin: bool,
    },
    /// The load generator: run the classic workloads against any NFSv3 server from
    /// this host or from agents on many hosts.
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
    /// The capacity model of a pool layout: predicted streaming MB/s, random IOPS and
    /// usable capacity from one disk's figures.
    Plan(bench_cmd::PlanArgs),
    /// The running daemon: pools, filesystems (with their sync setting), shares.
    Status {
        #[arg(long)]
        json: bool,
    },
}

fn passwd(from_stdin: bool) -> anyhow::Result<()> {
    let password = if from_stdin {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_string()
    } else {
        let first = rpassword::prompt_password("New password: ")?;
        let again = rpassword::prompt_password("Again: ")?;
        if first != again {
            anyhow::bail!("the two passwords differ; nothing changed");
        }
        first
    };
    let dir = registry::state_dir();
    server::auth::set_password(&dir, &password)?;
    println!(
        "password set in {}",
        dir.join(server::auth::PASSWORD_FILE).display()
    );
    Ok(())
}

fn main() {
    allocator::tune();
    if mount_helper::invoked_as_helper() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        std::process::exit(mount_helper::run(&args));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pool(cmd) => pool_cmd::run(cmd),
        Command::Fs(cmd) => fs_cmd::run(cmd),
        Command::Volume(cmd) => volume_cmd::run(cmd),
        Command::Iscsi(cmd) => iscsi_cmd::run(cmd),
        Command::Snapshot(cmd) => snapshot_cmd::run(cmd),
        Command::Replication(cmd) => replication_cmd::run(cmd),
        Command::Alerts(args) => alerts_cmd::run(args),
        Command::Send {
            snapshot,
            from,
            replicate,
            resume: Some(token),
        } if from.is_none() && !replicate => stream_cmd::send_resumed(&snapshot, &token),
        Command::Send {
            snapshot,
            from,
            replicate,
            ..
        } => stream_cmd::send(&snapshot, from.as_deref(), replicate),
        Command::Receive {
            dataset,
            resumable,
            json,
        } => stream_cmd::receive(&dataset, resumable, json),
        Command::Mount {
            dataset,
            mountpoint,
            options,
        } => mount_cmd::mount(&dataset, &mountpoint, &options),
        Command::Unmount { mountpoint } => mount_cmd::unmount(&mountpoint),
        Command::Serve(args) => serve::run(*args),
        Command::Demo(args) => demo::run(args),
        Command::Share(cmd) => share_cmd::run(cmd),
        Command::Status { json } => share_cmd::status(json),
        Command::Passwd { stdin } => passwd(stdin),
        Command::Bench(cmd) => bench_cmd::run(cmd),
        Command::Plan(args) => bench_cmd::plan(args),
    };
    if let Err(e) = result {
        eprintln!("shoal: {e:#}");
        std::process::exit(1);
    }
}
