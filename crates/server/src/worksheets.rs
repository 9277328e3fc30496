//! Worksheets: named, saved sets of analytics datasets (a statistic with its
//! drill-downs), as the UI shows them together on one time axis.
//!
//! They live in the state directory as `worksheets.json` (name to dataset names),
//! rewritten whole at every change through a temporary file, fsync and rename, so a
//! crash keeps the old or the new set. Saving a worksheet enables its datasets, and
//! at start the daemon enables the datasets of every saved worksheet, so a worksheet
//! opened after a restart shows the history those datasets kept on disk.

use crate::{Result, ServerError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const FILE: &str = "worksheets.json";
/// Worksheets kept at most, and datasets per worksheet.
pub const MAX_WORKSHEETS: usize = 256;
pub const MAX_DATASETS: usize = 32;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Worksheet {
    pub name: String,
    pub datasets: Vec<String>,
}

pub struct Worksheets {
    path: PathBuf,
    sheets: Mutex<BTreeMap<String, Vec<String>>>,
}

/// A worksheet name: 1 to 64 of letters, digits, `-`, `_` and `.`.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "worksheet name '{name}': use 1 to 64 letters, digits, '-', '_' or '.'"
        ))
    }
}

impl Worksheets {
    pub fn open(state_dir: &Path) -> Result<Worksheets> {
        let path = state_dir.join(FILE);
        let sheets = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                ServerError::Config(format!("{} is not a worksheet file: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(ServerError::Io(format!("reading {}", path.display()), e)),
        };
        Ok(Worksheets {
            path,
            sheets: Mutex::new(sheets),
        })
    }

    pub fn list(&self) -> Vec<Worksheet> {
        self.sheets
            .lock()
            .unwrap()
            .iter()
            .map(|(name, datasets)| Worksheet {
                name: name.clone(),
                datasets: datasets.clone(),
            })
            .collect()
    }

    pub fn get(&self, name: &str) -> Result<Worksheet> {
        let sheets = self.sheets.lock().unwrap();
        let datasets = sheets
            .get(name)
            .ok_or_else(|| ServerError::NotFound(format!("no worksheet '{name}'")))?;
        Ok(Worksheet {
            name: name.to_string(),
            datasets: datasets.clone(),
        })
    }

    /// Every dataset some worksheet holds.
    pub fn all_datasets(&self) -> Vec<String> {
        let sheets = self.sheets.lock().unwrap();
        let mut all: Vec<String> = sheets.values().flatten().cloned().collect();
        all.sort();
        all.dedup();
        all
    }

    /// Saves (creates or replaces) a worksheet; the caller has checked its datasets.
    pub fn save(&self, sheet: Worksheet) -> Result<Worksheet> {
        let mut sheets = self.sheets.lock().unwrap();
        if !sheets.contains_key(&sheet.name) && sheets.len() >= MAX_WORKSHEETS {
            return Err(ServerError::Config(format!(
                "at most {MAX_WORKSHEETS} worksheets are kept: delete one first"
            )));
        }
        let before = sheets.insert(sheet.name.clone(), sheet.datasets.clone());
        if let Err(e) = self.write(&sheets) {
            match before {
                Some(b) => sheets.insert(sheet.name.clone(), b),
                None => sheets.remove(&sheet.name),
            };
            return Err(e);
        }
        Ok(sheet)
    }

    /// Removes a worksheet (NotFound when there is none of that name).
    pub fn delete(&self, name: &str) -> Result<()> {
        let mut sheets = self.sheets.lock().unwrap();
        let Some(before) = sheets.remove(name) else {
            return Err(ServerError::NotFound(format!("no worksheet '{name}'")));
        };
        if let Err(e) = self.write(&sheets) {
            sheets.insert(name.to_string(), before);
            return Err(e);
        }
        Ok(())
    }

    fn write(&self, sheets: &BTreeMap<String, Vec<String>>) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(sheets).expect("serialises");
        crate::write_atomically(&self.path, &bytes, 0o644)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_worksheets_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let w = Worksheets::open(dir.path()).unwrap();
        assert!(w.list().is_empty());
        let sheet = Worksheet {
            name: "by-client".into(),
            datasets: vec!["nfs3.ops[client]".into(), "nfs3.ops[latency]".into()],
        };
        w.save(sheet.clone()).unwrap();
        w.save(Worksheet {
            name: "io".into(),
            datasets: vec!["io.ops[device]".into(), "nfs3.ops[latency]".into()],
        })
        .unwrap();
        w.delete("io").unwrap();
        assert!(matches!(w.delete("io"), Err(ServerError::NotFound(_))));
        assert!(matches!(w.get("io"), Err(ServerError::NotFound(_))));
        let again = Worksheets::open(dir.path()).unwrap();
        assert_eq!(again.list(), vec![sheet.clone()]);
        assert_eq!(again.get("by-client").unwrap(), sheet);
        assert_eq!(
            again.all_datasets(),
            vec!["nfs3.ops[client]".to_string(), "nfs3.ops[latency]".into()]
        );
        for bad in ["", "a/b", "..", "x y", &"n".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        check_name("ops-by_client.2").unwrap();
    }
}
