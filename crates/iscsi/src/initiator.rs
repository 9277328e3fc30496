//! A small synchronous iSCSI initiator: one session, one command at a time. It is
//! what shoal's own tools and tests use to talk to a target (shoal's or any other)
//! without a kernel: log in (with CHAP and mutual CHAP when given), discover targets
//! (SendTargets), run SCSI commands with Data-Out (immediate data, then R2Ts) and
//! Data-In (reassembled by offset), and log out.
//!
//! Why here rather than borrowed: no Rust iSCSI initiator is packaged, libiscsi's
//! tools cannot write a given byte pattern, and the kernel's initiator needs a virtual
//! machine. It checks what it reads (opcodes, ITTs, offsets, DataSN order, status)
//! and answers an error rather than panicking on a target's bad PDU.

use crate::chap;
use crate::pdu::{op, read_pdu, Pdu};
use crate::text;
use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// What a login or a command went wrong with.
#[derive(Debug)]
pub enum InitiatorError {
    Io(io::Error),
    /// The target refused the login: its status class and detail, as RFC 7143
    /// 11.13.5 numbers them.
    LoginRefused(u8, u8),
    /// The target broke the protocol (an unexpected PDU, a bad offset).
    Protocol(String),
}

impl std::fmt::Display for InitiatorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitiatorError::Io(e) => write!(f, "{e}"),
            InitiatorError::LoginRefused(class, detail) => {
                write!(f, "login refused (status {class:#04x}/{detail:#04x})")
            }
            InitiatorError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for InitiatorError {}

impl From<io::Error> for InitiatorError {
    fn from(e: io::Error) -> Self {
        InitiatorError::Io(e)
    }
}

