//! The full feature phase of one connection (one session: MaxConnections=1, ERL 0):
//! SCSI commands in CmdSN order, their Data-Out (immediate, unsolicited, and solicited
//! by R2T), their Data-In and status, task management, NOP, Text (SendTargets) and
//! Logout.
//!
//! Threads: the connection's reader parses PDUs, keeps the CmdSN window, gathers each
//! write's data and hands whole commands to the server's workers, which run them on
//! their logical unit and send the answer. Writes to the socket go through one lock,
//! which also stamps StatSN, ExpCmdSN and MaxCmdSN, so they are consistent in every
//! PDU. Commands complete in any order.
//!
//! Bounds: commands beyond the window (MaxCmdSN) or already seen are dropped unseen
//! (RFC 7143 3.2.2.1); a write may name at most `MAX_TASK_BYTES`; data a connection has
//! solicited and not yet finished with is at most `SOLICIT_BUDGET` (R2Ts wait for
//! room, sent by the reader or by a worker as it frees some); data segments are at
//! most what this target declared. Data-Out that breaks its sequence (a wrong DataSN,
//! offset or transfer tag) fails its command with DATA PHASE ERROR (0B/4B/00) and the
//! connection goes on; a PDU that cannot be read (a digest mismatch, a segment over
//! the bound) ends the connection: at ERL 0 that is the recovery, and the initiator
//! logs in again.

use crate::login::{LoggedIn, CMD_WINDOW, PORTAL_GROUP};
use crate::params::{SessionParams, MAX_RECV_DATA_SEGMENT};
use crate::pdu::{op, read_pdu, Pdu, PduError};
use crate::target::{Target, Targets};
use crate::text;
use scsi::{LogicalUnit, Nexus, Reply, Status};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use vdev::work_queue::QueueSender;

/// The most Data-Out one command may carry.
pub const MAX_TASK_BYTES: u32 = 16 << 20;
/// Data a connection may have solicited and not yet finished with.
pub const SOLICIT_BUDGET: u64 = 64 << 20;
const NO_TAG: u32 = 0xFFFF_FFFF;

pub type Job = Box<dyn FnOnce() + Send>;

/// Serial number comparison (RFC 1982): `a` before `b`.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

struct Seq {
    stream: TcpStream,
    stat_sn: u32,
    exp_cmd_sn: u32,
}

/// What the reader and the workers share.
pub struct Conn {
    writer: Mutex<Seq>,
    params: SessionParams,
    pub target: Option<Arc<Target>>,
    pub nexus: Nexus,
    pub initiator: String,
    tasks: Mutex<TaskTable>,
    /// Signalled when a running task ends (an ABORT TASK waits on it).
    ended: Condvar,
    /// Where each command is reported when it is done (`iscsi.ops`), with the
    /// initiator's and target's names interned once for the session.
    analytics: Option<Reporting>,
}

struct Reporting {
    analytics: Arc<analytics::Analytics>,
    initiator: &'static str,
    target: &'static str,
}

#[derive(Default)]
struct TaskTable {
    /// Writes still gathering their data, by ITT.
    gathering: HashMap<u32, Gathering>,
    /// Writes waiting for room to be sent R2Ts, oldest first.
    waiting: VecDeque<u32>,
    /// Commands handed to a worker, by ITT, with their LUN and abort flag.
    running: HashMap<u32, (u64, Arc<AtomicBool>)>,
    /// Bytes solicited or held for commands not yet finished.
    held: u64,
    next_ttt: u32,
}

struct Gathering {
    lun: u64,
    cdb: Vec<u8>,
    flags: u8,
    edtl: u32,
    data: Vec<u8>,
    /// Where unsolicited data ends; `None` once that sequence is over.
    unsolicited: Option<(u32, u32)>,
    /// Offset the next R2T asks for.
    next_offset: u32,
    r2t_sn: u32,
    /// Outstanding R2Ts: TTT -> (offset, length, bytes got, next DataSN).
    r2ts: BTreeMap<u32, (u32, u32, u32, u32)>,
    /// Bytes of `held` this task accounts for.
    held: u64,
}

