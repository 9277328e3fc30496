//! The admin API of replication (behind the API's login like every admin call):
//! - `GET /replication`: targets (never their credentials), actions with progress,
//!   lag and history, credential names, the replicas held here;
//! - `POST /replication/credentials` `{name}` → `{name, token}` (the token is shown
//!   this once), `DELETE /replication/credentials/{name}`;
//! - `POST /replication/targets` `{name, address, credential, certificate?}`,
//!   `DELETE /replication/targets/{name}`;
//! - `POST /replication/actions` `{filesystem, target, remote?, interval_seconds?,
//!   continuous?, keep_local?, keep_remote?, bandwidth?}`, `DELETE
//!   /replication/actions/{id}`, `POST /replication/actions/{id}/run` (answers when
//!   the run ends, with its record);
//! - `POST /replication/promote/{fs}`: a replica becomes an ordinary writable
//!   filesystem; `POST /replication/demote/{fs}`: an ordinary one becomes a read-only
//!   replica that the next stream (from any credential) may overwrite from its newest
//!   common snapshot: the reverse direction after a failover.

use super::{check_label, Action, ActionStatus, Incoming, RunRecord, Target, TargetInfo};
use crate::api::{run_blocking as blocking, ApiError, Body, Shared};
use crate::ServerError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Overview {
    pub targets: Vec<TargetInfo>,
    pub actions: Vec<ActionStatus>,
    pub credentials: Vec<CredentialInfo>,
    /// Filesystems held here as replicas.
    pub incoming: BTreeMap<String, Incoming>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CredentialInfo {
    pub name: String,
    pub created_unix: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewCredential {
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatedCredential {
    pub name: String,
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewAction {
    pub filesystem: String,
    pub target: String,
    /// The filesystem on the target; the same name by default.
    pub remote: Option<String>,
    pub interval_seconds: Option<u64>,
    pub continuous: Option<bool>,
    pub keep_local: Option<u32>,
    pub keep_remote: Option<u32>,
    /// Bytes per second; 0 or absent = unlimited.
    pub bandwidth: Option<u64>,
    /// Alert past this lag in seconds; 0 = never; absent = the default rule
    /// (`Action::alert_lag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_lag_seconds: Option<u64>,
    /// Run after each snapshot a snapshot schedule takes of the filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_schedules: Option<bool>,
}

/// Replication snapshots kept on each side unless told otherwise.
pub const DEFAULT_KEEP: u32 = 3;

pub async fn overview(State(s): State<Shared>) -> Json<Overview> {
    Json(overview_of(&s))
}

pub(crate) fn overview_of(s: &Shared) -> Overview {
    let actions = s.replication.statuses();
    s.replication.read(|b| Overview {
        targets: b.targets.values().map(TargetInfo::from).collect(),
        actions,
        credentials: b
            .credentials
            .iter()
            .map(|(n, c)| CredentialInfo {
                name: n.clone(),
                created_unix: c.created_unix,
            })
            .collect(),
        incoming: b.incoming.clone(),
    })
}

pub async fn create_credential(
    State(s): State<Shared>,
    Body(c): Body<NewCredential>,
) -> Result<(StatusCode, Json<CreatedCredential>), ApiError> {
    let token = s.replication.create_credential(&c.name)?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedCredential {
            name: c.name,
            token,
        }),
    ))
}

pub async fn delete_credential(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.replication.change(|b| {
        b.credentials
            .remove(&name)
            .map(|_| ())
            .ok_or_else(|| ServerError::NotFound(format!("no credential named '{name}'")))
    })?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn add_target(
    State(s): State<Shared>,
    Body(t): Body<Target>,
) -> Result<(StatusCode, Json<TargetInfo>), ApiError> {
    check_label("target", &t.name)?;
    let port_ok = t
        .address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Err(ApiError::bad(format!(
            "address '{}': host:port of the target's admin API",
            t.address
        )));
    }
    if t.credential.trim().is_empty() {
        return Err(ApiError::bad(
            "a target needs the credential its operator made",
        ));
    }
    if let Some(pem) = &t.certificate {
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(ApiError::bad("certificate: a PEM certificate is expected"));
        }
    }
    let info = TargetInfo::from(&t);
    s.replication.change(|b| {
        if b.targets.contains_key(&t.name) {
            return Err(ServerError::Conflict(format!(
                "a target named '{}' exists",
                t.name
            )));
        }
        b.targets.insert(t.name.clone(), t);
        Ok(())
    })?;
    Ok((StatusCode::CREATED, Json(info)))
}

