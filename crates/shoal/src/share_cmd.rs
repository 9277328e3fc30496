//! `shoal share ...` and `shoal status`: the daemon's shares, exports and state. These
//! exist only while `shoal serve` runs, so they always go through its API; share
//! changes are kept in the daemon's state directory and come back after a restart.

use crate::admin::{daemon_for, share_set};
use crate::units::{human, span};
use anyhow::Result;
use clap::Subcommand;
use server::api::Status;

#[derive(Subcommand)]
pub enum ShareCommand {
    /// List shared filesystems and their export rules.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Share a filesystem (or change its rules): RULES as in /etc/exports, default `*(rw)`.
    Set {
        dataset: String,
        rules: Option<String>,
    },
    /// Stop sharing a filesystem; clients' handles to it become stale.
    Remove { dataset: String },
    /// Exports with the client mounts below them (MOUNT DUMP).
    Exports {
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: ShareCommand) -> Result<()> {
    let api = daemon_for("shoal share")?;
    match cmd {
        ShareCommand::List { json } => {
            let shares: Vec<nfs::ShareInfo> = api.get("/shares")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&shares)?);
            } else {
                println!("{:<32} {:<32} RULES", "DATASET", "PATH");
                for s in &shares {
                    println!("{:<32} {:<32} {}", s.dataset, s.path, s.rules);
                }
            }
        }
        ShareCommand::Set { dataset, rules } => {
            let rules = rules.unwrap_or_else(server::config::default_rules);
            let s = share_set(&api, &dataset, &rules)?;
            println!("sharing {} as {} to {}", s.dataset, s.path, s.rules);
        }
        ShareCommand::Remove { dataset } => {
            api.delete(&format!("/shares/{dataset}"))?;
            println!("stopped sharing {dataset}");
        }
        ShareCommand::Exports { json } => {
            let exports: Vec<nfs::service::ExportInfo> = api.get("/exports")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&exports)?);
            } else {
                for e in &exports {
                    println!("{} {}", e.path, e.rules);
                    for m in &e.mounts {
                        println!("  mounted by {m}");
                    }
                }
            }
        }
    }
    Ok(())
}

/// `shoal status`: the daemon at a glance.
pub fn status(json: bool) -> Result<()> {
    let api = daemon_for("shoal status")?;
    let st: Status = api.get("/status")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
        return Ok(());
    }
    println!("shoal {} (pid {}), API on {}", st.version, st.pid, st.api);
    println!("NFS (v3, v4.0, v4.1, v4.2) on {}", st.nfs.join(", "));
    println!("portmapper: {}", st.portmapper);
    if let Some(n) = &st.nlm {
        println!(
            "NFSv3 locks (NLM): {} clients, {} locks, {} waiting{}",
            n.hosts,
            n.locks,
            n.blocked,
            if n.in_grace {
                "; grace period: clients of the last start are reclaiming"
            } else {
                ""
            }
        );
    }
    if let Some(n) = &st.nfs4 {
        let courtesy = match (n.courtesy, n.courtesy_seconds) {
            (_, 0) => String::new(),
            (0, _) => format!(
                "; silent clients kept {} past their lease",
                span(n.courtesy_seconds)
            ),
            (c, _) => format!("; {c} past their lease, kept by courtesy"),
        };
        println!(
            "NFSv4: {} clients, {} sessions, {} opens, {} locks, {} delegations{courtesy}",
            n.clients, n.sessions, n.opens, n.locks, n.delegations
        );
    }
    for p in &st.pools {
        println!(
            "pool {}: {}, {} of {} allocated",
            p.name,
            p.health,
            human(p.allocated_bytes),
            human(p.capacity_bytes)
        );
        for f in &p.filesystems {
            let warning = if f.sync == "disabled" {
                "  sync=disabled: synchronous writes are acknowledged before they are durable"
            } else {
                ""
            };
            println!(
                "  {:<30} used {:>9} avail {:>9} sync={:<9} compression={:<6} {}{}",
                f.name,
                human(f.used_bytes),
                human(f.available_bytes),
                f.sync,
                f.compression,
                if f.shared { "shared" } else { "" },
                warning
            );
        }
    }
    Ok(())
}
