//! A daemon on a raidz2 pool of six file devices in a temporary directory, and a
//! small NFSv3 client built from the crate's own codec for the calls the tests make.
#![allow(dead_code)]

pub mod http;

use nfs::proto::{self, Sattr};
use nfs::rpc::{AuthSys, Credential};
use nfs::xdr::{Decoder, Encoder};
use nfs::RpcClient;
use pool::pool::{DeviceArg, TopArg};
use pool::{Pool, PoolOptions};
use server::config::{ServeConfig, ShareConfig};
use server::Daemon;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use vdev::{FileDevice, Layout};

pub const DEV_BYTES: u64 = 256 << 20;

/// Changes a test applies to the daemon's configuration at every (re)start.
pub type Configure = Box<dyn Fn(&mut ServeConfig)>;

pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub pool: Arc<Pool>,
    pub daemon: Option<Daemon>,
    pub addr: SocketAddr,
    pub shares: Vec<(String, String)>,
    /// Changes to the daemon's configuration, applied at every (re)start.
    pub configure: Option<Configure>,
    /// Runs the daemon's local (FUSE) mounts; none: it serves none.
    pub mount_host: Option<Arc<dyn server::mounts::MountHost>>,
}

fn devices(dir: &std::path::Path, create: bool) -> Vec<DeviceArg> {
    (0..6)
        .map(|i| {
            let p: PathBuf = dir.join(format!("d{i}.img"));
            let dev = if create {
                FileDevice::create(&p, DEV_BYTES).unwrap()
            } else {
                FileDevice::open(&p).unwrap()
            };
            DeviceArg {
                path: p.display().to_string(),
                device: Arc::new(dev),
            }
        })
        .collect()
}

fn options() -> PoolOptions {
    PoolOptions {
        arc_max_bytes: Some(128 << 20),
        ..PoolOptions::default()
    }
}

impl TestServer {
    /// A pool `tp` with datasets `tp/share` (shared with `rules`) and `tp/private`.
    pub fn start(rules: &str) -> TestServer {
        Self::start_configured(rules, None)
    }

    /// As `start`, with `configure` applied to the daemon's configuration.
    pub fn start_configured(rules: &str, configure: Option<Configure>) -> TestServer {
        Self::start_with(rules, configure, None)
    }

    /// As `start`, with the daemon's local mounts run by `mount_host`.
    pub fn start_with_mounts(
        rules: &str,
        mount_host: Arc<dyn server::mounts::MountHost>,
    ) -> TestServer {
        Self::start_with(rules, None, Some(mount_host))
    }

