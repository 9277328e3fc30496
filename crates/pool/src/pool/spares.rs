//! Hot spares: devices that carry the pool's labels (so import finds them) and no
//! data, until one replaces a failed data device (`take_spare`, then `replace`).
//!
//! Crash safety: a spare is added by labelling it first and only then writing the
//! config that names it to every other device, so no label ever names a spare that
//! does not carry the pool's label. A spare is taken by writing the config without it
//! and then wiping its labels; a crash in between leaves a device whose own label
//! still names it as a spare of a config the others have moved past (import follows
//! the highest config, which does not name it, so it is simply free). A taken spare
//! that the replacement then fails to use is added back; a crash before that leaves
//! it free, never half in the pool.

use super::topology::find_named;
use super::*;

impl Pool {
    /// Adds `d` as a hot spare.
    pub fn add_spare(&self, d: DeviceArg) -> Result<(), PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let leaf = self.new_leaf(&d)?;
        self.join_aux(
            &leaf,
            |c| &mut c.spares,
            || self.spare_leaves.lock().unwrap().push(leaf.clone()),
        )
    }

    /// Removes spare `name` (its path or guid) from the pool; its labels are wiped.
    pub fn remove_spare(&self, name: &str) -> Result<(), PoolError> {
        self.take_spare(name).map(|_| ())
    }

    /// Takes spare `name` (its path or guid) out of the pool for a replacement: the
    /// config no longer names it and its labels are wiped, so `replace` sees a free
    /// device. Give it back with `add_spare` if the replacement fails.
    pub fn take_spare(&self, name: &str) -> Result<DeviceArg, PoolError> {
        self.check_writable()?;
        let _one = self.topology_change()?;
        let leaf = find_named(&self.spare_leaves.lock().unwrap(), name).ok_or_else(|| {
            PoolError::NotFound(format!("no spare '{name}' in pool '{}'", self.name))
        })?;
        self.leave_aux(
            &leaf,
            |c| &mut c.spares,
            || {
                self.spare_leaves
                    .lock()
                    .unwrap()
                    .retain(|l| !Arc::ptr_eq(l, &leaf))
            },
        )?;
        let device = leaf.device().ok_or_else(|| {
            PoolError::InvalidArgument(format!("spare {} is missing", leaf.path()))
        })?;
        label::clear_labels(&*device)?;
        Ok(DeviceArg {
            path: leaf.path(),
            device,
        })
    }
}
