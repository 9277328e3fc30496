//! shoal's SCSI target: SPC-4 and SBC-3 command emulation over a volume
//! (`fs::Volume`), for any transport. The iSCSI crate hands it a command's CDB and
//! Data-Out bytes with the I_T nexus they came on, and sends back what it answers:
//! a status, Data-In bytes and sense data. It never touches a device (every byte goes
//! through the volume and so through the pool) and knows nothing of the transport.
//!
//! Why written here rather than borrowed: the SCSI target is where a block client's
//! correctness lives (what each CDB field means, which errors an initiator can act
//! on, reservations that clusters rely on), and it must answer exactly as initiators
//! and their conformance suite (libiscsi's `iscsi-test-cu`, see
//! `docs/planning/iscsi-test-cu-checklist.md`) expect.
//!
//! - `lu.rs`: one logical unit: dispatch, unit attentions, reservation checks.
//! - `block.rs`: the SBC commands that move or check blocks.
//! - `inquiry.rs`: standard INQUIRY and the VPD pages.
//! - `mode.rs`: MODE SENSE and MODE SELECT.
//! - `opcodes.rs`: the commands served, for REPORT SUPPORTED OPERATION CODES.
//! - `reservations.rs`: SPC-2 RESERVE/RELEASE and persistent reservations.
//! - `sense.rs`: sense data.
//! - `cdb.rs`: reading CDB fields.
//! - `fuzzing.rs`: the fuzz target's check, replayed in CI.

pub mod block;
pub mod cdb;
pub mod fuzzing;
pub mod inquiry;
pub mod lu;
pub mod mode;
pub mod opcodes;
pub mod reservations;
pub mod sense;

pub use lu::{LogicalUnit, LuConfig};
pub use sense::Sense;

/// SCSI status codes (SAM-5 5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Good = 0x00,
    CheckCondition = 0x02,
    ConditionMet = 0x04,
    Busy = 0x08,
    ReservationConflict = 0x18,
    TaskSetFull = 0x28,
}

/// What a command sends back to the initiator (Data-In): bytes it built (INQUIRY,
/// MODE SENSE...) or, for READ, the blocks as the pool holds them, so a read goes from
/// the ARC to the socket without being copied (see `pool::ReadBuf`).
#[derive(Debug, Clone)]
pub enum DataIn {
    Built(Vec<u8>),
    Blocks(pool::ReadBuf),
}

impl DataIn {
    pub fn len(&self) -> usize {
        match self {
            DataIn::Built(v) => v.len(),
            DataIn::Blocks(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as slices in order (one for built data).
    pub fn slices(&self) -> Vec<&[u8]> {
        match self {
            DataIn::Built(v) => vec![&v[..]],
            DataIn::Blocks(b) => b.slices().collect(),
        }
    }

    /// The bytes in one buffer (a copy for blocks; for tests and small answers).
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            DataIn::Built(v) => v.clone(),
            DataIn::Blocks(b) => b.to_vec(),
        }
    }
}

/// One command's answer. `data` is what the command returns (already cut to its
/// allocation length); the transport cuts it further to what the initiator expects
/// and reports the residual.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: Status,
    pub data: DataIn,
    pub sense: Option<Sense>,
}

impl Reply {
    pub fn good(data: Vec<u8>) -> Reply {
        Reply {
            status: Status::Good,
            data: DataIn::Built(data),
            sense: None,
        }
    }

    /// GOOD with the blocks a read found, uncopied.
    pub fn blocks(data: pool::ReadBuf) -> Reply {
        Reply {
            status: Status::Good,
            data: DataIn::Blocks(data),
            sense: None,
        }
    }

    pub fn check(sense: Sense) -> Reply {
        Reply {
            status: Status::CheckCondition,
            data: DataIn::Built(Vec::new()),
            sense: Some(sense),
        }
    }

    pub fn conflict() -> Reply {
        Reply {
            status: Status::ReservationConflict,
            data: DataIn::Built(Vec::new()),
            sense: None,
        }
    }
}

/// An I_T nexus: who is asking (the initiator port: for iSCSI the initiator name, ",i,0x"
/// and its ISID) through which target port (its relative port identifier).
/// Reservations and unit attentions are kept per nexus.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Nexus {
    pub initiator_port: String,
    pub target_port: u16,
}

