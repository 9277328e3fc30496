//! The SBC-3 commands that move or check blocks: READ, WRITE, WRITE AND VERIFY and
//! VERIFY (6/10/12/16 as SBC defines them), WRITE SAME (10/16, with UNMAP), UNMAP,
//! COMPARE AND WRITE, ORWRITE(16), WRITE ATOMIC(16) (SBC-4), SYNCHRONIZE CACHE, PRE-FETCH, GET LBA STATUS, READ CAPACITY
//! (10/16) and READ DEFECT DATA.
//!
//! Every command checks its range before anything else: a range past the last block,
//! including a zero-length one that starts past it, is LBA OUT OF RANGE (05/21/00),
//! and a transfer over the advertised maximum is an invalid field. Protection
//! information is not offered, so a non-zero xPROTECT field is an invalid field. Every
//! write is durable before GOOD unless the volume presents a volatile write cache
//! (sync=disabled, `fs::Volume::write_cache`); then FUA still makes one durable, and
//! SYNCHRONIZE CACHE the rest.

use crate::cdb::{put_u32, put_u64, Cdb};
use crate::inquiry::{
    MAX_ATOMIC_BYTES, MAX_COMPARE_AND_WRITE_BLOCKS, MAX_TRANSFER_BYTES, MAX_UNMAP_BYTES,
    MAX_UNMAP_DESCRIPTORS, MAX_WRITE_SAME_BYTES,
};
use crate::lu::{sense_of, LogicalUnit};
use crate::sense::Sense;
use crate::Reply;
use fs::Durability;

/// Bytes WRITE SAME writes per volume call.
const WRITE_SAME_CHUNK: u64 = 1 << 20;

impl LogicalUnit {
    /// Checks `[lba, lba + blocks)` against the unit's size; answers its byte range.
    fn range(&self, lba: u64, blocks: u64) -> Result<(u64, u64), Sense> {
        let total = self.blocks();
        if lba >= total && !(blocks == 0 && lba == 0) {
            return Err(Sense::lba_out_of_range());
        }
        match lba.checked_add(blocks) {
            Some(end) if end <= total => {}
            _ => return Err(Sense::lba_out_of_range()),
        }
        let bs = self.config.block_size as u64;
        Ok((lba * bs, blocks * bs))
    }

    /// The protection field (byte 1, bits 7-5) must be zero: no protection information.
    fn no_protection(cdb: &Cdb) -> Result<(), Sense> {
        if cdb.len() > 6 && cdb.u8(1) & 0xE0 != 0 {
            return Err(Sense::invalid_cdb_field(1, Some(7)));
        }
        Ok(())
    }

    fn check_transfer(&self, blocks: u64, byte: u16) -> Result<(), Sense> {
        if blocks * self.config.block_size as u64 > MAX_TRANSFER_BYTES {
            return Err(Sense::invalid_cdb_field(byte, None));
        }
        Ok(())
    }

    /// The transfer length's byte in a READ/WRITE-style CDB, for the field pointer.
    fn length_byte(cdb: &Cdb) -> u16 {
        match cdb.len() {
            6 => 4,
            10 => 7,
            12 => 6,
            _ => 10,
        }
    }

    /// FUA, or no write cache to answer from (see `fs::Volume::write_cache`): durable
    /// before GOOD.
    fn durability(&self, cdb: &Cdb) -> Durability {
        if (cdb.len() > 6 && cdb.u8(1) & 0x08 != 0) || !self.volume.write_cache() {
            Durability::Stable
        } else {
            Durability::Cached
        }
    }

    /// After a change made of several volume calls, each `Cached` (UNMAP, WRITE
    /// SAME): one commit makes all of it durable, unless a write cache answers.
    fn settle(&self) -> Result<(), Sense> {
        if !self.volume.write_cache() {
            self.volume.flush().map_err(|e| sense_of(e, false))?;
        }
        Ok(())
    }

    /// LBA and length, with READ(6)/WRITE(6)'s 0 meaning 256.
    fn lba_len(cdb: &Cdb) -> (u64, u64) {
        let (lba, len) = cdb.lba_and_len();
        if cdb.len() == 6 && len == 0 {
            (lba, 256)
        } else {
            (lba, len)
        }
    }

    /// The checks every READ/WRITE/VERIFY-style command opens with (no protection
    /// information, the range inside the volume, the length within the transfer
    /// limit), answering the byte offset and length it addresses.
    fn transfer(&self, cdb: &Cdb) -> Result<(u64, u64), Sense> {
        Self::no_protection(cdb)?;
        let (lba, blocks) = Self::lba_len(cdb);
        let range = self.range(lba, blocks)?;
        self.check_transfer(blocks, Self::length_byte(cdb))?;
        Ok(range)
    }

