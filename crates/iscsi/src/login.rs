//! The login phase (RFC 7143 6.3, 11.12-11.13): security negotiation (no
//! authentication, or CHAP and mutual CHAP), operational negotiation, and the move to
//! the full feature phase with a new session (TSIH). Each Login Request gets one Login
//! Response; a request continued over several PDUs (C bit) is gathered first. A
//! refusal is a Login Response with its status class and detail, after which the
//! connection closes:
//!
//! - 0x0201 authentication failed (wrong CHAP response, no CHAP where it is required,
//!   a reflected challenge);
//! - 0x0202 the initiator is not allowed on the target;
//! - 0x0203 no such target; 0x0207 a required key missing (InitiatorName, TargetName);
//! - 0x0205 no common version; 0x0208 a second connection to a session (MC/S is not
//!   offered); 0x020B a PDU that is not a Login Request during login.

use crate::chap::{self, Credential};
use crate::params::{self, SessionParams, LOGIN_DATA_SEGMENT, MAX_RECV_DATA_SEGMENT};
use crate::pdu::{op, read_pdu, Pdu};
use crate::target::{Target, Targets};
use crate::text;
use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;

/// The commands the initiator may have queued beyond ExpCmdSN.
pub const CMD_WINDOW: u32 = 128;
/// The portal group this server's portals belong to (one group: every portal reaches
/// every target, so multipath sees one target through each).
pub const PORTAL_GROUP: u16 = 1;
/// Text gathered over continued Login Requests, at most.
const LOGIN_TEXT_MAX: usize = 64 * 1024;

/// What a successful login hands to the full feature phase.
pub struct LoggedIn {
    pub initiator: String,
    pub isid: [u8; 6],
    pub tsih: u16,
    /// The target of a normal session; `None` for a discovery session.
    pub target: Option<Arc<Target>>,
    pub params: SessionParams,
    /// The next StatSN to send.
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
}

/// Why a login ended without a session.
#[derive(Debug)]
pub struct Refused(pub String);

struct Chap {
    id: u8,
    challenge: [u8; chap::CHALLENGE_LEN],
}

struct State {
    initiator: Option<String>,
    discovery: bool,
    target: Option<Arc<Target>>,
    params: SessionParams,
    authenticated: bool,
    chap: Option<Chap>,
    declared: bool,
    stat_sn: u32,
    exp_cmd_sn: u32,
}

fn refuse(
    stream: &mut TcpStream,
    req: &Pdu,
    st: &State,
    class: u8,
    detail: u8,
    why: String,
) -> Refused {
    let mut r = response_to(req, st);
    r.bhs[1] = 0;
    r.bhs[36] = class;
    r.bhs[37] = detail;
    let _ = r.write_to(stream, false, false);
    Refused(why)
}

fn response_to(req: &Pdu, st: &State) -> Pdu {
    let mut r = Pdu::new(op::LOGIN_RESPONSE);
    r.bhs[8..14].copy_from_slice(&req.bhs[8..14]);
    r.set_u32(16, req.itt());
    r.set_u32(24, st.stat_sn);
    r.set_u32(28, st.exp_cmd_sn);
    r.set_u32(32, st.exp_cmd_sn.wrapping_add(CMD_WINDOW - 1));
    r
}

