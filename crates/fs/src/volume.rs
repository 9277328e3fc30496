//! One volume: a dataset that is a run of bytes rather than a tree of files, what a
//! block protocol (the SCSI target) serves as a disk, as zfs's zvols are.
//!
//! A volume's object set holds one object, `VOLUME_OBJ`, whose blocks are
//! `volblocksize` bytes: block `n` holds bytes `n * volblocksize ..` of the volume.
//! Its size (`volsize`) and block size are properties of the dataset (see `props.rs`
//! and `docs/format.md`); nothing else is on disk. A never-written or unmapped block
//! is a hole: it reads as zeros and takes no space.
//!
//! Durability: a write is a pool transaction, so it is in the intent log the moment it
//! returns; `flush` (SCSI SYNCHRONIZE CACHE) and a write with `Durability::Stable`
//! (SCSI FUA, or any write with sync=always) commit the log before they answer, so a
//! crash at any instant after that answer keeps them (DESIGN invariant 6). With
//! sync=disabled nothing waits for the log, and a crash may lose what the last few
//! seconds wrote, as the property says.
//!
//! Space: a *thick* volume (the default) has a refreservation covering all of its
//! blocks and their indirect blocks (`thick_refreservation`), which no other dataset
//! can take (see `space.rs`), so its writes are never refused for space: they skip the
//! admission check. A *sparse* one is admitted like any write and may answer
//! `NoSpace` or `Quota`, which the SCSI target reports as SPACE ALLOCATION FAILED.
//!
//! Reservations: object `RESERVATIONS_OBJ`, made when the SCSI target first stores
//! its persistent-reservation state, holds that state (see `store_reservations`).
//!
//! Atomicity: `compare_and_write`, `update` and `write_atomic` hold the volume's
//! lock exclusively while plain reads and writes hold it shared, so no write lands
//! between a compare and its write, and no read sees half of an atomic write.

use crate::props::{EffectiveProps, SyncMode};
use crate::space::SpaceLimits;
use crate::{FsError, Result};
use pool::dnode::{BPS_PER_INDIRECT, DNODE_BLOCK_SIZE, INDIRECT_BLOCK_SIZE};
use pool::{Pool, ReadBuf, Tx};
use std::sync::{Arc, RwLock};

/// The object holding a volume's blocks.
pub const VOLUME_OBJ: u64 = 1;
/// Its pool object type.
const OT_VOLUME: u8 = 64;
/// The object holding the volume's SCSI persistent-reservation state, made when it
/// is first stored: a u32 length, then that many bytes (the SCSI target's own
/// encoding).
pub const RESERVATIONS_OBJ: u64 = 2;
const OT_RESERVATIONS: u8 = 65;
/// The most reservation state a volume keeps.
pub const RESERVATIONS_MAX: usize = 256 * 1024 - 4;
pub const VOLBLOCKSIZE_MIN: u32 = 4096;
pub const VOLBLOCKSIZE_MAX: u32 = 128 * 1024;
pub const VOLBLOCKSIZE_DEFAULT: u32 = 16 * 1024;
/// Blocks `mapping_at` looks at, at most, in one call.
const MAPPING_SCAN_BLOCKS: u64 = 8192;
/// The largest volume: 2^50 bytes (1 PiB), as the largest file.
pub const VOLSIZE_MAX: u64 = crate::filesystem::MAX_FILE_SIZE;

/// Whether a write must be durable before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Durable at the next `flush` (a write-back cache, as a disk's).
    Cached,
    /// Durable when the call returns (SCSI FUA).
    Stable,
}

/// Checks a volume size and block size pair, as given at creation or resize.
pub fn check_geometry(volsize: u64, volblocksize: u32) -> Result<()> {
    if !(VOLBLOCKSIZE_MIN..=VOLBLOCKSIZE_MAX).contains(&volblocksize)
        || !volblocksize.is_power_of_two()
    {
        return Err(FsError::Invalid(format!(
            "volblocksize must be a power of two from 4K to 128K, not {volblocksize}"
        )));
    }
    if volsize == 0 || !volsize.is_multiple_of(volblocksize as u64) {
        return Err(FsError::Invalid(format!(
            "volsize must be a positive multiple of the volblocksize ({volblocksize}), \
             not {volsize}"
        )));
    }
    if volsize > VOLSIZE_MAX {
        return Err(FsError::Invalid(format!(
            "volsize must be at most {VOLSIZE_MAX} bytes (1P), not {volsize}"
        )));
    }
    Ok(())
}

