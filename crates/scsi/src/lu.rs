//! One logical unit over a volume: the command dispatch, unit attentions and the
//! reservation checks every command passes before it runs.
//!
//! Order per command (SPC-4 5.14, SAM-5 5.14): the CDB's length is checked; a nexus
//! seen for the first time is given a POWER ON unit attention (29/00: the unit is new
//! to it, as tgt does); a changed volume size gives every nexus CAPACITY DATA HAS
//! CHANGED (2A/09); then, except for INQUIRY, REPORT LUNS and REQUEST SENSE, a pending
//! unit attention is reported (and so cleared) instead of running the command; then
//! the reservations decide whether the nexus may run it (RESERVATION CONFLICT if not);
//! then it runs.
//!
//! Locking: `state` (unit attentions, reservations, mode settings) is held only while
//! deciding and while reservations change, never during I/O, so a slow write does
//! not hold up other nexuses' commands.

use crate::cdb::Cdb;
use crate::reservations::{Access, PrState};
use crate::sense::{key, Sense};
use crate::{Nexus, Reply};
use fs::{FsError, Volume};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Unit attentions kept per nexus at most; older ones are dropped (SPC-4 lets a
/// unit keep only some), the newest kept.
const UA_KEPT: usize = 8;

/// How a volume is presented.
#[derive(Debug, Clone)]
pub struct LuConfig {
    /// The logical block size initiators address: 512 or 4096, dividing the
    /// volume's block size.
    pub block_size: u32,
    /// A stable identity (the NAA designator's 60 bits and the serial number): see
    /// `volume_identity`.
    pub identity: u64,
    /// The product identification INQUIRY shows (at most 16 ASCII characters).
    pub product: String,
}

/// A volume's identity for its LUs, the same on every head that imports its pool:
/// a hash of the pool's GUID and the volume's object set id.
pub fn volume_identity(pool_guid: u64, objset: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"shoal volume identity");
    h.update(&pool_guid.to_le_bytes());
    h.update(&objset.to_le_bytes());
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().unwrap()) & ((1 << 60) - 1)
}

/// Persists the persistent-reservation state (given as bytes): set by the owner of the
/// unit, so reservations survive a restart and a move of the pool to another head.
pub type ReservationStore = Box<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

pub struct LogicalUnit {
    pub(crate) volume: Arc<Volume>,
    pub(crate) config: LuConfig,
    pub(crate) state: Mutex<LuState>,
    store: Option<ReservationStore>,
}

pub(crate) struct LuState {
    /// Every nexus seen, with its pending unit attentions (ASC, ASCQ), oldest first.
    pub(crate) nexuses: BTreeMap<Nexus, VecDeque<(u8, u8)>>,
    /// The size last reported, to notice a resize.
    pub(crate) seen_blocks: u64,
    /// The CONTROL page's software write protect.
    pub(crate) swp: bool,
    /// An SPC-2 reservation (RESERVE(6)/(10)) and who holds it.
    pub(crate) spc2: Option<Nexus>,
    pub(crate) pr: PrState,
}

impl LuState {
    /// Queues a unit attention for `nexus`.
    pub(crate) fn attention(&mut self, nexus: &Nexus, asc: u8, ascq: u8) {
        let q = self.nexuses.entry(nexus.clone()).or_default();
        if q.contains(&(asc, ascq)) {
            return;
        }
        if q.len() >= UA_KEPT {
            q.pop_front();
        }
        q.push_back((asc, ascq));
    }

    /// Queues a unit attention for every nexus but `except`.
    pub(crate) fn attention_others(&mut self, except: Option<&Nexus>, asc: u8, ascq: u8) {
        let all: Vec<Nexus> = self
            .nexuses
            .keys()
            .filter(|n| Some(*n) != except)
            .cloned()
            .collect();
        for n in all {
            self.attention(&n, asc, ascq);
        }
    }
}

/// Which class a command is in, for unit attentions and reservations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Runs whatever the reservations (INQUIRY, REPORT LUNS, REQUEST SENSE, RSOC,
    /// TEST UNIT READY, READ CAPACITY, PERSISTENT RESERVE IN/OUT).
    Always,
    /// Reads the medium or its settings.
    Read,
    /// Changes the medium or the unit's settings.
    Write,
    /// SPC-2 RELEASE: a non-holder's is a harmless no-op.
    Release,
}

pub(crate) fn class_of(opcode: u8) -> Class {
    match opcode {
        0x12 | 0xA0 | 0x03 | 0xA3 | 0x00 | 0x25 | 0x9E | 0x5E | 0x5F => Class::Always,
        0x08 | 0x28 | 0xA8 | 0x88 | 0x2F | 0xAF | 0x8F | 0x1A | 0x5A | 0x34 | 0x90 | 0x37
        | 0xB7 => Class::Read,
        0x17 | 0x57 => Class::Release,
        _ => Class::Write,
    }
}

