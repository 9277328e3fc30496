//! The shoal daemon: it takes imported pools, opens their datasets, shares them over
//! NFS, serves the admin HTTP API (`api.rs`), and on shutdown stops taking admin
//! requests, drains in-flight NFS calls and commits every pool.
//!
//! Configuration is one TOML file (see `config.rs`). State the daemon keeps across
//! restarts lives in its state directory, each file written to a temporary name,
//! synced and renamed, so a crash leaves the old or the new version, never half:
//! - `handle-keys/<pool guid>.key`: one file-handle secret per pool (32 random bytes,
//!   mode 0600), so NFS handles stay valid when the daemon restarts;
//! - `shares.json`: shares made or removed through the API (dataset to rules, `null`
//!   for removed), applied over the config file's shares at start;
//! - `daemon.json`: the running daemon's pid and API address, for the CLI to find it
//!   (removed at a clean stop; a stale one names a dead pid and is ignored);
//! - `api-password` and `api-token`: the UI's password hash and the local API token
//!   (`auth.rs`);
//! - `worksheets.json`: saved analytics worksheets (`worksheets.rs`);
//! - `scrubs.json`: when each pool's last scrub ended, for `[storage] scrub_every`;
//! - `analytics/`: analytics history and the enabled datasets (`analytics::archive`).

pub mod alerts;
pub mod analytics_api;
pub mod api;
pub mod auth;
pub mod config;
pub mod iscsi_api;
pub mod iscsi_targets;
pub mod mounts;
pub mod pool_devices;
pub mod pools_admin;
pub mod receive_tokens;
pub mod replication;
pub mod samplers;
pub mod schedules;
pub mod schedules_api;
pub mod snapshots_api;
pub mod streams_api;
pub mod ui;
pub mod volumes_api;
pub mod worksheets;

use config::ServeConfig;
use nfs::{ExportRules, NfsService, RpcServer, Share};
use pool::Pool;
use std::collections::BTreeMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}")]
    NotFound(String),
    /// The request clashes with what exists or runs (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Fs(#[from] fs::FsError),
    #[error(transparent)]
    Pool(#[from] pool::PoolError),
}

pub type Result<T> = std::result::Result<T, ServerError>;

/// A pool the daemon holds, and its datasets.
type HeldPool = (Arc<Pool>, Arc<fs::Datasets>);

/// What the daemon serves, shared by the NFS service's owner and the API handlers.
pub struct DaemonState {
    /// The pools held, by name, each with its datasets: every registered pool at
    /// start, then as the pool administration API creates, imports, exports and
    /// destroys them (`pools_admin.rs`).
    held: RwLock<BTreeMap<String, HeldPool>>,
    /// Makes, finds and lets go of pools for the pool administration API; none: the
    /// set of pools is fixed (embedded daemons, tests).
    host: Option<Arc<dyn pools_admin::PoolHost>>,
    /// Runs local (FUSE) mounts for `mounts.rs`; none: the daemon serves none.
    mount_host: Option<Arc<dyn mounts::MountHost>>,
    /// Local mounts the daemon serves.
    pub mounts: mounts::Mounts,
    analytics_enabled: bool,
    /// Shares of the config file, applied to a pool whenever it is taken.
    config_shares: Vec<(String, String)>,
    /// Where the pool administration API may make and find device files.
    device_dirs: Vec<PathBuf>,
    /// Scrubs and resilvers running, with their progress.
    pub operations: pools_admin::Operations,
    /// `[storage] scrub_every`: every pool is scrubbed this long after its last scrub.
    scrub_every: Option<std::time::Duration>,
    scrub_book_lock: Mutex<()>,
    pub service: Arc<NfsService>,
    pub analytics: Arc<analytics::Analytics>,
    pub nfs_addrs: Vec<SocketAddr>,
    /// Where the portmapper answers, or why it does not ("off", "not answering ...").
    pub portmapper: String,
    pub api_addr: Mutex<Option<SocketAddr>>,
    pub started_unix: u64,
    pub auth: auth::Auth,
    pub worksheets: worksheets::Worksheets,
    pub replication: replication::Replication,
    pub alerts: alerts::Alerts,
    /// Snapshot schedules and their runs (`schedules.rs`).
    pub schedules: schedules::Schedules,
    state_dir: PathBuf,
    /// Serialises share changes and their persistence.
    share_changes: Mutex<()>,
    /// The iSCSI targets, when the block service is on (`[iscsi] listen`).
    pub iscsi: Option<iscsi_targets::IscsiTargets>,
    /// The iSCSI portals' bound addresses (none when the block service is off).
    pub iscsi_addrs: Vec<SocketAddr>,
}

