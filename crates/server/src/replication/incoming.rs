//! The replica's side: `GET /api/v1/replication/incoming/{fs}` answers what this
//! appliance holds of `fs` (snapshots by identity), `POST` with `?base=GUID&keep=N`
//! receives one or several streams into it. Both need a replication credential
//! (`Authorization: Bearer TOKEN`) whatever the API's login setting; nothing else
//! takes one.
//!
//! A receive into an existing filesystem needs it to be a replica here (received
//! before, or demoted by the operator) bound to the same credential. With a base,
//! every snapshot after the base is destroyed first and the filesystem rolled back to
//! it (as `zfs receive -F`): a replica has no changes of its own worth keeping. A full
//! stream into a replica without a snapshot (a first receive cut by a crash) replaces
//! it. After every receive, good or refused, the replica is `readonly=on`, its
//! newest snapshot is held (`replication`, the next stream's base) and its unheld
//! replication snapshots are pruned to `keep`. A shared replica is taken out of the
//! NFS service for the receive and shared again with the same rules after it.

use super::{unix_now, Incoming};
use crate::api::{ApiError, Params, Shared};
use crate::replication::sender::{RemoteSnapshot, RemoteState};
use analytics::{Event, Meter, MeterEvent};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use pool::send::receiver::ReceiveSummary;
use serde::Deserialize;
use std::time::Instant;

#[derive(Debug, Deserialize)]
pub struct IncomingQuery {
    /// Identity of the snapshot the streams apply on; absent for a full send.
    base: Option<u64>,
    /// Replication snapshots to keep on this side.
    keep: Option<u32>,
    /// The first stream resumes the receive cut short (at the point `GET` answered).
    resume: Option<bool>,
}

/// The credential's name, or 401.
fn credential(s: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    token
        .and_then(|t| s.replication.credential_named(t))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "not a replication credential of this appliance",
            )
        })
}

fn conflict(m: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, m)
}

pub async fn state(
    State(s): State<Shared>,
    Path(dataset): Path<String>,
    headers: HeaderMap,
) -> Result<Json<RemoteState>, ApiError> {
    credential(&s, &headers)?;
    let ds = s.datasets_of(&dataset)?;
    let pool = ds.pool().clone();
    let record = s.replication.read(|b| b.incoming.get(&dataset).cloned());
    let replica = record.is_some();
    let Some(os) = pool.objset_id(&dataset).filter(|_| !dataset.contains('@')) else {
        return Ok(Json(RemoteState {
            dataset,
            exists: false,
            replica,
            snapshots: Vec::new(),
            resume: None,
        }));
    };
    let resume = record
        .and_then(|r| r.resume)
        .filter(|r| r.local_objset == os)
        .map(|r| r.point);
    let snapshots = pool
        .snapshot_names(os)
        .into_iter()
        .filter_map(|(id, full)| {
            Some(RemoteSnapshot {
                name: full.split_once('@')?.1.to_string(),
                guid: pool.snapshot_guid(id)?,
            })
        })
        .collect();
    Ok(Json(RemoteState {
        dataset,
        exists: true,
        replica,
        snapshots,
        resume,
    }))
}

