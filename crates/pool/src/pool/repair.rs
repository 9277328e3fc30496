//! Health and status, scrub, resilver (replace) and check: the walks over every
//! committed block, and the checks that compare the on-disk state with itself.

use super::lifecycle::write_leaf_config;
use super::*;

impl Pool {
    pub fn health(&self) -> Health {
        let mut worst = Health::Online;
        for t in self.storage.tops().iter() {
            match t.health() {
                Health::Faulted | Health::Unavail => return Health::Faulted,
                Health::Degraded | Health::Resilvering | Health::Offline => {
                    worst = Health::Degraded
                }
                Health::Online => {}
            }
        }
        if self.is_suspended() {
            return Health::Faulted;
        }
        worst
    }

    pub fn status(&self) -> PoolStatus {
        let (capacity, free, per_vdev_free) = {
            let a = self.storage.alloc.lock().unwrap();
            (
                a.capacity(),
                a.free_bytes(),
                a.vdevs.iter().map(|v| v.free_bytes()).collect::<Vec<_>>(),
            )
        };
        PoolStatus {
            name: self.name.clone(),
            guid: self.guid,
            health: self.health().name().into(),
            txg: self.synced_txg(),
            capacity_bytes: capacity,
            allocated_bytes: capacity - free,
            free_bytes: free,
            vdevs: self
                .storage
                .tops()
                .iter()
                .map(|t| TopStatus {
                    id: t.id,
                    layout: t.layout.name(),
                    health: t.health().name().into(),
                    capacity_bytes: t.capacity_bytes(),
                    free_bytes: per_vdev_free.get(t.id as usize).copied().unwrap_or(0),
                    children: t.leaves.iter().map(|l| leaf_status(l)).collect(),
                })
                .collect(),
            intent_log: self.intent_log.stats(),
            log: self
                .log_leaves
                .read()
                .unwrap()
                .iter()
                .map(|l| leaf_status(l))
                .collect(),
            cache: self
                .cache_leaves
                .read()
                .unwrap()
                .iter()
                .map(|l| leaf_status(l))
                .collect(),
            spares: self
                .spare_leaves
                .lock()
                .unwrap()
                .iter()
                .map(|l| leaf_status(l))
                .collect(),
            arc: self.storage.arc.stats().into(),
            l2arc: self.storage.l2.get().map(|l| l.stats()),
            suspended: self.suspended.lock().unwrap().clone(),
            last_scrub: self.last_scrub.lock().unwrap().clone(),
            unrecoverable_reads: self
                .storage
                .counters
                .unrecoverable_reads
                .load(Ordering::Relaxed),
        }
    }

    /// Every block pointer of the committed state: directory, space log, object sets
    /// (for scrub, check, and tests that aim faults at real blocks).
    pub fn committed_blocks(&self) -> Result<Vec<BlockPointer>, PoolError> {
        let st = &self.storage;
        // The walk reads the trees of `c` while txgs commit: a read pin taken before
        // `c` is read keeps every block of them where its pointer says until it ends.
        let _pin = st.pin_reads();
        let c = *self.committed.lock().unwrap();
        let mut out = Vec::new();
        if !c.directory.is_hole() {
            out.push(c.directory);
            let block = st.read_block(&c.directory)?;
            let (entries, _, _) = decode_directory(block.bytes())?;
            // Snapshots share blocks with their dataset and each other: list each once.
            let mut seen = std::collections::HashSet::new();
            for r in entries {
                visit_objset(st, r.root, &mut |bp| {
                    if seen.insert(*bp) {
                        out.push(*bp);
                    }
                    Ok(())
                })?;
                out.extend(deadlist::chain_blocks(st, r.deadlist)?);
            }
        }
        out.extend(spacelog::chain_blocks(st, c.spacelog_head)?);
        Ok(out)
    }

