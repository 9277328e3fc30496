//! Creating, importing (with intent log replay), exporting and destroying a pool;
//! its labels; the intent log's area and commits.

use super::*;

/// The devices of a pool besides its data vdevs.
pub(super) struct AuxLeaves {
    pub log: Vec<Arc<Leaf>>,
    pub cache: Vec<Arc<Leaf>>,
    pub spares: Vec<Arc<Leaf>>,
}

impl Pool {
    /// Creates a new pool on the given devices and commits its first txg.
    pub fn create(
        name: &str,
        tops: Vec<TopArg>,
        log: Vec<DeviceArg>,
        cache: Vec<DeviceArg>,
        opts: PoolOptions,
    ) -> Result<Arc<Pool>, PoolError> {
        valid_pool_name(name)?;
        if tops.is_empty() {
            return Err(PoolError::InvalidArgument(
                "a pool needs at least one data vdev".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for t in &tops {
            check_top_arg(t)?;
        }
        for d in tops
            .iter()
            .flat_map(|t| t.devices.iter())
            .chain(log.iter())
            .chain(cache.iter())
        {
            if !seen.insert(d.path.clone()) {
                return Err(PoolError::InvalidArgument(format!(
                    "device {} named twice",
                    d.path
                )));
            }
            check_device_free(d)?;
        }
        let guid = new_guid();
        let mk_leaf = |d: &DeviceArg| -> Arc<Leaf> {
            Arc::new(Leaf::new(new_guid(), d.path.clone(), d.device.clone()))
        };
        let mut top_vdevs = Vec::new();
        let mut top_cfgs = Vec::new();
        for (i, t) in tops.iter().enumerate() {
            let leaves: Vec<Arc<Leaf>> = t.devices.iter().map(mk_leaf).collect();
            top_cfgs.push(TopConfig {
                id: i as u32,
                layout: t.layout.name(),
                children: leaves
                    .iter()
                    .map(|l| LeafConfig::new(l.guid(), l.path()))
                    .collect(),
            });
            top_vdevs.push(Arc::new(TopVdev::new(i as u32, t.layout, leaves)));
        }
        let log_leaves: Vec<Arc<Leaf>> = log.iter().map(mk_leaf).collect();
        let cache_leaves: Vec<Arc<Leaf>> = cache.iter().map(mk_leaf).collect();
        let config = PoolConfig {
            version: CONFIG_VERSION,
            name: name.to_string(),
            guid,
            state: PoolState::Active,
            config_txg: 1,
            vdevs: top_cfgs,
            log: log_leaves
                .iter()
                .map(|l| LeafConfig::new(l.guid(), l.path()))
                .collect(),
            cache: cache_leaves
                .iter()
                .map(|l| LeafConfig::new(l.guid(), l.path()))
                .collect(),
            spares: Vec::new(),
            this_guid: 0,
        };
        let capacities: Vec<u64> = top_vdevs.iter().map(|t| t.capacity_bytes()).collect();
        let arc_max = opts.arc_max_bytes.unwrap_or(physical_memory_bytes() / 4);
        let storage = Arc::new(Storage::new(
            top_vdevs,
            Allocator::new(&capacities),
            arc_max,
        ));
        let l2_devices: Vec<Arc<Leaf>> = cache_leaves
            .iter()
            .filter(|l| l.device().is_some())
            .cloned()
            .collect();
        if let Some(l2) = crate::l2arc::L2Arc::start(l2_devices) {
            let _ = storage.l2.set(l2);
        }
        let pool = Arc::new(Pool::assemble(
            name,
            guid,
            config,
            storage,
            AuxLeaves {
                log: log_leaves,
                cache: cache_leaves,
                spares: Vec::new(),
            },
            opts,
        ));
        // Wipe stale uberblocks (a destroyed pool's) before the first label goes down.
        for leaf in pool.all_leaves() {
            if let Some(dev) = leaf.device() {
                label::clear_labels(&*dev)?;
            }
        }
        pool.write_labels()?;
        pool.reserve_log_area();
        pool.intent_log
            .preallocate_rings()
            .map_err(|e| PoolError::Io(format!("preparing the intent log's space on {e}")))?;
        pool.intent_log.start_chain(0);
        pool.directory_dirty.store(true, Ordering::SeqCst);
        pool.sync()?;
        pool.start_sync_thread();
        Ok(pool)
    }

    pub(super) fn assemble(
        name: &str,
        guid: u64,
        config: PoolConfig,
        storage: Arc<Storage>,
        aux: AuxLeaves,
        opts: PoolOptions,
    ) -> Pool {
        let AuxLeaves {
            log: log_leaves,
            cache: cache_leaves,
            spares: spare_leaves,
        } = aux;
        storage
            .deterministic
            .store(opts.deterministic_io, Ordering::Relaxed);
        storage
            .pins_enabled
            .store(opts.pin_reads, Ordering::Relaxed);
        let log_device_ring = device_ring(&log_leaves);
        Pool {
            name: name.to_string(),
            guid,
            config: Mutex::new(config),
            storage,
            log_leaves: RwLock::new(log_leaves),
            cache_leaves: RwLock::new(cache_leaves),
            spare_leaves: Mutex::new(spare_leaves),
            datasets: RwLock::new(BTreeMap::new()),
            next_objset_id: Mutex::new(1),
            pending_destroy: Mutex::new(Vec::new()),
            snap_ops: Mutex::new(Vec::new()),
            sending: Mutex::new(Default::default()),
            directory_dirty: AtomicBool::new(false),
            committed: Mutex::new(Committed {
                txg: 0,
                directory: BlockPointer::HOLE,
                spacelog_head: BlockPointer::HOLE,
                spacelog_len: 0,
                log: LogHeader::default(),
            }),
            txg: Mutex::new(TxgState {
                open_txg: 1,
                synced_txg: 0,
                dirty_bytes: 0,
                requested_txg: 0,
                shutdown: false,
                throttle_wakeups: 0,
            }),
            txg_cv: Condvar::new(),
            gate: RwLock::new(()),
            sync_lock: Mutex::new(()),
            deferred_commit: Mutex::new(None),
            suspended: Mutex::new(None),
            sync_thread: Mutex::new(None),
            scrub_running: AtomicBool::new(false),
            last_scrub: Mutex::new(None),
            intent_log: IntentLog::new(log_device_ring, !opts.deterministic_io),
            log_area: Mutex::new((0, 0)),
            prefetch_tx: std::sync::OnceLock::new(),
            read_ahead_pending: Arc::default(),
            read_ahead_gate: Arc::new(read_ahead_gate::StreamGate::new(
                opts.read_ahead_per_stream_bytes,
            )),
            opts,
            analytics: std::sync::OnceLock::new(),
            repair: RepairProgress::default(),
            topology: Mutex::new(()),
        }
    }

    /// Reports every device I/O of this pool to `analytics` from now on.
    pub fn attach_analytics(&self, analytics: &Arc<analytics::Analytics>) {
        let id = analytics.register_pool(&self.name);
        let _ = self.analytics.set((analytics.clone(), id));
        self.register_devices();
    }

    /// Registers every device with analytics (once attached) under its current path
    /// and role: data, log, cache or spare. Called after every change of the
    /// devices, so a replacement reports under its own path and a spare put to work
    /// as data.
    pub(super) fn register_devices(&self) {
        let Some((a, _)) = self.analytics.get() else {
            return;
        };
        let tops = self.storage.tops();
        let data = tops.iter().flat_map(|t| t.leaves.iter().cloned());
        for leaf in data {
            leaf.attach_analytics(a, &self.name, "data");
        }
        // Copies, so no list's lock is held while registering.
        let log = self.log_leaves.read().unwrap().clone();
        let cache = self.cache_leaves.read().unwrap().clone();
        let spares = self.spare_leaves.lock().unwrap().clone();
        for (role, leaves) in [("log", log), ("cache", cache), ("spare", spares)] {
            for leaf in leaves {
                leaf.attach_analytics(a, &self.name, role);
            }
        }
    }

    /// Reports one intent-log commit or txg sync that took from `started` to now.
    pub(super) fn report(&self, meter: analytics::Meter, started: Instant) {
        if let Some((a, id)) = self.analytics.get() {
            let at = Instant::now();
            a.record(analytics::Event::Meter(analytics::MeterEvent {
                meter,
                subject: *id,
                labels: ["", "", ""],
                value: 1,
                latency_ns: at.saturating_duration_since(started).as_nanos() as u64,
                at,
            }));
        }
    }

    /// Every leaf of the pool: data, log and cache devices.
    pub fn leaves(&self) -> Vec<Arc<Leaf>> {
        self.all_leaves()
    }

    /// Dirty bytes of the open transaction group.
    pub fn dirty_bytes(&self) -> u64 {
        self.txg.lock().unwrap().dirty_bytes
    }

    pub(super) fn all_leaves(&self) -> Vec<Arc<Leaf>> {
        let mut v: Vec<Arc<Leaf>> = self
            .storage
            .tops()
            .iter()
            .flat_map(|t| t.leaves.iter().cloned())
            .collect();
        v.extend(self.log_leaves.read().unwrap().iter().cloned());
        v.extend(self.cache_leaves.read().unwrap().iter().cloned());
        v.extend(self.spare_leaves.lock().unwrap().iter().cloned());
        v
    }

    pub(super) fn write_labels(&self) -> Result<(), PoolError> {
        self.write_labels_first(None)
    }

    /// Writes every usable leaf's labels, `first`'s before any other's. A config that
    /// names a new device must be durable on that device before any other label names
    /// it: a crash in between would otherwise leave labels that name a device import
    /// cannot find, while the device it replaced no longer belongs to the pool.
    /// (`write_config` flushes each device before returning.)
    pub(super) fn write_labels_first(&self, first: Option<&Arc<Leaf>>) -> Result<(), PoolError> {
        let cfg = self.config.lock().unwrap().clone();
        let mut leaves = self.all_leaves();
        if let Some(first) = first {
            leaves.retain(|l| !Arc::ptr_eq(l, first));
            leaves.insert(0, first.clone());
        }
        for leaf in leaves.iter().filter(|l| l.is_usable()) {
            write_leaf_config(leaf, &cfg)?;
        }
        Ok(())
    }

    /// Imports a pool from a set of candidate devices (all devices of a directory, say).
    /// With `name`, picks that pool; without, there must be exactly one.
    pub fn import(
        devices: Vec<DeviceArg>,
        name: Option<&str>,
        opts: PoolOptions,
    ) -> Result<Arc<Pool>, PoolError> {
        // Read every label; remember which device claims which leaf guid.
        let mut configs: HashMap<u64, PoolConfig> = HashMap::new();
        let mut by_leaf: HashMap<u64, DeviceArg> = HashMap::new();
        for d in devices {
            if d.device.size_bytes() < label::MIN_DEVICE_BYTES {
                continue;
            }
            let Ok(Some(bytes)) = label::read_any_config(&*d.device) else {
                continue;
            };
            let Some(cfg) = PoolConfig::from_bytes(&bytes) else {
                continue;
            };
            if cfg.state == PoolState::Destroyed {
                continue;
            }
            by_leaf.insert(cfg.this_guid, d);
            let keep = configs
                .get(&cfg.guid)
                .is_none_or(|c| c.config_txg < cfg.config_txg);
            if keep {
                configs.insert(cfg.guid, cfg);
            }
        }
        let mut matching: Vec<PoolConfig> = configs
            .into_values()
            .filter(|c| name.is_none_or(|n| n == c.name))
            .collect();
        let config = match matching.len() {
            0 => {
                return Err(PoolError::NotFound(match name {
                    Some(n) => format!("no pool named '{n}' on the given devices"),
                    None => "no pool found on the given devices".into(),
                }))
            }
            1 => matching.pop().unwrap(),
            _ => {
                let names: Vec<String> = matching.iter().map(|c| c.name.clone()).collect();
                return Err(PoolError::InvalidArgument(format!(
                    "several pools found ({}); name the one to import",
                    names.join(", ")
                )));
            }
        };
        let leaf_of = |lc: &LeafConfig, data_len: u64| -> Arc<Leaf> {
            match by_leaf.get(&lc.guid) {
                Some(d) => {
                    let leaf = Leaf::new(lc.guid, d.path.clone(), d.device.clone());
                    // It missed writes: what it holds may be stale, even where its
                    // checksums would pass (a block rewritten in place by a repair).
                    if lc.faulted {
                        leaf.set_health(Health::Faulted);
                    } else if lc.offline {
                        leaf.set_health(Health::Offline);
                    }
                    Arc::new(leaf)
                }
                None => Arc::new(Leaf::missing(lc.guid, lc.path.clone(), data_len)),
            }
        };
        let mut tops = Vec::new();
        for t in &config.vdevs {
            let layout = layout_from_name(&t.layout)
                .ok_or_else(|| PoolError::Corrupt(format!("unknown vdev layout '{}'", t.layout)))?;
            let present_len = t
                .children
                .iter()
                .filter_map(|c| by_leaf.get(&c.guid))
                .map(|d| label::data_area(d.device.size_bytes()).1)
                .min()
                .unwrap_or(0);
            let leaves: Vec<Arc<Leaf>> =
                t.children.iter().map(|c| leaf_of(c, present_len)).collect();
            let top = TopVdev::new(t.id, layout, leaves);
            if top.health() == Health::Faulted {
                let missing: Vec<String> = top
                    .leaves
                    .iter()
                    .filter(|l| !l.is_usable())
                    .map(|l| match l.device() {
                        None => format!("{}: missing", l.path()),
                        Some(_) => format!("{}: faulted, it missed writes", l.path()),
                    })
                    .collect();
                return Err(PoolError::Io(format!(
                    "cannot import '{}': {} vdev {} is missing too many devices ({})",
                    config.name,
                    t.layout,
                    t.id,
                    missing.join(", ")
                )));
            }
            tops.push(Arc::new(top));
        }
        let log_leaves: Vec<Arc<Leaf>> = config.log.iter().map(|l| leaf_of(l, 0)).collect();
        let cache_leaves: Vec<Arc<Leaf>> = config.cache.iter().map(|l| leaf_of(l, 0)).collect();
        let spare_leaves: Vec<Arc<Leaf>> = config.spares.iter().map(|l| leaf_of(l, 0)).collect();

        let mut slots = Vec::new();
        for t in &tops {
            for l in &t.leaves {
                if let Some(dev) = l.device() {
                    slots.extend(label::read_uberblock_slots(&*dev));
                }
            }
        }
        let candidates = uberblock::candidates(&slots, config.guid);
        if candidates.is_empty() {
            return Err(PoolError::Corrupt(format!(
                "pool '{}' has no valid uberblock",
                config.name
            )));
        }
        let capacities: Vec<u64> = tops.iter().map(|t| t.capacity_bytes()).collect();
        let arc_max = opts.arc_max_bytes.unwrap_or(physical_memory_bytes() / 4);
        let mut last_err = None;
        for ub in candidates {
            let storage = Arc::new(Storage::new(
                tops.clone(),
                Allocator::new(&capacities),
                arc_max,
            ));
            let mut cfg = config.clone();
            cfg.state = PoolState::Active;
            cfg.config_txg += 1;
            let pool = Pool::assemble(
                &config.name,
                config.guid,
                cfg,
                storage,
                AuxLeaves {
                    log: log_leaves.clone(),
                    cache: cache_leaves.clone(),
                    spares: spare_leaves.clone(),
                },
                opts.clone(),
            );
            match pool.load(&ub) {
                Ok(()) => {
                    let l2_devices: Vec<Arc<Leaf>> = pool
                        .cache_leaves
                        .read()
                        .unwrap()
                        .iter()
                        .filter(|l| l.is_usable() && l.device().is_some())
                        .cloned()
                        .collect();
                    if let Some(l2) = crate::l2arc::L2Arc::start(l2_devices) {
                        let _ = pool.storage.l2.set(l2);
                    }
                    let pool = Arc::new(pool);
                    pool.write_labels()?;
                    pool.replay_intent_log(&ub.log)?;
                    pool.start_sync_thread();
                    return Ok(pool);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap())
    }

    /// Loads the state named by one uberblock; fails if anything does not verify.
    pub(super) fn load(&self, ub: &Uberblock) -> Result<(), PoolError> {
        let st = &self.storage;
        st.set_committed_txg(ub.txg);
        let mut datasets = BTreeMap::new();
        let mut next_id = 1;
        if !ub.directory.is_hole() {
            let block = st.read_block(&ub.directory)?;
            let (entries, next, sizes_stored) = decode_directory(block.bytes())?;
            next_id = next;
            for mut r in entries {
                if !sizes_stored {
                    r.deadlist.bytes = deadlist::count_bytes(st, r.deadlist)?;
                }
                let objset = Arc::new(Objset::open(st, r.id, r.root)?);
                if r.snapshot_of.is_none() {
                    objset.set_keep_upto(r.snap_txg);
                }
                datasets.insert(
                    r.id,
                    DatasetEntry {
                        name: r.name,
                        props: r.props,
                        objset,
                        snapshot_of: r.snapshot_of,
                        snap_txg: r.snap_txg,
                        deadlist: r.deadlist,
                        // Written before version 4: derived, so stable from now on.
                        guid: match (r.guid, r.snapshot_of) {
                            (0, Some(_)) => {
                                super::snapshots::snapshot_guid(self.guid, r.id, r.snap_txg)
                            }
                            (g, _) => g,
                        },
                        holds: r.holds,
                    },
                );
            }
        }
        {
            let mut alloc = st.alloc.lock().unwrap();
            spacelog::replay(st, ub.spacelog_head, &mut alloc)?;
            // The directory and object set trees must be allocated space.
        }
        *self.datasets.write().unwrap() = datasets;
        *self.next_objset_id.lock().unwrap() = next_id;
        *self.log_area.lock().unwrap() = (ub.log.area_offset, ub.log.area_len);
        self.intent_log.set_pool_ring(pool_ring(
            &self.storage.tops()[0],
            ub.log.area_offset,
            ub.log.area_len,
        ));
        *self.committed.lock().unwrap() = Committed {
            txg: ub.txg,
            directory: ub.directory,
            spacelog_head: ub.spacelog_head,
            spacelog_len: ub.spacelog_len,
            log: ub.log,
        };
        let mut t = self.txg.lock().unwrap();
        t.open_txg = ub.txg + 1;
        t.synced_txg = ub.txg;
        drop(t);
        // A full structural check would be costly for large pools; verify the allocator
        // agrees with the directory's own blocks at least.
        let dir = ub.directory;
        let alloc = st.alloc.lock().unwrap();
        for d in dir.copies() {
            if alloc
                .vdevs
                .get(d.vdev as usize)
                .is_none_or(|v| v.overlaps_free(d.offset, d.asize()))
            {
                return Err(PoolError::Corrupt(
                    "directory block lies in free space".into(),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn start_sync_thread(self: &Arc<Self>) {
        if !self.opts.sync_thread {
            return;
        }
        let weak = Arc::downgrade(self);
        let interval = self.opts.txg_interval;
        let handle = std::thread::Builder::new()
            .name(format!("txg-sync-{}", self.name))
            .spawn(move || loop {
                let Some(pool) = weak.upgrade() else { return };
                let mut t = pool.txg.lock().unwrap();
                let deadline = Instant::now() + interval;
                loop {
                    if t.shutdown {
                        return;
                    }
                    if t.dirty_bytes >= pool.opts.dirty_sync_bytes || t.requested_txg >= t.open_txg
                    {
                        break;
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    let (g, _) = pool
                        .txg_cv
                        .wait_timeout(t, (deadline - now).min(Duration::from_millis(500)))
                        .unwrap();
                    t = g;
                }
                drop(t);
                if pool.is_suspended() {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                let _ = pool.sync_txgs(true);
            })
            .expect("spawn sync thread");
        *self.sync_thread.lock().unwrap() = Some(handle);
    }

    pub fn is_suspended(&self) -> bool {
        self.suspended.lock().unwrap().is_some()
    }

    pub(super) fn check_writable(&self) -> Result<(), PoolError> {
        if let Some(reason) = self.suspended.lock().unwrap().clone() {
            return Err(PoolError::Suspended(reason));
        }
        Ok(())
    }

    /// Bytes the pool keeps back so syncs and frees always have room.
    pub fn slop_bytes(&self) -> u64 {
        let cap = self.storage.alloc.lock().unwrap().capacity();
        (cap / 32).max(32 << 20).min(cap / 2)
    }

    /// Logical bytes the pool can hold in all and can still take now, after slop,
    /// dirty data not yet allocated, and worst-case parity and rounding: what a
    /// filesystem reports to `statfs`.
    pub fn usable_space(&self) -> (u64, u64) {
        let (cap, free) = {
            let a = self.storage.alloc.lock().unwrap();
            (a.capacity(), a.free_bytes())
        };
        let dirty = self.txg.lock().unwrap().dirty_bytes;
        let inflation = self.inflation();
        let slop = self.slop_bytes();
        let total = (cap.saturating_sub(slop) as f64 / inflation) as u64;
        let avail = (free.saturating_sub(slop) as f64 / inflation) as u64;
        (total, avail.saturating_sub(dirty))
    }

    /// Worst-case allocated bytes per logical byte (parity, rounding, metadata).
    pub(super) fn inflation(&self) -> f64 {
        let worst = self
            .storage
            .tops()
            .iter()
            .map(|t| t.asize(128 * 1024) as f64 / (128.0 * 1024.0))
            .fold(1.0, f64::max);
        worst * 1.05
    }

    /// Admission for a change of about `bytes`: suspension, space, write throttle.
    pub(super) fn admit(&self, bytes: u64) -> Result<(), PoolError> {
        self.check_writable()?;
        // 10 ms each: readers pin for one read, a second is many of them.
        const READER_WAIT_ROUNDS: u32 = 100;
        let mut waited_for_space = false;
        let mut waited_for_readers = 0;
        loop {
            let dirty = self.txg.lock().unwrap().dirty_bytes;
            let (used, cap) = {
                let a = self.storage.alloc.lock().unwrap();
                (a.capacity() - a.free_bytes(), a.capacity())
            };
            let need = ((dirty + bytes) as f64 * self.inflation()) as u64;
            // A change that only frees (bytes == 0) may use the slop: deleting must work
            // on a full pool, which is what the slop is kept for.
            if bytes == 0 || used + need + self.slop_bytes() <= cap {
                break;
            }
            if waited_for_space {
                // Frees past their deferral that a running reader still holds back
                // (`Storage::pin_reads`) return when it ends: a short wait for them,
                // not an ENOSPC a moment after a delete.
                if waited_for_readers < READER_WAIT_ROUNDS
                    && self.storage.alloc.lock().unwrap().deferred_bytes() > 0
                {
                    waited_for_readers += 1;
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                return Err(PoolError::NoSpace);
            }
            // Pending frees may make room once they pass their deferral.
            waited_for_space = true;
            for _ in 0..=crate::alloc::DEFER_TXGS {
                self.sync()?;
            }
        }
        let mut t = self.txg.lock().unwrap();
        while t.dirty_bytes >= self.opts.dirty_max_bytes && !t.shutdown {
            // Only the first writer to wait asks for the sync: a notify from every
            // woken writer woke all the others, which notified again, and writers
            // blocked at the limit spun through the whole sync (8 streams on slow
            // disks: 6.5 CPU seconds for 2 GiB, against 2.5 without the limit).
            if t.requested_txg < t.open_txg {
                t.requested_txg = t.open_txg;
                self.txg_cv.notify_all();
            }
            if !self.opts.sync_thread {
                drop(t);
                self.sync_once()?;
                t = self.txg.lock().unwrap();
                continue;
            }
            t = self
                .txg_cv
                .wait_timeout(t, Duration::from_millis(100))
                .unwrap()
                .0;
            t.throttle_wakeups += 1;
            if let Some(r) = self.suspended.lock().unwrap().clone() {
                return Err(PoolError::Suspended(r));
            }
        }
        Ok(())
    }

    /// How many times writers held at the dirty-data limit have woken up since import:
    /// a few per txg they wait through, not one per write of every other writer.
    pub fn throttle_wakeups(&self) -> u64 {
        self.txg.lock().unwrap().throttle_wakeups
    }

    /// Counts `bytes` newly dirtied in `objset`: towards the txg's dirty data (the
    /// write throttle) and the object set's space charge (quotas).
    pub(super) fn account_dirty(&self, objset: &Objset, bytes: u64) {
        objset.charge(bytes);
        self.account_dirty_bytes(bytes);
    }

    pub(super) fn account_dirty_bytes(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut t = self.txg.lock().unwrap();
        let below = t.dirty_bytes < self.opts.dirty_sync_bytes;
        t.dirty_bytes += bytes;
        // Once, as the threshold is crossed: the sync thread checks it whenever it is
        // free again, and every write past it waking every waiter cost CPU for nothing.
        if below && t.dirty_bytes >= self.opts.dirty_sync_bytes {
            self.txg_cv.notify_all();
        }
    }

    /// Stops the sync thread after committing everything; labels say "exported".
    pub fn export(&self) -> Result<(), PoolError> {
        let synced = self.sync();
        self.stop_sync_thread();
        synced?;
        self.config.lock().unwrap().state = PoolState::Exported;
        self.config.lock().unwrap().config_txg += 1;
        self.write_labels()
    }

    /// Destroys the pool: its labels are wiped so the devices can be reused.
    pub fn destroy(&self) -> Result<(), PoolError> {
        self.stop_sync_thread();
        for leaf in self.all_leaves() {
            if let Some(dev) = leaf.device() {
                let _ = label::clear_labels(&*dev);
            }
        }
        Ok(())
    }

    // ---- intent log ----

    /// Makes every change made so far durable through the intent log, without waiting
    /// for a txg (fsync, O_SYNC writes, `sync=always`). Concurrent callers share one
    /// log write.
    pub fn log_commit(&self) -> Result<(), PoolError> {
        self.check_writable()?;
        let started = Instant::now();
        let r = self.intent_log.commit(self);
        if r.is_ok() {
            self.report(analytics::Meter::LogCommit, started);
        }
        r
    }

    pub fn intent_log_stats(&self) -> IntentLogStats {
        self.intent_log.stats()
    }

    /// Reserves the pool's log area on top-level vdev 0 (at creation, or on import of a
    /// pool that has none): 1/32 of each child, at most `AREA_MAX_BYTES_PER_CHILD`.
    /// Committed by the next txg like any allocation.
    pub(super) fn reserve_log_area(&self) {
        let top = &self.storage.tops()[0];
        let sector = vdev::SECTOR_SIZE as u64;
        // Bytes of each child's data area the layout uses.
        let child = match top.layout {
            Layout::RaidZ { .. } => top.capacity_bytes() / top.leaves.len() as u64,
            _ => top.capacity_bytes(),
        };
        let ring = (child / 32).min(crate::intent_log::AREA_MAX_BYTES_PER_CHILD) / sector * sector;
        if ring < crate::intent_log::RING_MIN_BYTES {
            return;
        }
        let len = match top.layout {
            Layout::RaidZ { nparity } => {
                let ncols = top.leaves.len() as u64;
                // Room to align the start to a whole row, rounded like any RAID-Z
                // allocation so the gaps around it stay usable.
                let raw = ring * ncols + (ncols - 1) * sector;
                raw.div_ceil((nparity as u64 + 1) * sector) * (nparity as u64 + 1) * sector
            }
            _ => ring,
        };
        let Some(extent) = self.storage.alloc.lock().unwrap().allocate_on(0, len) else {
            return;
        };
        *self.log_area.lock().unwrap() = (extent.offset, extent.len);
        self.intent_log
            .set_pool_ring(pool_ring(top, extent.offset, extent.len));
    }

    /// Replays the chain named by the imported uberblock in one txg of its own, whose
    /// commit also starts a fresh chain. With nothing to replay the chain carries on
    /// and no txg is needed (unless the log must move to another ring).
    pub(super) fn replay_intent_log(&self, header: &LogHeader) -> Result<(), PoolError> {
        // Rings of pools made before rings were preallocated, or sparse again after a
        // device was replaced. Nothing writes them before this function returns. Only an
        // optimization (see `Device::preallocate`), so an error is left to the log's own
        // writes to report, where it belongs.
        let _ = self.intent_log.preallocate_rings();
        let committed_txg = self.synced_txg();
        let ring = self.intent_log.ring(header.kind);
        let mut read = match &ring {
            Some(ring) => crate::intent_log::read_chain(ring, header),
            None => Default::default(),
        };
        let records: Vec<LogOp> = std::mem::take(&mut read.records)
            .into_iter()
            .filter(|(txg, _)| *txg > committed_txg)
            .map(|(_, op)| op)
            .collect();
        let replayed = records.len() as u64;
        let same_ring = ring.is_some() && self.intent_log.preferred_kind() == header.kind;
        // After an interrupted commit the chain starts over: carrying on would let the
        // next commit's end seem to complete the interrupted one.
        if replayed == 0 && same_ring && !read.incomplete_tail {
            self.intent_log.continue_chain(header, &read);
            return Ok(());
        }
        let mut failures = 0u64;
        self.intent_log.set_replaying(true);
        for op in records {
            let r = match op {
                LogOp::DestroyObjset { id } => self.destroy_objset(id),
                op => self.begin_admitted().replay(op),
            };
            if r.is_err() {
                failures += 1;
            }
        }
        self.intent_log.set_replaying(false);
        self.intent_log.note_replay(replayed, failures);
        if self.log_area.lock().unwrap().1 == 0 {
            self.reserve_log_area();
            // The area just reserved (see the top of this function).
            let _ = self.intent_log.preallocate_rings();
        }
        // The new chain starts after the old one, which stays readable until the
        // commit below names the new one.
        self.intent_log
            .start_chain(if same_ring { read.end } else { 0 });
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync().map(|_| ())
    }
}

/// Writes `cfg` into a usable leaf's labels, naming the leaf as the device it is on.
/// A data vdev's device count fits its layout.
pub(super) fn check_top_arg(t: &TopArg) -> Result<(), PoolError> {
    match t.layout {
        Layout::Disk if t.devices.len() != 1 => Err(PoolError::InvalidArgument(
            "a plain disk vdev has exactly one device".into(),
        )),
        Layout::Mirror if t.devices.len() < 2 => Err(PoolError::InvalidArgument(
            "a mirror needs at least 2 devices".into(),
        )),
        Layout::RaidZ { nparity } if t.devices.len() < nparity + 2 || t.devices.len() > 255 => {
            Err(PoolError::InvalidArgument(format!(
                "raidz{nparity} needs at least {} devices",
                nparity + 2
            )))
        }
        _ => Ok(()),
    }
}

pub(super) fn write_leaf_config(leaf: &Leaf, cfg: &PoolConfig) -> Result<(), PoolError> {
    let mut c = cfg.clone();
    c.this_guid = leaf.guid();
    let device = leaf.device().expect("a usable leaf has its device");
    Ok(label::write_config(&*device, &c.to_bytes())?)
}
