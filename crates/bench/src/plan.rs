//! `shoal plan`: the capacity model of a pool layout, the way the appliance's
//! sizing rules put it. Per disk: streaming bandwidth `mbps`, random IOPS `iops`,
//! capacity `size`.
//!
//! - RAID-Z of G groups of D data + P parity disks: a record is spread over a group's
//!   data disks, so streaming reads and writes move G*D disks' worth; a random read
//!   of one record busies every data disk of its group, so random reads scale with
//!   groups (G*iops); usable capacity G*D*size.
//! - Mirrors of G groups of W disks: reads may be served by any side (G*W disks'
//!   worth, streaming and random); every write goes to all W sides (G disks' worth);
//!   usable capacity G*size.
//! - A stripe of N disks: N of everything.
//! - Random writes: a record written at random busies every disk of its RAID-Z group
//!   (data and parity) or every side of its mirror, so they scale with groups
//!   (G*iops; N*iops for a stripe). This is the rule without the intent log and
//!   without transaction groups turning random writes into sequential ones, so it is
//!   the floor for sync writes without a log device.
//! - Device-side bytes per client byte: streaming reads read only data (1x, parity
//!   untouched while every disk is whole); writes write parity too ((D+P)/D for
//!   RAID-Z) or every side (W for a W-way mirror).
//! - A bus or controller ceiling (`bus_mbps`, what all the disks together can move)
//!   caps the client's streaming figures at the ceiling over the device-side bytes
//!   per client byte.
//! - Hot spares add disks but neither bandwidth nor capacity.
//!
//! The model ignores what the disks cannot see: CPU, the network, caches, and
//! metadata I/O, which is why measured figures come out below it on real servers.

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Layout {
    Raidz { groups: u32, data: u32, parity: u32 },
    Mirror { groups: u32, ways: u32 },
    Stripe { disks: u32 },
}

/// `3x(4+1)`, `3x(4+1)raidz`, `2x(4+2)raidz2`, `7x2mirror`, `7x2-mirror`, `6stripe`, `6`.
pub fn parse_layout(s: &str) -> Result<Layout> {
    let t: String = s
        .trim()
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let bad =
        || anyhow!("'{s}': a layout is like 3x(4+1)raidz, 2x(4+2)raidz2, 7x2mirror or 6stripe");
    let num = |v: &str| -> Result<u32> {
        let n: u32 = v.parse().map_err(|_| bad())?;
        if n == 0 || n > 1024 {
            bail!("'{s}': counts must be 1 to 1024");
        }
        Ok(n)
    };
    if let Some(rest) = t
        .strip_suffix("stripe")
        .or_else(|| t.parse::<u32>().ok().map(|_| t.as_str()))
    {
        return Ok(Layout::Stripe {
            disks: num(rest.trim_end_matches('-'))?,
        });
    }
    let (groups, rest) = t.split_once('x').ok_or_else(bad)?;
    let groups = num(groups)?;
    if let Some(ways) = rest.strip_suffix("mirror") {
        let ways = num(ways.trim_end_matches('-'))?;
        if ways < 2 {
            bail!("'{s}': a mirror has at least 2 disks");
        }
        return Ok(Layout::Mirror { groups, ways });
    }
    let open = rest.strip_prefix('(').ok_or_else(bad)?;
    let (inner, kind) = open.split_once(')').ok_or_else(bad)?;
    let (data, parity) = inner.split_once('+').ok_or_else(bad)?;
    let (data, parity) = (num(data)?, num(parity)?);
    if parity > 3 {
        bail!("'{s}': RAID-Z has 1 to 3 parity disks");
    }
    let named = match kind.trim_start_matches('-') {
        "" => parity,
        "raidz" | "raidz1" => 1,
        "raidz2" => 2,
        "raidz3" => 3,
        _ => return Err(bad()),
    };
    if named != parity {
        bail!("'{s}': {kind} has {named} parity disks, not {parity}");
    }
    Ok(Layout::Raidz {
        groups,
        data,
        parity,
    })
}

/// What the model predicts for a layout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Prediction {
    pub layout: Layout,
    /// Every disk, hot spares included.
    pub disks: u32,
    #[serde(default)]
    pub spares: u32,
    /// Disks whose bandwidth streaming reads add up.
    pub read_disks: u32,
    pub write_disks: u32,
    pub streaming_read_mb_per_s: f64,
    pub streaming_write_mb_per_s: f64,
    pub random_read_iops: f64,
    #[serde(default)]
    pub random_write_iops: f64,
    /// Bytes the disks move per byte a client reads or writes, streaming.
    #[serde(default)]
    pub device_bytes_per_read_byte: f64,
    #[serde(default)]
    pub device_bytes_per_write_byte: f64,
    /// The bus or controller ceiling, when given, and whether it (rather than the
    /// disks) bounds streaming reads or writes.
    #[serde(default)]
    pub bus_mb_per_s: Option<f64>,
    #[serde(default)]
    pub bus_bound_read: bool,
    #[serde(default)]
    pub bus_bound_write: bool,
    pub usable_bytes: Option<u64>,
}

/// What `shoal plan` adds to the disks' own figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras {
    pub spares: u32,
    /// What the bus or controllers can move, all disks together, MB/s.
    pub bus_mbps: Option<f64>,
}