pub async fn receive(
    State(s): State<Shared>,
    Path(dataset): Path<String>,
    Params(q): Params<IncomingQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<ReceiveSummary>), ApiError> {
    let (pump, reader) = crate::streams_api::body_reader(body);
    let outcome = async {
        let who = credential(&s, &headers)?;
        let handles = headers
            .get(super::HANDLE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || {
            receive_blocking(&s2, &dataset, &who, q, handles.as_deref(), reader)
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    }
    .await;
    let _ = pump.await;
    Ok((StatusCode::CREATED, Json(outcome?)))
}

fn receive_blocking(
    s: &Shared,
    dataset: &str,
    who: &str,
    q: IncomingQuery,
    handles: Option<&str>,
    reader: crate::streams_api::ChannelReader,
) -> Result<ReceiveSummary, ApiError> {
    let ds = s.datasets_of(dataset)?;
    if dataset.contains('@') || !dataset.contains('/') {
        return Err(ApiError::bad(format!(
            "'{dataset}': a replica is a filesystem below a pool's own"
        )));
    }
    if !s.replication.claim_receive(dataset) {
        return Err(conflict(format!(
            "a stream is being received into {dataset} already"
        )));
    }
    let paused = pause_share(s, dataset);
    // A shared replica's clients must find a whole snapshot after a cut receive.
    let resumable = paused.is_none();
    let result = (|| {
        let expect = prepare(s, &ds, dataset, who, q.base, q.resume.unwrap_or(false))?;
        let counted = Counted {
            inner: reader,
            s,
            subject: s.analytics.register_pool(fs::pool_of(dataset)),
            uncounted: 0,
        };
        let mut input = counted;
        let all = receive_streams(s, &ds, dataset, &mut input, resumable.then_some(expect));
        // Good or refused, whatever arrived stays read-only and pruned.
        finish(s, &ds, dataset, q.keep.unwrap_or(u32::MAX), handles);
        let all = all?;
        ds.pool().sync()?;
        Ok(ReceiveSummary::of_all(all).expect("at least one stream"))
    })();
    if let Some(share) = paused {
        resume_share(s, &ds, share);
    }
    s.replication.release_receive(dataset);
    result
}

/// Receives every stream of the request in turn, resumably when `resumable` holds
/// the point the first may resume at (see the module doc); each commit's point goes
/// to the book, and a whole stream clears it.
fn receive_streams(
    s: &Shared,
    ds: &fs::Datasets,
    dataset: &str,
    input: &mut dyn std::io::BufRead,
    resumable: Option<Option<pool::send::receiver::ResumePoint>>,
) -> fs::Result<Vec<ReceiveSummary>> {
    let Some(expect) = resumable else {
        return ds.receive_all(dataset, input);
    };
    ds.receive_all_resumable(dataset, input, expect, &mut |point| {
        let local_objset = ds.pool().objset_id(dataset).unwrap_or(0);
        let kept = s.replication.change(|b| {
            if let Some(e) = b.incoming.get_mut(dataset) {
                e.resume = point.map(|point| super::ResumeState {
                    local_objset,
                    point,
                });
            }
            Ok(())
        });
        if let Err(e) = kept {
            tracing::warn!(%dataset, error = %e, "recording where a receive got to");
        }
    })
}

/// Checks that `dataset` may take the stream and makes it ready: destroys what
/// follows the base, or a partial first receive; records it as a replica first.
/// With `resume`, the first stream continues a receive cut short: nothing is
/// destroyed, and the answer is the point it must start at.
fn prepare(
    s: &Shared,
    ds: &fs::Datasets,
    dataset: &str,
    who: &str,
    base: Option<u64>,
    resume: bool,
) -> Result<Option<pool::send::receiver::ResumePoint>, ApiError> {
    let pool = ds.pool();
    let record = s.replication.read(|b| b.incoming.get(dataset).cloned());
    if resume {
        let os = pool.objset_id(dataset);
        let point = record
            .as_ref()
            .filter(|r| r.credential.as_deref() == Some(who))
            .and_then(|r| r.resume)
            .filter(|r| Some(r.local_objset) == os)
            .ok_or_else(|| {
                conflict(format!(
                    "{dataset} has no receive to resume (bound to this credential)"
                ))
            })?;
        return Ok(Some(point.point));
    }
    match pool.objset_id(dataset) {
        Some(os) => {
            let Some(record) = record else {
                return Err(conflict(format!(
                    "{dataset} is not a replica on this appliance: to make it one (to reverse \
                     a replication after a failover), run `shoal replication demote {dataset}` \
                     here first"
                )));
            };
            if let Some(bound) = &record.credential {
                if bound != who {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        format!("{dataset} is replicated here by credential '{bound}'"),
                    ));
                }
            }
            let snaps = pool.snapshot_names(os);
            match base {
                Some(guid) => {
                    let Some(at) = snaps
                        .iter()
                        .position(|(id, _)| pool.snapshot_guid(*id) == Some(guid))
                    else {
                        return Err(conflict(format!(
                            "{dataset} holds no snapshot {guid:#x}, the stream's base"
                        )));
                    };
                    for (_, name) in snaps[at + 1..].iter().rev() {
                        // Received after the base by a stream cut short: this side's
                        // own hold goes with it; an operator's refuses (409).
                        let _ = ds.release(name, super::REPLICA_HOLD_TAG);
                        ds.destroy_snapshot(name)?;
                    }
                }
                None if snaps.is_empty() => {
                    // A first receive a crash cut short: start again.
                    ds.destroy(dataset)?;
                }
                None => {
                    return Err(conflict(format!(
                        "{dataset} holds snapshots: a full stream needs it gone or empty"
                    )))
                }
            }
        }
        None => {
            if base.is_some() {
                return Err(conflict(format!(
                    "{dataset} does not exist here: the stream must be a full one"
                )));
            }
        }
    }
    s.replication.change(|b| {
        let entry = b.incoming.entry(dataset.to_string()).or_insert(Incoming {
            credential: None,
            last_snapshot: None,
            last_received_unix: None,
            resume: None,
        });
        entry.credential = Some(who.to_string());
        // What a cut receive left was just discarded.
        entry.resume = None;
        Ok(())
    })?;
    Ok(None)
}

