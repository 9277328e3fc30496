//! `shoal iscsi target ...`: the daemon's iSCSI targets (create, list, show,
//! destroy), and `shoal iscsi discovery ...`: the CHAP discovery sessions must pass
//! (show, set), through its API: targets are served by the running daemon. CHAP secrets
//! are read from `SHOAL_CHAP_SECRET` and `SHOAL_MUTUAL_CHAP_SECRET`, else from a
//! line of standard input each, so they never show in a process list.

use crate::admin::Api;
use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use server::iscsi_targets::{ChapSecret, DiscoveryInfo, DiscoverySpec, TargetInfo, TargetSpec};
use std::collections::BTreeMap;

#[derive(Subcommand)]
pub enum IscsiCommand {
    /// iSCSI targets: their LUNs, allowed initiators and CHAP.
    #[command(subcommand)]
    Target(TargetCommand),
    /// Who may ask the portals which targets there are (SendTargets).
    #[command(subcommand)]
    Discovery(DiscoveryCommand),
}

#[derive(Subcommand)]
pub enum DiscoveryCommand {
    /// Show the CHAP users discovery sessions must log in with.
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Require CHAP for discovery sessions (`--chap USER`, the secret from
    /// SHOAL_CHAP_SECRET or stdin), or, without `--chap`, require nothing.
    Set {
        #[arg(long)]
        chap: Option<String>,
        /// Answer initiators that check the target (mutual CHAP) as this user (the
        /// secret from SHOAL_MUTUAL_CHAP_SECRET or stdin).
        #[arg(long, requires = "chap")]
        mutual_chap: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum TargetCommand {
    /// Create a target, e.g. `shoal iscsi target create iqn.2026-12.org.example:vm1
    /// --lun 0=tank/vm1`.
    Create {
        /// The target's name: iqn.YYYY-MM.reversed.domain[:id], eui.… or naa.…
        name: String,
        /// LUN=VOLUME, repeatable (LUNs 0 to 16383).
        #[arg(long = "lun", required = true)]
        luns: Vec<String>,
        /// An initiator allowed to log in (its IQN), repeatable; none: any.
        #[arg(long = "allow")]
        allow: Vec<String>,
        /// Require CHAP with this user (the secret from SHOAL_CHAP_SECRET or stdin).
        #[arg(long)]
        chap: Option<String>,
        /// Answer initiators that check the target (mutual CHAP) as this user (the
        /// secret from SHOAL_MUTUAL_CHAP_SECRET or stdin).
        #[arg(long, requires = "chap")]
        mutual_chap: Option<String>,
        #[arg(long)]
        alias: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List targets with their LUNs and sessions.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show one target.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Destroy a target: its sessions end; its volumes stay.
    Destroy { name: String },
}

fn api() -> Result<Api> {
    Api::running()?
        .ok_or_else(|| anyhow!("iSCSI targets are served by the daemon: start `shoal serve` first"))
}

fn secret(var: &str, what: &str) -> Result<String> {
    if let Ok(s) = std::env::var(var) {
        return Ok(s);
    }
    eprint!("{what} secret: ");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .with_context(|| format!("reading the {what} secret"))?;
    let s = line.trim_end_matches(['\r', '\n']).to_string();
    if s.is_empty() {
        bail!("no {what} secret (set {var} or give it on standard input)");
    }
    Ok(s)
}

fn encode(name: &str) -> String {
    name.replace('%', "%25").replace(':', "%3A")
}

/// `--chap USER` and `--mutual-chap USER` with their secrets.
fn chap_pair(
    chap: Option<String>,
    mutual_chap: Option<String>,
) -> Result<(Option<ChapSecret>, Option<ChapSecret>)> {
    let chap = match chap {
        Some(user) => Some(ChapSecret {
            user,
            secret: secret("SHOAL_CHAP_SECRET", "CHAP")?,
        }),
        None => None,
    };
    let mutual_chap = match mutual_chap {
        Some(user) => Some(ChapSecret {
            user,
            secret: secret("SHOAL_MUTUAL_CHAP_SECRET", "mutual CHAP")?,
        }),
        None => None,
    };
    Ok((chap, mutual_chap))
}

fn chap_text(user: &Option<String>, mutual: &Option<String>) -> String {
    match (user, mutual) {
        (None, _) => "none".to_string(),
        (Some(u), None) => format!("user {u}"),
        (Some(u), Some(m)) => format!("user {u}, mutual as {m}"),
    }
}

fn discovery(cmd: DiscoveryCommand) -> Result<()> {
    let (info, json): (DiscoveryInfo, bool) = match cmd {
        DiscoveryCommand::Show { json } => (api()?.get("/iscsi/discovery")?, json),
        DiscoveryCommand::Set {
            chap,
            mutual_chap,
            json,
        } => {
            let (chap, mutual_chap) = chap_pair(chap, mutual_chap)?;
            let spec = DiscoverySpec { chap, mutual_chap };
            (api()?.put("/iscsi/discovery", &spec)?, json)
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        println!(
            "discovery CHAP  {}",
            chap_text(&info.chap_user, &info.mutual_chap_user)
        );
    }
    Ok(())
}

fn print(t: &TargetInfo) {
    println!("target {}", t.name);
    if let Some(a) = &t.alias {
        println!("  alias     {a}");
    }
    for l in &t.luns {
        println!(
            "  LUN {:<5} {} ({}, {} blocks of {}, naa.{})",
            l.lun,
            l.volume,
            if l.online {
                "online"
            } else {
                "offline: pool not imported"
            },
            l.size_bytes / l.block_size.max(1) as u64,
            l.block_size,
            l.naa
        );
    }
    println!(
        "  allow     {}",
        if t.allow.is_empty() {
            "any initiator".to_string()
        } else {
            t.allow.join(", ")
        }
    );
    println!(
        "  CHAP      {}",
        chap_text(&t.chap_user, &t.mutual_chap_user)
    );
    for p in &t.portals {
        println!("  portal    {p}");
    }
    for s in &t.sessions {
        println!("  session   {s}");
    }
}

pub fn run(cmd: IscsiCommand) -> Result<()> {
    let cmd = match cmd {
        IscsiCommand::Target(cmd) => cmd,
        IscsiCommand::Discovery(cmd) => return discovery(cmd),
    };
    match cmd {
        TargetCommand::Create {
            name,
            luns,
            allow,
            chap,
            mutual_chap,
            alias,
            json,
        } => {
            let mut map = BTreeMap::new();
            for l in &luns {
                let (n, v) = l
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--lun '{l}' is not LUN=VOLUME"))?;
                let n: u64 = n
                    .parse()
                    .map_err(|_| anyhow!("--lun '{l}': '{n}' is not a LUN number"))?;
                if map.insert(n, v.to_string()).is_some() {
                    bail!("LUN {n} is given twice");
                }
            }
            let (chap, mutual_chap) = chap_pair(chap, mutual_chap)?;
            let spec = TargetSpec {
                name,
                alias,
                luns: map,
                allow,
                chap,
                mutual_chap,
            };
            let info: TargetInfo = api()?.post("/iscsi/targets", &spec)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print(&info);
            }
            Ok(())
        }
        TargetCommand::List { json } => {
            let all: Vec<TargetInfo> = api()?.get("/iscsi/targets")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else if all.is_empty() {
                println!("no iSCSI targets");
            } else {
                for t in &all {
                    print(t);
                }
            }
            Ok(())
        }
        TargetCommand::Show { name, json } => {
            let t: TargetInfo = api()?.get(&format!("/iscsi/targets/{}", encode(&name)))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                print(&t);
            }
            Ok(())
        }
        TargetCommand::Destroy { name } => {
            api()?.delete(&format!("/iscsi/targets/{}", encode(&name)))?;
            println!("destroyed {name}");
            Ok(())
        }
    }
}
