//! After a failure, with `SHOAL_SIM_TRACE`: the simulated devices' events and the
//! history of the sectors of the blocks the failure names (or, after a failed
//! resilver, of every block no copy verifies), for finding who damaged them.

use super::*;

impl Sim {
    /// With `SHOAL_SIM_TRACE`, what happened to the sectors of a block a failure names
    /// ("at offset N" of vdev 0), on every data device: who wrote them last, whether a
    /// flush made them durable, and what a power cut did to them.
    pub(super) fn explain(&self, failure: &str) {
        if std::env::var_os("SHOAL_SIM_TRACE").is_none() {
            return;
        }
        for e in vdev::sim_device::history::events() {
            eprintln!("event: {e}");
        }
        let named = failure
            .split("at offset ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok());
        // A resilver names no block: find the ones no copy of verifies.
        let offsets: Vec<u64> = match (named, &self.pool) {
            (Some(o), _) => vec![o],
            (None, Some(pool)) => pool
                .committed_blocks()
                .unwrap_or_default()
                .iter()
                .filter(|bp| {
                    pool.storage
                        .read_uncached(bp, vdev::ReadMode::Normal)
                        .is_err()
                })
                .filter_map(|bp| bp.copies().next().map(|d| d.offset))
                .collect(),
            _ => Vec::new(),
        };
        for offset in offsets {
            eprintln!("unreadable block at offset {offset}:");
            self.explain_offset(offset);
        }
    }

    fn explain_offset(&self, offset: u64) {
        let (start, _) = vdev::label::data_area(DEV_BYTES);
        let n = match self.layout {
            Layout::RaidZ { .. } => self.slots.len() as u64,
            _ => 1,
        };
        let first = (start + offset / n) / 4096;
        for (i, slot) in self.slots.iter().enumerate() {
            for (sector, events) in vdev::sim_device::history::of(slot.dev.lineage(), first, 8) {
                eprintln!("history: slot {i} ({}) sector {sector}:", slot.path);
                for e in events {
                    eprintln!("    {e}");
                }
            }
        }
    }
}