    fn start_with(
        rules: &str,
        configure: Option<Configure>,
        mount_host: Option<Arc<dyn server::mounts::MountHost>>,
    ) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(
            "tp",
            vec![TopArg {
                layout: Layout::RaidZ { nparity: 2 },
                devices: devices(dir.path(), true),
            }],
            vec![],
            vec![],
            options(),
        )
        .unwrap();
        let ds = fs::Datasets::new(pool.clone()).unwrap();
        ds.create("tp/share", &[]).unwrap();
        ds.create("tp/private", &[]).unwrap();
        drop(ds);
        let shares = vec![("tp/share".to_string(), rules.to_string())];
        let mut s = TestServer {
            dir,
            pool,
            daemon: None,
            addr: "127.0.0.1:0".parse().unwrap(),
            shares,
            configure,
            mount_host,
        };
        s.run_daemon("127.0.0.1:0".parse().unwrap());
        s
    }

    fn run_daemon(&mut self, listen: SocketAddr) {
        let mut config = ServeConfig::default();
        config.nfs.listen = listen;
        config.nfs.workers = 8;
        config.iscsi.listen = server::config::IscsiListen::Off;
        // Tests run side by side: the kernel picks the API's port.
        config.api.listen = Some("127.0.0.1:0".parse().unwrap());
        config.shares = self
            .shares
            .iter()
            .map(|(d, r)| ShareConfig {
                dataset: d.clone(),
                rules: r.clone(),
            })
            .collect();
        if let Some(f) = &self.configure {
            f(&mut config);
        }
        let daemon = Daemon::start(
            &config,
            vec![self.pool.clone()],
            &self.dir.path().join("state"),
            None,
            self.mount_host.clone(),
        )
        .unwrap();
        self.addr = daemon.nfs_addrs()[0];
        self.daemon = Some(daemon);
    }

    /// Stops the daemon, exports and re-imports the pool, and starts a new daemon on
    /// the same port with the same state directory.
    pub fn restart(&mut self) {
        self.daemon.take().unwrap().stop().unwrap();
        self.pool.export().unwrap();
        self.pool = Pool::import(devices(self.dir.path(), false), Some("tp"), options()).unwrap();
        self.run_daemon(self.addr);
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn api_addr(&self) -> SocketAddr {
        self.daemon.as_ref().unwrap().api_addr().unwrap()
    }

    pub fn filesystem(&self, name: &str) -> Arc<fs::Filesystem> {
        self.daemon
            .as_ref()
            .unwrap()
            .datasets("tp")
            .unwrap()
            .open(name)
            .unwrap()
    }

    /// A libnfs URL for `path` (starting with the export, e.g. `/tp/share/f`).
    pub fn url(&self, path: &str) -> String {
        format!(
            "nfs://127.0.0.1{path}?version=3&nfsport={p}&mountport={p}",
            p = self.addr.port()
        )
    }

    pub fn client(&self) -> Client {
        Client::new(RpcClient::connect(self.addr).unwrap())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            let _ = d.stop();
        }
    }
}

pub fn root() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 1,
        machine: b"test".to_vec(),
        uid: 0,
        gid: 0,
        gids: vec![],
    })
}

pub fn user(uid: u32) -> Credential {
    Credential::Sys(AuthSys {
        stamp: 1,
        machine: b"test".to_vec(),
        uid,
        gid: uid,
        gids: vec![],
    })
}

/// A reply split into RPC acceptance and the NFS results.
pub struct Answer {
    pub bytes: Vec<u8>,
    /// accept_stat (0 = SUCCESS), or None for a denied call.
    pub accept: Option<u32>,
    pub results_at: usize,
}

impl Answer {
    pub fn parse(bytes: Vec<u8>) -> Answer {
        let mut d = Decoder::new(&bytes);
        d.u32().unwrap(); // xid
        assert_eq!(d.u32().unwrap(), 1, "a reply");
        let accept = if d.u32().unwrap() == 0 {
            d.u32().unwrap();
            d.opaque(400).unwrap();
            Some(d.u32().unwrap())
        } else {
            None
        };
        let results_at = d.position();
        Answer {
            bytes,
            accept,
            results_at,
        }
    }

    pub fn results(&self) -> Decoder<'_> {
        Decoder::new(&self.bytes[self.results_at..])
    }

    /// The nfsstat3 that leads the results.
    pub fn status(&self) -> u32 {
        assert_eq!(self.accept, Some(0), "call accepted");
        self.results().u32().unwrap()
    }
}

pub struct Client {
    pub rpc: RpcClient,
    pub cred: Credential,
}

pub fn skip_post_op_attr(d: &mut Decoder<'_>) {
    if d.bool().unwrap() {
        d.fixed(84).unwrap();
    }
}

pub fn skip_wcc(d: &mut Decoder<'_>) {
    if d.bool().unwrap() {
        d.fixed(24).unwrap();
    }
    skip_post_op_attr(d);
}

impl Client {
    pub fn new(rpc: RpcClient) -> Client {
        Client { rpc, cred: root() }
    }

    pub fn call(&mut self, program: u32, procedure: u32, args: &Encoder) -> Answer {
        let version = if program == proto::PORTMAP_PROGRAM {
            2
        } else {
            3
        };
        let bytes = self
            .rpc
            .call(program, version, procedure, &self.cred, &args.buf)
            .unwrap();
        Answer::parse(bytes)
    }