impl Gathering {
    /// The command, its data all come, ready to run; the bytes it holds stay held
    /// until it ends.
    fn into_ready(self, itt: u32) -> Ready {
        Ready {
            itt,
            lun: self.lun,
            cdb: self.cdb,
            flags: self.flags,
            edtl: self.edtl,
            data: self.data,
            held: self.held,
        }
    }
}

impl Conn {
    /// Sends `pdu`, stamping the sequence numbers; `status` advances StatSN.
    fn send(&self, pdu: Pdu, status: bool) -> std::io::Result<()> {
        self.send_with(pdu, &[], status)
    }

    /// Sends `pdu` with `data` (in parts) as its data segment when that is not empty.
    fn send_with(&self, mut pdu: Pdu, data: &[&[u8]], status: bool) -> std::io::Result<()> {
        let mut w = self.writer.lock().unwrap();
        if status || pdu.opcode() == op::R2T || pdu.opcode() == op::DATA_IN {
            pdu.set_u32(24, w.stat_sn);
        }
        if status {
            w.stat_sn = w.stat_sn.wrapping_add(1);
        }
        pdu.set_u32(28, w.exp_cmd_sn);
        pdu.set_u32(32, w.exp_cmd_sn.wrapping_add(CMD_WINDOW - 1));
        let (hd, dd) = (self.params.header_digest, self.params.data_digest);
        let r = if data.is_empty() {
            pdu.write_to(&mut w.stream, hd, dd)
        } else {
            pdu.write_with_data(&mut w.stream, data, hd, dd)
        };
        if r.is_err() {
            let _ = w.stream.shutdown(Shutdown::Both);
        }
        r
    }

    /// Ends this session's connection because a new login reinstates the session.
    pub fn close_for_reinstatement(&self) {
        self.close();
    }

    fn close(&self) {
        let _ = self.writer.lock().unwrap().stream.shutdown(Shutdown::Both);
    }

    fn lu(&self, lun: u64) -> Option<Arc<LogicalUnit>> {
        self.target.as_ref().and_then(|t| t.luns.get(&lun).cloned())
    }
}

