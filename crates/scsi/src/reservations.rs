//! Reservations: SPC-2 RESERVE/RELEASE (one nexus holds the whole unit until it
//! releases it, its nexus is lost or the unit is reset) and SPC-4 persistent
//! reservations (PERSISTENT RESERVE IN/OUT: registered keys per I_T nexus and one
//! reservation of six types, scope LU), which clusters (Windows failover clusters,
//! ESXi VMFS, Pacemaker's fence_scsi) use to fence a node.
//!
//! Persistent state (registrations, the reservation, the generation) survives a
//! restart and a move of the pool: every change is handed to the unit's store, before
//! it is answered, and the unit starts from what was stored (`PrState::decode`). A
//! crash between the change and the store answers nothing, so an initiator retries.

use crate::cdb::{put_u16, put_u32, put_u64, Cdb};
use crate::lu::LogicalUnit;
use crate::sense::{key, Sense};
use crate::{Nexus, Reply};
use serde::{Deserialize, Serialize};

/// Reservation types (SPC-4 6.15.2).
pub const WRITE_EXCLUSIVE: u8 = 1;
pub const EXCLUSIVE_ACCESS: u8 = 3;
pub const WRITE_EXCLUSIVE_REGISTRANTS_ONLY: u8 = 5;
pub const EXCLUSIVE_ACCESS_REGISTRANTS_ONLY: u8 = 6;
pub const WRITE_EXCLUSIVE_ALL_REGISTRANTS: u8 = 7;
pub const EXCLUSIVE_ACCESS_ALL_REGISTRANTS: u8 = 8;
const TYPES: [u8; 6] = [1, 3, 5, 6, 7, 8];
/// Registrations kept at most (a refusal past it: INSUFFICIENT REGISTRATION
/// RESOURCES).
const MAX_REGISTRATIONS: usize = 256;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Registration {
    pub nexus: Nexus,
    pub key: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reservation {
    /// The holder (for the all-registrants types, the nexus that reserved; every
    /// registrant holds it).
    pub nexus: Nexus,
    pub kind: u8,
}

/// The persistent-reservation state of one unit, as stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PrState {
    pub version: u32,
    pub generation: u32,
    pub registrations: Vec<Registration>,
    pub reservation: Option<Reservation>,
    /// APTPL as last given: kept for REPORT CAPABILITIES; the state is kept across
    /// power loss either way.
    pub aptpl: bool,
}

/// What a nexus may do under the current reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    All,
    ReadOnly,
    None,
}

fn all_registrants(kind: u8) -> bool {
    matches!(
        kind,
        WRITE_EXCLUSIVE_ALL_REGISTRANTS | EXCLUSIVE_ACCESS_ALL_REGISTRANTS
    )
}

impl PrState {
    pub fn encode(&self) -> Vec<u8> {
        let mut s = self.clone();
        s.version = 1;
        serde_json::to_vec(&s).expect("reservations serialise")
    }

    pub fn decode(bytes: &[u8]) -> Result<PrState, String> {
        let s: PrState = serde_json::from_slice(bytes)
            .map_err(|e| format!("stored persistent reservations do not parse: {e}"))?;
        if s.version != 1 {
            return Err(format!(
                "stored persistent reservations are version {}, not 1",
                s.version
            ));
        }
        Ok(s)
    }

    pub fn key_of(&self, nexus: &Nexus) -> Option<u64> {
        self.registrations
            .iter()
            .find(|r| &r.nexus == nexus)
            .map(|r| r.key)
    }

    fn holds(&self, nexus: &Nexus) -> bool {
        match &self.reservation {
            None => false,
            Some(r) if all_registrants(r.kind) => self.key_of(nexus).is_some(),
            Some(r) => &r.nexus == nexus,
        }
    }

    /// SPC-4 table 48: what `nexus` may do.
    pub fn access(&self, nexus: &Nexus) -> Access {
        let Some(r) = &self.reservation else {
            return Access::All;
        };
        if self.holds(nexus) {
            return Access::All;
        }
        let registered = self.key_of(nexus).is_some();
        match r.kind {
            WRITE_EXCLUSIVE => Access::ReadOnly,
            EXCLUSIVE_ACCESS => Access::None,
            WRITE_EXCLUSIVE_REGISTRANTS_ONLY | WRITE_EXCLUSIVE_ALL_REGISTRANTS => {
                if registered {
                    Access::All
                } else {
                    Access::ReadOnly
                }
            }
            _ => {
                if registered {
                    Access::All
                } else {
                    Access::None
                }
            }
        }
    }

