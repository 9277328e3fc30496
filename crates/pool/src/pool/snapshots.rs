//! Snapshots: taken, destroyed, rolled back and listed in syncing context (see the
//! module doc of `pool`).

use super::*;

impl Pool {
    /// Takes snapshot `name` of dataset `dataset`: everything changed before this call
    /// is in it. O(1): one directory entry naming the root the dataset's sync wrote.
    pub fn snapshot_create(&self, dataset: u64, name: &str) -> Result<u64, PoolError> {
        Ok(self.snapshot_create_many(&[dataset], name)?[0])
    }

    /// Takes snapshot `name` of each of `datasets` in one transaction group (as
    /// `zfs snapshot -r`): all of them hold the same instant, and a crash leaves all
    /// or none. Refused, taking none, if one of the names exists.
    pub fn snapshot_create_many(
        &self,
        datasets: &[u64],
        name: &str,
    ) -> Result<Vec<u64>, PoolError> {
        Self::validate_objset_name(name)?;
        if name.contains('/') {
            return Err(PoolError::InvalidArgument(format!(
                "invalid snapshot name '{name}'"
            )));
        }
        self.check_writable()?;
        {
            let ds = self.datasets.read().unwrap();
            for id in datasets {
                let d = ds
                    .get(id)
                    .ok_or_else(|| PoolError::NotFound(format!("dataset {id}")))?;
                let full = format!("{}@{name}", d.name);
                if ds.values().any(|e| e.name == full) {
                    return Err(PoolError::Exists(format!("snapshot '{full}'")));
                }
            }
        }
        let slots: Vec<SnapSlot> = datasets
            .iter()
            .map(|_| Arc::new(Mutex::new(None)))
            .collect();
        {
            // Queued together, so one syncing txg takes them all.
            let mut ops = self.snap_ops.lock().unwrap();
            for (dataset, slot) in datasets.iter().zip(&slots) {
                ops.push((
                    SnapOp::Create {
                        dataset: *dataset,
                        name: name.to_string(),
                        guid: None,
                    },
                    slot.clone(),
                ));
            }
        }
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync()?;
        slots
            .iter()
            .map(|slot| {
                slot.lock()
                    .unwrap()
                    .take()
                    .unwrap_or_else(|| Err(PoolError::Io("snapshot operation did not run".into())))
            })
            .collect()
    }

    /// Destroys a snapshot, freeing the blocks only it held. Refused (`Busy`) while
    /// it is held.
    pub fn snapshot_destroy(&self, id: u64) -> Result<(), PoolError> {
        self.run_snapshot_op(SnapOp::Destroy { id }).map(|_| ())
    }

    /// Rolls a dataset back to its latest snapshot `id`: later changes are discarded
    /// and their blocks freed. The dataset must not be in use (mounted or shared).
    pub fn snapshot_rollback(&self, id: u64) -> Result<(), PoolError> {
        self.snapshot_rollback_to(id, false)
    }

    /// Rolls a dataset back to its snapshot `id`. Snapshots taken after it refuse the
    /// rollback, naming them, unless `destroy_newer`: then they are destroyed with
    /// the changes, in the same transaction group (all or none after a crash), and a
    /// held one refuses it. The dataset must not be in use (mounted or shared).
    pub fn snapshot_rollback_to(&self, id: u64, destroy_newer: bool) -> Result<(), PoolError> {
        self.run_snapshot_op(SnapOp::Rollback {
            id,
            destroy_newer,
            keep_ids: false,
        })
        .map(|_| ())
    }

    /// `snapshot_rollback_to` for a dataset that stays in use: the ids of objects
    /// made after the snapshot are not given to new objects while the pool is
    /// imported, so a file handle, a FUSE inode or an open count that names one finds
    /// it gone, never another file. (A receive's rollback to its base does not do
    /// this: the stream then makes objects under the ids its source gave them.)
    pub fn snapshot_rollback_in_place(
        &self,
        id: u64,
        destroy_newer: bool,
    ) -> Result<(), PoolError> {
        self.run_snapshot_op(SnapOp::Rollback {
            id,
            destroy_newer,
            keep_ids: true,
        })
        .map(|_| ())
    }

    /// Places hold `tag` on snapshot `id` (committed when this returns): the snapshot
    /// cannot be destroyed, by hand, by a rollback or by pruning, until every hold on
    /// it is released. A tag already on it is refused.
    pub fn snapshot_hold(&self, id: u64, tag: &str) -> Result<(), PoolError> {
        check_hold_tag(tag)?;
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.run_snapshot_op(SnapOp::Hold {
            id,
            tag: tag.to_string(),
            unix,
        })
        .map(|_| ())
    }

