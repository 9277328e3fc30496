//! Coordination: `shoal bench agent --listen ADDR` on every client host, and the
//! controller (`shoal bench run --agents A,B,C`) that drives them through one run.
//!
//! The protocol is JSON, one message a line, over TCP. A run is four steps, each
//! finished by every agent before the controller starts the next:
//! 1. `Prepare`: the job and the agent's client numbers; each client writes its share
//!    of the file set (`PrepareProgress` while it does), answered by `Prepared`.
//! 2. `Ready`: each client mounts, finds the set, connects its threads, which then
//!    wait; answered by `Ready`.
//! 3. `Start { in_ms }`: every agent starts its threads `in_ms` after it reads the
//!    message. The controller sends all Starts back to back, so clients start within
//!    the network's one-way delay of each other, without trusting hosts' clocks.
//! 4. `Progress` once a second while running, then `Done` with per-client results.
//!
//! An agent serves one controller at a time and any number of runs in a row. Any
//! failure is sent as `Error` with the reason; the controller stops every agent and
//! reports which one failed and why.

use crate::client::{resolve_server, Target};
use crate::job::Job;
use crate::stats::ClientResult;
use crate::workload::{prepare, ready, ReadyClient};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const PROTOCOL_VERSION: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToAgent {
    Prepare {
        job: Box<Job>,
        /// Global number of this agent's first client; its clients are consecutive.
        first_client: usize,
        /// Clients in the whole run.
        clients: usize,
    },
    Ready,
    Start {
        in_ms: u64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum FromAgent {
    Hello { version: u32, name: String },
    PrepareProgress { files: u64 },
    Prepared,
    Ready,
    Progress { ops: u64, bytes: u64, errors: u64 },
    Done { results: Vec<ClientResult> },
    Error { message: String },
}

/// One message a line.
pub struct Wire {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Wire {
    pub fn new(stream: TcpStream) -> Result<Wire> {
        stream.set_nodelay(true)?;
        Ok(Wire {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        let mut line = serde_json::to_vec(msg)?;
        line.push(b'\n');
        self.writer.write_all(&line)?;
        Ok(())
    }

    pub fn recv<T: for<'de> Deserialize<'de>>(&mut self) -> Result<T> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            bail!("the other side closed the connection");
        }
        serde_json::from_str(&line).with_context(|| format!("bad message: {}", line.trim()))
    }

    fn try_clone(&self) -> Result<Wire> {
        Wire::new(self.writer.try_clone()?)
    }
}

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Name in results (default: the listening address).
    pub name: Option<String>,
    /// Local address for NFS connections (one host can be several clients).
    pub bind: Option<IpAddr>,
}

/// Serves controllers on `listener`, one at a time, forever.
pub fn serve_agent(listener: TcpListener, options: AgentOptions) -> Result<()> {
    let name = match &options.name {
        Some(n) => n.clone(),
        None => listener.local_addr()?.to_string(),
    };
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("shoal bench agent: accept: {e}");
                continue;
            }
        };
        let peer = conn.peer_addr().ok();
        let mut wire = Wire::new(conn)?;
        if let Err(e) = agent_session(&mut wire, &name, &options) {
            eprintln!("shoal bench agent: session with {peer:?} ended: {e:#}");
            let _ = wire.send(&FromAgent::Error {
                message: format!("{e:#}"),
            });
        }
    }
    Ok(())
}

