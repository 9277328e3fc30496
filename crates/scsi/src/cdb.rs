//! Reading CDB fields (big-endian, as SCSI encodes everything), with the length of
//! each CDB checked before any field is read: a short CDB is an invalid field, never a
//! panic.

use crate::sense::Sense;

/// The CDB length an operation code's group implies (SPC-4 4.2.5.1), or `None` for
/// the groups without a fixed length (variable-length and vendor-specific).
pub fn cdb_len(opcode: u8) -> Option<usize> {
    match opcode >> 5 {
        0 => Some(6),
        1 | 2 => Some(10),
        4 => Some(16),
        5 => Some(12),
        _ => None,
    }
}

/// A CDB known to be at least as long as its operation code's group says.
#[derive(Debug, Clone, Copy)]
pub struct Cdb<'a>(pub &'a [u8]);

impl<'a> Cdb<'a> {
    /// Checks the length; an empty or short CDB answers 05/24/00 at byte 0.
    pub fn new(bytes: &'a [u8]) -> Result<Cdb<'a>, Sense> {
        let op = *bytes
            .first()
            .ok_or_else(|| Sense::invalid_cdb_field(0, None))?;
        let need = cdb_len(op).unwrap_or(1);
        if bytes.len() < need {
            return Err(Sense::invalid_cdb_field(0, None));
        }
        Ok(Cdb(&bytes[..need.max(1)]))
    }

    pub fn opcode(&self) -> u8 {
        self.0[0]
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn u8(&self, at: usize) -> u8 {
        self.0[at]
    }

    pub fn u16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.0[at], self.0[at + 1]])
    }

    pub fn u32(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.0[at..at + 4].try_into().unwrap())
    }

    pub fn u64(&self, at: usize) -> u64 {
        u64::from_be_bytes(self.0[at..at + 8].try_into().unwrap())
    }

    /// The service action (low five bits of byte 1).
    pub fn service_action(&self) -> u8 {
        self.0[1] & 0x1F
    }

    /// (LBA, transfer length in blocks) of a READ, WRITE, VERIFY or similar command,
    /// by CDB size. The 6-byte form's length 0 is 0 here; READ(6) and WRITE(6) make
    /// it 256 themselves.
    pub fn lba_and_len(&self) -> (u64, u64) {
        match self.0.len() {
            6 => (
                ((self.0[1] as u64 & 0x1F) << 16) | self.u16(2) as u64,
                self.0[4] as u64,
            ),
            10 => (self.u32(2) as u64, self.u16(7) as u64),
            12 => (self.u32(2) as u64, self.u32(6) as u64),
            _ => (self.u64(2), self.u32(10) as u64),
        }
    }
}

/// Encodes a big-endian u16, u32 or u64 into `out` at `at`.
pub fn put_u16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

pub fn put_u32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

pub fn put_u64(out: &mut [u8], at: usize, v: u64) {
    out[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_fields() {
        assert_eq!(cdb_len(0x28), Some(10));
        assert_eq!(cdb_len(0x88), Some(16));
        assert_eq!(cdb_len(0xA8), Some(12));
        assert_eq!(cdb_len(0x08), Some(6));
        assert_eq!(cdb_len(0x7F), None);
        assert!(Cdb::new(&[]).is_err());
        assert!(Cdb::new(&[0x28, 0, 0]).is_err());
        let read6 = [0x08, 0x1F, 0xFF, 0xFE, 0, 0];
        assert_eq!(Cdb::new(&read6).unwrap().lba_and_len(), (0x1FFFFE, 0));
        let mut r16 = [0u8; 16];
        r16[0] = 0x88;
        r16[2..10].copy_from_slice(&u64::MAX.to_be_bytes());
        r16[13] = 9;
        assert_eq!(Cdb::new(&r16).unwrap().lba_and_len(), (u64::MAX, 9));
        // A longer buffer (transports pad to 16) is cut to the group's length.
        let mut padded = [0u8; 16];
        padded[0] = 0x28;
        padded[8] = 4;
        let c = Cdb::new(&padded).unwrap();
        assert_eq!((c.len(), c.lba_and_len()), (10, (0, 4)));
    }
}
