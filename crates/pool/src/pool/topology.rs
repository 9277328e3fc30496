//! Changing the devices of an imported pool while it serves: a top-level vdev added
//! (the pool grows), a side attached to a plain disk or mirror (resilvered from the
//! others) or detached, a log or cache device added or removed, a data device taken
//! offline and brought back online. One change at a time (`Pool::topology`), never
//! during a resilver.
//!
//! Crash safety, change by change (labels: `vdev::label`; import follows the config
//! with the highest `config_txg` among the labels it finds):
//! - *Add a vdev*: the new devices' labels first, then the others', all before any
//!   block can be allocated there (the vdev joins the allocator after the labels,
//!   under the sync lock). A crash in between leaves either the old config (the new
//!   devices are free) or the new one with an empty vdev, which the space log agrees
//!   with: it names no block there.
//! - *Attach*: the new side takes writes (RESILVERING) from a point where no sync runs,
//!   is filled with every block written before, and only then joins the config, its
//!   own label first. Until then every label names the old children, so a crash leaves
//!   the vdev as it was.
//! - *Detach*, *remove a cache device*: the config without the device is written to
//!   every other device before its labels are wiped; a crash in between leaves a
//!   device whose stale label names a config the others have moved past.
//! - *Log devices*: the intent log's chain is first moved to the pool's own ring by
//!   a txg whose uberblock names the new chain (`IntentLog::switch_rings`); only then
//!   does the config change, and a new chain on the new set of log devices starts
//!   with another txg. The durable header therefore never names a chain on a set of
//!   log devices other than the one the config names (the ring's length and replicas
//!   follow from that set), and every record acknowledged before a move is in the txg
//!   that made it.
//! - *Offline*: the config saying the device is offline (so import will not trust
//!   what it holds) is on every label before the device stops taking writes; *online*
//!   resilvers it like a replacement and clears the mark only when it is whole.

use super::lifecycle::{check_top_arg, write_leaf_config};
use super::*;