/// The daemon's address book in the state directory (`daemon.json`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DaemonFile {
    pub pid: u32,
    pub api: Option<SocketAddr>,
    /// The API speaks HTTPS with this certificate (PEM), which the CLI trusts.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// The bound addresses of NFS (with MOUNT on the same port) first, then of the
    /// portmapper when it is enabled; a port 0 in the config shows here as the port
    /// the system chose.
    #[serde(default)]
    pub nfs: Vec<SocketAddr>,
    /// The iSCSI portals (none when the block service is off).
    #[serde(default)]
    pub iscsi: Vec<SocketAddr>,
}

impl DaemonFile {
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("daemon.json")
    }

    /// The running daemon's entry, if its process is alive.
    pub fn read_live(state_dir: &Path) -> Option<DaemonFile> {
        let text = std::fs::read(Self::path(state_dir)).ok()?;
        let d: DaemonFile = serde_json::from_slice(&text).ok()?;
        Path::new(&format!("/proc/{}", d.pid)).exists().then_some(d)
    }
}

impl DaemonState {
    /// The pools held, by name.
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        self.held
            .read()
            .unwrap()
            .values()
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The datasets of pool `pool`, if it is held.
    pub fn datasets_of_pool(&self, pool: &str) -> Option<Arc<fs::Datasets>> {
        self.held.read().unwrap().get(pool).map(|(_, d)| d.clone())
    }

    /// Shares `dataset` with `rules` (replacing its rules if already shared);
    /// `persist` records the change in `shares.json`.
    pub fn share(&self, dataset: &str, rules: &str, persist: bool) -> Result<()> {
        let _one = self.share_changes.lock().unwrap();
        let pool_name = dataset.split('/').next().unwrap_or("");
        let ds = self.datasets_of_pool(pool_name).ok_or_else(|| {
            ServerError::Config(format!(
                "share {dataset}: no imported pool named '{pool_name}'"
            ))
        })?;
        if dataset.contains('@') {
            return Err(ServerError::Config(format!(
                "share {dataset}: snapshots are reached through their filesystem's share"
            )));
        }
        let parsed = ExportRules::parse(rules)
            .map_err(|e| ServerError::Config(format!("share {dataset}: {e}")))?;
        let filesystem = ds.open(dataset)?;
        let handle_identity = self
            .replication
            .handle_identity(dataset, filesystem.objset());
        if persist {
            self.persist_share(dataset, Some(rules))?;
        }
        // Replaces the share of the same dataset, if any.
        self.service.add_share(Share {
            pool: pool_name.to_string(),
            dataset: dataset.to_string(),
            fs: filesystem,
            rules: parsed,
            handle_identity,
        });
        tracing::info!(%dataset, %rules, "sharing");
        Ok(())
    }

    /// Stops sharing `dataset` and records that in `shares.json`.
    pub fn unshare(&self, dataset: &str) -> Result<()> {
        let _one = self.share_changes.lock().unwrap();
        if !self.service.is_shared(dataset) {
            return Err(ServerError::NotFound(format!("{dataset} is not shared")));
        }
        self.persist_share(dataset, None)?;
        self.service.remove_share(dataset);
        tracing::info!(%dataset, "unshared");
        Ok(())
    }

