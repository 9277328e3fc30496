//! The admin HTTP API (JSON over HTTP/1.1, axum), described by `docs/openapi.json`:
//! status, pools (status, scrub, check), filesystems (create, list, get, set, inherit,
//! destroy), snapshots (`snapshots_api.rs`), shares and exports. The CLI is
//! a client of it while the daemon runs (`crates/shoal/src/admin.rs`).
//!
//! Every change is committed (`Pool::sync`) before its response, as the CLI commits
//! before it prints, so a 2xx answer means the change is on disk. Pool work runs on
//! tokio's blocking threads, never on the threads that serve HTTP. Errors are
//! `{"error": "..."}` with 400 (bad request), 404 (no such thing), 409 (exists, busy,
//! or in a state that forbids it) or 500.
//!
//! The API listens on loopback by default. Listening beyond it (or `[api] login =
//! "required"`) makes every call but the login itself need a session or a token
//! (`auth.rs`); with `[api] tls_cert` and `tls_key` it speaks HTTPS only.

use crate::replication::admin_api as rep;
use crate::snapshots_api as snap;
pub use crate::snapshots_api::{HoldRequest, RollbackRequest, SnapshotName};
use crate::{DaemonState, ServerError};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

pub type Shared = Arc<DaemonState>;

/// The routes of `docs/openapi.json`, over the daemon's state.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/api/v1/status", get(status))
        .route(
            "/api/v1/pools",
            get(pools).post(crate::pools_admin::create_pool),
        )
        .route(
            "/api/v1/pools/import",
            post(crate::pools_admin::import_pool),
        )
        .route(
            "/api/v1/pools/{pool}",
            get(pool).delete(crate::pools_admin::destroy_pool),
        )
        .route(
            "/api/v1/pools/{pool}/export",
            post(crate::pools_admin::export_pool),
        )
        .route(
            "/api/v1/pools/{pool}/replace",
            post(crate::pools_admin::replace_device),
        )
        .route(
            "/api/v1/pools/{pool}/clear",
            post(crate::pools_admin::clear_device),
        )
        .route(
            "/api/v1/pools/{pool}/spares",
            post(crate::pools_admin::add_spare),
        )
        .route(
            "/api/v1/pools/{pool}/add",
            post(crate::pool_devices::add_devices),
        )
        .route(
            "/api/v1/pools/{pool}/remove",
            post(crate::pool_devices::remove_device),
        )
        .route(
            "/api/v1/pools/{pool}/attach",
            post(crate::pool_devices::attach_device),
        )
        .route(
            "/api/v1/pools/{pool}/detach",
            post(crate::pool_devices::detach_device),
        )
        .route(
            "/api/v1/pools/{pool}/offline",
            post(crate::pool_devices::offline_device),
        )
        .route(
            "/api/v1/pools/{pool}/online",
            post(crate::pool_devices::online_device),
        )
        .route(
            "/api/v1/pools/{pool}/spares/remove",
            post(crate::pools_admin::remove_spare),
        )
        .route("/api/v1/operations", get(crate::pools_admin::operations))
        .route(
            "/api/v1/mounts",
            get(crate::mounts::list).post(crate::mounts::mount),
        )
        .route("/api/v1/mounts/unmount", post(crate::mounts::unmount))
        .route("/api/v1/devices", get(crate::pools_admin::candidates))
        .route("/api/v1/plan", get(crate::pools_admin::plan))
        .route("/api/v1/pools/{pool}/scrub", post(scrub))
        .route("/api/v1/pools/{pool}/check", get(check))
        .route("/api/v1/pools/{pool}/inject", post(inject))
        .route(
            "/api/v1/filesystems",
            get(filesystems).post(create_filesystem),
        )
        .route(
            "/api/v1/filesystems/{*name}",
            get(filesystem)
                .patch(set_properties)
                .delete(destroy_filesystem),
        )
        .route(
            "/api/v1/volumes",
            get(crate::volumes_api::list).post(crate::volumes_api::create),
        )
        .route(
            "/api/v1/volumes/{*name}",
            get(crate::volumes_api::get)
                .patch(crate::volumes_api::set)
                .delete(crate::volumes_api::destroy),
        )
        .route(
            "/api/v1/iscsi/targets",
            get(crate::iscsi_api::list).post(crate::iscsi_api::create),
        )
        .route(
            "/api/v1/iscsi/discovery",
            get(crate::iscsi_api::discovery).put(crate::iscsi_api::set_discovery),
        )
        .route(
            "/api/v1/iscsi/targets/{name}",
            get(crate::iscsi_api::get).delete(crate::iscsi_api::destroy),
        )
        .route("/api/v1/snapshots", get(snap::list).post(snap::create))
        .route("/api/v1/snapshots/{*name}", delete(snap::destroy))
        .route("/api/v1/rollback", post(snap::rollback))
        .route(
            "/api/v1/holds",
            get(snap::holds).post(snap::hold).delete(snap::release),
        )
        .route(
            "/api/v1/schedules",
            get(crate::schedules_api::list).post(crate::schedules_api::add),
        )
        .route(
            "/api/v1/schedules/{id}",
            delete(crate::schedules_api::remove),
        )
        .route(
            "/api/v1/schedules/{id}/run",
            post(crate::schedules_api::run),
        )
        .route("/api/v1/send/{*snapshot}", get(crate::streams_api::send))
        .route(
            "/api/v1/send-resume/{*filesystem}",
            get(crate::streams_api::send_resumed),
        )
        .route(
            "/api/v1/receive/{*dataset}",
            post(crate::streams_api::receive).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/api/v1/replication", get(rep::overview))
        .route(
            "/api/v1/replication/credentials",
            post(rep::create_credential),
        )
        .route(
            "/api/v1/replication/credentials/{name}",
            delete(rep::delete_credential),
        )
        .route("/api/v1/replication/targets", post(rep::add_target))
        .route(
            "/api/v1/replication/targets/{name}",
            delete(rep::delete_target),
        )
        .route("/api/v1/replication/actions", post(rep::add_action))
        .route(
            "/api/v1/replication/actions/{id}",
            delete(rep::delete_action),
        )
        .route(
            "/api/v1/replication/actions/{id}/run",
            post(rep::run_action),
        )
        .route("/api/v1/replication/promote/{*dataset}", post(rep::promote))
        .route("/api/v1/replication/demote/{*dataset}", post(rep::demote))
        .route(
            "/api/v1/replication/incoming/{*dataset}",
            get(crate::replication::incoming::state).post(crate::replication::incoming::receive),
        )
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/alerts/acknowledge", post(acknowledge_alerts))
        .route("/api/v1/shares", get(shares))
        .route(
            "/api/v1/shares/{*dataset}",
            axum::routing::put(put_share).delete(delete_share),
        )
        .route("/api/v1/exports", get(exports))
        .route(
            "/api/v1/analytics/statistics",
            get(crate::analytics_api::statistics),
        )
        .route(
            "/api/v1/analytics/datasets",
            get(crate::analytics_api::datasets)
                .post(crate::analytics_api::enable)
                .delete(crate::analytics_api::disable),
        )
        .route("/api/v1/analytics/data", get(crate::analytics_api::data))
        .route(
            "/api/v1/analytics/status",
            get(crate::analytics_api::status),
        )
        .route(
            "/api/v1/analytics/worksheets",
            get(crate::analytics_api::worksheets),
        )
        .route(
            "/api/v1/analytics/worksheets/{name}",
            get(crate::analytics_api::worksheet)
                .put(crate::analytics_api::save_worksheet)
                .delete(crate::analytics_api::delete_worksheet),
        )
        .route("/metrics", get(crate::analytics_api::metrics))
        .route("/api/v1/session", get(session))
        .route("/api/v1/login", post(login))
        .route("/api/v1/logout", post(logout))
        .route("/", get(crate::ui::index))
        .route("/ui/app.js", get(crate::ui::app_js))
        .route("/ui/app.css", get(crate::ui::app_css))
        .route("/favicon.ico", get(crate::ui::favicon))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such API path") })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::guard,
        ))
        .with_state(state)
}