/// After a receive: read-only, pruned, recorded.
fn finish(s: &Shared, ds: &fs::Datasets, dataset: &str, keep: u32, handles: Option<&str>) {
    let pool = ds.pool();
    let Some(os) = pool.objset_id(dataset) else {
        return;
    };
    if let Err(e) = ds.set(dataset, "readonly", Some("on")) {
        tracing::warn!(%dataset, error = %e, "making a replica read-only");
    }
    let snaps = pool.snapshot_names(os);
    if let Some((_, newest)) = snaps.last() {
        // The base of the next stream.
        if let Err(e) = super::move_hold(ds, dataset, newest, super::REPLICA_HOLD_TAG) {
            tracing::warn!(%dataset, snapshot = %newest, error = %e, "holding a replica's base");
        }
        super::sender::prune(ds, dataset, keep, newest);
    }
    let last = snaps.last().map(|(_, n)| n.clone());
    // Handles made with one of this daemon's own pool keys are this daemon's: a
    // filesystem replicated within it keeps its own (another share already answers
    // to those), and one replicated back to where it came from has them already.
    let handles = handles
        .and_then(|h| super::HandleRecord::parse_header(h, os))
        .filter(|h| !s.is_own_handle_key(&h.key));
    let _ = s.replication.change(|b| {
        if let Some(h) = handles {
            b.handles.insert(dataset.to_string(), h);
        }
        if let Some(e) = b.incoming.get_mut(dataset) {
            if e.last_snapshot != last {
                e.last_snapshot = last;
                e.last_received_unix = Some(unix_now());
            }
        }
        Ok(())
    });
}

fn pause_share(s: &Shared, dataset: &str) -> Option<std::sync::Arc<nfs::service::Share>> {
    let share = s.service.share_named(dataset)?;
    s.service.remove_share(dataset);
    if let Ok(ds) = s.datasets_of(dataset) {
        ds.close(dataset);
    }
    Some(share)
}

fn resume_share(s: &Shared, ds: &fs::Datasets, share: std::sync::Arc<nfs::service::Share>) {
    match ds.open(&share.dataset) {
        Ok(fs) => s.service.add_share(nfs::service::Share {
            pool: share.pool.clone(),
            dataset: share.dataset.clone(),
            handle_identity: s.replication.handle_identity(&share.dataset, fs.objset()),
            fs,
            rules: share.rules.clone(),
        }),
        Err(e) => {
            tracing::warn!(dataset = %share.dataset, error = %e, "sharing a replica again")
        }
    }
}

/// Counts received bytes into `replication.bytes` as they are consumed (an event
/// per MiB, and the rest when dropped).
struct Counted<'a> {
    inner: crate::streams_api::ChannelReader,
    s: &'a Shared,
    subject: u32,
    uncounted: u64,
}

impl Counted<'_> {
    fn count(&mut self) {
        if self.uncounted > 0 {
            self.s.analytics.record(Event::Meter(MeterEvent {
                meter: Meter::ReplicationBytes,
                subject: self.subject,
                labels: ["received", "", ""],
                value: std::mem::take(&mut self.uncounted),
                latency_ns: 0,
                at: Instant::now(),
            }));
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.count();
    }
}

impl std::io::Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        crate::streams_api::read_from_buffer(self, buf)
    }
}

impl std::io::BufRead for Counted<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.uncounted += n as u64;
        if self.uncounted >= 1 << 20 {
            self.count();
        }
    }
}
