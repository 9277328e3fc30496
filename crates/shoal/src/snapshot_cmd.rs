//! `shoal snapshot ...`: take, list, destroy, roll back to, hold and release snapshots. Like `shoal
//! fs`, each command goes through the daemon when it runs, else opens the pool under
//! its lock, and commits before it returns.

use crate::admin::Admin;
use crate::units::{human, utc};
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
    /// Destroy a snapshot; the space only it held is freed. A held snapshot is kept.
    Destroy { name: String },
    /// Roll a filesystem or volume back to a snapshot: every change since is lost. A
    /// shared or mounted filesystem stays so (its clients pause for it); a volume
    /// served as a LUN must leave its target first.
    Rollback {
        name: String,
        /// Destroy the snapshots taken after it too (refused if one of them is held);
        /// without this, their existence refuses the rollback.
        #[arg(short = 'r', long = "destroy-newer")]
        destroy_newer: bool,
    },
    /// Hold a snapshot: `shoal snapshot hold keep tank/home@monday`. A held snapshot
    /// cannot be destroyed (by hand, a rollback or a schedule) until every hold on it
    /// is released.
    Hold {
        /// Any name (1-64 bytes); a snapshot takes each tag once.
        tag: String,
        snapshot: String,
    },
    /// Release a hold: `shoal snapshot release keep tank/home@monday`.
    Release { tag: String, snapshot: String },
    /// Periodic snapshots with retention, run by the daemon.
    #[command(subcommand)]
    Schedule(crate::schedule_cmd::ScheduleCommand),
    /// List the holds of a snapshot, or of every snapshot of a filesystem or pool.
    Holds {
        /// pool/fs@snapshot, pool/fs or pool.
        name: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: SnapshotCommand) -> Result<()> {
    if let SnapshotCommand::Schedule(cmd) = cmd {
        return crate::schedule_cmd::run(cmd);
    }
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
                println!(
                    "{:<40} {:>10} {:>10} {:>6}",
                    "NAME", "TXG", "UNIQUE", "HOLDS"
                );
                for s in &snaps {
                    println!(
                        "{:<40} {:>10} {:>10} {:>6}",
                        s.name,
                        s.txg,
                        human(s.unique_bytes),
                        s.holds.len()
                    );
                }
            }
            Ok(())
        }
        SnapshotCommand::Destroy { name } => {
            admin.snapshot_destroy(&name)?;
            println!("destroyed {name}");
            Ok(())
        }
        SnapshotCommand::Rollback {
            name,
            destroy_newer,
        } => {
            admin.rollback(&name, destroy_newer)?;
            println!("rolled back to {name}");
            Ok(())
        }
        SnapshotCommand::Hold { tag, snapshot } => {
            admin.hold(&snapshot, &tag)?;
            println!("held {snapshot} ({tag})");
            Ok(())
        }
        SnapshotCommand::Release { tag, snapshot } => {
            admin.release(&snapshot, &tag)?;
            println!("released {snapshot} ({tag})");
            Ok(())
        }
        SnapshotCommand::Schedule(_) => unreachable!("answered above"),
        SnapshotCommand::Holds { name, json } => {
            let holds = admin.holds(&name)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&holds)?);
            } else {
                println!("{:<40} {:<24} TIMESTAMP", "NAME", "TAG");
                for h in &holds {
                    println!("{:<40} {:<24} {}", h.snapshot, h.tag, utc(h.created_unix));
                }
            }
            Ok(())
        }
    }
}
