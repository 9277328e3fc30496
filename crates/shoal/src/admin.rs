//! Where an admin command runs. While `shoal serve` runs it holds every pool, so the
//! commands become clients of its HTTP API (found through `daemon.json` in the state
//! directory); otherwise they open the pool themselves under its lock. Both ways
//! return the same types, so a command prints the same thing either way, and both
//! commit before returning.

use crate::registry::{lock_pool, state_dir};
use anyhow::{anyhow, bail, Context, Result};
use fs::{DatasetInfo, Datasets, HoldInfo};
use pool::pool::SnapshotInfo;
use serde::de::DeserializeOwned;
use server::api::{
    HoldRequest, NewFilesystem, PropertyChanges, RollbackRequest, ShareRules, SnapshotName,
};
use server::volumes_api::NewVolume;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// A client of the running daemon's API.
pub struct Api {
    base: String,
    agent: ureq::Agent,
    token: Option<String>,
}

impl Api {
    /// A client of the API at `addr`, over HTTPS trusting `tls_cert` when given, that
    /// authenticates with `token` (the daemon's local token) when given.
    pub fn new(
        addr: SocketAddr,
        tls_cert: Option<&std::path::Path>,
        token: Option<String>,
    ) -> Result<Api> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Scrubs answer when they finish.
            .timeout_global(Some(Duration::from_secs(24 * 3600)));
        let scheme = match tls_cert {
            None => "http",
            Some(path) => {
                let pem = std::fs::read(path)
                    .with_context(|| format!("reading the API's certificate {}", path.display()))?;
                let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                        _ => None,
                    })
                    .collect();
                if certs.is_empty() {
                    bail!("{} holds no PEM certificate", path.display());
                }
                config = config.tls_config(
                    ureq::tls::TlsConfig::builder()
                        .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
                        .build(),
                );
                "https"
            }
        };
        // The certificate names the host, not the loopback address the daemon file holds.
        let host = if tls_cert.is_some() && addr.ip().is_loopback() {
            format!("localhost:{}", addr.port())
        } else {
            addr.to_string()
        };
        Ok(Api {
            base: format!("{scheme}://{host}/api/v1"),
            agent: config.build().into(),
            token,
        })
    }

    /// The running daemon's API, if a daemon runs with its API on. A daemon that runs
    /// with the API off holds the pools all the same: that is an error.
    pub fn running() -> Result<Option<Api>> {
        let dir = state_dir();
        match server::DaemonFile::read_live(&dir) {
            None => Ok(None),
            Some(server::DaemonFile {
                api: Some(a),
                tls_cert,
                ..
            }) => Ok(Some(Api::new(
                a,
                tls_cert.as_deref(),
                server::auth::local_token(&dir),
            )?)),
            Some(d) => bail!(
                "shoal serve (pid {}) holds the pools and runs with its API off; \
                 stop it or enable [api] to run admin commands",
                d.pid
            ),
        }
    }

    fn authorized<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => r.header("authorization", format!("Bearer {t}")),
            None => r,
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
        let r = self.authorized(self.agent.get(self.url(path))).call();
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
        let r = self
            .authorized(request)
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

    /// GETs `path` and copies its body (a stream) to `out`; the bytes copied.
    pub fn get_to(&self, path: &str, out: &mut dyn std::io::Write) -> Result<u64> {
        let r = self.authorized(self.agent.get(self.url(path))).call();
        let mut resp =
            r.with_context(|| format!("asking the daemon at {} for {path}", self.base))?;
        if !resp.status().is_success() {
            return self.answer::<serde_json::Value>(path, Ok(resp)).map(|_| 0);
        }
        let mut reader = resp.body_mut().as_reader();
        std::io::copy(&mut reader, out).with_context(|| format!("copying {path}"))
    }

    /// POSTs the stream `input` as the body of `path`.
    pub fn post_from<T: DeserializeOwned>(
        &self,
        path: &str,
        input: &mut dyn std::io::Read,
    ) -> Result<T> {
        let r = self
            .authorized(self.agent.post(self.url(path)))
            .header("content-type", "application/octet-stream")
            .send(ureq::SendBody::from_reader(input));
        self.answer(path, r)
    }

    pub fn delete(&self, path: &str) -> Result<()> {
        let r = self.authorized(self.agent.delete(self.url(path))).call();
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

/// `with_datasets` for long writes (a stream received): the pool's sync thread
/// commits in the background while `f` goes on writing, as in the daemon, and the
/// ARC stays small: a process that exits next reads nothing back, and blocks leaving
/// the ARC give their buffers to the next writes instead of fresh memory.
pub(crate) fn with_datasets_syncing<T>(
    name: &str,
    f: impl FnOnce(&Datasets) -> Result<T>,
) -> Result<T> {
    let pool_name = fs::pool_of(name);
    let _lock = lock_pool(pool_name)?;
    let pool = crate::pool_cmd::open_registered_long_lived(pool_name, Some(64 << 20))?;
    let ds = Datasets::new(pool.clone())?;
    let r = f(&ds);
    pool.sync()?;
    r
}

/// The two kinds of dataset, each with its own commands and API path.
pub use fs::DatasetType as DatasetKind;

/// The API path of a kind's collection.
fn api_path(kind: DatasetKind) -> &'static str {
    match kind {
        DatasetKind::Filesystem => "/filesystems",
        DatasetKind::Volume => "/volumes",
    }
}

