//! The simulator's faults and repairs: silent corruption, read errors and device
//! deaths aimed at real blocks within the layout's redundancy, and the repairs an
//! operator runs (replace, clear, scrub), each judged against the damage budget; and
//! what a recovery finds of them (a replacement the power cut interrupted, devices
//! the pool holds FAULTED).

use super::*;

impl Sim {
    pub(super) fn budget_allows(&self, slot: usize) -> bool {
        let budget = self.redundancy + usize::from(self.control == Control::OverBudget);
        self.damaged.contains(&slot) || self.damaged.len() < budget
    }

    pub(super) fn damageable_slot(&mut self) -> Option<usize> {
        let slot = self.rng.below(self.slots.len() as u64) as usize;
        self.budget_allows(slot).then_some(slot)
    }

    /// The byte range of one data device that holds part of a random block of the
    /// committed tree (a mirror side holds all of it; a RAID-Z child one column of each
    /// row, the rows laid out in order), so corruption and read errors land on data.
    pub(super) fn block_range(&mut self) -> Option<(u64, u64)> {
        let (start, _) = vdev::label::data_area(DEV_BYTES);
        let blocks = self.pool().committed_blocks().ok()?;
        let bp = blocks.get(self.rng.below(blocks.len() as u64) as usize)?;
        let dva = bp.copies().next()?;
        let n = match self.layout {
            Layout::RaidZ { .. } => self.slots.len() as u64,
            _ => 1,
        };
        let from = dva.offset / n / 4096 * 4096;
        let to = (dva.offset + dva.asize()).div_ceil(n).div_ceil(4096) * 4096;
        Some((start + from, (to - from).max(4096)))
    }

    /// One fault or repair action, drawn by the seed.
    pub(super) fn fault(&mut self) -> SimResult<Step> {
        // Damage aimed at a listed block lands on it only while its space cannot be
        // reused: with the sync thread running, a block freed after the list was taken
        // could otherwise be another, newer block by the time the damage lands (one
        // a scrub that began before it was committed would not see).
        let pool = self.pool().clone();
        match self.rng.below(6) {
            0 | 1 => {
                let _frees = pins_on().then(|| pool.hold_frees());
                // Silent corruption: a range of the data area, whatever it holds.
                let Some(slot) = self.damageable_slot() else {
                    return Ok(Step::Done);
                };
                let Some((at, len)) = self.block_range() else {
                    return Ok(Step::Done);
                };
                let seed = self.rng.next();
                self.slots[slot].dev.corrupt_range(at, len, seed);
                trace(format_args!(
                    "corrupt slot {slot} [{at}, +{len}) damaged {:?}",
                    self.damaged
                ));

                self.damaged.insert(slot);
                self.stats.corruptions += 1;
            }
            2 => {
                let _frees = pins_on().then(|| pool.hold_frees());
                let Some(slot) = self.damageable_slot() else {
                    return Ok(Step::Done);
                };
                let Some((at, len)) = self.block_range() else {
                    return Ok(Step::Done);
                };
                let times = 1 + self.rng.below(4) as u32;
                self.slots[slot].dev.inject(Fault::ReadError {
                    offset: at,
                    len,
                    times,
                });
                self.damaged.insert(slot);
                self.read_faulted.insert(slot);
                trace(format_args!(
                    "read errors slot {slot} [{at}, +{len}) x{times} damaged {:?}",
                    self.damaged
                ));
                self.stats.read_faults += 1;
            }
            3 => {
                let Some(slot) = self.damageable_slot() else {
                    return Ok(Step::Done);
                };
                if !self.dead.contains(&slot) {
                    self.slots[slot].dev.inject(Fault::Dead);
                    self.damaged.insert(slot);
                    self.dead.insert(slot);
                    self.stats.deaths += 1;
                    trace(format_args!("slot {slot} dies, damaged {:?}", self.damaged));
                }
            }
            4 => {
                // Clear a FAULTED device now and then, as an operator would once the
                // cause is fixed; else replace a dead device, else any damaged one.
                if let Some(&slot) = self.faulted.iter().next() {
                    if self.rng.below(2) == 0 {
                        return self.clear(slot);
                    }
                }
                let Some(&slot) = self
                    .dead
                    .iter()
                    .next()
                    .or_else(|| self.faulted.iter().next())
                    .or_else(|| self.damaged.iter().next())
                else {
                    return Ok(Step::Done);
                };
                return self.replace(slot);
            }
            _ => return self.scrub(),
        }
        Ok(Step::Done)
    }

    /// `Pool::clear` of a slot the pool holds FAULTED: resilvered in place, it is
    /// whole again.
    pub(super) fn clear(&mut self, slot: usize) -> SimResult<Step> {
        let path = self.slots[slot].path.clone();
        trace(format_args!(
            "clear slot {slot} ({path}), damaged {:?}",
            self.damaged
        ));
        match self.pool().clear(&path, &|_| {}) {
            _ if self.clock.crashed() => Ok(Step::Crashed),
            Ok(summary) if summary.errors > 0 => Err(format!(
                "clear of {path}: {} blocks unreadable within the damage budget, the first \
                 at offset {}",
                summary.errors,
                summary.unreadable.first().map_or(0, |u| u.1)
            )),
            Ok(_) => {
                trace(format_args!("cleared slot {slot}"));
                self.faulted.remove(&slot);
                // The same device: read errors injected while it was FAULTED are still
                // to come (a replacement is a new device; a clear is not).
                if !self.read_faulted.contains(&slot) {
                    self.damaged.remove(&slot);
                }
                self.stats.clears += 1;
                Ok(Step::Done)
            }
            // A device that died again fails its resilver and stays FAULTED.
            Err(_) if self.dead.contains(&slot) => Ok(Step::Done),
            Err(e) => Err(format!("clear {path}: {e}")),
        }
    }

