//! Sense data (SPC-4 4.5): what a CHECK CONDITION says went wrong. shoal answers in
//! fixed format (response code 0x70), as its CONTROL mode page reports D_SENSE=0, with
//! the sense-key specific field pointer (SKSV) naming the CDB or parameter byte at
//! fault, which initiators (and libiscsi's conformance suite) read to tell "this
//! field is invalid" from "this command is not implemented".

/// Sense keys used here.
pub mod key {
    pub const NO_SENSE: u8 = 0x0;
    pub const NOT_READY: u8 = 0x2;
    pub const MEDIUM_ERROR: u8 = 0x3;
    pub const HARDWARE_ERROR: u8 = 0x4;
    pub const ILLEGAL_REQUEST: u8 = 0x5;
    pub const UNIT_ATTENTION: u8 = 0x6;
    pub const DATA_PROTECT: u8 = 0x7;
    pub const ABORTED_COMMAND: u8 = 0xB;
    pub const MISCOMPARE: u8 = 0xE;
}

/// One CHECK CONDITION's sense: key, additional sense code and qualifier, and what
/// else fixed-format sense can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sense {
    pub key: u8,
    pub asc: u8,
    pub ascq: u8,
    /// The INFORMATION field (VALID=1): a miscompare's offset, for example.
    pub information: Option<u64>,
    /// Sense-key specific field pointer: (in the CDB rather than the parameter list,
    /// byte, bit within it if known).
    pub field: Option<(bool, u16, Option<u8>)>,
}

impl Sense {
    pub const fn new(key: u8, asc: u8, ascq: u8) -> Sense {
        Sense {
            key,
            asc,
            ascq,
            information: None,
            field: None,
        }
    }

    /// 05/20/00: the operation code is not one this unit serves.
    pub fn invalid_opcode() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x20, 0x00).in_cdb(0, None)
    }

    /// 05/24/00 pointing at CDB byte `byte` (and bit `bit`).
    pub fn invalid_cdb_field(byte: u16, bit: Option<u8>) -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x24, 0x00).in_cdb(byte, bit)
    }

    /// 05/26/00 pointing at parameter list byte `byte`.
    pub fn invalid_param_field(byte: u16) -> Sense {
        Sense {
            field: Some((false, byte, None)),
            ..Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x00)
        }
    }

    /// 05/1A/00: the parameter list is shorter or longer than the command says.
    pub fn param_list_length() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x1A, 0x00)
    }

    /// 05/21/00: the blocks lie (partly) past the end of the unit.
    pub fn lba_out_of_range() -> Sense {
        Sense::new(key::ILLEGAL_REQUEST, 0x21, 0x00)
    }

    /// 0E/1D/00 at byte `offset` of the compared data.
    pub fn miscompare(offset: u64) -> Sense {
        Sense {
            information: Some(offset),
            ..Sense::new(key::MISCOMPARE, 0x1D, 0x00)
        }
    }

    /// 07/27/00 (hardware write protect, the volume is read-only) or 07/27/02
    /// (software write protect, the CONTROL page's SWP).
    pub fn write_protected(software: bool) -> Sense {
        Sense::new(key::DATA_PROTECT, 0x27, if software { 0x02 } else { 0x00 })
    }

    /// 07/27/07: SPACE ALLOCATION FAILED WRITE PROTECT, a thin unit out of space.
    pub fn space_allocation_failed() -> Sense {
        Sense::new(key::DATA_PROTECT, 0x27, 0x07)
    }

    /// 04/44/00: INTERNAL TARGET FAILURE (the pool could not do the I/O).
    pub fn internal_failure() -> Sense {
        Sense::new(key::HARDWARE_ERROR, 0x44, 0x00)
    }

    /// 03/11/00: UNRECOVERED READ ERROR.
    pub fn unrecovered_read() -> Sense {
        Sense::new(key::MEDIUM_ERROR, 0x11, 0x00)
    }

    fn in_cdb(mut self, byte: u16, bit: Option<u8>) -> Sense {
        self.field = Some((true, byte, bit));
        self
    }

    /// The 18 bytes of fixed-format sense (response code 0x70, current error).
    pub fn to_fixed(&self) -> Vec<u8> {
        let mut b = vec![0u8; 18];
        b[0] = 0x70;
        b[2] = self.key & 0x0F;
        if let Some(info) = self.information {
            b[0] |= 0x80; // VALID
            b[3..7].copy_from_slice(&(info.min(u32::MAX as u64) as u32).to_be_bytes());
        }
        b[7] = 10; // additional sense length
        b[12] = self.asc;
        b[13] = self.ascq;
        if let Some((cdb, byte, bit)) = self.field {
            let mut f = 0x80; // SKSV
            if cdb {
                f |= 0x40; // C/D
            }
            if let Some(bit) = bit {
                f |= 0x08 | (bit & 7); // BPV, bit pointer
            }
            b[15] = f;
            b[16..18].copy_from_slice(&byte.to_be_bytes());
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_format_carries_key_codes_information_and_field_pointer() {
        let s = Sense::invalid_cdb_field(2, Some(5)).to_fixed();
        assert_eq!(s.len(), 18);
        assert_eq!((s[0], s[2], s[7], s[12], s[13]), (0x70, 5, 10, 0x24, 0));
        assert_eq!(s[15], 0x80 | 0x40 | 0x08 | 5);
        assert_eq!(u16::from_be_bytes([s[16], s[17]]), 2);
        let m = Sense::miscompare(4097).to_fixed();
        assert_eq!(m[0], 0xF0);
        assert_eq!(u32::from_be_bytes([m[3], m[4], m[5], m[6]]), 4097);
        assert_eq!((m[2], m[12]), (0xE, 0x1D));
        assert_eq!(Sense::lba_out_of_range().to_fixed()[15], 0);
    }
}