/// Runs the full feature phase until the connection ends; answers why.
pub fn run(
    stream: TcpStream,
    logged: LoggedIn,
    targets: &Arc<Targets>,
    workers: &QueueSender<Job>,
    register: &dyn Fn(&Arc<Conn>),
    analytics: Option<Arc<analytics::Analytics>>,
) -> String {
    let reader_stream = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    let nexus = Nexus {
        initiator_port: format!(
            "{},i,0x{}",
            logged.initiator,
            logged
                .isid
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
        target_port: PORTAL_GROUP,
    };
    let reporting = analytics.map(|analytics| Reporting {
        analytics,
        initiator: analytics::intern(&logged.initiator),
        target: analytics::intern(logged.target.as_ref().map_or("", |t| t.name.as_str())),
    });
    let conn = Arc::new(Conn {
        writer: Mutex::new(Seq {
            stream,
            stat_sn: logged.stat_sn,
            exp_cmd_sn: logged.exp_cmd_sn,
        }),
        params: logged.params,
        target: logged.target,
        nexus,
        initiator: logged.initiator,
        tasks: Mutex::new(TaskTable::default()),
        ended: Condvar::new(),
        analytics: reporting,
    });
    register(&conn);
    let why = read_loop(&conn, reader_stream, targets, workers);
    conn.close();
    // Running commands finish first: their answers go nowhere, but nothing they
    // started is cut short.
    {
        let mut t = conn.tasks.lock().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !t.running.is_empty() && std::time::Instant::now() < deadline {
            t = conn
                .ended
                .wait_timeout(t, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }
    if let Some(target) = &conn.target {
        for lu in target.luns.values() {
            lu.nexus_lost(&conn.nexus);
        }
    }
    why
}

fn read_loop(
    conn: &Arc<Conn>,
    mut stream: TcpStream,
    targets: &Arc<Targets>,
    workers: &QueueSender<Job>,
) -> String {
    // Commands that came ahead of their turn, by CmdSN.
    let mut held: BTreeMap<u32, Pdu> = BTreeMap::new();
    loop {
        let (hd, dd) = (conn.params.header_digest, conn.params.data_digest);
        let pdu = match read_pdu(&mut stream, hd, dd, MAX_RECV_DATA_SEGMENT as usize) {
            Ok(p) => p,
            Err(PduError::Closed) => return "closed by the initiator".into(),
            Err(e) => return format!("reading a PDU: {e}"),
        };
        let opcode = pdu.opcode();
        // Data-Out and SNACK carry no CmdSN; immediate PDUs are not ordered by it.
        if opcode == op::DATA_OUT || opcode == op::SNACK || pdu.immediate() {
            if let Err(why) = handle(conn, pdu, targets, workers) {
                return why;
            }
            continue;
        }
        let sn = pdu.word24();
        let exp = conn.writer.lock().unwrap().exp_cmd_sn;
        let max = exp.wrapping_add(CMD_WINDOW - 1);
        if before(sn, exp) || before(max, sn) {
            continue; // outside the window: dropped, as RFC 7143 3.2.2.1 asks
        }
        held.insert(sn, pdu);
        loop {
            let exp = conn.writer.lock().unwrap().exp_cmd_sn;
            let Some(next) = held.remove(&exp) else { break };
            conn.writer.lock().unwrap().exp_cmd_sn = exp.wrapping_add(1);
            if let Err(why) = handle(conn, next, targets, workers) {
                return why;
            }
        }
    }
}

/// Handles one PDU in order; `Err` ends the connection with the reason.
fn handle(
    conn: &Arc<Conn>,
    pdu: Pdu,
    targets: &Arc<Targets>,
    workers: &QueueSender<Job>,
) -> Result<(), String> {
    match pdu.opcode() {
        op::SCSI_COMMAND => command(conn, pdu, workers),
        op::DATA_OUT => data_out(conn, pdu, workers),
        op::NOP_OUT => {
            if pdu.itt() != NO_TAG {
                let mut r = Pdu::new(op::NOP_IN);
                r.bhs[1] = 0x80;
                r.bhs[8..16].copy_from_slice(&pdu.bhs[8..16]);
                r.set_u32(16, pdu.itt());
                r.set_u32(20, NO_TAG);
                r.data = pdu.data;
                r.data.truncate(conn.params.initiator_max_recv as usize);
                conn.send(r, true).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        op::TASK_MGMT => task_management(conn, &pdu),
        op::LOGOUT => {
            let mut r = Pdu::new(op::LOGOUT_RESPONSE);
            r.bhs[1] = 0x80;
            r.set_u32(16, pdu.itt());
            conn.send(r, true).map_err(|e| e.to_string())?;
            let _ = conn.writer.lock().unwrap().stream.flush();
            Err("logged out".into())
        }
        op::TEXT => text_request(conn, &pdu, targets),
        _ => {
            reject(conn, &pdu, 0x05)?;
            Ok(())
        }
    }
}

fn reject(conn: &Conn, pdu: &Pdu, reason: u8) -> Result<(), String> {
    let mut r = Pdu::new(op::REJECT);
    r.bhs[1] = 0x80;
    r.bhs[2] = reason;
    r.set_u32(16, NO_TAG);
    r.data = pdu.bhs.to_vec();
    conn.send(r, true).map_err(|e| e.to_string())
}

fn command(conn: &Arc<Conn>, pdu: Pdu, workers: &QueueSender<Job>) -> Result<(), String> {
    if conn.target.is_none() {
        // A discovery session carries no SCSI commands.
        return reject(conn, &pdu, 0x05);
    }
    let flags = pdu.flags();
    let itt = pdu.itt();
    let edtl = pdu.word20();
    let mut cdb = pdu.bhs[32..48].to_vec();
    // An extended CDB (AHS type 1) carries the bytes past the sixteenth.
    if pdu.ahs.len() >= 4 && pdu.ahs[2] == 1 {
        let len = u16::from_be_bytes([pdu.ahs[0], pdu.ahs[1]]) as usize;
        if len >= 1 && pdu.ahs.len() >= 3 + len {
            cdb.extend_from_slice(&pdu.ahs[4..3 + len]);
        }
    }
    let lun = scsi::decode_lun(pdu.lun()).unwrap_or(u64::MAX);
    let writing = flags & 0x20 != 0;
    if !writing || edtl == 0 {
        if !pdu.data.is_empty() && !writing {
            return reject(conn, &pdu, 0x09);
        }
        let ready = Ready {
            itt,
            lun,
            cdb,
            flags,
            edtl,
            data: pdu.data,
            held: 0,
        };
        dispatch(conn, workers, ready);
        return Ok(());
    }
    if edtl > MAX_TASK_BYTES {
        let r = Reply::check(scsi::Sense::invalid_cdb_field(0, None));
        respond(conn, itt, flags, edtl, 0, &r);
        return Ok(());
    }
    let imm = pdu.data;
    let first_burst = conn.params.first_burst.min(edtl);
    if imm.len() as u32 > first_burst || (!conn.params.immediate_data && !imm.is_empty()) {
        return Err(format!(
            "immediate data of {} bytes is more than allowed",
            imm.len()
        ));
    }
    let unsolicited_end = if !conn.params.initial_r2t && flags & 0x80 == 0 {
        first_burst
    } else {
        imm.len() as u32
    };
    let got = imm.len() as u32;
    let mut data = imm;
    data.reserve(edtl as usize - data.len());
    let g = Gathering {
        lun,
        cdb,
        flags,
        edtl,
        data,
        unsolicited: (got < unsolicited_end).then_some((unsolicited_end, 0)),
        next_offset: got,
        r2t_sn: 0,
        r2ts: BTreeMap::new(),
        held: 0,
    };
    if got == edtl {
        dispatch(conn, workers, g.into_ready(itt));
        return Ok(());
    }
    let mut t = conn.tasks.lock().unwrap();
    let solicit = g.unsolicited.is_none();
    t.gathering.insert(itt, g);
    if solicit {
        t.waiting.push_back(itt);
    }
    pump_r2ts(conn, &mut t);
    Ok(())
}

/// Sends R2Ts to the waiting writes while the budget and each task's outstanding-R2T
/// limit allow, oldest first.
fn pump_r2ts(conn: &Conn, t: &mut TaskTable) {
    let max_r2t = conn.params.max_outstanding_r2t as usize;
    let burst = conn.params.max_burst;
    let mut i = 0;
    while i < t.waiting.len() {
        let itt = t.waiting[i];
        if !t.gathering.contains_key(&itt) {
            t.waiting.remove(i);
            continue;
        }
        let mut progressed = false;
        loop {
            let g = t.gathering.get(&itt).unwrap();
            if g.next_offset >= g.edtl || g.r2ts.len() >= max_r2t {
                break;
            }
            let len = burst.min(g.edtl - g.next_offset);
            if t.held + len as u64 > SOLICIT_BUDGET && t.held > 0 {
                break;
            }
            let ttt = t.next_ttt;
            t.next_ttt = t.next_ttt.wrapping_add(1) & 0x7FFF_FFFF;
            t.held += len as u64;
            let g = t.gathering.get_mut(&itt).unwrap();
            g.held += len as u64;
            let offset = g.next_offset;
            g.next_offset += len;
            g.r2ts.insert(ttt, (offset, len, 0, 0));
            let mut r = Pdu::new(op::R2T);
            r.bhs[1] = 0x80;
            r.bhs[8..16].copy_from_slice(&scsi::encode_lun(g.lun));
            r.set_u32(16, itt);
            r.set_u32(20, ttt);
            r.set_u32(36, g.r2t_sn);
            g.r2t_sn += 1;
            r.set_u32(40, offset);
            r.set_u32(44, len);
            let _ = conn.send(r, false);
            progressed = true;
        }
        let done = t
            .gathering
            .get(&itt)
            .is_none_or(|g| g.next_offset >= g.edtl);
        if done {
            t.waiting.remove(i);
        } else if !progressed {
            break; // no room: later ones wait their turn
        } else {
            i += 1;
        }
    }
}

fn data_out(conn: &Arc<Conn>, pdu: Pdu, workers: &QueueSender<Job>) -> Result<(), String> {
    let itt = pdu.itt();
    let mut t = conn.tasks.lock().unwrap();
    let Some(g) = t.gathering.get_mut(&itt) else {
        return Ok(()); // for a command refused, failed or aborted: dropped
    };
    if let Err(what) = take_data(g, &pdu) {
        // The task fails (DATA PHASE ERROR) and the connection goes on: its later
        // Data-Out PDUs find no task and are dropped.
        tracing::warn!(initiator = %conn.initiator, "iSCSI Data-Out for task {itt:#x}: {what}");
        let g = t.gathering.remove(&itt).unwrap();
        t.held = t.held.saturating_sub(g.held);
        pump_r2ts(conn, &mut t);
        drop(t);
        let sense = scsi::Sense::new(scsi::sense::key::ABORTED_COMMAND, 0x4B, 0x00);
        respond(conn, itt, g.flags, g.edtl, 0, &Reply::check(sense));
        return Ok(());
    }
    let g = t.gathering.get(&itt).unwrap();
    let needs_r2t = g.unsolicited.is_none() && g.next_offset < g.edtl && g.r2ts.is_empty();
    let complete = g.data.len() as u32 == g.edtl;
    if needs_r2t && !t.waiting.contains(&itt) {
        t.waiting.push_back(itt);
    }
    if complete {
        let g = t.gathering.remove(&itt).unwrap();
        // Its solicited bytes stay held until the command ends.
        drop(t);
        dispatch(conn, workers, g.into_ready(itt));
        return Ok(());
    }
    pump_r2ts(conn, &mut t);
    Ok(())
}

/// Adds one Data-Out PDU's bytes to a gathering write, checking it is the next
/// one: the DataSN its sequence expects, at the offset the data has reached, inside
/// its R2T or the first burst.
fn take_data(g: &mut Gathering, pdu: &Pdu) -> Result<(), &'static str> {
    let ttt = pdu.word20();
    let data_sn = pdu.word36();
    let offset = pdu.word40();
    let len = pdu.data.len() as u32;
    let last = pdu.flags() & 0x80 != 0;
    if ttt == NO_TAG {
        let Some((end, next_sn)) = g.unsolicited else {
            return Err("unsolicited data after its sequence ended");
        };
        if data_sn != next_sn || offset as usize != g.data.len() || offset + len > end {
            return Err("unsolicited data out of order or past the first burst");
        }
        g.data.extend_from_slice(&pdu.data);
        g.unsolicited = Some((end, next_sn + 1));
        if last || g.data.len() as u32 >= end {
            g.unsolicited = None;
            g.next_offset = g.data.len() as u32;
        }
    } else {
        let Some(&(r_off, r_len, got, next_sn)) = g.r2ts.get(&ttt) else {
            return Err("an unknown target transfer tag");
        };
        if data_sn != next_sn
            || offset != r_off + got
            || got + len > r_len
            || offset as usize != g.data.len()
        {
            return Err("solicited data out of order or past its R2T");
        }
        g.data.extend_from_slice(&pdu.data);
        if got + len == r_len {
            g.r2ts.remove(&ttt);
        } else {
            g.r2ts.insert(ttt, (r_off, r_len, got + len, next_sn + 1));
        }
    }
    Ok(())
}

/// One command ready to run: its data gathered.
struct Ready {
    itt: u32,
    lun: u64,
    cdb: Vec<u8>,
    flags: u8,
    edtl: u32,
    data: Vec<u8>,
    /// Bytes of the connection's budget it holds until it ends.
    held: u64,
}

fn dispatch(conn: &Arc<Conn>, workers: &QueueSender<Job>, ready: Ready) {
    let Ready {
        itt,
        lun,
        cdb,
        flags,
        edtl,
        data,
        held,
    } = ready;
    let aborted = Arc::new(AtomicBool::new(false));
    conn.tasks
        .lock()
        .unwrap()
        .running
        .insert(itt, (lun, aborted.clone()));
    let conn = conn.clone();
    let arrived = conn.analytics.as_ref().map(|_| analytics::Ticks::now());
    workers.push(Box::new(move || {
        let reply = match (cdb.first(), conn.lu(lun)) {
            (Some(0xA0), _) => {
                let luns: Vec<u64> = conn
                    .target
                    .as_ref()
                    .map(|t| t.luns.keys().copied().collect())
                    .unwrap_or_default();
                scsi::report_luns(&cdb, &luns)
            }
            (_, Some(lu)) => lu.execute(&conn.nexus, &cdb, &data),
            (_, None) => scsi::no_such_lun(&cdb),
        };
        let need = match conn.lu(lun) {
            Some(lu) if flags & 0x20 != 0 => lu.data_out_len(&cdb),
            _ => 0,
        };
        if !aborted.load(Ordering::SeqCst) {
            respond(&conn, itt, flags, edtl, need, &reply);
        }
        if let (Some(r), Some(arrived)) = (&conn.analytics, arrived) {
            report(r, &conn, lun, &cdb, data.len(), &reply, arrived);
        }
        let mut t = conn.tasks.lock().unwrap();
        t.running.remove(&itt);
        t.held = t.held.saturating_sub(held);
        pump_r2ts(&conn, &mut t);
        drop(t);
        conn.ended.notify_all();
    }));
}

/// Reports one command to analytics: its name, LUN, where it read or wrote and how
/// much (what actually moved: the Data-In sent or the Data-Out taken), and its time
/// from arrival to status.
fn report(
    r: &Reporting,
    conn: &Conn,
    lun: u64,
    cdb: &[u8],
    data_out: usize,
    reply: &Reply,
    arrived: analytics::Ticks,
) {
    let at = analytics::Ticks::now();
    let block_size = conn.lu(lun).map_or(512, |lu| lu.block_size());
    let extent = scsi::opcodes::extent(cdb, block_size);
    let bytes = match extent {
        Some(_) if reply.status == Status::Good => reply.data.len().max(data_out) as u32,
        _ => 0,
    };
    r.analytics
        .record(analytics::Event::Iscsi(analytics::IscsiEvent {
            op: scsi::opcodes::name(cdb),
            initiator: r.initiator,
            target: r.target,
            lun: lun_label(lun),
            bytes,
            offset: extent.map_or(0, |e| e.0),
            latency_ns: at.ns_since(arrived),
            at,
        }));
}

/// A LUN as text for analytics: the first 256 from a table, the rest interned.
fn lun_label(lun: u64) -> &'static str {
    static LABELS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let labels = LABELS.get_or_init(|| {
        (0..256)
            .map(|n| &*Box::leak(n.to_string().into_boxed_str()))
            .collect()
    });
    match labels.get(lun as usize) {
        Some(l) => l,
        None => analytics::intern(&lun.to_string()),
    }
}

/// Sends a command's Data-In and status. Residuals are against the expected data
/// transfer length: for reads, what the command returned; for writes, what its CDB
/// names (`need`).
fn respond(conn: &Conn, itt: u32, flags: u8, edtl: u32, need: u64, reply: &Reply) {
    let reading = flags & 0x40 != 0;
    let writing = flags & 0x20 != 0;
    let mut residual_flags = 0u8;
    let mut residual = 0u32;
    let have = if reading {
        reply.data.len() as u64
    } else {
        need
    };
    if reading || writing {
        if have > edtl as u64 {
            residual_flags = 0x04;
            residual = (have - edtl as u64).min(u32::MAX as u64) as u32;
        } else if have < edtl as u64 {
            residual_flags = 0x02;
            residual = edtl - have as u32;
        }
    }
    let send_len = if reading && reply.status == Status::Good {
        reply.data.len().min(edtl as usize)
    } else {
        0
    };
    let segment = conn.params.initiator_max_recv.max(512) as usize;
    let pieces = reply.data.slices();
    let mut cursor = Cursor::new(&pieces);
    let count = send_len.div_ceil(segment);
    let with_status = reply.sense.is_none() && reply.status == Status::Good && count > 0;
    let mut data_sn = 0u32;
    for i in 0..count {
        let last = i + 1 == count;
        let mut d = Pdu::new(op::DATA_IN);
        if last {
            d.bhs[1] = 0x80;
            if with_status {
                d.bhs[1] |= 0x01 | residual_flags;
                d.bhs[3] = reply.status as u8;
                d.set_u32(44, residual);
            }
        }
        d.set_u32(16, itt);
        d.set_u32(20, NO_TAG);
        d.set_u32(36, data_sn);
        d.set_u32(40, (i * segment) as u32);
        let chunk = cursor.take(segment.min(send_len - i * segment));
        data_sn += 1;
        if conn.send_with(d, &chunk, last && with_status).is_err() {
            return;
        }
    }
    if with_status {
        return;
    }
    let mut r = Pdu::new(op::SCSI_RESPONSE);
    r.bhs[1] = 0x80 | residual_flags;
    r.bhs[2] = 0; // command completed at the target
    r.bhs[3] = reply.status as u8;
    r.set_u32(16, itt);
    r.set_u32(36, data_sn);
    r.set_u32(44, residual);
    if let Some(s) = &reply.sense {
        let fixed = s.to_fixed();
        r.data = (fixed.len() as u16).to_be_bytes().to_vec();
        r.data.extend_from_slice(&fixed);
    }
    let _ = conn.send(r, true);
}

/// Walks a command's Data-In slices, handing out the next `n` bytes as subslices.
struct Cursor<'a> {
    pieces: &'a [&'a [u8]],
    /// The piece the next byte is in, and the byte's offset inside it.
    at: usize,
    within: usize,
}

impl<'a> Cursor<'a> {
    fn new(pieces: &'a [&'a [u8]]) -> Cursor<'a> {
        Cursor {
            pieces,
            at: 0,
            within: 0,
        }
    }

    /// The next `n` bytes (fewer only if the pieces run out) as slices in order.
    fn take(&mut self, mut n: usize) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        while n > 0 && self.at < self.pieces.len() {
            let piece = &self.pieces[self.at][self.within..];
            let k = piece.len().min(n);
            if k > 0 {
                out.push(&piece[..k]);
            }
            n -= k;
            self.within += k;
            if self.within == self.pieces[self.at].len() {
                self.at += 1;
                self.within = 0;
            }
        }
        out
    }
}