/// An error answer: a status and a message for people.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    #[cfg(test)]
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body {
            error: String,
        }
        (
            self.status,
            Json(Body {
                error: self.message,
            }),
        )
            .into_response()
    }
}

impl From<fs::FsError> for ApiError {
    fn from(e: fs::FsError) -> ApiError {
        use fs::FsError::*;
        let status = match &e {
            NotFound(_) => StatusCode::NOT_FOUND,
            Exists | NotEmpty | Busy(_) => StatusCode::CONFLICT,
            Invalid(_) | WrongType { .. } | NameTooLong => StatusCode::BAD_REQUEST,
            ReadOnly | Access | Perm => StatusCode::CONFLICT,
            NoSpace | Quota => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<pool::PoolError> for ApiError {
    fn from(e: pool::PoolError) -> ApiError {
        use pool::PoolError::*;
        let status = match &e {
            NotFound(_) => StatusCode::NOT_FOUND,
            Exists(_) | ReadOnly(_) | Busy(_) => StatusCode::CONFLICT,
            InvalidArgument(_) => StatusCode::BAD_REQUEST,
            NoSpace => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> ApiError {
        match e {
            ServerError::Fs(e) => e.into(),
            ServerError::Pool(e) => e.into(),
            ServerError::Config(m) => ApiError::bad(m),
            ServerError::NotFound(m) => ApiError::not_found(m),
            ServerError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
            e @ ServerError::Io(..) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
        }
    }
}

pub(crate) type ApiResult<T> = Result<Json<T>, ApiError>;

/// A JSON request body whose rejections (not JSON, wrong shape, wrong content type)
/// are answered like every other error: 400 with `{"error": ...}`.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) => Err(ApiError::bad(e.body_text())),
        }
    }
}

/// Query parameters whose rejections (missing or malformed) are answered like every
/// other error: 400 with `{"error": ...}`.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequestParts<S>
    for Params<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Params(v)),
            Err(e) => Err(ApiError::bad(e.body_text())),
        }
    }
}

