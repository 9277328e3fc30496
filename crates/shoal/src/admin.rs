//! Where an admin command runs. While `shoal serve` runs it holds every pool, so the
//! commands become clients of its HTTP API (found through `daemon.json` in the state
//! directory); otherwise they open the pool themselves under its lock. Both ways
//! return the same types, so a command prints the same thing either way, and both
//! commit before returning.

use crate::registry::{lock_pool, state_dir};
use anyhow::{anyhow, bail, Context, Result};
use fs::{DatasetInfo, Datasets};
use pool::pool::SnapshotInfo;
use serde::de::DeserializeOwned;
use server::api::{NewFilesystem, PropertyChanges, ShareRules, SnapshotName};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// A client of the running daemon's API.
pub struct Api {
    base: String,
    agent: ureq::Agent,
}

impl Api {
    pub fn new(addr: SocketAddr) -> Api {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Scrubs answer when they finish.
            .timeout_global(Some(Duration::from_secs(24 * 3600)))
            .build()
            .into();
        Api {
            base: format!("http://{addr}/api/v1"),
            agent,
        }
    }

    /// The running daemon's API, if a daemon runs with its API on. A daemon that runs
    /// with the API off holds the pools all the same: that is an error.
    pub fn running() -> Result<Option<Api>> {
        match server::DaemonFile::read_live(&state_dir()) {
            None => Ok(None),
            Some(server::DaemonFile { api: Some(a), .. }) => Ok(Some(Api::new(a))),
            Some(d) => bail!(
                "shoal serve (pid {}) holds the pools and runs with its API off; \
                 stop it or enable [api] to run admin commands",
                d.pid
            ),
        }
    }

    fn answer<T: DeserializeOwned>(
        &self,
        what: &str,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T> {
        let mut resp =
            r.with_context(|| format!("asking the daemon at {} to {what}", self.base))?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading the daemon's answer to {what}"))?;
        if !status.is_success() {
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or(text);
            bail!("{message}");
        }
        let text = if text.is_empty() { "null" } else { &text };
        serde_json::from_str(text).with_context(|| format!("the daemon's answer to {what}"))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let r = self.agent.get(self.url(path)).call();
        self.answer(path, r)
    }

    /// Sends `body` as JSON with `request` (a POST, PUT or PATCH of `path`).
    fn send<T: DeserializeOwned>(
        &self,
        path: &str,
        request: ureq::RequestBuilder<ureq::typestate::WithBody>,
        body: &impl serde::Serialize,
    ) -> Result<T> {
        let bytes = serde_json::to_vec(body)?;
        let r = request
            .header("content-type", "application/json")
            .send(&bytes[..]);
        self.answer(path, r)
    }

    pub fn post<T: DeserializeOwned>(&self, path: &str, body: &impl serde::Serialize) -> Result<T> {
        self.send(path, self.agent.post(self.url(path)), body)
    }

    pub fn put<T: DeserializeOwned>(&self, path: &str, body: &impl serde::Serialize) -> Result<T> {
        self.send(path, self.agent.put(self.url(path)), body)
    }

    pub fn patch<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<T> {
        self.send(path, self.agent.patch(self.url(path)), body)
    }

    pub fn delete(&self, path: &str) -> Result<()> {
        let r = self.agent.delete(self.url(path)).call();
        self.answer::<serde_json::Value>(path, r).map(|_| ())
    }
}

/// Opens the datasets of the pool that `name` lives in, under the pool's lock, and
/// commits after `f`.
pub(crate) fn with_datasets<T>(name: &str, f: impl FnOnce(&Datasets) -> Result<T>) -> Result<T> {
    let pool_name = fs::pool_of(name);
    let _lock = lock_pool(pool_name)?;
    let pool = crate::pool_cmd::open_registered(pool_name)?;
    let ds = Datasets::new(pool.clone())?;
    let r = f(&ds);
    pool.sync()?;
    r
}

/// Dataset and snapshot commands, through the daemon or on the pool directly.
pub enum Admin {
    Daemon(Api),
    Local,
}

impl Admin {
    pub fn connect() -> Result<Admin> {
        Ok(match Api::running()? {
            Some(api) => Admin::Daemon(api),
            None => Admin::Local,
        })
    }

