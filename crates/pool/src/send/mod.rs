//! Snapshot streams: a snapshot of a dataset, or the changes between two snapshots of
//! it, as a self-describing byte stream that another pool receives (`shoal send |
//! shoal receive`, and replication between daemons).
//!
//! A stream carries objects, not blocks: each object's dnode fields and bonus, and its
//! data blocks as stored (compressed blocks travel compressed), keyed by object id and
//! block id, so the receiving pool lays them out as it likes while every object keeps
//! its id (and so every NFS file handle stays the same on a replica). An incremental
//! stream carries only what was born after its base snapshot: the walk skips every
//! subtree whose pointer's birth txg is not after the base's txg.
//!
//! Integrity: every byte before the end record is hashed and the end record holds the
//! hash, so a damaged stream is refused at its end and a truncated one has none. The
//! hash is fletcher4 over the stream (`StreamHash`, from version 3), the pool's default
//! block checksum and ZFS's choice for its own send streams: any one changed word
//! always changes its first sum, and it runs at memory speed. blake3 (versions 1 and 2,
//! still read) was a quarter of the CPU of `send | receive` (perf, 2 GiB on
//! memory-backed devices), hashed on both sides; with fletcher4 the same transfer took
//! 2.1-2.3 s instead of 3.2-3.7, at half the user CPU. The hash guards against damage,
//! not against forgery: replication between appliances runs over TLS with credentials.
//! Every few MiB a checkpoint record holds the hash so far and the position the
//! stream has reached (object, block); the receiver applies the records of a stretch
//! only once the checkpoint after it verifies, so nothing damaged is ever applied, and
//! a receive cut short can be resumed from its last applied checkpoint by a stream
//! that starts there (`FLAG_RESUME`; `receiver.rs`). Layout byte by byte in
//! `docs/format.md` ("Snapshot streams"); little-endian throughout.

pub mod input;
pub mod receiver;
pub mod writer;

use crate::PoolError;
use vdev::AlignedBuf;

pub const STREAM_MAGIC: &[u8; 8] = b"SHOALSND";
/// Version 2 added checkpoints and resumed streams; version 3 hashes with fletcher4
/// instead of blake3. Versions 1 and 2 are still read.
pub const STREAM_VERSION: u32 = 3;

/// The stream hash of a version: blake3 up to version 2, fletcher4 from version 3.
#[derive(Clone)]
enum StreamHash {
    Blake3(Box<blake3::Hasher>),
    Fletcher4(crate::checksum::Fletcher4Stream),
}

impl StreamHash {
    fn of_version(version: u32) -> StreamHash {
        if version >= 3 {
            StreamHash::Fletcher4(crate::checksum::Fletcher4Stream::new())
        } else {
            StreamHash::Blake3(Box::default())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            StreamHash::Blake3(h) => {
                h.update(bytes);
            }
            StreamHash::Fletcher4(f) => f.update(bytes),
        }
    }

    /// The hash of everything so far (the stream goes on).
    fn value(&self) -> [u8; 32] {
        match self {
            StreamHash::Blake3(h) => *h.finalize().as_bytes(),
            StreamHash::Fletcher4(f) => f.value().0,
        }
    }
}
/// Header flag: the stream applies on top of the snapshot `from_guid` names.
pub const FLAG_INCREMENTAL: u32 = 1;
/// Header flag: the stream continues a receive cut short at the header's resume
/// position (the records before it are left out).
pub const FLAG_RESUME: u32 = 2;
/// Stream bytes between checkpoints (at least; one comes before the next object or
/// data record after this many).
pub const CHECKPOINT_BYTES: u64 = 4 << 20;

const REC_OBJECT: u8 = 1;
const REC_FREE_OBJECTS: u8 = 2;
const REC_DATA: u8 = 3;
const REC_FREE: u8 = 4;
const REC_END: u8 = 5;
const REC_CHECKPOINT: u8 = 6;

/// Where a stream has got to: the next record is object `obj`'s object record
/// (`blkid` 0) or its data at block `blkid`. A stream resumed there sends the object
/// record of `obj` again, then only its blocks from `blkid` on, then every later
/// object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Position {
    pub obj: u64,
    pub blkid: u64,
}

