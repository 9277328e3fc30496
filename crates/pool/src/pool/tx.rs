//! `Tx`: a group of changes that commit in the same transaction group, and the
//! intent log records they leave.

use super::*;

/// A group of changes that commit in the same transaction group (see [`Pool::begin`]).
/// While it lives the txg it names cannot quiesce, so everything done through it is in
/// that txg's on-disk state or, after a crash before that txg commits, none of it is.
pub struct Tx<'a> {
    pub(super) pool: &'a Pool,
    pub(super) txg: u64,
    /// Intent log records of this transaction, appended as one when it ends.
    pub(super) log: Mutex<Vec<LogOp>>,
    pub(super) _gate: std::sync::RwLockReadGuard<'a, ()>,
}

impl Drop for Tx<'_> {
    /// Runs before the gate guard is released, so the records join the log inside
    /// this txg and in txg order.
    fn drop(&mut self) {
        let ops = std::mem::take(&mut *self.log.lock().unwrap());
        self.pool.intent_log.append(self.txg, ops);
    }
}

impl Tx<'_> {
    /// The transaction group these changes belong to.
    pub fn txg(&self) -> u64 {
        self.txg
    }

    pub(super) fn record(&self, op: LogOp) {
        self.log.lock().unwrap().push(op);
    }

    pub fn create_objset(&self, name: &str, props: &str) -> Result<u64, PoolError> {
        self.create_objset_as(name, props, None)
    }

    /// `id` is given only when replaying the intent log.
    pub(super) fn create_objset_as(
        &self,
        name: &str,
        props: &str,
        id: Option<u64>,
    ) -> Result<u64, PoolError> {
        let p = self.pool;
        Pool::validate_objset_name(name)?;
        let mut ds = p.datasets.write().unwrap();
        if ds.values().any(|d| d.name == name) {
            return Err(PoolError::Exists(format!("object set '{name}'")));
        }
        let mut next = p.next_objset_id.lock().unwrap();
        let id = match id {
            Some(id) if id < *next || ds.contains_key(&id) => {
                return Err(PoolError::Exists(format!("object set {id}")))
            }
            Some(id) => id,
            None => *next,
        };
        *next = id + 1;
        ds.insert(
            id,
            DatasetEntry::dataset(
                name.to_string(),
                props.to_string(),
                Arc::new(Objset::new_empty(id)),
            ),
        );
        p.directory_dirty.store(true, Ordering::SeqCst);
        self.record(LogOp::CreateObjset {
            id,
            name: name.to_string(),
            props: props.to_string(),
        });
        Ok(id)
    }

    pub fn set_objset_props(&self, id: u64, props: &str) -> Result<(), PoolError> {
        let p = self.pool;
        let mut ds = p.datasets.write().unwrap();
        let d = ds
            .get_mut(&id)
            .ok_or_else(|| PoolError::NotFound(format!("object set {id}")))?;
        d.props = props.to_string();
        p.directory_dirty.store(true, Ordering::SeqCst);
        self.record(LogOp::SetObjsetProps {
            id,
            props: props.to_string(),
        });
        Ok(())
    }

    pub fn create_object(
        &self,
        os: u64,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        self.create_object_as(os, None, object_type, block_size, compression, checksum)
    }

    /// `obj` is given only when replaying the intent log or receiving a stream.
    pub(crate) fn create_object_as(
        &self,
        os: u64,
        obj: Option<u64>,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<u64, PoolError> {
        let obj = self.pool.writable_objset(os)?.create_object_as(
            obj,
            object_type,
            block_size,
            compression,
            checksum,
        )?;
        self.pool
            .account_dirty_bytes(crate::dnode::DNODE_SIZE as u64);
        self.record(LogOp::CreateObject {
            os,
            obj,
            object_type,
            block_size,
            compression,
            checksum,
        });
        Ok(obj)
    }

    pub fn write(&self, os: u64, obj: u64, offset: u64, data: &[u8]) -> Result<(), PoolError> {
        let p = self.pool;
        let objset = p.writable_objset(os)?;
        let dirtied = objset.write(&p.storage, obj, offset, data)?;
        p.account_dirty(&objset, dirtied);
        self.record(LogOp::Write {
            os,
            obj,
            offset,
            len: data.len() as u64,
            data: Vec::new(),
        });
        Ok(())
    }

    /// Block `blkid` of `obj` becomes `contents`, a whole block handed over
    /// (`write` of the same bytes at `blkid` times the block size, without a copy).
    pub fn write_block(
        &self,
        os: u64,
        obj: u64,
        blkid: u64,
        contents: vdev::AlignedBuf,
    ) -> Result<(), PoolError> {
        let len = contents.len() as u64;
        self.whole_block(os, obj, blkid, len, |objset, st| {
            objset.write_block(st, obj, blkid, contents)
        })
    }

    /// Block `blkid` of `obj` becomes a received block as its sender stored it
    /// (compressed blocks stay compressed: no decompress and compress again).
    pub fn write_stored(
        &self,
        os: u64,
        obj: u64,
        blkid: u64,
        block: Arc<crate::storage::StoredBlock>,
    ) -> Result<(), PoolError> {
        let len = block.lsize as u64;
        self.whole_block(os, obj, blkid, len, |objset, st| {
            objset.write_stored(st, obj, blkid, block)
        })
    }

    /// A whole block of `len` bytes at `blkid` put in place by `put`, accounted and
    /// logged as a write of its bytes.
    fn whole_block(
        &self,
        os: u64,
        obj: u64,
        blkid: u64,
        len: u64,
        put: impl FnOnce(&Objset, &Storage) -> Result<u64, PoolError>,
    ) -> Result<(), PoolError> {
        let p = self.pool;
        let objset = p.writable_objset(os)?;
        let dirtied = put(&objset, &p.storage)?;
        p.account_dirty(&objset, dirtied);
        self.record(LogOp::Write {
            os,
            obj,
            offset: blkid * len,
            len,
            data: Vec::new(),
        });
        Ok(())
    }

    pub fn free_range(&self, os: u64, obj: u64, offset: u64, len: u64) -> Result<(), PoolError> {
        let p = self.pool;
        p.writable_objset(os)?
            .free_range(&p.storage, obj, offset, len)?;
        self.record(LogOp::FreeRange {
            os,
            obj,
            offset,
            len,
        });
        Ok(())
    }

    pub fn free_object(&self, os: u64, obj: u64) -> Result<(), PoolError> {
        let p = self.pool;
        p.writable_objset(os)?.free_object(&p.storage, obj)?;
        self.record(LogOp::FreeObject { os, obj });
        Ok(())
    }

    pub fn set_bonus(
        &self,
        os: u64,
        obj: u64,
        bonus: &[u8],
        generation: Option<u64>,
    ) -> Result<(), PoolError> {
        let p = self.pool;
        p.writable_objset(os)?
            .set_bonus(&p.storage, obj, bonus, generation)?;
        p.account_dirty_bytes(bonus.len() as u64);
        self.record(LogOp::SetBonus {
            os,
            obj,
            bonus: bonus.to_vec(),
            generation,
        });
        Ok(())
    }

    /// Changes the compression and checksum `obj`'s future blocks get. Not logged:
    /// the codec is no part of the data, and its owner sets it again when it opens
    /// the object (a volume does), so a crash before the txg commits loses nothing.
    pub fn set_codec(
        &self,
        os: u64,
        obj: u64,
        compression: Compression,
        checksum: ChecksumKind,
    ) -> Result<(), PoolError> {
        let p = self.pool;
        if p.writable_objset(os)?
            .set_codec(&p.storage, obj, compression, checksum)?
        {
            p.account_dirty_bytes(crate::dnode::DNODE_SIZE as u64);
        }
        Ok(())
    }

    /// Grows the block size of an object that has at most one block (a small file
    /// growing towards its recordsize); its contents are kept.
    pub fn grow_block_size(&self, os: u64, obj: u64, block_size: u32) -> Result<(), PoolError> {
        let p = self.pool;
        let objset = p.writable_objset(os)?;
        let dirtied = objset.grow_block_size(&p.storage, obj, block_size)?;
        p.account_dirty(&objset, dirtied);
        self.record(LogOp::GrowBlockSize {
            os,
            obj,
            block_size,
        });
        Ok(())
    }

    /// Applies one replayed record (records are not logged again while replaying).
    pub(super) fn replay(&self, op: LogOp) -> Result<(), PoolError> {
        match op {
            LogOp::CreateObjset { id, name, props } => {
                self.create_objset_as(&name, &props, Some(id)).map(|_| ())
            }
            LogOp::SetObjsetProps { id, props } => self.set_objset_props(id, &props),
            LogOp::DestroyObjset { .. } => unreachable!("applied by the pool, outside a Tx"),
            LogOp::CreateObject {
                os,
                obj,
                object_type,
                block_size,
                compression,
                checksum,
            } => self
                .create_object_as(
                    os,
                    Some(obj),
                    object_type,
                    block_size,
                    compression,
                    checksum,
                )
                .map(|_| ()),
            LogOp::Write {
                os,
                obj,
                offset,
                data,
                ..
            } => self.write(os, obj, offset, &data),
            LogOp::FreeRange {
                os,
                obj,
                offset,
                len,
            } => self.free_range(os, obj, offset, len),
            LogOp::FreeObject { os, obj } => self.free_object(os, obj),
            LogOp::SetBonus {
                os,
                obj,
                bonus,
                generation,
            } => self.set_bonus(os, obj, &bonus, generation),
            LogOp::GrowBlockSize {
                os,
                obj,
                block_size,
            } => self.grow_block_size(os, obj, block_size),
            LogOp::WriteBlock {
                os,
                obj,
                offset,
                bp,
            } => self.adopt_logged_block(os, obj, offset, bp),
        }
    }

    /// Replay of a pointer record: the block was written to its final place before
    /// the record, and its space was never logged, so it is claimed here and the
    /// replay txg logs it when it adopts the block.
    pub(super) fn adopt_logged_block(
        &self,
        os: u64,
        obj: u64,
        offset: u64,
        bp: BlockPointer,
    ) -> Result<(), PoolError> {
        let p = self.pool;
        let objset = p.writable_objset(os)?;
        let bs = objset.block_size(&p.storage, obj)? as u64;
        if !offset.is_multiple_of(bs) {
            return Err(PoolError::Corrupt(format!(
                "log pointer record at offset {offset} of object {obj} is not block aligned"
            )));
        }
        let blkid = offset / bs;
        if objset.is_placed(obj, blkid, &bp) {
            return Ok(());
        }
        if !p.storage.claim_placed(&bp) {
            return Err(PoolError::Corrupt(format!(
                "log pointer record for object {obj}: its block's space is in use"
            )));
        }
        if let Err(e) = objset.adopt_replayed(&p.storage, obj, blkid, bp, self.txg) {
            p.storage.release_placed(&bp, self.txg);
            return Err(e);
        }
        p.account_dirty(&objset, bs);
        Ok(())
    }
}
