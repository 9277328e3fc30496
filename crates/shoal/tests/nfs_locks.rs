//! NFSv3 locks (NLM) across a `kill -9` of `shoal serve`: a lock granted to a client
//! machine is in the state directory before the GRANTED goes out, the next start
//! tells that machine's status monitor (SM_NOTIFY, with a new state number) and
//! opens the grace period, in which only its reclaim is granted; after it, the
//! reclaimed lock holds against others. The client machine is the test's own: a
//! portmapper and status monitor on loopback (`--client-portmapper`, hidden, points
//! the daemon at it instead of port 111).

mod common;
use common::*;

use nfs::nlm::proto::*;
use nfs::proto::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs::rpc::{Accept, AuthSys, Credential};
use nfs::transport::{Call, Reply, RpcClient, RpcServer, Service};
use nfs::wire::udp::UdpServer;
use nfs::xdr::{Decoder, Encoder};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A client machine's portmapper (every program on its own port) and status monitor.
struct StatusMonitor {
    port: u16,
    notified: Mutex<Vec<(String, u32)>>,
}

impl Service for StatusMonitor {
    fn call(&self, call: &Call<'_>) -> Option<Reply> {
        let mut d = call.args();
        let mut e = call.reply(Accept::Success);
        match (call.header.program, call.header.procedure) {
            (100000, 3) => {
                e.u32(self.port as u32);
            }
            (NSM_PROGRAM, 6) => {
                let name = String::from_utf8(d.opaque(1024).unwrap().to_vec()).unwrap();
                let state = d.u32().unwrap();
                self.notified.lock().unwrap().push((name, state));
            }
            _ => return Some(Reply::new(call.reply(Accept::ProgUnavail))),
        }
        Some(Reply::new(e))
    }
}

fn root() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0,
        machine: b"nlm-test".to_vec(),
        uid: 0,
        gid: 0,
        gids: vec![],
    })
}

/// The results of an accepted, successful reply.
fn results(reply: &[u8]) -> Decoder<'_> {
    let mut d = Decoder::new(reply);
    d.u32().unwrap();
    assert_eq!(d.u32().unwrap(), 1, "a reply");
    assert_eq!(d.u32().unwrap(), 0, "accepted");
    d.u32().unwrap();
    d.opaque(400).unwrap();
    assert_eq!(d.u32().unwrap(), 0, "success");
    d
}

/// MOUNT of `/tank/share` and an NFSv3 CREATE of `name` in it: the file's handle.
fn create_file(addr: SocketAddr, name: &str) -> Vec<u8> {
    let mut c = RpcClient::connect(addr).unwrap();
    let mut e = Encoder::new();
    e.opaque(b"/tank/share");
    let reply = c.call(MOUNT_PROGRAM, MOUNT_V3, 1, &root(), &e.buf).unwrap();
    let mut d = results(&reply);
    assert_eq!(d.u32().unwrap(), 0, "MNT");
    let dir = d.opaque(64).unwrap().to_vec();
    let mut e = Encoder::new();
    e.opaque(&dir).opaque(name.as_bytes()).u32(0);
    for _ in 0..4 {
        e.bool(false);
    }
    e.u32(0).u32(0);
    let reply = c.call(NFS_PROGRAM, NFS_V3, 8, &root(), &e.buf).unwrap();
    let mut d = results(&reply);
    assert_eq!(d.u32().unwrap(), 0, "CREATE");
    assert!(d.bool().unwrap());
    d.opaque(64).unwrap().to_vec()
}

/// NLM4 LOCK (exclusive, no blocking) of the whole file as `host`: the status.
fn lock(addr: SocketAddr, host: &str, fh: &[u8], reclaim: bool) -> u32 {
    let mut c = RpcClient::connect(addr).unwrap();
    let mut e = Encoder::new();
    let a = LockArgs {
        cookie: b"c".to_vec(),
        block: false,
        exclusive: true,
        lock: Lock {
            caller_name: host.into(),
            fh: fh.to_vec(),
            oh: host.as_bytes().to_vec(),
            svid: 42,
            offset: 0,
            len: 0,
        },
        reclaim,
        state: 1,
    };
    encode_lock_args(&mut e, 4, &a);
    let reply = c.call(NLM_PROGRAM, 4, LOCK, &root(), &e.buf).unwrap();
    decode_res(&mut results(&reply)).unwrap().1
}

