//! NFSv4.1 open and lock state through the kills: one client with a fixed owner (as a
//! host keeps across its own life) creates files with OPEN, writes each FILE_SYNC
//! under its open stateid and locks it; after every restart it reclaims its opens and
//! locks in the grace period (OPEN with CLAIM_PREVIOUS, LOCK with reclaim set), then
//! says RECLAIM_COMPLETE and carries on. Every reclaim must be granted, and every file
//! it created, with the bytes it wrote, must be there after the last restart.

use super::*;
use bench::client::Connection;
use nfs::v4::client::{
    decode_reply, ChannelAttrs, Claim, Compound, CompoundReply, OpenHow, Session, SetAttrs,
    Stateid, SHARE_ACCESS_BOTH, SHARE_DENY_NONE, WRITE_LT,
};
use nfs::v4::{op, Nfs4Error};

const OWNER: &[u8] = b"shoal-torture-v4-client";
const OPEN_OWNER: &[u8] = b"torture-open";
/// Opens held (and so reclaimed after each restart) at most; older ones are closed.
const HELD_MAX: usize = 12;
const FILE_BYTES: usize = 4096;

/// What the v4 client did and found.
#[derive(Default)]
pub(super) struct V4Run {
    /// Files created whose FILE_SYNC write was answered: (name, its bytes' seed).
    pub created: Vec<(String, u64)>,
    pub reclaimed_opens: u64,
    pub reclaimed_locks: u64,
    /// Reclaims the server refused, described (each one a failure).
    pub refused: Vec<String>,
}

struct Held {
    fh: Vec<u8>,
    open: Stateid,
    lock: Option<Stateid>,
    /// The lock owner (one per file).
    lock_owner: Vec<u8>,
}

struct Client {
    conn: Connection,
    session: Session,
}

/// One COMPOUND; `None` when the connection died (the daemon was killed).
fn send(conn: &Connection, c: &Compound) -> Option<CompoundReply> {
    let reply = conn.call(NFS_PROGRAM, 4, 1, |e| c.encode_args(e)).ok()?;
    decode_reply(reply.record()).ok()
}

fn ok(r: &CompoundReply) -> bool {
    r.status == 0 && r.results.iter().all(|x| x.ok())
}

/// EXCHANGE_ID and CREATE_SESSION with the fixed owner; `None` while the daemon is
/// down.
fn connect(t: &Target) -> Option<Client> {
    let conn = Connection::connect(t.nfs, None, root_credential("torture-v4")).ok()?;
    let mut c = Compound::new("exchange");
    c.exchange_id(b"tortured", OWNER, 0);
    let r = send(&conn, &c).filter(ok)?;
    let x = r.results[0].exchange_id()?.clone();
    let mut c = Compound::new("create");
    c.create_session(
        x.clientid,
        x.seq,
        &ChannelAttrs::fore(),
        &ChannelAttrs::back(),
    );
    let r = send(&conn, &c).filter(ok)?;
    let cs = r.results[0].create_session()?.clone();
    Some(Client {
        conn,
        session: Session::new(x.clientid, cs.sessionid),
    })
}

/// The status of the first failed operation.
fn failure(r: &CompoundReply) -> u32 {
    r.results
        .iter()
        .find(|x| !x.ok())
        .map_or(r.status, |x| x.status)
}

/// After a restart: reclaims every held open and its lock, then RECLAIM_COMPLETE.
/// `None` if the daemon died again meanwhile (the caller starts over).
fn reclaim(client: &mut Client, held: &mut [Held], run: &mut V4Run, restart: u64) -> Option<()> {
    let clientid = client.session.clientid;
    for h in held.iter_mut() {
        let mut c = client.session.compound();
        c.putfh(&h.fh).open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            clientid,
            OPEN_OWNER,
            &OpenHow::NoCreate,
            &Claim::Previous,
        );
        let r = send(&client.conn, &c)?;
        if !ok(&r) {
            run.refused.push(format!(
                "after restart {restart}: OPEN CLAIM_PREVIOUS refused with {}",
                failure(&r)
            ));
            h.lock = None;
            continue;
        }
        h.open = r.find(op::OPEN)?.stateid()?;
        run.reclaimed_opens += 1;
        if h.lock.is_some() {
            let mut c = client.session.compound();
            c.putfh(&h.fh).lock_reclaim(
                WRITE_LT,
                0,
                FILE_BYTES as u64,
                &h.open,
                clientid,
                &h.lock_owner,
            );
            let r = send(&client.conn, &c)?;
            if !ok(&r) {
                run.refused.push(format!(
                    "after restart {restart}: LOCK reclaim refused with {}",
                    failure(&r)
                ));
                h.lock = None;
                continue;
            }
            h.lock = r.find(op::LOCK)?.stateid();
            run.reclaimed_locks += 1;
        }
    }
    let mut c = client.session.compound();
    c.reclaim_complete(false);
    let r = send(&client.conn, &c)?;
    ok(&r).then_some(())
}

