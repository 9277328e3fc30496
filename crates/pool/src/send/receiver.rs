//! Receives a snapshot stream into a dataset: a full stream creates the dataset, an
//! incremental one applies on top of the dataset's latest snapshot, which must be the
//! stream's base (the same snapshot identity). Records are applied as ordinary
//! changes a stretch at a time: those between two checkpoints wait until the second
//! verifies (the hash of everything before it), so no damaged record is ever applied.
//! The snapshot is taken only after the end record verified. (Version 1 streams have
//! no checkpoints: their records are applied as they come.)
//!
//! A stream that is damaged, truncated, or does not apply leaves the target as it
//! was: a full receive destroys the dataset it created, an incremental rolls the
//! dataset back to the base snapshot. Like `zfs receive -F`, an incremental first
//! rolls the dataset back to the base, discarding changes made on the replica since.
//!
//! A resumable receive (`receive_with` and `Resumable`) instead keeps what arrived:
//! about once a second, after a checkpoint's stretch is applied, it commits and
//! reports the point reached (`ResumePoint`); a stream that starts there
//! (`writer::send_from`) later completes the receive without resending what arrived.
//! A crash in the middle is the same as a cut: what was committed stays, and the last
//! point reported is never ahead of it. Records are idempotent (an object written
//! again, a block rewritten, a range freed twice), so what arrived after the last
//! reported point and is sent again does no harm.
//!
//! Blocks arrive as the sender stored them and are stored so (`Pool::write_stored`):
//! a compressed block is never decompressed and compressed again, so it keeps the
//! sender's compression whatever the receiving object's property says (as
//! `zfs send -c` does). Only bytes whose stretch verified are applied, and those are
//! the bytes the sender's pool verified against its checksums when it read them; an
//! uncompressed block becomes a dirty block like any write (`Pool::write_block`),
//! compressed by the object's setting at the sync. Either way the buffer a payload
//! was read into (`Payload`) becomes the block, not a copy of it. Through
//! `input::StreamInput` (the CLI reading a pipe) the payload's bytes reach that
//! buffer straight from the kernel, but for the few a head's read brought along;
//! through the daemon they are copied once out of the HTTP body's chunks.