/// Runs the login phase on `stream` from its first PDU on.
pub fn login(
    stream: &mut TcpStream,
    targets: &Targets,
    new_tsih: &dyn Fn() -> u16,
) -> Result<LoggedIn, Refused> {
    let mut st = State {
        initiator: None,
        discovery: false,
        target: None,
        params: SessionParams::default(),
        authenticated: false,
        chap: None,
        declared: false,
        stat_sn: 0,
        exp_cmd_sn: 0,
    };
    let mut first = true;
    loop {
        let req = read_pdu(stream, false, false, LOGIN_DATA_SEGMENT as usize)
            .map_err(|e| Refused(format!("reading a Login Request: {e}")))?;
        if req.opcode() != op::LOGIN {
            return Err(refuse(
                stream,
                &req,
                &st,
                2,
                0x0B,
                format!("opcode {:#x} during login", req.opcode()),
            ));
        }
        if first {
            st.stat_sn = req.word28();
            st.exp_cmd_sn = req.word24();
            if req.bhs[3] > 0 {
                // Version-min above 0.
                return Err(refuse(
                    stream,
                    &req,
                    &st,
                    2,
                    0x05,
                    "no common version".into(),
                ));
            }
            if req.u16_at(14) != 0 {
                return Err(refuse(
                    stream,
                    &req,
                    &st,
                    2,
                    0x08,
                    "a second connection to a session".into(),
                ));
            }
        }
        // Gather a request continued over several PDUs, answering each part.
        let mut req = req;
        let mut data = req.data.clone();
        while req.flags() & 0x40 != 0 {
            let mut ack = response_to(&req, &st);
            ack.bhs[1] = req.flags() & 0x0C;
            ack.write_to(stream, false, false)
                .map_err(|e| Refused(e.to_string()))?;
            st.stat_sn = st.stat_sn.wrapping_add(1);
            req = read_pdu(stream, false, false, LOGIN_DATA_SEGMENT as usize)
                .map_err(|e| Refused(format!("reading a Login Request: {e}")))?;
            if req.opcode() != op::LOGIN || data.len() + req.data.len() > LOGIN_TEXT_MAX {
                return Err(refuse(
                    stream,
                    &req,
                    &st,
                    2,
                    0x00,
                    "a bad continued login".into(),
                ));
            }
            data.extend_from_slice(&req.data);
        }
        let keys = match text::parse(&data) {
            Ok(k) => k,
            Err(e) => return Err(refuse(stream, &req, &st, 2, 0x00, e)),
        };
        let transit = req.flags() & 0x80 != 0;
        let csg = (req.flags() >> 2) & 3;
        let nsg = req.flags() & 3;
        let mut answers: Vec<(String, String)> = Vec::new();

        if first {
            first = false;
            let get = |k: &str| {
                keys.iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            let Some(initiator) = get("InitiatorName") else {
                return Err(refuse(
                    stream,
                    &req,
                    &st,
                    2,
                    0x07,
                    "no InitiatorName".into(),
                ));
            };
            st.initiator = Some(initiator.clone());
            st.discovery = get("SessionType").as_deref() == Some("Discovery");
            if !st.discovery {
                let Some(name) = get("TargetName") else {
                    return Err(refuse(stream, &req, &st, 2, 0x07, "no TargetName".into()));
                };
                let Some(target) = targets.get(&name) else {
                    return Err(refuse(
                        stream,
                        &req,
                        &st,
                        2,
                        0x03,
                        format!("no target {name}"),
                    ));
                };
                if !target.admits(&initiator) {
                    return Err(refuse(
                        stream,
                        &req,
                        &st,
                        2,
                        0x02,
                        format!("{initiator} may not log in to {name}"),
                    ));
                }
                if let Some(alias) = &target.alias {
                    answers.push(("TargetAlias".into(), alias.clone()));
                }
                answers.push(("TargetPortalGroupTag".into(), PORTAL_GROUP.to_string()));
                st.target = Some(target);
            }
        }
        // A normal session answers its target's CHAP; a discovery session the
        // discovery CHAP, when one is set.
        let (required, mutual) = if st.discovery {
            let auth = targets.discovery_auth();
            (auth.chap, auth.mutual_chap)
        } else {
            let t = st.target.as_ref();
            (
                t.and_then(|t| t.chap.clone()),
                t.and_then(|t| t.mutual_chap.clone()),
            )
        };
        if csg == 1 && !st.authenticated {
            if required.is_some() {
                return Err(refuse(stream, &req, &st, 2, 0x01, "CHAP required".into()));
            }
            st.authenticated = true;
        }
        if csg == 0 {
            if let Err(why) = security(
                &mut st,
                &keys,
                required.as_ref(),
                mutual.as_ref(),
                &mut answers,
            ) {
                return Err(refuse(stream, &req, &st, 2, 0x01, why));
            }
        }
        for (k, v) in &keys {
            if let Some(a) = params::negotiate(&mut st.params, k, v) {
                answers.push((k.clone(), a));
            }
        }
        // Operational keys belong to the operational stage (an initiator refuses them
        // in a security-stage answer).
        if csg == 1 && !st.declared {
            answers.push((
                "MaxRecvDataSegmentLength".into(),
                MAX_RECV_DATA_SEGMENT.to_string(),
            ));
            st.declared = true;
        }
        let mut r = response_to(&req, &st);
        r.data = text::encode(&answers);
        let moving = transit && (csg != 0 || st.authenticated);
        let done = moving && nsg == 3;
        if moving {
            r.bhs[1] = 0x80 | (csg << 2) | nsg;
        } else {
            r.bhs[1] = csg << 2;
        }
        let tsih = if done { new_tsih() } else { 0 };
        r.set_u16(14, tsih);
        r.write_to(stream, false, false)
            .map_err(|e| Refused(e.to_string()))?;
        stream.flush().ok();
        st.stat_sn = st.stat_sn.wrapping_add(1);
        if done {
            params::settle(&mut st.params);
            return Ok(LoggedIn {
                initiator: st.initiator.take().unwrap_or_default(),
                isid: req.bhs[8..14].try_into().unwrap(),
                tsih,
                target: st.target.take(),
                params: st.params,
                stat_sn: st.stat_sn,
                exp_cmd_sn: st.exp_cmd_sn,
            });
        }
    }
}

/// The security stage's keys: AuthMethod, then CHAP's exchange.
fn security(
    st: &mut State,
    keys: &[(String, String)],
    required: Option<&Credential>,
    mutual: Option<&Credential>,
    answers: &mut Vec<(String, String)>,
) -> Result<(), String> {
    let get = |k: &str| {
        keys.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    if let Some(methods) = get("AuthMethod") {
        let offered: Vec<&str> = methods.split(',').collect();
        match required {
            Some(_) if offered.contains(&"CHAP") => {
                answers.push(("AuthMethod".into(), "CHAP".into()));
            }
            Some(_) => {
                return Err("the target requires CHAP; the initiator did not offer it".into())
            }
            None if offered.contains(&"None") => {
                answers.push(("AuthMethod".into(), "None".into()));
                st.authenticated = true;
            }
            None => {
                return Err("the target has no CHAP secret; the initiator offered only CHAP".into())
            }
        }
    }
    if let Some(algs) = get("CHAP_A") {
        let Some(_) = required else {
            return Err("CHAP_A without CHAP".into());
        };
        if !algs.split(',').any(|a| a == chap::MD5) {
            answers.push(("CHAP_A".into(), "Reject".into()));
            return Err("no CHAP algorithm in common (MD5 only)".into());
        }
        let id = chap::random_bytes::<1>()[0];
        let challenge = chap::random_bytes::<{ chap::CHALLENGE_LEN }>();
        answers.push(("CHAP_A".into(), chap::MD5.into()));
        answers.push(("CHAP_I".into(), id.to_string()));
        answers.push(("CHAP_C".into(), chap::to_hex(&challenge)));
        st.chap = Some(Chap { id, challenge });
    }
    if let (Some(name), Some(resp)) = (get("CHAP_N"), get("CHAP_R")) {
        let (Some(cred), Some(c)) = (required, st.chap.as_ref()) else {
            return Err("a CHAP response without a challenge".into());
        };
        let got = chap::decode(resp).ok_or("an unreadable CHAP_R")?;
        let want = chap::response(c.id, cred.secret.as_bytes(), &c.challenge);
        if name != cred.user || got != want {
            return Err(format!("CHAP: wrong user or secret for '{name}'"));
        }
        if let (Some(id), Some(challenge)) = (get("CHAP_I"), get("CHAP_C")) {
            let mutual = mutual
                .ok_or("the initiator asked for mutual CHAP; the target has no secret for it")?;
            let id: u8 = id.parse().map_err(|_| "an unreadable CHAP_I")?;
            let challenge = chap::decode(challenge).ok_or("an unreadable CHAP_C")?;
            if challenge == c.challenge || challenge.is_empty() {
                return Err("a reflected or empty CHAP challenge".into());
            }
            let r = chap::response(id, mutual.secret.as_bytes(), &challenge);
            answers.push(("CHAP_N".into(), mutual.user.clone()));
            answers.push(("CHAP_R".into(), chap::to_hex(&r)));
        }
        st.chap = None;
        st.authenticated = true;
    }
    Ok(())
}
