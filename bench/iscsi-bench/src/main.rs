//! A pipelined iSCSI initiator for benchmarks: one session with up to `--depth`
//! commands in flight (this thread sends while the window and the depth allow, a
//! reader thread takes Data-In, R2Ts and status), so the figures measure the target,
//! not a client waiting on round trips. Works against any target (shoal, tgt): it
//! logs in without authentication straight to the operational stage.
//!
//! Tests: `randread`, `randwrite` (random aligned blocks within `--span-mib`), `read`,
//! `write` (sequential), `syncwrite` (random writes with FUA, for latency). Every
//! status is checked (GOOD, or the run fails); prints one JSON object with IOPS,
//! MB/s and latency percentiles.

use clap::Parser;
use iscsi::initiator::{Initiator, LoginSpec};
use iscsi::pdu::{op, read_pdu, Pdu};
use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Clone)]
struct Args {
    #[arg(long)]
    portal: SocketAddr,
    #[arg(long)]
    target: String,
    #[arg(long, default_value_t = 0)]
    lun: u64,
    /// randread, randwrite, read, write or syncwrite.
    #[arg(long)]
    test: String,
    /// Bytes per command.
    #[arg(long, default_value_t = 4096)]
    block: u32,
    #[arg(long, default_value_t = 32)]
    depth: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The region of the LUN used (MiB from its start).
    #[arg(long, default_value_t = 1024)]
    span_mib: u64,
    #[arg(long, default_value = "iqn.2026-12.org.shoal:bench")]
    initiator: String,
}

struct Shared {
    stream: Mutex<TcpStream>,
    state: Mutex<State>,
    cv: Condvar,
    mrdsl: u32,
}

struct State {
    cmd_sn: u32,
    max_cmd_sn: u32,
    in_flight: HashMap<u32, (Instant, Vec<u8>)>,
    latencies_us: Vec<u32>,
    done: u64,
    error: Option<String>,
}

/// Waits until `ready` holds of the state (a command's end signals the condition);
/// a command that failed ends the run.
fn wait_until(shared: &Shared, ready: impl Fn(&State) -> bool) -> std::sync::MutexGuard<'_, State> {
    let mut st = shared.state.lock().unwrap();
    loop {
        if let Some(e) = &st.error {
            panic!("a command failed: {e}");
        }
        if ready(&st) {
            return st;
        }
        st = shared
            .cv
            .wait_timeout(st, Duration::from_millis(100))
            .unwrap()
            .0;
    }
}

fn cdb(write: bool, lba: u64, blocks: u32, fua: bool) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = if write { 0x8A } else { 0x88 };
    if fua {
        c[1] = 0x08;
    }
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