    /// Releases hold `tag` of snapshot `id` (committed when this returns).
    pub fn snapshot_release(&self, id: u64, tag: &str) -> Result<(), PoolError> {
        check_hold_tag(tag)?;
        self.run_snapshot_op(SnapOp::Release {
            id,
            tag: tag.to_string(),
        })
        .map(|_| ())
    }

    /// The txg snapshot `id` was taken in (0 if there is no such snapshot).
    pub fn snapshot_txg(&self, id: u64) -> u64 {
        let ds = self.datasets.read().unwrap();
        Self::snapshot_entry(&ds, id).map_or(0, |(s, _)| s.snap_txg)
    }

    /// The holds of snapshot `id`: (tag, placed at in unix seconds), by tag.
    pub fn snapshot_holds(&self, id: u64) -> Result<Vec<(String, u64)>, PoolError> {
        let ds = self.datasets.read().unwrap();
        let (s, _) = Self::snapshot_entry(&ds, id)?;
        Ok(s.holds.iter().map(|(t, u)| (t.clone(), *u)).collect())
    }

    pub(super) fn run_snapshot_op(&self, op: SnapOp) -> Result<u64, PoolError> {
        self.check_writable()?;
        let slot: SnapSlot = Arc::new(Mutex::new(None));
        self.snap_ops.lock().unwrap().push((op, slot.clone()));
        self.directory_dirty.store(true, Ordering::SeqCst);
        self.sync()?;
        let outcome = slot.lock().unwrap().take();
        outcome.unwrap_or_else(|| Err(PoolError::Io("snapshot operation did not run".into())))
    }

    /// (id, `dataset@name`) of a dataset's snapshots, oldest first: the cheap listing
    /// (no dead list is read) for lookups.
    pub fn snapshot_names(&self, dataset: u64) -> Vec<(u64, String)> {
        let ds = self.datasets.read().unwrap();
        let mut v: Vec<(u64, u64, String)> = ds
            .iter()
            .filter(|(_, d)| d.snapshot_of == Some(dataset))
            .map(|(id, d)| (d.snap_txg, *id, d.name.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, id, name)| (id, name)).collect()
    }

    /// Snapshots, oldest first, with the space each alone holds (reads dead lists);
    /// of one dataset when given.
    pub fn list_snapshots(&self, dataset: Option<u64>) -> Result<Vec<SnapshotInfo>, PoolError> {
        let ds = self.datasets.read().unwrap();
        let mut snaps: Vec<(u64, &DatasetEntry)> = ds
            .iter()
            .filter(|(_, d)| d.snapshot_of.is_some())
            .filter(|(_, d)| dataset.is_none_or(|want| d.snapshot_of == Some(want)))
            .map(|(id, d)| (*id, d))
            .collect();
        snaps.sort_by_key(|(_, d)| (d.snapshot_of, d.snap_txg));
        let mut out = Vec::with_capacity(snaps.len());
        for (id, d) in snaps {
            let origin = d.snapshot_of.unwrap();
            let (prev, next) = Self::neighbours(&ds, origin, d.snap_txg);
            let next_list = ds[&next].deadlist;
            let unique = deadlist::entries(&self.storage, next_list)?
                .iter()
                .filter(|bp| bp.birth_txg > prev && bp.birth_txg <= d.snap_txg)
                .map(|bp| self.storage.dsize(bp))
                .sum();
            out.push(SnapshotInfo {
                id,
                name: d.name.clone(),
                dataset: origin,
                txg: d.snap_txg,
                unique_bytes: unique,
                holds: d.holds.keys().cloned().collect(),
            });
        }
        Ok(out)
    }