    /// Removes `nexus`'s registration; a reservation it held goes with it (for the
    /// all-registrants types, only with the last registrant). Answers whether a
    /// reservation of a registrants-only type was released, which the others must
    /// hear of.
    fn unregister(&mut self, nexus: &Nexus) -> bool {
        self.registrations.retain(|r| &r.nexus != nexus);
        match &self.reservation {
            Some(r) if all_registrants(r.kind) => {
                if self.registrations.is_empty() {
                    self.reservation = None;
                }
                false
            }
            Some(r) if &r.nexus == nexus => {
                let kind = r.kind;
                self.reservation = None;
                matches!(
                    kind,
                    WRITE_EXCLUSIVE_REGISTRANTS_ONLY | EXCLUSIVE_ACCESS_REGISTRANTS_ONLY
                )
            }
            _ => false,
        }
    }
}

impl LogicalUnit {
    pub(crate) fn reserve_spc2(&self, nexus: &Nexus, cdb: &Cdb) -> Result<Reply, Sense> {
        if cdb.opcode() == 0x56 && cdb.u8(1) & 0x03 != 0 {
            return Err(Sense::invalid_cdb_field(1, None)); // third-party reservations
        }
        let mut st = self.state.lock().unwrap();
        if st.pr.reservation.is_some() || !st.pr.registrations.is_empty() {
            return Ok(Reply::conflict());
        }
        match &st.spc2 {
            Some(holder) if holder != nexus => Ok(Reply::conflict()),
            _ => {
                st.spc2 = Some(nexus.clone());
                Ok(Reply::good(Vec::new()))
            }
        }
    }

    pub(crate) fn release_spc2(&self, nexus: &Nexus, _cdb: &Cdb) -> Result<Reply, Sense> {
        let mut st = self.state.lock().unwrap();
        if st.spc2.as_ref() == Some(nexus) {
            st.spc2 = None;
        }
        Ok(Reply::good(Vec::new()))
    }