    pub fn fs_create(&self, name: &str, settings: &[(String, String)]) -> Result<DatasetInfo> {
        match self {
            Admin::Daemon(api) => api.post(
                "/filesystems",
                &NewFilesystem {
                    name: name.to_string(),
                    properties: settings.iter().cloned().collect(),
                },
            ),
            Admin::Local => with_datasets(name, |ds| Ok(ds.create(name, settings)?)),
        }
    }

    pub fn fs_list(&self, pool: Option<&str>) -> Result<Vec<DatasetInfo>> {
        match self {
            Admin::Daemon(api) => match pool {
                Some(p) => api.get(&format!("/filesystems?pool={}", encode(p))),
                None => api.get("/filesystems"),
            },
            Admin::Local => {
                let pools: Vec<String> = match pool {
                    Some(p) => vec![p.to_string()],
                    None => crate::registry::Registry::load()?
                        .pools
                        .keys()
                        .cloned()
                        .collect(),
                };
                let mut all = Vec::new();
                for p in pools {
                    with_datasets(&p, |ds| {
                        all.extend(ds.list()?);
                        Ok(())
                    })?;
                }
                Ok(all)
            }
        }
    }

    pub fn fs_info(&self, name: &str) -> Result<DatasetInfo> {
        match self {
            Admin::Daemon(api) => api.get(&format!("/filesystems/{}", encode(name))),
            Admin::Local => with_datasets(name, |ds| Ok(ds.info(name)?)),
        }
    }

    /// Sets (`Some`) or inherits (`None`) properties; all are validated first.
    pub fn fs_set(&self, name: &str, changes: &[(String, Option<String>)]) -> Result<()> {
        match self {
            Admin::Daemon(api) => {
                let properties: BTreeMap<String, Option<String>> =
                    changes.iter().cloned().collect();
                api.patch::<DatasetInfo>(
                    &format!("/filesystems/{}", encode(name)),
                    &PropertyChanges { properties },
                )
                .map(|_| ())
            }
            Admin::Local => with_datasets(name, |ds| Ok(ds.set_many(name, changes)?)),
        }
    }

    pub fn fs_destroy(&self, name: &str) -> Result<()> {
        match self {
            Admin::Daemon(api) => api.delete(&format!("/filesystems/{}", encode(name))),
            Admin::Local => with_datasets(name, |ds| Ok(ds.destroy(name)?)),
        }
    }

    pub fn snapshot_create(&self, name: &str) -> Result<SnapshotInfo> {
        match self {
            Admin::Daemon(api) => api.post(
                "/snapshots",
                &SnapshotName {
                    name: name.to_string(),
                },
            ),
            Admin::Local => with_datasets(name, |ds| Ok(ds.snapshot(name)?)),
        }
    }

    /// Snapshots of a pool or of one filesystem.
    pub fn snapshots(&self, of: &str) -> Result<Vec<SnapshotInfo>> {
        match self {
            Admin::Daemon(api) => api.get(&format!("/snapshots?of={}", encode(of))),
            Admin::Local => with_datasets(of, |ds| {
                let filter = of.contains('/').then_some(of);
                Ok(ds.snapshots(filter)?)
            }),
        }
    }

    pub fn snapshot_destroy(&self, name: &str) -> Result<()> {
        match self {
            Admin::Daemon(api) => api.delete(&format!("/snapshots/{}", encode(name))),
            Admin::Local => with_datasets(name, |ds| Ok(ds.destroy_snapshot(name)?)),
        }
    }

    pub fn rollback(&self, name: &str) -> Result<()> {
        match self {
            Admin::Daemon(api) => api
                .post::<serde_json::Value>(
                    "/rollback",
                    &SnapshotName {
                        name: name.to_string(),
                    },
                )
                .map(|_| ()),
            Admin::Local => with_datasets(name, |ds| Ok(ds.rollback(name)?)),
        }
    }
}

/// Shares exist only in the daemon.
pub fn daemon_for(what: &str) -> Result<Api> {
    Api::running()?
        .ok_or_else(|| anyhow!("{what} needs the daemon: start `shoal serve` (or `shoal demo`)"))
}

pub fn share_set(api: &Api, dataset: &str, rules: &str) -> Result<nfs::ShareInfo> {
    api.put(
        &format!("/shares/{}", encode(dataset)),
        &ShareRules {
            rules: rules.to_string(),
        },
    )
}

/// Percent-encodes what a dataset name may hold that a URL path may not.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'/'
            | b'@'
            | b':' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
