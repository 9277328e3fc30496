//! The API's volumes (`/api/v1/volumes`): create, list, get, set (a larger `volsize`
//! grows a volume online), destroy. A volume is a dataset (`fs::volume`), so its
//! snapshots, rollback, send and receive go through the same calls as a filesystem's;
//! the filesystem calls refuse a volume and these refuse a filesystem, so each
//! listing shows one kind. Every change is committed before its answer, as in
//! `api.rs`.

use crate::api::{ApiError, ApiResult, Body, Params, PropertyChanges, Shared};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /volumes` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewVolume {
    pub name: String,
    /// A size: bytes, or with K, M, G, T.
    pub volsize: String,
    /// A power of two from 4K to 128K; 16K when absent.
    #[serde(default)]
    pub volblocksize: Option<String>,
    /// No refreservation: space is taken as blocks are written.
    #[serde(default)]
    pub sparse: bool,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PoolFilter {
    pool: Option<String>,
}

fn is_volume(info: &fs::DatasetInfo) -> bool {
    info.prop("type") == Some("volume")
}

/// 400 unless `name` is a dataset of type `want`, saying where the other type is served.
pub(crate) fn require_type(
    ds: &fs::Datasets,
    name: &str,
    want: fs::DatasetType,
) -> Result<(), ApiError> {
    ds.require_type(name, want).map_err(|e| match &e {
        fs::FsError::WrongType { is, .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, format!("{e}: see /api/v1/{is}s"))
        }
        _ => e.into(),
    })
}

/// A thick volume's refreservation that does not fit is a request the pool's state
/// refuses (409, with what to do), not a server fault.
fn no_room(e: fs::FsError, name: &str) -> ApiError {
    match e {
        fs::FsError::NoSpace | fs::FsError::Quota => ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the pool cannot keep the space {name} would reserve ({e}): free some, \
                 or make it sparse"
            ),
        ),
        e => e.into(),
    }
}

fn size(what: &str, text: &str) -> Result<u64, ApiError> {
    fs::props::parse_size(text)
        .filter(|v| *v > 0)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{what} must be a size like 100G, not '{text}'"),
            )
        })
}

pub(crate) async fn list(
    State(s): State<Shared>,
    Params(q): Params<PoolFilter>,
) -> ApiResult<Vec<fs::DatasetInfo>> {
    crate::api::blocking(move || {
        let pools: Vec<String> = match &q.pool {
            Some(want) => vec![s.pool(want)?.name.clone()],
            None => s.pools().iter().map(|p| p.name.clone()).collect(),
        };
        let mut all = Vec::new();
        for p in pools {
            if let Some(ds) = s.datasets_of_pool(&p) {
                all.extend(ds.list()?.into_iter().filter(is_volume));
            }
        }
        Ok(all)
    })
    .await
}

pub(crate) async fn create(
    State(s): State<Shared>,
    Body(body): Body<NewVolume>,
) -> Result<(StatusCode, Json<fs::DatasetInfo>), ApiError> {
    let info = crate::api::blocking(move || {
        let spec = fs::VolumeSpec {
            volsize: size("volsize", &body.volsize)?,
            volblocksize: match &body.volblocksize {
                Some(b) => Some(u32::try_from(size("volblocksize", b)?).map_err(|_| {
                    ApiError::new(StatusCode::BAD_REQUEST, format!("volblocksize {b}"))
                })?),
                None => None,
            },
            sparse: body.sparse,
        };
        let settings: Vec<(String, String)> = body.properties.into_iter().collect();
        s.commit(&body.name, |ds| {
            ds.create_volume(&body.name, &spec, &settings)
                .map_err(|e| no_room(e, &body.name))
        })
    })
    .await?;
    Ok((StatusCode::CREATED, info))
}

pub(crate) async fn get(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<fs::DatasetInfo> {
    crate::api::blocking(move || {
        let ds = s.datasets_of(&name)?;
        require_type(&ds, &name, fs::DatasetType::Volume)?;
        Ok(ds.info(&name)?)
    })
    .await
}

pub(crate) async fn set(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Body(body): Body<PropertyChanges>,
) -> ApiResult<fs::DatasetInfo> {
    crate::api::blocking(move || {
        let changes: Vec<(String, Option<String>)> = body.properties.into_iter().collect();
        s.commit(&name, |ds| {
            require_type(ds, &name, fs::DatasetType::Volume)?;
            ds.set_many(&name, &changes)
                .map_err(|e| no_room(e, &name))?;
            Ok(ds.info(&name)?)
        })
    })
    .await
}

pub(crate) async fn destroy(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    crate::api::blocking(move || {
        s.refuse_if_exported(&name)?;
        s.commit(&name, |ds| {
            require_type(ds, &name, fs::DatasetType::Volume)?;
            Ok(ds.destroy(&name)?)
        })
    })
    .await
    .map(|_| StatusCode::NO_CONTENT)
}
