//! `shoal alerts`: the daemon's alerts (faults, degraded pools, checksum errors,
//! fullness, scrubs, replication), newest first, and acknowledging them. Through the
//! running daemon's API only: the daemon raises and keeps them (`server::alerts`).

use crate::admin::Api;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use server::api::{Acknowledge, Acknowledged, AlertList};

#[derive(Args)]
pub struct AlertsArgs {
    #[command(subcommand)]
    action: Option<AlertsAction>,
    /// Acknowledged alerts too.
    #[arg(long)]
    all: bool,
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum AlertsAction {
    /// Acknowledge alert ID, or every alert.
    Ack { id: Option<u64> },
}

pub fn run(args: AlertsArgs) -> Result<()> {
    let Some(api) = Api::running()? else {
        bail!("alerts are kept by the daemon: start `shoal serve` (with its API on) first");
    };
    if let Some(AlertsAction::Ack { id }) = args.action {
        let a: Acknowledged = api.post("/alerts/acknowledge", &Acknowledge { id })?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&a)?);
        } else {
            println!("acknowledged {}", a.acknowledged);
        }
        return Ok(());
    }
    let mut list: AlertList = api.get("/alerts")?;
    if !args.all {
        list.alerts.retain(|a| !a.acknowledged);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if list.alerts.is_empty() {
        println!("no alerts{}", if args.all { "" } else { " to acknowledge" });
        return Ok(());
    }
    for a in &list.alerts {
        let severity = format!("{:?}", a.severity).to_uppercase();
        println!(
            "{:>5} {:<8} {:>6}s ago  {}{}",
            a.id,
            severity,
            server::replication::unix_now().saturating_sub(a.time_unix),
            a.message,
            if a.acknowledged {
                " (acknowledged)"
            } else {
                ""
            }
        );
    }
    Ok(())
}
