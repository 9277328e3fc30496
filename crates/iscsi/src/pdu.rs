//! iSCSI PDUs (RFC 7143 11): the 48-byte basic header segment, additional header
//! segments, the data segment padded to four bytes, and the optional CRC32C header
//! and data digests. Reading checks every length against a bound before it allocates,
//! and a digest mismatch, an unknown opcode's length or a data segment over the bound
//! is an error the connection ends on (ERL 0), never a panic.

use std::io::{IoSlice, Read, Write};

pub const BHS_LEN: usize = 48;

/// Initiator opcodes.
pub mod op {
    pub const NOP_OUT: u8 = 0x00;
    pub const SCSI_COMMAND: u8 = 0x01;
    pub const TASK_MGMT: u8 = 0x02;
    pub const LOGIN: u8 = 0x03;
    pub const TEXT: u8 = 0x04;
    pub const DATA_OUT: u8 = 0x05;
    pub const LOGOUT: u8 = 0x06;
    pub const SNACK: u8 = 0x10;
    // Target opcodes.
    pub const NOP_IN: u8 = 0x20;
    pub const SCSI_RESPONSE: u8 = 0x21;
    pub const TASK_MGMT_RESPONSE: u8 = 0x22;
    pub const LOGIN_RESPONSE: u8 = 0x23;
    pub const TEXT_RESPONSE: u8 = 0x24;
    pub const DATA_IN: u8 = 0x25;
    pub const LOGOUT_RESPONSE: u8 = 0x26;
    pub const R2T: u8 = 0x31;
    pub const ASYNC: u8 = 0x32;
    pub const REJECT: u8 = 0x3F;
}

/// Why a PDU could not be read.
#[derive(Debug)]
pub enum PduError {
    Io(std::io::Error),
    /// The connection ended between PDUs.
    Closed,
    HeaderDigest,
    DataDigest,
    /// A data segment longer than the bound.
    TooLong(usize),
}

impl std::fmt::Display for PduError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PduError::Io(e) => write!(f, "{e}"),
            PduError::Closed => write!(f, "connection closed"),
            PduError::HeaderDigest => write!(f, "header digest mismatch"),
            PduError::DataDigest => write!(f, "data digest mismatch"),
            PduError::TooLong(n) => write!(f, "data segment of {n} bytes is over the bound"),
        }
    }
}

/// One PDU: its basic header, additional headers and data (unpadded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu {
    pub bhs: [u8; BHS_LEN],
    pub ahs: Vec<u8>,
    pub data: Vec<u8>,
}

impl Pdu {
    pub fn new(opcode: u8) -> Pdu {
        let mut bhs = [0u8; BHS_LEN];
        bhs[0] = opcode;
        Pdu {
            bhs,
            ahs: Vec::new(),
            data: Vec::new(),
        }
    }

    pub fn opcode(&self) -> u8 {
        self.bhs[0] & 0x3F
    }

    /// The I bit: an immediate command (not ordered by CmdSN).
    pub fn immediate(&self) -> bool {
        self.bhs[0] & 0x40 != 0
    }

    pub fn flags(&self) -> u8 {
        self.bhs[1]
    }