    /// (id, name, space) of every dataset (snapshots are counted in their dataset).
    pub fn dataset_spaces(&self) -> Vec<(u64, String, DatasetSpace)> {
        let ds = self.datasets.read().unwrap();
        let mut out: BTreeMap<u64, (String, DatasetSpace)> = BTreeMap::new();
        for (id, d) in ds.iter().filter(|(_, d)| d.snapshot_of.is_none()) {
            let c = d.objset.space();
            // Every block on the dataset's own dead list was born by its latest
            // snapshot and was live when it was taken, so it is in that snapshot's
            // tree: what the two still share is the snapshot's referenced bytes less
            // those.
            let latest = ds
                .values()
                .filter(|s| s.snapshot_of == Some(*id))
                .max_by_key(|s| s.snap_txg);
            let shared = latest.map_or(0, |s| {
                s.objset.space().referenced.saturating_sub(d.deadlist.bytes)
            });
            let space = DatasetSpace {
                referenced: c.referenced,
                pending: c.open_charge + c.syncing_charge,
                snapshots: d.deadlist.bytes,
                unique: c.referenced.saturating_sub(shared),
            };
            out.insert(*id, (d.name.clone(), space));
        }
        for d in ds.values() {
            if let Some(origin) = d.snapshot_of {
                if let Some((_, space)) = out.get_mut(&origin) {
                    space.snapshots += d.deadlist.bytes;
                }
            }
        }
        out.into_iter().map(|(id, (n, s))| (id, n, s)).collect()
    }

    /// For a snapshot of `origin` at `txg`: the previous snapshot's txg (0 if none) and
    /// the id of the next snapshot, or of the dataset itself when it is the newest.
    pub(super) fn neighbours(
        ds: &BTreeMap<u64, DatasetEntry>,
        origin: u64,
        txg: u64,
    ) -> (u64, u64) {
        let of_origin = || {
            ds.iter()
                .filter(move |(_, d)| d.snapshot_of == Some(origin))
        };
        let prev = of_origin()
            .map(|(_, d)| d.snap_txg)
            .filter(|&t| t < txg)
            .max()
            .unwrap_or(0);
        let next = of_origin()
            .filter(|(_, d)| d.snap_txg > txg)
            .min_by_key(|(_, d)| d.snap_txg)
            .map_or(origin, |(id, _)| *id);
        (prev, next)
    }

    /// Runs queued snapshot operations in syncing context (after every object set of
    /// `txg` synced and dead lists were appended).
    pub(super) fn apply_snapshot_ops(&self, txg: u64) -> Result<(), PoolError> {
        let ops = std::mem::take(&mut *self.snap_ops.lock().unwrap());
        for (op, slot) in ops {
            let r = match op {
                SnapOp::Create {
                    dataset,
                    name,
                    guid,
                } => self.snapshot_in_sync(txg, dataset, &name, guid),
                SnapOp::Destroy { id } => self.destroy_snapshot_in_sync(txg, id).map(|_| id),
                SnapOp::Rollback {
                    id,
                    destroy_newer,
                    keep_ids,
                } => self
                    .rollback_in_sync(txg, id, destroy_newer, keep_ids)
                    .map(|_| id),
                SnapOp::Hold { id, tag, unix } => self.hold_in_sync(id, tag, unix).map(|_| id),
                SnapOp::Release { id, tag } => self.release_in_sync(id, &tag).map(|_| id),
            };
            // I/O failures fail the txg; a refused request only fails its caller.
            let r = match r {
                Err(e @ (PoolError::Io(_) | PoolError::Checksum(_) | PoolError::Corrupt(_))) => {
                    *slot.lock().unwrap() = Some(Err(PoolError::Io(e.to_string())));
                    return Err(e);
                }
                r => r,
            };
            *slot.lock().unwrap() = Some(r);
        }
        Ok(())
    }

