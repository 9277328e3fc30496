//! RAID-Z stripe geometry: where each column of one block lives.
//!
//! A RAID-Z top-level vdev of `ncols` children presents one logical sector space of
//! `ncols * child_sectors` sectors. Logical sector `L` lives on child `L % ncols` at
//! child sector `L / ncols`. A block of `s` data sectors allocated at logical sector `b`
//! becomes a variable-width stripe: `nparity` parity columns followed by up to
//! `ncols - nparity` data columns, each a run of consecutive sectors on one child.
//!
//! Invariants (tested below):
//! - The columns of a block tile exactly the logical sectors `[b, b + tot)`, where
//!   `tot = s + nparity * rows`; nothing outside the allocation is ever touched, so two
//!   blocks never share a sector and every write is a whole stripe of its own (no
//!   read-modify-write, hence no write hole).
//! - Data columns hold contiguous chunks of the block in column order; the first `r`
//!   data columns are one sector longer when `s` is not a multiple of the data width.
//!   Parity columns are as long as the longest data column.
//! - The allocated size is `tot` rounded up to a multiple of `nparity + 1` sectors, so
//!   the free gaps left between blocks are always big enough for a one-sector block.

use crate::device::SECTOR_SIZE;

/// One column of a stripe: a run of sectors on one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Index of the child in the RAID-Z group.
    pub child: usize,
    /// Byte offset inside the child's data area.
    pub child_offset: u64,
    /// Bytes in this column (a multiple of the sector size).
    pub size: usize,
}

/// The stripe of one block: parity columns first, then data columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidzMap {
    pub nparity: usize,
    pub columns: Vec<Column>,
}

impl RaidzMap {
    pub fn parity_columns(&self) -> &[Column] {
        &self.columns[..self.nparity]
    }
    pub fn data_columns(&self) -> &[Column] {
        &self.columns[self.nparity..]
    }
}

fn sectors_of(bytes: u64) -> u64 {
    assert!(
        bytes.is_multiple_of(SECTOR_SIZE as u64),
        "size {bytes} not sector aligned"
    );
    bytes / SECTOR_SIZE as u64
}

/// Bytes to allocate for a block of `io_size` bytes (sector multiple).
pub fn raidz_asize(ncols: usize, nparity: usize, io_size: u64) -> u64 {
    assert!((1..=3).contains(&nparity) && ncols > nparity);
    let s = sectors_of(io_size);
    assert!(s > 0, "empty block");
    let data_width = (ncols - nparity) as u64;
    let rows = s.div_ceil(data_width);
    let tot = s + nparity as u64 * rows;
    let unit = nparity as u64 + 1;
    tot.div_ceil(unit) * unit * SECTOR_SIZE as u64
}

/// The stripe map of a block of `io_size` bytes at logical byte `offset`.
pub fn raidz_map(ncols: usize, nparity: usize, offset: u64, io_size: u64) -> RaidzMap {
    assert!((1..=3).contains(&nparity) && ncols > nparity);
    let sector = SECTOR_SIZE as u64;
    let b = sectors_of(offset);
    let s = sectors_of(io_size);
    assert!(s > 0, "empty block");
    let ncols_u = ncols as u64;
    let data_width = ncols_u - nparity as u64;
    let first = b % ncols_u;
    let row_offset = (b / ncols_u) * sector;
    let q = s / data_width;
    let r = s % data_width;
    let long_cols = if r == 0 { 0 } else { r + nparity as u64 };
    let used_cols = if q == 0 { long_cols } else { ncols_u };
    let columns = (0..used_cols)
        .map(|c| {
            let mut child = first + c;
            let mut child_offset = row_offset;
            if child >= ncols_u {
                child -= ncols_u;
                child_offset += sector;
            }
            let sectors = if c < long_cols { q + 1 } else { q };
            Column {
                child: child as usize,
                child_offset,
                size: (sectors * sector) as usize,
            }
        })
        .collect();
    RaidzMap { nparity, columns }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const S: u64 = SECTOR_SIZE as u64;

    #[test]
    fn columns_tile_the_allocation_exactly() {
        for ncols in 2..=16usize {
            for nparity in 1..=3usize {
                if ncols <= nparity {
                    continue;
                }
                for start in 0..(2 * ncols as u64) {
                    for sectors in 1..=(3 * ncols as u64 + 2) {
                        let map = raidz_map(ncols, nparity, start * S, sectors * S);
                        let asize = raidz_asize(ncols, nparity, sectors * S);
                        let mut covered = HashSet::new();
                        let mut data = 0;
                        for (i, col) in map.columns.iter().enumerate() {
                            for k in 0..(col.size as u64 / S) {
                                let logical =
                                    (col.child_offset / S + k) * ncols as u64 + col.child as u64;
                                assert!(covered.insert(logical), "sector used twice");
                                assert!(logical >= start && logical < start + asize / S);
                            }
                            if i >= nparity {
                                data += col.size as u64;
                            }
                        }
                        assert_eq!(data, sectors * S);
                        let longest = map.data_columns().iter().map(|c| c.size).max().unwrap();
                        for p in map.parity_columns() {
                            assert_eq!(p.size, longest);
                        }
                        assert_eq!(asize % ((nparity as u64 + 1) * S), 0);
                        // Contiguous: covered = [start, start + tot).
                        let tot = covered.len() as u64;
                        assert!((start..start + tot).all(|l| covered.contains(&l)));
                    }
                }
            }
        }
    }

    #[test]
    fn small_block_uses_one_sector_per_column() {
        let map = raidz_map(6, 2, 0, S);
        assert_eq!(map.columns.len(), 3);
        assert!(map.columns.iter().all(|c| c.size == S as usize));
        assert_eq!(raidz_asize(6, 2, S), 3 * S);
        // 128K over 4 data columns: 8 sectors each.
        let map = raidz_map(6, 2, 0, 128 * 1024);
        assert_eq!(map.columns.len(), 6);
        assert!(map.columns.iter().all(|c| c.size == 32 * 1024));
    }
}
