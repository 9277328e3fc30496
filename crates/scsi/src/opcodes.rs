//! The commands a logical unit serves, with the CDB usage data REPORT SUPPORTED
//! OPERATION CODES (SPC-4 6.35) returns for each: which bits of which CDB bytes the
//! unit looks at. Dispatch (`lu.rs`) and this table must agree: a test asserts every
//! listed command is dispatched and every unlisted one answers INVALID COMMAND
//! OPERATION CODE.

use crate::cdb::{put_u16, put_u32, Cdb};
use crate::sense::Sense;
use crate::Reply;

/// One served command: operation code, service action (for those that have them),
/// and the usage bitmap (its length is the CDB's; byte 0, the operation code, is
/// filled in when reported, so the block commands share their bitmaps).
pub struct Served {
    pub opcode: u8,
    pub service_action: Option<u16>,
    pub usage: &'static [u8],
}

const fn s(opcode: u8, usage: &'static [u8]) -> Served {
    Served {
        opcode,
        service_action: None,
        usage,
    }
}

const fn sa(opcode: u8, action: u16, usage: &'static [u8]) -> Served {
    Served {
        opcode,
        service_action: Some(action),
        usage,
    }
}

// Byte 1 of the block commands: xPROTECT (checked: must be 0), DPO, FUA.
const RW10: &[u8] = &[0, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0x00];
const RW12: &[u8] = &[
    0, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0x00,
];
const RW16: &[u8] = &[
    0, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0x00,
];
// VERIFY and WRITE AND VERIFY: xPROTECT, DPO, BYTCHK.
const V10: &[u8] = &[0, 0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0x00];
const V12: &[u8] = &[
    0, 0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0x00,
];
const V16: &[u8] = &[
    0, 0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0x00,
];
// PERSISTENT RESERVE IN and OUT: the service action in byte 1, OUT's scope and type
// in byte 2, the allocation or parameter list length.
const PRIN: &[u8] = &[0, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0x00];
const PROUT: &[u8] = &[0, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x00];

/// A command's name for analytics and logs, in lower case: the block commands by
/// what they do (`read`, `write`, ...: every size of a command is one name), the
/// others by their SPC/SBC name; `other` for operation codes not served.
pub fn name(cdb: &[u8]) -> &'static str {
    match cdb.first().copied().unwrap_or(0xFF) {
        0x00 => "test_unit_ready",
        0x03 => "request_sense",
        0x08 | 0x28 | 0xA8 | 0x88 => "read",
        0x0A | 0x2A | 0xAA | 0x8A => "write",
        0x12 => "inquiry",
        0x15 | 0x55 => "mode_select",
        0x1A | 0x5A => "mode_sense",
        0x16 | 0x56 => "reserve",
        0x17 | 0x57 => "release",
        0x1B => "start_stop_unit",
        0x25 => "read_capacity",
        0x2E | 0xAE | 0x8E => "write_and_verify",
        0x2F | 0xAF | 0x8F => "verify",
        0x34 | 0x90 => "prefetch",
        0x35 | 0x91 => "synchronize_cache",
        0x37 | 0xB7 => "read_defect_data",
        0x41 | 0x93 => "write_same",
        0x42 => "unmap",
        0x5E => "persistent_reserve_in",
        0x5F => "persistent_reserve_out",
        0x89 => "compare_and_write",
        0x8B => "orwrite",
        0x9C => "write_atomic",
        0x9E => match cdb.get(1).map(|b| b & 0x1F) {
            Some(0x10) => "read_capacity",
            Some(0x12) => "get_lba_status",
            _ => "other",
        },
        0xA0 => "report_luns",
        0xA3 => "report_supported_operation_codes",
        _ => "other",
    }
}

