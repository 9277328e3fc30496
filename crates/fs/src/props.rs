//! Dataset properties, as in zfs: each dataset stores only what was set on it (its
//! *local* properties, as JSON in the pool's object-set directory); the *effective*
//! value of a property is the nearest local setting walking up `pool/a/b` to the pool's
//! root dataset, else the default. Values are validated when set, so what is stored
//! always parses.

use crate::{FsError, Result};
use pool::checksum::ChecksumKind;
use pool::compress::Compression;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Every property name, in display order.
pub const NAMES: &[&str] = &[
    "recordsize",
    "compression",
    "checksum",
    "atime",
    "sync",
    "readonly",
    "quota",
    "reservation",
    "refreservation",
];

/// The properties a volume has no use for (it has no files, records or access times;
/// its size is its bound).
pub const FILESYSTEM_ONLY: &[&str] = &["recordsize", "atime", "quota"];

/// Read-only properties reported with the settable ones, in bytes: what the dataset
/// uses (children, snapshots and children's reservations included), can still take,
/// references itself, and holds only in its snapshots (see `space.rs`).
pub const STATISTICS: &[&str] = &["used", "available", "referenced", "usedbysnapshots"];

/// Properties set locally on one dataset (`None` = inherit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Props {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recordsize: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atime: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readonly: Option<bool>,
    /// Bytes; 0 = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<u64>,
    /// Bytes; 0 = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<u64>,
    /// Bytes kept for what the dataset itself references beyond its latest
    /// snapshot (snapshots and children not counted); 0 = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refreservation: Option<u64>,
    /// Set on volumes only, and what makes a dataset one: its size in bytes, a
    /// multiple of `volblocksize`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volsize: Option<u64>,
    /// A volume's block size, fixed at creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volblocksize: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    Standard,
    Always,
    Disabled,
}

impl SyncMode {
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Standard => "standard",
            SyncMode::Always => "always",
            SyncMode::Disabled => "disabled",
        }
    }
}

/// The values in force for one dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectiveProps {
    pub recordsize: u32,
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub atime: bool,
    pub sync: SyncMode,
    pub readonly: bool,
    pub quota: u64,
    pub reservation: u64,
    pub refreservation: u64,
}

impl Default for EffectiveProps {
    fn default() -> Self {
        EffectiveProps {
            recordsize: 128 * 1024,
            compression: Compression::Off,
            checksum: ChecksumKind::Fletcher4,
            atime: true,
            sync: SyncMode::Standard,
            readonly: false,
            quota: 0,
            reservation: 0,
            refreservation: 0,
        }
    }
}

/// Where a property's value comes from, as `shoal fs get` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct PropValue {
    pub property: String,
    pub value: String,
    pub source: String,
}

fn parse_bool(name: &str, v: &str) -> Result<bool> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(FsError::Invalid(format!(
            "{name} must be on or off, not '{v}'"
        ))),
    }
}

/// Parses `64M`, `1G`, `none`, `0`.
pub fn parse_size(v: &str) -> Option<u64> {
    let t = v.trim();
    if t == "none" {
        return Some(0);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn size_text(b: u64) -> String {
    if b == 0 {
        return "none".into();
    }
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

impl Props {
    pub fn from_json(s: &str) -> Result<Props> {
        if s.trim().is_empty() {
            return Ok(Props::default());
        }
        serde_json::from_str(s)
            .map_err(|e| FsError::Io(format!("stored dataset properties do not parse: {e}")))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("properties serialize")
    }

    /// Sets one property from its text form, validating it.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "recordsize" => {
                let v = parse_size(value)
                    .filter(|v| (512..=1 << 20).contains(v) && v.is_power_of_two())
                    .ok_or_else(|| {
                        FsError::Invalid(format!(
                            "recordsize must be a power of two from 512 to 1M, not '{value}'"
                        ))
                    })?;
                self.recordsize = Some(v as u32);
            }
            "compression" => {
                let c = Compression::from_str(value).map_err(|_| {
                    FsError::Invalid(format!(
                        "compression must be off, lzjb, gzip, gzip-1..9, lz4, zstd or zstd-1..19, not '{value}'"
                    ))
                })?;
                self.compression = Some(c.name());
            }
            "checksum" => {
                let c = ChecksumKind::from_str(value).map_err(|_| {
                    FsError::Invalid(format!(
                        "checksum must be fletcher4 or blake3, not '{value}'"
                    ))
                })?;
                self.checksum = Some(c.name().to_string());
            }
            "atime" => self.atime = Some(parse_bool(name, value)?),
            "readonly" => self.readonly = Some(parse_bool(name, value)?),
            "sync" => {
                self.sync = Some(match value {
                    "standard" => SyncMode::Standard,
                    "always" => SyncMode::Always,
                    "disabled" => SyncMode::Disabled,
                    _ => {
                        return Err(FsError::Invalid(format!(
                            "sync must be standard, always or disabled, not '{value}'"
                        )))
                    }
                })
            }
            "quota" | "reservation" | "refreservation" => {
                let v = parse_size(value).ok_or_else(|| {
                    FsError::Invalid(format!(
                        "{name} must be a size (like 10G) or none, not '{value}'"
                    ))
                })?;
                match name {
                    "quota" => self.quota = Some(v),
                    "reservation" => self.reservation = Some(v),
                    _ => self.refreservation = Some(v),
                }
            }
            _ => {
                return Err(FsError::Invalid(format!(
                    "unknown property '{name}' (known: {})",
                    NAMES.join(", ")
                )))
            }
        }
        Ok(())
    }

    /// Drops a local setting so the property is inherited again.
    pub fn inherit(&mut self, name: &str) -> Result<()> {
        match name {
            "recordsize" => self.recordsize = None,
            "compression" => self.compression = None,
            "checksum" => self.checksum = None,
            "atime" => self.atime = None,
            "sync" => self.sync = None,
            "readonly" => self.readonly = None,
            "quota" => self.quota = None,
            "reservation" => self.reservation = None,
            "refreservation" => self.refreservation = None,
            _ => return Err(FsError::Invalid(format!("unknown property '{name}'"))),
        }
        Ok(())
    }

    /// The local value of `name` in text form, if set.
    pub fn get(&self, name: &str) -> Option<String> {
        match name {
            "recordsize" => self.recordsize.map(|v| size_text(v as u64)),
            "compression" => self.compression.clone(),
            "checksum" => self.checksum.clone(),
            "atime" => self.atime.map(|b| if b { "on" } else { "off" }.into()),
            "readonly" => self.readonly.map(|b| if b { "on" } else { "off" }.into()),
            "sync" => self.sync.map(|s| s.name().into()),
            "quota" => self.quota.map(size_text),
            "reservation" => self.reservation.map(size_text),
            "refreservation" => self.refreservation.map(size_text),
            "volsize" => self.volsize.map(size_text),
            "volblocksize" => self.volblocksize.map(|v| size_text(v as u64)),
            _ => None,
        }
    }

    /// Quotas and reservations apply to the dataset itself and are not inherited.
    fn inheritable(name: &str) -> bool {
        !matches!(name, "quota" | "reservation" | "refreservation")
    }

    /// Whether these are a volume's properties.
    pub fn is_volume(&self) -> bool {
        self.volsize.is_some()
    }
}