impl Pool {
    /// One device change at a time; a second one is refused, not queued.
    pub(super) fn topology_change(&self) -> Result<std::sync::MutexGuard<'_, ()>, PoolError> {
        self.topology.try_lock().map_err(|_| {
            PoolError::Busy(format!(
                "another device operation (a resilver, replace, attach or detach) is running on pool '{}'",
                self.name
            ))
        })
    }

    /// A device that may join the pool: free (`check_device_free`) and not one of its
    /// devices already.
    pub(super) fn check_new_device(&self, d: &DeviceArg) -> Result<(), PoolError> {
        if self.all_leaves().iter().any(|l| l.path() == d.path) {
            return Err(PoolError::Exists(format!(
                "{} is a device of pool '{}' already",
                d.path, self.name
            )));
        }
        check_device_free(d)
    }

    /// A leaf for `d`, a device free to join the pool (`check_new_device`), its old
    /// labels wiped.
    pub(super) fn new_leaf(&self, d: &DeviceArg) -> Result<Arc<Leaf>, PoolError> {
        self.check_new_device(d)?;
        label::clear_labels(&*d.device)?;
        Ok(Arc::new(Leaf::new(
            new_guid(),
            d.path.clone(),
            d.device.clone(),
        )))
    }

    /// Puts a new log, cache or spare device into its list of the config (`list`) and
    /// into the pool (`join`), its own label written before any other label names it:
    /// if that first label cannot be written, nothing has changed. Under the sync lock,
    /// as a sync recording a fault writes labels too.
    pub(super) fn join_aux(
        &self,
        leaf: &Arc<Leaf>,
        list: fn(&mut PoolConfig) -> &mut Vec<LeafConfig>,
        join: impl FnOnce(),
    ) -> Result<(), PoolError> {
        let _hold = self.sync_lock.lock().unwrap();
        let cfg = {
            let mut cfg = self.config.lock().unwrap();
            list(&mut cfg).push(LeafConfig::new(leaf.guid(), leaf.path()));
            cfg.config_txg += 1;
            cfg.clone()
        };
        if let Err(e) = write_leaf_config(leaf, &cfg) {
            let mut cfg = self.config.lock().unwrap();
            list(&mut cfg).pop();
            cfg.config_txg += 1;
            return Err(e);
        }
        join();
        self.register_devices();
        self.write_labels()
    }

    /// Takes a log, cache or spare device out of its list of the config (`list`) and
    /// out of the pool (`leave`), and writes the config to every other device; the
    /// caller wipes the device's labels afterwards.
    pub(super) fn leave_aux(
        &self,
        leaf: &Arc<Leaf>,
        list: fn(&mut PoolConfig) -> &mut Vec<LeafConfig>,
        leave: impl FnOnce(),
    ) -> Result<(), PoolError> {
        let _hold = self.sync_lock.lock().unwrap();
        {
            let mut cfg = self.config.lock().unwrap();
            list(&mut cfg).retain(|l| l.guid != leaf.guid());
            cfg.config_txg += 1;
        }
        leave();
        self.write_labels()
    }

    /// Removes a log, cache or spare device (its path or guid). Data devices are
    /// refused: a data vdev cannot leave the pool (a mirror side is detached instead).
    pub fn remove_device(&self, name: &str) -> Result<(), PoolError> {
        let named = |leaves: &[Arc<Leaf>]| find_named(leaves, name).is_some();
        if named(&self.log_leaves.read().unwrap()) {
            self.remove_log(name)
        } else if named(&self.cache_leaves.read().unwrap()) {
            self.remove_cache(name)
        } else if named(&self.spare_leaves.lock().unwrap()) {
            self.remove_spare(name)
        } else if self.find_data_leaf(name).is_ok() {
            Err(PoolError::InvalidArgument(format!(
                "{name} is a data device: data vdevs cannot be removed (detach a mirror side instead)"
            )))
        } else {
            Err(PoolError::NotFound(format!(
                "no device '{name}' in pool '{}'",
                self.name
            )))
        }
    }

    /// Grows the pool by one top-level vdev; new blocks spread over it at once.
    pub fn add_vdev(&self, top: TopArg) -> Result<(), PoolError> {
        self.check_writable()?;
        check_top_arg(&top)?;
        let _one = self.topology_change()?;
        let mut seen = std::collections::HashSet::new();
        for d in &top.devices {
            if !seen.insert(d.path.clone()) {
                return Err(PoolError::InvalidArgument(format!(
                    "device {} named twice",
                    d.path
                )));
            }
            self.check_new_device(d)?;
        }
        let leaves: Vec<Arc<Leaf>> = top
            .devices
            .iter()
            .map(|d| Arc::new(Leaf::new(new_guid(), d.path.clone(), d.device.clone())))
            .collect();
        for d in &top.devices {
            label::clear_labels(&*d.device)?;
        }
        let _hold = self.sync_lock.lock().unwrap();
        let mut tops: Vec<Arc<TopVdev>> = self.storage.tops().iter().cloned().collect();
        let id = tops.len() as u32;
        let vdev = Arc::new(TopVdev::new(id, top.layout, leaves.clone()));
        let cfg = {
            let mut cfg = self.config.lock().unwrap();
            cfg.vdevs.push(TopConfig {
                id,
                layout: top.layout.name(),
                children: leaves
                    .iter()
                    .map(|l| LeafConfig::new(l.guid(), l.path()))
                    .collect(),
            });
            cfg.config_txg += 1;
            cfg.clone()
        };
        // The new devices' labels before any other names them.
        for leaf in &leaves {
            if let Err(e) = write_leaf_config(leaf, &cfg) {
                let mut c = self.config.lock().unwrap();
                c.vdevs.pop();
                c.config_txg += 1;
                return Err(e);
            }
        }
        tops.push(vdev.clone());
        {
            // The vdev before its space: an allocation there finds it installed.
            let mut alloc = self.storage.alloc.lock().unwrap();
            self.storage.set_tops(tops);
            alloc.add_vdev(vdev.capacity_bytes());
        }
        self.register_devices();
        self.write_labels()
    }

    /// Attaches `new` to the vdev holding `existing` (a plain disk becomes a mirror, a
    /// mirror gains a side) and resilvers it from the vdev's other sides.
    pub fn attach(
        &self,
        existing: &str,
        new: DeviceArg,
        progress: &dyn Fn(ScrubProgress),
    ) -> Result<ResilverSummary, PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        self.check_new_device(&new)?;
        let (top_index, _) = self.find_data_leaf(existing)?;
        let top = self.storage.tops()[top_index].clone();
        if !matches!(top.layout, Layout::Disk | Layout::Mirror) {
            return Err(PoolError::InvalidArgument(format!(
                "{existing} is in a {} vdev: a side can be attached only to a plain disk or a mirror",
                top.layout.name()
            )));
        }
        if !top.leaves.iter().any(|l| l.health() == Health::Online) {
            return Err(PoolError::InvalidArgument(format!(
                "vdev {top_index} has no whole device to copy from"
            )));
        }
        let (_, new_len) = label::data_area(new.device.size_bytes());
        if new_len < top.child_bytes() {
            return Err(PoolError::InvalidArgument(format!(
                "device {} is too small: its data area is {new_len} bytes, the vdev needs {}",
                new.path,
                top.child_bytes()
            )));
        }
        label::clear_labels(&*new.device)?;
        let leaf = Arc::new(Leaf::new(new_guid(), new.path.clone(), new.device.clone()));
        leaf.set_health(Health::Resilvering);
        if let Some((a, _)) = self.analytics.get() {
            // Before it is part of the vdev, so the resilver's writes are counted.
            leaf.attach_analytics(a, &self.name, "data");
        }
        let mut leaves = top.leaves.clone();
        leaves.push(leaf.clone());
        let attached = Arc::new(top.with_leaves(Layout::Mirror, leaves));
        let leaf_index = attached.leaves.len() - 1;
        let started = Instant::now();
        let result = self.resilver(top_index, leaf_index, started, progress, || {
            self.replace_top(attached.clone());
        });
        let summary = match result {
            Ok(s) => s,
            Err(e) => {
                // The side never joined the config: take it out of the vdev again.
                let _hold = self.sync_lock.lock().unwrap();
                self.replace_top(Arc::new(top.with_leaves(top.layout, top.leaves.clone())));
                return Err(e);
            }
        };
        {
            let _hold = self.sync_lock.lock().unwrap();
            {
                let mut cfg = self.config.lock().unwrap();
                let t = &mut cfg.vdevs[top_index];
                t.layout = Layout::Mirror.name();
                t.children.push(LeafConfig::new(leaf.guid(), leaf.path()));
                cfg.config_txg += 1;
            }
            self.write_labels_first(Some(&leaf))?;
        }
        if top_index == 0 {
            self.refresh_pool_ring()?;
        }
        // Commit a txg so the new side carries a current uberblock in its labels.
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync()?;
        Ok(ResilverSummary {
            seconds: started.elapsed().as_secs_f64(),
            ..summary
        })
    }

    /// Detaches one side of a mirror (the last two sides leave a plain disk). Some
    /// other side must be whole.
    pub fn detach(&self, device: &str) -> Result<(), PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let (top_index, leaf_index) = self.find_data_leaf(device)?;
        let top = self.storage.tops()[top_index].clone();
        if top.layout != Layout::Mirror {
            return Err(PoolError::InvalidArgument(format!(
                "{device} is in a {} vdev: only a side of a mirror can be detached",
                top.layout.name()
            )));
        }
        let others_whole = top
            .leaves
            .iter()
            .enumerate()
            .any(|(i, l)| i != leaf_index && l.health() == Health::Online);
        if !others_whole {
            return Err(PoolError::InvalidArgument(format!(
                "{device} is the only whole side of vdev {top_index}: detaching it would lose data"
            )));
        }
        let leaf = top.leaves[leaf_index].clone();
        let mut leaves = top.leaves.clone();
        leaves.remove(leaf_index);
        let layout = if leaves.len() == 1 {
            Layout::Disk
        } else {
            Layout::Mirror
        };
        let detached = Arc::new(top.with_leaves(layout, leaves));
        if top_index == 0 {
            // The log's ring leaves the side first (each of its blocks is whole on
            // every other side).
            self.set_pool_ring(&detached)?;
        }
        {
            let _hold = self.sync_lock.lock().unwrap();
            {
                let mut cfg = self.config.lock().unwrap();
                let t = &mut cfg.vdevs[top_index];
                t.layout = layout.name();
                t.children.remove(leaf_index);
                cfg.config_txg += 1;
            }
            self.replace_top(detached);
            self.write_labels()?;
        }
        if let Some(dev) = leaf.device() {
            let _ = label::clear_labels(&*dev);
        }
        Ok(())
    }

    /// Takes a data device out of service: it is neither read nor written until
    /// `online`. The vdev must stay readable without it.
    pub fn offline(&self, device: &str) -> Result<(), PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let (top_index, leaf_index) = self.find_data_leaf(device)?;
        let top = self.storage.tops()[top_index].clone();
        let leaf = top.leaves[leaf_index].clone();
        if leaf.health() == Health::Offline {
            return Err(PoolError::InvalidArgument(format!(
                "{device} is offline already"
            )));
        }
        let down = top.leaves.iter().filter(|l| !l.is_usable()).count();
        let down_after = down + usize::from(leaf.is_usable());
        if down_after > top.layout.tolerance(top.leaves.len()) {
            return Err(PoolError::InvalidArgument(format!(
                "taking {device} offline would leave {} vdev {top_index} without enough devices to read every block",
                top.layout.name()
            )));
        }
        let _hold = self.sync_lock.lock().unwrap();
        {
            let mut cfg = self.config.lock().unwrap();
            cfg.vdevs[top_index].children[leaf_index].offline = true;
            cfg.config_txg += 1;
        }
        self.write_labels()?;
        leaf.set_health(Health::Offline);
        Ok(())
    }

    /// Brings an offline device back: resilvered from the rest of its vdev (it missed
    /// every write meanwhile), then read again.
    pub fn online(
        &self,
        device: &str,
        progress: &dyn Fn(ScrubProgress),
    ) -> Result<ResilverSummary, PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let (top_index, leaf_index) = self.find_data_leaf(device)?;
        let leaf = self.storage.tops()[top_index].leaves[leaf_index].clone();
        if leaf.health() != Health::Offline {
            return Err(PoolError::InvalidArgument(format!(
                "{device} is {}, not OFFLINE (a FAULTED device is brought back with clear)",
                leaf.health().name()
            )));
        }
        if leaf.device().is_none() {
            return Err(PoolError::InvalidArgument(format!(
                "{device} is missing: replace it"
            )));
        }
        self.resilver_in_place(top_index, leaf_index, progress)
    }

    /// Adds a log device: synchronous writes are logged there from now on.
    pub fn add_log(&self, d: DeviceArg) -> Result<(), PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let leaf = self.new_leaf(&d)?;
        self.move_chain_off_log_devices()?;
        let joined = self.join_aux(
            &leaf,
            |c| &mut c.log,
            || self.log_leaves.write().unwrap().push(leaf.clone()),
        );
        // The chain goes back onto the log devices whether this one joined or not.
        self.start_chain_on_log_devices()?;
        joined
    }

    /// Removes log device `name` (its path or guid); the log moves to the other log
    /// devices, or to the pool's own log area.
    pub fn remove_log(&self, name: &str) -> Result<(), PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let leaf = find_named(&self.log_leaves.read().unwrap(), name).ok_or_else(|| {
            PoolError::NotFound(format!("no log device '{name}' in pool '{}'", self.name))
        })?;
        self.move_chain_off_log_devices()?;
        self.leave_aux(
            &leaf,
            |c| &mut c.log,
            || {
                self.log_leaves
                    .write()
                    .unwrap()
                    .retain(|l| !Arc::ptr_eq(l, &leaf))
            },
        )?;
        if let Some(dev) = leaf.device() {
            let _ = label::clear_labels(&*dev);
        }
        self.start_chain_on_log_devices()
    }

    /// Adds a cache device (an L2ARC device); it fills as blocks leave the ARC.
    pub fn add_cache(&self, d: DeviceArg) -> Result<(), PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let leaf = self.new_leaf(&d)?;
        self.join_aux(
            &leaf,
            |c| &mut c.cache,
            || self.cache_leaves.write().unwrap().push(leaf.clone()),
        )?;
        match self.storage.l2.get() {
            Some(l2) => l2.add_device(leaf.clone()),
            None => {
                if let Some(l2) = crate::l2arc::L2Arc::start(vec![leaf.clone()]) {
                    let _ = self.storage.l2.set(l2);
                }
            }
        }
        Ok(())
    }

    /// Removes cache device `name` (its path or guid). Nothing is lost: the cache
    /// only ever held copies.
    pub fn remove_cache(&self, name: &str) -> Result<(), PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let leaf = find_named(&self.cache_leaves.read().unwrap(), name).ok_or_else(|| {
            PoolError::NotFound(format!("no cache device '{name}' in pool '{}'", self.name))
        })?;
        self.leave_aux(
            &leaf,
            |c| &mut c.cache,
            || {
                self.cache_leaves
                    .write()
                    .unwrap()
                    .retain(|l| !Arc::ptr_eq(l, &leaf))
            },
        )?;
        if let Some(l2) = self.storage.l2.get() {
            l2.remove_device(&leaf);
        }
        if let Some(dev) = leaf.device() {
            let _ = label::clear_labels(&*dev);
        }
        Ok(())
    }

    /// Installs `top` in place of the vdev with its id. Called with no sync running.
    fn replace_top(&self, top: Arc<TopVdev>) {
        let mut tops: Vec<Arc<TopVdev>> = self.storage.tops().iter().cloned().collect();
        let id = top.id as usize;
        tops[id] = top;
        self.storage.set_tops(tops);
    }

    /// The pool's log ring over the sides of `top` (vdev 0 as it is or will be).
    fn set_pool_ring(&self, top: &TopVdev) -> Result<(), PoolError> {
        let (offset, len) = *self.log_area.lock().unwrap();
        let ring = pool_ring(top, offset, len);
        self.intent_log
            .switch_rings(None, Some(ring), false, || Ok(()))
    }

    fn refresh_pool_ring(&self) -> Result<(), PoolError> {
        let top = self.storage.tops()[0].clone();
        self.set_pool_ring(&top)
    }

    /// Commits a txg whose uberblock names a fresh chain (see `switch_rings`).
    fn commit_new_chain(&self) -> Result<(), PoolError> {
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync().map(|_| ())
    }

    /// Moves the intent log's chain to the pool's own ring (nothing if it has no log
    /// devices), so the set of log devices can change under no live chain.
    fn move_chain_off_log_devices(&self) -> Result<(), PoolError> {
        if self.log_leaves.read().unwrap().is_empty() || !self.opts.move_log_chain {
            return Ok(());
        }
        self.intent_log
            .switch_rings(Some(None), None, true, || self.commit_new_chain())
    }

    /// Starts the chain on the log devices the config names now (if any).
    fn start_chain_on_log_devices(&self) -> Result<(), PoolError> {
        let leaves = self.log_leaves.read().unwrap().clone();
        if leaves.is_empty() || !self.opts.move_log_chain {
            return Ok(());
        }
        let ring = device_ring(&leaves);
        if let Some(r) = &ring {
            r.preallocate()
                .map_err(|e| PoolError::Io(format!("preparing the log device {e}")))?;
        }
        self.intent_log
            .switch_rings(Some(ring), None, true, || self.commit_new_chain())
    }
}

/// The leaf of `leaves` whose path or guid is `name`.
pub(super) fn find_named(leaves: &[Arc<Leaf>], name: &str) -> Option<Arc<Leaf>> {
    leaves
        .iter()
        .find(|l| l.path() == name || l.guid().to_string() == name)
        .cloned()
}
