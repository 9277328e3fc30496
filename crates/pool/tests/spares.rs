//! Hot spares: a spare carries the pool's labels and travels with it through export
//! and import; taken for a replacement it becomes an ordinary device of the vdev it
//! rebuilds; removed, it is free again; a device of the pool cannot be a spare.

mod common;

use common::*;
use pool::PoolError;
use vdev::{Fault, Health, Layout, SimDevice};

#[test]
fn a_spare_travels_with_the_pool_and_replaces_a_dead_device() {
    let devs = sim_devices(2, 61, None);
    let spare = SimDevice::new(DEV_SIZE, 6199);
    let pool = create_pool(Layout::Mirror, &devs);
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let obj = new_file(&pool, os, 131072, pool::compress::Compression::Off);
    let data = Rng(61).bytes(3 << 20);
    pool.write(os, obj, 0, &data).unwrap();
    pool.sync().unwrap();

    // A device of the pool is refused; a free one is taken.
    assert!(matches!(
        pool.add_spare(device_arg("sim0", &devs[0])),
        Err(PoolError::Exists(_))
    ));
    pool.add_spare(device_arg("spare", &spare)).unwrap();
    assert_eq!(pool.status().spares.len(), 1);
    assert!(matches!(
        pool.add_spare(device_arg("spare", &spare)),
        Err(PoolError::Exists(_))
    ));

    // Export and import: the spare is found by its label.
    pool.export().unwrap();
    drop(pool);
    devs[1].inject(Fault::Dead);
    let mut all = args(&devs);
    all.push(device_arg("spare", &spare));
    let pool = pool::Pool::import(all.clone(), Some("tank"), opts()).unwrap();
    assert_eq!(pool.health(), Health::Degraded);
    let st = pool.status();
    assert_eq!(st.spares.len(), 1, "{:?}", st.spares);
    assert_eq!(st.spares[0].path, "spare");

    // The spare replaces the dead device: ONLINE again, no spare left.
    let d = pool.take_spare("spare").unwrap();
    let summary = pool.replace("sim1", d, &|_| {}).unwrap();
    assert_eq!(summary.errors, 0);
    assert_eq!(pool.health(), Health::Online);
    assert!(pool.status().spares.is_empty());
    assert!(pool.status().vdevs[0]
        .children
        .iter()
        .any(|c| c.path == "spare" && c.health == "ONLINE"));
    pool.export().unwrap();
    drop(pool);
    // The other side lost too: the former spare alone holds every byte.
    devs[0].inject(Fault::Dead);
    let pool = pool::Pool::import(all, Some("tank"), opts()).unwrap();
    assert_eq!(pool.read(os, obj, 0, data.len()).unwrap(), data);
}

#[test]
fn a_removed_spare_is_free_and_gone_from_the_pool() {
    let devs = sim_devices(2, 62, None);
    let spare = SimDevice::new(DEV_SIZE, 6299);
    let pool = create_pool(Layout::Mirror, &devs);
    pool.add_spare(device_arg("spare", &spare)).unwrap();
    assert!(matches!(
        pool.remove_spare("nope"),
        Err(PoolError::NotFound(_))
    ));
    pool.remove_spare("spare").unwrap();
    assert!(pool.status().spares.is_empty());
    pool.export().unwrap();
    drop(pool);
    let mut all = args(&devs);
    all.push(device_arg("spare", &spare));
    let pool = pool::Pool::import(all, Some("tank"), opts()).unwrap();
    assert!(
        pool.status().spares.is_empty(),
        "the removed spare came back"
    );
    // Free: another pool may use it.
    drop(pool);
    let other = pool::Pool::create(
        "other",
        vec![pool::pool::TopArg {
            layout: Layout::Disk,
            devices: vec![device_arg("spare", &spare)],
        }],
        vec![],
        vec![],
        opts(),
    );
    assert!(other.is_ok(), "{:?}", other.err());
}

#[test]
fn a_live_pool_keeps_writing_when_the_side_left_after_a_spare_replacement_dies() {
    let devs = sim_devices(2, 63, None);
    let spare = SimDevice::new(DEV_SIZE, 6399);
    let pool = create_pool(Layout::Mirror, &devs);
    pool.add_spare(device_arg("spare", &spare)).unwrap();
    let os = pool.create_objset("tank/data", "{}").unwrap();
    let obj = new_file(&pool, os, 131072, pool::compress::Compression::Off);
    let mut rng = Rng(63);
    let first = rng.bytes(2 << 20);
    pool.write(os, obj, 0, &first).unwrap();
    pool.sync().unwrap();
    // One side dies while the pool runs; writes go on to the other.
    devs[1].inject(Fault::Dead);
    let second = rng.bytes(1 << 20);
    pool.write(os, obj, 2 << 20, &second).unwrap();
    pool.sync().unwrap();
    assert_eq!(pool.health(), Health::Degraded);
    let d = pool.take_spare("spare").unwrap();
    assert_eq!(pool.replace("sim1", d, &|_| {}).unwrap().errors, 0);
    assert_eq!(pool.health(), Health::Online);
    // Now the original side dies: the former spare alone takes the writes.
    devs[0].inject(Fault::Dead);
    let third = rng.bytes(1 << 20);
    pool.write(os, obj, 3 << 20, &third).unwrap();
    pool.sync().unwrap();
    let all: Vec<u8> = [first, second, third].concat();
    assert_eq!(pool.read(os, obj, 0, all.len()).unwrap(), all);
}