    pub(crate) fn read(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let (offset, len) = self.transfer(cdb)?;
        if len == 0 {
            return Ok(Reply::good(Vec::new()));
        }
        let data = self
            .volume
            .read(offset, len as usize)
            .map_err(|e| sense_of(e, true))?;
        Ok(Reply::blocks(data))
    }

    /// The Data-Out a write of `len` bytes uses: all of it, or the whole blocks that
    /// came when fewer did (the transport reports the rest as a residual).
    fn payload<'a>(&self, data: &'a [u8], len: u64) -> &'a [u8] {
        if (data.len() as u64) >= len {
            &data[..len as usize]
        } else {
            let bs = self.config.block_size as usize;
            &data[..data.len() / bs * bs]
        }
    }

    fn writable(&self) -> Result<(), Sense> {
        match self.write_protected() {
            Some(s) => Err(s),
            None => Ok(()),
        }
    }

    pub(crate) fn write(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        let (offset, len) = self.transfer(cdb)?;
        self.writable()?;
        let payload = self.payload(data, len);
        if !payload.is_empty() {
            self.volume
                .write(offset, payload, self.durability(cdb))
                .map_err(|e| sense_of(e, false))?;
        }
        Ok(Reply::good(Vec::new()))
    }

    pub(crate) fn write_and_verify(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        let (offset, len) = self.transfer(cdb)?;
        self.writable()?;
        let payload = self.payload(data, len);
        if !payload.is_empty() {
            // The write is durable before it is read back: the verification is of
            // the medium, as the command asks.
            self.volume
                .write(offset, payload, Durability::Stable)
                .map_err(|e| sense_of(e, false))?;
            let back = self
                .volume
                .read(offset, payload.len())
                .map_err(|e| sense_of(e, true))?
                .to_vec();
            if let Some(at) = back.iter().zip(payload).position(|(a, b)| a != b) {
                return Err(Sense::miscompare(at as u64));
            }
        }
        Ok(Reply::good(Vec::new()))
    }

    /// VERIFY: BYTCHK 0 reads the blocks (checksums verify them on the way);
    /// BYTCHK 1 compares them with the Data-Out; BYTCHK 3 with one block repeated.
    pub(crate) fn verify(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        let bytchk = (cdb.u8(1) >> 1) & 0x03;
        let (offset, len) = self.transfer(cdb)?;
        if bytchk == 2 {
            return Err(Sense::invalid_cdb_field(1, Some(2)));
        }
        if len == 0 {
            return Ok(Reply::good(Vec::new()));
        }
        let medium = self
            .volume
            .read(offset, len as usize)
            .map_err(|e| sense_of(e, true))?
            .to_vec();
        let bs = self.config.block_size as usize;
        let expect: Vec<u8> = match bytchk {
            0 => return Ok(Reply::good(Vec::new())),
            1 => {
                if (data.len() as u64) < len {
                    return Err(Sense::param_list_length());
                }
                data[..len as usize].to_vec()
            }
            _ => {
                if data.len() < bs {
                    return Err(Sense::param_list_length());
                }
                data[..bs].repeat(len as usize / bs)
            }
        };
        match medium.iter().zip(&expect).position(|(a, b)| a != b) {
            Some(at) => Err(Sense::miscompare(at as u64)),
            None => Ok(Reply::good(Vec::new())),
        }
    }

    pub(crate) fn prefetch(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let (lba, blocks) = cdb.lba_and_len();
        self.range(lba, blocks)?;
        Ok(Reply::good(Vec::new()))
    }

    pub(crate) fn synchronize_cache(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let (lba, blocks) = cdb.lba_and_len();
        self.range(lba, blocks)?;
        self.volume.flush().map_err(|e| sense_of(e, false))?;
        Ok(Reply::good(Vec::new()))
    }

    /// WRITE SAME: one block of Data-Out (none with NDOB, meaning zeros) written over
    /// the range, which 0 blocks makes "to the end of the unit". With UNMAP the range
    /// is unmapped instead (unmapped blocks read as zeros).
    pub(crate) fn write_same(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        Self::no_protection(cdb)?;
        let flags = cdb.u8(1);
        let anchor = flags & 0x10 != 0;
        let unmap = flags & 0x08 != 0;
        let ndob = cdb.len() == 16 && flags & 0x01 != 0;
        if anchor {
            return Err(Sense::invalid_cdb_field(1, Some(4)));
        }
        let (lba, mut blocks) = cdb.lba_and_len();
        let bs = self.config.block_size as u64;
        if blocks == 0 {
            if lba >= self.blocks() {
                return Err(Sense::lba_out_of_range());
            }
            blocks = self.blocks() - lba;
        }
        let (offset, len) = self.range(lba, blocks)?;
        if len > MAX_WRITE_SAME_BYTES {
            return Err(Sense::invalid_cdb_field(Self::length_byte(cdb), None));
        }
        let block: Vec<u8> = if ndob {
            vec![0u8; bs as usize]
        } else {
            if data.len() as u64 != bs {
                return Err(Sense::invalid_cdb_field(Self::length_byte(cdb), None));
            }
            data.to_vec()
        };
        self.writable()?;
        // With UNMAP the range is deallocated whatever the block holds (as SBC-3 lets
        // a device do, and initiators and their conformance suite expect): it then
        // reads as zeros (LBPRZ).
        if unmap {
            self.volume
                .unmap(offset, len, Durability::Cached)
                .map_err(|e| sense_of(e, false))?;
            self.settle()?;
            return Ok(Reply::good(Vec::new()));
        }
        let per = (WRITE_SAME_CHUNK / bs).max(1);
        let chunk = block.repeat(per.min(blocks) as usize);
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len() as u64);
            self.volume
                .write(offset + done, &chunk[..n as usize], Durability::Cached)
                .map_err(|e| sense_of(e, false))?;
            done += n;
        }
        self.settle()?;
        Ok(Reply::good(Vec::new()))
    }

    /// UNMAP: each descriptor's range is unmapped; every descriptor is checked first,
    /// so a bad one leaves everything mapped as it was.
    pub(crate) fn unmap(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        if cdb.u8(1) & 0x01 != 0 {
            return Err(Sense::invalid_cdb_field(1, Some(0))); // ANCHOR
        }
        let len = cdb.u16(7) as usize;
        if len == 0 {
            return Ok(Reply::good(Vec::new()));
        }
        if len < 8 || data.len() < len {
            return Err(Sense::param_list_length());
        }
        let data = &data[..len];
        let desc_len = u16::from_be_bytes([data[2], data[3]]) as usize;
        if !desc_len.is_multiple_of(16) || 8 + desc_len > len {
            return Err(Sense::invalid_param_field(2));
        }
        let count = desc_len / 16;
        if count > MAX_UNMAP_DESCRIPTORS as usize {
            return Err(Sense::invalid_param_field(2));
        }
        let bs = self.config.block_size as u64;
        let mut ranges = Vec::with_capacity(count);
        for i in 0..count {
            let d = &data[8 + 16 * i..8 + 16 * (i + 1)];
            let lba = u64::from_be_bytes(d[..8].try_into().unwrap());
            let blocks = u32::from_be_bytes(d[8..12].try_into().unwrap()) as u64;
            if blocks * bs > MAX_UNMAP_BYTES {
                return Err(Sense::invalid_param_field((8 + 16 * i + 8) as u16));
            }
            if blocks == 0 {
                if lba > self.blocks() {
                    return Err(Sense::lba_out_of_range());
                }
                continue;
            }
            ranges.push(self.range(lba, blocks)?);
        }
        self.writable()?;
        for (offset, len) in ranges {
            self.volume
                .unmap(offset, len, Durability::Cached)
                .map_err(|e| sense_of(e, false))?;
        }
        self.settle()?;
        Ok(Reply::good(Vec::new()))
    }

    /// COMPARE AND WRITE: Data-Out is the blocks to compare, then as many to write;
    /// the compare and the write are one step against every other command.
    pub(crate) fn compare_and_write(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        Self::no_protection(cdb)?;
        let lba = cdb.u64(2);
        let blocks = cdb.u8(13) as u64;
        let (offset, len) = self.range(lba, blocks)?;
        if blocks > MAX_COMPARE_AND_WRITE_BLOCKS as u64 {
            return Err(Sense::invalid_cdb_field(13, None));
        }
        // The Data-Out must be exactly the blocks to compare and to write: a count
        // of 0 with data (256 does not fit the field) is as wrong as a short one.
        if data.len() as u64 != 2 * len {
            return Err(Sense::invalid_cdb_field(13, None));
        }
        if blocks == 0 {
            return Ok(Reply::good(Vec::new()));
        }
        self.writable()?;
        let (expect, new) = data.split_at(len as usize);
        match self
            .volume
            .compare_and_write(offset, expect, new, self.durability(cdb))
            .map_err(|e| sense_of(e, false))?
        {
            None => Ok(Reply::good(Vec::new())),
            Some(at) => Err(Sense::miscompare(at - offset)),
        }
    }

    /// ORWRITE(16): each byte of the range becomes itself OR the Data-Out's, in one
    /// step against every other command.
    pub(crate) fn or_write(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        Self::no_protection(cdb)?;
        let (lba, blocks) = cdb.lba_and_len();
        let (offset, len) = self.range(lba, blocks)?;
        self.check_transfer(blocks, 10)?;
        self.writable()?;
        let payload = self.payload(data, len);
        if payload.is_empty() {
            return Ok(Reply::good(Vec::new()));
        }
        self.volume
            .update(
                offset,
                payload.len(),
                |now| {
                    for (b, o) in now.iter_mut().zip(payload) {
                        *b |= o;
                    }
                },
                self.durability(cdb),
            )
            .map_err(|e| sense_of(e, false))?;
        Ok(Reply::good(Vec::new()))
    }

    /// WRITE ATOMIC(16): the blocks are written whole or not at all, and no read sees
    /// part of them; at most `MAX_ATOMIC_BYTES`, without an atomic boundary.
    pub(crate) fn write_atomic(&self, cdb: &Cdb, data: &[u8]) -> Result<Reply, Sense> {
        Self::no_protection(cdb)?;
        let lba = cdb.u64(2);
        let boundary = cdb.u16(10);
        let blocks = cdb.u16(12) as u64;
        let (offset, len) = self.range(lba, blocks)?;
        if boundary != 0 {
            return Err(Sense::invalid_cdb_field(10, None));
        }
        if len > MAX_ATOMIC_BYTES {
            return Err(Sense::invalid_cdb_field(12, None));
        }
        self.writable()?;
        if (data.len() as u64) < len {
            return Err(Sense::param_list_length());
        }
        if len > 0 {
            self.volume
                .write_atomic(offset, &data[..len as usize], self.durability(cdb))
                .map_err(|e| sense_of(e, false))?;
        }
        Ok(Reply::good(Vec::new()))
    }

    pub(crate) fn read_capacity10(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let pmi = cdb.u8(8) & 0x01 != 0;
        if !pmi && cdb.u32(2) != 0 {
            return Err(Sense::invalid_cdb_field(2, None));
        }
        let last = self.blocks().saturating_sub(1);
        let mut d = vec![0u8; 8];
        put_u32(&mut d, 0, last.min(u32::MAX as u64) as u32);
        put_u32(&mut d, 4, self.config.block_size);
        Ok(Reply::good(d))
    }

    pub(crate) fn read_capacity16(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let alloc = cdb.u32(10) as usize;
        let mut d = vec![0u8; 32];
        put_u64(&mut d, 0, self.blocks().saturating_sub(1));
        put_u32(&mut d, 8, self.config.block_size);
        // LBPPBE 0 (one logical block per physical block: the volume's block size
        // is reported as the optimal granularity in the block limits page instead),
        // LBPME (UNMAP is served) and LBPRZ (unmapped blocks read as zeros).
        d[14] = 0x80 | 0x40;
        d.truncate(alloc);
        Ok(Reply::good(d))
    }

    /// GET LBA STATUS: from the LBA asked for, runs of mapped and unmapped blocks.
    pub(crate) fn get_lba_status(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let lba = cdb.u64(2);
        let alloc = cdb.u32(10) as usize;
        if lba >= self.blocks() {
            return Err(Sense::lba_out_of_range());
        }
        let bs = self.config.block_size as u64;
        let room = alloc.saturating_sub(8) / 16;
        let mut descriptors = Vec::new();
        let mut at = lba;
        while descriptors.len() < room.clamp(1, 64) && at < self.blocks() {
            let max_blocks = (self.blocks() - at).min(u32::MAX as u64);
            let (mapped, bytes) = self
                .volume
                .mapping_at(at * bs, max_blocks * bs)
                .map_err(|e| sense_of(e, true))?;
            let n = bytes.div_ceil(bs).max(1);
            let mut d = [0u8; 16];
            put_u64(&mut d, 0, at);
            put_u32(&mut d, 8, n as u32);
            d[12] = if mapped { 0 } else { 1 };
            descriptors.push(d);
            at += n;
        }
        let mut data = vec![0u8; 8];
        put_u32(&mut data, 0, (4 + 16 * descriptors.len()) as u32);
        for d in descriptors {
            data.extend_from_slice(&d);
        }
        data.truncate(alloc);
        Ok(Reply::good(data))
    }

    /// READ DEFECT DATA: a volume has no defects; the list is empty.
    pub(crate) fn read_defect_data(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let (format, alloc) = if cdb.opcode() == 0x37 {
            (cdb.u8(2) & 0x07, cdb.u16(7) as usize)
        } else {
            (cdb.u8(1) & 0x07, cdb.u32(6) as usize)
        };
        let mut d = if cdb.opcode() == 0x37 {
            vec![0, cdb.u8(2) & 0x1F, 0, 0]
        } else {
            vec![0, cdb.u8(1) & 0x1F, 0, 0, 0, 0, 0, 0]
        };
        let _ = format;
        d.truncate(alloc);
        Ok(Reply::good(d))
    }
}