/// Resolves effective properties and their sources from a chain of
/// (dataset name, local props), nearest first.
pub fn resolve(chain: &[(String, Props)]) -> (EffectiveProps, Vec<PropValue>) {
    let mut eff_props = Props::default();
    let mut values = Vec::new();
    let defaults = Props {
        recordsize: Some(128 * 1024),
        compression: Some("off".into()),
        checksum: Some("fletcher4".into()),
        atime: Some(true),
        sync: Some(SyncMode::Standard),
        readonly: Some(false),
        quota: Some(0),
        reservation: Some(0),
        refreservation: Some(0),
        volsize: None,
        volblocksize: None,
    };
    for &name in NAMES {
        let mut found = None;
        for (i, (ds, p)) in chain.iter().enumerate() {
            if i > 0 && !Props::inheritable(name) {
                break;
            }
            if let Some(v) = p.get(name) {
                let source = if i == 0 {
                    "local".to_string()
                } else {
                    format!("inherited from {ds}")
                };
                found = Some((v, source));
                break;
            }
        }
        let (value, source) =
            found.unwrap_or_else(|| (defaults.get(name).unwrap(), "default".into()));
        eff_props
            .set(name, &value)
            .expect("stored and default values parse");
        values.push(PropValue {
            property: name.to_string(),
            value,
            source,
        });
    }
    let eff = EffectiveProps {
        recordsize: eff_props.recordsize.unwrap(),
        compression: Compression::from_str(eff_props.compression.as_deref().unwrap())
            .expect("validated compression"),
        checksum: ChecksumKind::from_str(eff_props.checksum.as_deref().unwrap())
            .expect("validated checksum"),
        atime: eff_props.atime.unwrap(),
        sync: eff_props.sync.unwrap(),
        readonly: eff_props.readonly.unwrap(),
        quota: eff_props.quota.unwrap(),
        reservation: eff_props.reservation.unwrap(),
        refreservation: eff_props.refreservation.unwrap(),
    };
    (eff, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inheritance_walks_up_and_quota_stays_local() {
        let mut root = Props::default();
        root.set("compression", "lz4").unwrap();
        root.set("quota", "10G").unwrap();
        let mut mid = Props::default();
        mid.set("recordsize", "16K").unwrap();
        let leaf = Props::default();
        let chain = vec![
            ("tank/a/b".to_string(), leaf),
            ("tank/a".to_string(), mid),
            ("tank".to_string(), root),
        ];
        let (eff, vals) = resolve(&chain);
        assert_eq!(eff.recordsize, 16384);
        assert_eq!(eff.compression, Compression::Lz4);
        assert_eq!(eff.quota, 0);
        let rs = vals.iter().find(|v| v.property == "recordsize").unwrap();
        assert_eq!(
            (rs.value.as_str(), rs.source.as_str()),
            ("16K", "inherited from tank/a")
        );
        let at = vals.iter().find(|v| v.property == "atime").unwrap();
        assert_eq!(at.source, "default");
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let mut p = Props::default();
        for (n, v) in [
            ("recordsize", "1000"),
            ("recordsize", "2M"),
            ("compression", "snappy"),
            ("atime", "yes"),
            ("sync", "sometimes"),
            ("quota", "lots"),
            ("colour", "blue"),
        ] {
            assert!(matches!(p.set(n, v), Err(FsError::Invalid(_))), "{n}={v}");
        }
        assert_eq!(p, Props::default());
        p.set("compression", "gzip-9").unwrap();
        assert_eq!(Props::from_json(&p.to_json()).unwrap(), p);
    }
}
