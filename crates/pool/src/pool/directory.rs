//! The directory block: every object set's name, root, properties and snapshot
//! links, encoded and decoded (layout in the module doc of `pool`).

use super::*;

pub(super) fn encode_directory(entries: &[DirRecord], next_id: u64) -> Result<Vec<u8>, PoolError> {
    let mut b = Vec::with_capacity(4096);
    b.extend_from_slice(DIR_MAGIC);
    b.extend_from_slice(&DIR_VERSION.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    b.extend_from_slice(&next_id.to_le_bytes());
    for r in entries {
        b.extend_from_slice(&r.id.to_le_bytes());
        b.extend_from_slice(&r.root.to_bytes());
        b.extend_from_slice(&(r.name.len() as u16).to_le_bytes());
        b.extend_from_slice(r.name.as_bytes());
        b.extend_from_slice(&(r.props.len() as u32).to_le_bytes());
        b.extend_from_slice(r.props.as_bytes());
        b.push(r.snapshot_of.is_some() as u8);
        b.extend_from_slice(&r.snapshot_of.unwrap_or(0).to_le_bytes());
        b.extend_from_slice(&r.snap_txg.to_le_bytes());
        b.extend_from_slice(&r.deadlist.head.to_bytes());
        b.extend_from_slice(&r.deadlist.count.to_le_bytes());
        b.extend_from_slice(&r.deadlist.bytes.to_le_bytes());
        b.extend_from_slice(&r.guid.to_le_bytes());
        let holds = u16::try_from(r.holds.len())
            .map_err(|_| PoolError::InvalidArgument(format!("'{}': too many holds", r.name)))?;
        b.extend_from_slice(&holds.to_le_bytes());
        for (tag, unix) in &r.holds {
            assert!(
                !tag.is_empty() && tag.len() <= HOLD_TAG_MAX_BYTES,
                "hold tag {tag:?}"
            );
            b.push(tag.len() as u8);
            b.extend_from_slice(tag.as_bytes());
            b.extend_from_slice(&unix.to_le_bytes());
        }
    }
    if b.len() > DIR_MAX_BYTES {
        return Err(PoolError::NoSpace);
    }
    Ok(b)
}

/// Decodes a directory block: its entries, the next object set id, and whether the
/// entries carry their dead lists' sizes (version 3 on).
pub(super) fn decode_directory(b: &[u8]) -> Result<(Vec<DirRecord>, u64, bool), PoolError> {
    let bad = |w: &str| PoolError::Corrupt(format!("directory: {w}"));
    if b.len() < 24 || &b[0..8] != DIR_MAGIC {
        return Err(bad("magic"));
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if !(1..=DIR_VERSION).contains(&version) {
        return Err(bad("version"));
    }
    let count = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let next = u64::from_le_bytes(b[16..24].try_into().unwrap());
    let mut pos = 24;
    let mut take = |n: usize| -> Result<&[u8], PoolError> {
        if pos + n > b.len() {
            return Err(bad("truncated"));
        }
        pos += n;
        Ok(&b[pos - n..pos])
    };
    let mut out = Vec::with_capacity(count.min(10_000));
    for _ in 0..count {
        let id = u64::from_le_bytes(take(8)?.try_into().unwrap());
        let root = BlockPointer::decode(take(BLKPTR_SIZE)?)?;
        let nlen = u16::from_le_bytes(take(2)?.try_into().unwrap()) as usize;
        let name = String::from_utf8(take(nlen)?.to_vec()).map_err(|_| bad("name"))?;
        let plen = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
        let props = String::from_utf8(take(plen)?.to_vec()).map_err(|_| bad("props"))?;
        if id >= next {
            return Err(bad("object set id beyond next id"));
        }
        let mut r = DirRecord {
            id,
            name,
            root,
            props,
            snapshot_of: None,
            snap_txg: 0,
            deadlist: Deadlist::EMPTY,
            guid: 0,
            holds: BTreeMap::new(),
        };
        if version >= 2 {
            let kind = take(1)?[0];
            let origin = u64::from_le_bytes(take(8)?.try_into().unwrap());
            r.snapshot_of = match kind {
                0 => None,
                1 => Some(origin),
                _ => return Err(bad("entry kind")),
            };
            r.snap_txg = u64::from_le_bytes(take(8)?.try_into().unwrap());
            r.deadlist.head = BlockPointer::decode(take(BLKPTR_SIZE)?)?;
            r.deadlist.count = u64::from_le_bytes(take(8)?.try_into().unwrap());
        }
        if version >= 3 {
            r.deadlist.bytes = u64::from_le_bytes(take(8)?.try_into().unwrap());
        }
        if version >= 4 {
            r.guid = u64::from_le_bytes(take(8)?.try_into().unwrap());
        }
        if version >= 5 {
            let holds = u16::from_le_bytes(take(2)?.try_into().unwrap());
            for _ in 0..holds {
                let len = take(1)?[0] as usize;
                if len == 0 || len > HOLD_TAG_MAX_BYTES {
                    return Err(bad("hold tag length"));
                }
                let tag = String::from_utf8(take(len)?.to_vec()).map_err(|_| bad("hold tag"))?;
                let unix = u64::from_le_bytes(take(8)?.try_into().unwrap());
                r.holds.insert(tag, unix);
            }
            if !r.holds.is_empty() && r.snapshot_of.is_none() {
                return Err(bad("holds on a dataset"));
            }
        }
        out.push(r);
    }
    Ok((out, next, version >= 3))
}
