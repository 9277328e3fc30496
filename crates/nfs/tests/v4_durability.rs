//! NFSv4.1 durability at the COMPOUND level: a COMPOUND's changes that its reply
//! says are on stable storage (a create by OPEN, a FILE_SYNC WRITE, a REMOVE) are
//! committed with one log commit after its last operation, before the reply, and a
//! power cut right after the reply loses none of them. The negative control runs the
//! same COMPOUND on a dataset with sync=disabled (nothing committed before the reply)
//! and must see the loss.

use nfs::v4::client::{
    Claim, Compound, OpenHow, Session, SetAttrs, Stateid, FILE_SYNC4, SHARE_ACCESS_BOTH,
};
use nfs::v4::op;
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use std::sync::Arc;
use vdev::{CrashClock, CrashPolicy, Layout, SimDevice};

mod common;
use common::harness::*;
use common::{service_for, DATASET};

fn opts() -> PoolOptions {
    PoolOptions {
        arc_max_bytes: Some(16 << 20),
        // No txg commits behind the test's back: only the log makes a change durable.
        sync_thread: false,
        deterministic_io: true,
        ..PoolOptions::default()
    }
}

fn args(devs: &[Arc<SimDevice>]) -> Vec<DeviceArg> {
    devs.iter()
        .enumerate()
        .map(|(i, d)| DeviceArg {
            path: format!("sim{i}"),
            device: d.clone(),
        })
        .collect()
}

/// A mirror of two simulated devices on one crash clock, holding `DATASET` with the
/// `sync` property given, committed by a txg (so only the test's changes are new).
fn server_on_devices(sync: &str) -> (Server, Vec<Arc<SimDevice>>, Arc<CrashClock>) {
    let clock = CrashClock::new();
    let devs: Vec<Arc<SimDevice>> = (0..2)
        .map(|i| SimDevice::with_clock(64 << 20, 7 + i, clock.clone()))
        .collect();
    let top = TopArg {
        layout: Layout::Mirror,
        devices: args(&devs),
    };
    let pool = Pool::create("tank", vec![top], vec![], vec![], opts()).unwrap();
    let datasets = fs::Datasets::new(pool.clone()).unwrap();
    datasets.create("tank/home", &[]).unwrap();
    datasets
        .create(DATASET, &[("sync".into(), sync.into())])
        .unwrap();
    pool.sync().unwrap();
    let service = std::sync::Arc::new(service_for(&datasets, 1));
    let srv = Server {
        service,
        datasets,
        _pool: pool,
    };
    (srv, devs, clock)
}

/// After a power cut that drops every unflushed write: the content of `name` in the
/// share's root, or `None` if it is not there.
fn after_power_cut(
    srv: Server,
    devs: &[Arc<SimDevice>],
    clock: &CrashClock,
    name: &str,
) -> Option<Vec<u8>> {
    clock.crash_now();
    drop(srv);
    let after: Vec<Arc<SimDevice>> = devs
        .iter()
        .map(|d| d.restart(CrashPolicy::DropAll))
        .collect();
    let pool = Pool::import(args(&after), Some("tank"), opts()).expect("import");
    let fs = fs::Datasets::new(pool).unwrap().open(DATASET).unwrap();
    let ino = fs.lookup(1, name.as_bytes()).ok()?.ino;
    let size = fs.getattr(ino).unwrap().size;
    Some(fs.read(ino, 0, size as usize).unwrap())
}

fn log_commits(srv: &Server) -> u64 {
    srv._pool.intent_log_stats().commits
}

/// SEQUENCE, PUTFH `dir`, OPEN (create), GETFH, WRITE of `data` (FILE_SYNC, the
/// current stateid), CLOSE.
fn create_compound(s: &mut Session, dir: &[u8], name: &str, data: &[u8]) -> Compound {
    let mut c = s.compound();
    c.putfh(dir)
        .open(
            SHARE_ACCESS_BOTH,
            0,
            s.clientid,
            b"o",
            &OpenHow::Unchecked(SetAttrs::mode(0o644)),
            &Claim::Null(name),
        )
        .getfh()
        .write(&Stateid::CURRENT, 0, FILE_SYNC4, data)
        .close(&Stateid::CURRENT);
    c
}

/// The create COMPOUND of `name` in the share's root, checked to commit the log once
/// (none with sync=disabled).
fn create_with_data(srv: &Server, name: &str, data: &[u8]) {
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let root = a.share_root(&mut s);
    let c = create_compound(&mut s, &root, name, data);
    let before = log_commits(srv);
    let r = a.ok(&c);
    let w = r.find(op::WRITE).unwrap().write().unwrap();
    assert_eq!((w.count as usize, w.committed), (data.len(), FILE_SYNC4));
    let commits = log_commits(srv) - before;
    let expected = match srv.datasets.open(DATASET).unwrap().commits_stable() {
        true => 1,
        false => 0,
    };
    assert_eq!(
        commits, expected,
        "a COMPOUND that creates and writes FILE_SYNC commits the log once, at its end"
    );
}

/// The create COMPOUND on a dataset with `sync`, then a power cut: what the file
/// holds after it, if it is there. The same harness for the test and its control.
fn create_then_power_cut(sync: &str) -> Option<Vec<u8>> {
    let (srv, devs, clock) = server_on_devices(sync);
    create_with_data(&srv, "new", b"acknowledged bytes");
    after_power_cut(srv, &devs, &clock, "new")
}

#[test]
fn a_compound_that_creates_and_writes_file_sync_commits_once_and_survives_a_power_cut() {
    assert_eq!(
        create_then_power_cut("standard").as_deref(),
        Some(&b"acknowledged bytes"[..]),
        "the file and its FILE_SYNC data were acknowledged: they must survive"
    );
}

#[test]
fn negative_control_with_sync_disabled_the_same_compound_is_lost_in_the_power_cut() {
    assert_eq!(
        create_then_power_cut("disabled"),
        None,
        "with nothing committed before the reply the harness must see the loss"
    );
}

#[test]
fn a_remove_in_a_compound_is_committed_before_the_reply() {
    let (srv, devs, clock) = server_on_devices("standard");
    create_with_data(&srv, "gone", b"x");
    let a = srv.client_a();
    let mut s = a.session("client-b");
    let root = a.share_root(&mut s);
    let before = log_commits(&srv);
    a.ok(&{
        let mut c = s.compound();
        c.putfh(&root).remove("gone");
        c
    });
    assert_eq!(log_commits(&srv) - before, 1);
    assert_eq!(after_power_cut(srv, &devs, &clock, "gone"), None);
}

#[test]
fn a_failed_commit_at_the_end_answers_io_at_the_first_operation_that_needed_it() {
    let (srv, _devs, clock) = server_on_devices("standard");
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let root = a.share_root(&mut s);
    // The devices stop taking writes: the COMPOUND's changes run in memory, and the
    // commit at its end fails.
    clock.crash_now();
    let c = create_compound(&mut s, &root, "unlucky", b"never acknowledged");
    let r = a.call(&c);
    assert_eq!(failed_with(&r), st(nfs::v4::Nfs4Error::Io));
    let ops: Vec<u32> = r.results.iter().map(|x| x.op).collect();
    assert_eq!(
        names(&ops),
        ["sequence", "putfh", "open"],
        "the OPEN that created the file answers IO, and nothing after it is reported"
    );
}
