//! The API's snapshots (`/api/v1/snapshots`, `/api/v1/rollback`, `/api/v1/holds`):
//! list, take, destroy, roll back to any snapshot (the newer ones destroyed only when
//! asked; a shared or mounted filesystem is rolled back in place, its NFS clients
//! paused meanwhile and their NFSv4 state on vanished files revoked), and the holds
//! that keep a snapshot from being destroyed. Every change is
//! committed before its answer (`DaemonState::commit`).

use crate::api::{blocking, ApiError, ApiResult, Body, Params, Shared};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use fs::HoldInfo;
use pool::pool::SnapshotInfo;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
pub(crate) struct SnapshotFilter {
    /// A pool or a filesystem; all pools when absent.
    of: Option<String>,
}

/// The snapshots of `of` (a pool, a dataset, or a snapshot: that one alone), or of
/// every pool.
fn snapshots_of(s: &Shared, of: Option<&str>) -> Result<Vec<SnapshotInfo>, ApiError> {
    let mut all = Vec::new();
    match of {
        Some(of) => {
            let dataset = of.split('@').next().unwrap_or(of);
            let filter = dataset.contains('/').then_some(dataset);
            let snaps = s.datasets_of(of)?.snapshots(filter)?;
            all.extend(
                snaps
                    .into_iter()
                    .filter(|x| !of.contains('@') || x.name == of),
            );
        }
        None => {
            for p in s.pools() {
                if let Some(ds) = s.datasets_of_pool(&p.name) {
                    all.extend(ds.snapshots(None)?);
                }
            }
        }
    }
    Ok(all)
}

pub(crate) async fn list(
    State(s): State<Shared>,
    Params(q): Params<SnapshotFilter>,
) -> ApiResult<Vec<SnapshotInfo>> {
    blocking(move || snapshots_of(&s, q.of.as_deref())).await
}

/// `POST /snapshots` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotName {
    pub name: String,
}

pub(crate) async fn create(
    State(s): State<Shared>,
    Body(body): Body<SnapshotName>,
) -> Result<(StatusCode, Json<SnapshotInfo>), ApiError> {
    let info = blocking(move || s.commit(&body.name, |ds| Ok(ds.snapshot(&body.name)?))).await?;
    Ok((StatusCode::CREATED, info))
}

pub(crate) async fn destroy(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    blocking(move || s.commit(&name, |ds| Ok(ds.destroy_snapshot(&name)?)))
        .await
        .map(|_| StatusCode::NO_CONTENT)
}

/// `POST /rollback` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RollbackRequest {
    /// `pool/fs@snapshot`: the one to go back to.
    pub name: String,
    /// Destroy the snapshots taken after it (`shoal snapshot rollback -r`); without
    /// it their existence refuses the rollback.
    #[serde(default)]
    pub destroy_newer: bool,
}

pub(crate) async fn rollback(
    State(s): State<Shared>,
    Body(body): Body<RollbackRequest>,
) -> Result<StatusCode, ApiError> {
    blocking(move || {
        let dataset = body.name.split('@').next().unwrap_or("");
        s.refuse_if_exported(dataset)?;
        let pool = fs::pool_of(dataset).to_string();
        // A shared or mounted filesystem stays so: its operations pause for the
        // rollback, and NFSv4 state on what it took away is revoked meanwhile.
        s.commit(&body.name, |ds| {
            ds.rollback_with(&body.name, body.destroy_newer, &mut |fs, gone| {
                s.service.revoke_for_rollback(&pool, fs.objset(), gone);
            })?;
            Ok(())
        })
    })
    .await
    .map(|_| StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
pub(crate) struct HoldFilter {
    /// A snapshot, a dataset (the holds of its snapshots) or a pool; all pools when
    /// absent.
    of: Option<String>,
}

pub(crate) async fn holds(
    State(s): State<Shared>,
    Params(q): Params<HoldFilter>,
) -> ApiResult<Vec<HoldInfo>> {
    blocking(move || {
        let mut out = Vec::new();
        match &q.of {
            Some(of) => out.extend(s.datasets_of(of)?.holds_under(of)?),
            None => {
                for p in s.pools() {
                    if let Some(ds) = s.datasets_of_pool(&p.name) {
                        out.extend(ds.holds_under(&p.name)?);
                    }
                }
            }
        }
        Ok(out)
    })
    .await
}

/// `POST /holds` body, and the query of `DELETE /holds`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HoldRequest {
    /// `pool/fs@snapshot`
    pub snapshot: String,
    pub tag: String,
}

pub(crate) async fn hold(
    State(s): State<Shared>,
    Body(body): Body<HoldRequest>,
) -> Result<(StatusCode, Json<HoldInfo>), ApiError> {
    let info = blocking(move || {
        s.commit(&body.snapshot, |ds| {
            ds.hold(&body.snapshot, &body.tag)?;
            ds.holds(&body.snapshot)?
                .into_iter()
                .find(|h| h.tag == body.tag)
                .ok_or_else(|| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the hold vanished")
                })
        })
    })
    .await?;
    Ok((StatusCode::CREATED, info))
}

pub(crate) async fn release(
    State(s): State<Shared>,
    Params(q): Params<HoldRequest>,
) -> Result<StatusCode, ApiError> {
    blocking(move || s.commit(&q.snapshot, |ds| Ok(ds.release(&q.snapshot, &q.tag)?)))
        .await
        .map(|_| StatusCode::NO_CONTENT)
}
