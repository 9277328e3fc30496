//! The API's snapshot schedules (`/api/v1/schedules`): list (with the next run and
//! the last), add, remove, and run one now. The schedules themselves, their book and
//! their thread are `schedules.rs`.

use crate::api::{blocking, ApiError, ApiResult, Body, Params, Shared};
use crate::schedules::{self, NewSchedule, ScheduleRun, ScheduleStatus};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(crate) struct ScheduleFilter {
    /// The schedules of this dataset only.
    dataset: Option<String>,
}

pub(crate) async fn list(
    State(s): State<Shared>,
    Params(q): Params<ScheduleFilter>,
) -> ApiResult<Vec<ScheduleStatus>> {
    blocking(move || {
        let now = crate::replication::unix_now();
        Ok(s.schedules
            .list(now)
            .into_iter()
            .filter(|x| q.dataset.as_ref().is_none_or(|d| *d == x.schedule.dataset))
            .collect())
    })
    .await
}

pub(crate) async fn add(
    State(s): State<Shared>,
    Body(new): Body<NewSchedule>,
) -> Result<(StatusCode, Json<ScheduleStatus>), ApiError> {
    let status = blocking(move || {
        if new.dataset.contains('@') {
            return Err(ApiError::bad(format!(
                "'{}': a schedule snapshots a dataset, not a snapshot",
                new.dataset
            )));
        }
        // The dataset must exist (a filesystem or a volume).
        s.datasets_of(&new.dataset)?.info(&new.dataset)?;
        let added = s.schedules.add(&new)?;
        let now = crate::replication::unix_now();
        s.schedules
            .get(added.id, now)
            .ok_or_else(|| ApiError::not_found(format!("schedule {} vanished", added.id)))
    })
    .await?;
    Ok((StatusCode::CREATED, status))
}

fn schedule_id(id: &str) -> Result<u64, ApiError> {
    id.parse()
        .map_err(|_| ApiError::bad(format!("'{id}' is not a schedule id (a number)")))
}

pub(crate) async fn remove(
    State(s): State<Shared>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = schedule_id(&id)?;
    blocking(move || Ok(s.schedules.remove(id)?))
        .await
        .map(|_| StatusCode::NO_CONTENT)
}

/// Takes the schedule's snapshot now and prunes, as its next run would; answers the
/// run (`ok` false with the error when it failed, as the scheduler records it).
pub(crate) async fn run(State(s): State<Shared>, Path(id): Path<String>) -> ApiResult<ScheduleRun> {
    let id = schedule_id(&id)?;
    blocking(move || Ok(schedules::run_now(&s, id, crate::replication::unix_now())?)).await
}
