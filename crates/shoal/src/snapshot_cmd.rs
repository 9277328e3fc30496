//! `shoal snapshot ...`: take, list, destroy and roll back to snapshots. Like `shoal
//! fs`, each command opens the pool under its lock and commits before it returns.

use crate::fs_cmd::with_datasets;
use crate::units::human;
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot: `shoal snapshot create tank/home@monday`. Costs no data copy.
    Create { name: String },
    /// List snapshots of a pool or of one filesystem, oldest first.
    List {
        /// A pool or pool/filesystem.
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Destroy a snapshot; the space only it held is freed.
    Destroy { name: String },
    /// Roll a filesystem back to its latest snapshot (it must not be mounted).
    Rollback { name: String },
}

pub fn run(cmd: SnapshotCommand) -> Result<()> {
    match cmd {
        SnapshotCommand::Create { name } => with_datasets(&name, |ds| {
            let s = ds.snapshot(&name)?;
            println!("created {} (txg {})", s.name, s.txg);
            Ok(())
        }),
        SnapshotCommand::List { name, json } => with_datasets(&name, |ds| {
            let filter = name.contains('/').then_some(name.as_str());
            let snaps = ds.snapshots(filter)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&snaps)?);
            } else {
                println!("{:<40} {:>10} {:>10}", "NAME", "TXG", "UNIQUE");
                for s in &snaps {
                    println!("{:<40} {:>10} {:>10}", s.name, s.txg, human(s.unique_bytes));
                }
            }
            Ok(())
        }),
        SnapshotCommand::Destroy { name } => with_datasets(&name, |ds| {
            ds.destroy_snapshot(&name)?;
            println!("destroyed {name}");
            Ok(())
        }),
        SnapshotCommand::Rollback { name } => with_datasets(&name, |ds| {
            ds.rollback(&name)?;
            println!("rolled back to {name}");
            Ok(())
        }),
    }
}
