//! The devices of a pool the daemon serves, changed while it serves (the pool layer's
//! `topology.rs` does the work and gives the crash argument): add data vdevs, log,
//! cache and spare devices in the words `shoal pool create` takes
//! (`POST /api/v1/pools/{pool}/add`); remove a log, cache or spare device (`/remove`);
//! attach a side to a plain disk or mirror and detach one (`/attach`, `/detach`); take
//! a data device offline and bring it back (`/offline`, `/online`). Attach and online
//! resilver as an operation with live progress (`GET /api/v1/operations`); every
//! request answers when its change is done and in the labels.
//!
//! Invariants: device paths are confined as for pool creation (`device_path`); a
//! device file the request created is removed again if the pool did not take it; the
//! device list the registry keeps is rewritten after every change that succeeded
//! (`PoolHost::devices_changed`), so a restart imports the pool as it is now.

use crate::api::{run_blocking as blocking, ApiError, ApiResult, Body, Shared};
use crate::pools_admin::{DeviceName, LAYOUT_WORDS};
use crate::ServerError;
use axum::extract::{Path as UrlPath, State};
use axum::Json;
use pool::pool::{DeviceArg, PoolStatus, ResilverSummary, TopArg};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use vdev::Layout;

/// Devices as `shoal pool create` and `shoal pool add` take them.
#[derive(Debug, Default, PartialEq)]
pub struct ParsedLayout {
    pub tops: Vec<(Layout, Vec<PathBuf>)>,
    pub log: Vec<PathBuf>,
    pub cache: Vec<PathBuf>,
    pub spares: Vec<PathBuf>,
}

impl ParsedLayout {
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.tops
            .iter()
            .flat_map(|(_, d)| d.iter())
            .chain(self.log.iter())
            .chain(self.cache.iter())
            .chain(self.spares.iter())
    }
}