/// Runs pool work on a blocking thread; its answer as JSON.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> ApiResult<T> {
    run_blocking(f).await.map(Json)
}

/// Runs pool work on a blocking thread (the one way every handler leaves the runtime).
pub(crate) async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the request failed inside the daemon: {e}"),
        )
    })?
}

impl DaemonState {
    pub(crate) fn datasets_of(&self, name: &str) -> Result<Arc<fs::Datasets>, ApiError> {
        let pool = fs::pool_of(name);
        self.datasets_of_pool(pool)
            .ok_or_else(|| ApiError::not_found(format!("no imported pool named '{pool}'")))
    }

    /// Runs `change` on the datasets of the pool `name` lives in, then commits it, so
    /// the answer goes out only once the change is on disk.
    pub(crate) fn commit<T>(
        &self,
        name: &str,
        change: impl FnOnce(&fs::Datasets) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let ds = self.datasets_of(name)?;
        let r = change(&ds)?;
        ds.pool().sync()?;
        Ok(r)
    }

    /// 409 if `dataset` is shared: destroying or rolling it back would pull it from
    /// under its clients.
    pub(crate) fn refuse_if_shared(&self, dataset: &str, what: &str) -> Result<(), ApiError> {
        if self.service.is_shared(dataset) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("{dataset} is shared over NFS: unshare it {what}"),
            ));
        }
        Ok(())
    }

    pub(crate) fn pool(&self, name: &str) -> Result<Arc<pool::Pool>, ApiError> {
        self.pools()
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ApiError::not_found(format!("no imported pool named '{name}'")))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    pub started_unix: u64,
    pub nfs: Vec<String>,
    /// Where the portmapper answers, "off", or why it does not answer.
    #[serde(default)]
    pub portmapper: String,
    /// NFSv3 locking (NLM) and the status monitor.
    #[serde(default)]
    pub nlm: Option<nfs::nlm::NlmStatus>,
    /// NFSv4 clients and what they hold.
    #[serde(default)]
    pub nfs4: Option<nfs::Nfs4Status>,
    pub api: String,
    pub pools: Vec<PoolSummary>,
    pub shares: Vec<nfs::ShareInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolSummary {
    pub name: String,
    pub health: String,
    pub capacity_bytes: u64,
    pub allocated_bytes: u64,
    pub filesystems: Vec<FilesystemSummary>,
}

/// What a storage engineer checks first about a filesystem: where its data goes
/// and whether synchronous writes are really synchronous.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FilesystemSummary {
    pub name: String,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub sync: String,
    pub compression: String,
    pub recordsize: String,
    pub shared: bool,
}

async fn status(State(s): State<Shared>) -> ApiResult<Status> {
    blocking(move || {
        let shares = s.service.shares();
        let mut pools = Vec::new();
        for p in s.pools() {
            let st = p.status();
            let Some(ds) = s.datasets_of_pool(&p.name) else {
                continue; // exported meanwhile
            };
            let list = ds.list()?;
            let filesystems = list
                .iter()
                .map(|d| {
                    let prop = |name| d.prop(name).unwrap_or("");
                    FilesystemSummary {
                        name: d.name.clone(),
                        used_bytes: prop("used").parse().unwrap_or(0),
                        available_bytes: prop("available").parse().unwrap_or(0),
                        sync: prop("sync").to_string(),
                        compression: prop("compression").to_string(),
                        recordsize: prop("recordsize").to_string(),
                        shared: shares.iter().any(|x| x.dataset == d.name),
                    }
                })
                .collect();
            pools.push(PoolSummary {
                name: st.name,
                health: st.health,
                capacity_bytes: st.capacity_bytes,
                allocated_bytes: st.allocated_bytes,
                filesystems,
            });
        }
        Ok(Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            started_unix: s.started_unix,
            nfs: s.nfs_addrs.iter().map(|a| a.to_string()).collect(),
            portmapper: s.portmapper.clone(),
            nlm: Some(s.service.nlm_status()),
            nfs4: Some(s.service.nfs4_status()),
            api: s
                .api_addr
                .lock()
                .unwrap()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            pools,
            shares,
        })
    })
    .await
}