fn agent_session(wire: &mut Wire, name: &str, options: &AgentOptions) -> Result<()> {
    wire.send(&FromAgent::Hello {
        version: PROTOCOL_VERSION,
        name: name.to_string(),
    })?;
    loop {
        let (job, first_client, clients) = match wire.recv::<ToAgent>() {
            Ok(ToAgent::Prepare {
                job,
                first_client,
                clients,
            }) => (*job, first_client, clients),
            Ok(other) => bail!("expected Prepare, got {other:?}"),
            // The controller is done with this agent.
            Err(_) => return Ok(()),
        };
        job.check()?;
        let (nfs, mount) = resolve_server(&job.server, job.mount_port)?;
        let target = Target {
            nfs,
            mount,
            bind: options.bind,
            version: job.nfs_version,
            delegations: job.delegations,
        };
        let mine = first_client..first_client + job.clients_per_agent;
        // Prepare: every client its share, in parallel, with progress.
        let done = Arc::new(AtomicU64::new(0));
        let outcome = std::thread::scope(|s| -> Result<()> {
            let handles: Vec<_> = mine
                .clone()
                .map(|c| {
                    let (job, target, done) = (&job, &target, &done);
                    s.spawn(move || prepare(job, target, c, clients, done))
                })
                .collect();
            let mut last = u64::MAX;
            while !handles.iter().all(|h| h.is_finished()) {
                let now = done.load(Ordering::Relaxed);
                if now != last {
                    wire.send(&FromAgent::PrepareProgress { files: now })?;
                    last = now;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            for h in handles {
                h.join().map_err(|_| anyhow!("prepare panicked"))??;
            }
            Ok(())
        });
        outcome.context("preparing the file set")?;
        wire.send(&FromAgent::Prepared)?;
        match wire.recv::<ToAgent>()? {
            ToAgent::Ready => {}
            other => bail!("expected Ready, got {other:?}"),
        }
        let mut ready_clients: Vec<ReadyClient> = Vec::new();
        for (k, c) in mine.clone().enumerate() {
            let client_name = format!("{name}#{k}");
            ready_clients.push(
                ready(&job, &target, c, clients, client_name)
                    .with_context(|| format!("getting client {c} ready"))?,
            );
        }
        wire.send(&FromAgent::Ready)?;
        let in_ms = match wire.recv::<ToAgent>()? {
            ToAgent::Start { in_ms } => in_ms,
            other => bail!("expected Start, got {other:?}"),
        };
        let start = Instant::now() + Duration::from_millis(in_ms);
        for c in &ready_clients {
            c.start(start);
        }
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        // Progress once a second until every thread is done.
        let lives: Vec<_> = ready_clients.iter().map(|c| c.live.clone()).collect();
        let (finished_tx, finished_rx) = mpsc::channel();
        let collector = std::thread::spawn(move || {
            let results: Vec<ClientResult> =
                ready_clients.into_iter().map(|c| c.finish(start)).collect();
            let _ = finished_tx.send(());
            results
        });
        let mut next = start + Duration::from_secs(1);
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            let finished = finished_rx.recv_timeout(wait).is_ok();
            let sum = |f: fn(&crate::stats::Live) -> &AtomicU64| {
                lives
                    .iter()
                    .map(|l| f(l).load(Ordering::Relaxed))
                    .sum::<u64>()
            };
            wire.send(&FromAgent::Progress {
                ops: sum(|l| &l.ops),
                bytes: sum(|l| &l.bytes),
                errors: sum(|l| &l.errors),
            })?;
            if finished {
                break;
            }
            next += Duration::from_secs(1);
        }
        let results = collector
            .join()
            .map_err(|_| anyhow!("result collector panicked"))?;
        wire.send(&FromAgent::Done { results })?;
    }
}

/// Live figures for the progress line: agents' running totals.
pub trait Progress {
    fn preparing(&mut self, files_done: u64, files_total: u64);
    /// Every client is ready; the start is about to be sent.
    fn starting(&mut self) {}
    fn running(&mut self, elapsed: Duration, ops: u64, bytes: u64, errors: u64);
    fn finish(&mut self);
}

enum Event {
    Msg(usize, FromAgent),
    Lost(usize, String),
}

/// Runs `job` on the agents at `agents` (each with `job.clients_per_agent` clients).
pub fn run_on_agents(
    job: &Job,
    agents: &[SocketAddr],
    progress: &mut dyn Progress,
) -> Result<Vec<ClientResult>> {
    if agents.is_empty() {
        bail!("no agents");
    }
    let mut wires = Vec::new();
    let mut names = Vec::new();
    for a in agents {
        let stream = TcpStream::connect_timeout(a, Duration::from_secs(10))
            .with_context(|| format!("connecting to agent {a}"))?;
        let mut w = Wire::new(stream)?;
        match w
            .recv::<FromAgent>()
            .with_context(|| format!("agent {a}"))?
        {
            FromAgent::Hello { version, name } if version == PROTOCOL_VERSION => names.push(name),
            FromAgent::Hello { version, .. } => {
                bail!("agent {a} speaks protocol {version}, this is {PROTOCOL_VERSION}: run the same shoal on every host")
            }
            other => bail!("agent {a} said {other:?} instead of hello"),
        }
        wires.push(w);
    }
    // One reader thread per agent funnels its messages into one channel.
    let (tx, rx) = mpsc::channel();
    for (i, w) in wires.iter().enumerate() {
        let mut r = w.try_clone()?;
        let tx = tx.clone();
        std::thread::spawn(move || loop {
            match r.recv::<FromAgent>() {
                Ok(m) => {
                    if tx.send(Event::Msg(i, m)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Event::Lost(i, format!("{e:#}")));
                    return;
                }
            }
        });
    }
    drop(tx);
    let clients = agents.len() * job.clients_per_agent;
    for (i, w) in wires.iter_mut().enumerate() {
        w.send(&ToAgent::Prepare {
            job: Box::new(job.clone()),
            first_client: i * job.clients_per_agent,
            clients,
        })?;
    }
    let files_total = if !job.workload.has_file_set() {
        0
    } else if job.per_client_export() {
        job.files * clients as u64
    } else {
        job.files
    };
    // Waits until every agent has ended the step: `take` handles each message and
    // says whether it ends the sender's step (`Ok(true)`) or is progress within it
    // (`Ok(false)`), or hands back a message that does not belong to the step.
    let step = |take: &mut dyn FnMut(usize, FromAgent) -> Result<bool, FromAgent>| -> Result<()> {
        let failed = |i: usize, why: &str| anyhow!("agent {} ({}): {why}", agents[i], names[i]);
        let mut waiting = agents.len();
        while waiting > 0 {
            match rx.recv().map_err(|_| anyhow!("every agent went away"))? {
                Event::Msg(i, FromAgent::Error { message }) => return Err(failed(i, &message)),
                Event::Lost(i, why) => return Err(failed(i, &why)),
                Event::Msg(i, msg) => match take(i, msg) {
                    Ok(true) => waiting -= 1,
                    Ok(false) => {}
                    Err(other) => return Err(failed(i, &format!("unexpected {other:?}"))),
                },
            }
        }
        Ok(())
    };
    let mut prepared = vec![0u64; agents.len()];
    step(&mut |i, msg| match msg {
        FromAgent::PrepareProgress { files } => {
            prepared[i] = files;
            progress.preparing(prepared.iter().sum(), files_total);
            Ok(false)
        }
        FromAgent::Prepared => Ok(true),
        other => Err(other),
    })?;
    for w in wires.iter_mut() {
        w.send(&ToAgent::Ready)?;
    }
    step(&mut |_, msg| match msg {
        FromAgent::Ready => Ok(true),
        other => Err(other),
    })?;
    progress.starting();
    const START_IN_MS: u64 = 250;
    for w in wires.iter_mut() {
        w.send(&ToAgent::Start { in_ms: START_IN_MS })?;
    }
    let started = Instant::now() + Duration::from_millis(START_IN_MS);
    let mut totals = vec![(0u64, 0u64, 0u64); agents.len()];
    let mut results = Vec::new();
    step(&mut |i, msg| match msg {
        FromAgent::Progress { ops, bytes, errors } => {
            totals[i] = (ops, bytes, errors);
            let sum = totals
                .iter()
                .fold((0, 0, 0), |a, t| (a.0 + t.0, a.1 + t.1, a.2 + t.2));
            progress.running(started.elapsed(), sum.0, sum.1, sum.2);
            Ok(false)
        }
        FromAgent::Done { results: r } => {
            results.extend(r);
            Ok(true)
        }
        other => Err(other),
    })?;
    progress.finish();
    Ok(results)
}

/// Starts an agent in this process on a loopback port (for runs without `--agents`).
pub fn local_agent(bind: Option<IpAddr>) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let options = AgentOptions {
        name: Some("local".into()),
        bind,
    };
    std::thread::Builder::new()
        .name("bench-local-agent".into())
        .spawn(move || serve_agent(listener, options))?;
    Ok(addr)
}