/// A data record up to its payload: type, object, block id, logical size,
/// compression, payload length.
fn data_head(obj: u64, blkid: u64, lsize: u32, compression: u8, psize: usize) -> [u8; 26] {
    let mut head = [0u8; 26];
    head[0] = REC_DATA;
    head[1..9].copy_from_slice(&obj.to_le_bytes());
    head[9..17].copy_from_slice(&blkid.to_le_bytes());
    head[17..21].copy_from_slice(&lsize.to_le_bytes());
    head[21] = compression;
    head[22..26].copy_from_slice(&(psize as u32).to_le_bytes());
    head
}

/// The longest name or property string a header may carry.
const MAX_HEADER_STRING: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    pub flags: u32,
    /// The snapshot this stream recreates.
    pub to_guid: u64,
    /// The snapshot an incremental applies on top of (0 for a full stream).
    pub from_guid: u64,
    /// The snapshot's own name (after the `@`).
    pub snapshot: String,
    /// The dataset's properties (JSON) as of the snapshot.
    pub props: String,
    /// With `FLAG_RESUME`: where the stream starts.
    pub resume: Option<Position>,
    /// The version read (streams are always written at `STREAM_VERSION`).
    pub version: u32,
}

/// One record after the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An object as of the snapshot: created on the receiver if new, else updated.
    Object {
        obj: u64,
        object_type: u8,
        checksum: u8,
        compression: u8,
        block_size: u32,
        nblocks: u64,
        generation: u64,
        bonus: Vec<u8>,
    },
    /// Objects `[first, first + count)` do not exist in the snapshot.
    FreeObjects { first: u64, count: u64 },
    /// Block `blkid` of `obj` as stored: `payload` is `psize` bytes in `compression`,
    /// `lsize` bytes once decompressed.
    Data {
        obj: u64,
        blkid: u64,
        lsize: u32,
        compression: u8,
        payload: Payload,
    },
    /// Blocks `[first, first + count)` of `obj` are holes in the snapshot.
    Free { obj: u64, first: u64, count: u64 },
    /// The end: the object id the next new object gets, and the hash of every byte of
    /// the stream before the hash itself.
    End { next_object: u64, hash: [u8; 32] },
    /// Everything before it verified (the hash of every byte before the hash itself);
    /// the next record starts at `at`.
    Checkpoint { at: Position, hash: [u8; 32] },
}

/// A data record's stored bytes, read straight into a sector-aligned buffer with
/// zeros after them to a whole sector, so the pool keeps that very buffer as the
/// block (`StoredBlock::from_padded`, `Pool::write_block`) instead of copying it.
#[derive(Clone)]
pub struct Payload {
    buf: AlignedBuf,
    len: usize,
}

impl Payload {
    /// A payload of `len` bytes, all to be overwritten (the padding after them is
    /// zeroed here).
    fn for_overwrite(len: usize) -> Payload {
        let mut buf = AlignedBuf::for_overwrite(crate::storage::sector_round(len as u64) as usize);
        buf[len..].fill(0);
        Payload { buf, len }
    }

    /// The buffer: the payload, then zeros up to a whole sector.
    pub fn into_padded(self) -> AlignedBuf {
        self.buf
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::ops::DerefMut for Payload {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len)
    }
}

fn corrupt(what: impl std::fmt::Display) -> PoolError {
    PoolError::InvalidArgument(format!("stream refused: {what}"))
}

