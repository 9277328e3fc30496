//! Writes a snapshot stream: the snapshot's objects, or for an incremental only what
//! was born after the base snapshot (a subtree whose pointer's birth txg is not after
//! the base's is skipped without being read).
//!
//! Reads only the snapshot's blocks, which the snapshot keeps from being freed, so the
//! walk needs no lock while the dataset changes on; the snapshot itself is held
//! against destruction until the stream is written (`Pool::hold_snapshot`). The base
//! of an incremental needs no hold: only its txg and guid are read.
//!
//! A resumed stream (`send_from` with a position) walks the same way and leaves out
//! every record before the position, but for the object record of the object it
//! starts in, which the receiver needs again for that object's block size.

use super::{HashingWriter, Position, Record, StreamHeader, FLAG_INCREMENTAL, FLAG_RESUME};
use crate::blkptr::BlockPointer;
use crate::dnode::{Dnode, BPS_PER_INDIRECT, DNODES_PER_BLOCK, DNODE_SIZE};
use crate::objset::{bp_at, check_child, read_root};
use crate::storage::Storage;
use crate::{Pool, PoolError};
use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct SendSummary {
    /// Bytes of the stream, header to end record.
    pub bytes: u64,
    pub objects: u64,
    pub freed_object_ranges: u64,
    pub data_blocks: u64,
    /// Stored (compressed) bytes of the data blocks.
    pub data_bytes: u64,
    pub hole_ranges: u64,
}

/// What a walk of one tree finds, in block id order.
enum Change {
    Block(u64, BlockPointer),
    /// Blocks `[first, first + count)` are holes (reported only when `from_txg > 0`).
    Holes(u64, u64),
}

/// Writes snapshot `snapshot` (an object set id) to `out`: in full, or with `from` the
/// changes since that older snapshot of the same dataset.
pub fn send(
    pool: &Pool,
    snapshot: u64,
    from: Option<u64>,
    out: &mut dyn std::io::Write,
) -> Result<SendSummary, PoolError> {
    send_from(pool, snapshot, from, None, out)
}

/// `send`, or with `resume` the rest of that stream from a position a receive
/// reached (`receiver::ResumePoint`).
pub fn send_from(
    pool: &Pool,
    snapshot: u64,
    from: Option<u64>,
    resume: Option<Position>,
    out: &mut dyn std::io::Write,
) -> Result<SendSummary, PoolError> {
    let _held = pool.hold_snapshot(snapshot)?;
    let to = pool.snapshot_source(snapshot)?;
    let (from_txg, from_guid) = match from {
        None => (0, 0),
        Some(f) => {
            let base = pool.snapshot_source(f)?;
            if base.dataset != to.dataset {
                return Err(PoolError::InvalidArgument(format!(
                    "'{}' and '{}' are snapshots of different datasets",
                    base.name, to.name
                )));
            }
            if base.txg >= to.txg {
                return Err(PoolError::InvalidArgument(format!(
                    "the base '{}' is not older than '{}'",
                    base.name, to.name
                )));
            }
            (base.txg, base.guid)
        }
    };
    let mut flags = if from.is_some() { FLAG_INCREMENTAL } else { 0 };
    if resume.is_some() {
        flags |= FLAG_RESUME;
    }
    let header = StreamHeader {
        flags,
        to_guid: to.guid,
        from_guid,
        snapshot: to.name.split_once('@').map_or("", |(_, s)| s).to_string(),
        props: to.props.clone(),
        resume,
        version: super::STREAM_VERSION,
    };
    let start = resume.unwrap_or_default();
    let st: &Storage = &pool.storage;
    let mut w = HashingWriter::new(out, header.version);
    w.header(&header)?;
    let mut summary = SendSummary::default();
    let (meta, next_object) = read_root(st, to.root)?;
    let incremental = from_txg > 0;
    // Free object slots, coalesced into ranges.
    let mut free_run: Option<(u64, u64)> = None;
    let flush_free = |w: &mut HashingWriter, run: &mut Option<(u64, u64)>, s: &mut SendSummary| {
        if let Some((first, count)) = run.take() {
            s.freed_object_ranges += 1;
            w.record(&Record::FreeObjects { first, count })
        } else {
            Ok(())
        }
    };
    let mut dnode_changes = Vec::new();
    changed_blocks(st, meta.root, meta.levels, from_txg, &mut |c| {
        push_coalesced(&mut dnode_changes, c);
        Ok(())
    })?;
    for change in dnode_changes {
        match change {
            Change::Holes(first, count) => {
                let first_obj = first.saturating_mul(DNODES_PER_BLOCK);
                let end = first_obj.saturating_add(count.saturating_mul(DNODES_PER_BLOCK));
                // A resumed stream leaves out what came before its start.
                let first_obj = first_obj.max(start.obj);
                if first_obj < end {
                    extend_run(
                        &mut free_run,
                        first_obj,
                        end - first_obj,
                        &mut w,
                        &mut summary,
                    )?;
                }
            }
            Change::Block(blkid, _) if (blkid + 1) * DNODES_PER_BLOCK <= start.obj => {}
            Change::Block(blkid, bp) => {
                let block = st.read_block(&bp)?;
                for (slot, bytes) in block.bytes().chunks(DNODE_SIZE).enumerate() {
                    let obj = blkid * DNODES_PER_BLOCK + slot as u64;
                    if obj == 0 || obj < start.obj {
                        continue; // the dnode array itself, or sent before a resume
                    }
                    let d = Dnode::decode(bytes)?;
                    if d.is_free() {
                        if incremental {
                            extend_run(&mut free_run, obj, 1, &mut w, &mut summary)?;
                        }
                        continue;
                    }
                    flush_free(&mut w, &mut free_run, &mut summary)?;
                    let first_block = if obj == start.obj { start.blkid } else { 0 };
                    send_object(st, obj, &d, from_txg, first_block, &mut w, &mut summary)?;
                }
            }
        }
    }
    flush_free(&mut w, &mut free_run, &mut summary)?;
    summary.bytes = w.finish(next_object)?;
    Ok(summary)
}

