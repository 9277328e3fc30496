//! INQUIRY (SPC-4 6.6): the standard data and the vital product data pages.
//!
//! - 0x00 supported pages; 0x80 unit serial number (the identity in hex);
//! - 0x83 device identification: an NAA locally-assigned designator (type 3, the
//!   identity's 60 bits: stable across restarts and on every head, the same through
//!   every portal so multipath sees one unit), a T10 vendor designator, and the
//!   relative target port of the nexus asking;
//! - 0xB0 block limits, 0xB1 block device characteristics (not rotating), 0xB2
//!   logical block provisioning (UNMAP and WRITE SAME with UNMAP, unmapped blocks read
//!   as zeros; thick volumes are "resource provisioned", sparse ones "thin").

use crate::cdb::{put_u16, put_u32, put_u64, Cdb};
use crate::lu::LogicalUnit;
use crate::sense::Sense;
use crate::{Nexus, Reply};

pub const VENDOR: &str = "SHOAL";
pub const REVISION: &str = "0001";
/// Largest transfer of one READ or WRITE, in bytes (advertised in blocks).
pub const MAX_TRANSFER_BYTES: u64 = 8 << 20;
/// Largest UNMAP range and descriptor count, and WRITE SAME length, in bytes.
pub const MAX_UNMAP_BYTES: u64 = 256 << 20;
pub const MAX_UNMAP_DESCRIPTORS: u32 = 256;
/// At most one transfer's worth, so an initiator that checks a WRITE SAME by writing
/// the same range first can.
pub const MAX_WRITE_SAME_BYTES: u64 = MAX_TRANSFER_BYTES;
/// Largest WRITE ATOMIC, in bytes.
pub const MAX_ATOMIC_BYTES: u64 = 1 << 20;
/// Most blocks one COMPARE AND WRITE may name.
pub const MAX_COMPARE_AND_WRITE_BLOCKS: u8 = 255;

const PAGES: [u8; 6] = [0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2];

fn padded(text: &str, len: usize) -> Vec<u8> {
    let mut b: Vec<u8> = text
        .bytes()
        .filter(|c| (0x20..0x7F).contains(c))
        .take(len)
        .collect();
    b.resize(len, b' ');
    b
}

impl LogicalUnit {
    pub(crate) fn inquiry(&self, nexus: &Nexus, cdb: &Cdb) -> Result<Reply, Sense> {
        let evpd = cdb.u8(1) & 0x01 != 0;
        if cdb.u8(1) & 0xFE != 0 {
            return Err(Sense::invalid_cdb_field(1, Some(1)));
        }
        let page = cdb.u8(2);
        let alloc = cdb.u16(3) as usize;
        let mut data = if !evpd {
            if page != 0 {
                return Err(Sense::invalid_cdb_field(2, None));
            }
            self.standard_inquiry()
        } else {
            match page {
                0x00 => vpd(0x00, PAGES.to_vec()),
                0x80 => vpd(0x80, format!("{:016X}", self.config.identity).into_bytes()),
                0x83 => vpd(0x83, self.designators(nexus)),
                0xB0 => vpd(0xB0, self.block_limits()),
                0xB1 => {
                    let mut p = vec![0u8; 0x3C];
                    put_u16(&mut p, 0, 1); // medium rotation rate: not rotating
                    vpd(0xB1, p)
                }
                0xB2 => {
                    let mut p = vec![0u8; 4];
                    // LBPU, LBPWS, LBPWS10, LBPRZ (unmapped blocks read as zeros).
                    p[1] = 0x80 | 0x40 | 0x20 | 0x04;
                    p[2] = if self.volume.is_sparse() { 2 } else { 1 };
                    vpd(0xB2, p)
                }
                _ => return Err(Sense::invalid_cdb_field(2, None)),
            }
        };
        data.truncate(alloc);
        Ok(Reply::good(data))
    }

    fn standard_inquiry(&self) -> Vec<u8> {
        let mut d = vec![0u8; 74];
        d[0] = 0x00; // connected, direct access block device
        d[2] = 0x06; // SPC-4
        d[3] = 0x12; // HISUP, response data format 2
        d[4] = (d.len() - 5) as u8;
        d[7] = 0x02; // CMDQUE
        d[8..16].copy_from_slice(&padded(VENDOR, 8));
        d[16..32].copy_from_slice(&padded(&self.config.product, 16));
        d[32..36].copy_from_slice(&padded(REVISION, 4));
        // Version descriptors: SAM-5, iSCSI, SPC-4, SBC-3.
        for (i, v) in [0x00A0u16, 0x0960, 0x0460, 0x04C0].iter().enumerate() {
            put_u16(&mut d, 58 + 2 * i, *v);
        }
        d
    }

    fn designators(&self, nexus: &Nexus) -> Vec<u8> {
        let mut out = Vec::new();
        // NAA, locally assigned (type 3), binary, associated with the unit.
        out.extend_from_slice(&[0x01, 0x03, 0x00, 0x08]);
        out.extend_from_slice(&((3u64 << 60) | self.config.identity).to_be_bytes());
        // T10 vendor identification, ASCII.
        let t10 = [
            padded(VENDOR, 8),
            format!("{:016X}", self.config.identity).into_bytes(),
        ]
        .concat();
        out.extend_from_slice(&[0x02, 0x01, 0x00, t10.len() as u8]);
        out.extend_from_slice(&t10);
        // Relative target port (type 4), associated with the target port, iSCSI.
        out.extend_from_slice(&[0x51, 0x94, 0x00, 0x04, 0, 0]);
        out.extend_from_slice(&nexus.target_port.to_be_bytes());
        out
    }

    fn block_limits(&self) -> Vec<u8> {
        let bs = self.config.block_size as u64;
        let granularity = (self.volume.block_size() as u64 / bs) as u32;
        let mut p = vec![0u8; 0x3C];
        p[1] = MAX_COMPARE_AND_WRITE_BLOCKS;
        put_u16(&mut p, 2, granularity.min(u16::MAX as u32) as u16);
        put_u32(&mut p, 4, (MAX_TRANSFER_BYTES / bs) as u32);
        put_u32(&mut p, 8, (MAX_TRANSFER_BYTES / bs) as u32);
        put_u32(&mut p, 16, (MAX_UNMAP_BYTES / bs) as u32);
        put_u32(&mut p, 20, MAX_UNMAP_DESCRIPTORS);
        put_u32(&mut p, 24, granularity);
        put_u32(&mut p, 28, 0x8000_0000); // UGAVALID, alignment 0
        put_u64(&mut p, 32, MAX_WRITE_SAME_BYTES / bs);
        // WRITE ATOMIC: its largest transfer; no alignment, granularity or boundary.
        put_u32(&mut p, 40, (MAX_ATOMIC_BYTES / bs) as u32);
        p
    }
}

/// A VPD page: its code, length and `payload`.
fn vpd(page: u8, payload: Vec<u8>) -> Vec<u8> {
    let mut d = vec![0u8, page, 0, 0];
    put_u16(&mut d, 2, payload.len() as u16);
    d.extend_from_slice(&payload);
    d
}