impl StreamHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + self.snapshot.len() + self.props.len());
        b.extend_from_slice(STREAM_MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.to_guid.to_le_bytes());
        b.extend_from_slice(&self.from_guid.to_le_bytes());
        b.extend_from_slice(&(self.snapshot.len() as u32).to_le_bytes());
        b.extend_from_slice(self.snapshot.as_bytes());
        b.extend_from_slice(&(self.props.len() as u32).to_le_bytes());
        b.extend_from_slice(self.props.as_bytes());
        if let Some(p) = self.resume {
            b.extend_from_slice(&p.obj.to_le_bytes());
            b.extend_from_slice(&p.blkid.to_le_bytes());
        }
        b
    }

    pub fn read(r: &mut HashingReader<'_>) -> Result<StreamHeader, PoolError> {
        let mut fixed = [0u8; 32];
        r.read_exact(&mut fixed)?;
        if &fixed[0..8] != STREAM_MAGIC {
            return Err(corrupt("not a shoal snapshot stream (bad magic)"));
        }
        let version = u32::from_le_bytes(fixed[8..12].try_into().unwrap());
        if version == 0 || version > STREAM_VERSION {
            return Err(corrupt(format!(
                "stream version {version}; this shoal reads versions 1 to {STREAM_VERSION}"
            )));
        }
        r.hash_as_version(version, &fixed);
        let flags = u32::from_le_bytes(fixed[12..16].try_into().unwrap());
        let known = if version >= 2 {
            FLAG_INCREMENTAL | FLAG_RESUME
        } else {
            FLAG_INCREMENTAL
        };
        if flags & !known != 0 {
            return Err(corrupt(format!("unknown stream flags {flags:#x}")));
        }
        let to_guid = u64::from_le_bytes(fixed[16..24].try_into().unwrap());
        let from_guid = u64::from_le_bytes(fixed[24..32].try_into().unwrap());
        if (flags & FLAG_INCREMENTAL != 0) != (from_guid != 0) || to_guid == 0 {
            return Err(corrupt("snapshot identities do not match the stream kind"));
        }
        let snapshot = r.read_string()?;
        let props = r.read_string()?;
        let resume = if flags & FLAG_RESUME != 0 {
            Some(Position {
                obj: r.read_u64()?,
                blkid: r.read_u64()?,
            })
        } else {
            None
        };
        Ok(StreamHeader {
            flags,
            to_guid,
            from_guid,
            snapshot,
            props,
            resume,
            version,
        })
    }

    pub fn incremental(&self) -> bool {
        self.flags & FLAG_INCREMENTAL != 0
    }
}

impl Record {
    pub fn encode(&self, b: &mut Vec<u8>) {
        match self {
            Record::Object {
                obj,
                object_type,
                checksum,
                compression,
                block_size,
                nblocks,
                generation,
                bonus,
            } => {
                b.push(REC_OBJECT);
                b.extend_from_slice(&obj.to_le_bytes());
                b.extend_from_slice(&[*object_type, *checksum, *compression]);
                b.extend_from_slice(&block_size.to_le_bytes());
                b.extend_from_slice(&nblocks.to_le_bytes());
                b.extend_from_slice(&generation.to_le_bytes());
                b.extend_from_slice(&(bonus.len() as u16).to_le_bytes());
                b.extend_from_slice(bonus);
            }
            Record::FreeObjects { first, count } => {
                b.push(REC_FREE_OBJECTS);
                b.extend_from_slice(&first.to_le_bytes());
                b.extend_from_slice(&count.to_le_bytes());
            }
            Record::Data {
                obj,
                blkid,
                lsize,
                compression,
                payload,
            } => {
                b.extend_from_slice(&data_head(
                    *obj,
                    *blkid,
                    *lsize,
                    *compression,
                    payload.len(),
                ));
                b.extend_from_slice(payload);
            }
            Record::Free { obj, first, count } => {
                b.push(REC_FREE);
                b.extend_from_slice(&obj.to_le_bytes());
                b.extend_from_slice(&first.to_le_bytes());
                b.extend_from_slice(&count.to_le_bytes());
            }
            Record::End { next_object, hash } => {
                b.push(REC_END);
                b.extend_from_slice(&next_object.to_le_bytes());
                b.extend_from_slice(hash);
            }
            Record::Checkpoint { at, hash } => {
                b.push(REC_CHECKPOINT);
                b.extend_from_slice(&at.obj.to_le_bytes());
                b.extend_from_slice(&at.blkid.to_le_bytes());
                b.extend_from_slice(hash);
            }
        }
    }

