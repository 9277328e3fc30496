//! NSM, the status monitor (program 100024), as far as a lock server needs it: this
//! server's state number, the list of client machines that hold NLM locks here, the
//! SM_NOTIFY every one of them gets after this server restarts (so their lock
//! managers reclaim in the grace period), and the SM_NOTIFY a client sends when it
//! restarted itself (its locks here are dropped).
//!
//! The calls lock managers make to their own local monitor (SM_MON, SM_UNMON,
//! SM_UNMON_ALL, SM_SIMU_CRASH) are not served to the network: SM_MON and SM_STAT
//! answer `stat_fail`, the others do nothing. shoal is a server; nothing of its own
//! needs monitoring.
//!
//! On disk, in the state directory:
//! - `nsm-state`: the state number in decimal. Odd while up; each start makes it the
//!   next odd number and writes it (temporary file, fsync, rename, fsync of the
//!   directory) before any call is served, so a client never sees one number for
//!   two different lifetimes of the server.
//! - `nlm-hosts`: one line a monitored client, `ADDRESS HEX(CALLER_NAME)`, rewritten
//!   whole the same way whenever the list changes. A client is in the list from
//!   its first granted lock, and stays until it says it restarted, or until it
//!   was notified after a restart of this server (it comes back with its
//!   reclaims). A crash at any instant leaves the old list or the new one; a client
//!   whose lock was granted just before a crash may be missing from it only if the
//!   crash came before the writer ran, and then it learns of the restart when its
//!   next call is refused for the grace period or its lock is gone.

use super::callback::{self, Proto};
use super::proto::{MAX_NAME, NSM_PROGRAM, NSM_V1};
use crate::v4::recovery::{hex_decode, hex_encode, write_atomically, Saver};
use crate::xdr::Encoder;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const SM_STAT: u32 = 1;
pub const SM_MON: u32 = 2;
pub const SM_UNMON: u32 = 3;
pub const SM_UNMON_ALL: u32 = 4;
pub const SM_SIMU_CRASH: u32 = 5;
pub const SM_NOTIFY: u32 = 6;
/// How long after a restart the notifier keeps trying a client that does not answer.
pub const NOTIFY_FOR: Duration = Duration::from_secs(15 * 60);

/// The monitored clients and this server's state number.
pub struct Monitor {
    pub state: u32,
    /// Clients holding locks in this lifetime, address → caller name.
    hosts: Mutex<BTreeMap<IpAddr, String>>,
    /// Clients of the previous lifetime not yet notified (they stay in the file).
    pending: Mutex<BTreeMap<IpAddr, String>>,
    saver: Option<Arc<Saver>>,
}

fn parse_hosts(path: &Path, text: &str) -> std::io::Result<BTreeMap<IpAddr, String>> {
    let mut hosts = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let bad = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: line {} is not `ADDRESS HEXNAME`",
                    path.display(),
                    i + 1
                ),
            )
        };
        let (addr, name) = line.trim().split_once(' ').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let name = hex_decode(name)
            .filter(|n| n.len() <= MAX_NAME)
            .ok_or_else(bad)?;
        hosts.insert(addr, String::from_utf8_lossy(&name).into_owned());
    }
    Ok(hosts)
}