fn task_management(conn: &Arc<Conn>, pdu: &Pdu) -> Result<(), String> {
    let function = pdu.flags() & 0x7F;
    let rtt = pdu.word20();
    let lun = scsi::decode_lun(pdu.lun()).unwrap_or(u64::MAX);
    let response = match function {
        1 => abort_tasks(conn, |itt, _| itt == rtt),
        2 | 3 => {
            abort_tasks(conn, |_, l| l == lun);
            0
        }
        5 => match conn.lu(lun) {
            Some(lu) => {
                abort_tasks(conn, |_, l| l == lun);
                lu.reset();
                0
            }
            None => 2,
        },
        6 | 7 => {
            abort_tasks(conn, |_, _| true);
            if let Some(t) = &conn.target {
                for lu in t.luns.values() {
                    lu.reset();
                }
            }
            0
        }
        8 => 4,
        4 => 5,
        _ => 255,
    };
    let mut r = Pdu::new(op::TASK_MGMT_RESPONSE);
    r.bhs[1] = 0x80;
    r.bhs[2] = response;
    r.set_u32(16, pdu.itt());
    conn.send(r, true).map_err(|e| e.to_string())?;
    if function == 7 && response == 0 {
        // A cold reset ends every connection to the target, this one too.
        return Err("target cold reset".into());
    }
    Ok(())
}

