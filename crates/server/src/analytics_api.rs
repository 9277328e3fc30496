//! The analytics part of the admin API and the Prometheus endpoint.
//!
//! `/api/v1/analytics/statistics` lists what can be measured, `/datasets` enables,
//! lists and removes datasets (drill-downs), `/data` returns a dataset's points over
//! a time range with its average, minimum and maximum per second, `/status` shows
//! dropped and late events, `/worksheets` saves named sets of datasets. `/metrics` is the Prometheus text format: the analytics
//! counters plus each pool's capacity, ARC and intent-log figures, with
//! low-cardinality labels only.

use crate::api::{ApiError, ApiResult, Body, Params, Shared};
use crate::worksheets::{check_name, Worksheet, MAX_DATASETS};
use analytics::{prometheus, AnalyticsError, Resolution, Series, STATISTICS};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use pool::pool::PoolStatus;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

impl From<AnalyticsError> for ApiError {
    fn from(e: AnalyticsError) -> ApiError {
        let status = match &e {
            AnalyticsError::NotEnabled(_) => StatusCode::NOT_FOUND,
            AnalyticsError::BuiltIn(_) | AnalyticsError::TooMany => StatusCode::CONFLICT,
            AnalyticsError::Spec(_) | AnalyticsError::BadRange(_) => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.to_string())
    }
}

#[derive(Serialize)]
pub struct DimensionInfo {
    name: &'static str,
    /// "categorical" (a value per client, file, ...) or "numeric" (heatmap buckets).
    kind: &'static str,
    unit: Option<&'static str>,
}

#[derive(Serialize)]
pub struct StatisticInfo {
    name: &'static str,
    description: &'static str,
    unit: &'static str,
    /// "rate" (events counted: shown per second) or "gauge" (a level read each second).
    kind: &'static str,
    /// Shown value = total / seconds / divisor.
    divisor: u64,
    dimensions: Vec<DimensionInfo>,
}

pub async fn statistics() -> Json<Vec<StatisticInfo>> {
    Json(
        STATISTICS
            .iter()
            .map(|s| StatisticInfo {
                name: s.name,
                description: s.description,
                unit: s.unit,
                kind: if s.gauge { "gauge" } else { "rate" },
                divisor: s.divisor,
                dimensions: s
                    .dims
                    .iter()
                    .map(|d| DimensionInfo {
                        name: d.name(),
                        kind: if d.numeric() {
                            "numeric"
                        } else {
                            "categorical"
                        },
                        unit: d.unit(),
                    })
                    .collect(),
            })
            .collect(),
    )
}

pub async fn datasets(State(s): State<Shared>) -> Json<Vec<analytics::DatasetInfo>> {
    Json(s.analytics.datasets())
}

#[derive(Deserialize)]
pub struct DatasetName {
    name: String,
}

pub async fn enable(
    State(s): State<Shared>,
    Body(req): Body<DatasetName>,
) -> Result<(StatusCode, Json<analytics::DatasetInfo>), ApiError> {
    Ok((StatusCode::CREATED, Json(s.analytics.enable(&req.name)?)))
}