impl Monitor {
    /// Reads the state of the previous lifetime from `dir`, moves the state number
    /// on (durably) and returns the monitor with the clients to notify.
    pub fn open(dir: &Path) -> std::io::Result<Monitor> {
        let state_path = dir.join("nsm-state");
        let previous = match std::fs::read_to_string(&state_path) {
            Ok(t) => t.trim().parse::<u32>().map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: not a number", state_path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        // The next odd number (wrapping past the largest odd one to 1).
        let state = match previous | 1 {
            s if s == previous => s.wrapping_add(2),
            s => s,
        }
        .max(1);
        write_atomically(&state_path, format!("{state}\n").as_bytes())?;
        let hosts_path: PathBuf = dir.join("nlm-hosts");
        let pending = match std::fs::read_to_string(&hosts_path) {
            Ok(t) => parse_hosts(&hosts_path, &t)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Monitor {
            state,
            hosts: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(pending),
            saver: Some(Saver::start(hosts_path)),
        })
    }

    /// A monitor that keeps nothing (a service without a state directory).
    pub fn in_memory() -> Monitor {
        Monitor {
            state: 1,
            hosts: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(BTreeMap::new()),
            saver: None,
        }
    }

    /// The clients of the previous lifetime (to notify).
    pub fn pending(&self) -> Vec<(IpAddr, String)> {
        let p = self.pending.lock().unwrap();
        p.iter().map(|(a, n)| (*a, n.clone())).collect()
    }

    fn save(&self) {
        let Some(saver) = &self.saver else { return };
        let hosts = self.hosts.lock().unwrap();
        let pending = self.pending.lock().unwrap();
        let mut all: BTreeMap<&IpAddr, &String> = pending.iter().collect();
        all.extend(hosts.iter());
        let text: String = all
            .into_iter()
            .map(|(a, n)| format!("{a} {}\n", hex_encode(n.as_bytes())))
            .collect();
        saver.save(text);
    }

    /// `addr` holds a lock now: it is notified after a restart. `true` when it was
    /// not monitored before (the caller waits for the list to be on disk, `flush`,
    /// before it answers: a granted lock must never be unknown to the next start).
    pub fn monitor(&self, addr: IpAddr, name: &str) -> bool {
        let added = {
            let mut hosts = self.hosts.lock().unwrap();
            if hosts.get(&addr).map(String::as_str) == Some(name) {
                false
            } else {
                hosts.insert(addr, name.to_string());
                true
            }
        };
        if added {
            self.save();
        }
        added
    }

    /// `addr` restarted or freed everything: no notification is owed to it.
    pub fn unmonitor(&self, addr: IpAddr) {
        let removed = self.hosts.lock().unwrap().remove(&addr).is_some();
        let was_pending = self.pending.lock().unwrap().remove(&addr).is_some();
        if removed || was_pending {
            self.save();
        }
    }

    /// A client of the previous lifetime was notified (or given up on).
    fn notified(&self, addr: IpAddr) {
        if self.pending.lock().unwrap().remove(&addr).is_some() {
            self.save();
        }
    }

    pub fn monitored(&self) -> usize {
        self.hosts.lock().unwrap().len()
    }

    /// Waits until the list as last changed is in its file.
    pub fn flush(&self) {
        if let Some(s) = &self.saver {
            s.flush();
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Some(s) = &self.saver {
            s.close();
        }
    }
}

/// SM_NOTIFY's arguments: this server's name as the client knows it, and its state.
fn notify_args(mon_name: &str, state: u32) -> Vec<u8> {
    let mut e = Encoder::new();
    e.opaque(mon_name.as_bytes()).u32(state);
    e.buf
}

/// Tells one client that this server restarted: SM_NOTIFY to its status monitor
/// (UDP, as status monitors send it, then TCP), naming this server by the address
/// the client reaches it at.
pub fn notify(client: IpAddr, portmap_port: u16, state: u32) -> std::io::Result<()> {
    let me = callback::local_address_toward(client)?;
    let args = notify_args(&me.to_string(), state);
    let mut last = None;
    for proto in [Proto::Udp, Proto::Tcp] {
        match callback::call_service(
            client,
            portmap_port,
            proto,
            NSM_PROGRAM,
            NSM_V1,
            SM_NOTIFY,
            &args,
            true,
        ) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("tried at least once"))
}

/// Notifies every client of the previous lifetime, retrying those that do not
/// answer for `NOTIFY_FOR`, from a thread of its own.
pub fn start_notifier(monitor: Arc<Monitor>, portmap_port: u16) {
    let todo = monitor.pending();
    if todo.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("nsm-notify".into())
        .spawn(move || {
            let until = Instant::now() + NOTIFY_FOR;
            let mut left = todo;
            let mut pause = Duration::from_millis(500);
            while !left.is_empty() {
                left.retain(|(addr, name)| {
                    match notify(*addr, portmap_port, monitor.state) {
                        Ok(()) => {
                            tracing::info!(client = %addr, name, "told a lock client that the server restarted");
                            monitor.notified(*addr);
                            false
                        }
                        Err(e) if Instant::now() >= until => {
                            tracing::warn!(client = %addr, name, "gave up telling a lock client of the restart: {e}");
                            monitor.notified(*addr);
                            false
                        }
                        Err(e) => {
                            tracing::debug!(client = %addr, "SM_NOTIFY not delivered yet: {e}");
                            true
                        }
                    }
                });
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(30));
            }
        });
    if let Err(e) = spawned {
        tracing::error!("no thread to notify lock clients of the restart: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_number_is_odd_and_moves_on_at_every_start_and_hosts_persist() {
        let dir = tempfile::tempdir().unwrap();
        let m = Monitor::open(dir.path()).unwrap();
        assert_eq!(m.state, 1);
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        let b: IpAddr = "fd00::3".parse().unwrap();
        m.monitor(a, "client-a");
        m.monitor(b, "client b\n");
        m.flush();
        drop(m);
        let m = Monitor::open(dir.path()).unwrap();
        assert_eq!(m.state, 3);
        assert_eq!(
            m.pending(),
            vec![(a, "client-a".to_string()), (b, "client b\n".to_string())]
        );
        // Notified clients leave the list; those locking again are kept.
        m.notified(a);
        m.monitor(b, "client b\n");
        m.notified(b);
        m.flush();
        drop(m);
        let m = Monitor::open(dir.path()).unwrap();
        assert_eq!(m.state, 5);
        assert_eq!(m.pending(), vec![(b, "client b\n".to_string())]);
        m.unmonitor(b);
        m.flush();
        drop(m);
        // An even number left by someone else still gives an odd one.
        std::fs::write(dir.path().join("nsm-state"), "8\n").unwrap();
        let m = Monitor::open(dir.path()).unwrap();
        assert_eq!(m.state, 9);
        assert!(m.pending().is_empty());
        drop(m);
        std::fs::write(dir.path().join("nlm-hosts"), "10.0.0.1 zz\n").unwrap();
        let e = Monitor::open(dir.path()).err().unwrap();
        assert!(e.to_string().contains("line 1"), "{e}");
    }
}