pub async fn delete_target(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.replication.change(|b| {
        if let Some(a) = b.actions.values().find(|a| a.target == name) {
            return Err(ServerError::Conflict(format!(
                "action {} replicates {} to '{name}': remove it first",
                a.id, a.filesystem
            )));
        }
        b.targets
            .remove(&name)
            .map(|_| ())
            .ok_or_else(|| ServerError::NotFound(format!("no target named '{name}'")))
    })?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn add_action(
    State(s): State<Shared>,
    Body(n): Body<NewAction>,
) -> Result<(StatusCode, Json<Action>), ApiError> {
    if n.filesystem.contains('@') || !n.filesystem.contains('/') {
        return Err(ApiError::bad(format!(
            "'{}': replicate a filesystem (pool/fs)",
            n.filesystem
        )));
    }
    let remote = n.remote.clone().unwrap_or_else(|| n.filesystem.clone());
    if remote.contains('@') || !remote.contains('/') {
        return Err(ApiError::bad(format!(
            "remote '{remote}': a filesystem below a pool's own (pool/fs)"
        )));
    }
    let keep_local = n.keep_local.unwrap_or(DEFAULT_KEEP);
    let keep_remote = n.keep_remote.unwrap_or(DEFAULT_KEEP);
    if keep_local == 0 || keep_remote == 0 {
        return Err(ApiError::bad(
            "keep_local and keep_remote are at least 1 (the next run's base)",
        ));
    }
    let ds = s.datasets_of(&n.filesystem)?;
    {
        let name = n.filesystem.clone();
        blocking(move || Ok(ds.info(&name)?)).await?;
    }
    let action = s.replication.change(|b| {
        if !b.targets.contains_key(&n.target) {
            return Err(ServerError::NotFound(format!(
                "no target named '{}'",
                n.target
            )));
        }
        if let Some(a) = b
            .actions
            .values()
            .find(|a| a.filesystem == n.filesystem && a.target == n.target)
        {
            return Err(ServerError::Conflict(format!(
                "action {} replicates {} to '{}' already",
                a.id, a.filesystem, a.target
            )));
        }
        b.next_action += 1;
        let a = Action {
            id: b.next_action,
            filesystem: n.filesystem.clone(),
            target: n.target.clone(),
            remote,
            interval_seconds: n.interval_seconds.unwrap_or(0),
            continuous: n.continuous.unwrap_or(false),
            keep_local,
            keep_remote,
            bandwidth: n.bandwidth.unwrap_or(0),
            alert_lag_seconds: n.alert_lag_seconds,
            follow_schedules: n.follow_schedules.unwrap_or(false),
        };
        b.actions.insert(a.id, a.clone());
        Ok(a)
    })?;
    Ok((StatusCode::CREATED, Json(action)))
}

/// An action id from the path, or a JSON 400.
fn action_id(id: &str) -> Result<u64, ApiError> {
    id.parse()
        .map_err(|_| ApiError::bad(format!("'{id}' is not an action id (a number)")))
}

pub async fn delete_action(
    State(s): State<Shared>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = action_id(&id)?;
    let mut removed = None;
    s.replication.change(|b| {
        // Checked with the book held: a run claimed after this reads the book first
        // and finds the action gone, so it never holds a snapshot for it.
        if s.replication.running.lock().unwrap().contains_key(&id) {
            return Err(ServerError::Conflict(format!(
                "action {id} is running: remove it when the run ends"
            )));
        }
        b.history.remove(&id);
        removed = b.actions.remove(&id);
        removed
            .as_ref()
            .map(|_| ())
            .ok_or_else(|| ServerError::NotFound(format!("no replication action {id}")))
    })?;
    // Its base is no longer needed here.
    let filesystem = removed.map(|a| a.filesystem).unwrap_or_default();
    blocking(move || {
        if let Ok(ds) = s.datasets_of(&filesystem) {
            super::release_all_but(&ds, &filesystem, &super::action_hold_tag(id), None).map_err(
                |e| {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("action {id} removed; releasing its holds: {e}"),
                    )
                },
            )?;
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn run_action(
    State(s): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<RunRecord>, ApiError> {
    let id = action_id(&id)?;
    if s.replication.read(|b| !b.actions.contains_key(&id)) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no replication action {id}"),
        ));
    }
    let live = s.replication.claim(id).ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            format!("action {id} is running already"),
        )
    })?;
    let s2 = s.clone();
    blocking(move || Ok(super::sender::run_claimed(&s2, id, live, false)))
        .await
        .map(Json)
}

pub async fn promote(
    State(s): State<Shared>,
    Path(dataset): Path<String>,
) -> Result<Json<Overview>, ApiError> {
    if s.replication.read(|b| !b.incoming.contains_key(&dataset)) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{dataset} is not a replica on this appliance"),
        ));
    }
    let ds = s.datasets_of(&dataset)?;
    let s2 = s.clone();
    blocking(move || {
        if !s2.replication.claim_receive(&dataset) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("a stream is being received into {dataset}: promote it after"),
            ));
        }
        let done = (|| {
            ds.set(&dataset, "readonly", None)?;
            ds.pool().sync()?;
            s2.replication.change(|b| {
                b.incoming.remove(&dataset);
                Ok(())
            })?;
            Ok::<_, ApiError>(())
        })();
        s2.replication.release_receive(&dataset);
        done
    })
    .await?;
    Ok(Json(overview_of(&s)))
}

pub async fn demote(
    State(s): State<Shared>,
    Path(dataset): Path<String>,
) -> Result<Json<Overview>, ApiError> {
    if dataset.contains('@') || !dataset.contains('/') {
        return Err(ApiError::bad(format!(
            "'{dataset}': only a filesystem below a pool's own can be a replica"
        )));
    }
    let ds = s.datasets_of(&dataset)?;
    let s2 = s.clone();
    blocking(move || {
        ds.info(&dataset)?;
        if s2
            .replication
            .read(|b| b.actions.values().any(|a| a.filesystem == dataset))
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("{dataset} is replicated from here: remove its actions first"),
            ));
        }
        ds.set(&dataset, "readonly", Some("on"))?;
        ds.pool().sync()?;
        s2.replication.change(|b| {
            b.incoming.insert(
                dataset.clone(),
                Incoming {
                    credential: None,
                    last_snapshot: None,
                    last_received_unix: None,
                    resume: None,
                },
            );
            Ok(())
        })?;
        Ok(())
    })
    .await?;
    Ok(Json(overview_of(&s)))
}
