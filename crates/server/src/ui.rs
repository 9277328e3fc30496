//! The browser UI: three static files built from `ui/` (TypeScript, bundled by
//! `npm run build` into `ui/dist/`, which is committed) and compiled into the daemon,
//! so a machine that runs shoal needs no Node.js and no files beside the binary.
//! CI rebuilds `ui/dist/` from source and fails if it differs from the committed one.
//!
//! The UI is a single page with hash routes; the daemon serves `/` and `/ui/*` and
//! nothing else for it. The assets hold no data, so they are served without login.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &[u8] = include_bytes!("../../../ui/dist/index.html");
const APP_JS: &[u8] = include_bytes!("../../../ui/dist/app.js");
const APP_CSS: &[u8] = include_bytes!("../../../ui/dist/app.css");

fn asset(body: &'static [u8], content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Assets change with the daemon; a reload after an upgrade gets the new ones.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

pub async fn index() -> Response {
    let mut r = asset(INDEX_HTML, "text/html; charset=utf-8");
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
             frame-ancestors 'none'",
        ),
    );
    r
}

pub async fn app_js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

pub async fn app_css() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8")
}

pub async fn favicon() -> StatusCode {
    StatusCode::NO_CONTENT
}
