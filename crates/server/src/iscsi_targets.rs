//! The daemon's iSCSI targets: their configuration (the target book, `iscsi.json` in
//! the state directory, mode 0600 as it holds CHAP secrets, written whole so a crash
//! leaves the old book or the new), and the `iscsi::Target`s built from it over the
//! volumes of the pools the daemon holds.
//!
//! Each volume is one logical unit, made once and shared by every session (its
//! reservations and unit attentions are the unit's), kept open in its pool's
//! `Datasets` while a target names it, so it cannot be destroyed, rolled back or
//! received into under its initiators. A LUN whose pool is not held (exported, or
//! not imported yet) is left out until the pool comes back; `rebuild` runs whenever a
//! pool is taken or let go and whenever the book changes. A target removed or changed
//! ends its sessions, whose initiators log in again.
//!
//! The book also holds the CHAP discovery sessions must pass (`DiscoverySpec`).
//!
//! Invariants: the book only holds targets that passed `check` (a valid IQN/EUI/NAA
//! name, LUNs below 16384 naming existing volumes, each volume in one LUN of one
//! target, CHAP secrets of 12 to 255 bytes); a unit exists exactly for each volume a
//! target names whose pool is held.

use crate::{write_atomically, DaemonState, Result, ServerError};
use scsi::{LogicalUnit, LuConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const ISCSI_FILE: &str = "iscsi.json";
/// The logical block size volumes are presented with.
pub const BLOCK_SIZE: u32 = 512;

/// A CHAP user and secret as configured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ChapSecret {
    pub user: String,
    pub secret: String,
}

/// One target as configured (`POST /api/v1/iscsi/targets`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// `iqn.YYYY-MM.reversed.domain[:anything]`, `eui.` + 16 hex digits, or `naa.` +
    /// 16 or 32 hex digits.
    pub name: String,
    #[serde(default)]
    pub alias: Option<String>,
    /// LUN number -> volume (`pool/name`).
    pub luns: BTreeMap<u64, String>,
    /// Initiator names allowed; empty: any.
    #[serde(default)]
    pub allow: Vec<String>,
    /// CHAP the initiators must answer.
    #[serde(default)]
    pub chap: Option<ChapSecret>,
    /// What the target answers an initiator that challenges it (mutual CHAP).
    #[serde(default)]
    pub mutual_chap: Option<ChapSecret>,
}

/// What the API shows of a target: no secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetInfo {
    pub name: String,
    pub alias: Option<String>,
    pub luns: Vec<LunInfo>,
    pub allow: Vec<String>,
    pub chap_user: Option<String>,
    pub mutual_chap_user: Option<String>,
    /// Initiators logged in now: `name,i,0xISID`.
    pub sessions: Vec<String>,
    /// Where initiators reach it: `address:port,portal-group`.
    pub portals: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LunInfo {
    pub lun: u64,
    pub volume: String,
    /// Whether the volume's pool is held, so the LUN is served.
    pub online: bool,
    pub size_bytes: u64,
    pub block_size: u32,
    /// The NAA identifier initiators see (VPD page 0x83), in hex.
    pub naa: String,
}

/// The CHAP discovery sessions must pass (`PUT /api/v1/iscsi/discovery`); neither
/// set: any initiator may ask which targets there are.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySpec {
    #[serde(default)]
    pub chap: Option<ChapSecret>,
    #[serde(default)]
    pub mutual_chap: Option<ChapSecret>,
}

/// What the API shows of discovery authentication: no secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiscoveryInfo {
    pub chap_user: Option<String>,
    pub mutual_chap_user: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    targets: Vec<TargetSpec>,
    #[serde(default)]
    discovery: DiscoverySpec,
}

fn credential(c: &Option<ChapSecret>) -> Option<iscsi::Credential> {
    c.as_ref().map(|c| iscsi::Credential {
        user: c.user.clone(),
        secret: c.secret.clone(),
    })
}

/// CHAP and mutual CHAP as a target or discovery needs them: secrets of 12 to 255
/// bytes, mutual only with CHAP.
fn check_chap(
    chap: &Option<ChapSecret>,
    mutual: &Option<ChapSecret>,
) -> std::result::Result<(), String> {
    if let Some(c) = chap {
        check_secret("CHAP", c)?;
    }
    if let Some(c) = mutual {
        if chap.is_none() {
            return Err("mutual CHAP needs CHAP too".into());
        }
        check_secret("mutual CHAP", c)?;
    }
    Ok(())
}