/// Reads a layout like zpool's: `raidz2 a b c d e f log x cache y spare z`; a device
/// outside a group is a plain disk vdev; relative paths are taken in `dir`. Checks
/// each group's device count and that no device is named twice.
pub fn parse_layout(words: &[String], dir: &Path) -> std::result::Result<ParsedLayout, String> {
    #[derive(PartialEq)]
    enum Class {
        Data,
        Log,
        Cache,
        Spare,
    }
    let mut out = ParsedLayout::default();
    let mut class = Class::Data;
    let mut group: Option<(Layout, Vec<PathBuf>)> = None;
    let resolve = |w: &str| -> PathBuf {
        let p = PathBuf::from(w);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let finish = |group: &mut Option<(Layout, Vec<PathBuf>)>,
                  out: &mut ParsedLayout|
     -> std::result::Result<(), String> {
        if let Some((layout, devs)) = group.take() {
            let min = match layout {
                Layout::Disk => 1,
                Layout::Mirror => 2,
                Layout::RaidZ { nparity } => nparity + 2,
            };
            if devs.len() < min {
                return Err(format!(
                    "{} needs at least {min} devices, got {}",
                    layout.name(),
                    devs.len()
                ));
            }
            out.tops.push((layout, devs));
        }
        Ok(())
    };
    for w in words {
        let keyword = match w.as_str() {
            "mirror" => Some(Layout::Mirror),
            "raidz" | "raidz1" => Some(Layout::RaidZ { nparity: 1 }),
            "raidz2" => Some(Layout::RaidZ { nparity: 2 }),
            "raidz3" => Some(Layout::RaidZ { nparity: 3 }),
            _ => None,
        };
        if let Some(layout) = keyword {
            if class != Class::Data {
                return Err(format!(
                    "'{w}' after log/cache/spare: those are plain devices"
                ));
            }
            finish(&mut group, &mut out)?;
            group = Some((layout, Vec::new()));
            continue;
        }
        match w.as_str() {
            "log" | "cache" | "spare" => {
                finish(&mut group, &mut out)?;
                class = match w.as_str() {
                    "log" => Class::Log,
                    "cache" => Class::Cache,
                    _ => Class::Spare,
                };
            }
            _ => match class {
                Class::Log => out.log.push(resolve(w)),
                Class::Cache => out.cache.push(resolve(w)),
                Class::Spare => out.spares.push(resolve(w)),
                Class::Data => match &mut group {
                    Some((_, devs)) => devs.push(resolve(w)),
                    None => out.tops.push((Layout::Disk, vec![resolve(w)])),
                },
            },
        }
    }
    finish(&mut group, &mut out)?;
    let mut seen = std::collections::HashSet::new();
    for p in out.all() {
        if !seen.insert(p.clone()) {
            return Err(format!("device {} named twice", p.display()));
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddDevices {
    /// As `shoal pool add` takes it: `["mirror", "c", "d", "log", "e", "cache", "f"]`;
    /// devices named as for `NewPool`.
    pub layout: Vec<String>,
    /// Creates missing device files of this many bytes.
    #[serde(default)]
    pub size: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttachDevice {
    /// A device of the plain disk or mirror vdev the new side joins (path or guid).
    pub device: String,
    /// The new side, named as for `NewPool`.
    pub new: String,
    /// Creates the new device file with this many bytes if it is missing.
    #[serde(default)]
    pub size: Option<u64>,
}

/// Opens `path` for the pool, runs `use_it` with it, and removes the file again if
/// this request created it and the pool did not take it.
fn with_device<T>(
    s: &Shared,
    path: &Path,
    size: Option<u64>,
    use_it: impl FnOnce(DeviceArg) -> std::result::Result<T, ApiError>,
) -> std::result::Result<T, ApiError> {
    let host = s.host()?.clone();
    let (device, created) = host.open_device(path, size)?;
    let result = use_it(device);
    if result.is_err() && created {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// Adds data vdevs, log, cache and spare devices, in the order given; answers with the
/// pool's status. A failure stops there: what was added before stays added.
pub(crate) async fn add_devices(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<AddDevices>,
) -> ApiResult<PoolStatus> {
    blocking(move || {
        let host = s.host()?.clone();
        let pool = s.pool(&name)?;
        let mut words = Vec::with_capacity(req.layout.len());
        for w in &req.layout {
            if LAYOUT_WORDS.contains(&w.as_str()) {
                words.push(w.clone());
            } else {
                words.push(s.device_path(w)?.display().to_string());
            }
        }
        let parsed = parse_layout(&words, Path::new("/")).map_err(ServerError::Config)?;
        if parsed.all().next().is_none() {
            return Err(ServerError::Config("no devices to add".into()).into());
        }
        let result = (|| -> std::result::Result<(), ApiError> {
            for (layout, paths) in &parsed.tops {
                let mut devices = Vec::new();
                let mut created = Vec::new();
                for p in paths {
                    let (d, made) = host.open_device(p, req.size)?;
                    if made {
                        created.push(p.clone());
                    }
                    devices.push(d);
                }
                let added = pool.add_vdev(TopArg {
                    layout: *layout,
                    devices,
                });
                if let Err(e) = added {
                    for p in created {
                        let _ = std::fs::remove_file(p);
                    }
                    return Err(e.into());
                }
            }
            for p in &parsed.log {
                with_device(&s, p, req.size, |d| Ok(pool.add_log(d)?))?;
            }
            for p in &parsed.cache {
                with_device(&s, p, req.size, |d| Ok(pool.add_cache(d)?))?;
            }
            for p in &parsed.spares {
                with_device(&s, p, req.size, |d| Ok(pool.add_spare(d)?))?;
            }
            Ok(())
        })();
        host.devices_changed(&pool)?;
        result?;
        tracing::info!(pool = %name, devices = ?req.layout, "devices added");
        Ok(Json(pool.status()))
    })
    .await
}

/// Removes a log, cache or spare device (data vdevs stay; a mirror side is
/// detached instead).
pub(crate) async fn remove_device(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<DeviceName>,
) -> ApiResult<PoolStatus> {
    blocking(move || {
        let host = s.host()?.clone();
        let pool = s.pool(&name)?;
        pool.remove_device(&req.device)?;
        host.devices_changed(&pool)?;
        tracing::info!(pool = %name, device = %req.device, "device removed");
        Ok(Json(pool.status()))
    })
    .await
}

/// Attaches a new side and resilvers it; answers when it is whole.
pub(crate) async fn attach_device(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<AttachDevice>,
) -> ApiResult<ResilverSummary> {
    blocking(move || {
        let host = s.host()?.clone();
        let pool = s.pool(&name)?;
        let path = s.device_path(&req.new)?;
        let summary = s.resilver_operation(
            &name,
            &req.new,
            |progress| {
                with_device(&s, &path, req.size, |d| {
                    Ok(pool.attach(&req.device, d, progress)?)
                })
            },
            |_| format!("{} attached beside {}", path.display(), req.device),
        )?;
        host.devices_changed(&pool)?;
        Ok(Json(summary))
    })
    .await
}

pub(crate) async fn detach_device(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<DeviceName>,
) -> ApiResult<PoolStatus> {
    blocking(move || {
        let host = s.host()?.clone();
        let pool = s.pool(&name)?;
        pool.detach(&req.device)?;
        host.devices_changed(&pool)?;
        tracing::info!(pool = %name, device = %req.device, "device detached");
        Ok(Json(pool.status()))
    })
    .await
}

pub(crate) async fn offline_device(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<DeviceName>,
) -> ApiResult<PoolStatus> {
    blocking(move || {
        let pool = s.pool(&name)?;
        pool.offline(&req.device)?;
        tracing::info!(pool = %name, device = %req.device, "device taken offline");
        Ok(Json(pool.status()))
    })
    .await
}

/// Brings an offline device back and resilvers it; answers when it is whole.
pub(crate) async fn online_device(
    State(s): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Body(req): Body<DeviceName>,
) -> ApiResult<ResilverSummary> {
    blocking(move || {
        let pool = s.pool(&name)?;
        let summary = s.resilver_operation(
            &name,
            &req.device,
            |progress| Ok(pool.online(&req.device, progress)?),
            |_| format!("{} back online", req.device),
        )?;
        Ok(Json(summary))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn layouts_read_like_zpools() {
        let l = parse_layout(
            &words("raidz2 a b c d e f log x cache y spare z"),
            Path::new("/d"),
        )
        .unwrap();
        assert_eq!(l.tops.len(), 1);
        assert_eq!(l.tops[0].0, Layout::RaidZ { nparity: 2 });
        assert_eq!(l.tops[0].1.len(), 6);
        assert_eq!(l.log, vec![PathBuf::from("/d/x")]);
        assert_eq!(l.cache, vec![PathBuf::from("/d/y")]);
        assert_eq!(l.spares, vec![PathBuf::from("/d/z")]);
        let l = parse_layout(&words("a mirror /abs/b c"), Path::new("/d")).unwrap();
        assert_eq!(l.tops.len(), 2);
        assert_eq!(l.tops[1].1[0], PathBuf::from("/abs/b"));
        // Only log and cache devices: a valid addition.
        let l = parse_layout(&words("log x cache y"), Path::new("/d")).unwrap();
        assert!(l.tops.is_empty());
        for bad in ["mirror a", "raidz2 a b c", "log mirror a b", "a a"] {
            assert!(parse_layout(&words(bad), Path::new("/d")).is_err(), "{bad}");
        }
    }
}