/// REPORT LUNS (SPC-4 6.33), which the transport answers for its target: the LUNs in
/// `luns` (flat or peripheral addressing, as SAM-5 encodes LUNs below 256 and 16384).
pub fn report_luns(cdb: &[u8], luns: &[u64]) -> Reply {
    if cdb.len() < 12 {
        return Reply::check(Sense::invalid_cdb_field(0, None));
    }
    let select = cdb[2];
    if select > 2 && !(0x10..=0x12).contains(&select) {
        return Reply::check(Sense::invalid_cdb_field(2, None));
    }
    let alloc = u32::from_be_bytes([cdb[6], cdb[7], cdb[8], cdb[9]]) as usize;
    if alloc < 16 {
        return Reply::check(Sense::invalid_cdb_field(6, None));
    }
    let mut sorted = luns.to_vec();
    sorted.sort_unstable();
    // Well-known LUNs (select 1) are none; administrative ones (0x10..) likewise.
    let listed: Vec<u64> = if select == 0 || select == 2 || select == 0x11 {
        sorted
    } else {
        Vec::new()
    };
    let mut data = Vec::with_capacity(8 + 8 * listed.len());
    data.extend_from_slice(&((8 * listed.len()) as u32).to_be_bytes());
    data.extend_from_slice(&[0; 4]);
    for lun in listed {
        data.extend_from_slice(&encode_lun(lun));
    }
    data.truncate(alloc);
    Reply::good(data)
}

/// A LUN in SAM-5's 8-byte form: peripheral addressing below 256, flat below 16384.
pub fn encode_lun(lun: u64) -> [u8; 8] {
    let mut b = [0u8; 8];
    if lun < 256 {
        b[1] = lun as u8;
    } else {
        let l = (lun & 0x3FFF) as u16 | 0x4000;
        b[..2].copy_from_slice(&l.to_be_bytes());
    }
    b
}

/// The LUN number of SAM-5's 8-byte form (peripheral or flat addressing), or `None`
/// for a form this target does not use.
pub fn decode_lun(b: [u8; 8]) -> Option<u64> {
    match b[0] >> 6 {
        0 if b[0] == 0 => Some(b[1] as u64),
        1 => Some((u16::from_be_bytes([b[0], b[1]]) & 0x3FFF) as u64),
        _ => None,
    }
}

/// What a command addressed to a LUN the target does not have gets (SPC-4 4.6.4.1):
/// INQUIRY answers "no unit here" (peripheral qualifier 3, type 0x1F), REQUEST SENSE
/// and every other command 05/25/00 LOGICAL UNIT NOT SUPPORTED.
pub fn no_such_lun(cdb: &[u8]) -> Reply {
    if cdb.first() == Some(&0x12) && cdb.len() >= 6 && cdb[1] & 1 == 0 {
        let alloc = u16::from_be_bytes([cdb[3], cdb[4]]) as usize;
        let mut data = vec![0u8; 36];
        data[0] = 0x7F;
        data[2] = 0x06;
        data[3] = 0x12;
        data[4] = 31;
        data.truncate(alloc);
        return Reply::good(data);
    }
    Reply::check(Sense::new(sense::key::ILLEGAL_REQUEST, 0x25, 0x00))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luns_encode_and_decode_both_ways() {
        for lun in [0u64, 1, 255, 256, 1000, 16383] {
            assert_eq!(decode_lun(encode_lun(lun)), Some(lun));
        }
        assert_eq!(encode_lun(3), [0, 3, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode_lun(300)[0] >> 6, 1);
        assert_eq!(decode_lun([0xC0, 0, 0, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn report_luns_lists_sorted_and_truncates() {
        let mut cdb = [0u8; 12];
        cdb[0] = 0xA0;
        cdb[9] = 255;
        let r = report_luns(&cdb, &[2, 0]);
        assert_eq!(r.status, Status::Good);
        let data = r.data.to_vec();
        assert_eq!(&data[..4], &16u32.to_be_bytes());
        assert_eq!(data[9], 0);
        assert_eq!(data[17], 2);
        cdb[9] = 15;
        assert_eq!(report_luns(&cdb, &[0]).status, Status::CheckCondition);
        cdb[9] = 16;
        assert_eq!(report_luns(&cdb, &[0, 1]).data.len(), 16);
        cdb[2] = 7;
        assert_eq!(report_luns(&cdb, &[0]).status, Status::CheckCondition);
    }
}