pub async fn disable(
    State(s): State<Shared>,
    Params(q): Params<DatasetName>,
) -> Result<StatusCode, ApiError> {
    s.analytics.disable(&q.name)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub struct DataQuery {
    name: String,
    /// Unix seconds; by default the last `seconds` sealed seconds.
    start: Option<u64>,
    end: Option<u64>,
    /// Length of the default range (60).
    seconds: Option<u64>,
    /// second, minute or hour; by default the finest that reaches back to `start`.
    resolution: Option<String>,
}

pub async fn data(State(s): State<Shared>, Params(q): Params<DataQuery>) -> ApiResult<Series> {
    let resolution = match q.resolution.as_deref() {
        None => None,
        Some(r) => Some(Resolution::parse(r).ok_or_else(|| {
            ApiError::bad(format!(
                "unknown resolution '{r}': use second, minute or hour"
            ))
        })?),
    };
    let end = q.end.unwrap_or_else(|| s.analytics.newest_sealed());
    let span = q.seconds.unwrap_or(60).max(1);
    let start = q.start.unwrap_or(end.saturating_sub(span - 1));
    Ok(Json(s.analytics.query(&q.name, start, end, resolution)?))
}

pub async fn status(State(s): State<Shared>) -> Json<analytics::Status> {
    Json(s.analytics.status())
}

pub async fn worksheets(State(s): State<Shared>) -> Json<Vec<Worksheet>> {
    Json(s.worksheets.list())
}

pub async fn worksheet(State(s): State<Shared>, Path(name): Path<String>) -> ApiResult<Worksheet> {
    Ok(Json(s.worksheets.get(&name)?))
}

#[derive(Deserialize)]
pub struct WorksheetBody {
    datasets: Vec<String>,
}

/// Saves a worksheet after enabling each of its datasets (in their canonical
/// spelling); nothing is saved if one of them cannot be enabled.
pub async fn save_worksheet(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Body(body): Body<WorksheetBody>,
) -> ApiResult<Worksheet> {
    check_name(&name).map_err(ApiError::bad)?;
    if body.datasets.len() > MAX_DATASETS {
        return Err(ApiError::bad(format!(
            "a worksheet holds at most {MAX_DATASETS} datasets"
        )));
    }
    let mut datasets = Vec::new();
    for d in &body.datasets {
        let info = s.analytics.enable(d)?;
        if !datasets.contains(&info.name) {
            datasets.push(info.name);
        }
    }
    Ok(Json(s.worksheets.save(Worksheet { name, datasets })?))
}

/// Forgets a worksheet; its datasets stay enabled until removed on their own.
pub async fn delete_worksheet(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.worksheets.delete(&name)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    let state = s.clone();
    let text = tokio::task::spawn_blocking(move || {
        let mut out = state.analytics.prometheus();
        pool_metrics(&state, &mut out);
        out
    })
    .await
    .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// A pool metric family: name, type, help, and its samples of one pool as
/// (extra labels, value).
type PoolFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PoolStatus) -> Vec<(&'static str, u64)>,
);

const POOL_FAMILIES: &[PoolFamily] = &[
    (
        "shoal_pool_capacity_bytes",
        "gauge",
        "Usable bytes of the pool.",
        |p| vec![("", p.capacity_bytes)],
    ),
    (
        "shoal_pool_allocated_bytes",
        "gauge",
        "Allocated bytes of the pool.",
        |p| vec![("", p.allocated_bytes)],
    ),
    (
        "shoal_pool_txg",
        "gauge",
        "The last committed transaction group.",
        |p| vec![("", p.txg)],
    ),
    (
        "shoal_arc_size_bytes",
        "gauge",
        "Bytes held in the ARC.",
        |p| vec![("", p.arc.size_bytes)],
    ),
    ("shoal_arc_max_bytes", "gauge", "The ARC's bound.", |p| {
        vec![("", p.arc.max_bytes)]
    }),
    (
        "shoal_arc_prefetch_unread_bytes",
        "gauge",
        "Bytes read ahead into the ARC that no reader has asked for yet.",
        |p| vec![("", p.arc.prefetch_unread_bytes)],
    ),
    (
        "shoal_arc_hits_total",
        "counter",
        "ARC lookups that found the block, by demand or prefetch.",
        |p| {
            vec![
                ("kind=\"demand\"", p.arc.demand_hits),
                ("kind=\"prefetch\"", p.arc.prefetch_hits),
            ]
        },
    ),
    (
        "shoal_arc_misses_total",
        "counter",
        "ARC lookups that went to a device, by demand or prefetch.",
        |p| {
            vec![
                ("kind=\"demand\"", p.arc.demand_misses),
                ("kind=\"prefetch\"", p.arc.prefetch_misses),
            ]
        },
    ),
    (
        "shoal_l2arc_capacity_bytes",
        "gauge",
        "Bytes the cache devices (L2ARC) can hold; 0 without cache devices.",
        |p| vec![("", p.l2arc.map_or(0, |l| l.capacity_bytes))],
    ),
    (
        "shoal_l2arc_size_bytes",
        "gauge",
        "Bytes cached on the cache devices.",
        |p| vec![("", p.l2arc.map_or(0, |l| l.size_bytes))],
    ),
    (
        "shoal_l2arc_hits_total",
        "counter",
        "ARC misses the cache devices served.",
        |p| vec![("", p.l2arc.map_or(0, |l| l.hits))],
    ),
    (
        "shoal_l2arc_misses_total",
        "counter",
        "ARC misses the cache devices did not hold.",
        |p| vec![("", p.l2arc.map_or(0, |l| l.misses))],
    ),
    (
        "shoal_intent_log_commits_total",
        "counter",
        "Intent log commits (sync writes made durable).",
        |p| vec![("", p.intent_log.commits)],
    ),
    (
        "shoal_intent_log_written_bytes_total",
        "counter",
        "Bytes written to the intent log.",
        |p| vec![("", p.intent_log.bytes_written)],
    ),
    (
        "shoal_pool_unrecoverable_reads_total",
        "counter",
        "Blocks no copy of which verified.",
        |p| vec![("", p.unrecoverable_reads)],
    ),
];

fn pool_metrics(s: &Shared, out: &mut String) {
    let statuses: Vec<PoolStatus> = s.pools().iter().map(|p| p.status()).collect();
    for (name, kind, help, samples) in POOL_FAMILIES {
        prometheus::header(out, name, kind, help);
        for st in &statuses {
            let pool = prometheus::escape(&st.name);
            for (labels, v) in samples(st) {
                let sep = if labels.is_empty() { "" } else { "," };
                let _ = writeln!(out, "{name}{{pool=\"{pool}\"{sep}{labels}}} {v}");
            }
        }
    }
}
