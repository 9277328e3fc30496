//! One run of a replication action, on the sending appliance:
//! 1. ask the target what it holds of the remote filesystem (snapshots by identity);
//! 2. take snapshot `fs@repl-<unix seconds>`;
//! 3. the base is the newest local snapshot whose identity (guid) the target holds;
//!    none (a full send) when the target does not hold the filesystem, or holds it
//!    without a snapshot (a full receive cut by a crash);
//! 4. stream every snapshot after the base up to the new one (`shoal send -R -i`)
//!    in the body of one HTTPS request, throttled to the action's bandwidth and
//!    counted (`replication.bytes`, the run's progress);
//!    When the target reports a receive cut short (a resume point) of a snapshot
//!    this side still holds, the rest of that stream goes first, then every snapshot
//!    since it: what arrived is not sent again;
//! 5. on success hold the new snapshot as the next base (`replication:<action id>`),
//!    release the previous base, and prune this side's unheld replication snapshots
//!    to `keep_local`; on a
//!    failure before any byte reached the target destroy the new snapshot, so
//!    failures cannot push the common base out of the kept ones (one that got part
//!    of the way is kept: the target can resume it).
//!
//! The stream is produced on its own thread into a bounded channel (a few 1 MiB
//! chunks) and written chunk by chunk as the request body (`wire.rs`), counted and
//! paced as each chunk goes; a send that fails part
//! way ends the body with an error, so the target sees a truncated stream and
//! refuses it, leaving its copy as it was.