/// What a fully written volume of this geometry takes: its blocks, every level of
/// indirect blocks above them (metadata is kept in two copies), and its dnode block.
/// Compression is not counted on: the data written may not compress.
pub fn thick_refreservation(volsize: u64, volblocksize: u32) -> u64 {
    let mut blocks = volsize.div_ceil(volblocksize as u64);
    let mut indirect = 0u64;
    while blocks > 1 {
        blocks = blocks.div_ceil(BPS_PER_INDIRECT);
        indirect += blocks * INDIRECT_BLOCK_SIZE as u64;
    }
    volsize + 2 * (indirect + DNODE_BLOCK_SIZE as u64)
}

pub struct Volume {
    pool: Arc<Pool>,
    os: u64,
    name: String,
    block_size: u32,
    state: RwLock<State>,
    limits: Arc<SpaceLimits>,
    /// Shared by writes, exclusive for `compare_and_write`.
    atomic: RwLock<()>,
}

#[derive(Debug, Clone)]
struct State {
    size: u64,
    props: EffectiveProps,
    /// Whether writes skip the space check: a refreservation covers every block.
    thick: bool,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume").field("name", &self.name).finish()
    }
}

impl Volume {
    /// Lays out a new volume in a fresh object set, inside the caller's transaction.
    pub(crate) fn format(
        tx: &Tx<'_>,
        os: u64,
        volblocksize: u32,
        props: &EffectiveProps,
    ) -> Result<()> {
        let obj = tx.create_object(
            os,
            OT_VOLUME,
            volblocksize,
            props.compression,
            props.checksum,
        )?;
        if obj != VOLUME_OBJ {
            return Err(FsError::Io(format!(
                "new object set {os} gave object {obj} where {VOLUME_OBJ} was expected"
            )));
        }
        Ok(())
    }

    /// Opens volume `name` (object set `os`); a snapshot is opened read-only.
    pub(crate) fn open(
        pool: Arc<Pool>,
        os: u64,
        name: &str,
        volsize: u64,
        props: EffectiveProps,
        limits: Arc<SpaceLimits>,
    ) -> Result<Arc<Volume>> {
        let info = pool.object_info(os, VOLUME_OBJ)?;
        if info.object_type != OT_VOLUME {
            return Err(FsError::Io(format!(
                "{name}: object {VOLUME_OBJ} is of type {}, not a volume's",
                info.object_type
            )));
        }
        check_geometry(volsize, info.block_size)?;
        let v = Arc::new(Volume {
            pool,
            os,
            name: name.to_string(),
            block_size: info.block_size,
            state: RwLock::new(State {
                size: volsize,
                thick: false,
                props: props.clone(),
            }),
            limits,
            atomic: RwLock::new(()),
        });
        v.set_props(volsize, props)?;
        Ok(v)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn objset(&self) -> u64 {
        self.os
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.state.read().unwrap().size
    }

    /// Its block size (`volblocksize`): the unit of space, of holes and of
    /// read-modify-write.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn props(&self) -> EffectiveProps {
        self.state.read().unwrap().props.clone()
    }

    /// The effective `sync` property, read in place (the write path asks on every
    /// command; `props()` would clone every property).
    fn sync(&self) -> SyncMode {
        self.state.read().unwrap().props.sync
    }

    pub fn readonly(&self) -> bool {
        self.state.read().unwrap().props.readonly
    }

    /// Whether a block protocol should present a volatile write cache (SCSI WCE=1):
    /// only with sync=disabled, which promises nothing. Otherwise its writes are to be
    /// durable when answered (write-through, group-committed through the intent log):
    /// a write answered into a volatile cache and lost in a crash of the daemon would
    /// be covered by the next SYNCHRONIZE CACHE the restarted daemon answers, and the
    /// initiator could never tell (the kernel-initiator test found exactly that).
    pub fn write_cache(&self) -> bool {
        self.state.read().unwrap().props.sync == SyncMode::Disabled
    }

    /// Whether a write that runs out of space can fail (a sparse volume).
    pub fn is_sparse(&self) -> bool {
        !self.state.read().unwrap().thick
    }

    /// Takes new properties and size (after a `set` or a resize); a new compression
    /// or checksum applies to blocks written from now on.
    pub(crate) fn set_props(&self, volsize: u64, props: EffectiveProps) -> Result<()> {
        let thick = props.refreservation >= thick_refreservation(volsize, self.block_size);
        let info = self.pool.object_info(self.os, VOLUME_OBJ)?;
        let codec_changed =
            info.compression != props.compression || info.checksum != props.checksum;
        if codec_changed && !props.readonly && !self.name.contains('@') {
            let tx = self.pool.begin(0)?;
            tx.set_codec(self.os, VOLUME_OBJ, props.compression, props.checksum)?;
        }
        let mut st = self.state.write().unwrap();
        assert!(
            volsize >= st.size,
            "a volume only grows ({} to {volsize})",
            st.size
        );
        *st = State {
            size: volsize,
            props,
            thick,
        };
        Ok(())
    }

