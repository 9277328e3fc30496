//! The iSCSI server: portals (listening sockets), a thread per connection for login
//! and then for reading its PDUs, and a shared pool of workers that run commands (as
//! the NFS server: every command ends in blocking pool work, so threads are what an
//! async server would need anyway).
//!
//! Sessions are known by (initiator name, ISID, target): a login with TSIH 0 for one
//! that exists reinstates it (RFC 7143 6.3.5): the old connection is closed, its tasks
//! end, and the new one goes on. At most `MAX_CONNECTIONS` connections are served at
//! once; a login that would pass it is closed at once.

use crate::login::{login, PORTAL_GROUP};
use crate::session::{self, Conn, Job};
use crate::target::Targets;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use vdev::work_queue::{QueueSender, WorkQueue};

pub const MAX_CONNECTIONS: usize = 256;
/// A login that does not finish in this long is dropped.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);

type SessionKey = (String, [u8; 6], String);

pub struct Server {
    pub targets: Arc<Targets>,
    workers: QueueSender<Job>,
    sessions: Mutex<HashMap<SessionKey, Weak<Conn>>>,
    connections: AtomicUsize,
    next_tsih: AtomicU16,
    /// Where commands are reported, once the daemon gives it (`report_to`).
    analytics: std::sync::OnceLock<Arc<analytics::Analytics>>,
}

impl Server {
    /// A server over `targets` with `workers` worker threads.
    pub fn new(targets: Arc<Targets>, workers: usize) -> Arc<Server> {
        let (tx, queue) = WorkQueue::<Job>::new(4096);
        for i in 0..workers.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("iscsi-worker-{i}"))
                .spawn(move || {
                    while let Some(job) = queue.pop() {
                        job();
                    }
                })
                .expect("spawn an iSCSI worker");
        }
        Arc::new(Server {
            targets,
            workers: tx,
            sessions: Mutex::new(HashMap::new()),
            connections: AtomicUsize::new(0),
            next_tsih: AtomicU16::new(1),
            analytics: std::sync::OnceLock::new(),
        })
    }

    /// Reports every command of sessions that log in from now on to `analytics`
    /// (`iscsi.ops`, `iscsi.bytes`); the first call wins.
    pub fn report_to(&self, analytics: Arc<analytics::Analytics>) {
        let _ = self.analytics.set(analytics);
    }

    /// Serves the portal `listener` on a thread of its own; its address joins the
    /// portals SendTargets reports.
    pub fn serve(self: &Arc<Self>, listener: TcpListener) -> std::io::Result<JoinHandle<()>> {
        let addr = listener.local_addr()?;
        let mut portals = self.targets.portals();
        portals.push(format!(
            "{}:{},{PORTAL_GROUP}",
            portal_host(addr),
            addr.port()
        ));
        self.targets.set_portals(portals);
        let me = self.clone();
        std::thread::Builder::new()
            .name(format!("iscsi-portal-{}", addr.port()))
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(stream) = conn else { continue };
                    let Some(slot) = ConnectionSlot::take(&me) else {
                        tracing::warn!("iSCSI: too many connections; one refused");
                        continue;
                    };
                    // The slot goes with the thread's closure: freed when the
                    // connection ends, when it panics, or when the thread never starts.
                    let _ = std::thread::Builder::new()
                        .name("iscsi-conn".into())
                        .spawn(move || slot.server.connection(stream));
                }
            })
    }

    fn connection(self: &Arc<Self>, mut stream: TcpStream) {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(LOGIN_TIMEOUT));
        let tsih = || {
            let t = self.next_tsih.fetch_add(1, Ordering::SeqCst);
            if t == 0 {
                self.next_tsih.fetch_add(1, Ordering::SeqCst)
            } else {
                t
            }
        };
        let logged = match login(&mut stream, &self.targets, &tsih) {
            Ok(l) => l,
            Err(r) => {
                tracing::info!(%peer, "iSCSI login refused: {}", r.0);
                return;
            }
        };
        let _ = stream.set_read_timeout(None);
        let key = logged
            .target
            .as_ref()
            .map(|t| (logged.initiator.clone(), logged.isid, t.name.clone()));
        tracing::info!(
            %peer,
            initiator = %logged.initiator,
            target = logged.target.as_ref().map(|t| t.name.as_str()).unwrap_or("(discovery)"),
            "iSCSI login"
        );
        let register = |conn: &Arc<Conn>| {
            if let Some(key) = &key {
                let old = self
                    .sessions
                    .lock()
                    .unwrap()
                    .insert(key.clone(), Arc::downgrade(conn));
                if let Some(old) = old.and_then(|w| w.upgrade()) {
                    tracing::info!(initiator = %key.0, "iSCSI session reinstated");
                    old.close_for_reinstatement();
                }
            }
        };
        let why = session::run(
            stream,
            logged,
            &self.targets,
            &self.workers,
            &register,
            self.analytics.get().cloned(),
        );
        if let Some(key) = &key {
            let mut sessions = self.sessions.lock().unwrap();
            if sessions.get(key).is_some_and(|w| w.upgrade().is_none()) {
                sessions.remove(key);
            }
        }
        tracing::info!(%peer, "iSCSI connection ended: {why}");
    }

    /// The sessions logged in to normal targets now: (initiator name, ISID in hex,
    /// target name), sorted.
    pub fn sessions(&self) -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = self
            .sessions
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, w)| w.upgrade().is_some())
            .map(|((initiator, isid, target), _)| {
                let isid: String = isid.iter().map(|b| format!("{b:02x}")).collect();
                (initiator.clone(), isid, target.clone())
            })
            .collect();
        out.sort();
        out
    }

    /// Ends every session of target `name` (it was removed or changed): their
    /// initiators log in again and find it as it is now, or not at all.
    pub fn end_sessions_of(&self, name: &str) {
        let conns: Vec<Arc<Conn>> = self
            .sessions
            .lock()
            .unwrap()
            .iter()
            .filter(|((_, _, t), _)| t == name)
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        for c in conns {
            c.close_for_reinstatement();
        }
    }

    /// Sessions logged in now.
    pub fn session_count(&self) -> usize {
        self.sessions
            .lock()
            .unwrap()
            .values()
            .filter(|w| w.upgrade().is_some())
            .count()
    }
}

/// One of the `MAX_CONNECTIONS` connection slots, held by a connection's thread and
/// given back when it is dropped (however the thread ends).
struct ConnectionSlot {
    server: Arc<Server>,
}

impl ConnectionSlot {
    fn take(server: &Arc<Server>) -> Option<ConnectionSlot> {
        server
            .connections
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_CONNECTIONS).then_some(n + 1)
            })
            .ok()?;
        Some(ConnectionSlot {
            server: server.clone(),
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.server.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

fn portal_host(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    }
}
