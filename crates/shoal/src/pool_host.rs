//! The daemon's side of pool administration (`server::pools_admin::PoolHost`): pools
//! made, imported, exported and destroyed by `pool_cmd`'s functions with the daemon's
//! options, the registry kept, and the lock of every pool the daemon holds.

use crate::pool_cmd::{create_registered, forget, import_registered, new_device, record_devices};
use crate::registry::{lock_pool, PoolLock};
use pool::pool::DeviceArg;
use pool::{Pool, PoolOptions};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The daemon's side of pool administration (`server::pools_admin::PoolHost`): it
/// opens devices as `shoal serve`'s options say, keeps the registry, and holds the
/// lock of every pool the daemon holds.
pub(crate) struct DaemonPoolHost {
    arc_max: Option<u64>,
    locks: Mutex<HashMap<String, PoolLock>>,
}

impl DaemonPoolHost {
    /// `locks`: those of the pools imported at start.
    pub(crate) fn new(arc_max: Option<u64>, locks: HashMap<String, PoolLock>) -> DaemonPoolHost {
        DaemonPoolHost {
            arc_max,
            locks: Mutex::new(locks),
        }
    }

    fn options(&self) -> PoolOptions {
        PoolOptions {
            arc_max_bytes: self.arc_max,
            ..PoolOptions::default()
        }
    }
}

/// A pool error keeps its kind (and HTTP status); anything else is the request's fault.
fn to_server(e: anyhow::Error) -> server::ServerError {
    match e.downcast::<pool::PoolError>() {
        Ok(p) => server::ServerError::Pool(p),
        Err(e) => server::ServerError::Config(format!("{e:#}")),
    }
}

impl server::pools_admin::PoolHost for DaemonPoolHost {
    fn create(
        &self,
        name: &str,
        layout: &[String],
        size: Option<u64>,
    ) -> server::Result<Arc<Pool>> {
        let lock = lock_pool(name).map_err(to_server)?;
        let pool = create_registered(Path::new("/"), size, name, layout, self.options())
            .map_err(to_server)?;
        self.locks.lock().unwrap().insert(name.to_string(), lock);
        Ok(pool)
    }

    fn import(&self, dir: &Path, name: Option<&str>) -> server::Result<Arc<Pool>> {
        let lock_name = name.unwrap_or("import");
        let lock = lock_pool(lock_name).map_err(to_server)?;
        let pool = import_registered(dir, name, self.options()).map_err(to_server)?;
        let lock = if name.is_some() {
            lock
        } else {
            drop(lock);
            lock_pool(&pool.name).map_err(to_server)?
        };
        self.locks.lock().unwrap().insert(pool.name.clone(), lock);
        Ok(pool)
    }

    fn export(&self, pool: &Pool) -> server::Result<()> {
        pool.export()?;
        forget(&pool.name).map_err(to_server)?;
        self.locks.lock().unwrap().remove(&pool.name);
        Ok(())
    }

    fn destroy(&self, pool: &Pool) -> server::Result<()> {
        pool.destroy()?;
        forget(&pool.name).map_err(to_server)?;
        self.locks.lock().unwrap().remove(&pool.name);
        Ok(())
    }

    fn open_device(&self, path: &Path, size: Option<u64>) -> server::Result<(DeviceArg, bool)> {
        new_device(path, size).map_err(to_server)
    }

    fn devices_changed(&self, pool: &Pool) -> server::Result<()> {
        record_devices(pool).map_err(to_server)
    }
}