use super::{HashingReader, Position, Record, StreamHeader};
use crate::checksum::ChecksumKind;
use crate::compress::Compression;
use crate::storage::StoredBlock;
use crate::{Pool, PoolError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a resumable receive got to: the stream (by its snapshots' identities) and
/// the position a resumed stream starts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePoint {
    pub to_guid: u64,
    pub from_guid: u64,
    pub at: Position,
}

/// How often a resumable receive commits and reports its point, by default.
pub const RESUME_REPORT_EVERY: Duration = Duration::from_secs(1);

/// A receive that keeps what arrived when its stream ends early.
pub struct Resumable<'a> {
    /// The point the last receive into this dataset reported, which a resumed stream
    /// must start at; none: a resumed stream is refused.
    pub expect: Option<ResumePoint>,
    /// Called with each point reached once everything before it is committed.
    pub progress: &'a mut dyn FnMut(ResumePoint),
    /// At most one commit and report per this long (`RESUME_REPORT_EVERY`); each
    /// costs a transaction group.
    pub report_every: Duration,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReceiveSummary {
    pub dataset: u64,
    pub snapshot: u64,
    /// `dataset@snapshot`
    pub name: String,
    pub bytes: u64,
    pub objects: u64,
    pub freed_objects: u64,
    pub data_blocks: u64,
    pub incremental: bool,
    /// Streams applied by the request this answers (several for a replicated send);
    /// the other fields describe the last.
    #[serde(default = "one")]
    pub streams: u64,
}

fn one() -> u64 {
    1
}

impl ReceiveSummary {
    /// The answer for several streams received in turn: the last one's summary, with
    /// how many there were. None for no stream.
    pub fn of_all(mut all: Vec<ReceiveSummary>) -> Option<ReceiveSummary> {
        let streams = all.len() as u64;
        let mut last = all.pop()?;
        last.streams = streams;
        Some(last)
    }
}

fn refused(what: impl std::fmt::Display) -> PoolError {
    PoolError::InvalidArgument(format!("stream refused: {what}"))
}

/// Receives the stream on `input` into dataset `target` (see the module doc).
/// `check_props` vets the stream's dataset properties (owned by the layer above)
/// before anything changes.
pub fn receive(
    pool: &Pool,
    target: &str,
    input: &mut dyn std::io::Read,
    check_props: &dyn Fn(&str) -> Result<(), String>,
) -> Result<ReceiveSummary, PoolError> {
    receive_with(pool, target, input, check_props, None)
}

/// `receive`, resumable when `resumable` is given (see the module doc).
pub fn receive_with(
    pool: &Pool,
    target: &str,
    input: &mut dyn std::io::Read,
    check_props: &dyn Fn(&str) -> Result<(), String>,
    resumable: Option<Resumable<'_>>,
) -> Result<ReceiveSummary, PoolError> {
    let mut r = HashingReader::new(input);
    let header = StreamHeader::read(&mut r)?;
    check_props(&header.props).map_err(|e| refused(format!("its properties: {e}")))?;
    if header.snapshot.is_empty() || header.snapshot.contains(['/', '@']) {
        return Err(refused(format!("snapshot name '{}'", header.snapshot)));
    }
    let mut summary = ReceiveSummary {
        incremental: header.incremental(),
        name: format!("{target}@{}", header.snapshot),
        streams: 1,
        ..ReceiveSummary::default()
    };
    let (os, undo) = if let Some(at) = header.resume {
        let point = ResumePoint {
            to_guid: header.to_guid,
            from_guid: header.from_guid,
            at,
        };
        match &resumable {
            Some(r) if r.expect == Some(point) => {}
            Some(r) => {
                return Err(refused(format!(
                    "it resumes at object {} block {} of snapshot {:#x}; '{target}' expects {}",
                    at.obj,
                    at.blkid,
                    header.to_guid,
                    match r.expect {
                        Some(e) => format!(
                            "object {} block {} of snapshot {:#x}",
                            e.at.obj, e.at.blkid, e.to_guid
                        ),
                        None => "no resumed stream".into(),
                    }
                )))
            }
            None => {
                return Err(refused(
                    "a resumed stream continues a resumable receive, and this one is not",
                ))
            }
        }
        let os = pool
            .objset_id(target)
            .ok_or_else(|| PoolError::NotFound(format!("dataset '{target}'")))?;
        (os, None)
    } else if header.incremental() {
        let os = pool
            .objset_id(target)
            .ok_or_else(|| PoolError::NotFound(format!("dataset '{target}'")))?;
        let Some((base, _)) = pool.snapshot_names(os).last().cloned() else {
            return Err(refused(format!(
                "'{target}' has no snapshot to apply an incremental stream on"
            )));
        };
        if pool.snapshot_guid(base) != Some(header.from_guid) {
            return Err(refused(format!(
                "the latest snapshot of '{target}' is not the stream's base"
            )));
        }
        pool.snapshot_rollback(base)?;
        (os, Some(Undo::RollBack(base)))
    } else {
        if pool.objset_id(target).is_some() {
            return Err(PoolError::Exists(format!(
                "dataset '{target}' (a full stream creates it)"
            )));
        }
        let os = pool.create_objset(target, &header.props)?;
        (os, Some(Undo::Destroy(os)))
    };
    summary.dataset = os;
    let keep = resumable.is_some();
    let progress = resumable.map(|r| (r.progress, r.report_every));
    match apply(pool, os, &header, &mut r, &mut summary, progress) {
        Ok(()) => {
            summary.bytes = r.bytes;
            Ok(summary)
        }
        Err(e) => {
            // Leave the target as it was (a resumable receive keeps what arrived); the
            // stream's error is the one to report.
            let _ = match undo.filter(|_| !keep) {
                Some(Undo::Destroy(os)) => pool.sync().and_then(|_| pool.destroy_objset(os)),
                Some(Undo::RollBack(base)) => pool.snapshot_rollback(base),
                None => Ok(()),
            };
            let _ = pool.sync();
            Err(e)
        }
    }
}

enum Undo {
    Destroy(u64),
    RollBack(u64),
}

fn apply(
    pool: &Pool,
    os: u64,
    header: &StreamHeader,
    r: &mut HashingReader<'_>,
    summary: &mut ReceiveSummary,
    mut progress: Option<(&mut dyn FnMut(ResumePoint), Duration)>,
) -> Result<(), PoolError> {
    let mut applier = Applier {
        pool,
        os,
        block_sizes: HashMap::new(),
    };
    // Records since the last checkpoint, applied once the next one verifies.
    let mut pending: Vec<Record> = Vec::new();
    let mut reported: Option<Instant> = None;
    let buffered = header.version >= 2;
    loop {
        match Record::read(r)? {
            Record::Checkpoint { at, .. } => {
                for rec in pending.drain(..) {
                    applier.apply(rec, summary)?;
                }
                if let Some((report, every)) = progress.as_mut() {
                    if reported.is_none_or(|t| t.elapsed() >= *every) {
                        pool.sync()?;
                        report(ResumePoint {
                            to_guid: header.to_guid,
                            from_guid: header.from_guid,
                            at,
                        });
                        reported = Some(Instant::now());
                    }
                }
            }
            Record::End { next_object, .. } => {
                for rec in pending.drain(..) {
                    applier.apply(rec, summary)?;
                }
                pool.raise_next_object(os, next_object)?;
                if header.incremental() {
                    pool.set_objset_props(os, &header.props)?;
                }
                pool.sync()?;
                summary.snapshot =
                    pool.snapshot_create_received(os, &header.snapshot, header.to_guid)?;
                return Ok(());
            }
            rec if buffered => pending.push(rec),
            rec => applier.apply(rec, summary)?,
        }
    }
}

/// Applies records to one dataset.
struct Applier<'a> {
    pool: &'a Pool,
    os: u64,
    /// Block size of each object seen, for block ids to offsets.
    block_sizes: HashMap<u64, u32>,
}