impl LogicalUnit {
    /// A unit over `volume`; `reservations` is the persistent-reservation state last
    /// stored (empty: none), `store` keeps each new one.
    pub fn new(
        volume: Arc<Volume>,
        config: LuConfig,
        reservations: &[u8],
        store: Option<ReservationStore>,
    ) -> Result<LogicalUnit, String> {
        let bs = config.block_size;
        if !(bs == 512 || bs == 4096) || !volume.block_size().is_multiple_of(bs) {
            return Err(format!(
                "logical block size {bs} must be 512 or 4096 and divide the volume's {}",
                volume.block_size()
            ));
        }
        let pr = if reservations.is_empty() {
            PrState::default()
        } else {
            PrState::decode(reservations)?
        };
        let seen_blocks = volume.size() / bs as u64;
        Ok(LogicalUnit {
            volume,
            config,
            state: Mutex::new(LuState {
                nexuses: BTreeMap::new(),
                seen_blocks,
                swp: false,
                spc2: None,
                pr,
            }),
            store,
        })
    }

    pub fn volume(&self) -> &Arc<Volume> {
        &self.volume
    }

    pub fn block_size(&self) -> u32 {
        self.config.block_size
    }

    /// The number of logical blocks now.
    pub fn blocks(&self) -> u64 {
        self.volume.size() / self.config.block_size as u64
    }

    pub fn identity(&self) -> u64 {
        self.config.identity
    }

    /// The bytes of Data-Out the CDB names (for a transport's residual count): what a
    /// write, compare, verify or parameter list carries; 0 for everything else and
    /// for a CDB too short to read.
    pub fn data_out_len(&self, cdb: &[u8]) -> u64 {
        let Ok(c) = Cdb::new(cdb) else { return 0 };
        let bs = self.config.block_size as u64;
        match c.opcode() {
            0x9C => c.u16(12) as u64 * bs,
            0x0A | 0x2A | 0xAA | 0x8A | 0x2E | 0xAE | 0x8E | 0x8B => {
                let (_, n) = c.lba_and_len();
                if c.len() == 6 && n == 0 {
                    256 * bs
                } else {
                    n * bs
                }
            }
            0x2F | 0xAF | 0x8F => match (c.u8(1) >> 1) & 3 {
                1 => c.lba_and_len().1 * bs,
                3 => bs,
                _ => 0,
            },
            0x41 => bs,
            0x93 if c.u8(1) & 0x01 == 0 => bs,
            0x89 => 2 * c.u8(13) as u64 * bs,
            0x42 | 0x55 => c.u16(7) as u64,
            0x15 => c.u8(4) as u64,
            0x5F => c.u32(5) as u64,
            _ => 0,
        }
    }

    /// Keeps the persistent reservations (called with the state lock held, after a
    /// change and before its answer).
    pub(crate) fn persist(&self, pr: &PrState) -> Result<(), Sense> {
        if let Some(store) = &self.store {
            store(&pr.encode()).map_err(|_| Sense::internal_failure())?;
        }
        Ok(())
    }

    /// Runs one command from `nexus`: `cdb` as received (transports may pad it) and
    /// the Data-Out bytes that came with it.
    pub fn execute(&self, nexus: &Nexus, cdb: &[u8], data_out: &[u8]) -> Reply {
        let cdb = match Cdb::new(cdb) {
            Ok(c) => c,
            Err(sense) => return Reply::check(sense),
        };
        let op = cdb.opcode();
        let class = class_of(op);
        {
            let mut st = self.state.lock().unwrap();
            if !st.nexuses.contains_key(nexus) {
                st.nexuses.insert(nexus.clone(), VecDeque::new());
                st.attention(nexus, 0x29, 0x00);
            }
            let blocks = self.blocks();
            if blocks != st.seen_blocks {
                st.seen_blocks = blocks;
                st.attention_others(None, 0x2A, 0x09);
            }
            if !matches!(op, 0x12 | 0xA0 | 0x03) {
                if let Some((asc, ascq)) = st.nexuses.get_mut(nexus).and_then(|q| q.pop_front()) {
                    return Reply::check(Sense::new(key::UNIT_ATTENTION, asc, ascq));
                }
            }
            if let Some(holder) = &st.spc2 {
                if holder != nexus && !matches!(op, 0x12 | 0xA0 | 0x03 | 0x17 | 0x57) {
                    return Reply::conflict();
                }
            }
            if st.spc2.is_none() && !matches!(class, Class::Always | Class::Release) {
                match st.pr.access(nexus) {
                    Access::All => {}
                    Access::ReadOnly if class == Class::Read => {}
                    _ => return Reply::conflict(),
                }
            }
        }
        self.dispatch(nexus, &cdb, data_out)
    }