    pub(crate) fn persistent_reserve_in(&self, cdb: &Cdb) -> Result<Reply, Sense> {
        let action = cdb.service_action();
        let alloc = cdb.u16(7) as usize;
        let st = self.state.lock().unwrap();
        let pr = &st.pr;
        let mut d = vec![0u8; 8];
        put_u32(&mut d, 0, pr.generation);
        match action {
            0 => {
                put_u32(&mut d, 4, (8 * pr.registrations.len()) as u32);
                for r in &pr.registrations {
                    d.extend_from_slice(&r.key.to_be_bytes());
                }
            }
            1 => {
                if let Some(r) = &pr.reservation {
                    put_u32(&mut d, 4, 16);
                    let mut body = [0u8; 16];
                    let key = if all_registrants(r.kind) {
                        0
                    } else {
                        pr.key_of(&r.nexus).unwrap_or(0)
                    };
                    put_u64(&mut body, 0, key);
                    body[13] = r.kind & 0x0F;
                    d.extend_from_slice(&body);
                }
            }
            2 => {
                d = vec![0u8; 8];
                put_u16(&mut d, 0, 8);
                d[2] = 0x10 | 0x01; // CRH, PTPL_C
                d[3] = 0x80 | (1 << 4) | u8::from(pr.aptpl); // TMV, ALLOW COMMANDS 1, PTPL_A
                d[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02; // WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX
                d[5] = 0x01; // EX_AC_AR
            }
            3 => {
                let mut body = Vec::new();
                for r in &pr.registrations {
                    let mut e = vec![0u8; 24];
                    put_u64(&mut e, 0, r.key);
                    if pr.holds(&r.nexus) {
                        e[12] = 0x01; // R_HOLDER
                        e[13] = pr.reservation.as_ref().map_or(0, |x| x.kind & 0x0F);
                    }
                    put_u16(&mut e, 18, r.nexus.target_port);
                    let id = transport_id(&r.nexus.initiator_port);
                    put_u32(&mut e, 20, id.len() as u32);
                    e.extend_from_slice(&id);
                    body.extend_from_slice(&e);
                }
                put_u32(&mut d, 4, body.len() as u32);
                d.extend_from_slice(&body);
            }
            _ => return Err(Sense::invalid_cdb_field(1, Some(4))),
        }
        d.truncate(alloc);
        Ok(Reply::good(d))
    }

    pub(crate) fn persistent_reserve_out(
        &self,
        nexus: &Nexus,
        cdb: &Cdb,
        data: &[u8],
    ) -> Result<Reply, Sense> {
        let action = cdb.service_action();
        let scope = cdb.u8(2) >> 4;
        let kind = cdb.u8(2) & 0x0F;
        let len = cdb.u32(5) as usize;
        if action > 6 {
            return Err(Sense::invalid_cdb_field(1, Some(4)));
        }
        if len != 24 || data.len() < 24 {
            return Err(Sense::param_list_length());
        }
        let p = &data[..24];
        let key = u64::from_be_bytes(p[..8].try_into().unwrap());
        let sa_key = u64::from_be_bytes(p[8..16].try_into().unwrap());
        let flags = p[20];
        if flags & 0x08 != 0 || flags & 0x04 != 0 {
            // SPEC_I_PT and ALL_TG_PT are not offered.
            return Err(Sense::invalid_param_field(20));
        }
        let aptpl = flags & 0x01 != 0;
        let needs_type = matches!(action, 1 | 2 | 4 | 5);
        if needs_type {
            if scope != 0 {
                return Err(Sense::invalid_cdb_field(2, Some(7)));
            }
            if !TYPES.contains(&kind) {
                return Err(Sense::invalid_cdb_field(2, Some(3)));
            }
        }
        let mut st = self.state.lock().unwrap();
        if st.spc2.is_some() {
            return Ok(Reply::conflict());
        }
        let mut pr = st.pr.clone();
        let mine = pr.key_of(nexus);
        let mut attentions: Vec<(Nexus, u8, u8)> = Vec::new();
        match action {
            // REGISTER, REGISTER AND IGNORE EXISTING KEY
            0 | 6 => {
                if action == 0 && mine.unwrap_or(0) != key {
                    return Ok(Reply::conflict());
                }
                match (mine, sa_key) {
                    (None, 0) => return Ok(Reply::good(Vec::new())),
                    (None, new) => {
                        if pr.registrations.len() >= MAX_REGISTRATIONS {
                            return Err(Sense::new(key::ILLEGAL_REQUEST, 0x55, 0x04));
                        }
                        pr.registrations.push(Registration {
                            nexus: nexus.clone(),
                            key: new,
                        });
                    }
                    (Some(_), 0) => {
                        if pr.unregister(nexus) {
                            for r in &pr.registrations {
                                attentions.push((r.nexus.clone(), 0x2A, 0x04));
                            }
                        }
                    }
                    (Some(_), new) => {
                        for r in pr.registrations.iter_mut().filter(|r| &r.nexus == nexus) {
                            r.key = new;
                        }
                    }
                }
                pr.aptpl = aptpl;
                pr.generation = pr.generation.wrapping_add(1);
            }
            // RESERVE
            1 => {
                if mine != Some(key) {
                    return Ok(Reply::conflict());
                }
                match &pr.reservation {
                    Some(r) if r.kind != kind => return Ok(Reply::conflict()),
                    Some(r) if !all_registrants(r.kind) && &r.nexus != nexus => {
                        return Ok(Reply::conflict())
                    }
                    Some(_) => return Ok(Reply::good(Vec::new())),
                    None => {
                        pr.reservation = Some(Reservation {
                            nexus: nexus.clone(),
                            kind,
                        })
                    }
                }
            }
            // RELEASE
            2 => {
                if mine != Some(key) {
                    return Ok(Reply::conflict());
                }
                let Some(r) = pr.reservation.clone() else {
                    return Ok(Reply::good(Vec::new()));
                };
                if !pr.holds(nexus) {
                    return Ok(Reply::good(Vec::new()));
                }
                if r.kind != kind {
                    return Err(Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x04));
                }
                pr.reservation = None;
                if matches!(kind, 5..=8) {
                    for reg in &pr.registrations {
                        if &reg.nexus != nexus {
                            attentions.push((reg.nexus.clone(), 0x2A, 0x04));
                        }
                    }
                }
            }
            // CLEAR
            3 => {
                if mine != Some(key) {
                    return Ok(Reply::conflict());
                }
                for reg in &pr.registrations {
                    if &reg.nexus != nexus {
                        attentions.push((reg.nexus.clone(), 0x2A, 0x03));
                    }
                }
                pr.registrations.clear();
                pr.reservation = None;
                pr.generation = pr.generation.wrapping_add(1);
            }
            // PREEMPT, PREEMPT AND ABORT
            _ => {
                if mine != Some(key) {
                    return Ok(Reply::conflict());
                }
                let holder_key = pr
                    .reservation
                    .as_ref()
                    .filter(|r| !all_registrants(r.kind))
                    .and_then(|r| pr.key_of(&r.nexus));
                let all = pr
                    .reservation
                    .as_ref()
                    .is_some_and(|r| all_registrants(r.kind));
                let removed: Vec<Nexus> = if all && sa_key == 0 {
                    pr.registrations
                        .iter()
                        .filter(|r| &r.nexus != nexus)
                        .map(|r| r.nexus.clone())
                        .collect()
                } else {
                    if sa_key == 0 {
                        return Err(Sense::invalid_param_field(8));
                    }
                    let matching: Vec<Nexus> = pr
                        .registrations
                        .iter()
                        .filter(|r| r.key == sa_key)
                        .map(|r| r.nexus.clone())
                        .collect();
                    if matching.is_empty() {
                        return Ok(Reply::conflict());
                    }
                    matching
                };
                let takes_reservation = (all && sa_key == 0) || holder_key == Some(sa_key);
                pr.registrations
                    .retain(|r| &r.nexus == nexus || !removed.contains(&r.nexus));
                for n in &removed {
                    attentions.push((n.clone(), 0x2A, 0x05));
                }
                if takes_reservation {
                    pr.reservation = Some(Reservation {
                        nexus: nexus.clone(),
                        kind,
                    });
                }
                pr.generation = pr.generation.wrapping_add(1);
            }
        }
        self.persist(&pr)?;
        st.pr = pr;
        for (n, asc, ascq) in attentions {
            st.attention(&n, asc, ascq);
        }
        Ok(Reply::good(Vec::new()))
    }
}