    /// Checks that `[offset, offset + len)` lies inside the volume.
    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.size();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(FsError::Invalid(format!(
                "bytes {offset}+{len} lie beyond the end of volume {} ({size} bytes)",
                self.name
            ))),
        }
    }

    fn writable(&self) -> Result<()> {
        if self.readonly() || self.name.contains('@') {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Reads `len` bytes at `offset` as slices of the cache's buffers; holes read
    /// as zeros.
    pub fn read(&self, offset: u64, len: usize) -> Result<ReadBuf> {
        self.check_range(offset, len as u64)?;
        // Shared: a read never sees half of an atomic write or update.
        let _shared = self.atomic.read().unwrap();
        Ok(self.pool.read_parts(self.os, VOLUME_OBJ, offset, len)?)
    }

    /// `read` answered from memory alone, or `None` when a device read is needed.
    pub fn read_cached(&self, offset: u64, len: usize) -> Result<Option<ReadBuf>> {
        self.check_range(offset, len as u64)?;
        Ok(self
            .pool
            .read_parts_cached(self.os, VOLUME_OBJ, offset, len)?)
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, offset: u64, data: &[u8], durability: Durability) -> Result<()> {
        {
            let _shared = self.atomic.read().unwrap();
            self.write_unlocked(offset, data)?;
        }
        self.settle(durability)
    }

    fn write_unlocked(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.writable()?;
        self.check_range(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let tx = self.begin_adding(data.len() as u64)?;
        tx.write(self.os, VOLUME_OBJ, offset, data)?;
        Ok(())
    }

    /// Writes `data` at `offset` as one step: no read sees part of it, and after a
    /// crash all of it is there or none (one transaction). For SCSI WRITE ATOMIC.
    pub fn write_atomic(&self, offset: u64, data: &[u8], durability: Durability) -> Result<()> {
        {
            let _exclusive = self.atomic.write().unwrap();
            self.write_unlocked(offset, data)?;
        }
        self.settle(durability)
    }

    /// Reads `len` bytes at `offset`, lets `change` change them, and writes them
    /// back, with no other write or read in between (SCSI ORWRITE).
    pub fn update(
        &self,
        offset: u64,
        len: usize,
        change: impl FnOnce(&mut [u8]),
        durability: Durability,
    ) -> Result<()> {
        self.writable()?;
        self.check_range(offset, len as u64)?;
        {
            let _exclusive = self.atomic.write().unwrap();
            let mut now = self
                .pool
                .read_parts(self.os, VOLUME_OBJ, offset, len)?
                .to_vec();
            change(&mut now);
            self.write_unlocked(offset, &now)?;
        }
        self.settle(durability)
    }

    /// Reads `expect.len()` bytes at `offset` and, when they equal `expect`, writes
    /// `data` (as long) there, with no other write in between. Answers the offset
    /// of the first byte that differed, having written nothing, or `None` when it
    /// wrote.
    pub fn compare_and_write(
        &self,
        offset: u64,
        expect: &[u8],
        data: &[u8],
        durability: Durability,
    ) -> Result<Option<u64>> {
        if expect.len() != data.len() {
            return Err(FsError::Invalid(format!(
                "compare and write of {} bytes with {} to compare",
                data.len(),
                expect.len()
            )));
        }
        self.writable()?;
        self.check_range(offset, expect.len() as u64)?;
        {
            let _exclusive = self.atomic.write().unwrap();
            let now = self
                .pool
                .read_parts(self.os, VOLUME_OBJ, offset, expect.len())?
                .to_vec();
            if let Some(at) = now.iter().zip(expect).position(|(a, b)| a != b) {
                return Ok(Some(offset + at as u64));
            }
            self.write_unlocked(offset, data)?;
        }
        self.settle(durability)?;
        Ok(None)
    }

    /// Unmaps `[offset, offset + len)`: it reads as zeros afterwards, and every
    /// whole block inside it gives its space back (the parts of blocks at its ends
    /// are written as zeros).
    pub fn unmap(&self, offset: u64, len: u64, durability: Durability) -> Result<()> {
        self.writable()?;
        self.check_range(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        {
            let _shared = self.atomic.read().unwrap();
            let tx = self.pool.begin(0)?;
            tx.free_range(self.os, VOLUME_OBJ, offset, len)?;
        }
        self.settle(durability)
    }

    /// From `offset` on: whether its block holds data (`true`) or is a hole, and how
    /// many bytes from `offset` (to the end of a block, at most `max`, not past the
    /// volume's end, and at most `MAPPING_SCAN_BLOCKS` blocks) are in the same state.
    /// What SCSI GET LBA STATUS reports.
    pub fn mapping_at(&self, offset: u64, max: u64) -> Result<(bool, u64)> {
        let size = self.size();
        if offset >= size {
            return Err(FsError::Invalid(format!(
                "byte {offset} lies beyond the end of volume {} ({size} bytes)",
                self.name
            )));
        }
        let bs = self.block_size as u64;
        let limit = max.min(size - offset);
        let first = offset / bs;
        let mapped = self.pool.block_mapped(self.os, VOLUME_OBJ, first)?;
        let mut end = (first + 1) * bs;
        // Bounded work per call: a caller asks again from where the answer ends.
        let scan_end = offset + limit.min(MAPPING_SCAN_BLOCKS * bs);
        while end < scan_end && self.pool.block_mapped(self.os, VOLUME_OBJ, end / bs)? == mapped {
            end += bs;
        }
        Ok((mapped, (end - offset).min(limit)))
    }

    /// The SCSI persistent-reservation state last stored (empty: none yet).
    pub fn load_reservations(&self) -> Result<Vec<u8>> {
        match self.pool.object_info(self.os, RESERVATIONS_OBJ) {
            Ok(i) if i.object_type == OT_RESERVATIONS => {}
            Ok(i) => {
                return Err(FsError::Io(format!(
                    "{}: object {RESERVATIONS_OBJ} is of type {}, not reservations",
                    self.name, i.object_type
                )))
            }
            Err(_) => return Ok(Vec::new()),
        }
        let head = self.pool.read(self.os, RESERVATIONS_OBJ, 0, 4)?;
        let len = u32::from_le_bytes(head[..4].try_into().unwrap()) as usize;
        if len > RESERVATIONS_MAX {
            return Err(FsError::Io(format!(
                "{}: stored reservations claim {len} bytes",
                self.name
            )));
        }
        Ok(self.pool.read(self.os, RESERVATIONS_OBJ, 4, len)?)
    }

    /// Stores the SCSI persistent-reservation state, durably (through the intent
    /// log) before it returns, whatever the sync property: reservations fence other
    /// hosts, and a lost one would let a fenced host write. A snapshot keeps the
    /// state with the blocks, so a rollback brings back the reservations of then.
    pub fn store_reservations(&self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > RESERVATIONS_MAX {
            return Err(FsError::Invalid(format!(
                "{} bytes of reservations exceed {RESERVATIONS_MAX}",
                bytes.len()
            )));
        }
        self.writable()?;
        {
            let _shared = self.atomic.read().unwrap();
            let tx = self.pool.begin(bytes.len() as u64 + 4)?;
            if self.pool.object_info(self.os, RESERVATIONS_OBJ).is_err() {
                let obj = tx.create_object(
                    self.os,
                    OT_RESERVATIONS,
                    (RESERVATIONS_MAX + 4) as u32,
                    pool::compress::Compression::Lz4,
                    pool::checksum::ChecksumKind::Fletcher4,
                )?;
                if obj != RESERVATIONS_OBJ {
                    return Err(FsError::Io(format!(
                        "{}: reservations got object {obj}, not {RESERVATIONS_OBJ}",
                        self.name
                    )));
                }
            }
            let mut record = (bytes.len() as u32).to_le_bytes().to_vec();
            record.extend_from_slice(bytes);
            tx.write(self.os, RESERVATIONS_OBJ, 0, &record)?;
        }
        self.pool.log_commit()?;
        Ok(())
    }

    /// Makes every write answered so far durable (SCSI SYNCHRONIZE CACHE); one log
    /// commit serves concurrent callers.
    pub fn flush(&self) -> Result<()> {
        if self.sync() == SyncMode::Disabled {
            return Ok(());
        }
        self.pool.log_commit()?;
        Ok(())
    }

    /// After a change: commits the log when the caller or sync=always asks for it.
    fn settle(&self, durability: Durability) -> Result<()> {
        let stable = match self.sync() {
            SyncMode::Always => true,
            SyncMode::Disabled => false,
            SyncMode::Standard => durability == Durability::Stable,
        };
        if stable {
            self.pool.log_commit()?;
        }
        Ok(())
    }

    /// Begins a transaction for a write of `bytes`: a thick volume's needs no check
    /// (its refreservation holds the space), a sparse one's is admitted by the
    /// space limits.
    fn begin_adding(&self, bytes: u64) -> Result<Tx<'_>> {
        if !self.state.read().unwrap().thick {
            self.limits.admit(&self.pool, self.os, bytes)?;
        }
        Ok(self.pool.begin(bytes)?)
    }

    /// What the volume uses (snapshots and its refreservation included) and can
    /// still take.
    pub fn usage(&self) -> crate::space::Usage {
        self.limits.usage(&self.pool, self.os)
    }
}