pub struct IscsiTargets {
    pub server: Arc<iscsi::Server>,
    path: PathBuf,
    book: Mutex<Book>,
    /// The unit of each volume a target names, by volume name.
    units: Mutex<HashMap<String, Arc<LogicalUnit>>>,
}

/// Checks a target name (RFC 7143 4.2.7).
fn check_name(name: &str) -> std::result::Result<(), String> {
    let hex = |s: &str, lens: &[usize]| {
        lens.contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit())
    };
    let ok = if let Some(rest) = name.strip_prefix("iqn.") {
        let date = rest.get(..7).unwrap_or("");
        date.len() == 7
            && date[..4].chars().all(|c| c.is_ascii_digit())
            && &date[4..5] == "-"
            && date[5..].chars().all(|c| c.is_ascii_digit())
            && rest[7..].starts_with('.')
            && rest.len() > 8
            && name.len() <= 223
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-:".contains(c))
    } else if let Some(h) = name.strip_prefix("eui.") {
        hex(h, &[16])
    } else if let Some(h) = name.strip_prefix("naa.") {
        hex(h, &[16, 32])
    } else {
        false
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not an iSCSI name: iqn.YYYY-MM.reversed.domain[:id] in lower case, \
             eui. and 16 hex digits, or naa. and 16 or 32"
        ))
    }
}

fn check_secret(what: &str, c: &ChapSecret) -> std::result::Result<(), String> {
    if c.user.is_empty() || c.user.len() > 255 || c.user.contains('\0') {
        return Err(format!("{what} user must be 1 to 255 bytes"));
    }
    if !(12..=255).contains(&c.secret.len()) || c.secret.contains('\0') {
        return Err(format!(
            "{what} secret must be 12 to 255 bytes (initiators such as Windows refuse \
             shorter ones)"
        ));
    }
    Ok(())
}

