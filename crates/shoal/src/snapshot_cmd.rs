//! `shoal snapshot ...`: take, list, destroy and roll back to snapshots. Like `shoal
//! fs`, each command goes through the daemon when it runs, else opens the pool under
//! its lock, and commits before it returns.

use crate::admin::Admin;
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
    let admin = Admin::connect()?;
    match cmd {
        SnapshotCommand::Create { name } => {
            let s = admin.snapshot_create(&name)?;
            println!("created {} (txg {})", s.name, s.txg);
            Ok(())
        }
        SnapshotCommand::List { name, json } => {
            let snaps = admin.snapshots(&name)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&snaps)?);
            } else {
                println!("{:<40} {:>10} {:>10}", "NAME", "TXG", "UNIQUE");
                for s in &snaps {
                    println!("{:<40} {:>10} {:>10}", s.name, s.txg, human(s.unique_bytes));
                }
            }
            Ok(())
        }
        SnapshotCommand::Destroy { name } => {
            admin.snapshot_destroy(&name)?;
            println!("destroyed {name}");
            Ok(())
        }
        SnapshotCommand::Rollback { name } => {
            admin.rollback(&name)?;
            println!("rolled back to {name}");
            Ok(())
        }
    }
}