/// Adds free objects to the pending run, writing the run first when not adjacent.
fn extend_run(
    run: &mut Option<(u64, u64)>,
    first: u64,
    count: u64,
    w: &mut HashingWriter,
    s: &mut SendSummary,
) -> Result<(), PoolError> {
    match run {
        Some((f, c)) if f.saturating_add(*c) == first => {
            *c = c.saturating_add(count);
            Ok(())
        }
        _ => {
            if let Some((f, c)) = run.take() {
                s.freed_object_ranges += 1;
                w.record(&Record::FreeObjects { first: f, count: c })?;
            }
            *run = Some((first, count));
            Ok(())
        }
    }
}

/// An object's records; with `first_block` > 0 (a resumed stream) only its blocks
/// from there on after the object record.
fn send_object(
    st: &Storage,
    obj: u64,
    d: &Dnode,
    from_txg: u64,
    first_block: u64,
    w: &mut HashingWriter,
    s: &mut SendSummary,
) -> Result<(), PoolError> {
    s.objects += 1;
    w.checkpoint_before(Position { obj, blkid: 0 })?;
    w.record(&Record::Object {
        obj,
        object_type: d.object_type,
        checksum: d.checksum.code(),
        compression: d.compression.code(),
        block_size: d.block_size,
        nblocks: d.nblocks,
        generation: d.generation,
        bonus: d.bonus.clone(),
    })?;
    if from_txg > 0 && (d.levels == 0 || d.root.is_hole()) {
        // No blocks now; whatever the base had goes.
        s.hole_ranges += 1;
        return w.record(&Record::Free {
            obj,
            first: 0,
            count: u64::MAX,
        });
    }
    let mut changes = Vec::new();
    changed_blocks(st, d.root, d.levels, from_txg, &mut |c| {
        let sent_before = match &c {
            Change::Block(blkid, _) | Change::Holes(blkid, _) => *blkid < first_block,
        };
        if !sent_before {
            push_coalesced(&mut changes, c);
        }
        Ok(())
    })?;
    // Runs of blocks are read together (`Storage::read_stored_batch`: adjacent blocks
    // in one device I/O), the next run while this one is written, and streamed in
    // block order.
    let mut pieces: Vec<Piece> = Vec::new();
    for c in changes {
        match (c, pieces.last_mut()) {
            (Change::Holes(first, count), _) => pieces.push(Piece::Holes(first, count)),
            (Change::Block(blkid, bp), Some(Piece::Run(run))) if run.bytes < READ_BATCH_BYTES => {
                run.push(blkid, bp)
            }
            (Change::Block(blkid, bp), _) => {
                let mut run = Run::default();
                run.push(blkid, bp);
                pieces.push(Piece::Run(run));
            }
        }
    }
    let runs = || {
        pieces.iter().filter_map(|p| match p {
            Piece::Run(run) => Some(run),
            Piece::Holes(..) => None,
        })
    };
    // One run read ahead by a helper thread when there is more than one.
    let ahead = runs().nth(1).is_some();
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if ahead {
            scope.spawn(move || {
                for run in runs() {
                    // The writer hung up: it failed, nothing more to read.
                    if tx.send(st.read_stored_batch(&run.bps)).is_err() {
                        break;
                    }
                }
            });
        }
        for piece in &pieces {
            match piece {
                Piece::Holes(first, count) => {
                    s.hole_ranges += 1;
                    w.record(&Record::Free {
                        obj,
                        first: *first,
                        count: *count,
                    })?;
                }
                Piece::Run(run) => {
                    let ios = if ahead {
                        rx.recv().expect("the reader sends every run")
                    } else {
                        st.read_stored_batch(&run.bps)
                    };
                    for ((blkid, bp), io) in run.blkids.iter().zip(&run.bps).zip(ios) {
                        let io = io?;
                        let payload = &io[..bp.psize as usize];
                        s.data_blocks += 1;
                        s.data_bytes += payload.len() as u64;
                        w.checkpoint_before(Position { obj, blkid: *blkid })?;
                        w.data(obj, *blkid, bp.lsize, bp.compression.code(), payload)?;
                    }
                }
            }
        }
        Ok(())
    })
}

