//! `shoal fs ...`: create, list, get, set, inherit and destroy datasets. Each command
//! goes through the daemon's API when it runs, else opens the pool through the local
//! registry (`admin.rs`); either way the change is committed before it returns, so
//! what it printed is on disk.

use crate::admin::Admin;
use anyhow::{anyhow, bail, Result};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum FsCommand {
    /// Create a filesystem, e.g. `shoal fs create tank/home -o compression=lz4`.
    Create {
        name: String,
        /// property=value, repeatable.
        #[arg(short = 'o', long = "option")]
        options: Vec<String>,
    },
    /// List filesystems (all, or those of one pool).
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
    /// Set properties: `shoal fs set tank/home atime=off recordsize=16K`.
    Set {
        name: String,
        #[arg(required = true)]
        assignments: Vec<String>,
    },
    /// Drop a local setting so the property is inherited again.
    Inherit { name: String, property: String },
    /// Destroy a filesystem and everything in it.
    Destroy { name: String },
}

pub(crate) fn parse_assignment(a: &str) -> Result<(String, String)> {
    let (k, v) = a
        .split_once('=')
        .ok_or_else(|| anyhow!("'{a}' is not property=value"))?;
    if k.is_empty() || v.is_empty() {
        bail!("'{a}' is not property=value");
    }
    Ok((k.to_string(), v.to_string()))
}

pub fn run(cmd: FsCommand) -> Result<()> {
    let admin = Admin::connect()?;
    match cmd {
        FsCommand::Create { name, options } => {
            let settings = options
                .iter()
                .map(|o| parse_assignment(o))
                .collect::<Result<Vec<_>>>()?;
            admin.fs_create(&name, &settings)?;
            println!("created {name}");
            Ok(())
        }
        FsCommand::List { pool, json } => {
            let all = admin.fs_list(pool.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                println!(
                    "{:<32} {:>9} {:>9} {:>9} {:>10} {:>12} {:>6}",
                    "NAME", "USED", "AVAIL", "REFER", "RECORDSIZE", "COMPRESSION", "ATIME"
                );
                for d in &all {
                    let v = |p: &str| d.prop(p).unwrap_or("");
                    let bytes = |p: &str| {
                        crate::units::human(v(p).parse().expect("statistics are byte counts"))
                    };
                    println!(
                        "{:<32} {:>9} {:>9} {:>9} {:>10} {:>12} {:>6}",
                        d.name,
                        bytes("used"),
                        bytes("available"),
                        bytes("referenced"),
                        v("recordsize"),
                        v("compression"),
                        v("atime")
                    );
                }
            }
            Ok(())
        }
        FsCommand::Get {
            name,
            properties,
            json,
        } => {
            let info = admin.fs_info(&name)?;
            print_properties(&info, &properties, json)
        }
        FsCommand::Set { name, assignments } => {
            let parsed = assignments
                .iter()
                .map(|a| parse_assignment(a).map(|(k, v)| (k, Some(v))))
                .collect::<Result<Vec<_>>>()?;
            admin.fs_set(&name, &parsed)
        }
        FsCommand::Inherit { name, property } => admin.fs_set(&name, &[(property, None)]),
        FsCommand::Destroy { name } => {
            admin.fs_destroy(&name)?;
            println!("destroyed {name}");
            Ok(())
        }
    }
}

/// `get`: the properties asked for (all when none), as a table or JSON; a name that is
/// no property of the dataset is refused with the ones it has.
pub(crate) fn print_properties(
    info: &fs::DatasetInfo,
    properties: &[String],
    json: bool,
) -> Result<()> {
    for p in properties {
        if !info.props.iter().any(|v| &v.property == p) {
            let known: Vec<&str> = info.props.iter().map(|v| v.property.as_str()).collect();
            bail!(
                "unknown property '{p}' of {} (known: {})",
                info.name,
                known.join(", ")
            );
        }
    }
    let shown: Vec<_> = info
        .props
        .iter()
        .filter(|v| properties.is_empty() || properties.contains(&v.property))
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        println!("{:<32} {:<15} {:<12} SOURCE", "NAME", "PROPERTY", "VALUE");
        for v in shown {
            println!(
                "{:<32} {:<15} {:<12} {}",
                info.name, v.property, v.value, v.source
            );
        }
    }
    Ok(())
}