    /// The identity of the handles `dataset` is served with: another appliance's when
    /// it was replicated from one, else its pool's key and its object set id.
    pub(crate) fn handle_record(&self, dataset: &str) -> Result<replication::HandleRecord> {
        let ds = self
            .datasets_of_pool(fs::pool_of(dataset))
            .ok_or_else(|| ServerError::NotFound(format!("no pool for {dataset}")))?;
        let pool = ds.pool();
        let objset = pool
            .objset_id(dataset)
            .ok_or_else(|| ServerError::NotFound(format!("no filesystem {dataset}")))?;
        if let Some(r) = self.replication.read(|b| {
            b.handles
                .get(dataset)
                .filter(|h| h.local_objset == objset)
                .cloned()
        }) {
            return Ok(r);
        }
        let key = handle_key(&self.state_dir, pool.guid)?;
        Ok(replication::HandleRecord {
            local_objset: objset,
            objset,
            key: key.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }

    /// Whether `key_hex` is the handle key of a pool of this daemon.
    pub(crate) fn is_own_handle_key(&self, key_hex: &str) -> bool {
        self.pools().iter().any(|p| {
            handle_key(&self.state_dir, p.guid).is_ok_and(|k| {
                let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
                crate::auth::same(&hex, key_hex)
            })
        })
    }

    fn persist_share(&self, dataset: &str, rules: Option<&str>) -> Result<()> {
        let mut all = read_persisted_shares(&self.state_dir)?;
        all.insert(dataset.to_string(), rules.map(str::to_string));
        let bytes = serde_json::to_vec_pretty(&all).expect("a map of strings serialises");
        write_atomically(&self.state_dir.join("shares.json"), &bytes, 0o644)
    }
}

/// Drops every entry of pool `pool` from `shares.json` (the pool was destroyed).
fn forget_persisted_shares(state_dir: &Path, pool: &str) -> Result<()> {
    let mut all = read_persisted_shares(state_dir)?;
    all.retain(|d, _| fs::pool_of(d) != pool);
    let bytes = serde_json::to_vec_pretty(&all).expect("a map of strings serialises");
    write_atomically(&state_dir.join("shares.json"), &bytes, 0o644)
}

fn read_persisted_shares(state_dir: &Path) -> Result<BTreeMap<String, Option<String>>> {
    let path = state_dir.join("shares.json");
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| ServerError::Config(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(ServerError::Io(format!("reading {}", path.display()), e)),
    }
}

/// Writes `path` whole or not at all: a temporary file with `mode`, synced, renamed
/// over it, and the directory synced.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |what: &str, e| ServerError::Io(format!("{what} {}", path.display()), e);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io("creating the folder of", e))?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .map_err(|e| io("creating", e))?;
        f.write_all(bytes).map_err(|e| io("writing", e))?;
        f.sync_all().map_err(|e| io("syncing", e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| io("renaming", e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The admin API's server: a small tokio runtime of its own, stopped gracefully.
struct ApiServer {
    runtime: tokio::runtime::Runtime,
    handle: axum_server::Handle<SocketAddr>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// The rustls server configuration from PEM files (ring as the crypto provider).
fn tls_config(cert: &Path, key: &Path) -> Result<axum_server::tls_rustls::RustlsConfig> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| ServerError::Io(format!("reading {}", p.display()), e))
    };
    let certs = rustls_pemfile::certs(&mut &read(cert)?[..])
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| ServerError::Config(format!("{}: {e}", cert.display())))?;
    if certs.is_empty() {
        return Err(ServerError::Config(format!(
            "{} holds no PEM certificate",
            cert.display()
        )));
    }
    let key_der = rustls_pemfile::private_key(&mut &read(key)?[..])
        .map_err(|e| ServerError::Config(format!("{}: {e}", key.display())))?
        .ok_or_else(|| {
            ServerError::Config(format!("{} holds no PEM private key", key.display()))
        })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServerError::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| {
            ServerError::Config(format!("{} and {}: {e}", cert.display(), key.display()))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(axum_server::tls_rustls::RustlsConfig::from_config(
        Arc::new(config),
    ))
}

impl ApiServer {
    /// Listens on `listen`, speaking HTTPS when `tls` names a certificate and key.
    fn start(
        listen: SocketAddr,
        tls: Option<(PathBuf, PathBuf)>,
        state: Arc<DaemonState>,
    ) -> Result<(ApiServer, SocketAddr)> {
        let io = |what: String, e| ServerError::Io(what, e);
        let tls_config = tls.as_ref().map(|(c, k)| tls_config(c, k)).transpose()?;
        let listener =
            TcpListener::bind(listen).map_err(|e| io(format!("API listening on {listen}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| io("API address".into(), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| io("API socket".into(), e))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(8)
            .thread_name("shoal-api")
            .enable_all()
            .build()
            .map_err(|e| io("starting the API runtime".into(), e))?;
        let handle = axum_server::Handle::new();
        let app = api::router(state).into_make_service_with_connect_info::<SocketAddr>();
        let serving = handle.clone();
        let task = runtime.spawn(async move {
            match tls_config {
                Some(config) => {
                    axum_server::from_tcp_rustls(listener, config)?
                        .handle(serving)
                        .serve(app)
                        .await
                }
                None => {
                    axum_server::from_tcp(listener)?
                        .handle(serving)
                        .serve(app)
                        .await
                }
            }
        });
        Ok((
            ApiServer {
                runtime,
                handle,
                task: Some(task),
            },
            addr,
        ))
    }

    /// Stops accepting, lets requests in progress finish, and ends the runtime.
    fn stop(mut self) {
        self.handle
            .graceful_shutdown(Some(std::time::Duration::from_secs(30)));
        if let Some(task) = self.task.take() {
            let _ = self.runtime.block_on(task);
        }
        self.runtime
            .shutdown_timeout(std::time::Duration::from_secs(30));
    }
}

/// A running daemon.
pub struct Daemon {
    state: Arc<DaemonState>,
    rpc: Option<RpcServer>,
    udp: Option<nfs::wire::udp::UdpServer>,
    api: Option<ApiServer>,
}

impl Daemon {
    /// Opens the shares of `config` (and those changed through the API before) on
    /// `pools` and starts serving NFS and the API.
    /// `host`, when given, lets the API create, import, export and destroy pools.
    pub fn start(
        config: &ServeConfig,
        pools: Vec<Arc<Pool>>,
        state_dir: &Path,
        host: Option<Arc<dyn pools_admin::PoolHost>>,
        mount_host: Option<Arc<dyn mounts::MountHost>>,
    ) -> Result<Daemon> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let boot = now.as_nanos() as u64;
        let service = Arc::new(NfsService::new(boot ^ std::process::id() as u64));
        if let Some(domain) = &config.nfs.id_domain {
            service.set_v4_id_domain(domain);
        }
        service
            .enable_v4_recovery_with_grace(state_dir.join("nfs4-clients"), config.nfs.grace_period)
            .map_err(|e| ServerError::Config(format!("NFSv4 client list: {e}")))?;
        service.set_v4_courtesy(config.nfs.courtesy);
        service
            .start_v4_reaper()
            .map_err(|e| ServerError::Io("starting the NFSv4 lease reaper".into(), e))?;
        let analytics = analytics::Analytics::new();
        analytics.set_names(Arc::new(nfs::names::ShareNames::new(Arc::downgrade(
            &service,
        ))));
        analytics.set_memory_limit(config.analytics.memory_max);
        analytics
            .open_history(&state_dir.join("analytics"), config.analytics.history_max)
            .map_err(|e| ServerError::Config(format!("analytics history: {e}")))?;
        analytics.start_collector();
        if config.analytics.enabled {
            service.set_analytics(analytics.clone());
            analytics.add_sampler(analytics::cpu::CpuSampler::new());
            analytics.add_sampler(analytics::host::HostSampler::new());
        }
        let config_shares: Vec<(String, String)> = config
            .shares
            .iter()
            .map(|s| (s.dataset.clone(), s.rules.clone()))
            .collect();

        let mut listeners = Vec::new();
        let mut datagrams = Vec::new();
        let nfs = TcpListener::bind(config.nfs.listen)
            .map_err(|e| ServerError::Io(format!("listening on {}", config.nfs.listen), e))?;
        let nfs_addr = nfs.local_addr().unwrap_or(config.nfs.listen);
        service.set_nfs_port(nfs_addr.port());
        listeners.push(nfs);
        // MOUNT, NLM and NSM by datagram on the NFS port too (status monitors send
        // SM_NOTIFY by UDP only).
        match std::net::UdpSocket::bind(nfs_addr) {
            Ok(u) => {
                service.set_udp_port(nfs_addr.port());
                datagrams.push(u);
            }
            Err(e) => {
                tracing::warn!(address = %nfs_addr, "no UDP beside NFS (MOUNT, NLM and NSM by TCP only): {e}")
            }
        }
        let portmapper = match config.nfs.portmapper.address(nfs_addr) {
            None => "off".to_string(),
            Some(pm) => match TcpListener::bind(pm) {
                Ok(l) => {
                    let at = l.local_addr().unwrap_or(pm);
                    listeners.push(l);
                    match std::net::UdpSocket::bind(at) {
                        Ok(u) => datagrams.push(u),
                        Err(e) => tracing::warn!(address = %at, "portmapper by TCP only: {e}"),
                    }
                    at.to_string()
                }
                Err(e) if config.nfs.portmapper == config::Portmapper::Auto => {
                    tracing::warn!(
                        address = %pm,
                        "the portmapper does not answer (NFSv3 clients need `nolock` or port options): {e}"
                    );
                    format!("not answering on {pm}: {e}")
                }
                Err(e) => return Err(ServerError::Io(format!("portmapper on {pm}"), e)),
            },
        };
        service.set_nlm_client_portmapper(config.nfs.client_portmapper);
        service
            .start_nlm(Some(state_dir), config.nfs.grace_period)
            .map_err(|e| ServerError::Config(format!("NLM state: {e}")))?;
        let nfs_addrs = listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let tls = config.api.tls().map_err(ServerError::Config)?;
        let auth = auth::Auth::start(state_dir, config.api.login_required(), tls.is_some())?;
        let worksheets = worksheets::Worksheets::open(state_dir)?;
        for name in worksheets.all_datasets() {
            if let Err(e) = analytics.enable(&name) {
                tracing::warn!(dataset = %name, error = %e, "a saved worksheet's dataset");
            }
        }
        let replication = replication::Replication::open(state_dir)?;
        let alerts = alerts::Alerts::open(state_dir, config.alerts.clone())?;
        let schedules = schedules::Schedules::open(state_dir)?;
        let portals: Vec<TcpListener> = match &config.iscsi.listen {
            config::IscsiListen::Off => Vec::new(),
            config::IscsiListen::At(addrs) => addrs
                .iter()
                .map(|a| {
                    TcpListener::bind(a)
                        .map_err(|e| ServerError::Io(format!("iSCSI portal on {a}"), e))
                })
                .collect::<Result<_>>()?,
            config::IscsiListen::Auto => match TcpListener::bind(config::IscsiListen::STANDARD) {
                Ok(l) => vec![l],
                Err(e) => {
                    tracing::warn!(
                        "no iSCSI: port 3260 is taken ({e}); set [iscsi] listen to serve volumes"
                    );
                    Vec::new()
                }
            },
        };
        let mut iscsi_addrs = Vec::new();
        let iscsi = if portals.is_empty() {
            None
        } else {
            let server = iscsi::Server::new(iscsi::Targets::new(), config.iscsi.workers);
            if config.analytics.enabled {
                server.report_to(analytics.clone());
            }
            for listener in portals {
                let addr = listener
                    .local_addr()
                    .map_err(|e| ServerError::Io("the iSCSI portal's address".into(), e))?;
                server
                    .serve(listener)
                    .map_err(|e| ServerError::Io("starting the iSCSI portal".into(), e))?;
                tracing::info!(address = %addr, "iSCSI listening");
                iscsi_addrs.push(addr);
            }
            Some(iscsi_targets::IscsiTargets::open(state_dir, server)?)
        };
        let state = Arc::new(DaemonState {
            held: RwLock::new(BTreeMap::new()),
            host,
            mount_host,
            mounts: Default::default(),
            analytics_enabled: config.analytics.enabled,
            config_shares,
            device_dirs: config.storage.device_dirs.clone(),
            operations: Default::default(),
            scrub_every: config.storage.scrub_every,
            scrub_book_lock: Mutex::new(()),
            service: service.clone(),
            analytics,
            nfs_addrs,
            portmapper,
            api_addr: Mutex::new(None),
            started_unix: now.as_secs(),
            auth,
            worksheets,
            replication,
            alerts,
            schedules,
            state_dir: state_dir.to_path_buf(),
            share_changes: Mutex::new(()),
            iscsi,
            iscsi_addrs,
        });
        for p in pools {
            state.take_pool(p, true)?;
        }
        replication::start_scheduler(Arc::downgrade(&state));
        schedules::start_scheduler(Arc::downgrade(&state));
        alerts::start_monitor(Arc::downgrade(&state));
        let api = match config.api.listen {
            Some(listen) => {
                let (server, addr) = ApiServer::start(listen, tls.clone(), state.clone())?;
                *state.api_addr.lock().unwrap() = Some(addr);
                tracing::info!(address = %addr, "admin API listening");
                Some(server)
            }
            None => None,
        };
        const BY_DATAGRAM: &[u32] = &[
            nfs::proto::PORTMAP_PROGRAM,
            nfs::proto::MOUNT_PROGRAM,
            nfs::nlm::proto::NLM_PROGRAM,
            nfs::nlm::proto::NSM_PROGRAM,
        ];
        let udp = nfs::wire::udp::UdpServer::start(datagrams, service.clone(), BY_DATAGRAM)
            .map_err(|e| ServerError::Io("starting the UDP service".into(), e))?;
        let rpc = RpcServer::start(listeners, service, config.nfs.workers)
            .map_err(|e| ServerError::Io("starting the NFS service".into(), e))?;
        for a in rpc.local_addrs() {
            tracing::info!(address = %a, "NFS listening");
        }
        let daemon_file = DaemonFile {
            pid: std::process::id(),
            api: *state.api_addr.lock().unwrap(),
            tls_cert: tls.map(|(cert, _)| cert),
            nfs: rpc.local_addrs().to_vec(),
            iscsi: state.iscsi_addrs.clone(),
        };
        write_atomically(
            &DaemonFile::path(state_dir),
            &serde_json::to_vec_pretty(&daemon_file).expect("serialises"),
            0o644,
        )?;
        Ok(Daemon {
            state,
            rpc: Some(rpc),
            udp: Some(udp),
            api,
        })
    }

    /// The addresses served: NFS first, then the portmapper if enabled.
    pub fn nfs_addrs(&self) -> Vec<SocketAddr> {
        self.rpc
            .as_ref()
            .map(|r| r.local_addrs().to_vec())
            .unwrap_or_default()
    }

    /// Where the admin API listens, if it is on.
    pub fn api_addr(&self) -> Option<SocketAddr> {
        *self.state.api_addr.lock().unwrap()
    }

    pub fn service(&self) -> &Arc<NfsService> {
        &self.state.service
    }

    pub fn state(&self) -> &Arc<DaemonState> {
        &self.state
    }

    pub fn datasets(&self, pool: &str) -> Option<Arc<fs::Datasets>> {
        self.state.datasets_of_pool(pool)
    }

    /// Stops the API, drains in-flight NFS calls, then commits every pool's open
    /// transaction group.
    pub fn stop(mut self) -> Result<()> {
        self.state.replication.stop_scheduler();
        self.state.schedules.stop_scheduler();
        if let Some(api) = self.api.take() {
            api.stop();
        }
        if let Some(udp) = self.udp.take() {
            udp.stop();
        }
        if let Some(rpc) = self.rpc.take() {
            rpc.stop();
        }
        self.state.mounts.unmount_all();
        for p in self.state.pools() {
            p.sync()?;
        }
        let file = DaemonFile::path(&self.state.state_dir);
        if DaemonFile::read_live(&self.state.state_dir).is_some_and(|d| d.pid == std::process::id())
        {
            let _ = std::fs::remove_file(file);
        }
        Ok(())
    }
}

/// `N` bytes from the kernel's random source: handle keys, tokens, salts.
pub(crate) fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// The pool's file-handle secret, made on first use.
fn handle_key(state_dir: &Path, guid: u64) -> Result<[u8; 32]> {
    let path = state_dir
        .join("handle-keys")
        .join(format!("{guid:016x}.key"));
    let io = |what: &str, e| ServerError::Io(format!("{what} {}", path.display()), e);
    match std::fs::read(&path) {
        Ok(b) if b.len() == 32 => return Ok(b.try_into().unwrap()),
        Ok(_) => {
            return Err(ServerError::Config(format!(
                "{} is not a 32-byte handle key",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("reading", e)),
    }
    let key = random_bytes::<32>().map_err(|e| io("random bytes for", e))?;
    // A crash never leaves half a key; only the daemon's user may read it.
    write_atomically(&path, &key, 0o600)?;
    Ok(key)
}
