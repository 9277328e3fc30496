//! Helpers shared by the command-line tests: run the `shoal` binary against a private
//! state directory.

#![allow(dead_code)]

pub mod replication;

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn shoal(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .env("SHOAL_STATE_DIR", state)
        .output()
        .expect("run shoal")
}

/// Runs a command that must succeed; returns its standard output.
pub fn ok(state: &Path, args: &[&str]) -> String {
    let out = shoal(state, args);
    assert!(
        out.status.success(),
        "shoal {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Creates pool `tank` from device files of `size` made under `dir/devs`; `layout`
/// as `shoal pool create` reads it (e.g. `["raidz1", "a", "b", "c"]`).
pub fn create_tank(state: &Path, dir: &Path, size: &str, layout: &[&str]) {
    let devs = dir.join("devs");
    let mut args = vec![
        "pool",
        "create",
        "--dir",
        devs.to_str().unwrap(),
        "--size",
        size,
        "tank",
    ];
    args.extend_from_slice(layout);
    ok(state, &args);
}

/// Sends `signal` (`TERM`, `INT`) to a child process.
pub fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {}", child.id());
}

/// The pjdfstest runner: `$PJDFSTEST`, else what `.ci/test-deps.sh` installed.
pub fn pjdfstest_binary() -> PathBuf {
    if let Ok(p) = std::env::var("PJDFSTEST") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let cargo_bin = Path::new(&home).join(".cargo/bin/pjdfstest");
    assert!(
        cargo_bin.exists(),
        "pjdfstest is not installed: run .ci/test-deps.sh (or set PJDFSTEST)"
    );
    cargo_bin
}

/// A child process killed when the test lets go of it.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `N` distinct loopback ports free now: all are held until the last is picked, so
/// two of them are never the same one handed out twice.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// The NFS and API addresses of the `shoal serve` started as `child` with state
/// directory `state`, once it has written them to `daemon.json`. Fails at once, with
/// its log from `log` if given, when the daemon exits instead.
pub fn daemon_addrs(
    state: &Path,
    child: &mut Child,
    log: Option<&Path>,
) -> (SocketAddr, SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(server::DaemonFile {
            pid,
            api: Some(api),
            nfs,
            ..
        }) = server::DaemonFile::read_live(state)
        {
            if pid == child.id() && !nfs.is_empty() {
                return (nfs[0], api);
            }
        }
        let exited = child.try_wait().unwrap();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "shoal serve did not start ({exited:?}); its log:\n{}",
            log.and_then(|l| std::fs::read_to_string(l).ok())
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `shoal serve` as a process on fixed loopback ports, so it can be killed and
/// started again where clients left it; its log (stderr) is appended to `log`.
pub struct Served {
    child: Option<Child>,
    pub state: PathBuf,
    pub log: PathBuf,
    pub nfs_port: u16,
    pub api_port: u16,
    args: Vec<String>,
}

impl Served {
    /// Starts `shoal serve ARGS` on ports the system chooses (read back from
    /// `daemon.json`, so no other process can hold them first) and waits until it
    /// listens; restarts use the same ports.
    pub fn start(state: &Path, log: &Path, args: &[&str]) -> Served {
        let mut s = Served {
            child: None,
            state: state.to_path_buf(),
            log: log.to_path_buf(),
            nfs_port: 0,
            api_port: 0,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        s.spawn();
        s
    }

    /// `shoal serve` on this daemon's ports, state and log.
    fn serve_command(&self) -> Command {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_shoal"));
        c.args(["serve", "--listen", &format!("127.0.0.1:{}", self.nfs_port)])
            .args(["--api", &format!("127.0.0.1:{}", self.api_port)]);
        // No iSCSI portal on 0.0.0.0 from a test: one on loopback when it asks.
        if !self.args.iter().any(|a| a == "--iscsi") {
            c.args(["--iscsi", "off"]);
        }
        c.args(&self.args)
            .env("SHOAL_STATE_DIR", &self.state)
            .env("SHOAL_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log);
        c
    }

    fn spawn(&mut self) {
        let child = self.serve_command().spawn().unwrap();
        let child = self.child.insert(child);
        // The daemon writes `daemon.json` after it listens: until then a restarted
        // daemon's ports answer while the file still names the killed one, and the CLI
        // finds no daemon. So wait for the file to name this child.
        let (nfs, api) = daemon_addrs(&self.state, child, Some(&self.log));
        if self.nfs_port == 0 {
            (self.nfs_port, self.api_port) = (nfs.port(), api.port());
        }
        assert_eq!(
            (nfs.port(), api.port()),
            (self.nfs_port, self.api_port),
            "a restart keeps the ports"
        );
        wait_listening(self.nfs_port);
        wait_listening(self.api_port);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL: no drain, no commit.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Kills the daemon if it runs and starts it again on the same ports.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// `restart` that reports a daemon which exits, or does not listen within a
    /// minute, instead of failing the test (a negative control expects that).
    pub fn try_restart(&mut self) -> Result<(), String> {
        self.kill9();
        let child = self.serve_command().spawn().unwrap();
        let child = self.child.insert(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Err(format!("shoal serve exited ({status}) instead of starting"));
            }
            let up = |port: u16| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
            // As in `spawn`: listening, and `daemon.json` names this child.
            let named =
                server::DaemonFile::read_live(&self.state).is_some_and(|d| d.pid == child.id());
            if up(self.nfs_port) && up(self.api_port) && named {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("shoal serve did not listen within a minute".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM and wait: the daemon must exit cleanly.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(&c, "TERM");
            let status = c.wait().unwrap();
            assert!(status.success(), "shoal serve exited with {status}");
        }
    }

    pub fn nfs(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.nfs_port))
    }

    pub fn api_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    /// GET on the admin API: status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        match agent().get(&self.api_url(path)).call() {
            Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap()),
            Err(ureq::Error::StatusCode(code)) => (code, String::new()),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// DELETE on the admin API: status and body.
    pub fn delete(&self, path: &str) -> (u16, String) {
        match agent().delete(&self.api_url(path)).call() {
            Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap()),
            Err(e) => panic!("DELETE {path}: {e}"),
        }
    }

    /// POST of a JSON body on the admin API: status and body.
    pub fn post(&self, path: &str, body: &serde_json::Value) -> (u16, String) {
        match agent()
            .post(&self.api_url(path))
            .header("content-type", "application/json")
            .send(body.to_string())
        {
            Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap()),
            Err(ureq::Error::StatusCode(code)) => (code, String::new()),
            Err(e) => panic!("POST {path}: {e}"),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An HTTP client that hands back error answers with their bodies.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

pub fn is_mounted(p: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let p = p.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(&*p))
}

/// A running `shoal mount`; unmounts lazily if a test fails before it does.
pub struct Mount {
    child: Option<Child>,
    at: PathBuf,
}

impl Mount {
    pub fn start(state: &Path, dataset: &str, at: &Path, opts: &[&str]) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        let mut args = vec!["mount", dataset, at.to_str().unwrap()];
        args.extend_from_slice(opts);
        let child = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(&args)
            .env("SHOAL_STATE_DIR", state)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shoal mount");
        let mut m = Mount {
            child: Some(child),
            at: at.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_mounted(at) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                let mut err = String::new();
                m.child
                    .as_mut()
                    .unwrap()
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("shoal mount exited ({status}): {err}");
            }
            assert!(Instant::now() < deadline, "mount did not appear");
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// Waits for the mount process to finish after an unmount or a signal.
    pub fn wait(mut self) {
        let mut child = self.child.take().unwrap();
        let status = child.wait().unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(status.success(), "shoal mount failed: {err}");
        assert!(!is_mounted(&self.at));
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An NFSv3 URL of `file` in `export` of daemon `d` for libnfs-utils.
pub fn nfs_url(d: &Served, export: &str, file: &str) -> String {
    nfs_url_at(d.nfs_port, export, file)
}

pub fn nfs_url_at(port: u16, export: &str, file: &str) -> String {
    format!("nfs://127.0.0.1{export}/{file}?version=3&nfsport={port}&mountport={port}")
}

/// Writes `data` as `file` in `export` of `d` with nfs-cp.
pub fn nfs_put(d: &Served, export: &str, file: &str, data: &[u8]) {
    nfs_put_at(d.nfs_port, d.state.parent().unwrap(), export, file, data)
}

/// `nfs_put` to the NFS port `port`, staging the file in `scratch`.
pub fn nfs_put_at(port: u16, scratch: &Path, export: &str, file: &str, data: &[u8]) {
    let local = scratch.join(format!("upload-{file}"));
    std::fs::write(&local, data).unwrap();
    let out = Command::new("nfs-cp")
        .arg(&local)
        .arg(nfs_url_at(port, export, file))
        .output()
        .expect("libnfs-utils");
    let _ = std::fs::remove_file(&local);
    assert!(out.status.success(), "nfs-cp: {out:?}");
}

/// A client writing files of `len` bytes (`{prefix}0`, `{prefix}1`, ...; contents
/// `pattern(len, seed + i)`) to `export` of `d` until stopped, at least three.
pub struct NfsWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(String, u32)>>,
    export: String,
    len: usize,
}

/// What an `NfsWriter` wrote: (file, seed) of each file.
pub struct Written {
    pub files: Vec<(String, u32)>,
    export: String,
    len: usize,
}

impl Written {
    /// Every file written reads back whole from `d`.
    pub fn check(&self, d: &Served) {
        for (name, seed) in &self.files {
            assert_eq!(
                nfs_get(d, &self.export, name).as_deref(),
                Some(&pattern(self.len, *seed)[..]),
                "{name}"
            );
        }
    }
}

impl NfsWriter {
    pub fn start(
        d: &Served,
        scratch: &Path,
        export: &str,
        prefix: &str,
        len: usize,
        seed: u32,
    ) -> NfsWriter {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (flag, port, scratch) = (stop.clone(), d.nfs_port, scratch.to_path_buf());
        let (to, prefix) = (export.to_string(), prefix.to_string());
        let thread = std::thread::spawn(move || {
            let mut written = Vec::new();
            let mut i = 0;
            while !flag.load(Ordering::Relaxed) || i < 3 {
                let name = format!("{prefix}{i}");
                nfs_put_at(port, &scratch, &to, &name, &pattern(len, seed + i));
                written.push((name, seed + i));
                i += 1;
            }
            written
        });
        NfsWriter {
            stop,
            thread,
            export: export.to_string(),
            len,
        }
    }

    /// Stops the client; what it wrote.
    pub fn finish(self) -> Written {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        Written {
            files: self.thread.join().unwrap(),
            export: self.export,
            len: self.len,
        }
    }
}

/// `file` in `export` of `d` read with nfs-cat; none when that fails.
pub fn nfs_get(d: &Served, export: &str, file: &str) -> Option<Vec<u8>> {
    let out = Command::new("nfs-cat")
        .arg(nfs_url(d, export, file))
        .output()
        .expect("libnfs-utils");
    out.status.success().then_some(out.stdout)
}

/// `len` bytes of a xorshift sequence seeded by `seed`: contents that differ per file
/// and compress poorly.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 7) as u8
        })
        .collect()
}