fn nsm_state(state_dir: &std::path::Path) -> u32 {
    std::fs::read_to_string(state_dir.join("nsm-state"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_lock_survives_kill_9_through_sm_notify_and_the_grace_period() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = t.path().join("state");
    create_tank(&state, t.path(), "64M", &["mirror", "a", "b"]);
    ok(&state, &["fs", "create", "tank/share"]);
    // The client machine: its portmapper and status monitor on one port, TCP and UDP.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let monitor = Arc::new(StatusMonitor {
        port,
        notified: Mutex::new(Vec::new()),
    });
    let _tcp = RpcServer::start(vec![l], monitor.clone(), 2).unwrap();
    let u = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let _udp = UdpServer::start(vec![u], monitor.clone(), &[100000, NSM_PROGRAM]).unwrap();
    let port_text = port.to_string();
    let mut d = Served::start(
        &state,
        &t.path().join("serve.log"),
        &[
            "--share",
            "tank/share=127.0.0.1(rw,no_root_squash,insecure)",
            "--grace-period",
            "4s",
            "--client-portmapper",
            &port_text,
        ],
    );
    let fh = create_file(d.nfs(), "f");
    let first = nsm_state(&state);
    assert_eq!(first % 2, 1, "odd while up");
    assert_eq!(lock(d.nfs(), "host-a", &fh, false), Stat::Granted as u32);
    // Granted means written: the client is on disk before the answer left.
    let hosts = std::fs::read_to_string(state.join("nlm-hosts")).unwrap();
    assert_eq!(hosts, format!("127.0.0.1 {}\n", hex(b"host-a")));
    assert_eq!(lock(d.nfs(), "host-b", &fh, false), Stat::Denied as u32);
    // No drain, no commit, no goodbye.
    d.kill9();
    assert!(monitor.notified.lock().unwrap().is_empty());
    d.restart();
    let second = nsm_state(&state);
    assert_eq!(second, first + 2, "a new odd state number");
    let until = Instant::now() + Duration::from_secs(20);
    while monitor.notified.lock().unwrap().is_empty() {
        assert!(Instant::now() < until, "no SM_NOTIFY:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        monitor.notified.lock().unwrap()[0],
        ("127.0.0.1".to_string(), second),
        "SM_NOTIFY names the server as the client reaches it, with its new state"
    );
    let (code, body) = d.get("/api/v1/status");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["nlm"]["in_grace"], true, "{body}");
    assert_eq!(status["nlm"]["nsm_state"], second, "{body}");
    // In grace: host-b gets nothing, host-a its lock back.
    assert_eq!(
        lock(d.nfs(), "host-b", &fh, false),
        Stat::DeniedGracePeriod as u32
    );
    assert_eq!(lock(d.nfs(), "host-a", &fh, true), Stat::Granted as u32);
    // After the grace period the reclaimed lock holds.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match lock(d.nfs(), "host-b", &fh, false) {
            s if s == Stat::DeniedGracePeriod as u32 => {
                assert!(Instant::now() < until, "the grace period did not end");
                std::thread::sleep(Duration::from_millis(200));
            }
            s => {
                assert_eq!(
                    s,
                    Stat::Denied as u32,
                    "host-a's reclaimed lock is in the way"
                );
                break;
            }
        }
    }
    let out = ok(&state, &["status"]);
    assert!(
        out.contains("NFSv3 locks (NLM): 1 clients, 1 locks"),
        "{out}"
    );
    assert!(out.contains("portmapper: off"), "{out}");
    // No NFSv4 client here; the courtesy is the default's.
    assert!(
        out.contains("NFSv4: 0 clients, 0 sessions, 0 opens, 0 locks, 0 delegations; silent clients kept 1d past their lease"),
        "{out}"
    );
    d.stop();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