use super::{unix_now, Action, LiveRun, RunRecord, Target, SNAPSHOT_PREFIX};
use crate::DaemonState;
use analytics::{Event, Meter, MeterEvent};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the target holds of a filesystem (`GET .../incoming/{fs}`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RemoteState {
    pub dataset: String,
    pub exists: bool,
    /// Recorded as a replica on the target.
    pub replica: bool,
    /// Oldest first.
    pub snapshots: Vec<RemoteSnapshot>,
    /// Where a receive cut short got to: a stream resumed there completes it.
    #[serde(default)]
    pub resume: Option<pool::send::receiver::ResumePoint>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RemoteSnapshot {
    /// After the `@`.
    pub name: String,
    pub guid: u64,
}

/// Runs action `id`, already claimed (`Replication::claim`), and records the run. A
/// `scheduled` run with nothing to send (see `nothing_to_send`) takes no snapshot and
/// leaves no record: it only notes that the target is current.
pub fn run_claimed(
    s: &Arc<DaemonState>,
    id: u64,
    live: Arc<LiveRun>,
    scheduled: bool,
) -> RunRecord {
    if scheduled && nothing_to_send(s, id) {
        s.replication.unchanged(id, live.started_unix);
        return RunRecord {
            started_unix: live.started_unix,
            finished_unix: unix_now(),
            ok: true,
            ..RunRecord::default()
        };
    }
    let mut record = RunRecord {
        started_unix: live.started_unix,
        ..RunRecord::default()
    };
    match run(s, id, &live, &mut record) {
        Ok(()) => record.ok = true,
        Err(e) => {
            tracing::warn!(action = id, error = %e, "replication run failed");
            record.error = Some(e);
        }
    }
    record.finished_unix = unix_now();
    record.bytes = live.bytes.load(Ordering::Relaxed);
    // Alert when an action starts failing and when it works again, not every run.
    let (was_ok, what) = s.replication.read(|b| {
        (
            b.history.get(&id).and_then(|h| h.back()).map(|r| r.ok),
            b.actions
                .get(&id)
                .map(|a| format!("{} to {}:{}", a.filesystem, a.target, a.remote))
                .unwrap_or_default(),
        )
    });
    let object = format!("replication {id}");
    match (&record.error, was_ok) {
        (Some(e), Some(true) | None) => {
            s.alerts.raise(
                crate::alerts::Severity::Warning,
                "replication.failed",
                &object,
                format!("replication of {what} failed: {e}"),
            );
        }
        (None, Some(false)) => {
            s.alerts.raise(
                crate::alerts::Severity::Info,
                "replication.recovered",
                &object,
                format!("replication of {what} works again"),
            );
        }
        _ => {}
    }
    s.replication.finish(id, record.clone());
    record
}

/// Whether the last run succeeded and the filesystem has not changed since the
/// snapshot it sent, which is still the newest here: the target holds everything
/// (unless someone changed it there, which the next run with changes finds).
fn nothing_to_send(s: &DaemonState, id: u64) -> bool {
    let last = s.replication.read(|b| {
        let a = b.actions.get(&id)?;
        let r = b.history.get(&id)?.back()?;
        r.ok.then(|| (a.filesystem.clone(), r.snapshot.clone()))
    });
    let Some((filesystem, sent)) = last else {
        return false;
    };
    let Ok(ds) = s.datasets_of(&filesystem) else {
        return false;
    };
    let Ok(names) = ds.snapshot_names(&filesystem) else {
        return false;
    };
    match names.last() {
        Some((snap, newest)) if *newest == sent => {
            matches!(ds.pool().changed_since_snapshot(*snap), Ok(false))
        }
        _ => false,
    }
}

fn run(
    s: &Arc<DaemonState>,
    id: u64,
    live: &LiveRun,
    record: &mut RunRecord,
) -> Result<(), String> {
    let (action, target): (Action, Target) = s
        .replication
        .read(|b| {
            let a = b.actions.get(&id)?;
            Some((a.clone(), b.targets.get(&a.target)?.clone()))
        })
        .ok_or("the action or its target was removed")?;
    let ds = s
        .datasets_of(&action.filesystem)
        .map_err(|e| e.message().to_string())?;
    let client = Client::new(&target)?;
    let remote = client.state(&action.remote)?;

    let snapshot = new_snapshot_name(&ds, &action.filesystem, live.started_unix)?;
    ds.snapshot(&snapshot).map_err(|e| e.to_string())?;
    *live.snapshot.lock().unwrap() = snapshot.clone();
    record.snapshot = snapshot.clone();
    let outcome = (|| {
        let pool = ds.pool();
        let remote_guids: std::collections::HashSet<u64> =
            remote.snapshots.iter().map(|s| s.guid).collect();
        let base = ds
            .snapshot_names(&action.filesystem)
            .map_err(|e| e.to_string())?
            .into_iter()
            .rev()
            .find(|(sid, _)| {
                pool.snapshot_guid(*sid)
                    .is_some_and(|g| remote_guids.contains(&g))
            });
        if remote.exists && base.is_none() && !remote.snapshots.is_empty() {
            return Err(format!(
                "{} on target '{}' holds no snapshot in common with {}: destroy it there \
                 for a full send, or replicate to another filesystem",
                action.remote, target.name, action.filesystem
            ));
        }
        let base_guid = base.as_ref().and_then(|(sid, _)| pool.snapshot_guid(*sid));
        record.base = base.as_ref().map(|(_, n)| n.clone());
        let names = ds
            .snapshot_names(&action.filesystem)
            .map_err(|e| e.to_string())?;
        let by_guid = |guid: u64| {
            names
                .iter()
                .find(|(sid, _)| pool.snapshot_guid(*sid) == Some(guid))
                .cloned()
        };
        // The rest of a cut stream, if its snapshots are still here.
        let resumed = remote.resume.and_then(|p| {
            let (to, to_name) = by_guid(p.to_guid)?;
            let from = match p.from_guid {
                0 => None,
                g => Some(by_guid(g)?.0),
            };
            Some((to, from, p.at, to_name))
        });
        let mut streams: Vec<(u64, Option<u64>, Option<pool::send::Position>)> = Vec::new();
        let rest_from = match &resumed {
            Some((to, from, at, to_name)) => {
                streams.push((*to, *from, Some(*at)));
                record.base = Some(to_name.clone());
                Some(to_name.clone())
            }
            None => record.base.clone(),
        };
        if rest_from.as_deref() != Some(snapshot.as_str()) {
            streams.extend(
                ds.replicated_send_ids(&snapshot, rest_from.as_deref())
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|(id, base)| (id, base, None)),
            );
        }
        record.streams = streams.len() as u64;
        let handles = s
            .handle_record(&action.filesystem)
            .map_err(|e| e.to_string())?
            .header_value();
        let subject = s.analytics.register_pool(&pool.name);
        let (tx, rx) = sync_channel::<std::io::Result<Vec<u8>>>(4);
        std::thread::scope(|scope| {
            scope.spawn(move || produce(pool, &streams, tx));
            let started = Instant::now();
            let mut sent = |n: usize| {
                let total = live.bytes.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
                s.analytics.record(Event::Meter(MeterEvent {
                    meter: Meter::ReplicationBytes,
                    subject,
                    labels: ["sent", "", ""],
                    value: n as u64,
                    latency_ns: 0,
                    at: Instant::now(),
                }));
                if action.bandwidth > 0 {
                    let due = Duration::from_secs_f64(total as f64 / action.bandwidth as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            };
            let pushed = client.push(
                &action.remote,
                base_guid,
                resumed.is_some(),
                action.keep_remote,
                &handles,
                &mut || rx.recv().ok(),
                &mut sent,
            );
            // A producer blocked on a full channel ends when nothing reads it; the
            // scope waits for it.
            drop(rx);
            pushed
        })
    })();
    match outcome {
        Ok(()) => {
            // The target holds `snapshot` now: it is the next run's base.
            super::move_hold(
                &ds,
                &action.filesystem,
                &snapshot,
                &super::action_hold_tag(id),
            )
            .map_err(|e| format!("sent, but holding {snapshot} as the next base: {e}"))?;
            prune(&ds, &action.filesystem, action.keep_local, &snapshot);
            Ok(())
        }
        Err(e) => {
            if live.bytes.load(Ordering::Relaxed) == 0 {
                if let Err(d) = ds.destroy_snapshot(&snapshot) {
                    tracing::warn!(%snapshot, error = %d, "removing a snapshot that was not sent");
                }
            }
            Err(e)
        }
    }
}

/// `fs@repl-<unix>`, with `-N` when taken twice in a second.
fn new_snapshot_name(ds: &fs::Datasets, filesystem: &str, unix: u64) -> Result<String, String> {
    let existing: Vec<String> = ds
        .snapshot_names(filesystem)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    let first = format!("{filesystem}@{SNAPSHOT_PREFIX}{unix}");
    (0..)
        .map(|i| {
            if i == 0 {
                first.clone()
            } else {
                format!("{first}-{i}")
            }
        })
        .find(|n| !existing.contains(n))
        .ok_or_else(|| "no free snapshot name".to_string())
}

/// Destroys the oldest replication snapshots of `filesystem` beyond `keep`, never
/// `newest` (the next run's base) nor a held one (another action's base, or one an
/// operator holds).
pub(crate) fn prune(ds: &fs::Datasets, filesystem: &str, keep: u32, newest: &str) {
    match ds.prune(
        filesystem,
        SNAPSHOT_PREFIX,
        keep.max(1) as usize,
        Some(newest),
    ) {
        Ok(p) => {
            for (snapshot, e) in p.failed {
                tracing::warn!(%snapshot, error = %e, "pruning a replication snapshot");
            }
        }
        Err(e) => tracing::warn!(%filesystem, error = %e, "pruning replication snapshots"),
    }
}

/// Writes the streams into the channel in 1 MiB chunks; an error ends it.
fn produce(
    pool: &pool::Pool,
    streams: &[(u64, Option<u64>, Option<pool::send::Position>)],
    tx: SyncSender<std::io::Result<Vec<u8>>>,
) {
    let mut w = crate::streams_api::GatheringWriter::new(|chunk| {
        tx.send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the transfer ended"))
    });
    for (id, base, resume) in streams {
        if let Err(e) = pool::send::writer::send_from(pool, *id, *base, *resume, &mut w) {
            let _ = tx.send(Err(std::io::Error::other(e.to_string())));
            return;
        }
    }
    if let Err(e) = std::io::Write::flush(&mut w) {
        tracing::debug!(error = %e, "replication stream ended early");
    }
}

/// An HTTP(S) client of one target's incoming endpoints.
pub(crate) struct Client {
    agent: ureq::Agent,
    base: String,
    /// The streams go by hand (`wire.rs`); the small calls by `agent`.
    wire: super::wire::Wire,
    credential: String,
    target: String,
}

impl Client {
    pub(crate) fn new(t: &Target) -> Result<Client, String> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)));
        let scheme = match &t.certificate {
            None => "http",
            Some(pem) => {
                let certs: Vec<ureq::tls::Certificate<'static>> =
                    ureq::tls::parse_pem(pem.as_bytes())
                        .filter_map(|item| match item {
                            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                            _ => None,
                        })
                        .collect();
                if certs.is_empty() {
                    return Err(format!("target '{}': its certificate holds no PEM", t.name));
                }
                config = config.tls_config(
                    ureq::tls::TlsConfig::builder()
                        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                        .build(),
                );
                "https"
            }
        };
        Ok(Client {
            agent: config.build().into(),
            base: format!("{scheme}://{}/api/v1/replication/incoming", t.address),
            wire: super::wire::Wire::new(t)?,
            credential: format!("Bearer {}", t.credential),
            target: t.name.clone(),
        })
    }

    fn answer<T: serde::de::DeserializeOwned>(
        &self,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        ok: u16,
    ) -> Result<T, String> {
        let mut resp = r.map_err(|e| format!("target '{}': {e}", self.target))?;
        let code = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_string()
            .map_err(|e| format!("target '{}': reading its answer: {e}", self.target))?;
        if code != ok {
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or(text);
            return Err(format!(
                "target '{}' refused (HTTP {code}): {message}",
                self.target
            ));
        }
        serde_json::from_str(&text)
            .map_err(|e| format!("target '{}': an answer that is not JSON: {e}", self.target))
    }

    pub(crate) fn state(&self, remote: &str) -> Result<RemoteState, String> {
        let r = self
            .agent
            .get(format!("{}/{remote}", self.base))
            .header("authorization", &self.credential)
            .call();
        self.answer(r, 200)
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &self,
        remote: &str,
        base: Option<u64>,
        resume: bool,
        keep: u32,
        handles: &str,
        next: &mut dyn FnMut() -> Option<std::io::Result<Vec<u8>>>,
        sent: &mut dyn FnMut(usize),
    ) -> Result<(), String> {
        let mut path = format!("/api/v1/replication/incoming/{remote}?keep={keep}");
        if resume {
            path.push_str("&resume=true");
        } else if let Some(g) = base {
            path.push_str(&format!("&base={g}"));
        }
        let answer = self
            .wire
            .post_chunked(
                &path,
                &[
                    ("Authorization", &self.credential),
                    ("Content-Type", "application/octet-stream"),
                    (super::HANDLE_HEADER, handles),
                ],
                next,
                sent,
            )
            .map_err(|e| format!("target '{}': {e}", self.target))?;
        if answer.status != 201 {
            let message = serde_json::from_str::<serde_json::Value>(&answer.body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or(answer.body);
            return Err(format!(
                "target '{}' refused (HTTP {}): {message}",
                self.target, answer.status
            ));
        }
        serde_json::from_str::<pool::send::receiver::ReceiveSummary>(&answer.body)
            .map(|_| ())
            .map_err(|e| format!("target '{}': an answer that is not JSON: {e}", self.target))
    }
}
