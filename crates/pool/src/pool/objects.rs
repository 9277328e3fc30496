//! Object sets (datasets and their properties) and the objects in them: create,
//! write, read, free; what a dataset's space figures count.

use super::*;
use vdev::work_queue::{QueueSender, WorkQueue};

impl Pool {
    pub(super) fn validate_objset_name(name: &str) -> Result<(), PoolError> {
        let ok = !name.is_empty()
            && name.len() <= 255
            && name.split('/').all(|c| {
                !c.is_empty()
                    && c.chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || "_-.:".contains(ch))
            });
        if ok {
            Ok(())
        } else {
            Err(PoolError::InvalidArgument(format!(
                "invalid object set name '{name}'"
            )))
        }
    }

    pub fn create_objset(&self, name: &str, props: &str) -> Result<u64, PoolError> {
        self.begin(0)?.create_objset(name, props)
    }

    pub fn destroy_objset(&self, id: u64) -> Result<(), PoolError> {
        self.admit(0)?;
        // No sync may be writing this object set while it goes away.
        let _no_sync = self.sync_lock.lock().unwrap();
        let _g = self.gate.read().unwrap();
        let entry = {
            let mut ds = self.datasets.write().unwrap();
            match ds.get(&id) {
                None => return Err(PoolError::NotFound(format!("object set {id}"))),
                Some(d) if d.snapshot_of.is_some() => {
                    return Err(PoolError::InvalidArgument(format!(
                        "'{}' is a snapshot: destroy it as one",
                        d.name
                    )))
                }
                Some(d) if ds.values().any(|s| s.snapshot_of == Some(id)) => {
                    return Err(PoolError::InvalidArgument(format!(
                        "'{}' has snapshots: destroy them first",
                        d.name
                    )))
                }
                Some(_) => ds.remove(&id).unwrap(),
            }
        };
        // Its committed blocks are freed by the sync that commits the removal; changes
        // still open in it never got space and are dropped with it.
        self.pending_destroy
            .lock()
            .unwrap()
            .push((entry.objset.root_bp(), entry.deadlist));
        self.directory_dirty.store(true, Ordering::SeqCst);
        let txg = self.txg.lock().unwrap().open_txg;
        self.intent_log
            .append(txg, vec![LogOp::DestroyObjset { id }]);
        Ok(())
    }

    /// Datasets (not snapshots): (id, name, properties).
    pub fn list_objsets(&self) -> Vec<(u64, String, String)> {
        self.datasets
            .read()
            .unwrap()
            .iter()
            .filter(|(_, d)| d.snapshot_of.is_none())
            .map(|(id, d)| (*id, d.name.clone(), d.props.clone()))
            .collect()
    }

    pub fn objset_id(&self, name: &str) -> Option<u64> {
        self.datasets
            .read()
            .unwrap()
            .iter()
            .find(|(_, d)| d.name == name)
            .map(|(id, _)| *id)
    }

    pub fn set_objset_props(&self, id: u64, props: &str) -> Result<(), PoolError> {
        self.begin(0)?.set_objset_props(id, props)
    }

    /// An object set that changes may go to: not a snapshot.
    pub(super) fn writable_objset(&self, id: u64) -> Result<Arc<Objset>, PoolError> {
        let ds = self.datasets.read().unwrap();
        let d = ds
            .get(&id)
            .ok_or_else(|| PoolError::NotFound(format!("object set {id}")))?;
        if d.snapshot_of.is_some() {
            return Err(PoolError::ReadOnly(d.name.clone()));
        }
        Ok(d.objset.clone())
    }

    pub(super) fn objset(&self, id: u64) -> Result<Arc<Objset>, PoolError> {
        self.datasets
            .read()
            .unwrap()
            .get(&id)
            .map(|d| d.objset.clone())
            .ok_or_else(|| PoolError::NotFound(format!("object set {id}")))
    }

    // ---- objects ----

    pub fn create_object(
        &self,
        os: u64,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        self.begin(crate::dnode::DNODE_SIZE as u64)?.create_object(
            os,
            object_type,
            block_size,
            compression,
            checksum,
        )
    }

    pub fn write(&self, os: u64, obj: u64, offset: u64, data: &[u8]) -> Result<(), PoolError> {
        self.begin(data.len() as u64)?.write(os, obj, offset, data)
    }

    /// See [`Tx::write_block`].
    pub fn write_block(
        &self,
        os: u64,
        obj: u64,
        blkid: u64,
        contents: vdev::AlignedBuf,
    ) -> Result<(), PoolError> {
        self.begin(contents.len() as u64)?
            .write_block(os, obj, blkid, contents)
    }

    /// See [`Tx::write_stored`].
    pub fn write_stored(
        &self,
        os: u64,
        obj: u64,
        blkid: u64,
        block: Arc<crate::storage::StoredBlock>,
    ) -> Result<(), PoolError> {
        self.begin(block.psize as u64)?
            .write_stored(os, obj, blkid, block)
    }

    /// Starts a group of changes that land in one transaction group, so a crash keeps
    /// all of them or none. `bytes` is about how much the changes add (0 for changes
    /// that only free or rename); the write throttle and the space check run here,
    /// before the group holds the txg open. Keep a `Tx` short and never call the
    /// pool's own change methods while holding one: a sync waits for every open `Tx`.
    pub fn begin(&self, bytes: u64) -> Result<Tx<'_>, PoolError> {
        self.admit(bytes)?;
        Ok(self.begin_admitted())
    }

    /// A `Tx` without admission (replay: its changes were admitted before the crash).
    pub(super) fn begin_admitted(&self) -> Tx<'_> {
        let gate = self.gate.read().unwrap();
        let txg = self.txg.lock().unwrap().open_txg;
        Tx {
            pool: self,
            txg,
            log: Mutex::new(Vec::new()),
            _gate: gate,
        }
    }

    pub fn read(&self, os: u64, obj: u64, offset: u64, len: usize) -> Result<Vec<u8>, PoolError> {
        Ok(self.read_parts(os, obj, offset, len)?.to_vec())
    }

    /// Reads into a caller's buffer (holes as zeros), feeding read-ahead.
    pub fn read_into(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), PoolError> {
        self.read_parts(os, obj, offset, data.len())?.copy_to(data);
        Ok(())
    }

    /// Reads `len` bytes at `offset` as slices of the cache's own buffers (holes as
    /// zeros), feeding read-ahead: what a server sends without copying.
    pub fn read_parts(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: usize,
    ) -> Result<ReadBuf, PoolError> {
        let read = self.read_parts_with(os, obj, offset, len, Fetch::Any)?;
        Ok(read.expect("Fetch::Any always reads"))
    }

    /// `read_parts` answered from memory alone (the ARC, dirty data, cached dnodes):
    /// `None`, having read nothing from the devices and counted nothing, when any part
    /// of it is not there. For a server thread that must not wait on a disk.
    pub fn read_parts_cached(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: usize,
    ) -> Result<Option<ReadBuf>, PoolError> {
        self.read_parts_with(os, obj, offset, len, Fetch::CachedOnly)
    }

    pub(super) fn read_parts_with(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        len: usize,
        fetch: Fetch,
    ) -> Result<Option<ReadBuf>, PoolError> {
        if len > 64 << 20 {
            return Err(PoolError::InvalidArgument(
                "read of more than 64 MiB at once".into(),
            ));
        }
        let objset = self.objset(os)?;
        // Read-ahead is issued when a read arrives, before this read waits on a disk: a
        // client that has caught up with read-ahead has its next reads in flight already,
        // and noting them only as each miss comes back held the window still while one
        // slow device read was outstanding (on this VM a 4 MiB job took 6-45 ms, and a
        // one-disk pool streamed with 3.5 jobs in flight of the window's 8). The block
        // size is known without I/O once the object is loaded, i.e. from its second read.
        let early = match objset.loaded_block_size(obj) {
            Some(bs) if self.opts.prefetch && fetch == Fetch::Any => {
                self.read_ahead(&objset, obj, offset, len, bs);
                true
            }
            _ => false,
        };
        let Some((bs, bytes)) = objset.read_parts(&self.storage, obj, offset, len, fetch)? else {
            return Ok(None);
        };
        if self.opts.prefetch && !early {
            self.read_ahead(&objset, obj, offset, len, bs);
        }
        Ok(Some(bytes))
    }

    /// Feeds a read to the object's stream detector and queues what it asks to read
    /// ahead, less what is already in memory. Streams may read further ahead than the
    /// normal distance while the pool's read-ahead not yet read (queued, being read,
    /// or in the ARC unread) leaves room in half the ARC (`PrefetchConfig::may_extend`):
    /// one stream then keeps more of the disk busy while its reader lags, and four do
    /// not crowd each other's near blocks out of the queue.
    fn read_ahead(&self, objset: &Arc<Objset>, obj: u64, offset: u64, len: usize, bs: u64) {
        let pending = &self.read_ahead_pending;
        let (stream, ahead) = objset.note_read(obj, offset, len as u64, bs, || {
            let (unread, arc_max) = self.storage.arc.prefetch_unread_and_max_bytes();
            (unread + pending.load(Ordering::Relaxed), arc_max)
        });
        if ahead.is_empty() {
            return;
        }
        let ahead = objset.uncached_part(&self.storage, obj, ahead);
        if ahead.is_empty() {
            return;
        }
        let tx = self.prefetcher();
        let job_blocks = (self.prefetch_job_bytes() / bs.max(1)).max(1);
        let mut start = ahead.start;
        while start < ahead.end {
            let end = (start + job_blocks).min(ahead.end);
            let bytes = (end - start) * bs;
            pending.fetch_add(bytes, Ordering::Relaxed);
            // A full queue drops read-ahead, never blocks a reader.
            let job = PrefetchJob {
                objset: objset.clone(),
                obj,
                blocks: start..end,
                bytes,
                stream,
            };
            if tx.try_push(job).is_err() {
                pending.fetch_sub(bytes, Ordering::Relaxed);
                break;
            }
            start = end;
        }
    }

    /// Bytes of read-ahead jobs queued or being read now.
    pub fn read_ahead_pending_bytes(&self) -> u64 {
        self.read_ahead_pending.load(Ordering::Relaxed)
    }

    /// Bytes per read-ahead job: `PREFETCH_JOB_BYTES`, or `PREFETCH_JOB_BYTES_ROTATIONAL`
    /// when a data device has a head that seeks.
    fn prefetch_job_bytes(&self) -> u64 {
        let tops = self.storage.tops();
        let rotational = tops
            .iter()
            .flat_map(|t| t.leaves.iter())
            .any(|l| l.is_rotational());
        if rotational {
            PREFETCH_JOB_BYTES_ROTATIONAL
        } else {
            PREFETCH_JOB_BYTES
        }
    }

    /// The read-ahead workers' queue; the workers start on first use and end when the
    /// pool (and so the queue's sender) is dropped.
    pub(super) fn prefetcher(&self) -> &QueueSender<PrefetchJob> {
        self.prefetch_tx.get_or_init(|| self.start_prefetchers())
    }

    pub(super) fn start_prefetchers(&self) -> QueueSender<PrefetchJob> {
        // A queue that wakes a worker only when one sleeps (`vdev::work_queue`): a
        // channel that spins in its idle receivers cost a stream from disk thousands of
        // `sched_yield`s a second.
        let (tx, rx) = WorkQueue::<PrefetchJob>::new(PREFETCH_QUEUE);
        for i in 0..PREFETCH_WORKERS {
            let rx = rx.clone();
            let storage = self.storage.clone();
            let pending = self.read_ahead_pending.clone();
            let gate = self.read_ahead_gate.clone();
            std::thread::Builder::new()
                .name(format!("prefetch-{i}"))
                .spawn(move || {
                    // `None`: the pool, and so the queue's sender, is gone.
                    while let Some(job) = rx.pop() {
                        let (key, bytes) = (job.stream, job.bytes);
                        // A job its stream has no room for waits in the stream's line;
                        // the worker that ends one of its jobs runs what that lets start
                        // (one job, as a stream's jobs are of one size but its last).
                        let mut ready: std::collections::VecDeque<PrefetchJob> =
                            gate.admit(key, job, bytes).into_iter().collect();
                        while let Some(job) = ready.pop_front() {
                            let mut running = RunningJob {
                                gate: &gate,
                                pending: &pending,
                                key,
                                bytes: job.bytes,
                                ended: false,
                            };
                            job.objset.prefetch_range(&storage, job.obj, job.blocks);
                            ready.extend(running.end().into_iter().map(|(job, _)| job));
                        }
                    }
                })
                .expect("spawn prefetch worker");
        }
        tx
    }

    pub fn free_range(&self, os: u64, obj: u64, offset: u64, len: u64) -> Result<(), PoolError> {
        self.begin(0)?.free_range(os, obj, offset, len)
    }

    pub fn free_object(&self, os: u64, obj: u64) -> Result<(), PoolError> {
        self.begin(0)?.free_object(os, obj)
    }

    pub fn set_bonus(
        &self,
        os: u64,
        obj: u64,
        bonus: &[u8],
        generation: Option<u64>,
    ) -> Result<(), PoolError> {
        self.begin(bonus.len() as u64)?
            .set_bonus(os, obj, bonus, generation)
    }

    pub fn object_info(&self, os: u64, obj: u64) -> Result<ObjectInfo, PoolError> {
        self.objset(os)?.info(&self.storage, obj)
    }

    /// Whether data block `blkid` of `obj` holds data (written, synced or not) rather
    /// than being a hole.
    pub fn block_mapped(&self, os: u64, obj: u64, blkid: u64) -> Result<bool, PoolError> {
        self.objset(os)?.block_mapped(&self.storage, obj, blkid)
    }

    /// The committed pointer of data block `blkid` of `obj` (none: a hole), as of the
    /// last synced txg: how a block is stored, for checks and debugging.
    pub fn committed_block(
        &self,
        os: u64,
        obj: u64,
        blkid: u64,
    ) -> Result<Option<crate::blkptr::BlockPointer>, PoolError> {
        self.objset(os)?.committed_block(&self.storage, obj, blkid)
    }
}

