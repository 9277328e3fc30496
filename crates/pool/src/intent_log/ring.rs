//! Rings of log space and the blocks in them: writing a batch to every replica and
//! flushing it, sealing and verifying a block (layout in the module doc), and reading
//! a chain back as import does.

use super::*;

/// A ring of log space: the same byte range on each replica.
#[derive(Debug)]
pub struct Ring {
    pub kind: RingKind,
    /// (leaf, byte offset of the ring inside the leaf's data area)
    pub replicas: Vec<(Arc<Leaf>, u64)>,
    pub len: u64,
    /// One worker per replica, started on the first parallel commit; they exit when
    /// the ring (and so every sender) is dropped.
    pub workers: Mutex<Vec<std::sync::mpsc::Sender<ReplicaJob>>>,
}

/// Blocks to write at their ring positions, and where to say whether it worked.
pub type ReplicaJob = (
    Arc<Vec<(u64, Arc<AlignedBuf>)>>,
    std::sync::mpsc::Sender<bool>,
);

/// Writes the blocks to one replica, then flushes it; false if anything failed.
pub(super) fn replica_write(leaf: &Leaf, base: u64, blocks: &[(u64, Arc<AlignedBuf>)]) -> bool {
    leaf.is_usable()
        && blocks
            .iter()
            .all(|(pos, b)| leaf.write_direct(base + pos, b))
        && leaf.flush()
}

pub(super) fn spawn_replica_worker(
    i: usize,
    leaf: Arc<Leaf>,
    base: u64,
) -> std::sync::mpsc::Sender<ReplicaJob> {
    let (tx, rx) = std::sync::mpsc::channel::<ReplicaJob>();
    std::thread::Builder::new()
        .name(format!("log-replica-{i}"))
        .spawn(move || {
            for (blocks, done) in rx {
                let _ = done.send(replica_write(&leaf, base, &blocks));
            }
        })
        .expect("spawn log replica worker");
    tx
}

impl Ring {
    /// `Leaf::preallocate` of the ring's first `PREALLOCATE_MAX_BYTES` on every usable
    /// replica. It never changes what the ring holds, so it is safe on an imported
    /// ring too, before anything is logged to it. The error names the device.
    pub fn preallocate(&self) -> Result<(), String> {
        for (leaf, base) in self.replicas.iter().filter(|(l, _)| l.is_usable()) {
            leaf.preallocate(*base, self.len.min(PREALLOCATE_MAX_BYTES))
                .map_err(|e| format!("{}: {e}", leaf.path()))?;
        }
        Ok(())
    }

    pub(super) fn usable(&self) -> bool {
        self.len >= RING_MIN_BYTES && self.replicas.iter().any(|(l, _)| l.is_usable())
    }

    /// Where the block after one ending at `end` goes: blocks never straddle the end.
    pub(super) fn next_pos(&self, end: u64) -> u64 {
        if end + LOG_BLOCK_MAX as u64 > self.len {
            0
        } else {
            end
        }
    }

    /// Writes blocks to every usable replica and flushes them: true when at least one
    /// replica holds all of them durably. In parallel, the first replica is written by
    /// the calling thread and each other one by its own long-lived worker thread, so a
    /// commit costs one write and one flush of the slowest replica, no thread start,
    /// and no hand-off for the first replica.
    pub(super) fn write_and_flush(
        &self,
        blocks: Vec<(u64, Arc<AlignedBuf>)>,
        parallel: bool,
    ) -> bool {
        for (pos, b) in &blocks {
            assert!(pos + b.len() as u64 <= self.len, "log block past the ring");
        }
        if !parallel || self.replicas.len() == 1 {
            return self
                .replicas
                .iter()
                .map(|(leaf, base)| replica_write(leaf, *base, &blocks))
                .fold(false, |a, b| a | b);
        }
        let blocks = Arc::new(blocks);
        let mut workers = self.workers.lock().unwrap();
        if workers.is_empty() {
            *workers = self
                .replicas
                .iter()
                .enumerate()
                .skip(1)
                .map(|(i, (leaf, base))| spawn_replica_worker(i, leaf.clone(), *base))
                .collect();
        }
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let mut sent = 0;
        for w in workers.iter() {
            if w.send((blocks.clone(), done_tx.clone())).is_ok() {
                sent += 1;
            }
        }
        drop(workers);
        drop(done_tx);
        let (leaf, base) = &self.replicas[0];
        let first = replica_write(leaf, *base, &blocks);
        done_rx.iter().take(sent).fold(first, |a, b| a | b)
    }

    /// Reads the block at `pos` if some replica holds a valid one of this chain and seq.
    /// Returns (size, payload, ends a commit).
    pub(super) fn read_block(&self, pos: u64, guid: u64, seq: u64) -> Option<(u64, Vec<u8>, bool)> {
        if pos + SECTOR_SIZE as u64 > self.len {
            return None;
        }
        for (leaf, base) in &self.replicas {
            let mut head = AlignedBuf::zeroed(SECTOR_SIZE);
            if !leaf.read_direct(base + pos, &mut head) {
                continue;
            }
            let Some(size) = parse_header(&head, guid, seq) else {
                continue;
            };
            if pos + size as u64 > self.len {
                continue;
            }
            let mut block = AlignedBuf::zeroed(size);
            if size == SECTOR_SIZE {
                block.copy_from_slice(&head);
            } else if !leaf.read_direct(base + pos, &mut block) {
                continue;
            }
            if let Some((payload, end)) = verify_block(&block, guid, seq) {
                return Some((size as u64, payload, end));
            }
        }
        None
    }
}

