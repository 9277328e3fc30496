//! Fault injection for a running daemon (what `zinject` is to ZFS): a wrapper around a
//! leaf device that, once told to, fails every read, write and flush with EIO, as a
//! dead disk or a pulled cable would. `shoal serve --fault-injection` wraps every
//! device it opens and registers it here by path; the admin API's
//! `POST /api/v1/pools/{pool}/inject` switches a device's fault on and off. Off by
//! default: a daemon started without the flag has nothing registered, and the API
//! refuses.
//!
//! Invariants: with no fault set the wrapper forwards every call unchanged; a fault
//! never changes a byte on the device, it only refuses I/O (the device's data is as it
//! was when the fault is cleared).

use crate::device::{Device, IoMode};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug)]
pub struct FaultInjector {
    inner: Arc<dyn Device>,
    failed: AtomicBool,
}

impl FaultInjector {
    pub fn new(inner: Arc<dyn Device>) -> FaultInjector {
        FaultInjector {
            inner,
            failed: AtomicBool::new(false),
        }
    }

    /// Every I/O fails from now on (`true`) or works again (`false`).
    pub fn set_failed(&self, failed: bool) {
        self.failed.store(failed, Ordering::SeqCst);
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    fn check(&self) -> io::Result<()> {
        if self.failed() {
            Err(io::Error::other("injected fault: the device is failed"))
        } else {
            Ok(())
        }
    }
}

impl Device for FaultInjector {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check()?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.check()?;
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.check()?;
        self.inner.flush()
    }
    fn rotational(&self) -> bool {
        self.inner.rotational()
    }
    fn io_mode(&self) -> IoMode {
        self.inner.io_mode()
    }
    fn describe(&self) -> String {
        format!("{} (fault injection)", self.inner.describe())
    }
    fn preallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.preallocate(offset, len)
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.check()?;
        self.inner.write_vectored_at(offset, bufs)
    }
    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<()> {
        self.check()?;
        self.inner.read_vectored_at(offset, bufs)
    }
}

fn registry() -> &'static Mutex<BTreeMap<String, Arc<FaultInjector>>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<String, Arc<FaultInjector>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Wraps `dev` (opened from `path`) and registers the wrapper under that path.
pub fn register(path: &str, dev: Arc<dyn Device>) -> Arc<FaultInjector> {
    let injector = Arc::new(FaultInjector::new(dev));
    registry()
        .lock()
        .unwrap()
        .insert(path.to_string(), injector.clone());
    injector
}

/// The injector of the device opened from `path`, if fault injection wrapped it.
pub fn find(path: &str) -> Option<Arc<FaultInjector>> {
    registry().lock().unwrap().get(path).cloned()
}

/// Whether any device was wrapped (fault injection is on in this process).
pub fn enabled() -> bool {
    !registry().lock().unwrap().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimDevice;

    #[test]
    fn a_failed_device_refuses_io_and_keeps_its_bytes() {
        let sim = SimDevice::new(1 << 20, 1);
        let dev = FaultInjector::new(sim.clone());
        let data = vec![7u8; 4096];
        dev.write_at(8192, &data).unwrap();
        dev.set_failed(true);
        let mut buf = vec![0u8; 4096];
        assert!(dev.read_at(8192, &mut buf).is_err());
        assert!(dev.write_at(8192, &[1u8; 4096]).is_err());
        assert!(dev.flush().is_err());
        dev.set_failed(false);
        dev.read_at(8192, &mut buf).unwrap();
        assert_eq!(buf, data);
    }
}
