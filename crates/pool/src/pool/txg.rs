//! The transaction group pipeline: quiesce, sync (object sets, directory, space log,
//! flushes, uberblocks), the sync thread, and what the intent log needs of the pool
//! (`LogSource`).

use super::*;

impl Pool {
    /// Commits everything changed so far; returns the txg that holds it.
    pub fn sync(&self) -> Result<u64, PoolError> {
        self.check_writable()?;
        let target = {
            let mut t = self.txg.lock().unwrap();
            t.requested_txg = t.requested_txg.max(t.open_txg);
            self.txg_cv.notify_all();
            t.open_txg
        };
        if !self.opts.sync_thread || self.sync_thread.lock().unwrap().is_none() {
            while self.txg.lock().unwrap().synced_txg < target {
                self.sync_once()?;
            }
            return Ok(target);
        }
        let mut t = self.txg.lock().unwrap();
        while t.synced_txg < target {
            if let Some(r) = self.suspended.lock().unwrap().clone() {
                return Err(PoolError::Suspended(r));
            }
            t = self
                .txg_cv
                .wait_timeout(t, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        Ok(target)
    }

    pub fn synced_txg(&self) -> u64 {
        self.txg.lock().unwrap().synced_txg
    }

    /// One quiesce + sync + commit.
    pub(super) fn sync_once(&self) -> Result<(), PoolError> {
        let _one_at_a_time = self.sync_lock.lock().unwrap();
        self.check_writable()?;
        let (txg, objsets, changed) = {
            let _quiesce = self.gate.write().unwrap();
            let mut t = self.txg.lock().unwrap();
            let txg = t.open_txg;
            t.open_txg += 1;
            t.dirty_bytes = 0;
            self.txg_cv.notify_all();
            drop(t);
            let objsets = self.all_objsets();
            let mut changed = self.directory_dirty.swap(false, Ordering::SeqCst);
            let mut dirty_sets = Vec::new();
            for os in objsets {
                if os.quiesce() {
                    changed = true;
                    dirty_sets.push(os);
                }
            }
            (txg, dirty_sets, changed)
        };
        let result = if changed {
            let started = Instant::now();
            let r = self.sync_txg(txg, &objsets);
            if r.is_ok() {
                self.report(analytics::Meter::TxgSync, started);
            }
            r
        } else {
            // Nothing changed, so no record of this txg changes anything: they are moot,
            // though the ring's tail stays where the durable header left it.
            self.intent_log.committed(txg, None);
            Ok(())
        };
        let mut t = self.txg.lock().unwrap();
        match &result {
            Ok(()) => {
                t.synced_txg = txg;
                drop(t);
                self.storage.txg_committed(txg);
            }
            Err(e) => {
                drop(t);
                *self.suspended.lock().unwrap() = Some(format!("txg {txg}: {e}"));
            }
        }
        self.txg_cv.notify_all();
        if result.is_ok() {
            // After the waiters are woken: they need not wait for the scan.
            self.evict_clean_objects();
        }
        result
    }

    /// Every dataset's and snapshot's object set.
    pub(super) fn all_objsets(&self) -> Vec<Arc<Objset>> {
        self.datasets
            .read()
            .unwrap()
            .values()
            .map(|d| d.objset.clone())
            .collect()
    }

    /// Keeps the loaded objects of all object sets within `object_cache_max` (after
    /// each txg, read-only sets included: reads alone load objects too).
    pub(super) fn evict_clean_objects(&self) {
        let sets = self.all_objsets();
        let loaded: Vec<usize> = sets.iter().map(|os| os.loaded_objects()).collect();
        let max = self.opts.object_cache_max;
        let shares = fair_shares(&loaded, max, MIN_OBJECTS_PER_SET.min(max));
        for (os, share) in sets.iter().zip(shares) {
            os.evict_clean_objects(share);
        }
    }

    /// Objects of object set `os` held in memory (see `PoolOptions::object_cache_max`).
    pub fn loaded_objects(&self, os: u64) -> Result<usize, PoolError> {
        Ok(self.objset(os)?.loaded_objects())
    }

    pub(super) fn sync_txg(&self, txg: u64, objsets: &[Arc<Objset>]) -> Result<(), PoolError> {
        let st = &self.storage;
        for os in objsets {
            os.sync(st, txg)?;
        }
        for (root, dead) in std::mem::take(&mut *self.pending_destroy.lock().unwrap()) {
            let mut doomed = Vec::new();
            visit_objset(st, root, &mut |bp| {
                doomed.push(*bp);
                Ok(())
            })?;
            for bp in doomed {
                st.free_block(&bp, txg);
            }
            deadlist::free_chain(st, dead, txg)?;
        }
        // Dead lists: what the syncs above released that a snapshot still holds.
        let released: Vec<(u64, Vec<BlockPointer>)> = self
            .datasets
            .read()
            .unwrap()
            .iter()
            .map(|(id, d)| (*id, d.objset.take_dead()))
            .filter(|(_, dead)| !dead.is_empty())
            .collect();
        for (id, dead) in released {
            let list = self.datasets.read().unwrap()[&id].deadlist;
            let list = deadlist::append(st, txg, list, &dead)?;
            self.datasets
                .write()
                .unwrap()
                .get_mut(&id)
                .unwrap()
                .deadlist = list;
        }
        self.apply_snapshot_ops(txg)?;
        // Directory.
        let entries: Vec<DirRecord> = self
            .datasets
            .read()
            .unwrap()
            .iter()
            .map(|(id, d)| DirRecord {
                id: *id,
                name: d.name.clone(),
                root: d.objset.root_bp(),
                props: d.props.clone(),
                snapshot_of: d.snapshot_of,
                snap_txg: d.snap_txg,
                deadlist: d.deadlist,
                guid: d.guid,
            })
            .collect();
        let next_id = *self.next_objset_id.lock().unwrap();
        let dir_bytes = encode_directory(&entries, next_id)?;
        let old = *self.committed.lock().unwrap();
        let directory = st.write_block(
            &dir_bytes,
            BlockSpec::metadata(BlockType::Directory, 0),
            txg,
            true,
        )?;
        st.free_block(&old.directory, txg);
        let (spacelog_head, spacelog_len) =
            spacelog::write_txg(st, txg, old.spacelog_head, old.spacelog_len)?;
        if !st.flush_all() {
            return Err(PoolError::Io("flush failed on too many devices".into()));
        }
        self.record_faults()?;
        let area = *self.log_area.lock().unwrap();
        let (log, log_tail) = self.intent_log.header_for(txg, area);
        let ub = Uberblock {
            txg,
            pool_guid: self.guid,
            time_ns: uberblock::now_ns(),
            directory,
            spacelog_head,
            spacelog_len,
            log,
        };
        let image = ub.encode();
        // Every leaf's four label copies at once, one thread a leaf: written one leaf
        // after another, a txg on 15 disks waited for 60 seeks in a row (two thirds
        // of a second on 7200 rpm disks), which held streaming writes to a quarter of
        // the disks' rate. Their order among leaves does not matter: the flush below
        // makes them all durable before anything relies on them. Deterministic pools
        // (simulations) keep one order.
        let tops = st.tops();
        let leaves: Vec<(usize, Arc<dyn vdev::Device>)> = tops
            .iter()
            .enumerate()
            .flat_map(|(t, top)| {
                top.leaves
                    .iter()
                    .filter(|leaf| leaf.is_usable())
                    .filter_map(move |leaf| leaf.device().map(|d| (t, d)))
            })
            .collect();
        let write = |dev: &Arc<dyn vdev::Device>| {
            label::write_uberblock(&**dev, &[0, 1, 2, 3], txg, &image).is_ok()
        };
        let took: Vec<bool> = if st.is_deterministic() || leaves.len() < 2 {
            leaves.iter().map(|(_, d)| write(d)).collect()
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = leaves
                    .iter()
                    .map(|(_, d)| s.spawn(move || write(d)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("uberblock writer panicked"))
                    .collect()
            })
        };
        for (t, top) in tops.iter().enumerate() {
            let written = leaves
                .iter()
                .zip(&took)
                .filter(|((lt, _), ok)| *lt == t && **ok)
                .count();
            if written == 0 {
                return Err(PoolError::Io(format!(
                    "no device of vdev {} took the uberblock",
                    top.id
                )));
            }
        }
        if !st.flush_all() {
            return Err(PoolError::Io("flush failed on too many devices".into()));
        }
        *self.committed.lock().unwrap() = Committed {
            txg,
            directory,
            spacelog_head,
            spacelog_len,
            log,
        };
        self.intent_log.committed(txg, Some(log_tail));
        Ok(())
    }

    pub(super) fn stop_sync_thread(&self) {
        if let Some(l2) = self.storage.l2.get() {
            l2.stop();
        }
        {
            let mut t = self.txg.lock().unwrap();
            t.shutdown = true;
            self.txg_cv.notify_all();
        }
        if let Some(h) = self.sync_thread.lock().unwrap().take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl LogSource for Pool {
    fn read_for_log(&self, os: u64, obj: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
        let objset = self.objset(os).ok()?;
        let (_, bytes) = objset
            .read_parts(&self.storage, obj, offset, len, Fetch::Any)
            .ok()??;
        Some(bytes.to_vec())
    }

    fn commit_txg(&self) -> Result<(), PoolError> {
        self.sync().map(|_| ())
    }

    fn place_for_log(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: u64,
        txg: u64,
    ) -> Vec<(u64, u64, BlockPointer)> {
        // The gate keeps `txg` open while its blocks are placed, so its sync sees
        // every placement or none.
        let _gate = self.gate.read().unwrap();
        if self.txg.lock().unwrap().open_txg != txg {
            return Vec::new();
        }
        let Ok(objset) = self.objset(os) else {
            return Vec::new();
        };
        // Out of space or a device error: the data is copied into the log instead.
        objset
            .place_blocks(&self.storage, obj, offset, len, txg)
            .unwrap_or_default()
    }

    fn flush_placed(&self) -> bool {
        self.storage.flush_placed()
    }
}