    /// The next record; the end record's hash is checked against what was read
    /// before it.
    pub fn read(r: &mut HashingReader<'_>) -> Result<Record, PoolError> {
        let kind = r.read_u8()?;
        Ok(match kind {
            REC_OBJECT => {
                let obj = r.read_u64()?;
                let (object_type, checksum, compression) =
                    (r.read_u8()?, r.read_u8()?, r.read_u8()?);
                let block_size = r.read_u32()?;
                let nblocks = r.read_u64()?;
                let generation = r.read_u64()?;
                let len = r.read_u16()? as usize;
                if len > crate::dnode::BONUS_MAX {
                    return Err(corrupt(format!("object {obj}: bonus of {len} bytes")));
                }
                let mut bonus = vec![0u8; len];
                r.read_exact(&mut bonus)?;
                Record::Object {
                    obj,
                    object_type,
                    checksum,
                    compression,
                    block_size,
                    nblocks,
                    generation,
                    bonus,
                }
            }
            REC_FREE_OBJECTS => Record::FreeObjects {
                first: r.read_u64()?,
                count: r.read_u64()?,
            },
            REC_DATA => {
                let obj = r.read_u64()?;
                let blkid = r.read_u64()?;
                let lsize = r.read_u32()?;
                let compression = r.read_u8()?;
                let psize = r.read_u32()? as usize;
                if lsize > crate::dnode::MAX_BLOCK_SIZE || psize > lsize as usize {
                    return Err(corrupt(format!(
                        "object {obj} block {blkid}: {psize} bytes stored for {lsize}"
                    )));
                }
                let mut payload = Payload::for_overwrite(psize);
                r.read_exact(&mut payload)?;
                Record::Data {
                    obj,
                    blkid,
                    lsize,
                    compression,
                    payload,
                }
            }
            REC_FREE => Record::Free {
                obj: r.read_u64()?,
                first: r.read_u64()?,
                count: r.read_u64()?,
            },
            REC_END => {
                let next_object = r.read_u64()?;
                let expected = r.hash();
                let mut hash = [0u8; 32];
                r.read_exact(&mut hash)?;
                if hash != expected {
                    return Err(corrupt("the stream's checksum does not match (damaged)"));
                }
                Record::End { next_object, hash }
            }
            REC_CHECKPOINT => {
                let at = Position {
                    obj: r.read_u64()?,
                    blkid: r.read_u64()?,
                };
                let expected = r.hash();
                let mut hash = [0u8; 32];
                r.read_exact(&mut hash)?;
                if hash != expected {
                    return Err(corrupt(format!(
                        "the stream's checksum does not match before object {} block {} \
                         (damaged)",
                        at.obj, at.blkid
                    )));
                }
                Record::Checkpoint { at, hash }
            }
            k => return Err(corrupt(format!("unknown record kind {k}"))),
        })
    }
}

/// Reads a stream, hashing every byte; a stream that ends early is refused as
/// truncated.
pub struct HashingReader<'a> {
    inner: &'a mut dyn std::io::Read,
    hasher: StreamHash,
    pub bytes: u64,
}