impl IscsiTargets {
    pub fn open(state_dir: &Path, server: Arc<iscsi::Server>) -> Result<IscsiTargets> {
        let path = state_dir.join(ISCSI_FILE);
        let book = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Book::default(),
            Err(e) => return Err(ServerError::Io(format!("reading {}", path.display()), e)),
        };
        server.targets.set_discovery_auth(iscsi::DiscoveryAuth {
            chap: credential(&book.discovery.chap),
            mutual_chap: credential(&book.discovery.mutual_chap),
        });
        Ok(IscsiTargets {
            server,
            path,
            book: Mutex::new(book),
            units: Mutex::new(HashMap::new()),
        })
    }

    /// Who may discover the targets: the discovery CHAP users, no secrets.
    pub fn discovery(&self) -> DiscoveryInfo {
        let book = self.book.lock().unwrap();
        DiscoveryInfo {
            chap_user: book.discovery.chap.as_ref().map(|c| c.user.clone()),
            mutual_chap_user: book.discovery.mutual_chap.as_ref().map(|c| c.user.clone()),
        }
    }

    /// Sets (or, with neither credential, clears) the CHAP discovery sessions must
    /// pass; kept in the book, in force for the next discovery login.
    pub fn set_discovery(&self, spec: DiscoverySpec) -> Result<DiscoveryInfo> {
        check_chap(&spec.chap, &spec.mutual_chap).map_err(ServerError::Config)?;
        {
            let mut book = self.book.lock().unwrap();
            let old = std::mem::replace(&mut book.discovery, spec.clone());
            if let Err(e) = self.save(&book) {
                book.discovery = old;
                return Err(e);
            }
        }
        self.server
            .targets
            .set_discovery_auth(iscsi::DiscoveryAuth {
                chap: credential(&spec.chap),
                mutual_chap: credential(&spec.mutual_chap),
            });
        Ok(self.discovery())
    }

    fn save(&self, book: &Book) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(book).expect("the target book serialises");
        write_atomically(&self.path, &bytes, 0o600)
    }

    /// Whether a target names volume `dataset`, and which.
    pub fn exporting(&self, dataset: &str) -> Option<String> {
        self.book
            .lock()
            .unwrap()
            .targets
            .iter()
            .find(|t| t.luns.values().any(|v| v == dataset))
            .map(|t| t.name.clone())
    }

    /// Checks a new target against the book and the volumes of `state`.
    fn check(&self, state: &DaemonState, spec: &TargetSpec, book: &Book) -> Result<()> {
        let bad = |m: String| Err(ServerError::Config(m));
        if let Err(e) = check_name(&spec.name) {
            return bad(e);
        }
        if book.targets.iter().any(|t| t.name == spec.name) {
            return Err(ServerError::Conflict(format!(
                "target {} exists; destroy it first",
                spec.name
            )));
        }
        if spec.luns.is_empty() {
            return bad("a target needs at least one LUN".into());
        }
        for initiator in &spec.allow {
            if check_name(initiator).is_err() {
                return bad(format!("--allow '{initiator}' is not an iSCSI name"));
            }
        }
        check_chap(&spec.chap, &spec.mutual_chap).or_else(bad)?;
        if spec
            .alias
            .as_ref()
            .is_some_and(|a| a.len() > 255 || a.contains('\0'))
        {
            return bad("an alias is at most 255 bytes".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for (lun, volume) in &spec.luns {
            if *lun >= 16384 {
                return bad(format!("LUN {lun}: LUNs are 0 to 16383"));
            }
            if !seen.insert(volume) {
                return bad(format!("{volume} is named by two LUNs"));
            }
            if let Some(other) = book
                .targets
                .iter()
                .find(|t| t.luns.values().any(|v| v == volume))
            {
                return Err(ServerError::Conflict(format!(
                    "{volume} is LUN of target {} already",
                    other.name
                )));
            }
            let ds = state.datasets_of_pool(fs::pool_of(volume)).ok_or_else(|| {
                ServerError::NotFound(format!(
                    "{volume}: no imported pool named '{}'",
                    fs::pool_of(volume)
                ))
            })?;
            if !ds.is_volume(volume)? {
                return bad(format!("{volume} is a filesystem, not a volume"));
            }
            if volume.contains('@') {
                return bad(format!("{volume}: a snapshot cannot be a LUN"));
            }
        }
        Ok(())
    }

    /// Adds a target and serves it.
    pub fn create(&self, state: &DaemonState, spec: TargetSpec) -> Result<TargetInfo> {
        {
            let mut book = self.book.lock().unwrap();
            self.check(state, &spec, &book)?;
            book.targets.push(spec.clone());
            if let Err(e) = self.save(&book) {
                book.targets.retain(|t| t.name != spec.name);
                return Err(e);
            }
        }
        self.rebuild(state);
        self.info(&spec.name)
    }

    /// Removes a target: its sessions end and its volumes are free again.
    pub fn destroy(&self, state: &DaemonState, name: &str) -> Result<()> {
        {
            let mut book = self.book.lock().unwrap();
            let before = book.targets.len();
            book.targets.retain(|t| t.name != name);
            if book.targets.len() == before {
                return Err(ServerError::NotFound(format!("no target {name}")));
            }
            self.save(&book)?;
        }
        self.server.targets.remove(name);
        self.server.end_sessions_of(name);
        self.rebuild(state);
        Ok(())
    }

    /// Makes the served targets what the book says over the pools held now: units
    /// for the volumes named, none for the rest (their volumes closed again).
    pub fn rebuild(&self, state: &DaemonState) {
        let book = self.book.lock().unwrap();
        let mut units = self.units.lock().unwrap();
        let wanted: std::collections::BTreeSet<&String> =
            book.targets.iter().flat_map(|t| t.luns.values()).collect();
        // Units no longer wanted, or whose pool is gone.
        let stale: Vec<String> = units
            .keys()
            .filter(|v| !wanted.contains(v) || state.datasets_of_pool(fs::pool_of(v)).is_none())
            .cloned()
            .collect();
        for v in stale {
            units.remove(&v);
            if let Some(ds) = state.datasets_of_pool(fs::pool_of(&v)) {
                ds.close(&v);
            }
        }
        for spec in &book.targets {
            let mut luns = BTreeMap::new();
            for (lun, volume) in &spec.luns {
                if let Some(u) = units.get(volume) {
                    luns.insert(*lun, u.clone());
                    continue;
                }
                match self.make_unit(state, volume) {
                    Ok(Some(u)) => {
                        units.insert(volume.clone(), u.clone());
                        luns.insert(*lun, u);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(target = %spec.name, %volume, "LUN {lun} not served: {e}")
                    }
                }
            }
            self.server.targets.put(iscsi::Target {
                name: spec.name.clone(),
                alias: spec.alias.clone(),
                luns,
                allow: spec.allow.clone(),
                chap: credential(&spec.chap),
                mutual_chap: credential(&spec.mutual_chap),
            });
        }
    }

    /// The unit over `volume`, or `None` while its pool is not held.
    fn make_unit(&self, state: &DaemonState, volume: &str) -> Result<Option<Arc<LogicalUnit>>> {
        let Some(ds) = state.datasets_of_pool(fs::pool_of(volume)) else {
            return Ok(None);
        };
        let vol = ds.open_volume(volume)?;
        let stored = vol.load_reservations()?;
        let keep = vol.clone();
        let config = LuConfig {
            block_size: BLOCK_SIZE,
            identity: scsi::lu::volume_identity(vol.pool().guid, vol.objset()),
            product: "VOLUME".into(),
        };
        let unit = LogicalUnit::new(
            vol,
            config,
            &stored,
            Some(Box::new(move |b: &[u8]| {
                keep.store_reservations(b).map_err(|e| e.to_string())
            })),
        )
        .map_err(ServerError::Config)?;
        Ok(Some(Arc::new(unit)))
    }

    /// Lets go of the units over pool `pool`'s volumes (it is being exported or
    /// destroyed): their targets serve without them until it comes back.
    pub fn release_pool(&self, state: &DaemonState, pool: &str) {
        {
            let mut units = self.units.lock().unwrap();
            let gone: Vec<String> = units
                .keys()
                .filter(|v| fs::pool_of(v) == pool)
                .cloned()
                .collect();
            for v in gone {
                units.remove(&v);
                if let Some(ds) = state.datasets_of_pool(pool) {
                    ds.close(&v);
                }
            }
        }
        // Targets are put again without the pool's units; `rebuild` skips the pool's
        // volumes once it is no longer held.
        let names: Vec<String> = self
            .book
            .lock()
            .unwrap()
            .targets
            .iter()
            .filter(|t| t.luns.values().any(|v| fs::pool_of(v) == pool))
            .map(|t| t.name.clone())
            .collect();
        for n in names {
            self.server.end_sessions_of(&n);
        }
    }

    pub fn list(&self) -> Vec<TargetInfo> {
        let names: Vec<String> = self
            .book
            .lock()
            .unwrap()
            .targets
            .iter()
            .map(|t| t.name.clone())
            .collect();
        names.iter().filter_map(|n| self.info(n).ok()).collect()
    }

    pub fn info(&self, name: &str) -> Result<TargetInfo> {
        let spec = self
            .book
            .lock()
            .unwrap()
            .targets
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .ok_or_else(|| ServerError::NotFound(format!("no target {name}")))?;
        let units = self.units.lock().unwrap();
        let luns = spec
            .luns
            .iter()
            .map(|(lun, volume)| {
                let u = units.get(volume);
                LunInfo {
                    lun: *lun,
                    volume: volume.clone(),
                    online: u.is_some(),
                    size_bytes: u.map_or(0, |u| u.volume().size()),
                    block_size: BLOCK_SIZE,
                    naa: u.map_or(String::new(), |u| {
                        format!("{:016x}", (3u64 << 60) | u.identity())
                    }),
                }
            })
            .collect();
        let sessions = self
            .server
            .sessions()
            .into_iter()
            .filter(|(_, _, t)| *t == spec.name)
            .map(|(i, isid, _)| format!("{i},i,0x{isid}"))
            .collect();
        Ok(TargetInfo {
            name: spec.name.clone(),
            alias: spec.alias.clone(),
            luns,
            allow: spec.allow.clone(),
            chap_user: spec.chap.as_ref().map(|c| c.user.clone()),
            mutual_chap_user: spec.mutual_chap.as_ref().map(|c| c.user.clone()),
            sessions,
            portals: self.server.targets.portals(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc_7143() {
        for good in [
            "iqn.2026-12.org.example:vm1",
            "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test",
            "eui.02004567a425678d",
            "naa.52004567ba64678d",
            "naa.62004567ba64678d0123456789abcdef",
        ] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "iqn.",
            "iqn.2026-1.org.x",
            "iqn.2026-12",
            "iqn.2026-12.Org.Example",
            "iqn.2026-12.org.ex ample",
            "eui.123",
            "naa.xyz4567ba64678d",
            "target0",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let c = |s: &str| ChapSecret {
            user: "u".into(),
            secret: s.into(),
        };
        assert!(check_secret("CHAP", &c("short")).is_err());
        assert!(check_secret("CHAP", &c("twelve bytes")).is_ok());
    }
}
