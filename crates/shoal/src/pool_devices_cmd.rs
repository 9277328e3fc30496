//! `shoal pool add|remove|attach|detach|offline|online`: the devices of an imported
//! pool, changed while it serves. With a daemon running they go through its API
//! (`/api/v1/pools/{pool}/add` and the rest, `server::pool_devices`); without one they
//! work on the pool directly, under its lock. Either way the registry's device list
//! is rewritten after a change, so the next import finds every device.

use crate::admin::Api;
use crate::pool_cmd::{
    new_device, open_registered, print_status, record_devices, report_resilver, resilver_device,
    resilver_onto_new, spinner,
};
use crate::registry::lock_pool;
use crate::units::parse_size;
use anyhow::{anyhow, bail, Result};
use pool::pool::{PoolStatus, ResilverSummary, TopArg};
use server::pool_devices::{AddDevices, AttachDevice};
use server::pools_admin::DeviceName;
use std::path::{Path, PathBuf};

fn show(st: &PoolStatus, json: bool, done: &str) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(st)?);
    } else {
        println!("{done}");
        print_status(st);
    }
    Ok(())
}

pub(crate) fn add(
    dir: Option<PathBuf>,
    size: Option<String>,
    name: &str,
    words: &[String],
    json: bool,
) -> Result<()> {
    let size = size.map(|s| parse_size(&s)).transpose()?;
    let dir = match dir {
        Some(d) => std::env::current_dir()?.join(d),
        None => std::env::current_dir()?,
    };
    let parsed = server::pool_devices::parse_layout(words, &dir).map_err(|e| anyhow!(e))?;
    if parsed.all().next().is_none() {
        bail!("no devices to add");
    }
    let done = format!("added {} to pool '{name}'", words.join(" "));
    if let Some(api) = Api::running()? {
        // Devices as absolute paths, keywords as they are.
        let layout = words
            .iter()
            .map(
                |w| match server::pools_admin::LAYOUT_WORDS.contains(&w.as_str()) {
                    true => w.clone(),
                    false => dir.join(w).display().to_string(),
                },
            )
            .collect();
        let st: PoolStatus =
            api.post(&format!("/pools/{name}/add"), &AddDevices { layout, size })?;
        return show(&st, json, &done);
    }
    let _lock = lock_pool(name)?;
    let pool = open_registered(name)?;
    // Open (and make) every device first: a wrong path changes nothing.
    let mut created = Vec::new();
    let mut open = |p: &Path| -> Result<pool::pool::DeviceArg> {
        let (d, made) = new_device(p, size)?;
        if made {
            created.push(p.to_path_buf());
        }
        Ok(d)
    };
    let result = (|| -> Result<()> {
        let mut tops = Vec::new();
        for (layout, paths) in &parsed.tops {
            let devices = paths.iter().map(|p| open(p)).collect::<Result<Vec<_>>>()?;
            tops.push(TopArg {
                layout: *layout,
                devices,
            });
        }
        let log = parsed
            .log
            .iter()
            .map(|p| open(p))
            .collect::<Result<Vec<_>>>()?;
        let cache = parsed
            .cache
            .iter()
            .map(|p| open(p))
            .collect::<Result<Vec<_>>>()?;
        let spares = parsed
            .spares
            .iter()
            .map(|p| open(p))
            .collect::<Result<Vec<_>>>()?;
        for t in tops {
            pool.add_vdev(t)?;
        }
        for d in log {
            pool.add_log(d)?;
        }
        for d in cache {
            pool.add_cache(d)?;
        }
        for d in spares {
            pool.add_spare(d)?;
        }
        Ok(())
    })();
    record_devices(&pool)?;
    if let Err(e) = result {
        // Files this command made that the pool did not take.
        let taken: Vec<String> = pool.leaves().iter().map(|l| l.path()).collect();
        for p in created {
            if !taken.contains(&p.display().to_string()) {
                let _ = std::fs::remove_file(p);
            }
        }
        return Err(e);
    }
    show(&pool.status(), json, &done)
}

/// Runs a quick change through the daemon, or on the pool directly.
fn change(
    name: &str,
    device: &str,
    route: &str,
    json: bool,
    done: &str,
    direct: impl FnOnce(&pool::Pool) -> Result<()>,
) -> Result<()> {
    if let Some(api) = Api::running()? {
        let st: PoolStatus = api.post(
            &format!("/pools/{name}/{route}"),
            &DeviceName {
                device: device.to_string(),
            },
        )?;
        return show(&st, json, done);
    }
    let _lock = lock_pool(name)?;
    let pool = open_registered(name)?;
    direct(&pool)?;
    record_devices(&pool)?;
    show(&pool.status(), json, done)
}

pub(crate) fn remove(name: &str, device: &str, json: bool) -> Result<()> {
    let done = format!("removed {device} from pool '{name}'");
    change(name, device, "remove", json, &done, |pool| {
        Ok(pool.remove_device(device)?)
    })
}

pub(crate) fn detach(name: &str, device: &str, json: bool) -> Result<()> {
    let done = format!("detached {device} from pool '{name}'");
    change(name, device, "detach", json, &done, |pool| {
        Ok(pool.detach(device)?)
    })
}

pub(crate) fn offline(name: &str, device: &str, json: bool) -> Result<()> {
    let done = format!("{device} of pool '{name}' is offline");
    change(name, device, "offline", json, &done, |pool| {
        Ok(pool.offline(device)?)
    })
}

pub(crate) fn attach(
    name: &str,
    device: &str,
    new: &Path,
    size: Option<String>,
    json: bool,
) -> Result<()> {
    let size = size.map(|s| parse_size(&s)).transpose()?;
    let new = std::env::current_dir()?.join(new);
    if let Some(api) = Api::running()? {
        let bar = spinner(json, "resilver (in the daemon)");
        let summary: ResilverSummary = api.post(
            &format!("/pools/{name}/attach"),
            &AttachDevice {
                device: device.to_string(),
                new: new.display().to_string(),
                size,
            },
        )?;
        bar.finish_and_clear();
        return report_resilver(&summary, json);
    }
    resilver_onto_new(name, &new, size, json, |pool, arg, progress| {
        pool.attach(device, arg, progress)
    })
}

pub(crate) fn online(name: &str, device: &str, json: bool) -> Result<()> {
    resilver_device(name, device, "online", json, |pool, progress| {
        pool.online(device, progress)
    })
}
