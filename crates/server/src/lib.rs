//! The shoal daemon: it takes imported pools, opens their datasets, shares them over
//! NFS, and on shutdown drains in-flight requests and commits every pool.
//!
//! Configuration is one TOML file (see `config.rs`). State the daemon must keep
//! across restarts lives in its state directory: one file-handle secret per pool
//! (`handle-keys/<pool guid>.key`, 32 random bytes, mode 0600), so NFS handles stay
//! valid when the daemon restarts.

pub mod config;

use config::ServeConfig;
use nfs::{ExportRules, HandleKey, NfsService, RpcServer, Share};
use pool::Pool;
use std::collections::HashMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error(transparent)]
    Fs(#[from] fs::FsError),
    #[error(transparent)]
    Pool(#[from] pool::PoolError),
}

pub type Result<T> = std::result::Result<T, ServerError>;

/// A running daemon.
pub struct Daemon {
    pools: Vec<Arc<Pool>>,
    datasets: HashMap<String, Arc<fs::Datasets>>,
    service: Arc<NfsService>,
    rpc: Option<RpcServer>,
}

impl Daemon {
    /// Opens the shares of `config` on `pools` and starts serving.
    pub fn start(config: &ServeConfig, pools: Vec<Arc<Pool>>, state_dir: &Path) -> Result<Daemon> {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let service = Arc::new(NfsService::new(boot ^ std::process::id() as u64));
        let mut datasets = HashMap::new();
        for p in &pools {
            let key = handle_key(state_dir, p.guid)?;
            service.add_pool_key(&p.name, HandleKey::new(key));
            datasets.insert(p.name.clone(), Arc::new(fs::Datasets::new(p.clone())?));
        }
        for s in &config.shares {
            let pool_name = s.dataset.split('/').next().unwrap_or("");
            let ds = datasets.get(pool_name).ok_or_else(|| {
                ServerError::Config(format!(
                    "share {}: no imported pool named '{pool_name}'",
                    s.dataset
                ))
            })?;
            let rules = ExportRules::parse(&s.rules)
                .map_err(|e| ServerError::Config(format!("share {}: {e}", s.dataset)))?;
            let filesystem = ds.open(&s.dataset)?;
            service.add_share(Share {
                pool: pool_name.to_string(),
                dataset: s.dataset.clone(),
                fs: filesystem,
                rules,
            });
            tracing::info!(dataset = %s.dataset, rules = %s.rules, "sharing");
        }
        let mut listeners = Vec::new();
        let nfs = TcpListener::bind(config.nfs.listen)
            .map_err(|e| ServerError::Io(format!("listening on {}", config.nfs.listen), e))?;
        service.set_nfs_port(nfs.local_addr().map(|a| a.port()).unwrap_or(2049));
        listeners.push(nfs);
        if let Some(pm) = config.nfs.portmapper {
            let l = TcpListener::bind(pm)
                .map_err(|e| ServerError::Io(format!("portmapper on {pm}"), e))?;
            listeners.push(l);
        }
        let rpc = RpcServer::start(listeners, service.clone(), config.nfs.workers)
            .map_err(|e| ServerError::Io("starting the NFS service".into(), e))?;
        for a in rpc.local_addrs() {
            tracing::info!(address = %a, "NFS listening");
        }
        Ok(Daemon {
            pools,
            datasets,
            service,
            rpc: Some(rpc),
        })
    }

    /// The addresses served: NFS first, then the portmapper if enabled.
    pub fn nfs_addrs(&self) -> Vec<std::net::SocketAddr> {
        self.rpc
            .as_ref()
            .map(|r| r.local_addrs().to_vec())
            .unwrap_or_default()
    }

    pub fn service(&self) -> &Arc<NfsService> {
        &self.service
    }

    pub fn datasets(&self, pool: &str) -> Option<&Arc<fs::Datasets>> {
        self.datasets.get(pool)
    }

    /// Drains in-flight calls, then commits every pool's open transaction group.
    pub fn stop(mut self) -> Result<()> {
        if let Some(rpc) = self.rpc.take() {
            rpc.stop();
        }
        for p in &self.pools {
            p.sync()?;
        }
        Ok(())
    }
}

/// The pool's file-handle secret, made on first use.
fn handle_key(state_dir: &Path, guid: u64) -> Result<[u8; 32]> {
    let dir: PathBuf = state_dir.join("handle-keys");
    let path = dir.join(format!("{guid:016x}.key"));
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
    std::fs::create_dir_all(&dir).map_err(|e| io("creating the folder of", e))?;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(|e| io("random bytes for", e))?;
    // Written to a temporary name and renamed, so a crash never leaves half a key.
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io("creating", e))?;
        f.write_all(&key).map_err(|e| io("writing", e))?;
        f.sync_all().map_err(|e| io("syncing", e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming", e))?;
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(key)
}