impl<'a> HashingReader<'a> {
    pub fn new(inner: &'a mut dyn std::io::Read) -> HashingReader<'a> {
        HashingReader {
            inner,
            // Until the header names its version (`hash_as_version`).
            hasher: StreamHash::of_version(STREAM_VERSION),
            bytes: 0,
        }
    }

    /// Hashes with `version`'s hash from the start: `read` has read the header's
    /// fixed part, which says the version, and hands it over to be hashed again.
    fn hash_as_version(&mut self, version: u32, fixed: &[u8]) {
        debug_assert_eq!(self.bytes, fixed.len() as u64, "only the fixed header read");
        self.hasher = StreamHash::of_version(version);
        self.hasher.update(fixed);
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), PoolError> {
        self.inner.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                corrupt(format!("truncated after {} bytes", self.bytes))
            }
            _ => PoolError::Io(format!("reading the stream: {e}")),
        })?;
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        Ok(())
    }

    fn hash(&self) -> [u8; 32] {
        self.hasher.value()
    }

    fn read_u8(&mut self) -> Result<u8, PoolError> {
        let mut b = [0u8; 1];
        self.read_exact(&mut b)?;
        Ok(b[0])
    }

    fn read_u16(&mut self) -> Result<u16, PoolError> {
        let mut b = [0u8; 2];
        self.read_exact(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    fn read_u32(&mut self) -> Result<u32, PoolError> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn read_u64(&mut self) -> Result<u64, PoolError> {
        let mut b = [0u8; 8];
        self.read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn read_string(&mut self) -> Result<String, PoolError> {
        let len = self.read_u32()? as usize;
        if len > MAX_HEADER_STRING {
            return Err(corrupt(format!("a header string of {len} bytes")));
        }
        let mut b = vec![0u8; len];
        self.read_exact(&mut b)?;
        String::from_utf8(b).map_err(|_| corrupt("a header string is not UTF-8"))
    }
}

/// Data payloads at least this long are written without passing through the
/// writer's buffer (`HashingWriter::data`).
const DIRECT_PAYLOAD: usize = 16 << 10;
/// About how many bytes the writer hands to its output at once.
const WRITE_BYTES: usize = 1 << 20;

/// Writes all of `a` then all of `b`, in vectored writes while both have bytes left.
fn write_both(out: &mut dyn std::io::Write, mut a: &[u8], mut b: &[u8]) -> std::io::Result<()> {
    use std::io::IoSlice;
    while !a.is_empty() || !b.is_empty() {
        let written = if a.is_empty() {
            out.write(b)
        } else {
            out.write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
        };
        let n = match written {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    Ok(())
}

/// Writes a stream, hashing every byte for the checkpoints and the end record.
pub struct HashingWriter<'a> {
    inner: &'a mut dyn std::io::Write,
    hasher: StreamHash,
    buf: Vec<u8>,
    pub bytes: u64,
    /// `bytes` at the last checkpoint.
    checkpointed: u64,
}

impl<'a> HashingWriter<'a> {
    /// A writer of a stream whose header (written first) says `version`, so the hash
    /// is the one that version's readers check; senders always write
    /// `STREAM_VERSION`.
    pub fn new(inner: &'a mut dyn std::io::Write, version: u32) -> HashingWriter<'a> {
        HashingWriter {
            inner,
            hasher: StreamHash::of_version(version),
            buf: Vec::with_capacity(WRITE_BYTES),
            bytes: 0,
            checkpointed: 0,
        }
    }

    /// Writes a checkpoint before the record at `at` when enough was written since
    /// the last one.
    pub fn checkpoint_before(&mut self, at: Position) -> Result<(), PoolError> {
        if self.bytes - self.checkpointed < CHECKPOINT_BYTES {
            return Ok(());
        }
        let mut b = [0u8; 17];
        b[0] = REC_CHECKPOINT;
        b[1..9].copy_from_slice(&at.obj.to_le_bytes());
        b[9..17].copy_from_slice(&at.blkid.to_le_bytes());
        self.put(&b)?;
        let hash = self.hasher.value();
        self.put(&hash)?;
        self.checkpointed = self.bytes;
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), PoolError> {
        self.append(bytes);
        if self.buf.len() >= WRITE_BYTES {
            self.drain()?;
        }
        Ok(())
    }

    /// Hashes, counts and buffers `bytes`.
    fn append(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        self.buf.extend_from_slice(bytes);
    }

    fn drain(&mut self) -> Result<(), PoolError> {
        self.inner
            .write_all(&self.buf)
            .map_err(|e| PoolError::Io(format!("writing the stream: {e}")))?;
        self.buf.clear();
        Ok(())
    }

    pub fn header(&mut self, h: &StreamHeader) -> Result<(), PoolError> {
        self.put(&h.encode())
    }

    pub fn record(&mut self, r: &Record) -> Result<(), PoolError> {
        let mut b = Vec::new();
        r.encode(&mut b);
        self.put(&b)
    }

    /// A data record straight from the block's stored bytes (what `record` of a
    /// `Record::Data` writes, without building the record).
    ///
    /// A payload of `DIRECT_PAYLOAD` bytes or more is written from the block's own
    /// buffer, after what is buffered (one vectored write), instead of being copied
    /// into the buffer first: that copy was 5% of the CPU of `send | receive`.
    /// (Gathering several payloads into one vectored write, tried too, saved nothing
    /// measurable.)
    pub fn data(
        &mut self,
        obj: u64,
        blkid: u64,
        lsize: u32,
        compression: u8,
        payload: &[u8],
    ) -> Result<(), PoolError> {
        let head = data_head(obj, blkid, lsize, compression, payload.len());
        if payload.len() < DIRECT_PAYLOAD {
            self.put(&head)?;
            return self.put(payload);
        }
        self.append(&head);
        self.hasher.update(payload);
        self.bytes += payload.len() as u64;
        write_both(self.inner, &self.buf, payload)
            .map_err(|e| PoolError::Io(format!("writing the stream: {e}")))?;
        self.buf.clear();
        Ok(())
    }

    /// Writes the end record and flushes.
    pub fn finish(mut self, next_object: u64) -> Result<u64, PoolError> {
        let mut b = vec![REC_END];
        b.extend_from_slice(&next_object.to_le_bytes());
        self.put(&b)?;
        // The hash covers everything before it, the end record's own fields included.
        let hash = self.hasher.value();
        self.bytes += hash.len() as u64;
        self.buf.extend_from_slice(&hash);
        self.drain()?;
        self.inner
            .flush()
            .map_err(|e| PoolError::Io(format!("writing the stream: {e}")))?;
        Ok(self.bytes)
    }
}