pub fn predict(
    layout: Layout,
    disk_mbps: f64,
    disk_iops: f64,
    disk_bytes: Option<u64>,
) -> Prediction {
    predict_with(layout, disk_mbps, disk_iops, disk_bytes, Extras::default())
}

pub fn predict_with(
    layout: Layout,
    disk_mbps: f64,
    disk_iops: f64,
    disk_bytes: Option<u64>,
    extras: Extras,
) -> Prediction {
    let (disks, read_disks, write_disks, random_units, usable_disks) = match layout {
        Layout::Raidz {
            groups,
            data,
            parity,
        } => (
            groups * (data + parity),
            groups * data,
            groups * data,
            groups,
            groups * data,
        ),
        Layout::Mirror { groups, ways } => {
            (groups * ways, groups * ways, groups, groups * ways, groups)
        }
        Layout::Stripe { disks } => (disks, disks, disks, disks, disks),
    };
    let (write_units, write_amplification) = match layout {
        Layout::Raidz {
            groups,
            data,
            parity,
        } => (groups, (data + parity) as f64 / data as f64),
        Layout::Mirror { groups, ways } => (groups, ways as f64),
        Layout::Stripe { disks } => (disks, 1.0),
    };
    let read = read_disks as f64 * disk_mbps;
    let write = write_disks as f64 * disk_mbps;
    // The bus carries device-side bytes: a client byte read is 1, written is the
    // write amplification.
    let bus_read = extras.bus_mbps.map_or(f64::INFINITY, |b| b);
    let bus_write = extras
        .bus_mbps
        .map_or(f64::INFINITY, |b| b / write_amplification);
    Prediction {
        layout,
        disks: disks + extras.spares,
        spares: extras.spares,
        read_disks,
        write_disks,
        streaming_read_mb_per_s: read.min(bus_read),
        streaming_write_mb_per_s: write.min(bus_write),
        random_read_iops: random_units as f64 * disk_iops,
        random_write_iops: write_units as f64 * disk_iops,
        device_bytes_per_read_byte: 1.0,
        device_bytes_per_write_byte: write_amplification,
        bus_mb_per_s: extras.bus_mbps,
        bus_bound_read: bus_read < read,
        bus_bound_write: bus_write < write,
        usable_bytes: disk_bytes.map(|b| b * usable_disks as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_appliance_layouts_predict_as_the_rules_say() {
        let p = predict(
            parse_layout("3x(4+1) RAID-Z".replace("-", "").as_str()).unwrap(),
            72.0,
            90.0,
            Some(1 << 40),
        );
        assert_eq!(
            (p.disks, p.streaming_read_mb_per_s, p.random_read_iops),
            (15, 864.0, 270.0)
        );
        assert_eq!(p.usable_bytes, Some(12 << 40));
        let p = predict(parse_layout("5x(2+1)raidz").unwrap(), 72.0, 90.0, None);
        assert_eq!(
            (p.disks, p.streaming_write_mb_per_s, p.random_read_iops),
            (15, 720.0, 450.0)
        );
        let p = predict(parse_layout("7x2mirror").unwrap(), 72.0, 90.0, None);
        assert_eq!(
            (
                p.disks,
                p.streaming_read_mb_per_s,
                p.streaming_write_mb_per_s,
                p.random_read_iops
            ),
            (14, 1008.0, 504.0, 1260.0)
        );
        assert_eq!(
            parse_layout("2x(4+2)raidz2").unwrap(),
            Layout::Raidz {
                groups: 2,
                data: 4,
                parity: 2
            }
        );
        assert_eq!(
            parse_layout("6stripe").unwrap(),
            Layout::Stripe { disks: 6 }
        );
        assert_eq!(parse_layout("6").unwrap(), Layout::Stripe { disks: 6 });
    }

    #[test]
    fn random_writes_amplification_spares_and_a_bus_ceiling() {
        let raidz = parse_layout("3x(4+1)raidz").unwrap();
        let p = predict_with(
            raidz,
            72.0,
            90.0,
            None,
            Extras {
                spares: 2,
                bus_mbps: Some(800.0),
            },
        );
        assert_eq!((p.disks, p.spares), (17, 2));
        assert_eq!(p.random_write_iops, 270.0);
        assert_eq!(p.device_bytes_per_write_byte, 1.25);
        // Reads: 864 MB/s of disks under an 800 MB/s bus; writes: 864 of disks, but
        // the bus carries 1.25 bytes per client byte: 640.
        assert_eq!(p.streaming_read_mb_per_s, 800.0);
        assert_eq!(p.streaming_write_mb_per_s, 640.0);
        assert!(p.bus_bound_read && p.bus_bound_write);
        let m = predict(parse_layout("7x2mirror").unwrap(), 72.0, 90.0, None);
        assert_eq!(
            (m.random_write_iops, m.device_bytes_per_write_byte),
            (630.0, 2.0)
        );
        assert!(!m.bus_bound_read && m.bus_mb_per_s.is_none());
    }

    #[test]
    fn bad_layouts_say_why() {
        for (s, why) in [
            ("3x(4+1)raidz2", "parity"),
            ("7x1mirror", "at least 2"),
            ("0x2mirror", "1 to 1024"),
            ("3x(4+4)", "1 to 3"),
            ("raidz", "a layout is like"),
        ] {
            let e = parse_layout(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
