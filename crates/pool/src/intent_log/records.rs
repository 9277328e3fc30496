//! Log records: the in-memory `LogOp` of each change and its encoding inside a log
//! block (record header: type u8, 3 reserved, length u32, txg u64; then the fields).

use super::*;

/// One logged change, as kept in memory and as replayed.
#[derive(Debug, Clone, PartialEq)]
pub enum LogOp {
    CreateObjset {
        id: u64,
        name: String,
        props: String,
    },
    SetObjsetProps {
        id: u64,
        props: String,
    },
    DestroyObjset {
        id: u64,
    },
    CreateObject {
        os: u64,
        obj: u64,
        object_type: u8,
        block_size: u32,
        compression: Compression,
        checksum: ChecksumKind,
    },
    /// In memory `data` is empty and `len` says how much to read when logging; decoded
    /// from the log, `data` holds the bytes.
    Write {
        os: u64,
        obj: u64,
        offset: u64,
        len: u64,
        data: Vec<u8>,
    },
    FreeRange {
        os: u64,
        obj: u64,
        offset: u64,
        len: u64,
    },
    FreeObject {
        os: u64,
        obj: u64,
    },
    SetBonus {
        os: u64,
        obj: u64,
        bonus: Vec<u8>,
        generation: Option<u64>,
    },
    GrowBlockSize {
        os: u64,
        obj: u64,
        block_size: u32,
    },
    /// Only in the log: a whole block written to its final place ahead of its txg
    /// (`place_block`), named by pointer instead of copied. Never appended.
    WriteBlock {
        os: u64,
        obj: u64,
        offset: u64,
        bp: BlockPointer,
    },
}

impl LogOp {
    /// About how many log bytes this record takes (write data included; `placing`:
    /// long writes are logged mostly as block pointers).
    pub(super) fn log_bytes(&self, placing: bool) -> u64 {
        match self {
            LogOp::Write { len, .. } if placing && *len >= PLACE_MIN_BYTES => {
                let pointers = len.div_ceil(PLACE_MIN_BYTES) * POINTER_RECORD_BYTES;
                (pointers + 2 * WRITE_CHUNK_MAX as u64).min(*len)
            }
            LogOp::Write { len, .. } => {
                len + (RECORD_HEADER as u64 + 28) * len.div_ceil(WRITE_CHUNK_MAX as u64).max(1)
            }
            LogOp::CreateObjset { name, props, .. } => (64 + name.len() + props.len()) as u64,
            LogOp::SetObjsetProps { props, .. } => (64 + props.len()) as u64,
            LogOp::SetBonus { bonus, .. } => (64 + bonus.len()) as u64,
            _ => 64,
        }
    }