/// The byte range a command that moves or checks blocks addresses (READ, WRITE,
/// VERIFY, WRITE SAME, COMPARE AND WRITE...), as (offset, length), for blocks of
/// `block_size` bytes; `None` for other commands and short CDBs.
pub fn extent(cdb: &[u8], block_size: u32) -> Option<(u64, u64)> {
    let op = *cdb.first()?;
    let moves = matches!(
        op,
        0x08 | 0x0A
            | 0x28
            | 0x2A
            | 0x2E
            | 0x2F
            | 0x41
            | 0x88
            | 0x89
            | 0x8A
            | 0x8B
            | 0x8E
            | 0x8F
            | 0x93
            | 0x9C
            | 0xA8
            | 0xAA
            | 0xAE
            | 0xAF
    );
    if !moves {
        return None;
    }
    let cdb = Cdb::new(cdb).ok()?;
    let (lba, blocks) = cdb.lba_and_len();
    let blocks = match op {
        0x08 | 0x0A if blocks == 0 => 256,
        // COMPARE AND WRITE: NUMBER OF LOGICAL BLOCKS in byte 13; WRITE ATOMIC(16):
        // the transfer length in bytes 12-13.
        0x89 => cdb.u8(13) as u64,
        0x9C => cdb.u16(12) as u64,
        _ => blocks,
    };
    let bs = block_size as u64;
    Some((lba.saturating_mul(bs), blocks.saturating_mul(bs)))
}

/// Every command served, in operation code order.
pub static SERVED: &[Served] = &[
    s(0x00, &[0x00, 0, 0, 0, 0, 0x00]),             // TEST UNIT READY
    s(0x03, &[0x03, 0x01, 0, 0, 0xFF, 0x00]),       // REQUEST SENSE
    s(0x08, &[0x08, 0x1F, 0xFF, 0xFF, 0xFF, 0x00]), // READ(6)
    s(0x0A, &[0x0A, 0x1F, 0xFF, 0xFF, 0xFF, 0x00]), // WRITE(6)
    s(0x12, &[0x12, 0x01, 0xFF, 0xFF, 0xFF, 0x00]), // INQUIRY
    s(0x15, &[0x15, 0x11, 0, 0, 0xFF, 0x00]),       // MODE SELECT(6)
    s(0x16, &[0x16, 0, 0, 0, 0, 0x00]),             // RESERVE(6)
    s(0x17, &[0x17, 0, 0, 0, 0, 0x00]),             // RELEASE(6)
    s(0x1A, &[0x1A, 0x08, 0xFF, 0xFF, 0xFF, 0x00]), // MODE SENSE(6)
    s(0x1B, &[0x1B, 0x01, 0, 0x0F, 0xF7, 0x00]),    // START STOP UNIT
    s(0x25, &[0x25, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, 0x00]), // READ CAPACITY(10)
    s(0x28, RW10),
    s(0x2A, RW10),
    s(0x2E, V10),
    s(0x2F, V10),
    s(
        0x34,
        &[0x34, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0x00],
    ), // PRE-FETCH(10)
    s(
        0x35,
        &[0x35, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0x00],
    ), // SYNCHRONIZE CACHE(10)
    s(0x37, &[0x37, 0, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, 0x00]), // READ DEFECT DATA(10)
    s(
        0x41,
        &[0x41, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0x00],
    ), // WRITE SAME(10)
    s(0x42, &[0x42, 0x01, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, 0x00]), // UNMAP
    s(0x55, &[0x55, 0x11, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0x00]), // MODE SELECT(10)
    s(0x56, &[0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0x00]),          // RESERVE(10)
    s(0x57, &[0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0x00]),          // RELEASE(10)
    s(0x5A, &[0x5A, 0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0x00]), // MODE SENSE(10)
    sa(0x5E, 0x00, PRIN),                                    // PERSISTENT RESERVE IN: READ KEYS
    sa(0x5E, 0x01, PRIN),                                    // READ RESERVATION
    sa(0x5E, 0x02, PRIN),                                    // REPORT CAPABILITIES
    sa(0x5E, 0x03, PRIN),                                    // READ FULL STATUS
    sa(0x5F, 0x00, PROUT),                                   // PERSISTENT RESERVE OUT: REGISTER
    sa(0x5F, 0x01, PROUT),                                   // RESERVE
    sa(0x5F, 0x02, PROUT),                                   // RELEASE
    sa(0x5F, 0x03, PROUT),                                   // CLEAR
    sa(0x5F, 0x04, PROUT),                                   // PREEMPT
    sa(0x5F, 0x05, PROUT),                                   // PREEMPT AND ABORT
    sa(0x5F, 0x06, PROUT),                                   // REGISTER AND IGNORE EXISTING KEY
    s(0x88, RW16),
    s(
        0x89,
        &[
            0x89, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0x1F, 0x00,
        ],
    ), // COMPARE AND WRITE
    s(0x8A, RW16),
    s(0x8B, RW16), // ORWRITE(16)
    s(0x8E, V16),
    s(0x8F, V16),
    s(
        0x90,
        &[
            0x90, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, 0x00,
        ],
    ), // PRE-FETCH(16)
    s(
        0x91,
        &[
            0x91, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, 0x00,
        ],
    ), // SYNCHRONIZE CACHE(16)
    s(
        0x93,
        &[
            0x93, 0xF9, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, 0x00,
        ],
    ), // WRITE SAME(16)
    s(
        0x9C,
        &[
            0x9C, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, 0x00,
        ],
    ), // WRITE ATOMIC(16)
    sa(
        0x9E,
        0x10,
        &[
            0x9E, 0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x01, 0x00,
        ],
    ), // READ CAPACITY(16)
    sa(
        0x9E,
        0x12,
        &[
            0x9E, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0,
            0x00,
        ],
    ), // GET LBA STATUS
    s(
        0xA0,
        &[0xA0, 0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0x00],
    ), // REPORT LUNS
    sa(
        0xA3,
        0x0C,
        &[
            0xA3, 0x0C, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0x00,
        ],
    ), // REPORT SUPPORTED OPERATION CODES
    s(0xA8, RW12),
    s(0xAA, RW12),
    s(0xAE, V12),
    s(0xAF, V12),
    s(
        0xB7,
        &[0xB7, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0x00],
    ), // READ DEFECT DATA(12)
];