async fn pools(State(s): State<Shared>) -> ApiResult<Vec<pool::pool::PoolStatus>> {
    blocking(move || Ok(s.pools().iter().map(|p| p.status()).collect())).await
}

async fn pool(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<pool::pool::PoolStatus> {
    blocking(move || Ok(s.pool(&name)?.status())).await
}

async fn scrub(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<pool::pool::ScrubSummary> {
    blocking(move || {
        let p = s.pool(&name)?;
        Ok(s.scrub_pool(&p)?)
    })
    .await
}

/// A fault to inject into one device of a pool (`shoal serve --fault-injection`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Injection {
    /// The device's path as pool status shows it.
    pub device: String,
    /// `fail`: every I/O of the device fails; `none`: it works again.
    pub fault: String,
}

async fn inject(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Body(body): Body<Injection>,
) -> ApiResult<Injection> {
    blocking(move || {
        let p = s.pool(&name)?;
        let failed = match body.fault.as_str() {
            "fail" => true,
            "none" => false,
            other => {
                return Err(ApiError::bad(format!(
                    "unknown fault '{other}' (known: fail, none)"
                )))
            }
        };
        if !vdev::fault_injection::enabled() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "fault injection is off: start shoal serve with --fault-injection",
            ));
        }
        let status = p.status();
        // Data, log, cache and spare devices alike.
        let member = status
            .vdevs
            .iter()
            .flat_map(|v| &v.children)
            .chain(&status.log)
            .chain(&status.cache)
            .chain(&status.spares)
            .any(|l| l.path == body.device);
        let injector = vdev::fault_injection::find(&body.device).filter(|_| member);
        let Some(injector) = injector else {
            return Err(ApiError::not_found(format!(
                "pool '{name}' has no device '{}' opened with fault injection",
                body.device
            )));
        };
        injector.set_failed(failed);
        tracing::warn!(pool = %name, device = %body.device, fault = %body.fault, "fault injected");
        Ok(body)
    })
    .await
}

async fn check(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<pool::pool::CheckReport> {
    blocking(move || {
        let p = s.pool(&name)?;
        // Commit first: blocks placed in the open txg are not referenced yet.
        p.sync()?;
        Ok(p.check()?)
    })
    .await
}

#[derive(Debug, Deserialize)]
struct PoolFilter {
    pool: Option<String>,
}

async fn filesystems(
    State(s): State<Shared>,
    Params(q): Params<PoolFilter>,
) -> ApiResult<Vec<fs::DatasetInfo>> {
    let filesystems = |all: Vec<fs::DatasetInfo>| {
        all.into_iter()
            .filter(|d| d.prop("type") != Some("volume"))
            .collect::<Vec<_>>()
    };
    blocking(move || match &q.pool {
        Some(want) => Ok(filesystems(
            s.pool(want).and_then(|p| s.datasets_of(&p.name))?.list()?,
        )),
        None => {
            let mut all = Vec::new();
            for p in s.pools() {
                if let Some(ds) = s.datasets_of_pool(&p.name) {
                    all.extend(filesystems(ds.list()?));
                }
            }
            Ok(all)
        }
    })
    .await
}

/// `POST /filesystems` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewFilesystem {
    pub name: String,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

async fn create_filesystem(
    State(s): State<Shared>,
    Body(body): Body<NewFilesystem>,
) -> Result<(StatusCode, Json<fs::DatasetInfo>), ApiError> {
    let info = blocking(move || {
        let settings: Vec<(String, String)> = body.properties.into_iter().collect();
        s.commit(&body.name, |ds| Ok(ds.create(&body.name, &settings)?))
    })
    .await?;
    Ok((StatusCode::CREATED, info))
}

async fn filesystem(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<fs::DatasetInfo> {
    blocking(move || {
        let ds = s.datasets_of(&name)?;
        crate::volumes_api::require_type(&ds, &name, fs::DatasetType::Filesystem)?;
        Ok(ds.info(&name)?)
    })
    .await
}

/// `PATCH /filesystems/{name}` body: a value sets a property, null inherits it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PropertyChanges {
    pub properties: BTreeMap<String, Option<String>>,
}

async fn set_properties(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Body(body): Body<PropertyChanges>,
) -> ApiResult<fs::DatasetInfo> {
    blocking(move || {
        let changes: Vec<(String, Option<String>)> = body.properties.into_iter().collect();
        s.commit(&name, |ds| {
            crate::volumes_api::require_type(ds, &name, fs::DatasetType::Filesystem)?;
            ds.set_many(&name, &changes)?;
            Ok(ds.info(&name)?)
        })
    })
    .await
}

async fn destroy_filesystem(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    blocking(move || {
        s.refuse_if_shared(&name, "first")?;
        s.commit(&name, |ds| {
            crate::volumes_api::require_type(ds, &name, fs::DatasetType::Filesystem)?;
            Ok(ds.destroy(&name)?)
        })
    })
    .await
    .map(|_| StatusCode::NO_CONTENT)
}

async fn shares(State(s): State<Shared>) -> ApiResult<Vec<nfs::ShareInfo>> {
    Ok(Json(s.service.shares()))
}

/// `PUT /shares/{dataset}` body: export rules as in /etc/exports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShareRules {
    #[serde(default = "crate::config::default_rules")]
    pub rules: String,
}