/// The handle of the share's root, by LOOKUPs from the pseudo root.
fn share_root(client: &mut Client, dataset: &str) -> Option<Vec<u8>> {
    let mut c = client.session.compound();
    c.putrootfh();
    for part in dataset.split('/') {
        c.lookup(part);
    }
    c.getfh();
    let r = send(&client.conn, &c).filter(ok)?;
    r.last()?.fh().map(|f| f.to_vec())
}

/// Runs until `stop`; `restarts` counts the daemon's restarts (a reclaim is owed after
/// each one this client saw).
pub(super) fn v4_state_worker(
    t: &Target,
    dataset: &str,
    seed: u64,
    stop: &AtomicBool,
    restarts: &AtomicU64,
) -> V4Run {
    let mut run = V4Run::default();
    let mut held: VecDeque<Held> = VecDeque::new();
    let mut client: Option<(Client, Vec<u8>)> = None;
    let mut seen_restarts = restarts.load(Ordering::SeqCst);
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some((cl, root)) = client.as_mut() else {
            // The daemon was killed (or not yet up): connect, reclaim, go on.
            let Some(mut cl) = connect(t) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            let restart = restarts.load(Ordering::SeqCst);
            let first = k == 0 && held.is_empty();
            if !first && restart == seen_restarts {
                // Same server life (a dropped connection): nothing to reclaim, but a
                // new client record means the old state is gone; start clean.
                held.clear();
            }
            let done = if first {
                let mut c = cl.session.compound();
                c.reclaim_complete(false);
                send(&cl.conn, &c).filter(ok).map(|_| ())
            } else {
                reclaim(&mut cl, held.make_contiguous(), &mut run, restart)
            };
            if done.is_none() {
                continue;
            }
            held.retain(|h| h.lock.is_some());
            seen_restarts = restart;
            let Some(root) = share_root(&mut cl, dataset) else {
                continue;
            };
            client = Some((cl, root));
            continue;
        };
        k += 1;
        let name = format!("v4f{k}");
        let data = pattern(seed ^ k, 0, FILE_BYTES);
        let clientid = cl.session.clientid;
        let mut c = cl.session.compound();
        c.putfh(root)
            .open(
                SHARE_ACCESS_BOTH,
                SHARE_DENY_NONE,
                clientid,
                OPEN_OWNER,
                &OpenHow::Unchecked(SetAttrs::mode(0o644)),
                &Claim::Null(&name),
            )
            .getfh();
        let Some(r) = send(&cl.conn, &c) else {
            client = None;
            continue;
        };
        if !ok(&r) {
            let status = failure(&r);
            if status == Nfs4Error::Grace as u32 {
                // Another client's grace period: new opens wait for its end.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            if status == Nfs4Error::BadSession as u32
                || status == Nfs4Error::StaleClientId as u32
                || status == Nfs4Error::Expired as u32
            {
                client = None;
                continue;
            }
            panic!("OPEN {name}: status {status}");
        }
        let (Some(open), Some(fh)) = (
            r.find(op::OPEN).and_then(|o| o.stateid()),
            r.last().and_then(|l| l.fh()).map(|f| f.to_vec()),
        ) else {
            panic!("OPEN {name}: no stateid or handle in {:?}", r.summary());
        };
        let lock_owner = format!("torture-lock-{k}").into_bytes();
        let mut c = cl.session.compound();
        c.putfh(&fh).write(&open, 0, 2, &data); // FILE_SYNC4
        c.lock_new(WRITE_LT, 0, FILE_BYTES as u64, &open, clientid, &lock_owner);
        let Some(r) = send(&cl.conn, &c) else {
            client = None;
            continue;
        };
        if r.find(op::WRITE).is_some_and(|w| w.ok()) {
            run.created.push((name.clone(), seed ^ k));
        }
        if !ok(&r) {
            // The file and its lock owner are this client's alone: nothing can
            // conflict, so any failure here is the daemon's.
            panic!("WRITE+LOCK {name}: {:?}", r.summary());
        }
        let lock = r.find(op::LOCK).and_then(|l| l.stateid());
        held.push_back(Held {
            fh,
            open,
            lock,
            lock_owner,
        });
        if held.len() > HELD_MAX {
            let old = held.pop_front().expect("more than HELD_MAX");
            let mut c = cl.session.compound();
            c.putfh(&old.fh);
            if let Some(l) = &old.lock {
                c.locku(WRITE_LT, l, 0, FILE_BYTES as u64);
            }
            c.close(&old.open);
            if send(&cl.conn, &c).is_none() {
                client = None;
                continue;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    run
}
