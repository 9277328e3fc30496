//! The API's iSCSI targets (`/api/v1/iscsi/targets`): list, create, show, destroy;
//! and discovery authentication (`/api/v1/iscsi/discovery`): show, set.
//! A daemon serving no iSCSI (`[iscsi] listen = "off"`, or the standard port taken at
//! start) answers 409. Secrets go in with a create and never come out.

use crate::api::{blocking, ApiError, ApiResult, Body, Shared};
use crate::iscsi_targets::{DiscoveryInfo, DiscoverySpec, IscsiTargets, TargetInfo, TargetSpec};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

fn targets(s: &Shared) -> Result<&IscsiTargets, ApiError> {
    s.iscsi.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "the iSCSI service is off ([iscsi] listen is \"off\", or port 3260 was taken at start)",
        )
    })
}

pub(crate) async fn list(State(s): State<Shared>) -> ApiResult<Vec<TargetInfo>> {
    blocking(move || Ok(targets(&s)?.list())).await
}

pub(crate) async fn create(
    State(s): State<Shared>,
    Body(spec): Body<TargetSpec>,
) -> Result<(StatusCode, Json<TargetInfo>), ApiError> {
    let info = blocking(move || Ok(targets(&s)?.create(&s, spec)?)).await?;
    Ok((StatusCode::CREATED, info))
}

pub(crate) async fn get(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<TargetInfo> {
    blocking(move || Ok(targets(&s)?.info(&name)?)).await
}

pub(crate) async fn destroy(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    blocking(move || {
        targets(&s)?.destroy(&s, &name)?;
        Ok(())
    })
    .await
    .map(|_| StatusCode::NO_CONTENT)
}

pub(crate) async fn discovery(State(s): State<Shared>) -> ApiResult<DiscoveryInfo> {
    blocking(move || Ok(targets(&s)?.discovery())).await
}

pub(crate) async fn set_discovery(
    State(s): State<Shared>,
    Body(spec): Body<DiscoverySpec>,
) -> ApiResult<DiscoveryInfo> {
    blocking(move || Ok(targets(&s)?.set_discovery(spec)?)).await
}

impl crate::DaemonState {
    /// 409 if a target names volume `dataset`: destroying, rolling back or receiving
    /// into it would pull it from under its initiators.
    pub(crate) fn refuse_if_exported(&self, dataset: &str) -> Result<(), ApiError> {
        if let Some(target) = self.iscsi.as_ref().and_then(|i| i.exporting(dataset)) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("{dataset} is a LUN of iSCSI target {target}: destroy the target first"),
            ));
        }
        Ok(())
    }
}