    fn dispatch(&self, nexus: &Nexus, cdb: &Cdb, data_out: &[u8]) -> Reply {
        let r = match cdb.opcode() {
            0x00 => Ok(Reply::good(Vec::new())),
            0x03 => self.request_sense(nexus, cdb),
            0x12 => self.inquiry(nexus, cdb),
            0x15 | 0x55 => self.mode_select(nexus, cdb, data_out),
            0x1A | 0x5A => self.mode_sense(cdb),
            0x16 | 0x56 => self.reserve_spc2(nexus, cdb),
            0x17 | 0x57 => self.release_spc2(nexus, cdb),
            0x1B => self.start_stop(cdb),
            0x25 => self.read_capacity10(cdb),
            0x08 | 0x28 | 0xA8 | 0x88 => self.read(cdb),
            0x0A | 0x2A | 0xAA | 0x8A => self.write(cdb, data_out),
            0x2E | 0xAE | 0x8E => self.write_and_verify(cdb, data_out),
            0x2F | 0xAF | 0x8F => self.verify(cdb, data_out),
            0x34 | 0x90 => self.prefetch(cdb),
            0x35 | 0x91 => self.synchronize_cache(cdb),
            0x37 | 0xB7 => self.read_defect_data(cdb),
            0x41 | 0x93 => self.write_same(cdb, data_out),
            0x42 => self.unmap(cdb, data_out),
            0x5E => self.persistent_reserve_in(cdb),
            0x5F => self.persistent_reserve_out(nexus, cdb, data_out),
            0x89 => self.compare_and_write(cdb, data_out),
            0x8B => self.or_write(cdb, data_out),
            0x9C => self.write_atomic(cdb, data_out),
            0x9E => match cdb.service_action() {
                0x10 => self.read_capacity16(cdb),
                0x12 => self.get_lba_status(cdb),
                _ => Err(Sense::invalid_cdb_field(1, Some(4))),
            },
            0xA0 => Ok(crate::report_luns(cdb.0, &[0])),
            0xA3 => match cdb.service_action() {
                0x0C => Ok(crate::opcodes::report_supported(cdb)),
                _ => Err(Sense::invalid_cdb_field(1, Some(4))),
            },
            _ => Err(Sense::invalid_opcode()),
        };
        r.unwrap_or_else(Reply::check)
    }

    /// REQUEST SENSE: the pending unit attention (cleared by being reported) or NO
    /// SENSE, in fixed format.
    fn request_sense(&self, nexus: &Nexus, cdb: &Cdb) -> Result<Reply, Sense> {
        if cdb.u8(1) & 0x01 != 0 {
            return Err(Sense::invalid_cdb_field(1, Some(0)));
        }
        let alloc = cdb.u8(4) as usize;
        let pending = self
            .state
            .lock()
            .unwrap()
            .nexuses
            .get_mut(nexus)
            .and_then(|q| q.pop_front());
        let sense = match pending {
            Some((asc, ascq)) => Sense::new(key::UNIT_ATTENTION, asc, ascq),
            None => Sense::new(key::NO_SENSE, 0, 0),
        };
        let mut data = sense.to_fixed();
        data.truncate(alloc);
        Ok(Reply::good(data))
    }

    /// START STOP UNIT: the unit is not removable and has no power conditions to
    /// enter, so every form is accepted and changes nothing.
    fn start_stop(&self, _cdb: &Cdb) -> Result<Reply, Sense> {
        Ok(Reply::good(Vec::new()))
    }

    /// The unit forgets `nexus` (its session ended or its connection was lost): its
    /// SPC-2 reservation ends (SPC-2 5.5.1); persistent reservations stay.
    pub fn nexus_lost(&self, nexus: &Nexus) {
        let mut st = self.state.lock().unwrap();
        if st.spc2.as_ref() == Some(nexus) {
            st.spc2 = None;
        }
        st.nexuses.remove(nexus);
    }

    /// LOGICAL UNIT RESET (and the target resets, for each of its units): SPC-2
    /// reservations and mode settings go back to their defaults, and every nexus, the
    /// asking one too, gets BUS DEVICE RESET FUNCTION OCCURRED (29/03), as SAM-5
    /// 6.3.3 has it and multipath initiators (libiscsi's MultipathIO.Reset) check on
    /// each path. Persistent reservations stay (SPC-4 5.14.11).
    pub fn reset(&self) {
        let mut st = self.state.lock().unwrap();
        st.spc2 = None;
        st.swp = false;
        st.attention_others(None, 0x29, 0x03);
    }
}

/// Maps a volume error to the sense an initiator can act on.
pub(crate) fn sense_of(e: FsError, reading: bool) -> Sense {
    match e {
        FsError::NoSpace | FsError::Quota => Sense::space_allocation_failed(),
        FsError::ReadOnly => Sense::write_protected(false),
        FsError::Invalid(_) => Sense::lba_out_of_range(),
        _ if reading => Sense::unrecovered_read(),
        _ => Sense::internal_failure(),
    }
}
