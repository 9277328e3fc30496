//! The targets this server offers: each a name (an IQN), its LUNs (logical units over
//! volumes), the initiators allowed to log in to it, and its CHAP credentials. The
//! owner (the daemon) replaces a target whole when its configuration changes; sessions
//! already logged in keep the units they had until they log out.

use crate::chap::Credential;
use scsi::LogicalUnit;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

pub struct Target {
    pub name: String,
    pub alias: Option<String>,
    pub luns: BTreeMap<u64, Arc<LogicalUnit>>,
    /// Initiator names allowed to log in; empty: any.
    pub allow: Vec<String>,
    /// CHAP the initiator must answer (its user and secret).
    pub chap: Option<Credential>,
    /// With `chap`, what this target answers when the initiator challenges it back
    /// (mutual CHAP); an initiator that does not challenge is still accepted.
    pub mutual_chap: Option<Credential>,
}

impl Target {
    pub fn admits(&self, initiator: &str) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|a| a == initiator)
    }
}

/// Every target, by name, and the portals they are reached through.
#[derive(Default)]
pub struct Targets {
    targets: RwLock<BTreeMap<String, Arc<Target>>>,
    /// `ip:port,tag` of each portal, for SendTargets.
    portals: RwLock<Vec<String>>,
}

impl Targets {
    pub fn new() -> Arc<Targets> {
        Arc::new(Targets::default())
    }

    /// Adds or replaces a target.
    pub fn put(&self, target: Target) {
        self.targets
            .write()
            .unwrap()
            .insert(target.name.clone(), Arc::new(target));
    }

    /// Removes a target; answers whether it was there.
    pub fn remove(&self, name: &str) -> bool {
        self.targets.write().unwrap().remove(name).is_some()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Target>> {
        self.targets.read().unwrap().get(name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Target>> {
        self.targets.read().unwrap().values().cloned().collect()
    }

    pub fn set_portals(&self, portals: Vec<String>) {
        *self.portals.write().unwrap() = portals;
    }

    pub fn portals(&self) -> Vec<String> {
        self.portals.read().unwrap().clone()
    }
}