pub(super) fn parse_header(b: &[u8], guid: u64, seq: u64) -> Option<usize> {
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if &b[0..8] != MAGIC || !(1..=VERSION).contains(&version) {
        return None;
    }
    let size = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    if u64_at(16) != guid
        || u64_at(24) != seq
        || !(SECTOR_SIZE..=LOG_BLOCK_MAX).contains(&size)
        || !size.is_multiple_of(SECTOR_SIZE)
    {
        return None;
    }
    Some(size)
}

pub(super) fn block_hash(head: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&head[..64]);
    h.update(payload);
    *h.finalize().as_bytes()
}

/// The payload of a valid block, and whether it ends a commit.
pub(super) fn verify_block(b: &[u8], guid: u64, seq: u64) -> Option<(Vec<u8>, bool)> {
    let size = parse_header(b, guid, seq)?;
    if size != b.len() {
        return None;
    }
    let n = u64::from_le_bytes(b[32..40].try_into().unwrap()) as usize;
    if n > size - BLOCK_HEADER {
        return None;
    }
    let payload = &b[BLOCK_HEADER..BLOCK_HEADER + n];
    if block_hash(b, payload) != b[64..96] {
        return None;
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    let flags = u32::from_le_bytes(b[56..60].try_into().unwrap());
    Some((
        payload.to_vec(),
        version == 1 || flags & FLAG_COMMIT_END != 0,
    ))
}

pub(super) fn seal_block(
    payload: &[u8],
    records: u64,
    max_txg: u64,
    guid: u64,
    seq: u64,
    commit_end: bool,
) -> AlignedBuf {
    let size = (BLOCK_HEADER + payload.len()).div_ceil(SECTOR_SIZE) * SECTOR_SIZE;
    assert!(size <= LOG_BLOCK_MAX);
    // Every byte is written below (header, payload, zeroed tail), so a recycled buffer
    // needs no zeroing first: zeroing the whole buffer class cost 3% of the server's
    // CPU at 8 sync writers.
    let mut b = AlignedBuf::for_overwrite(size);
    b[BLOCK_HEADER + payload.len()..].fill(0);
    b[60..64].fill(0);
    b[0..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(size as u32).to_le_bytes());
    b[16..24].copy_from_slice(&guid.to_le_bytes());
    b[24..32].copy_from_slice(&seq.to_le_bytes());
    b[32..40].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    b[40..48].copy_from_slice(&records.to_le_bytes());
    b[48..56].copy_from_slice(&max_txg.to_le_bytes());
    let flags = if commit_end { FLAG_COMMIT_END } else { 0 };
    b[56..60].copy_from_slice(&flags.to_le_bytes());
    b[BLOCK_HEADER..BLOCK_HEADER + payload.len()].copy_from_slice(payload);
    let h = block_hash(&b, payload);
    b[64..96].copy_from_slice(&h);
    debug_assert!(verify_block(&b, guid, seq).is_some());
    b
}

/// What import found of a chain: its records in order and its valid blocks.
#[derive(Debug, Default)]
pub struct ChainRead {
    /// The records of the chain's complete commits.
    pub records: Vec<(u64, LogOp)>,
    /// Valid blocks after the last complete commit: a commit the crash interrupted,
    /// never acknowledged; its records are left out, and the chain must not carry on
    /// after them (a later commit would seem to complete them).
    pub incomplete_tail: bool,
    /// (ring position, size, highest record txg) of each valid block, in order.
    pub blocks: Vec<(u64, u64, u64)>,
    /// Where the next block goes and its sequence number.
    pub end: u64,
    pub next_seq: u64,
}

/// Reads a chain from its header up to the first block that does not verify, keeping
/// the records of whole commits only: a commit's records span several blocks when it is
/// large, and a prefix of them would split a transaction.
pub fn read_chain(ring: &Ring, header: &LogHeader) -> ChainRead {
    let mut out = ChainRead::default();
    let mut commit: Vec<(u64, LogOp)> = Vec::new();
    let mut pos = ring.next_pos(header.start.min(ring.len));
    let mut seq = header.seq;
    // A chain cannot hold more blocks than fit in the ring.
    let max_blocks = ring.len / SECTOR_SIZE as u64;
    for _ in 0..max_blocks {
        let Some((size, payload, commit_end)) = ring.read_block(pos, header.guid, seq) else {
            break;
        };
        let mut records = Vec::new();
        let mut rest = &payload[..];
        while !rest.is_empty() {
            let Some((txg, op, used)) = LogOp::decode(rest) else {
                // A checksummed block that does not parse was written by a different
                // version: stop rather than replay half of it.
                records.clear();
                break;
            };
            records.push((txg, op));
            rest = &rest[used..];
        }
        if records.is_empty() && !payload.is_empty() {
            break;
        }
        let max_txg = records.iter().map(|r| r.0).max().unwrap_or(0);
        commit.extend(records);
        if commit_end {
            out.records.append(&mut commit);
        }
        out.blocks.push((pos, size, max_txg));
        pos = ring.next_pos(pos + size);
        seq += 1;
    }
    out.incomplete_tail = !commit.is_empty();
    out.end = pos;
    out.next_seq = seq;
    out
}