    pub fn nfs(&mut self, procedure: u32, args: &Encoder) -> Answer {
        self.call(proto::NFS_PROGRAM, procedure, args)
    }

    /// MNT: (mountstat, handle).
    pub fn mount(&mut self, path: &str) -> (u32, Vec<u8>) {
        let mut e = Encoder::new();
        e.opaque(path.as_bytes());
        let a = self.call(proto::MOUNT_PROGRAM, 1, &e);
        assert_eq!(a.accept, Some(0));
        let mut d = a.results();
        let stat = d.u32().unwrap();
        if stat != 0 {
            return (stat, vec![]);
        }
        (0, d.opaque(64).unwrap().to_vec())
    }

    pub fn getattr(&mut self, fh: &[u8]) -> Answer {
        let mut e = Encoder::new();
        e.opaque(fh);
        self.nfs(1, &e)
    }

    pub fn lookup(&mut self, dir: &[u8], name: &str) -> (u32, Vec<u8>) {
        let mut e = Encoder::new();
        e.opaque(dir).opaque(name.as_bytes());
        let a = self.nfs(3, &e);
        let mut d = a.results();
        let st = d.u32().unwrap();
        if st != 0 {
            return (st, vec![]);
        }
        (0, d.opaque(64).unwrap().to_vec())
    }

    pub fn create(&mut self, dir: &[u8], name: &str) -> (u32, Vec<u8>) {
        let mut e = Encoder::new();
        e.opaque(dir).opaque(name.as_bytes()).u32(1);
        proto::encode_sattr(
            &mut e,
            &Sattr {
                mode: Some(0o644),
                ..Sattr::default()
            },
        );
        let a = self.nfs(8, &e);
        let mut d = a.results();
        let st = d.u32().unwrap();
        if st != 0 {
            return (st, vec![]);
        }
        assert!(d.bool().unwrap(), "a handle follows");
        (0, d.opaque(64).unwrap().to_vec())
    }

    /// WRITE: (status, count, committed, verifier).
    pub fn write(
        &mut self,
        fh: &[u8],
        offset: u64,
        data: &[u8],
        stable: u32,
    ) -> (u32, u32, u32, [u8; 8]) {
        let mut e = Encoder::new();
        e.opaque(fh)
            .u64(offset)
            .u32(data.len() as u32)
            .u32(stable)
            .opaque(data);
        let a = self.nfs(7, &e);
        let mut d = a.results();
        let st = d.u32().unwrap();
        skip_wcc(&mut d);
        if st != 0 {
            return (st, 0, 0, [0; 8]);
        }
        let n = d.u32().unwrap();
        let committed = d.u32().unwrap();
        let verf = d.fixed(8).unwrap().try_into().unwrap();
        (st, n, committed, verf)
    }

    /// READ: (status, data, eof).
    pub fn read(&mut self, fh: &[u8], offset: u64, count: u32) -> (u32, Vec<u8>, bool) {
        let mut e = Encoder::new();
        e.opaque(fh).u64(offset).u32(count);
        let a = self.nfs(6, &e);
        let mut d = a.results();
        let st = d.u32().unwrap();
        skip_post_op_attr(&mut d);
        if st != 0 {
            return (st, vec![], false);
        }
        let _count = d.u32().unwrap();
        let eof = d.bool().unwrap();
        let data = d.opaque(1 << 21).unwrap().to_vec();
        (st, data, eof)
    }

    pub fn remove(&mut self, dir: &[u8], name: &str) -> Answer {
        let mut e = Encoder::new();
        e.opaque(dir).opaque(name.as_bytes());
        self.nfs(12, &e)
    }
}

/// Runs a libnfs tool; panics with its output if it fails.
pub fn libnfs(tool: &str, args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} (Debian package libnfs-utils) must be installed: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