/// A stretch of an object's stream: a run of blocks read together, or a hole range.
enum Piece {
    Run(Run),
    Holes(u64, u64),
}

/// Blocks read together: their ids, pointers, and stored bytes in all.
#[derive(Default)]
struct Run {
    blkids: Vec<u64>,
    bps: Vec<BlockPointer>,
    bytes: u64,
}

impl Run {
    fn push(&mut self, blkid: u64, bp: BlockPointer) {
        self.bytes += bp.io_size();
        self.blkids.push(blkid);
        self.bps.push(bp);
    }
}

/// How many bytes of blocks a send reads at once.
const READ_BATCH_BYTES: u64 = 8 << 20;

/// Appends a change, joining a hole range to the one before it when adjacent.
fn push_coalesced(changes: &mut Vec<Change>, c: Change) {
    if let (Some(Change::Holes(f, n)), Change::Holes(first, count)) = (changes.last_mut(), &c) {
        if f.saturating_add(*n) == *first {
            *n = n.saturating_add(*count);
            return;
        }
    }
    changes.push(c);
}

/// The blocks of a tree born after `from_txg`, and (when `from_txg > 0`) its holes
/// under indirect blocks born after it, in block id order.
fn changed_blocks(
    st: &Storage,
    root: BlockPointer,
    levels: u8,
    from_txg: u64,
    visit: &mut dyn FnMut(Change) -> Result<(), PoolError>,
) -> Result<(), PoolError> {
    fn walk(
        st: &Storage,
        bp: BlockPointer,
        level: u8,
        first: u64,
        from_txg: u64,
        visit: &mut dyn FnMut(Change) -> Result<(), PoolError>,
    ) -> Result<(), PoolError> {
        let span = BPS_PER_INDIRECT.saturating_pow(level as u32);
        if bp.is_hole() {
            return if from_txg > 0 {
                visit(Change::Holes(first, span))
            } else {
                Ok(())
            };
        }
        if bp.birth_txg <= from_txg {
            return Ok(());
        }
        if level == 0 {
            return visit(Change::Block(first, bp));
        }
        let block = st.read_block(&bp)?;
        let child_span = span / BPS_PER_INDIRECT;
        for i in 0..BPS_PER_INDIRECT {
            let child = bp_at(block.bytes(), i)?;
            check_child(level, &child)?;
            walk(
                st,
                child,
                level - 1,
                first + i * child_span,
                from_txg,
                visit,
            )?;
        }
        Ok(())
    }
    if levels == 0 {
        return Ok(());
    }
    walk(st, root, levels - 1, 0, from_txg, visit)
}