fn main() {
    let a = Args::parse();
    let mut initiator = Initiator::login(
        a.portal,
        &LoginSpec {
            initiator: a.initiator.clone(),
            target: Some(a.target.clone()),
            chap: None,
            mutual_chap: None,
        },
    )
    .expect("log in");
    // A new nexus first meets a unit attention (power on): TEST UNIT READY past it.
    let tur = initiator
        .command_past_attentions(a.lun, &[0u8; 6], &[], 0)
        .expect("TEST UNIT READY");
    assert_eq!(tur.status, 0, "the unit never became ready");
    let session = initiator.into_session();
    let (mrdsl, first_burst) = (session.target_max_recv as u32, session.first_burst as u32);
    let s = session.stream;
    s.set_nodelay(true).unwrap();
    let mut lun = [0u8; 8];
    lun[1] = a.lun as u8;
    let reader_stream = s.try_clone().unwrap();
    let shared = Arc::new(Shared {
        stream: Mutex::new(s),
        state: Mutex::new(State {
            cmd_sn: session.cmd_sn,
            max_cmd_sn: session.max_cmd_sn,
            in_flight: HashMap::new(),
            latencies_us: Vec::new(),
            done: 0,
            error: None,
        }),
        cv: Condvar::new(),
        mrdsl,
    });
    let bs = 512u64;
    let write = matches!(a.test.as_str(), "randwrite" | "write" | "syncwrite");
    let random = a.test.starts_with("rand") || a.test == "syncwrite";
    let fua = a.test == "syncwrite";
    let depth = if fua { a.depth.min(a.depth) } else { a.depth };
    let blocks_per = a.block as u64 / bs;
    let span_blocks = a.span_mib * (1 << 20) / bs;
    let slots = span_blocks / blocks_per;
    let payload: Vec<u8> = (0..a.block).map(|i| (i * 7 + 3) as u8).collect();

    // The reader: Data-In, R2T, status.
    {
        let shared = shared.clone();
        let payload = payload.clone();
        let mut rs = reader_stream;
        std::thread::spawn(move || loop {
            let p = match read_pdu(&mut rs, false, false, 1 << 24) {
                Ok(p) => p,
                Err(_) => return,
            };
            let mut st = shared.state.lock().unwrap();
            let max = p.u32_at(32);
            if (max.wrapping_sub(st.max_cmd_sn) as i32) > 0 {
                st.max_cmd_sn = max;
            }
            match p.opcode() {
                op::DATA_IN | op::SCSI_RESPONSE => {
                    let status_here = p.opcode() == op::SCSI_RESPONSE || p.flags() & 0x01 != 0;
                    if !status_here {
                        continue;
                    }
                    if p.bhs[3] != 0 {
                        st.error = Some(format!("status {:#x}", p.bhs[3]));
                    }
                    if let Some((t0, _)) = st.in_flight.remove(&p.itt()) {
                        let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
                        st.latencies_us.push(us);
                        st.done += 1;
                    }
                    drop(st);
                    shared.cv.notify_all();
                }
                op::R2T => {
                    drop(st);
                    let (itt, ttt, offset, len) =
                        (p.itt(), p.u32_at(20), p.u32_at(40), p.u32_at(44));
                    let mut sent = 0;
                    let mut data_sn = 0;
                    let mut out = shared.stream.lock().unwrap();
                    while sent < len {
                        let n = (len - sent).min(shared.mrdsl);
                        let mut d = Pdu::new(op::DATA_OUT);
                        if sent + n == len {
                            d.bhs[1] = 0x80;
                        }
                        d.bhs[8..16].copy_from_slice(&p.bhs[8..16]);
                        d.set_u32(16, itt);
                        d.set_u32(20, ttt);
                        d.set_u32(36, data_sn);
                        d.set_u32(40, offset + sent);
                        let at = (offset + sent) as usize;
                        d.data = payload[at..at + n as usize].to_vec();
                        d.write_to(&mut *out, false, false).unwrap();
                        sent += n;
                        data_sn += 1;
                    }
                }
                op::NOP_IN => {}
                other => {
                    st.error = Some(format!("unexpected PDU {other:#x}"));
                    drop(st);
                    shared.cv.notify_all();
                }
            }
        });
    }

    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next_seq = 0u64;
    let mut itt = 1u32;
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);
    while Instant::now() < end {
        let mut st = wait_until(&shared, |st| {
            st.in_flight.len() < depth && (st.cmd_sn.wrapping_sub(st.max_cmd_sn) as i32) <= 0
        });
        let slot = if random {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % slots
        } else {
            let s = next_seq % slots;
            next_seq += 1;
            s
        };
        let lba = slot * blocks_per;
        let mut p = Pdu::new(op::SCSI_COMMAND);
        p.bhs[1] = 0x80 | if write { 0x20 } else { 0x40 } | 0x01;
        p.bhs[8..16].copy_from_slice(&lun);
        p.set_u32(16, itt);
        p.set_u32(20, a.block);
        p.set_u32(24, st.cmd_sn);
        p.bhs[32..48].copy_from_slice(&cdb(write, lba, blocks_per as u32, fua));
        if write && first_burst > 0 {
            let n = a.block.min(first_burst).min(mrdsl) as usize;
            p.data = payload[..n].to_vec();
        }
        st.cmd_sn = st.cmd_sn.wrapping_add(1);
        st.in_flight.insert(itt, (Instant::now(), Vec::new()));
        drop(st);
        p.write_to(&mut *shared.stream.lock().unwrap(), false, false)
            .unwrap();
        itt = itt.wrapping_add(1).max(1);
    }
    // Wait for what is in flight.
    let mut st = wait_until(&shared, |st| st.in_flight.is_empty());
    let secs = start.elapsed().as_secs_f64();
    let mut lat = std::mem::take(&mut st.latencies_us);
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let ops = st.done;
    let _ = shared.stream.lock().unwrap().flush();
    println!(
        "{}",
        serde_json::json!({
            "test": a.test, "block": a.block, "depth": depth, "seconds": secs,
            "ops": ops, "iops": ops as f64 / secs,
            "mb_per_s": ops as f64 * a.block as f64 / secs / 1e6,
            "latency_us_p50": pct(0.5), "latency_us_p99": pct(0.99),
        })
    );
}