async fn put_share(
    State(s): State<Shared>,
    Path(dataset): Path<String>,
    Body(body): Body<ShareRules>,
) -> ApiResult<nfs::ShareInfo> {
    blocking(move || {
        s.share(&dataset, &body.rules, true)?;
        s.service
            .shares()
            .into_iter()
            .find(|x| x.dataset == dataset)
            .ok_or_else(|| ApiError::not_found(format!("{dataset} is not shared")))
    })
    .await
}

async fn delete_share(
    State(s): State<Shared>,
    Path(dataset): Path<String>,
) -> Result<StatusCode, ApiError> {
    blocking(move || Ok(s.unshare(&dataset)?))
        .await
        .map(|_| StatusCode::NO_CONTENT)
}

async fn exports(State(s): State<Shared>) -> ApiResult<Vec<nfs::service::ExportInfo>> {
    Ok(Json(s.service.exports()))
}

#[derive(Serialize)]
pub struct Session {
    login_required: bool,
    authenticated: bool,
}

async fn session(State(s): State<Shared>, headers: axum::http::HeaderMap) -> Json<Session> {
    Json(Session {
        login_required: s.auth.required(),
        authenticated: !s.auth.required() || s.auth.authenticated(&headers),
    })
}

#[derive(Deserialize)]
pub struct Login {
    password: String,
}

#[derive(Serialize)]
pub struct LoginAnswer {
    token: String,
}

async fn login(
    State(s): State<Shared>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    Body(req): Body<Login>,
) -> Result<Response, ApiError> {
    let state = s.clone();
    // Argon2 takes tens of milliseconds of CPU: not on the threads serving HTTP.
    let token = match blocking(move || state.auth.login(&req.password)).await {
        Ok(Json(token)) => token,
        Err(e) => {
            tracing::warn!(%peer, error = %e.message(), "admin login refused");
            return Err(e);
        }
    };
    tracing::info!(%peer, "admin login");
    let cookie = s.auth.cookie(Some(&token));
    Ok((
        [(axum::http::header::SET_COOKIE, cookie)],
        Json(LoginAnswer { token }),
    )
        .into_response())
}

async fn logout(State(s): State<Shared>, headers: axum::http::HeaderMap) -> Response {
    s.auth.logout(&headers);
    (
        StatusCode::NO_CONTENT,
        [(axum::http::header::SET_COOKIE, s.auth.cookie(None))],
    )
        .into_response()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlertList {
    /// Alerts not acknowledged yet, of warning or critical severity.
    pub unacknowledged: usize,
    /// Newest first (the last 1000).
    pub alerts: Vec<crate::alerts::Alert>,
}

async fn alerts(State(s): State<Shared>) -> Json<AlertList> {
    let alerts = s.alerts.list();
    Json(AlertList {
        unacknowledged: alerts
            .iter()
            .filter(|a| !a.acknowledged && a.severity >= crate::alerts::Severity::Warning)
            .count(),
        alerts,
    })
}

/// `{"id": N}` acknowledges one alert, `{}` every one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acknowledge {
    pub id: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Acknowledged {
    pub acknowledged: usize,
}

async fn acknowledge_alerts(
    State(s): State<Shared>,
    Body(a): Body<Acknowledge>,
) -> ApiResult<Acknowledged> {
    Ok(Json(Acknowledged {
        acknowledged: s.alerts.acknowledge(a.id)?,
    }))
}