    pub(super) fn replace(&mut self, slot: usize) -> SimResult<Step> {
        let new = Slot {
            path: format!("d{slot}.{}", self.generation),
            dev: SimDevice::with_clock(
                DEV_BYTES,
                self.seed * 1000 + 100 + self.generation,
                self.clock.clone(),
            ),
        };
        self.generation += 1;
        let old = self.slots[slot].path.clone();
        trace(format_args!(
            "replace slot {slot} ({old} by {}), damaged {:?}",
            new.path, self.damaged
        ));
        match self.pool().replace(&old, arg(&new), &|_| {}) {
            _ if self.clock.crashed() => {
                self.replacing = Some((slot, new));
                self.stats.cuts_in_resilver += 1;
                Ok(Step::Crashed)
            }
            Ok(summary) => {
                if summary.errors > 0 {
                    return Err(format!(
                        "resilver of {old} onto {}: {} blocks unreadable within the damage \
                         budget, the first at offset {}",
                        new.path,
                        summary.errors,
                        summary.unreadable.first().map_or(0, |u| u.1)
                    ));
                }
                trace(format_args!("replaced slot {slot} by {}", new.path));
                self.slots[slot] = new;
                self.damaged.remove(&slot);
                self.dead.remove(&slot);
                self.read_faulted.remove(&slot);
                self.faulted.remove(&slot);
                self.stats.replaces += 1;
                Ok(Step::Done)
            }
            Err(_) if self.clock.crashed() => {
                self.replacing = Some((slot, new));
                self.stats.cuts_in_resilver += 1;
                Ok(Step::Crashed)
            }
            Err(e) => Err(format!("replace {old}: {e}")),
        }
    }

    /// A scrub, then a txg commit (so no log block still relies on a copy the scrub
    /// could not see): every live device is whole again.
    pub(super) fn scrub(&mut self) -> SimResult<Step> {
        let r = self.pool().scrub(&|_| {});
        trace(format_args!("scrub: {r:?}, damaged {:?}", self.damaged));
        match r {
            // A power cut in the middle fails the reads after it, in whatever way.
            _ if self.clock.crashed() => return Ok(Step::Crashed),
            Ok(s) if s.errors == 0 => {
                self.stats.scrubs += 1;
                self.stats.repaired_bytes += s.repaired_bytes;
            }
            Ok(s) => {
                let check = self.pool().check().map(|r| r.problems);
                return Err(format!(
                    "scrub: {} blocks unreadable within the damage budget {:?}, the first at \
                     offset {}; pool check: {check:?}; devices: {}",
                    s.errors,
                    self.damaged,
                    s.unreadable.first().map_or(0, |u| u.1),
                    self.devices()
                ));
            }
            Err(_) if self.clock.crashed() => return Ok(Step::Crashed),
            Err(e) => return Err(format!("scrub: {e}")),
        }
        match self.pool().sync() {
            Ok(_) => {}
            Err(_) if self.clock.crashed() => return Ok(Step::Crashed),
            Err(e) => return Err(format!("txg after scrub: {e}")),
        }
        self.acknowledged();
        let keep: BTreeSet<usize> = self
            .damaged
            .iter()
            .copied()
            .filter(|s| {
                self.dead.contains(s) || self.read_faulted.contains(s) || self.faulted.contains(s)
            })
            .collect();
        self.damaged = keep;
        Ok(Step::Done)
    }

    /// The slots the imported pool holds FAULTED (they missed writes before the cut):
    /// damaged until cleared or replaced.
    pub(super) fn note_faulted(&mut self) -> SimResult<()> {
        let st = self.pool().status();
        self.faulted = st
            .vdevs
            .iter()
            .flat_map(|t| t.children.iter())
            .enumerate()
            .filter(|(_, l)| l.health == "FAULTED")
            .map(|(i, _)| i)
            .collect();
        if !self.faulted.is_empty() {
            trace(format_args!("faulted at import: slots {:?}", self.faulted));
        }
        // Only a fault the simulator injected faults a device.
        if let Some(s) = self.faulted.iter().find(|s| !self.damaged.contains(s)) {
            return Err(format!(
                "the pool holds slot {s} FAULTED though no fault touched it; devices: {}",
                self.devices()
            ));
        }
        Ok(())
    }

    /// After a replacement the power interrupted: the pool says which device holds the
    /// slot now.
    pub(super) fn settle_replacement(&mut self) {
        let Some((slot, new)) = self.replacing.take() else {
            return;
        };
        let paths: Vec<String> = self
            .pool()
            .status()
            .vdevs
            .iter()
            .flat_map(|t| t.children.iter().map(|c| c.path.clone()))
            .collect();
        trace(format_args!(
            "after the cut in the resilver of slot {slot}, the pool holds {paths:?}"
        ));
        if paths.contains(&new.path) {
            self.slots[slot] = new;
            self.damaged.remove(&slot);
        }
    }
}