    pub fn u32_at(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.bhs[at..at + 4].try_into().unwrap())
    }

    pub fn set_u32(&mut self, at: usize, v: u32) {
        self.bhs[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    pub fn u16_at(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.bhs[at], self.bhs[at + 1]])
    }

    pub fn set_u16(&mut self, at: usize, v: u16) {
        self.bhs[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    pub fn lun(&self) -> [u8; 8] {
        self.bhs[8..16].try_into().unwrap()
    }

    pub fn itt(&self) -> u32 {
        self.u32_at(16)
    }

    /// Bytes 20..24: the TTT, or a SCSI command's expected data transfer length.
    pub fn word20(&self) -> u32 {
        self.u32_at(20)
    }

    /// Bytes 24..28: CmdSN (initiator) or StatSN (target).
    pub fn word24(&self) -> u32 {
        self.u32_at(24)
    }

    pub fn word28(&self) -> u32 {
        self.u32_at(28)
    }

    pub fn word36(&self) -> u32 {
        self.u32_at(36)
    }

    pub fn word40(&self) -> u32 {
        self.u32_at(40)
    }

    /// Writes the PDU: lengths filled in, padding and digests as asked.
    pub fn write_to(
        &mut self,
        out: &mut impl Write,
        header_digest: bool,
        data_digest: bool,
    ) -> std::io::Result<()> {
        let data = std::mem::take(&mut self.data);
        let r = self.write_with_data(out, &[&data], header_digest, data_digest);
        self.data = data;
        r
    }

    /// Writes the PDU with `data` (in parts, as a read's blocks lie in the cache) as
    /// its data segment in place of `self.data`, which must be empty: one vectored
    /// write, the data never copied into a send buffer.
    pub fn write_with_data(
        &mut self,
        out: &mut impl Write,
        data: &[&[u8]],
        header_digest: bool,
        data_digest: bool,
    ) -> std::io::Result<()> {
        assert!(self.data.is_empty(), "the data segment is given once");
        assert!(self.ahs.len().is_multiple_of(4) && self.ahs.len() / 4 <= 255);
        let data_len: usize = data.iter().map(|d| d.len()).sum();
        assert!(data_len < 1 << 24, "a data segment fits 24 bits");
        self.bhs[4] = (self.ahs.len() / 4) as u8;
        self.bhs[5..8].copy_from_slice(&(data_len as u32).to_be_bytes()[1..]);
        let mut head = Vec::with_capacity(BHS_LEN + self.ahs.len() + 4);
        head.extend_from_slice(&self.bhs);
        head.extend_from_slice(&self.ahs);
        if header_digest {
            let crc = crc32c::crc32c(&head);
            head.extend_from_slice(&crc.to_le_bytes());
        }
        // Padding to four bytes, then the data digest (which covers the padding).
        let pad = data_len.div_ceil(4) * 4 - data_len;
        let mut tail = [0u8; 8];
        let mut tail_len = pad;
        if data_len > 0 && data_digest {
            let mut crc = 0;
            for part in data {
                crc = crc32c::crc32c_append(crc, part);
            }
            crc = crc32c::crc32c_append(crc, &tail[..pad]);
            tail[pad..pad + 4].copy_from_slice(&crc.to_le_bytes());
            tail_len += 4;
        }
        let mut parts = Vec::with_capacity(data.len() + 2);
        parts.push(IoSlice::new(&head));
        parts.extend(data.iter().map(|d| IoSlice::new(d)));
        parts.push(IoSlice::new(&tail[..tail_len]));
        write_all_vectored(out, &mut parts)
    }
}

/// Writes every byte of `parts`, in as few system calls as the writer allows.
fn write_all_vectored(out: &mut impl Write, parts: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    let mut rest = parts;
    IoSlice::advance_slices(&mut rest, 0); // drops leading empty slices
    while !rest.is_empty() {
        match out.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one PDU, with a data segment of at most `max_data` bytes.
pub fn read_pdu(
    input: &mut impl Read,
    header_digest: bool,
    data_digest: bool,
    max_data: usize,
) -> Result<Pdu, PduError> {
    let mut bhs = [0u8; BHS_LEN];
    // The first byte tells an orderly end between PDUs from one inside a PDU.
    match input.read(&mut bhs[..1]) {
        Ok(0) => return Err(PduError::Closed),
        Ok(_) => {}
        Err(e) => return Err(PduError::Io(e)),
    }
    input.read_exact(&mut bhs[1..]).map_err(PduError::Io)?;
    let ahs_len = bhs[4] as usize * 4;
    let data_len = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]) as usize;
    if data_len > max_data {
        return Err(PduError::TooLong(data_len));
    }
    let mut ahs = vec![0u8; ahs_len];
    input.read_exact(&mut ahs).map_err(PduError::Io)?;
    if header_digest {
        let mut d = [0u8; 4];
        input.read_exact(&mut d).map_err(PduError::Io)?;
        let mut h = crc32c::crc32c(&bhs);
        h = crc32c::crc32c_append(h, &ahs);
        if u32::from_le_bytes(d) != h {
            return Err(PduError::HeaderDigest);
        }
    }
    let mut data = vec![0u8; data_len.div_ceil(4) * 4];
    if data_len > 0 {
        input.read_exact(&mut data).map_err(PduError::Io)?;
        if data_digest {
            let mut d = [0u8; 4];
            input.read_exact(&mut d).map_err(PduError::Io)?;
            if u32::from_le_bytes(d) != crc32c::crc32c(&data) {
                return Err(PduError::DataDigest);
            }
        }
    }
    data.truncate(data_len);
    Ok(Pdu { bhs, ahs, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pdus_round_trip_with_and_without_digests() {
        for (hd, dd) in [(false, false), (true, false), (true, true), (false, true)] {
            let mut p = Pdu::new(op::SCSI_COMMAND);
            p.bhs[1] = 0x80;
            p.set_u32(16, 0xABCD);
            p.data = b"seven b".to_vec();
            let mut wire = Vec::new();
            p.write_to(&mut wire, hd, dd).unwrap();
            assert_eq!(wire.len() % 4, 0);
            let back = read_pdu(&mut &wire[..], hd, dd, 1024).unwrap();
            assert_eq!(back, p);
            // A flipped bit is caught by the digest that covers it.
            if hd {
                let mut bad = wire.clone();
                bad[20] ^= 1;
                assert!(matches!(
                    read_pdu(&mut &bad[..], hd, dd, 1024),
                    Err(PduError::HeaderDigest)
                ));
            }
            if dd {
                let mut bad = wire.clone();
                let at = BHS_LEN + if hd { 4 } else { 0 } + 1;
                bad[at] ^= 1;
                assert!(matches!(
                    read_pdu(&mut &bad[..], hd, dd, 1024),
                    Err(PduError::DataDigest)
                ));
            }
        }
        // Data given in parts goes out as the same bytes as data given whole.
        for (hd, dd) in [(false, false), (true, true)] {
            let mut whole = Pdu::new(op::DATA_IN);
            whole.data = b"in several parts".to_vec();
            let mut expect = Vec::new();
            whole.write_to(&mut expect, hd, dd).unwrap();
            let mut parted = Pdu::new(op::DATA_IN);
            let mut wire = Vec::new();
            let parts: [&[u8]; 3] = [b"in sev", b"", b"eral parts"];
            parted.write_with_data(&mut wire, &parts, hd, dd).unwrap();
            assert_eq!(wire, expect);
        }
        let mut p = Pdu::new(op::TEXT);
        p.data = vec![1; 100];
        let mut wire = Vec::new();
        p.write_to(&mut wire, false, false).unwrap();
        assert!(matches!(
            read_pdu(&mut &wire[..], false, false, 99),
            Err(PduError::TooLong(100))
        ));
        assert!(matches!(
            read_pdu(&mut &[][..], false, false, 99),
            Err(PduError::Closed)
        ));
        assert!(matches!(
            read_pdu(&mut &wire[..30], false, false, 1000),
            Err(PduError::Io(_))
        ));
    }
}