/// Refuses a dataset of the other kind (as the API does), saying which command
/// serves it.
fn require(kind: DatasetKind, ds: &Datasets, name: &str) -> Result<()> {
    ds.require_type(name, kind).map_err(|e| match &e {
        fs::FsError::WrongType { is, .. } => {
            let command = match is {
                DatasetKind::Filesystem => "shoal fs",
                DatasetKind::Volume => "shoal volume",
            };
            anyhow::anyhow!("{e}: use {command}")
        }
        _ => e.into(),
    })
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
        self.dataset_list(DatasetKind::Filesystem, pool)
    }

    pub fn fs_info(&self, name: &str) -> Result<DatasetInfo> {
        self.dataset_info(DatasetKind::Filesystem, name)
    }

    /// Sets (`Some`) or inherits (`None`) properties; all are validated first.
    pub fn fs_set(&self, name: &str, changes: &[(String, Option<String>)]) -> Result<()> {
        self.dataset_set(DatasetKind::Filesystem, name, changes)
    }

    pub fn fs_destroy(&self, name: &str) -> Result<()> {
        self.dataset_destroy(DatasetKind::Filesystem, name)
    }

    pub fn volume_create(
        &self,
        name: &str,
        spec: &fs::VolumeSpec,
        settings: &[(String, String)],
    ) -> Result<DatasetInfo> {
        match self {
            Admin::Daemon(api) => api.post(
                "/volumes",
                &NewVolume {
                    name: name.to_string(),
                    volsize: spec.volsize.to_string(),
                    volblocksize: spec.volblocksize.map(|b| b.to_string()),
                    sparse: spec.sparse,
                    properties: settings.iter().cloned().collect(),
                },
            ),
            Admin::Local => with_datasets(name, |ds| Ok(ds.create_volume(name, spec, settings)?)),
        }
    }

    /// Filesystems or volumes, of every pool or of one.
    pub fn dataset_list(&self, kind: DatasetKind, pool: Option<&str>) -> Result<Vec<DatasetInfo>> {
        match self {
            Admin::Daemon(api) => match pool {
                Some(p) => api.get(&format!("{}?pool={}", api_path(kind), encode(p))),
                None => api.get(api_path(kind)),
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
                        all.extend(
                            ds.list()?
                                .into_iter()
                                .filter(|d| d.prop("type") == Some(kind.name())),
                        );
                        Ok(())
                    })?;
                }
                Ok(all)
            }
        }
    }

    pub fn dataset_info(&self, kind: DatasetKind, name: &str) -> Result<DatasetInfo> {
        match self {
            Admin::Daemon(api) => api.get(&format!("{}/{}", api_path(kind), encode(name))),
            Admin::Local => with_datasets(name, |ds| {
                require(kind, ds, name)?;
                Ok(ds.info(name)?)
            }),
        }
    }

    /// Sets (`Some`) or inherits (`None`) properties; all are validated first.
    pub fn dataset_set(
        &self,
        kind: DatasetKind,
        name: &str,
        changes: &[(String, Option<String>)],
    ) -> Result<()> {
        match self {
            Admin::Daemon(api) => {
                let properties: BTreeMap<String, Option<String>> =
                    changes.iter().cloned().collect();
                api.patch::<DatasetInfo>(
                    &format!("{}/{}", api_path(kind), encode(name)),
                    &PropertyChanges { properties },
                )
                .map(|_| ())
            }
            Admin::Local => with_datasets(name, |ds| {
                require(kind, ds, name)?;
                Ok(ds.set_many(name, changes)?)
            }),
        }
    }

    pub fn dataset_destroy(&self, kind: DatasetKind, name: &str) -> Result<()> {
        match self {
            Admin::Daemon(api) => api.delete(&format!("{}/{}", api_path(kind), encode(name))),
            Admin::Local => with_datasets(name, |ds| {
                require(kind, ds, name)?;
                Ok(ds.destroy(name)?)
            }),
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

    /// Rolls back to snapshot `name`; `destroy_newer` destroys the snapshots after it.
    pub fn rollback(&self, name: &str, destroy_newer: bool) -> Result<()> {
        match self {
            Admin::Daemon(api) => api
                .post::<serde_json::Value>(
                    "/rollback",
                    &RollbackRequest {
                        name: name.to_string(),
                        destroy_newer,
                    },
                )
                .map(|_| ()),
            Admin::Local => with_datasets(name, |ds| Ok(ds.rollback_to(name, destroy_newer)?)),
        }
    }

    pub fn hold(&self, snapshot: &str, tag: &str) -> Result<()> {
        match self {
            Admin::Daemon(api) => api
                .post::<HoldInfo>(
                    "/holds",
                    &HoldRequest {
                        snapshot: snapshot.to_string(),
                        tag: tag.to_string(),
                    },
                )
                .map(|_| ()),
            Admin::Local => with_datasets(snapshot, |ds| Ok(ds.hold(snapshot, tag)?)),
        }
    }

    pub fn release(&self, snapshot: &str, tag: &str) -> Result<()> {
        match self {
            Admin::Daemon(api) => api.delete(&format!(
                "/holds?snapshot={}&tag={}",
                encode(snapshot),
                encode(tag)
            )),
            Admin::Local => with_datasets(snapshot, |ds| Ok(ds.release(snapshot, tag)?)),
        }
    }

    /// The holds of a snapshot, or of the snapshots of a dataset or pool.
    pub fn holds(&self, of: &str) -> Result<Vec<HoldInfo>> {
        match self {
            Admin::Daemon(api) => api.get(&format!("/holds?of={}", encode(of))),
            Admin::Local => with_datasets(of, |ds| Ok(ds.holds_under(of)?)),
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

/// Percent-encodes what a dataset name or hold tag may hold that a URL path or query
/// value may not.
pub(crate) fn encode(s: &str) -> String {
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
