//! `shoal replication ...`: replication between daemons, through the running daemon's
//! API only (the daemon runs the schedules and talks to the targets; see
//! `server::replication`).
//!
//! On the replica: `credential create NAME` prints the token its primary needs.
//! On the primary: `target add NAME --address HOST:PORT --credential TOKEN
//! [--certificate PEM]`, then `add pool/fs --target NAME [--every SECONDS |
//! --continuous]`, `run ID`, `status`. Failover: `promote pool/fs` on the replica;
//! `demote pool/fs` on the old primary before replicating back to it.

use crate::admin::Api;
use crate::units::{human, parse_size};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use server::replication::admin_api::{
    CreatedCredential, NewAction, NewCredential, Overview, DEFAULT_KEEP,
};
use server::replication::{Action, RunRecord, Target, TargetInfo};

#[derive(Subcommand)]
pub enum ReplicationCommand {
    /// Targets, actions (progress, lag, last runs), credentials and replicas held here.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Credentials other appliances use to replicate into this one.
    #[command(subcommand)]
    Credential(CredentialCommand),
    /// Appliances this one replicates to.
    #[command(subcommand)]
    Target(TargetCommand),
    /// Replicate a filesystem to a target: on demand (`run`), every `--every`
    /// seconds, continuously, or after each scheduled snapshot (`--follow-schedules`).
    Add {
        /// pool/filesystem here
        filesystem: String,
        #[arg(long)]
        target: String,
        /// pool/filesystem on the target (the same name by default)
        #[arg(long)]
        remote: Option<String>,
        /// Seconds between scheduled runs.
        #[arg(long, conflicts_with = "continuous")]
        every: Option<u64>,
        /// Start the next run as soon as one ends.
        #[arg(long)]
        continuous: bool,
        /// Run after each snapshot a snapshot schedule takes of the filesystem
        /// (`shoal snapshot schedule`), so the target gets it at once.
        #[arg(long, conflicts_with = "continuous")]
        follow_schedules: bool,
        /// Replication snapshots kept here.
        #[arg(long, default_value_t = DEFAULT_KEEP)]
        keep_local: u32,
        /// Replication snapshots kept on the target.
        #[arg(long, default_value_t = DEFAULT_KEEP)]
        keep_remote: u32,
        /// Bytes per second on the wire (`50M`); unlimited by default.
        #[arg(long)]
        bandwidth: Option<String>,
        /// Alert when the target is more than this many seconds behind (0: never).
        /// By default three intervals (at least 300 s) for scheduled actions, 300 s
        /// for continuous ones, never for actions run on demand.
        #[arg(long, value_name = "SECONDS")]
        alert_lag: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Remove a replication action (the snapshots stay on both sides).
    Remove { id: u64 },
    /// Run an action now and wait for it; fails if the run fails.
    Run {
        id: u64,
        #[arg(long)]
        json: bool,
    },
    /// Make a replica held here an ordinary writable filesystem (failover).
    Promote { filesystem: String },
    /// Make a filesystem here a read-only replica that the next stream replaces from
    /// the newest snapshot it shares with its source (to replicate back after a
    /// failover). Changes made here after that snapshot are discarded.
    Demote { filesystem: String },
}

#[derive(Subcommand)]
pub enum CredentialCommand {
    /// Make a credential; its token is printed once.
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
    Remove {
        name: String,
    },
}

#[derive(Subcommand)]
pub enum TargetCommand {
    Add {
        name: String,
        /// host:port of the target's admin API
        #[arg(long)]
        address: String,
        /// The token `shoal replication credential create` printed on the target.
        #[arg(long)]
        credential: String,
        /// The target API's certificate (PEM file): it is reached over HTTPS and only
        /// this certificate is trusted. Without it, plain HTTP (loopback only).
        #[arg(long)]
        certificate: Option<std::path::PathBuf>,
    },
    Remove {
        name: String,
    },
}

fn api() -> Result<Api> {
    match Api::running()? {
        Some(api) => Ok(api),
        None => {
            bail!("replication runs in the daemon: start `shoal serve` (with its API on) first")
        }
    }
}

fn time(unix: u64) -> String {
    let now = server::replication::unix_now();
    match now.checked_sub(unix) {
        Some(ago) => format!("{ago}s ago"),
        None => format!("at {unix}"),
    }
}

fn print_run(r: &RunRecord) {
    let what = match &r.base {
        Some(b) => format!("since {b}"),
        None => "in full".to_string(),
    };
    if r.ok {
        println!(
            "sent {} {what}: {} in {} stream(s), {}s",
            r.snapshot,
            human(r.bytes),
            r.streams,
            r.finished_unix.saturating_sub(r.started_unix)
        );
    } else {
        println!(
            "failed{}: {}",
            if r.snapshot.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.snapshot)
            },
            r.error.as_deref().unwrap_or("unknown error")
        );
    }
}