impl From<crate::pdu::PduError> for InitiatorError {
    fn from(e: crate::pdu::PduError) -> Self {
        InitiatorError::Protocol(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, InitiatorError>;

fn protocol<T>(m: impl Into<String>) -> Result<T> {
    Err(InitiatorError::Protocol(m.into()))
}

/// Who logs in, to what, and how it proves itself.
#[derive(Debug, Clone)]
pub struct LoginSpec {
    pub initiator: String,
    /// `None`: a discovery session.
    pub target: Option<String>,
    /// CHAP user and secret the initiator answers with.
    pub chap: Option<(String, String)>,
    /// The user and secret the target must answer with (mutual CHAP).
    pub mutual_chap: Option<(String, String)>,
}

/// A SCSI command's answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u8,
    pub data: Vec<u8>,
    /// Sense data (fixed format) for CHECK CONDITION.
    pub sense: Vec<u8>,
}

/// A logged-in session as `Initiator::into_session` hands it over.
pub struct Session {
    pub stream: TcpStream,
    /// The CmdSN of the next command, and the newest the target takes.
    pub cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_stat_sn: u32,
    /// The most data the target takes in one PDU.
    pub target_max_recv: usize,
    /// The most immediate data a command may carry (0: none).
    pub first_burst: usize,
}

pub struct Initiator {
    stream: TcpStream,
    cmd_sn: u32,
    /// The newest CmdSN the target will take, as its last answer said.
    max_cmd_sn: u32,
    exp_stat_sn: u32,
    itt: u32,
    /// The most data the target takes in one PDU, and in one burst of unsolicited
    /// data.
    target_max_recv: usize,
    first_burst: usize,
}

const MAX_RECV: usize = 262_144;
const ISID: [u8; 6] = [0x80, 0x53, 0x48, 0x4F, 0x41, 0x4C];

fn keys(pairs: &[(&str, &str)]) -> Vec<u8> {
    let owned: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    text::encode(&owned)
}

impl Initiator {
    /// Connects to `portal` and logs in as `spec` says, to the full feature phase.
    pub fn login(portal: SocketAddr, spec: &LoginSpec) -> Result<Initiator> {
        let stream = TcpStream::connect_timeout(&portal, Duration::from_secs(10))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut me = Initiator {
            stream,
            cmd_sn: 1,
            max_cmd_sn: 1,
            exp_stat_sn: 0,
            itt: 0,
            target_max_recv: 8192,
            first_burst: 65536,
        };
        me.negotiate(spec)?;
        Ok(me)
    }

    fn login_pdu(&mut self, csg: u8, nsg: Option<u8>, data: Vec<u8>) -> Result<Pdu> {
        let mut p = Pdu::new(op::LOGIN);
        p.bhs[0] |= 0x40;
        p.bhs[1] = (csg << 2) | nsg.map_or(0, |n| 0x80 | n);
        p.bhs[8..14].copy_from_slice(&ISID);
        p.set_u32(16, self.itt);
        p.set_u32(24, self.cmd_sn);
        p.set_u32(28, self.exp_stat_sn);
        p.data = data;
        p.write_to(&mut self.stream, false, false)?;
        let r = read_pdu(&mut self.stream, false, false, MAX_RECV)?;
        if r.opcode() != op::LOGIN_RESPONSE {
            return protocol(format!("opcode {:#04x} during login", r.opcode()));
        }
        if (r.bhs[36], r.bhs[37]) != (0, 0) {
            return Err(InitiatorError::LoginRefused(r.bhs[36], r.bhs[37]));
        }
        self.exp_stat_sn = r.u32_at(24).wrapping_add(1);
        self.max_cmd_sn = r.u32_at(32);
        Ok(r)
    }

    fn negotiate(&mut self, spec: &LoginSpec) -> Result<()> {
        let mut first: Vec<(&str, &str)> = vec![("InitiatorName", &spec.initiator)];
        match &spec.target {
            Some(t) => first.extend([("SessionType", "Normal"), ("TargetName", t.as_str())]),
            None => first.push(("SessionType", "Discovery")),
        }
        if let Some((user, secret)) = &spec.chap {
            first.push(("AuthMethod", "CHAP"));
            let r = self.login_pdu(0, None, keys(&first))?;
            self.expect_key(&r, "AuthMethod", "CHAP")?;
            let r = self.login_pdu(0, None, keys(&[("CHAP_A", "5")]))?;
            let got = self.keys_of(&r)?;
            let (Some(id), Some(challenge)) = (got.get("CHAP_I"), got.get("CHAP_C")) else {
                return protocol("no CHAP challenge");
            };
            let id: u8 = id
                .parse()
                .map_err(|_| InitiatorError::Protocol(format!("CHAP_I {id}")))?;
            let Some(challenge) = chap::decode(challenge) else {
                return protocol(format!("CHAP_C {challenge}"));
            };
            let response = chap::to_hex(&chap::response(id, secret.as_bytes(), &challenge));
            let mut answer = vec![("CHAP_N", user.as_str()), ("CHAP_R", response.as_str())];
            // Mutual CHAP: the initiator's own challenge goes with its answer.
            let my_challenge = chap::random_bytes::<16>();
            let my_id = chap::random_bytes::<1>()[0];
            let (id_text, challenge_text) = (my_id.to_string(), chap::to_hex(&my_challenge));
            if spec.mutual_chap.is_some() {
                answer.push(("CHAP_I", &id_text));
                answer.push(("CHAP_C", &challenge_text));
            }
            let r = self.login_pdu(0, Some(1), keys(&answer))?;
            if let Some((user, secret)) = &spec.mutual_chap {
                let got = self.keys_of(&r)?;
                let want = chap::response(my_id, secret.as_bytes(), &my_challenge);
                let ok = got.get("CHAP_N") == Some(user)
                    && got
                        .get("CHAP_R")
                        .and_then(|v| chap::decode(v))
                        .is_some_and(|v| v == want);
                if !ok {
                    return protocol("the target's mutual CHAP answer is wrong");
                }
            }
            self.operational(&[])
        } else {
            first.push(("AuthMethod", "None"));
            let r = self.login_pdu(0, Some(1), keys(&first))?;
            if r.bhs[1] & 0x83 != 0x81 {
                return protocol("the target did not move to the operational stage");
            }
            self.operational(&[])
        }
    }

    fn operational(&mut self, extra: &[(&str, &str)]) -> Result<()> {
        let max_recv = MAX_RECV.to_string();
        let mut pairs: Vec<(&str, &str)> = vec![
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("InitialR2T", "No"),
            ("ImmediateData", "Yes"),
            ("MaxRecvDataSegmentLength", &max_recv),
            ("MaxBurstLength", "1048576"),
            ("FirstBurstLength", "262144"),
            ("ErrorRecoveryLevel", "0"),
        ];
        pairs.extend_from_slice(extra);
        let r = self.login_pdu(1, Some(3), keys(&pairs))?;
        if r.bhs[1] & 0x83 != 0x83 {
            return protocol("the target did not move to the full feature phase");
        }
        let got = self.keys_of(&r)?;
        if let Some(n) = got
            .get("MaxRecvDataSegmentLength")
            .and_then(|v| v.parse().ok())
        {
            self.target_max_recv = n;
        }
        if let Some(n) = got.get("FirstBurstLength").and_then(|v| v.parse().ok()) {
            self.first_burst = n;
        }
        if got.get("InitialR2T").map(String::as_str) == Some("Yes") {
            self.first_burst = 0;
        }
        if got.get("ImmediateData").map(String::as_str) == Some("No") {
            self.first_burst = 0;
        }
        self.cmd_sn = r.u32_at(28);
        Ok(())
    }

    fn keys_of(&self, r: &Pdu) -> Result<BTreeMap<String, String>> {
        text::parse(&r.data)
            .map(|v| v.into_iter().collect())
            .map_err(|e| InitiatorError::Protocol(format!("login keys: {e}")))
    }

    fn expect_key(&self, r: &Pdu, key: &str, want: &str) -> Result<()> {
        match self.keys_of(r)?.get(key) {
            Some(v) if v == want => Ok(()),
            other => protocol(format!("{key} answered {other:?}, not {want}")),
        }
    }

    fn next_itt(&mut self) -> u32 {
        self.itt = self.itt.wrapping_add(1);
        self.itt
    }

    /// SendTargets=All in a discovery session: every target with its portals.
    pub fn send_targets(&mut self) -> Result<Vec<(String, Vec<String>)>> {
        let itt = self.next_itt();
        let mut p = Pdu::new(op::TEXT);
        p.bhs[0] |= 0x40;
        p.bhs[1] = 0x80;
        p.set_u32(16, itt);
        p.set_u32(20, 0xFFFF_FFFF);
        p.set_u32(24, self.cmd_sn);
        p.set_u32(28, self.exp_stat_sn);
        p.data = keys(&[("SendTargets", "All")]);
        p.write_to(&mut self.stream, false, false)?;
        let r = self.read_for(itt)?;
        if r.opcode() != op::TEXT_RESPONSE {
            return protocol(format!("opcode {:#04x} for a text request", r.opcode()));
        }
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for (k, v) in text::parse(&r.data)
            .map_err(|e| InitiatorError::Protocol(format!("SendTargets: {e}")))?
        {
            match k.as_str() {
                "TargetName" => out.push((v, Vec::new())),
                "TargetAddress" => match out.last_mut() {
                    Some(t) => t.1.push(v),
                    None => return protocol("a TargetAddress before any TargetName"),
                },
                _ => {}
            }
        }
        Ok(out)
    }

    /// Reads PDUs until one for `itt`, skipping NOP-Ins the target sends unasked.
    fn read_for(&mut self, itt: u32) -> Result<Pdu> {
        loop {
            let r = read_pdu(&mut self.stream, false, false, MAX_RECV)?;
            if r.opcode() == op::NOP_IN && r.itt() == 0xFFFF_FFFF {
                continue;
            }
            if r.itt() != itt {
                return protocol(format!("a PDU for task {:#x}, not {itt:#x}", r.itt()));
            }
            self.max_cmd_sn = r.u32_at(32);
            return Ok(r);
        }
    }

    /// Runs one SCSI command on `lun`: `data_out` is sent (immediate data up to the
    /// first burst, then as the target's R2Ts ask), and up to `data_in` bytes are
    /// taken back.
    pub fn command(
        &mut self,
        lun: u64,
        cdb: &[u8],
        data_out: &[u8],
        data_in: u32,
    ) -> Result<Answer> {
        assert!(cdb.len() <= 16, "extended CDBs are not sent");
        let itt = self.next_itt();
        let mut p = Pdu::new(op::SCSI_COMMAND);
        let writing = !data_out.is_empty();
        p.bhs[1] = 0x80 | if writing { 0x20 } else { 0 } | if data_in > 0 { 0x40 } else { 0 } | 1;
        p.bhs[8..16].copy_from_slice(&scsi::encode_lun(lun));
        p.set_u32(16, itt);
        p.set_u32(
            20,
            if writing {
                data_out.len() as u32
            } else {
                data_in
            },
        );
        p.set_u32(24, self.cmd_sn);
        p.set_u32(28, self.exp_stat_sn);
        p.bhs[32..32 + cdb.len()].copy_from_slice(cdb);
        let immediate = data_out
            .len()
            .min(self.first_burst)
            .min(self.target_max_recv);
        p.data = data_out[..immediate].to_vec();
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        p.write_to(&mut self.stream, false, false)?;
        let mut data = Vec::new();
        loop {
            let r = self.read_for(itt)?;
            match r.opcode() {
                op::R2T => {
                    let (ttt, offset, len) = (r.u32_at(20), r.u32_at(40), r.u32_at(44));
                    let end = offset as usize + len as usize;
                    if end > data_out.len() {
                        return protocol(format!("an R2T for {offset}+{len}, past the data"));
                    }
                    let mut sn = 0;
                    let mut at = offset as usize;
                    while at < end {
                        let n = (end - at).min(self.target_max_recv);
                        let mut d = Pdu::new(op::DATA_OUT);
                        d.bhs[1] = if at + n == end { 0x80 } else { 0 };
                        d.bhs[8..16].copy_from_slice(&scsi::encode_lun(lun));
                        d.set_u32(16, itt);
                        d.set_u32(20, ttt);
                        d.set_u32(28, self.exp_stat_sn);
                        d.set_u32(36, sn);
                        d.set_u32(40, at as u32);
                        d.data = data_out[at..at + n].to_vec();
                        d.write_to(&mut self.stream, false, false)?;
                        sn += 1;
                        at += n;
                    }
                }
                op::DATA_IN => {
                    let offset = r.u32_at(40) as usize;
                    if offset != data.len() {
                        return protocol(format!("Data-In at {offset}, expected {}", data.len()));
                    }
                    data.extend_from_slice(&r.data);
                    if r.bhs[1] & 0x01 != 0 {
                        self.exp_stat_sn = r.u32_at(24).wrapping_add(1);
                        return Ok(Answer {
                            status: r.bhs[3],
                            data,
                            sense: Vec::new(),
                        });
                    }
                }
                op::SCSI_RESPONSE => {
                    self.exp_stat_sn = r.u32_at(24).wrapping_add(1);
                    let sense = if r.data.len() >= 2 {
                        let n = u16::from_be_bytes([r.data[0], r.data[1]]) as usize;
                        r.data[2..(2 + n).min(r.data.len())].to_vec()
                    } else {
                        Vec::new()
                    };
                    return Ok(Answer {
                        status: r.bhs[3],
                        data,
                        sense,
                    });
                }
                other => return protocol(format!("opcode {other:#04x} for a command")),
            }
        }
    }

    /// `command`, sent again when it meets a unit attention (power on, a reset, a
    /// capacity change: news, not a failure of the command), as initiators do; at
    /// most 8 times.
    pub fn command_past_attentions(
        &mut self,
        lun: u64,
        cdb: &[u8],
        data_out: &[u8],
        data_in: u32,
    ) -> Result<Answer> {
        let mut tries = 0;
        loop {
            let a = self.command(lun, cdb, data_out, data_in)?;
            let attention = a.status == 2 && a.sense.len() > 2 && a.sense[2] & 0x0F == 0x06;
            tries += 1;
            if !attention || tries == 8 {
                return Ok(a);
            }
        }
    }

    /// READ(16) of `blocks` blocks of `block_size` bytes at `lba`; GOOD or an error.
    pub fn read(&mut self, lun: u64, lba: u64, blocks: u32, block_size: u32) -> Result<Vec<u8>> {
        let a =
            self.command_past_attentions(lun, &rw16(0x88, lba, blocks), &[], blocks * block_size)?;
        good(a, "READ(16)").map(|a| a.data)
    }

    /// WRITE(16) of `data` (whole blocks) at `lba`; GOOD or an error.
    pub fn write(&mut self, lun: u64, lba: u64, data: &[u8], block_size: u32) -> Result<()> {
        assert!(data.len().is_multiple_of(block_size as usize));
        let blocks = (data.len() / block_size as usize) as u32;
        good(
            self.command_past_attentions(lun, &rw16(0x8A, lba, blocks), data, 0)?,
            "WRITE(16)",
        )
        .map(|_| ())
    }

    /// SYNCHRONIZE CACHE(10) of the whole LUN.
    pub fn flush(&mut self, lun: u64) -> Result<()> {
        let mut c = [0u8; 10];
        c[0] = 0x35;
        let a = self.command_past_attentions(lun, &c, &[], 0)?;
        good(a, "SYNCHRONIZE CACHE").map(|_| ())
    }

    /// READ CAPACITY(16): (blocks, block size).
    pub fn capacity(&mut self, lun: u64) -> Result<(u64, u32)> {
        let mut c = [0u8; 16];
        c[0] = 0x9E;
        c[1] = 0x10;
        c[13] = 32;
        let a = good(
            self.command_past_attentions(lun, &c, &[], 32)?,
            "READ CAPACITY(16)",
        )?;
        if a.data.len() < 12 {
            return protocol("a short READ CAPACITY(16) answer");
        }
        let last = u64::from_be_bytes(a.data[0..8].try_into().unwrap());
        let size = u32::from_be_bytes(a.data[8..12].try_into().unwrap());
        Ok((last + 1, size))
    }

    /// Hands the logged-in session over to a caller that drives the connection
    /// itself (a pipelined load client), with where its sequence numbers and the
    /// negotiated limits stand.
    pub fn into_session(self) -> Session {
        Session {
            stream: self.stream,
            cmd_sn: self.cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            target_max_recv: self.target_max_recv,
            first_burst: self.first_burst,
        }
    }

    /// Logs out (closing the session) and ends the connection.
    pub fn logout(mut self) -> Result<()> {
        let itt = self.next_itt();
        let mut p = Pdu::new(op::LOGOUT);
        p.bhs[0] |= 0x40;
        p.bhs[1] = 0x80;
        p.set_u32(16, itt);
        p.set_u32(24, self.cmd_sn);
        p.set_u32(28, self.exp_stat_sn);
        p.write_to(&mut self.stream, false, false)?;
        let r = self.read_for(itt)?;
        if r.opcode() != op::LOGOUT_RESPONSE || r.bhs[2] != 0 {
            return protocol("the logout was not answered with success");
        }
        Ok(())
    }
}

fn rw16(opcode: u8, lba: u64, blocks: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

fn good(a: Answer, what: &str) -> Result<Answer> {
    if a.status != 0 {
        let (key, asc, ascq) = if a.sense.len() >= 14 {
            (a.sense[2] & 0x0F, a.sense[12], a.sense[13])
        } else {
            (0, 0, 0)
        };
        return protocol(format!(
            "{what}: status {:#04x}, sense {key:x}/{asc:02x}/{ascq:02x}",
            a.status
        ));
    }
    Ok(a)
}
