//! The transaction group pipeline: quiesce, sync (object sets, directory, space log,
//! flushes, uberblocks), the sync thread, and what the intent log needs of the pool
//! (`LogSource`).

use super::*;

/// At most this many txgs sync back to back in one pipelined run (`sync_txgs`) before
/// others waiting for `sync_lock` (device changes, scrubs) get their turn.
const MAX_CHAINED_TXGS: u32 = 8;

/// What a txg's tree is rooted at besides its object sets: the next txg builds on it.
#[derive(Debug, Clone, Copy)]
struct Tip {
    directory: BlockPointer,
    spacelog_head: BlockPointer,
    spacelog_len: u64,
}

/// A txg whose blocks are written and whose uberblock is not.
#[derive(Debug)]
pub(super) struct Prepared {
    txg: u64,
    tip: Tip,
}

/// The commit of the txg before the one being prepared.
enum Committing<'scope> {
    Running(std::thread::ScopedJoinHandle<'scope, Result<(), PoolError>>),
    /// Left by `prepare_ahead_for_crash_tests`; runs once this txg is prepared.
    Deferred(Box<Prepared>, Instant),
}

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

    /// One quiesce + sync + commit, whole: when it returns the txg is durable (or the
    /// pool suspended).
    pub(super) fn sync_once(&self) -> Result<(), PoolError> {
        self.sync_txgs(false)
    }

    /// Syncs the open txg and, with `pipeline` (the sync thread, on real devices), goes
    /// on with the next ones while they fall due: txg N+1's object sets are written
    /// while txg N's flushes and uberblocks go out, so the disks keep streaming through
    /// a commit instead of waiting for it. (Alone it moved streaming writes on 15
    /// simulated disks by -3% to +8%: the label writes take disk time either way; see
    /// docs/bench/scaling.md.)
    ///
    /// Why this is safe: a txg's commit (`commit_prepared`) starts only after the one
    /// before it finished, so uberblocks stay in txg order; txg N+1 writes only to
    /// space that is free in the trees of N and of every earlier uberblock still in use,
    /// because frees become reusable only `DEFER_TXGS` txgs after they are durable
    /// (`Allocator::txg_committed`, called when a commit has finished); and nothing
    /// acknowledges txg N+1's changes before its own commit. A crash while N+1 is
    /// written leaves N-1 or N, each with its tree intact. A failed commit suspends the
    /// pool before the next one starts. Everything happens under `sync_lock`, so
    /// whoever else takes it still finds no sync in progress; at most
    /// `MAX_CHAINED_TXGS` txgs chain, so they do not wait long.
    pub(super) fn sync_txgs(&self, pipeline: bool) -> Result<(), PoolError> {
        let _one_at_a_time = self.sync_lock.lock().unwrap();
        self.check_writable()?;
        let pipeline = pipeline && !self.storage.is_deterministic();
        let result = std::thread::scope(|scope| -> Result<(), PoolError> {
            let finish = |c: Option<Committing<'_>>| match c {
                None => Ok(()),
                Some(Committing::Running(h)) => h.join().expect("txg commit panicked"),
                Some(Committing::Deferred(p, started)) => self.commit_prepared(&p, started),
            };
            let deferred = self.deferred_commit.lock().unwrap().take();
            let mut tip = match &deferred {
                Some((p, _)) => p.tip,
                None => self.committed_tip(),
            };
            let mut committing =
                deferred.map(|(p, started)| Committing::Deferred(Box::new(p), started));
            let mut chained = 0;
            loop {
                let (txg, objsets, changed) = self.quiesce();
                if !changed {
                    // Only after the commit before it: records of that txg must stay
                    // until it is durable.
                    finish(committing.take())?;
                    // Nothing changed, so no record of this txg changes anything: they
                    // are moot, though the ring's tail stays where the durable header
                    // left it.
                    self.intent_log.committed(txg, None);
                    self.txg_done(txg, Ok(()));
                    return Ok(());
                }
                let started = Instant::now();
                let prepared = self.prepare_txg(txg, &objsets, tip);
                // The previous commit first: if it failed, the pool is suspended and
                // this txg must not commit.
                finish(committing.take())?;
                let prepared = match prepared {
                    Ok(p) => p,
                    Err(e) => {
                        self.txg_done(txg, Err(&e));
                        return Err(e);
                    }
                };
                tip = prepared.tip;
                if !pipeline || chained == MAX_CHAINED_TXGS {
                    return self.commit_prepared(&prepared, started);
                }
                chained += 1;
                committing = Some(Committing::Running(
                    scope.spawn(move || self.commit_prepared(&prepared, started)),
                ));
                if !self.wait_for_next_txg(txg) {
                    return finish(committing.take());
                }
            }
        });
        if result.is_ok() {
            // After the waiters are woken: they need not wait for the scan.
            self.evict_clean_objects();
        }
        result
    }

    /// For crash tests on simulated devices, whose syncs never overlap: prepares the
    /// open txg and leaves its commit to the next sync, which prepares its own txg
    /// first and then commits both in order. That is the order the pipelined sync
    /// thread takes when a commit is slow (every block of txg N+1 written before
    /// txg N's first flush), made deterministic, so every crash point of it is tried.
    /// Until that next sync nothing else may change the pool's devices.
    #[doc(hidden)]
    pub fn prepare_ahead_for_crash_tests(&self) -> Result<(), PoolError> {
        let _one_at_a_time = self.sync_lock.lock().unwrap();
        self.check_writable()?;
        assert!(
            self.deferred_commit.lock().unwrap().is_none(),
            "one txg prepared ahead at a time"
        );
        let tip = self.committed_tip();
        let (txg, objsets, changed) = self.quiesce();
        if !changed {
            self.intent_log.committed(txg, None);
            self.txg_done(txg, Ok(()));
            return Ok(());
        }
        let started = Instant::now();
        match self.prepare_txg(txg, &objsets, tip) {
            Ok(p) => {
                *self.deferred_commit.lock().unwrap() = Some((p, started));
                Ok(())
            }
            Err(e) => {
                self.txg_done(txg, Err(&e));
                Err(e)
            }
        }
    }

    /// For crash tests: the next allocations start from the lowest free space of
    /// each device, so space freed and released is reused at once (see
    /// `Allocator::rewind_cursors`).
    #[doc(hidden)]
    pub fn rewind_allocator_for_crash_tests(&self) {
        self.storage.rewind_allocator();
    }

    fn committed_tip(&self) -> Tip {
        let c = *self.committed.lock().unwrap();
        Tip {
            directory: c.directory,
            spacelog_head: c.spacelog_head,
            spacelog_len: c.spacelog_len,
        }
    }

    /// Closes the open txg: its changes become the syncing set and a new txg opens.
    /// Returns the closed txg, the object sets with changes, and whether anything
    /// changed at all.
    fn quiesce(&self) -> (u64, Vec<Arc<Objset>>, bool) {
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
    }

    /// While txg `txg` commits: true once the next txg is due (enough dirty data, or
    /// asked for), false if the commit finished first, the pool is stopping, or it was
    /// suspended.
    fn wait_for_next_txg(&self, txg: u64) -> bool {
        let mut t = self.txg.lock().unwrap();
        loop {
            if t.shutdown || t.synced_txg >= txg || self.suspended.lock().unwrap().is_some() {
                return false;
            }
            if t.dirty_bytes >= self.opts.dirty_sync_bytes || t.requested_txg >= t.open_txg {
                return true;
            }
            t = self
                .txg_cv
                .wait_timeout(t, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }

    /// Records the outcome of txg `txg`: synced (its frees start their deferral), or
    /// the pool suspended. Wakes whoever waits for it.
    fn txg_done(&self, txg: u64, result: Result<(), &PoolError>) {
        let mut t = self.txg.lock().unwrap();
        match result {
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

    /// A txg's first phase: its object sets, destroys, dead lists and snapshot
    /// operations, the directory block and the space log, written on top of `tip`
    /// (the previous txg's, which may still be committing). Nothing here is durable
    /// or reachable from a durable uberblock until `commit_prepared`.
    fn prepare_txg(
        &self,
        txg: u64,
        objsets: &[Arc<Objset>],
        tip: Tip,
    ) -> Result<Prepared, PoolError> {
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
                holds: d.holds.clone(),
            })
            .collect();
        let next_id = *self.next_objset_id.lock().unwrap();
        let dir_bytes = encode_directory(&entries, next_id)?;
        let old = tip;
        let directory = st.write_block(
            &dir_bytes,
            BlockSpec::metadata(BlockType::Directory, 0),
            txg,
            true,
        )?;
        st.free_block(&old.directory, txg);
        let (spacelog_head, spacelog_len) =
            spacelog::write_txg(st, txg, old.spacelog_head, old.spacelog_len)?;
        if !self.opts.release_frees_when_durable {
            st.release_frees_now(txg);
        }
        Ok(Prepared {
            txg,
            tip: Tip {
                directory,
                spacelog_head,
                spacelog_len,
            },
        })
    }

    /// A txg's second phase, once the one before it is durable: a flush makes every
    /// block of the txg durable, then the uberblock goes into every label and a second
    /// flush makes it the pool's state. Records the outcome (`txg_done`).
    fn commit_prepared(&self, p: &Prepared, started: Instant) -> Result<(), PoolError> {
        let r = self.write_uberblocks(p);
        if r.is_ok() {
            self.report(analytics::Meter::TxgSync, started);
        }
        self.txg_done(p.txg, r.as_ref().map(|_| ()));
        r
    }

    fn write_uberblocks(&self, p: &Prepared) -> Result<(), PoolError> {
        let st = &self.storage;
        let txg = p.txg;
        let Tip {
            directory,
            spacelog_head,
            spacelog_len,
        } = p.tip;
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