    /// Compares each committed object set's stored referenced bytes and each dead
    /// list's stored size with a count of the blocks themselves.
    pub(super) fn check_space_figures(&self, problems: &mut Vec<String>) -> Result<(), PoolError> {
        let st = &self.storage;
        let c = *self.committed.lock().unwrap();
        if c.directory.is_hole() {
            return Ok(());
        }
        let block = st.read_block(&c.directory)?;
        let (entries, _, sizes_stored) = decode_directory(block.bytes())?;
        for r in entries {
            if let Some(stored) = crate::objset::stored_referenced(st, r.root)? {
                let mut counted = 0u64;
                visit_objset(st, r.root, &mut |bp| {
                    counted += st.dsize(bp);
                    Ok(())
                })?;
                counted -= st.dsize(&r.root);
                if stored != counted {
                    problems.push(format!(
                        "object set '{}': root says {stored} bytes referenced, its tree holds {counted}",
                        r.name
                    ));
                }
            }
            if sizes_stored {
                let counted = deadlist::count_bytes(st, r.deadlist)?;
                if counted != r.deadlist.bytes {
                    problems.push(format!(
                        "dead list of '{}': directory says {} bytes, the list holds {counted}",
                        r.name, r.deadlist.bytes
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads and verifies every copy of every allocated block, repairing what is bad;
    /// the repairs are flushed (durable) before it returns.
    pub fn scrub(&self, progress: &dyn Fn(ScrubProgress)) -> Result<ScrubSummary, PoolError> {
        if self.scrub_running.swap(true, Ordering::SeqCst) {
            return Err(PoolError::InvalidArgument(
                "a scrub is already running".into(),
            ));
        }
        let started = Instant::now();
        // The block list is taken under the sync lock, so it names one committed txg;
        // the walk then runs while syncs go on, and holding frees keeps every listed
        // block's space from being reused until it ends.
        let (listed, _frees) = {
            let _one_txg = self.sync_lock.lock().unwrap();
            (self.committed_blocks(), FreeHold::new(&self.storage))
        };
        let result = (|| {
            let blocks = listed?;
            let total: u64 = blocks.iter().map(|b| b.asize_total()).sum();
            let mut summary = ScrubSummary::default();
            let mut done = 0u64;
            let mut ticker = Ticker::new(progress, total, &self.repair, SCRUB);
            for bp in &blocks {
                match self.storage.read_uncached(bp, ReadMode::Scrub) {
                    Ok((_, report)) => {
                        summary.repaired_bytes += report.repaired_bytes;
                        summary.bad_copies += report.bad_copies;
                    }
                    Err(_) => {
                        summary.errors += 1;
                        if let Some(d) = bp.copies().next() {
                            list_unreadable(&mut summary.unreadable, d);
                        }
                    }
                }
                summary.blocks += 1;
                summary.bytes += bp.lsize as u64;
                done += bp.asize_total();
                ticker.tick(done);
            }
            ticker.finish();
            // Repairs are writes like any other: until flushed they may vanish with
            // the power, and the damage with them would come back unseen after the
            // scrub said it was repaired.
            if summary.repaired_bytes > 0 && !self.storage.flush_all() {
                return Err(PoolError::Io(
                    "flushing the scrub's repairs failed on too many devices".into(),
                ));
            }
            summary.seconds = started.elapsed().as_secs_f64();
            summary.finished_at_txg = self.committed.lock().unwrap().txg;
            Ok(summary)
        })();
        self.scrub_running.store(false, Ordering::SeqCst);
        if let Ok(s) = &result {
            *self.last_scrub.lock().unwrap() = Some(s.clone());
        }
        result
    }

    /// Replaces the data device `old` (its path or guid) with `new`, then resilvers:
    /// every allocated block touching that vdev is read through redundancy and the
    /// replaced device's part of it written. Only allocated space is copied.
    pub fn replace(
        &self,
        old: &str,
        new: DeviceArg,
        progress: &dyn Fn(ScrubProgress),
    ) -> Result<ResilverSummary, PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        check_device_free(&new)?;
        let (top_index, leaf_index) = self.find_data_leaf(old)?;
        let top = self.storage.tops()[top_index].clone();
        if top.layout == Layout::Disk {
            return Err(PoolError::InvalidArgument(
                "a plain disk has no redundancy to resilver from; use a mirror or raidz".into(),
            ));
        }
        let (_, new_len) = label::data_area(new.device.size_bytes());
        let per_child = match top.layout {
            Layout::RaidZ { .. } => top.capacity_bytes() / top.leaves.len() as u64,
            _ => top.capacity_bytes(),
        };
        if new_len < per_child {
            return Err(PoolError::InvalidArgument(format!(
                "device {} is too small: its data area is {new_len} bytes, the vdev needs {per_child}",
                new.path
            )));
        }
        let started = Instant::now();
        let leaf = top.leaves[leaf_index].clone();
        let old_device = leaf.device();
        let old_path = leaf.path();
        let guid = new_guid();
        // The config names the new device only once it holds every block (below): a
        // label written meanwhile (a fault recorded by a sync) still names the old one,
        // so a crash part way leaves the position to the old device, as before.
        // The resilver's writes count under the new device's path: its number is
        // registered here, outside the sync the closure below runs in.
        let new_id = self
            .analytics
            .get()
            .map(|(a, _)| a.register_device(&self.name, &new.path, "data"));
        let summary = self.resilver(top_index, leaf_index, started, progress, || {
            leaf.replace_device(guid, new.path.clone(), new.device.clone());
            if let Some(id) = new_id {
                leaf.set_analytics_id(id);
            }
        })?;
        self.register_devices();
        self.mark_whole(top_index, leaf_index, Some((guid, new.path.clone())))?;
        // The old device no longer belongs to the pool.
        if let Some(dev) = old_device {
            if old_path != new.path {
                let _ = label::clear_labels(&*dev);
            }
        }
        // Commit a txg so the new device carries a current uberblock in its labels.
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync()?;
        Ok(ResilverSummary {
            seconds: started.elapsed().as_secs_f64(),
            ..summary
        })
    }

    /// Brings a FAULTED device back (zpool's `clear`): it is resilvered in place from
    /// the rest of its vdev, as a replacement would be, then serves reads again. A
    /// device faults after a failed write or too many read errors and stays FAULTED
    /// across import (`LeafConfig::faulted`), because it missed writes; clearing it is
    /// how the operator says the fault was passing (a cable, a controller reset).
    ///
    /// A FAULTED cache device is put back in service at once: nothing on it is ever
    /// needed (every L2ARC read is checked against the checksum in the index, so what
    /// it held before its fault can only miss). A FAULTED log device is removed and
    /// added again (`remove_log`, `add_log`, each safe at any crash point): its ring
    /// missed commits, so it comes back empty with fresh labels, never replayed. A
    /// spare is refused.
    pub fn clear(
        &self,
        device: &str,
        progress: &dyn Fn(ScrubProgress),
    ) -> Result<ResilverSummary, PoolError> {
        self.check_writable()?;
        let log = super::topology::find_named(&self.log_leaves.read().unwrap(), device);
        if let Some(leaf) = log {
            return self.clear_log_device(&leaf);
        }
        let _one = self.topology_change()?;
        if let Some(leaf) = super::topology::find_named(&self.cache_leaves.read().unwrap(), device)
        {
            return clear_cache_device(&leaf);
        }
        if let Some(leaf) = super::topology::find_named(&self.spare_leaves.lock().unwrap(), device)
        {
            return Err(PoolError::InvalidArgument(format!(
                "{} is a spare: it holds nothing to clear; replace a device with it, or remove it",
                leaf.path()
            )));
        }
        let (top_index, leaf_index) = self.find_data_leaf(device)?;
        let top = self.storage.tops()[top_index].clone();
        let leaf = top.leaves[leaf_index].clone();
        faulted_to_clear(&leaf, "replace it")?;
        if top.layout == Layout::Disk {
            return Err(PoolError::InvalidArgument(
                "a plain disk has no redundancy to resilver from; export and import the pool"
                    .into(),
            ));
        }
        self.resilver_in_place(top_index, leaf_index, progress)
    }

    /// `clear` of a log device (outside the topology lock, which `remove_log` and
    /// `add_log` take themselves).
    fn clear_log_device(&self, leaf: &Arc<Leaf>) -> Result<ResilverSummary, PoolError> {
        let started = Instant::now();
        let device = faulted_device_to_clear(leaf, "remove it and add a log device")?;
        let path = leaf.path();
        self.remove_log(&path)?;
        // Removed, the device is out of the pool and the log is elsewhere: nothing is
        // lost if it cannot come back, but the operator must know it is out.
        self.add_log(DeviceArg {
            path: path.clone(),
            device,
        })
        .map_err(|e| {
            PoolError::Io(format!(
                "{path} was taken out of the pool to be cleared but could not be added back ({e}); \
                 the intent log is in the pool's other log devices or the pool itself: add it again once it works"
            ))
        })?;
        Ok(ResilverSummary {
            seconds: started.elapsed().as_secs_f64(),
            ..ResilverSummary::default()
        })
    }

    /// Rebuilds a child that missed writes (FAULTED, OFFLINE) from the rest of its
    /// vdev, then records it whole (`clear`, `online`).
    pub(super) fn resilver_in_place(
        &self,
        top_index: usize,
        leaf_index: usize,
        progress: &dyn Fn(ScrubProgress),
    ) -> Result<ResilverSummary, PoolError> {
        let leaf = self.storage.tops()[top_index].leaves[leaf_index].clone();
        let started = Instant::now();
        let summary = self.resilver(top_index, leaf_index, started, progress, || {
            leaf.clear_counters();
            leaf.set_health(Health::Resilvering);
        })?;
        self.mark_whole(top_index, leaf_index, None)?;
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync()?;
        Ok(ResilverSummary {
            seconds: started.elapsed().as_secs_f64(),
            ..summary
        })
    }

    /// The data device named by `name` (its path or guid): (top vdev, child).
    pub(super) fn find_data_leaf(&self, name: &str) -> Result<(usize, usize), PoolError> {
        self.storage
            .tops()
            .iter()
            .enumerate()
            .find_map(|(t, top)| {
                top.leaves
                    .iter()
                    .position(|l| l.path() == name || l.guid().to_string() == name)
                    .map(|i| (t, i))
            })
            .ok_or_else(|| {
                PoolError::NotFound(format!("no data device '{name}' in pool '{}'", self.name))
            })
    }

    /// Fills one child of a vdev with every block it should hold. `start` puts the
    /// child in RESILVERING (it takes writes from then on) and runs with no sync
    /// writing and no block being placed by the intent log, so every block is either
    /// in the list taken then or written to the child by a later sync. Held frees keep
    /// the listed blocks where they are until the walk ends. The child is flushed and
    /// ONLINE when this returns.
    pub(super) fn resilver(
        &self,
        top_index: usize,
        leaf_index: usize,
        started: Instant,
        progress: &dyn Fn(ScrubProgress),
        start: impl FnOnce(),
    ) -> Result<ResilverSummary, PoolError> {
        let hold = self.sync_lock.lock().unwrap();
        let gate = self.gate.write().unwrap();
        start();
        // After `start`: it may install the vdev the child joins (`attach`).
        let top = self.storage.tops()[top_index].clone();
        let leaf = top.leaves[leaf_index].clone();
        let mut blocks = self.committed_blocks()?;
        // Blocks the intent log placed ahead of their txg (large sync writes) went to
        // the other children only and join the tree with a txg that commits after
        // this list: copy them too.
        for os in self.all_objsets() {
            blocks.extend(os.placed_blocks());
        }
        drop(gate);
        let _frees = FreeHold::new(&self.storage);
        drop(hold);
        let total: u64 = blocks
            .iter()
            .flat_map(|b| {
                b.copies()
                    .filter(|d| d.vdev as usize == top_index)
                    .map(|d| d.asize())
            })
            .sum();
        let mut summary = ResilverSummary::default();
        let mut done = 0;
        let mut ticker = Ticker::new(progress, total, &self.repair, RESILVER);
        for bp in &blocks {
            let verify = |buf: &[u8]| bp.verifies(buf);
            for d in bp.copies().filter(|d| d.vdev as usize == top_index) {
                match top.resilver_block(d.offset, bp.io_size(), leaf_index, &verify) {
                    Ok(bytes) => summary.bytes_written += bytes,
                    Err(_) => {
                        summary.errors += 1;
                        list_unreadable(&mut summary.unreadable, d);
                    }
                }
                summary.blocks += 1;
                done += d.asize();
            }
            ticker.tick(done);
        }
        ticker.finish();
        if !leaf.flush() || leaf.health() != Health::Resilvering {
            return Err(PoolError::Io(format!(
                "{} failed while being resilvered ({} write errors); it stays {}",
                leaf.path(),
                leaf.counters().write_errors,
                leaf.health().name()
            )));
        }
        leaf.finish_resilver();
        summary.seconds = started.elapsed().as_secs_f64();
        Ok(summary)
    }

    /// Records in the config that a resilvered child is whole (with its new identity
    /// after a replace) and writes it to every label, the child's own first.
    pub(super) fn mark_whole(
        &self,
        top_index: usize,
        leaf_index: usize,
        identity: Option<(u64, String)>,
    ) -> Result<(), PoolError> {
        // Under the sync lock: a sync recording a fault writes labels too.
        let _hold = self.sync_lock.lock().unwrap();
        {
            let mut cfg = self.config.lock().unwrap();
            let child = &mut cfg.vdevs[top_index].children[leaf_index];
            if let Some((guid, path)) = identity {
                child.guid = guid;
                child.path = path;
            }
            child.faulted = false;
            child.offline = false;
            cfg.config_txg += 1;
        }
        let leaf = self.storage.tops()[top_index].leaves[leaf_index].clone();
        self.write_labels_first(Some(&leaf))
    }

    /// Called by every sync before its uberblock: a data or log device that is FAULTED
    /// or missing misses this txg's writes, so the config on the other devices says so
    /// before any uberblock names the txg, and import will not trust what it holds.
    /// (A device that faults after this point, or during an intent log commit, is
    /// recorded by the next sync; a crash before it brings the device back with at
    /// most that txg's writes and the log's since missing, which its checksums reveal
    /// and reads and scrubs repair.) A child being resilvered is left as the config
    /// has it.
    pub(super) fn record_faults(&self) -> Result<(), PoolError> {
        if !self.opts.record_faults {
            return Ok(());
        }
        let newly_faulted = |leaf: &Leaf, lc: &LeafConfig| {
            !lc.faulted
                && leaf.guid() == lc.guid
                && matches!(leaf.health(), Health::Faulted | Health::Unavail)
        };
        // A device whose label write fails here faults too: record it in turn.
        for _ in 0..self.all_leaves().len() + 1 {
            let mut changed = Vec::new();
            {
                let mut cfg = self.config.lock().unwrap();
                for (t, top) in self.storage.tops().iter().enumerate() {
                    for (i, leaf) in top.leaves.iter().enumerate() {
                        // A side being attached is not in the config until it is whole.
                        let Some(lc) = cfg.vdevs[t].children.get_mut(i) else {
                            continue;
                        };
                        if newly_faulted(leaf, lc) {
                            lc.faulted = true;
                            changed.push(leaf.path());
                        }
                    }
                }
                for (i, leaf) in self.log_leaves.read().unwrap().iter().enumerate() {
                    let lc = &mut cfg.log[i];
                    if newly_faulted(leaf, lc) {
                        lc.faulted = true;
                        changed.push(leaf.path());
                    }
                }
                if changed.is_empty() {
                    return Ok(());
                }
                cfg.config_txg += 1;
            }
            vdev::sim_device::history::event(|| format!("config: faulted {}", changed.join(", ")));
            let cfg = self.config.lock().unwrap().clone();
            let mut written = 0;
            for leaf in self.all_leaves().iter().filter(|l| l.is_usable()) {
                match write_leaf_config(leaf, &cfg) {
                    Ok(()) => written += 1,
                    Err(_) => leaf.set_health(Health::Faulted),
                }
            }
            if written == 0 {
                return Err(PoolError::Io(
                    "no device took the config that records a faulted device".into(),
                ));
            }
        }
        Ok(())
    }

    /// Walks every block of the committed state: each must verify, lie in allocated
    /// space, and not overlap another; allocated space nobody references is a leak.
    pub fn check(&self) -> Result<CheckReport, PoolError> {
        // Before the sync lock: waiting for a log batch under it could deadlock.
        let acknowledged = self.intent_log.acknowledged_blocks();
        let _hold = self.sync_lock.lock().unwrap();
        let mut report = CheckReport::default();
        let blocks = match self.committed_blocks() {
            Ok(b) => b,
            Err(e) => {
                report
                    .problems
                    .push(format!("cannot walk the block tree: {e}"));
                return Ok(report);
            }
        };
        let mut extents: Vec<Extent> = Vec::new();
        for bp in &blocks {
            report.blocks += 1;
            if let Err(e) = self.storage.read_uncached(bp, ReadMode::Normal) {
                report
                    .problems
                    .push(format!("block of txg {}: {e}", bp.birth_txg));
            }
            for d in bp.copies() {
                extents.push(d.extent());
            }
        }
        let (area_offset, area_len) = *self.log_area.lock().unwrap();
        if area_len > 0 {
            extents.push(Extent {
                vdev: 0,
                offset: area_offset,
                len: area_len,
            });
        }
        extents.sort();
        for w in extents.windows(2) {
            if w[0].vdev == w[1].vdev && w[0].offset + w[0].len > w[1].offset {
                report
                    .problems
                    .push(format!("blocks overlap: {:?} and {:?}", w[0], w[1]));
            }
        }
        let alloc = self.storage.alloc.lock().unwrap();
        for e in &extents {
            match alloc.vdevs.get(e.vdev as usize) {
                None => report
                    .problems
                    .push(format!("block on missing vdev {}", e.vdev)),
                Some(v) if v.overlaps_free(e.offset, e.len) => report
                    .problems
                    .push(format!("block {e:?} lies in free space")),
                _ => {}
            }
        }
        drop(alloc);
        if let Err(e) = self.check_space_figures(&mut report.problems) {
            report
                .problems
                .push(format!("cannot check space figures: {e}"));
        }
        let c = *self.committed.lock().unwrap();
        let on_disk = match self.check_space_maps(&c, &extents, &mut report) {
            Ok(map) => Some(map),
            Err(e) => {
                report
                    .problems
                    .push(format!("cannot replay the space maps: {e}"));
                None
            }
        };
        self.check_intent_log(&c, &acknowledged, on_disk.as_ref(), &mut report);
        report.datasets = self.datasets.read().unwrap().len() as u64;
        let alloc = self.storage.alloc.lock().unwrap();
        report.referenced_bytes = extents.iter().map(|e| e.len).sum();
        report.allocated_bytes = alloc.capacity() - alloc.free_bytes();
        report.deferred_bytes = alloc.deferred_bytes();
        if report.referenced_bytes + report.deferred_bytes != report.allocated_bytes {
            report.problems.push(format!(
                "space accounting: {} referenced + {} awaiting free != {} allocated",
                report.referenced_bytes, report.deferred_bytes, report.allocated_bytes
            ));
        }
        Ok(report)
    }
}

/// Notes where an unreadable block lies, for the first `MAX_LISTED_ERRORS`.
fn list_unreadable(list: &mut Vec<(u32, u64)>, at: &crate::blkptr::Dva) {
    if list.len() < MAX_LISTED_ERRORS {
        list.push((at.vdev, at.offset));
    }
}

/// Sorted extents of one vdev merged where they touch: a set of byte ranges.
pub(super) fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (offset, len) in ranges {
        match out.last_mut() {
            Some((o, l)) if *o + *l >= offset => *l = (*l).max(offset + len - *o),
            _ => out.push((offset, len)),
        }
    }
    out
}

/// The first byte range in exactly one of two merged range sets, for a report.
pub(super) fn first_difference(a: &[(u64, u64)], b: &[(u64, u64)]) -> Option<(u64, u64, bool)> {
    let mut i = 0;
    while i < a.len() && i < b.len() && a[i] == b[i] {
        i += 1;
    }
    match (a.get(i), b.get(i)) {
        (None, None) => None,
        (Some(&(o, l)), None) => Some((o, l, true)),
        (None, Some(&(o, l))) => Some((o, l, false)),
        (Some(&(ao, al)), Some(&(bo, bl))) => Some(if ao < bo || (ao == bo && al > bl) {
            (ao, al, true)
        } else {
            (bo, bl, false)
        }),
    }
}

impl Pool {
    /// Replays the committed space maps (the space log chain) into a fresh allocator,
    /// as import would, and compares what they call allocated with what the committed
    /// block tree and the log area occupy, vdev by vdev: space allocated on disk that
    /// nothing references leaks after the next import; referenced space the maps call
    /// free would be handed out again and overwritten. Returns the replayed maps.
    pub(super) fn check_space_maps(
        &self,
        c: &Committed,
        referenced: &[Extent],
        report: &mut CheckReport,
    ) -> Result<Allocator, PoolError> {
        let capacities: Vec<u64> = self
            .storage
            .alloc
            .lock()
            .unwrap()
            .vdevs
            .iter()
            .map(|v| v.capacity)
            .collect();
        let mut maps = Allocator::new(&capacities);
        spacelog::replay(&self.storage, c.spacelog_head, &mut maps)?;
        // The chain's length is kept beside its head; `replay` just walked it.
        report.space_map_blocks = c.spacelog_len;
        for (v, space) in maps.vdevs.iter().enumerate() {
            let on_disk = merged(space.allocated_extents());
            let in_tree = merged(
                referenced
                    .iter()
                    .filter(|e| e.vdev as usize == v)
                    .map(|e| (e.offset, e.len))
                    .collect(),
            );
            report.space_map_bytes += on_disk.iter().map(|r| r.1).sum::<u64>();
            if let Some((offset, len, only_on_disk)) = first_difference(&on_disk, &in_tree) {
                report.problems.push(if only_on_disk {
                    format!(
                        "space maps of vdev {v}: {len} bytes at {offset} allocated that no \
                         block references"
                    )
                } else {
                    format!(
                        "space maps of vdev {v}: {len} bytes at {offset} referenced but free \
                         in the maps"
                    )
                });
            }
        }
        Ok(maps)
    }

    /// Reads the committed intent log chain as import would: every block the log
    /// acknowledged that still holds records newer than the committed txg must be on
    /// the chain (same position, same sequence number, verified), the records must
    /// parse and come in txg order, and every block written ahead of its txg that a
    /// record to replay names must verify and lie where the space maps leave room for
    /// replay to claim it.
    pub(super) fn check_intent_log(
        &self,
        c: &Committed,
        acknowledged: &crate::intent_log::AcknowledgedChain,
        maps: Option<&Allocator>,
        report: &mut CheckReport,
    ) {
        let Some(ring) = self.intent_log.ring(c.log.kind) else {
            return;
        };
        let read = crate::intent_log::read_chain(&ring, &c.log);
        report.log_blocks = read.blocks.len() as u64;
        report.log_records = read.records.len() as u64;
        if acknowledged.guid == c.log.guid && acknowledged.kind == c.log.kind {
            let live = acknowledged.blocks.iter().filter(|b| b.max_txg > c.txg);
            for &crate::intent_log::AcknowledgedBlock { pos, seq, max_txg } in live {
                let index = seq.checked_sub(c.log.seq).map(|i| i as usize);
                let on_chain = index
                    .and_then(|i| read.blocks.get(i))
                    .is_some_and(|b| b.0 == pos && b.2 == max_txg);
                if !on_chain {
                    report.problems.push(format!(
                        "intent log: acknowledged block {seq} at ring position {pos} is not \
                         on the chain import reads ({} blocks from {})",
                        read.blocks.len(),
                        c.log.start
                    ));
                    break;
                }
            }
        }
        let mut last_txg = 0;
        for (txg, op) in &read.records {
            if *txg < last_txg {
                report.problems.push(format!(
                    "intent log: record of txg {txg} after txg {last_txg}"
                ));
                break;
            }
            last_txg = *txg;
            if *txg <= c.txg {
                continue;
            }
            report.log_records_to_replay += 1;
            if let LogOp::WriteBlock { bp, .. } = op {
                if let Err(e) = self.storage.read_uncached(bp, ReadMode::Normal) {
                    report.problems.push(format!(
                        "intent log: block written ahead of txg {txg} does not verify: {e}"
                    ));
                }
                if let Some(maps) = maps {
                    for d in bp.copies() {
                        let e = d.extent();
                        let free = maps
                            .vdevs
                            .get(e.vdev as usize)
                            .is_some_and(|v| !v.overlaps_allocated(e.offset, e.len));
                        if !free {
                            report.problems.push(format!(
                                "intent log: block written ahead of txg {txg} at {e:?} \
                                 overlaps space the maps call allocated"
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// Reports a walk's progress at most every 200 ms, and once more at the end.
pub(super) struct Ticker<'a> {
    progress: &'a dyn Fn(ScrubProgress),
    total: u64,
    last: Instant,
    shared: &'a RepairProgress,
}

impl<'a> Ticker<'a> {
    /// `kind`: `SCRUB` or `RESILVER` (as `RepairProgress` shows it until dropped).
    pub(super) fn new(
        progress: &'a dyn Fn(ScrubProgress),
        total: u64,
        shared: &'a RepairProgress,
        kind: u8,
    ) -> Ticker<'a> {
        shared.done.store(0, Ordering::Relaxed);
        shared.total.store(total, Ordering::Relaxed);
        shared.kind.store(kind, Ordering::Release);
        Ticker {
            progress,
            total,
            last: Instant::now(),
            shared,
        }
    }

    pub(super) fn tick(&mut self, done: u64) {
        self.shared.done.store(done, Ordering::Relaxed);
        if self.last.elapsed() > Duration::from_millis(200) {
            (self.progress)(ScrubProgress {
                bytes_done: done,
                bytes_total: self.total,
            });
            self.last = Instant::now();
        }
    }

    pub(super) fn finish(&self) {
        (self.progress)(ScrubProgress {
            bytes_done: self.total,
            bytes_total: self.total,
        });
    }
}

impl Drop for Ticker<'_> {
    fn drop(&mut self) {
        self.shared.kind.store(NO_REPAIR, Ordering::Release);
    }
}

/// Keeps freed space deferred for as long as it lives (see `Allocator::hold_frees`).
pub struct FreeHold<'a>(&'a Storage);

impl Pool {
    /// Keeps every block of the committed state where its pointer says for as long as
    /// the hold lives (freed space is not reused meanwhile), so a caller can list
    /// blocks (`committed_blocks`) and then act on their places: a fault test aiming
    /// damage at real blocks while the sync thread runs.
    pub fn hold_frees(&self) -> FreeHold<'_> {
        FreeHold::new(&self.storage)
    }
}

impl<'a> FreeHold<'a> {
    pub(super) fn new(st: &'a Storage) -> FreeHold<'a> {
        st.alloc.lock().unwrap().hold_frees();
        FreeHold(st)
    }
}

impl Drop for FreeHold<'_> {
    fn drop(&mut self) {
        self.0.alloc.lock().unwrap().release_frees();
        self.0.hold_ended();
    }
}

/// `Pool::clear` of a cache device: a FAULTED one goes back in service with its error
/// counts cleared; the L2ARC writer picks it up at its next batch.
fn clear_cache_device(leaf: &Leaf) -> Result<ResilverSummary, PoolError> {
    faulted_device_to_clear(leaf, "remove it and add a cache device")?;
    leaf.clear_counters();
    leaf.set_health(Health::Online);
    Ok(ResilverSummary::default())
}

/// What `clear` asks of every device: FAULTED; a missing one is refused with what to
/// do `instead`, any other state as having nothing to clear.
fn faulted_to_clear(leaf: &Leaf, instead: &str) -> Result<(), PoolError> {
    match leaf.health() {
        Health::Faulted => Ok(()),
        Health::Unavail => Err(missing_to_clear(leaf, instead)),
        h => Err(PoolError::InvalidArgument(format!(
            "{} is {}, not FAULTED: nothing to clear",
            leaf.path(),
            h.name()
        ))),
    }
}

/// `faulted_to_clear` of a log or cache device, which must also still have its
/// device (it goes back in service as it is): that device.
fn faulted_device_to_clear(leaf: &Leaf, instead: &str) -> Result<Arc<dyn Device>, PoolError> {
    faulted_to_clear(leaf, instead)?;
    leaf.device().ok_or_else(|| missing_to_clear(leaf, instead))
}

fn missing_to_clear(leaf: &Leaf, instead: &str) -> PoolError {
    PoolError::InvalidArgument(format!(
        "{} is missing: there is nothing to clear; {instead}",
        leaf.path()
    ))
}