    pub(super) fn snapshot_in_sync(
        &self,
        txg: u64,
        dataset: u64,
        name: &str,
        guid: Option<u64>,
    ) -> Result<u64, PoolError> {
        let st = &self.storage;
        let mut ds = self.datasets.write().unwrap();
        let d = ds
            .get(&dataset)
            .ok_or_else(|| PoolError::NotFound(format!("dataset {dataset}")))?;
        if d.snapshot_of.is_some() {
            return Err(PoolError::InvalidArgument(
                "cannot snapshot a snapshot".into(),
            ));
        }
        let full = format!("{}@{name}", d.name);
        if ds.values().any(|e| e.name == full) {
            return Err(PoolError::Exists(format!("snapshot '{full}'")));
        }
        let root = d.objset.root_bp();
        let props = d.props.clone();
        let handed_over = d.deadlist;
        let mut next = self.next_objset_id.lock().unwrap();
        let id = *next;
        *next += 1;
        drop(next);
        let objset = Arc::new(Objset::open(st, id, root)?);
        let d = ds.get_mut(&dataset).unwrap();
        // From now on blocks born up to this txg are shared with the snapshot.
        d.objset.set_keep_upto(txg);
        d.snap_txg = txg;
        d.deadlist = Deadlist::EMPTY;
        ds.insert(
            id,
            DatasetEntry {
                name: full,
                props,
                objset,
                snapshot_of: Some(dataset),
                snap_txg: txg,
                deadlist: handed_over,
                guid: guid.unwrap_or_else(|| snapshot_guid(self.guid, id, txg)),
                holds: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    /// Snapshot `id` and the dataset it was taken of.
    /// Whether the dataset of snapshot `snap` changed after the snapshot was taken
    /// (committed or not): a replication with nothing to send can skip its run.
    pub fn changed_since_snapshot(&self, snap: u64) -> Result<bool, PoolError> {
        let ds = self.datasets.read().unwrap();
        let (s, origin) = Self::snapshot_entry(&ds, snap)?;
        let d = &ds[&origin];
        Ok(d.objset.root_bp().birth_txg > s.snap_txg || d.objset.has_uncommitted_changes())
    }

    pub(super) fn snapshot_entry(
        ds: &BTreeMap<u64, DatasetEntry>,
        id: u64,
    ) -> Result<(&DatasetEntry, u64), PoolError> {
        let s = ds
            .get(&id)
            .ok_or_else(|| PoolError::NotFound(format!("snapshot {id}")))?;
        match s.snapshot_of {
            Some(origin) => Ok((s, origin)),
            None => Err(PoolError::InvalidArgument(format!(
                "'{}' is not a snapshot",
                s.name
            ))),
        }
    }

    pub(super) fn destroy_snapshot_in_sync(&self, txg: u64, id: u64) -> Result<(), PoolError> {
        let st = &self.storage;
        let mut ds = self.datasets.write().unwrap();
        let (s, origin) = Self::snapshot_entry(&ds, id)?;
        refuse_held(s)?;
        if self.sending.lock().unwrap().contains_key(&id) {
            return Err(PoolError::Busy(format!(
                "'{}' is being sent: destroy it when the send has ended",
                s.name
            )));
        }
        let s_txg = s.snap_txg;
        let s_list = s.deadlist;
        let (prev, next) = Self::neighbours(&ds, origin, s_txg);
        let n_list = ds[&next].deadlist;
        let mut keep = Vec::new();
        for bp in deadlist::entries(st, n_list)? {
            if bp.birth_txg > prev && bp.birth_txg <= s_txg {
                st.free_block(&bp, txg); // only this snapshot held it
            } else {
                keep.push(bp);
            }
        }
        keep.extend(deadlist::entries(st, s_list)?);
        deadlist::free_chain(st, n_list, txg)?;
        deadlist::free_chain(st, s_list, txg)?;
        let merged = deadlist::append(st, txg, Deadlist::EMPTY, &keep)?;
        ds.get_mut(&next).unwrap().deadlist = merged;
        if next == origin {
            // It was the newest: the dataset now shares only with the one before.
            let d = ds.get_mut(&origin).unwrap();
            d.snap_txg = prev;
            d.objset.set_keep_upto(prev);
        }
        ds.remove(&id);
        Ok(())
    }

    fn hold_in_sync(&self, id: u64, tag: String, unix: u64) -> Result<(), PoolError> {
        let mut ds = self.datasets.write().unwrap();
        let (s, _) = Self::snapshot_entry(&ds, id)?;
        if s.holds.contains_key(&tag) {
            return Err(PoolError::Exists(format!(
                "hold '{tag}' on '{}' (a tag holds a snapshot once)",
                s.name
            )));
        }
        if s.holds.len() >= HOLDS_PER_SNAPSHOT_MAX {
            return Err(PoolError::InvalidArgument(format!(
                "'{}' has {HOLDS_PER_SNAPSHOT_MAX} holds, the most a snapshot takes",
                s.name
            )));
        }
        ds.get_mut(&id).unwrap().holds.insert(tag, unix);
        Ok(())
    }

    fn release_in_sync(&self, id: u64, tag: &str) -> Result<(), PoolError> {
        let mut ds = self.datasets.write().unwrap();
        let (s, _) = Self::snapshot_entry(&ds, id)?;
        if !s.holds.contains_key(tag) {
            return Err(PoolError::NotFound(format!(
                "no hold '{tag}' on '{}'",
                s.name
            )));
        }
        ds.get_mut(&id).unwrap().holds.remove(tag);
        Ok(())
    }

    pub(super) fn rollback_in_sync(
        &self,
        txg: u64,
        id: u64,
        destroy_newer: bool,
        keep_ids: bool,
    ) -> Result<(), PoolError> {
        let newer = {
            let ds = self.datasets.read().unwrap();
            let (s, origin) = Self::snapshot_entry(&ds, id)?;
            let mut newer: Vec<(u64, &DatasetEntry)> = ds
                .iter()
                .filter(|(_, d)| d.snapshot_of == Some(origin) && d.snap_txg > s.snap_txg)
                .map(|(id, d)| (*id, d))
                .collect();
            newer.sort_by_key(|(_, d)| std::cmp::Reverse(d.snap_txg));
            let names = || {
                newer
                    .iter()
                    .rev()
                    .map(|(_, d)| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !newer.is_empty() && !destroy_newer {
                return Err(PoolError::InvalidArgument(format!(
                    "'{}' is not the latest snapshot; rolling back to it destroys the \
                     newer ones ({}): ask for that (-r)",
                    s.name,
                    names()
                )));
            }
            for (_, d) in &newer {
                refuse_held(d)?;
            }
            if newer
                .iter()
                .any(|(id, _)| self.sending.lock().unwrap().contains_key(id))
            {
                return Err(PoolError::Busy(format!(
                    "a newer snapshot than '{}' is being sent ({}): roll back when the \
                     send has ended",
                    s.name,
                    names()
                )));
            }
            newer.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
        };
        // Newest first, so each is the latest when it goes: the changes after it are
        // the dataset's, and the next destroy hands its dead list on correctly.
        for snap in newer {
            self.destroy_snapshot_in_sync(txg, snap)?;
        }
        let st = &self.storage;
        let mut ds = self.datasets.write().unwrap();
        let (s, origin) = Self::snapshot_entry(&ds, id)?;
        let (s_txg, s_root) = (s.snap_txg, s.objset.root_bp());
        assert_eq!(
            Self::neighbours(&ds, origin, s_txg).1,
            origin,
            "the rollback's snapshot is the latest once the newer are gone"
        );
        let d = &ds[&origin];
        // Everything born after the snapshot is the dataset's alone; what died since
        // is still the snapshot's, so the dead list is dropped, not freed.
        let mut doomed = Vec::new();
        visit_objset(st, d.objset.root_bp(), &mut |bp| {
            if bp.birth_txg > s_txg {
                doomed.push(*bp);
            }
            Ok(())
        })?;
        for bp in doomed {
            st.free_block(&bp, txg);
        }
        deadlist::free_chain(st, d.deadlist, txg)?;
        let objset = Arc::new(Objset::open(st, origin, s_root)?);
        objset.set_keep_upto(s_txg);
        if keep_ids {
            // Raised on disk with the next change; in memory, which is where the
            // names that could be confused live, from now on.
            objset.raise_next_object(ds[&origin].objset.next_object());
        }
        let d = ds.get_mut(&origin).unwrap();
        d.objset = objset;
        d.deadlist = Deadlist::EMPTY;
        Ok(())
    }
}

/// Refuses to destroy a held snapshot, naming its holds.
fn refuse_held(s: &DatasetEntry) -> Result<(), PoolError> {
    if s.holds.is_empty() {
        return Ok(());
    }
    let tags: Vec<&str> = s.holds.keys().map(String::as_str).collect();
    Err(PoolError::Busy(format!(
        "'{}' is held ({}): release its holds before destroying it",
        s.name,
        tags.join(", ")
    )))
}

/// A hold tag: 1 to `HOLD_TAG_MAX_BYTES` bytes of printable characters (no control
/// characters; spaces inside are allowed, as in ZFS).
pub fn check_hold_tag(tag: &str) -> Result<(), PoolError> {
    let ok = !tag.is_empty()
        && tag.len() <= HOLD_TAG_MAX_BYTES
        && !tag.chars().any(char::is_control)
        && tag.trim() == tag;
    if ok {
        Ok(())
    } else {
        Err(PoolError::InvalidArgument(format!(
            "hold tag {tag:?}: 1 to {HOLD_TAG_MAX_BYTES} bytes of printable characters, \
             without leading or trailing spaces"
        )))
    }
}

/// A snapshot's identity where none is given: from the pool's guid, its object set id
/// and its txg, which no other snapshot of any pool shares (pool guids are random).
pub(super) fn snapshot_guid(pool_guid: u64, id: u64, txg: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"shoal snapshot guid");
    for v in [pool_guid, id, txg] {
        h.update(&v.to_le_bytes());
    }
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().unwrap()).max(1)
}