/// A read-ahead job being read: when it ends, its bytes leave the pool's pending count
/// (`Pool::read_ahead_pending_bytes`; the blocks are in the ARC by then, where they
/// count as unread) and its stream's gate lets the next jobs start. If the read
/// panics, the same happens as it unwinds, and the jobs that would start are dropped
/// with their bytes (this worker is going away): otherwise they would stay counted for
/// the life of the pool, shrinking every stream's budget, and hold the stream's line.
struct RunningJob<'a> {
    gate: &'a read_ahead_gate::StreamGate<PrefetchJob>,
    pending: &'a std::sync::atomic::AtomicU64,
    key: read_ahead_gate::StreamKey,
    bytes: u64,
    ended: bool,
}

impl RunningJob<'_> {
    /// The job has ended: the jobs of its stream that may start now.
    fn end(&mut self) -> Vec<(PrefetchJob, u64)> {
        self.ended = true;
        self.pending.fetch_sub(self.bytes, Ordering::Relaxed);
        self.gate.finish(self.key, self.bytes)
    }
}

impl Drop for RunningJob<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let mut dropped = self.end();
        while let Some((_, bytes)) = dropped.pop() {
            self.pending.fetch_sub(bytes, Ordering::Relaxed);
            dropped.extend(self.gate.finish(self.key, bytes));
        }
    }
}