/// An iSCSI TransportID (SPC-4 7.6.4.6), format 01b: the initiator port's name with
/// its ISID, NUL-terminated and padded to a multiple of four.
fn transport_id(initiator_port: &str) -> Vec<u8> {
    let mut name = initiator_port.as_bytes().to_vec();
    name.push(0);
    while !name.len().is_multiple_of(4) {
        name.push(0);
    }
    let mut id = vec![0x40 | 0x05, 0, 0, 0];
    put_u16(&mut id, 2, name.len() as u16);
    id.extend_from_slice(&name);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u8) -> Nexus {
        Nexus {
            initiator_port: format!("iqn.test:{i},i,0x00023d000001"),
            target_port: 1,
        }
    }

    #[test]
    fn access_follows_the_table_for_each_type() {
        // (type, registered non-holder, unregistered) access.
        for (kind, reg, unreg) in [
            (WRITE_EXCLUSIVE, Access::ReadOnly, Access::ReadOnly),
            (EXCLUSIVE_ACCESS, Access::None, Access::None),
            (
                WRITE_EXCLUSIVE_REGISTRANTS_ONLY,
                Access::All,
                Access::ReadOnly,
            ),
            (EXCLUSIVE_ACCESS_REGISTRANTS_ONLY, Access::All, Access::None),
            (
                WRITE_EXCLUSIVE_ALL_REGISTRANTS,
                Access::All,
                Access::ReadOnly,
            ),
            (EXCLUSIVE_ACCESS_ALL_REGISTRANTS, Access::All, Access::None),
        ] {
            let pr = PrState {
                registrations: vec![
                    Registration {
                        nexus: n(1),
                        key: 1,
                    },
                    Registration {
                        nexus: n(2),
                        key: 2,
                    },
                ],
                reservation: Some(Reservation { nexus: n(1), kind }),
                ..PrState::default()
            };
            assert_eq!(pr.access(&n(1)), Access::All, "type {kind}");
            assert_eq!(pr.access(&n(2)), reg, "type {kind}");
            assert_eq!(pr.access(&n(3)), unreg, "type {kind}");
        }
    }

    #[test]
    fn state_round_trips_and_a_foreign_version_is_refused() {
        let pr = PrState {
            generation: 7,
            registrations: vec![Registration {
                nexus: n(1),
                key: 9,
            }],
            reservation: Some(Reservation {
                nexus: n(1),
                kind: 3,
            }),
            ..PrState::default()
        };
        let back = PrState::decode(&pr.encode()).unwrap();
        assert_eq!(back.generation, 7);
        assert_eq!(back.reservation, pr.reservation);
        assert!(PrState::decode(
            br#"{"version":2,"generation":0,"registrations":[],"reservation":null,"aptpl":false}"#
        )
        .is_err());
        assert!(PrState::decode(b"junk").is_err());
    }

    #[test]
    fn transport_ids_are_padded() {
        let id = transport_id("iqn.a,i,0x1");
        assert_eq!(id[0], 0x45);
        assert_eq!(id.len() % 4, 0);
        assert_eq!(u16::from_be_bytes([id[2], id[3]]) as usize, id.len() - 4);
    }
}
