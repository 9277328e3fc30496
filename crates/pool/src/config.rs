//! The pool configuration kept in every device label: which devices form the pool and
//! how. Stored as UTF-8 JSON in the label's config area (see `vdev::label` and
//! `docs/format.md`). It changes only when the topology or the pool state does
//! (create, export, import, replace, destroy, a vdev added, a mirror side attached or
//! detached, a log, cache or spare device added or removed) or a device faults, is
//! cleared, or is taken offline or online.

use serde::{Deserialize, Serialize};

pub const CONFIG_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolState {
    Active,
    Exported,
    Destroyed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafConfig {
    pub guid: u64,
    pub path: String,
    /// The device missed writes the pool went on without (it faulted, or it was
    /// missing): import keeps it FAULTED, never reading what it holds, until
    /// `Pool::clear` resilvers it or it is replaced. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub faulted: bool,
    /// Taken offline by the operator (`Pool::offline`): import keeps it OFFLINE until
    /// `Pool::online` resilvers it. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offline: bool,
}

impl LeafConfig {
    pub fn new(guid: u64, path: String) -> LeafConfig {
        LeafConfig {
            guid,
            path,
            faulted: false,
            offline: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopConfig {
    pub id: u32,
    /// "disk", "mirror", "raidz1", "raidz2", "raidz3".
    pub layout: String,
    pub children: Vec<LeafConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolConfig {
    pub version: u32,
    pub name: String,
    pub guid: u64,
    pub state: PoolState,
    /// Bumped on every config rewrite; import trusts the highest.
    pub config_txg: u64,
    pub vdevs: Vec<TopConfig>,
    #[serde(default)]
    pub log: Vec<LeafConfig>,
    #[serde(default)]
    pub cache: Vec<LeafConfig>,
    /// Hot spares: labelled with the pool's config so import finds them, holding no
    /// data until one replaces a failed device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares: Vec<LeafConfig>,
    /// The device this copy was written to (set per label).
    #[serde(default)]
    pub this_guid: u64,
}

impl PoolConfig {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("config serialises")
    }
    pub fn from_bytes(b: &[u8]) -> Option<PoolConfig> {
        let c: PoolConfig = serde_json::from_slice(b).ok()?;
        (c.version == CONFIG_VERSION).then_some(c)
    }
    pub fn all_leaves(&self) -> impl Iterator<Item = &LeafConfig> {
        self.vdevs
            .iter()
            .flat_map(|t| t.children.iter())
            .chain(self.log.iter())
            .chain(self.cache.iter())
            .chain(self.spares.iter())
    }
}

/// A fresh random 64-bit identifier (pool and device guids).
pub fn new_guid() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    if let Some(id) = vdev::sim_time::seeded_id().filter(|&g| g != 0) {
        return id;
    }
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    let g = h.finish();
    if g == 0 {
        1
    } else {
        g
    }
}
