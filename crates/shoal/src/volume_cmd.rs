//! `shoal volume ...`: create, list, get, set (a larger `volsize` grows a volume
//! online) and destroy volumes, the datasets the SCSI target serves as disks. As with
//! `shoal fs`, each command goes through the daemon's API when it runs, else opens the
//! pool itself, and the change is committed before it returns.

use crate::admin::{Admin, DatasetKind};
use crate::fs_cmd::{parse_assignment, print_properties};
use anyhow::{anyhow, Result};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Create a volume, e.g. `shoal volume create tank/vm1 --size 100G`. Thick unless
    /// --sparse: its whole size is kept for it at once, so its writes never fail for
    /// space.
    Create {
        name: String,
        /// Its size (K, M, G, T), a multiple of the block size; it can grow later.
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// Block size, a power of two from 4K to 128K (default 16K); fixed for good.
        #[arg(long, value_parser = parse_size)]
        volblocksize: Option<u64>,
        /// Take space only as blocks are written (writes may then find the pool full).
        #[arg(long)]
        sparse: bool,
        /// property=value, repeatable (compression, checksum, sync, readonly, ...).
        #[arg(short = 'o', long = "option")]
        options: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// List volumes (all, or those of one pool).
    List {
        pool: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show properties with their sources.
    Get {
        name: String,
        /// Property names; all when omitted.
        properties: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Set properties: `shoal volume set tank/vm1 volsize=200G compression=lz4`.
    Set {
        name: String,
        #[arg(required = true)]
        assignments: Vec<String>,
    },
    /// Drop a local setting so the property is inherited again.
    Inherit { name: String, property: String },
    /// Destroy a volume and everything in it.
    Destroy { name: String },
}

fn parse_size(text: &str) -> Result<u64> {
    fs::props::parse_size(text)
        .filter(|v| *v > 0)
        .ok_or_else(|| anyhow!("'{text}' is not a size (like 100G, 16K or 4096)"))
}

pub fn run(cmd: VolumeCommand) -> Result<()> {
    let admin = Admin::connect()?;
    let kind = DatasetKind::Volume;
    match cmd {
        VolumeCommand::Create {
            name,
            size,
            volblocksize,
            sparse,
            options,
            json,
        } => {
            let settings = options
                .iter()
                .map(|o| parse_assignment(o))
                .collect::<Result<Vec<_>>>()?;
            let volblocksize = volblocksize
                .map(|b| u32::try_from(b).map_err(|_| anyhow!("volblocksize {b} is too large")))
                .transpose()?;
            let spec = fs::VolumeSpec {
                volsize: size,
                volblocksize,
                sparse,
            };
            let info = admin.volume_create(&name, &spec, &settings)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                let v = |p: &str| info.prop(p).unwrap_or("-").to_string();
                println!(
                    "created {name}: {} in {} blocks, {} (refreservation {})",
                    v("volsize"),
                    v("volblocksize"),
                    if sparse { "sparse" } else { "thick" },
                    v("refreservation")
                );
            }
            Ok(())
        }
        VolumeCommand::List { pool, json } => {
            let all = admin.dataset_list(kind, pool.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(());
            }
            println!(
                "{:<32} {:>9} {:>8} {:>9} {:>9} {:>9} {:>10} {:>12} {:>9}",
                "NAME",
                "VOLSIZE",
                "VOLBLOCK",
                "USED",
                "AVAIL",
                "REFER",
                "REFRESERV",
                "COMPRESSION",
                "SYNC"
            );
            for d in &all {
                let v = |p: &str| d.prop(p).unwrap_or("");
                let bytes = |p: &str| {
                    crate::units::human(v(p).parse().expect("statistics are byte counts"))
                };
                println!(
                    "{:<32} {:>9} {:>8} {:>9} {:>9} {:>9} {:>10} {:>12} {:>9}",
                    d.name,
                    v("volsize"),
                    v("volblocksize"),
                    bytes("used"),
                    bytes("available"),
                    bytes("referenced"),
                    v("refreservation"),
                    v("compression"),
                    v("sync")
                );
            }
            Ok(())
        }
        VolumeCommand::Get {
            name,
            properties,
            json,
        } => print_properties(&admin.dataset_info(kind, &name)?, &properties, json),
        VolumeCommand::Set { name, assignments } => {
            let parsed = assignments
                .iter()
                .map(|a| parse_assignment(a).map(|(k, v)| (k, Some(v))))
                .collect::<Result<Vec<_>>>()?;
            admin.dataset_set(kind, &name, &parsed)
        }
        VolumeCommand::Inherit { name, property } => {
            admin.dataset_set(kind, &name, &[(property, None)])
        }
        VolumeCommand::Destroy { name } => {
            admin.dataset_destroy(kind, &name)?;
            println!("destroyed {name}");
            Ok(())
        }
    }
}
