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

/// The CHAP a discovery session must pass (RFC 7143 12.1: discovery sessions may be
/// authenticated as normal ones are), with what the target answers a mutual challenge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryAuth {
    pub chap: Option<Credential>,
    pub mutual_chap: Option<Credential>,
}

/// Every target, by name, and the portals they are reached through.
#[derive(Default)]
pub struct Targets {
    targets: RwLock<BTreeMap<String, Arc<Target>>>,
    /// `ip:port,tag` of each portal, for SendTargets.
    portals: RwLock<Vec<String>>,
    discovery: RwLock<DiscoveryAuth>,
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

    /// What discovery sessions must authenticate with from now on.
    pub fn set_discovery_auth(&self, auth: DiscoveryAuth) {
        *self.discovery.write().unwrap() = auth;
    }

    pub fn discovery_auth(&self) -> DiscoveryAuth {
        self.discovery.read().unwrap().clone()
    }
}
