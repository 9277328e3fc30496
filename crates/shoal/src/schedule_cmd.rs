//! `shoal snapshot schedule ...`: periodic snapshots with retention, run by the daemon
//! (`server::schedules`): add, list, remove, run now.

use crate::admin::daemon_for;
use crate::units::utc;
use anyhow::Result;
use clap::Subcommand;
use server::schedules::{NewSchedule, ScheduleRun, ScheduleStatus};

#[derive(Subcommand)]
pub enum ScheduleCommand {
    /// Snapshot a dataset every period and keep the newest:
    /// `shoal snapshot schedule add tank/home --every 15m --keep 8`. The first
    /// snapshot is taken at once, then one per UTC-aligned period; held snapshots are
    /// never pruned.
    Add {
        dataset: String,
        /// 15m, 1h, 1d, 1w, 1mo (minutes dividing an hour, hours dividing a day, days,
        /// weeks, months dividing a year), or hourly, daily, weekly, monthly.
        #[arg(long)]
        every: String,
        /// Snapshots of this schedule kept per dataset.
        #[arg(long)]
        keep: u32,
        /// Its descendants too, snapshotted with it at one instant.
        #[arg(short = 'r', long)]
        recursive: bool,
        #[arg(long)]
        json: bool,
    },
    /// List the schedules, with their next and last runs.
    List {
        /// Only this dataset's.
        dataset: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove a schedule; its snapshots stay.
    Remove { id: u64 },
    /// Take a schedule's snapshot and prune now, as its next run would.
    Run {
        id: u64,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: ScheduleCommand) -> Result<()> {
    let api = daemon_for("snapshot schedules")?;
    match cmd {
        ScheduleCommand::Add {
            dataset,
            every,
            keep,
            recursive,
            json,
        } => {
            let s: ScheduleStatus = api.post(
                "/schedules",
                &NewSchedule {
                    dataset,
                    every,
                    keep,
                    recursive,
                },
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!(
                    "schedule {}: {} every {}, keep {}{}",
                    s.schedule.id,
                    s.schedule.dataset,
                    s.schedule.every,
                    s.schedule.keep,
                    if s.schedule.recursive {
                        ", with its children"
                    } else {
                        ""
                    }
                );
            }
            Ok(())
        }
        ScheduleCommand::List { dataset, json } => {
            let path = match &dataset {
                Some(d) => format!("/schedules?dataset={}", crate::admin::encode(d)),
                None => "/schedules".to_string(),
            };
            let list: Vec<ScheduleStatus> = api.get(&path)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            println!(
                "{:>4} {:<28} {:>5} {:>6} {:<21} LAST RUN",
                "ID", "DATASET", "EVERY", "KEEP", "NEXT RUN"
            );
            for s in &list {
                let last = match &s.last_run {
                    None => "-".to_string(),
                    Some(r) => describe(r),
                };
                let name = if s.schedule.recursive {
                    format!("{} (-r)", s.schedule.dataset)
                } else {
                    s.schedule.dataset.clone()
                };
                println!(
                    "{:>4} {:<28} {:>5} {:>6} {:<21} {last}",
                    s.schedule.id,
                    name,
                    s.schedule.every.to_string(),
                    s.schedule.keep,
                    utc(s.next_run_unix)
                );
            }
            Ok(())
        }
        ScheduleCommand::Remove { id } => {
            api.delete(&format!("/schedules/{id}"))?;
            println!("removed schedule {id} (its snapshots stay)");
            Ok(())
        }
        ScheduleCommand::Run { id, json } => {
            let r: ScheduleRun =
                api.post(&format!("/schedules/{id}/run"), &serde_json::json!({}))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("{}", describe(&r));
            }
            if r.ok {
                Ok(())
            } else {
                anyhow::bail!("schedule {id}: {}", r.error.unwrap_or_default())
            }
        }
    }
}

/// A run in one line: when, what it took and pruned, or why it failed.
fn describe(r: &ScheduleRun) -> String {
    if r.ok {
        let pruned = if r.pruned.is_empty() {
            String::new()
        } else {
            format!(", pruned {}", r.pruned.join(" "))
        };
        format!("{}: took {}{pruned}", utc(r.at_unix), r.taken.join(" "))
    } else {
        format!(
            "{}: FAILED: {}",
            utc(r.at_unix),
            r.error.as_deref().unwrap_or("unknown")
        )
    }
}
