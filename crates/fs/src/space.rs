//! Space limits of the dataset hierarchy: quotas and reservations, as in zfs.
//!
//! What a dataset *uses* is its own space (what its tree references, what its
//! snapshots hold beyond it, and an estimate of its unsynced writes; see
//! `pool::pool::DatasetSpace`) plus, for each child, the larger of the child's use and
//! its reservation. So a reservation counts as used by the parent the moment it is set,
//! and nested reservations are not counted twice.
//!
//! - A *quota* caps what a dataset uses, its children and snapshots included. A change
//!   that adds space to a dataset fails with EDQUOT when it would take the dataset or
//!   any ancestor past its quota.
//! - A *reservation* keeps space for a dataset and its children: the part of it not
//!   yet used is unavailable to every dataset outside that subtree, whose changes fail
//!   with ENOSPC when the pool's free space minus those unused reservations cannot take
//!   them.
//!
//! - A *refreservation* keeps space for what the dataset itself references beyond
//!   its latest snapshot (zfs's "unique" bytes; see `pool::pool::DatasetSpace`):
//!   its unused part (refreservation less unique) counts as used by the dataset
//!   and is unavailable to every other dataset, ancestors and children included. A
//!   thick volume has one the size of its blocks and their indirect blocks, so
//!   nothing else can take the space its writes need; a snapshot of such a dataset
//!   hands its unique bytes to the snapshot, and is refused when the pool cannot
//!   hold the refreservation again beside them (`admit_snapshot`).
//!
//! Only changes that add space are checked (writes, new objects, extended
//! attributes); removing and truncating always work, so a full dataset can be cleaned
//! up. Writes are charged their full length, overwrites included, because with
//! snapshots or before the sync nets them out an overwrite does take new space; near a
//! quota an overwrite can therefore fail, as it can in zfs.
//!
//! Invariant: the limits cached here are those in the pool's dataset directory;
//! `Datasets` refreshes them after every change of a dataset or its properties.

use crate::props::Props;
use crate::{FsError, Result};
use pool::pool::DatasetSpace;
use pool::Pool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

#[derive(Debug, Clone)]
struct Limit {
    name: String,
    quota: u64,
    reservation: u64,
    refreservation: u64,
}

/// The quotas and reservations of a pool's datasets (0: none).
#[derive(Debug, Default)]
pub struct SpaceLimits {
    limits: RwLock<HashMap<u64, Limit>>,
    /// Whether any dataset has a quota or a reservation: without one no check is needed.
    any: AtomicBool,
}

/// One dataset's space as the limits see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Own space plus each child's larger of use and reservation.
    pub used: u64,
    /// What the dataset can still take: the pool's free space less reservations held
    /// elsewhere, capped by its own and its ancestors' quotas.
    pub available: u64,
    /// Its own space alone (referenced, snapshots, pending).
    pub own: DatasetSpace,
}

impl SpaceLimits {
    /// Reloads the limits from the pool's directory.
    pub fn refresh(&self, pool: &Pool) -> Result<()> {
        let mut map = HashMap::new();
        for (id, name, json) in pool.list_objsets() {
            if name.contains('@') {
                continue;
            }
            let p = Props::from_json(&json)?;
            map.insert(
                id,
                Limit {
                    name,
                    quota: p.quota.unwrap_or(0),
                    reservation: p.reservation.unwrap_or(0),
                    refreservation: p.refreservation.unwrap_or(0),
                },
            );
        }
        let any = map
            .values()
            .any(|l| l.quota > 0 || l.reservation > 0 || l.refreservation > 0);
        *self.limits.write().unwrap() = map;
        self.any.store(any, Ordering::SeqCst);
        Ok(())
    }

    /// Refuses a change adding about `bytes` to dataset `os` when it would break a
    /// quota (EDQUOT) or take space reserved for another dataset (ENOSPC). Before
    /// refusing, it lets pending frees and overestimated charges settle by syncing,
    /// as the pool does before it reports a full pool.
    pub fn admit(&self, pool: &Pool, os: u64, bytes: u64) -> Result<()> {
        if bytes == 0 || !self.any.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.check(pool, os, bytes).is_ok() {
            return Ok(());
        }
        for _ in 0..=pool::alloc::DEFER_TXGS {
            pool.sync()?;
        }
        self.check(pool, os, bytes)
    }