impl Applier<'_> {
    fn apply(&mut self, rec: Record, summary: &mut ReceiveSummary) -> Result<(), PoolError> {
        let (pool, os) = (self.pool, self.os);
        let block_sizes = &mut self.block_sizes;
        match rec {
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
                let checksum = ChecksumKind::from_code(checksum)
                    .ok_or_else(|| refused(format!("object {obj}: checksum code {checksum}")))?;
                let compression = Compression::from_code(compression).ok_or_else(|| {
                    refused(format!("object {obj}: compression code {compression}"))
                })?;
                if obj == 0 || object_type == 0 {
                    return Err(refused(format!("object {obj} of type {object_type}")));
                }
                match pool.object_info(os, obj) {
                    Ok(info) => {
                        if info.block_size != block_size {
                            pool.begin(0)?.grow_block_size(os, obj, block_size)?;
                        }
                        if info.nblocks > nblocks {
                            let bs = block_size as u64;
                            pool.free_range(os, obj, nblocks * bs, (info.nblocks - nblocks) * bs)?;
                        }
                    }
                    Err(PoolError::NotFound(_)) => {
                        pool.begin(0)?.create_object_as(
                            os,
                            Some(obj),
                            object_type,
                            block_size,
                            compression,
                            checksum,
                        )?;
                    }
                    Err(e) => return Err(e),
                }
                pool.set_bonus(os, obj, &bonus, Some(generation))?;
                block_sizes.insert(obj, block_size);
                summary.objects += 1;
            }
            Record::FreeObjects { first, count } => {
                let end = first.saturating_add(count).min(pool.next_object(os)?);
                for obj in first.max(1)..end {
                    match pool.free_object(os, obj) {
                        Ok(()) => summary.freed_objects += 1,
                        Err(PoolError::NotFound(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Record::Data {
                obj,
                blkid,
                lsize,
                compression,
                payload,
            } => {
                let bs = *block_sizes
                    .get(&obj)
                    .ok_or_else(|| refused(format!("data for object {obj} before the object")))?;
                if lsize != bs {
                    return Err(refused(format!(
                        "object {obj} block {blkid}: {lsize} bytes in {bs}-byte blocks"
                    )));
                }
                let alg = Compression::from_code(compression)
                    .ok_or_else(|| refused(format!("compression code {compression}")))?;
                let offset = blkid
                    .checked_mul(bs as u64)
                    .ok_or_else(|| refused(format!("object {obj}: block id {blkid}")))?;
                if alg == Compression::Off {
                    if payload.len() != lsize as usize {
                        return Err(refused(format!(
                            "object {obj} block {blkid}: {} bytes uncompressed for {lsize}",
                            payload.len()
                        )));
                    }
                    if (lsize as usize).is_multiple_of(vdev::SECTOR_SIZE) {
                        // The buffer it was read into becomes the block (no padding:
                        // a whole number of sectors).
                        pool.write_block(os, obj, blkid, payload.into_padded())?;
                    } else {
                        // Blocks smaller than a sector (or not a whole number of
                        // them): the padded buffer is not the block.
                        pool.write(os, obj, offset, &payload)?;
                    }
                } else {
                    // Stored as it came: the stream's hash vouches for the bytes, and
                    // they are the bytes the sender's pool verified when it read them.
                    let psize = payload.len();
                    let block = StoredBlock::from_padded(alg, lsize, psize, payload.into_padded())
                        .map_err(|e| refused(format!("object {obj} block {blkid}: {e}")))?;
                    pool.write_stored(os, obj, blkid, Arc::new(block))?;
                }
                summary.data_blocks += 1;
            }
            Record::Free { obj, first, count } => {
                let bs = *block_sizes
                    .get(&obj)
                    .ok_or_else(|| refused(format!("holes in object {obj} before the object")))?
                    as u64;
                // Whole blocks only, however far the range reaches.
                let max_blocks = u64::MAX / bs;
                if first < max_blocks {
                    let count = count.min(max_blocks - first);
                    pool.free_range(os, obj, first * bs, count * bs)?;
                }
            }
            Record::End { .. } | Record::Checkpoint { .. } => {
                unreachable!("apply reads ends and checkpoints itself")
            }
        }
        Ok(())
    }
}