pub fn run(cmd: ReplicationCommand) -> Result<()> {
    let api = api()?;
    match cmd {
        ReplicationCommand::Status { json } => {
            let o: Overview = api.get("/replication")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&o)?);
                return Ok(());
            }
            println!("targets:");
            for t in &o.targets {
                let scheme = if t.tls { "https" } else { "http" };
                println!("  {:<16} {scheme}://{}", t.name, t.address);
            }
            println!("actions:");
            for a in &o.actions {
                let when = if a.action.continuous {
                    "continuous".to_string()
                } else if a.action.interval_seconds > 0 {
                    format!("every {}s", a.action.interval_seconds)
                } else {
                    "on demand".to_string()
                };
                let lag = a
                    .lag_seconds
                    .map(|l| format!("lag {l}s"))
                    .unwrap_or_else(|| "never sent".into());
                println!(
                    "  {:>3} {} -> {}:{} ({when}, {lag})",
                    a.action.id, a.action.filesystem, a.action.target, a.action.remote
                );
                if let Some(p) = &a.running {
                    println!(
                        "      running: {} {} at {}/s",
                        p.snapshot,
                        human(p.bytes),
                        human(p.rate)
                    );
                }
                if let Some(last) = a.history.first() {
                    print!("      last {}: ", time(last.finished_unix));
                    print_run(last);
                }
            }
            println!("credentials:");
            for c in &o.credentials {
                println!("  {:<16} made {}", c.name, time(c.created_unix));
            }
            println!("replicas held here:");
            for (name, i) in &o.incoming {
                println!(
                    "  {name:<24} from {} (latest {})",
                    i.credential.as_deref().unwrap_or("(any, demoted)"),
                    i.last_snapshot.as_deref().unwrap_or("none")
                );
            }
            Ok(())
        }
        ReplicationCommand::Credential(CredentialCommand::Create { name, json }) => {
            let c: CreatedCredential =
                api.post("/replication/credentials", &NewCredential { name })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                println!("credential {}: {}", c.name, c.token);
                println!("give it to the primary: shoal replication target add NAME --address THIS_HOST:API_PORT --credential {}", c.token);
            }
            Ok(())
        }
        ReplicationCommand::Credential(CredentialCommand::Remove { name }) => {
            api.delete(&format!("/replication/credentials/{name}"))?;
            println!("removed credential {name}");
            Ok(())
        }
        ReplicationCommand::Target(TargetCommand::Add {
            name,
            address,
            credential,
            certificate,
        }) => {
            let certificate = certificate
                .map(|p| {
                    std::fs::read_to_string(&p)
                        .with_context(|| format!("reading the certificate {}", p.display()))
                })
                .transpose()?;
            let t: TargetInfo = api.post(
                "/replication/targets",
                &Target {
                    name,
                    address,
                    certificate,
                    credential,
                },
            )?;
            println!("added target {} ({})", t.name, t.address);
            Ok(())
        }
        ReplicationCommand::Target(TargetCommand::Remove { name }) => {
            api.delete(&format!("/replication/targets/{name}"))?;
            println!("removed target {name}");
            Ok(())
        }
        ReplicationCommand::Add {
            filesystem,
            target,
            remote,
            every,
            continuous,
            follow_schedules,
            keep_local,
            keep_remote,
            bandwidth,
            alert_lag,
            json,
        } => {
            let bandwidth = bandwidth.map(|b| parse_size(&b)).transpose()?;
            let a: Action = api.post(
                "/replication/actions",
                &NewAction {
                    filesystem,
                    target,
                    remote,
                    interval_seconds: every,
                    continuous: Some(continuous),
                    keep_local: Some(keep_local),
                    keep_remote: Some(keep_remote),
                    bandwidth,
                    alert_lag_seconds: alert_lag,
                    follow_schedules: Some(follow_schedules),
                },
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&a)?);
            } else {
                println!(
                    "action {}: {} -> {}:{}",
                    a.id, a.filesystem, a.target, a.remote
                );
            }
            Ok(())
        }
        ReplicationCommand::Remove { id } => {
            api.delete(&format!("/replication/actions/{id}"))?;
            println!("removed action {id}");
            Ok(())
        }
        ReplicationCommand::Run { id, json } => {
            let r: RunRecord = api.post(&format!("/replication/actions/{id}/run"), &())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print_run(&r);
            }
            if !r.ok {
                std::process::exit(1);
            }
            Ok(())
        }
        ReplicationCommand::Promote { filesystem } => {
            let _: Overview = api.post(&format!("/replication/promote/{filesystem}"), &())?;
            println!("{filesystem} is writable: share it read-write to serve from it");
            Ok(())
        }
        ReplicationCommand::Demote { filesystem } => {
            let _: Overview = api.post(&format!("/replication/demote/{filesystem}"), &())?;
            println!("{filesystem} is a read-only replica: the next stream into it replaces it");
            Ok(())
        }
    }
}