    fn check(&self, pool: &Pool, os: u64, bytes: u64) -> Result<()> {
        let view = self.view(pool);
        let limits = self.limits.read().unwrap();
        let Some(me) = limits.get(&os) else {
            return Ok(()); // a dataset created after the last refresh has no limits yet
        };
        if view.quota_headroom(&limits, &me.name) < bytes {
            return Err(FsError::Quota);
        }
        if view.pool_headroom(&limits, &me.name) < bytes {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }

    /// Refuses a snapshot of dataset `os` (ENOSPC) when its refreservation could not
    /// be held again: the snapshot takes over its unique bytes, so the unused part of
    /// the refreservation grows by up to them, and that must fit in what the dataset
    /// may still take. The caller has synced, so the figures are current.
    pub fn admit_snapshot(&self, pool: &Pool, os: u64) -> Result<()> {
        let view = self.view(pool);
        let limits = self.limits.read().unwrap();
        let Some(me) = limits.get(&os) else {
            return Ok(());
        };
        if me.refreservation == 0 {
            return Ok(());
        }
        let unique = view.own.get(&os).map_or(0, |s| s.unique);
        let grows = unique.min(me.refreservation);
        if view.pool_headroom(&limits, &me.name) < grows {
            return Err(FsError::NoSpace);
        }
        if view.quota_headroom(&limits, &me.name) < grows {
            return Err(FsError::Quota);
        }
        Ok(())
    }

    /// Refuses a new or larger refreservation `bytes` on dataset `os`
    /// (ENOSPC) when the pool cannot hold it beside everything else it promised.
    pub fn admit_refreservation(&self, pool: &Pool, os: u64, bytes: u64) -> Result<()> {
        let view = self.view(pool);
        let limits = self.limits.read().unwrap();
        let Some(me) = limits.get(&os) else {
            return Ok(());
        };
        let own = view.own.get(&os).copied().unwrap_or_default();
        let held_now = me.refreservation.saturating_sub(own.unique);
        let wanted = bytes.saturating_sub(own.unique);
        let more = wanted.saturating_sub(held_now);
        if more > 0 && view.pool_headroom(&limits, &me.name) < more {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }

    /// Refuses a dataset `name` about to be made with refreservation `bytes` when the
    /// pool or its ancestors' quotas cannot hold it (ENOSPC, EDQUOT).
    pub fn admit_new(&self, pool: &Pool, name: &str, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let view = self.view(pool);
        let limits = self.limits.read().unwrap();
        if view.quota_headroom(&limits, name) < bytes {
            return Err(FsError::Quota);
        }
        if view.pool_headroom(&limits, name) < bytes {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }

    /// Used and available space of dataset `os`, for statfs and listings.
    pub fn usage(&self, pool: &Pool, os: u64) -> Usage {
        let view = self.view(pool);
        let limits = self.limits.read().unwrap();
        let used = view.used.get(&os).copied().unwrap_or(0);
        let own = view.own.get(&os).copied().unwrap_or_default();
        let available = match limits.get(&os) {
            Some(me) => view
                .pool_headroom(&limits, &me.name)
                .min(view.quota_headroom(&limits, &me.name)),
            None => view.pool_avail,
        };
        Usage {
            used,
            available,
            own,
        }
    }

    fn view(&self, pool: &Pool) -> View {
        let spaces = pool.dataset_spaces();
        let limits = self.limits.read().unwrap();
        let reservation = |id: u64| limits.get(&id).map_or(0, |l| l.reservation);
        // Children before parents: deeper names first.
        let mut order: Vec<&(u64, String, DatasetSpace)> = spaces.iter().collect();
        order.sort_by_key(|(_, name, _)| std::cmp::Reverse(name.matches('/').count()));
        let id_of: HashMap<&str, u64> = spaces.iter().map(|(id, n, _)| (n.as_str(), *id)).collect();
        let unused_refreservation = |id: u64, s: &DatasetSpace| {
            limits
                .get(&id)
                .map_or(0, |l| l.refreservation.saturating_sub(s.unique))
        };
        let mut used: HashMap<u64, u64> = spaces
            .iter()
            .map(|(id, _, s)| (*id, s.used() + unused_refreservation(*id, s)))
            .collect();
        let unused_refreservations: HashMap<u64, u64> = spaces
            .iter()
            .map(|(id, _, s)| (*id, unused_refreservation(*id, s)))
            .filter(|(_, b)| *b > 0)
            .collect();
        let own: HashMap<u64, DatasetSpace> = spaces.iter().map(|(id, _, s)| (*id, *s)).collect();
        for (id, name, _) in order {
            if let Some((parent, _)) = name.rsplit_once('/') {
                if let Some(&pid) = id_of.get(parent) {
                    let charged = used[id].max(reservation(*id));
                    *used.get_mut(&pid).unwrap() += charged;
                }
            }
        }
        View {
            used,
            own,
            unused_refreservations,
            pool_avail: pool.usable_space().1,
        }
    }
}

struct View {
    /// Per dataset: `Usage::used`.
    used: HashMap<u64, u64>,
    own: HashMap<u64, DatasetSpace>,
    /// Per dataset with one: the part of its refreservation not in use.
    unused_refreservations: HashMap<u64, u64>,
    pool_avail: u64,
}

impl View {
    fn used_of(&self, id: u64) -> u64 {
        self.used.get(&id).copied().unwrap_or(0)
    }

    /// What dataset `name` may add before it or an ancestor reaches its quota.
    fn quota_headroom(&self, limits: &HashMap<u64, Limit>, name: &str) -> u64 {
        limits
            .iter()
            .filter(|(_, l)| l.quota > 0 && is_within(name, &l.name))
            .map(|(id, l)| l.quota.saturating_sub(self.used_of(*id)))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The pool's free space less the unused part of every reservation outside
    /// `name`'s line of ancestors and of every other dataset's refreservation (a
    /// parent's reservation already counts its children's, through their use).
    fn pool_headroom(&self, limits: &HashMap<u64, Limit>, name: &str) -> u64 {
        let reserved: u64 = limits
            .iter()
            .filter(|(_, l)| l.reservation > 0 && !is_within(name, &l.name))
            .map(|(id, l)| l.reservation.saturating_sub(self.used_of(*id)))
            .sum();
        let refreserved: u64 = self
            .unused_refreservations
            .iter()
            .filter(|(id, _)| limits.get(id).is_none_or(|l| l.name != name))
            .map(|(_, b)| *b)
            .sum();
        self.pool_avail.saturating_sub(reserved + refreserved)
    }
}

/// Whether dataset `name` is `ancestor` or below it.
fn is_within(name: &str, ancestor: &str) -> bool {
    name == ancestor
        || name
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::is_within;

    #[test]
    fn within_means_the_dataset_or_below() {
        assert!(is_within("tank/a/b", "tank/a"));
        assert!(is_within("tank/a", "tank/a"));
        assert!(is_within("tank/a", "tank"));
        assert!(!is_within("tank/ab", "tank/a"));
        assert!(!is_within("tank", "tank/a"));
    }
}