/// Aborts the tasks `which` picks (by ITT and LUN): writes still gathering data are
/// dropped, running ones answer nothing; waits for those to end. Answers 0 (done)
/// or 1 (no such task) for ABORT TASK.
fn abort_tasks(conn: &Conn, which: impl Fn(u32, u64) -> bool) -> u8 {
    let mut t = conn.tasks.lock().unwrap();
    let mut found = false;
    let gathering: Vec<u32> = t
        .gathering
        .iter()
        .filter(|(itt, g)| which(**itt, g.lun))
        .map(|(itt, _)| *itt)
        .collect();
    for itt in gathering {
        if let Some(g) = t.gathering.remove(&itt) {
            t.held = t.held.saturating_sub(g.held);
            found = true;
        }
    }
    let running: Vec<(u32, Arc<AtomicBool>)> = t
        .running
        .iter()
        .filter(|(itt, (lun, _))| which(**itt, *lun))
        .map(|(i, (_, a))| (*i, a.clone()))
        .collect();
    for (_, flag) in &running {
        flag.store(true, Ordering::SeqCst);
        found = true;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while running.iter().any(|(itt, _)| t.running.contains_key(itt))
        && std::time::Instant::now() < deadline
    {
        t = conn
            .ended
            .wait_timeout(t, Duration::from_millis(50))
            .unwrap()
            .0;
    }
    pump_r2ts(conn, &mut t);
    if found {
        0
    } else {
        1
    }
}

/// Text requests in the full feature phase: SendTargets (every target this initiator
/// may log in to, with every portal), answered in one PDU.
fn text_request(conn: &Conn, pdu: &Pdu, targets: &Arc<Targets>) -> Result<(), String> {
    let keys = text::parse(&pdu.data).map_err(|e| format!("a Text Request: {e}"))?;
    let mut answer = Vec::new();
    for (k, v) in &keys {
        if k == "SendTargets" {
            let wanted: Vec<Arc<Target>> = match v.as_str() {
                "All" if conn.target.is_none() => targets.all(),
                "" => conn.target.iter().cloned().collect(),
                name => targets.get(name).into_iter().collect(),
            };
            for t in wanted.iter().filter(|t| t.admits(&conn.initiator)) {
                answer.push(("TargetName".to_string(), t.name.clone()));
                for p in targets.portals() {
                    answer.push(("TargetAddress".to_string(), p));
                }
            }
        } else {
            answer.push((k.clone(), "NotUnderstood".into()));
        }
    }
    let mut r = Pdu::new(op::TEXT_RESPONSE);
    r.bhs[1] = 0x80;
    r.set_u32(16, pdu.itt());
    r.set_u32(20, NO_TAG);
    r.data = text::encode(&answer);
    r.data.truncate(conn.params.initiator_max_recv as usize);
    conn.send(r, true).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn the_cursor_cuts_data_in_across_and_inside_pieces() {
        let pieces: [&[u8]; 4] = [b"abc", b"", b"defgh", b"ij"];
        let mut c = Cursor::new(&pieces);
        assert_eq!(c.take(2), vec![&b"ab"[..]]);
        assert_eq!(c.take(4), vec![&b"c"[..], &b"def"[..]]);
        assert_eq!(c.take(2), vec![&b"gh"[..]]);
        assert_eq!(c.take(10), vec![&b"ij"[..]]);
        assert!(c.take(1).is_empty());
    }
}