/// Whether the operation code has service actions (then only those listed are
/// served, and any other is an invalid field, not an invalid operation code).
pub fn has_service_actions(opcode: u8) -> bool {
    SERVED
        .iter()
        .any(|c| c.opcode == opcode && c.service_action.is_some())
}

pub fn is_served(opcode: u8) -> bool {
    SERVED.iter().any(|c| c.opcode == opcode)
}

fn find(opcode: u8, action: Option<u16>) -> Option<&'static Served> {
    SERVED
        .iter()
        .find(|c| c.opcode == opcode && c.service_action == action)
}

/// The command timeouts descriptor (RCTD): none advertised beyond a generous
/// recommendation, in seconds.
fn timeouts() -> [u8; 12] {
    let mut t = [0u8; 12];
    put_u16(&mut t, 0, 0x0A);
    put_u32(&mut t, 8, 30);
    t
}

/// REPORT SUPPORTED OPERATION CODES (0xA3/0x0C).
pub fn report_supported(cdb: &Cdb) -> Reply {
    let rctd = cdb.u8(2) & 0x80 != 0;
    let options = cdb.u8(2) & 0x07;
    let opcode = cdb.u8(3);
    let action = cdb.u16(4);
    let alloc = cdb.u32(6) as usize;
    let mut data = Vec::new();
    match options {
        0 => {
            let per = if rctd { 20 } else { 8 };
            data.extend_from_slice(&((SERVED.len() * per) as u32).to_be_bytes());
            for c in SERVED {
                let mut d = [0u8; 8];
                d[0] = c.opcode;
                put_u16(&mut d, 2, c.service_action.unwrap_or(0));
                d[5] = if c.service_action.is_some() { 1 } else { 0 } | if rctd { 2 } else { 0 };
                put_u16(&mut d, 6, c.usage.len() as u16);
                data.extend_from_slice(&d);
                if rctd {
                    data.extend_from_slice(&timeouts());
                }
            }
        }
        1..=3 => {
            let with_actions = has_service_actions(opcode);
            let wanted = match options {
                1 if with_actions => return Reply::check(Sense::invalid_cdb_field(2, None)),
                1 => find(opcode, None),
                2 if !is_served(opcode) => None,
                2 if !with_actions => return Reply::check(Sense::invalid_cdb_field(2, None)),
                2 => find(opcode, Some(action)),
                _ if with_actions => find(opcode, Some(action)),
                _ => find(opcode, None),
            };
            let mut head = [0u8; 4];
            match wanted {
                Some(c) => {
                    head[1] = 0x03 | if rctd { 0x80 } else { 0 };
                    put_u16(&mut head, 2, c.usage.len() as u16);
                    data.extend_from_slice(&head);
                    let mut usage = c.usage.to_vec();
                    usage[0] = c.opcode;
                    data.extend_from_slice(&usage);
                    if rctd {
                        data.extend_from_slice(&timeouts());
                    }
                }
                None => {
                    head[1] = 0x01; // not supported
                    data.extend_from_slice(&head);
                }
            }
        }
        _ => return Reply::check(Sense::invalid_cdb_field(2, None)),
    }
    data.truncate(alloc);
    Reply::good(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_named_and_their_extents_read() {
        let mut read10 = [0u8; 10];
        read10[0] = 0x28;
        read10[5] = 8; // LBA 8
        read10[8] = 2; // 2 blocks
        assert_eq!(name(&read10), "read");
        assert_eq!(extent(&read10, 512), Some((4096, 1024)));
        let read6 = [0x08, 0, 0, 1, 0, 0];
        assert_eq!(extent(&read6, 512), Some((512, 256 * 512)));
        let mut caw = [0u8; 16];
        caw[0] = 0x89;
        caw[9] = 1;
        caw[13] = 1;
        assert_eq!(name(&caw), "compare_and_write");
        assert_eq!(extent(&caw, 4096), Some((4096, 4096)));
        let mut rc16 = [0u8; 16];
        rc16[0] = 0x9E;
        rc16[1] = 0x10;
        assert_eq!(name(&rc16), "read_capacity");
        assert_eq!(extent(&rc16, 512), None);
        assert_eq!(name(&[0xC5]), "other");
        assert_eq!(name(&[]), "other");
        assert_eq!(extent(&[0x28, 0, 0], 512), None, "a short CDB");
        // Every command served has a name.
        for c in SERVED {
            let mut cdb = vec![0u8; c.usage.len()];
            cdb[0] = c.opcode;
            if let Some(sa) = c.service_action {
                cdb[1] = sa as u8;
            }
            assert_ne!(name(&cdb), "other", "{:#x}", c.opcode);
        }
    }

    #[test]
    fn usage_data_names_each_command_and_its_cdb_length() {
        for c in SERVED {
            assert_eq!(
                Some(c.usage.len()),
                crate::cdb::cdb_len(c.opcode),
                "{:#x}",
                c.opcode
            );
            assert!(c.usage[0] == c.opcode || c.usage[0] == 0, "{:#x}", c.opcode);
        }
        let mut sorted: Vec<(u8, Option<u16>)> = SERVED
            .iter()
            .map(|c| (c.opcode, c.service_action))
            .collect();
        let n = sorted.len();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), n, "listed twice");
        // DPO and FUA are advertised where the conformance suite looks.
        for op in [0x28u8, 0x2A, 0x88, 0x8A, 0xA8, 0xAA, 0x89, 0x8B, 0x9C] {
            assert_eq!(find(op, None).unwrap().usage[1] & 0x18, 0x18, "{op:#x}");
        }
        for op in [0x2Fu8, 0x2E, 0x8F, 0x8E, 0xAF, 0xAE] {
            assert_eq!(find(op, None).unwrap().usage[1] & 0x10, 0x10, "{op:#x}");
        }
    }
}