    /// Appends the encoded record; a write's `data` must be filled in.
    pub(super) fn encode(&self, txg: u64, out: &mut Vec<u8>) {
        if let LogOp::Write {
            os,
            obj,
            offset,
            data,
            ..
        } = self
        {
            return encode_write(txg, *os, *obj, *offset, data, out);
        }
        let start = out.len();
        let kind: u8 = match self {
            LogOp::CreateObjset { .. } => 1,
            LogOp::SetObjsetProps { .. } => 2,
            LogOp::DestroyObjset { .. } => 3,
            LogOp::CreateObject { .. } => 4,
            LogOp::Write { .. } => 5,
            LogOp::FreeRange { .. } => 6,
            LogOp::FreeObject { .. } => 7,
            LogOp::SetBonus { .. } => 8,
            LogOp::GrowBlockSize { .. } => 9,
            LogOp::WriteBlock { .. } => 10,
        };
        out.extend_from_slice(&[kind, 0, 0, 0, 0, 0, 0, 0]);
        out.extend_from_slice(&txg.to_le_bytes());
        let u64s = |out: &mut Vec<u8>, v: &[u64]| {
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
        match self {
            LogOp::CreateObjset { id, name, props } => {
                u64s(out, &[*id]);
                out.extend_from_slice(&(name.len() as u16).to_le_bytes());
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(&(props.len() as u32).to_le_bytes());
                out.extend_from_slice(props.as_bytes());
            }
            LogOp::SetObjsetProps { id, props } => {
                u64s(out, &[*id]);
                out.extend_from_slice(&(props.len() as u32).to_le_bytes());
                out.extend_from_slice(props.as_bytes());
            }
            LogOp::DestroyObjset { id } => u64s(out, &[*id]),
            LogOp::CreateObject {
                os,
                obj,
                object_type,
                block_size,
                compression,
                checksum,
            } => {
                u64s(out, &[*os, *obj]);
                out.extend_from_slice(&[*object_type, checksum.code(), compression.code()]);
                out.extend_from_slice(&block_size.to_le_bytes());
            }
            LogOp::Write { .. } => unreachable!("encoded by encode_write"),
            LogOp::FreeRange {
                os,
                obj,
                offset,
                len,
            } => u64s(out, &[*os, *obj, *offset, *len]),
            LogOp::FreeObject { os, obj } => u64s(out, &[*os, *obj]),
            LogOp::SetBonus {
                os,
                obj,
                bonus,
                generation,
            } => {
                u64s(out, &[*os, *obj]);
                out.push(generation.is_some() as u8);
                u64s(out, &[generation.unwrap_or(0)]);
                out.extend_from_slice(&(bonus.len() as u16).to_le_bytes());
                out.extend_from_slice(bonus);
            }
            LogOp::GrowBlockSize {
                os,
                obj,
                block_size,
            } => {
                u64s(out, &[*os, *obj]);
                out.extend_from_slice(&block_size.to_le_bytes());
            }
            LogOp::WriteBlock {
                os,
                obj,
                offset,
                bp,
            } => {
                u64s(out, &[*os, *obj, *offset]);
                out.extend_from_slice(&bp.to_bytes());
            }
        }
        let len = (out.len() - start) as u32;
        out[start + 4..start + 8].copy_from_slice(&len.to_le_bytes());
    }

    /// Decodes one record from the front of `b`: (txg, op, bytes used).
    pub(super) fn decode(b: &[u8]) -> Option<(u64, LogOp, usize)> {
        if b.len() < RECORD_HEADER {
            return None;
        }
        let len = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        if len < RECORD_HEADER || len > b.len() {
            return None;
        }
        let txg = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let mut r = Reader {
            b: &b[RECORD_HEADER..len],
        };
        let op = match b[0] {
            1 => {
                let id = r.u64()?;
                let n = r.u16()? as usize;
                let name = String::from_utf8(r.take(n)?.to_vec()).ok()?;
                let n = r.u32()? as usize;
                let props = String::from_utf8(r.take(n)?.to_vec()).ok()?;
                LogOp::CreateObjset { id, name, props }
            }
            2 => {
                let id = r.u64()?;
                let n = r.u32()? as usize;
                let props = String::from_utf8(r.take(n)?.to_vec()).ok()?;
                LogOp::SetObjsetProps { id, props }
            }
            3 => LogOp::DestroyObjset { id: r.u64()? },
            4 => {
                let os = r.u64()?;
                let obj = r.u64()?;
                let t = r.take(3)?;
                let (object_type, ck, comp) = (t[0], t[1], t[2]);
                LogOp::CreateObject {
                    os,
                    obj,
                    object_type,
                    checksum: ChecksumKind::from_code(ck)?,
                    compression: Compression::from_code(comp)?,
                    block_size: r.u32()?,
                }
            }
            5 => {
                let os = r.u64()?;
                let obj = r.u64()?;
                let offset = r.u64()?;
                let n = r.u32()? as usize;
                let data = r.take(n)?.to_vec();
                LogOp::Write {
                    os,
                    obj,
                    offset,
                    len: n as u64,
                    data,
                }
            }
            6 => LogOp::FreeRange {
                os: r.u64()?,
                obj: r.u64()?,
                offset: r.u64()?,
                len: r.u64()?,
            },
            7 => LogOp::FreeObject {
                os: r.u64()?,
                obj: r.u64()?,
            },
            8 => {
                let os = r.u64()?;
                let obj = r.u64()?;
                let has = r.take(1)?[0] != 0;
                let g = r.u64()?;
                let n = r.u16()? as usize;
                LogOp::SetBonus {
                    os,
                    obj,
                    bonus: r.take(n)?.to_vec(),
                    generation: has.then_some(g),
                }
            }
            9 => LogOp::GrowBlockSize {
                os: r.u64()?,
                obj: r.u64()?,
                block_size: r.u32()?,
            },
            10 => LogOp::WriteBlock {
                os: r.u64()?,
                obj: r.u64()?,
                offset: r.u64()?,
                bp: BlockPointer::decode(r.take(BLKPTR_SIZE)?).ok()?,
            },
            _ => return None,
        };
        if !r.b.is_empty() {
            return None;
        }
        Some((txg, op, len))
    }
}

/// Appends a write record (type 5) for `data` at `offset`, at most `WRITE_CHUNK_MAX`.
pub(super) fn encode_write(
    txg: u64,
    os: u64,
    obj: u64,
    offset: u64,
    data: &[u8],
    out: &mut Vec<u8>,
) {
    assert!(data.len() <= WRITE_CHUNK_MAX, "write record too long");
    let len = (RECORD_HEADER + 28 + data.len()) as u32;
    out.extend_from_slice(&[5, 0, 0, 0]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&txg.to_le_bytes());
    for x in [os, obj, offset] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
}

pub(super) struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    pub(super) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
}
