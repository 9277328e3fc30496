//! MODE SENSE and MODE SELECT (SPC-4 6.11-6.14, SBC-3 6.4): the caching page tells
//! the truth about the write cache (WCE=0, every write durable when answered, unless
//! the volume has sync=disabled; it is changed through the volume's `sync` property,
//! not here), and the CONTROL page offers one changeable setting, SWP
//! (software write protect), which initiators may set and clear. The header's
//! device-specific byte shows WP (read-only volume or SWP) and DPOFUA (DPO and FUA
//! are honoured).

use crate::cdb::{put_u16, put_u32, Cdb};
use crate::lu::LogicalUnit;
use crate::sense::{key, Sense};
use crate::{Nexus, Reply};

const CACHING: u8 = 0x08;
const CONTROL: u8 = 0x0A;

/// Which values MODE SENSE reports (its PC field).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Values {
    Current,
    Changeable,
    Default,
}

impl LogicalUnit {
    fn caching_page(&self, v: Values) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = CACHING;
        p[1] = 0x12;
        if v != Values::Changeable && self.volume.write_cache() {
            p[2] |= 0x04; // WCE
        }
        p
    }

    fn control_page(&self, v: Values, swp: bool) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p[0] = CONTROL;
        p[1] = 0x0A;
        match v {
            Values::Changeable => p[4] = 0x08, // SWP only
            _ => {
                p[3] = 0x10; // queue algorithm modifier 1: unrestricted reordering
                if v == Values::Current && swp {
                    p[4] |= 0x08;
                }
                put_u16(&mut p, 8, 0xFFFF); // busy timeout period: unlimited
            }
        }
        p
    }

    pub(crate) fn write_protected(&self) -> Option<Sense> {
        if self.volume.readonly() {
            Some(Sense::write_protected(false))
        } else if self.state.lock().unwrap().swp {
            Some(Sense::write_protected(true))
        } else {
            None
        }
    }

    pub(crate) fn mode_sense(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let ten = cdb.opcode() == 0x5A;
        let dbd = cdb.u8(1) & 0x08 != 0;
        let llbaa = ten && cdb.u8(1) & 0x10 != 0;
        let pc = cdb.u8(2) >> 6;
        let page = cdb.u8(2) & 0x3F;
        let subpage = cdb.u8(3);
        let alloc = if ten {
            cdb.u16(7) as usize
        } else {
            cdb.u8(4) as usize
        };
        let values = match pc {
            0 => Values::Current,
            1 => Values::Changeable,
            2 => Values::Default,
            _ => return Err(Sense::new(key::ILLEGAL_REQUEST, 0x39, 0x00)),
        };
        if subpage != 0 && subpage != 0xFF {
            return Err(Sense::invalid_cdb_field(3, None));
        }
        let swp = self.state.lock().unwrap().swp;
        let pages = match page {
            CACHING => self.caching_page(values),
            CONTROL => self.control_page(values, swp),
            0x3F => [self.caching_page(values), self.control_page(values, swp)].concat(),
            _ => return Err(Sense::invalid_cdb_field(2, None)),
        };
        let blocks = self.blocks();
        let descriptor = if dbd {
            Vec::new()
        } else if llbaa {
            let mut d = vec![0u8; 16];
            d[..8].copy_from_slice(&blocks.to_be_bytes());
            put_u32(&mut d, 12, self.config.block_size);
            d
        } else {
            let mut d = vec![0u8; 8];
            put_u32(&mut d, 0, blocks.min(u32::MAX as u64) as u32);
            put_u32(&mut d, 4, self.config.block_size & 0x00FF_FFFF);
            d
        };
        let mut specific = 0x10; // DPOFUA
        if values == Values::Current && (self.volume.readonly() || swp) {
            specific |= 0x80; // WP
        }
        let mut data = if ten {
            let mut h = vec![0u8; 8];
            h[3] = specific;
            if llbaa && !dbd {
                h[4] = 0x01;
            }
            put_u16(&mut h, 6, descriptor.len() as u16);
            h
        } else {
            vec![0, 0, specific, descriptor.len() as u8]
        };
        data.extend_from_slice(&descriptor);
        data.extend_from_slice(&pages);
        if ten {
            let len = (data.len() - 2) as u16;
            put_u16(&mut data, 0, len);
        } else {
            data[0] = (data.len() - 1) as u8;
        }
        data.truncate(alloc);
        Ok(Reply::good(data))
    }

    /// MODE SELECT: pages must be in SPC format (PF=1) and not saved (SP=0); a block
    /// descriptor may restate the block size; the caching page may restate WCE as it
    /// is; the CONTROL page may change SWP and nothing else. Every other nexus is told
    /// MODE PARAMETERS CHANGED (2A/01) when SWP changes.
    pub(crate) fn mode_select(
        &self,
        nexus: &Nexus,
        cdb: &Cdb,
        data: &[u8],
    ) -> Result<Reply, Sense> {
        let ten = cdb.opcode() == 0x55;
        if cdb.u8(1) & 0x10 == 0 {
            return Err(Sense::invalid_cdb_field(1, Some(4)));
        }
        if cdb.u8(1) & 0x01 != 0 {
            return Err(Sense::invalid_cdb_field(1, Some(0)));
        }
        let len = if ten {
            cdb.u16(7) as usize
        } else {
            cdb.u8(4) as usize
        };
        if len == 0 {
            return Ok(Reply::good(Vec::new()));
        }
        if data.len() < len {
            return Err(Sense::param_list_length());
        }
        let data = &data[..len];
        let header = if ten { 8 } else { 4 };
        if data.len() < header {
            return Err(Sense::param_list_length());
        }
        let bd_len = if ten {
            u16::from_be_bytes([data[6], data[7]]) as usize
        } else {
            data[3] as usize
        };
        let mut at = header;
        if bd_len > 0 {
            if bd_len != 8 || data.len() < at + 8 {
                return Err(Sense::invalid_param_field(if ten { 6 } else { 3 } as u16));
            }
            let size = u32::from_be_bytes([0, data[at + 5], data[at + 6], data[at + 7]]);
            if size != 0 && size != self.config.block_size {
                return Err(Sense::invalid_param_field((at + 5) as u16));
            }
            at += 8;
        }
        let mut new_swp = None;
        while at < data.len() {
            if data.len() < at + 2 {
                return Err(Sense::param_list_length());
            }
            let code = data[at] & 0x3F;
            if data[at] & 0x40 != 0 {
                return Err(Sense::invalid_param_field(at as u16)); // subpage format
            }
            let plen = data[at + 1] as usize + 2;
            if data.len() < at + plen {
                return Err(Sense::param_list_length());
            }
            let page = &data[at..at + plen];
            // What the page would be with only the changeable bits taken from the
            // initiator: anything else that differs is refused.
            let (current, changeable) = match code {
                CACHING => (
                    self.caching_page(Values::Current),
                    self.caching_page(Values::Changeable),
                ),
                CONTROL => (
                    self.control_page(Values::Current, self.state.lock().unwrap().swp),
                    self.control_page(Values::Changeable, false),
                ),
                _ => return Err(Sense::invalid_param_field(at as u16)),
            };
            if page.len() != current.len() {
                return Err(Sense::invalid_param_field((at + 1) as u16));
            }
            for i in 2..page.len() {
                if (page[i] ^ current[i]) & !changeable[i] != 0 {
                    return Err(Sense::invalid_param_field((at + i) as u16));
                }
            }
            if code == CONTROL {
                new_swp = Some(page[4] & 0x08 != 0);
            }
            at += plen;
        }
        if let Some(swp) = new_swp {
            let mut st = self.state.lock().unwrap();
            if st.swp != swp {
                st.swp = swp;
                st.attention_others(Some(nexus), 0x2A, 0x01);
            }
        }
        Ok(Reply::good(Vec::new()))
    }
}
