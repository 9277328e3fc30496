//! Who may use the admin API and the browser UI.
//!
//! Login is required when the API listens on anything but loopback, or when
//! `[api] login = "required"`. A request is let in with either
//! - the session cookie (`shoal_session`) that `POST /api/v1/login` sets after the
//!   right password, or the same token as `Authorization: Bearer TOKEN`; sessions live
//!   in memory, end after 12 hours without use, and at most `MAX_SESSIONS` are kept
//!   (the least recently used goes first);
//! - the daemon's local token, `api-token` in the state directory (32 random bytes,
//!   hex, mode 0600, made anew at every start): root's CLI on the appliance and a
//!   local Prometheus read it, as `Authorization: Bearer TOKEN`.
//!
//! The password is kept in the state directory as `api-password`, an Argon2id hash in
//! the PHC string format, written by `shoal passwd` (atomically: a crash leaves the
//! old or the new hash). It is read at every login, so a change applies at once.
//!
//! What is always open: the UI's static assets (they hold no data),
//! `GET /api/v1/session` (so the UI knows to show its login form) and the login and
//! logout calls themselves. Tokens are compared in constant time.

use crate::api::ApiError;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const COOKIE: &str = "shoal_session";
pub const PASSWORD_FILE: &str = "api-password";
pub const TOKEN_FILE: &str = "api-token";
const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
const MAX_SESSIONS: usize = 1024;

pub struct Auth {
    required: bool,
    /// Set the cookie's Secure attribute (the API speaks HTTPS).
    secure: bool,
    state_dir: PathBuf,
    local_token: String,
    /// Session token to its last use.
    sessions: Mutex<HashMap<String, Instant>>,
}

/// A new token: 32 random bytes in hex.
fn new_token() -> std::io::Result<String> {
    Ok(crate::random_bytes::<32>()?
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect())
}

/// Equal in time independent of where the first difference is.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Hashes `password` into the state directory's password file.
pub fn set_password(state_dir: &Path, password: &str) -> crate::Result<()> {
    if password.chars().count() < 8 {
        return Err(crate::ServerError::Config(
            "a password needs at least 8 characters".into(),
        ));
    }
    let salt = crate::random_bytes::<16>()
        .map_err(|e| crate::ServerError::Io("random bytes for the password salt".into(), e))?;
    let salt = SaltString::encode_b64(&salt).expect("16 bytes is a valid salt");
    let hash = Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| crate::ServerError::Config(format!("hashing the password: {e}")))?
        .to_string();
    crate::write_atomically(
        &state_dir.join(PASSWORD_FILE),
        format!("{hash}\n").as_bytes(),
        0o600,
    )
}

/// Whether a password has been set.
pub fn password_set(state_dir: &Path) -> bool {
    state_dir.join(PASSWORD_FILE).exists()
}

/// The running daemon's local token, for the CLI.
pub fn local_token(state_dir: &Path) -> Option<String> {
    let t = std::fs::read_to_string(state_dir.join(TOKEN_FILE)).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

impl Auth {
    /// Makes the local token. `required` and no password set is refused: nobody could
    /// log in to the UI.
    pub fn start(state_dir: &Path, required: bool, secure: bool) -> crate::Result<Auth> {
        if required && !password_set(state_dir) {
            return Err(crate::ServerError::Config(format!(
                "the admin API requires a login (it listens beyond loopback, or [api] login \
                 = \"required\") and no password is set: run `shoal passwd` first (it \
                 writes {})",
                state_dir.join(PASSWORD_FILE).display()
            )));
        }
        let local_token = new_token()
            .map_err(|e| crate::ServerError::Io("random bytes for the API token".into(), e))?;
        crate::write_atomically(
            &state_dir.join(TOKEN_FILE),
            format!("{local_token}\n").as_bytes(),
            0o600,
        )?;
        Ok(Auth {
            required,
            secure,
            state_dir: state_dir.to_path_buf(),
            local_token,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    pub fn required(&self) -> bool {
        self.required
    }

    /// Whether the API speaks HTTPS.
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// The token a request carries, from its Authorization header or its cookie.
    fn token_of(headers: &HeaderMap) -> Option<&str> {
        if let Some(v) = headers.get(header::AUTHORIZATION) {
            return v.to_str().ok()?.strip_prefix("Bearer ").map(str::trim);
        }
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
    }

    /// Whether the request's token opens the API (touching its session).
    pub fn authenticated(&self, headers: &HeaderMap) -> bool {
        let Some(token) = Self::token_of(headers) else {
            return false;
        };
        if same(token, &self.local_token) {
            return true;
        }
        let mut sessions = self.sessions.lock().unwrap();
        let now = Instant::now();
        sessions.retain(|_, used| now.duration_since(*used) < SESSION_IDLE);
        // A lookup by the token itself would leak its prefix through timing.
        let found = sessions.keys().find(|k| same(k, token)).cloned();
        match found {
            Some(k) => {
                sessions.insert(k, now);
                true
            }
            None => false,
        }
    }

    /// Checks `password` against the stored hash; on success opens a session.
    pub fn login(&self, password: &str) -> Result<String, ApiError> {
        let stored = std::fs::read_to_string(self.state_dir.join(PASSWORD_FILE)).map_err(|_| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "no password is set on this appliance: run `shoal passwd` on it",
            )
        })?;
        let hash = PasswordHash::new(stored.trim()).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the stored password hash is unreadable ({e}): set it again with `shoal passwd`"),
            )
        })?;
        if Argon2::default()
            .verify_password(password.as_bytes(), &hash)
            .is_err()
        {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "wrong password"));
        }
        let token = new_token().map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("random bytes: {e}"),
            )
        })?;
        let mut sessions = self.sessions.lock().unwrap();
        if sessions.len() >= MAX_SESSIONS {
            if let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, used)| **used)
                .map(|(k, _)| k.clone())
            {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(token.clone(), Instant::now());
        Ok(token)
    }

    pub fn logout(&self, headers: &HeaderMap) {
        if let Some(token) = Self::token_of(headers) {
            self.sessions.lock().unwrap().retain(|k, _| !same(k, token));
        }
    }

    /// The Set-Cookie value for a new session (or, with `None`, one that ends it).
    pub fn cookie(&self, token: Option<&str>) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        match token {
            Some(t) => format!("{COOKIE}={t}; Path=/; HttpOnly; SameSite=Strict{secure}"),
            None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
        }
    }
}

/// Paths anyone may reach: the UI's assets, the session probe, login and logout.
fn open_path(path: &str) -> bool {
    path == "/"
        || path.starts_with("/ui/")
        // Checked by its handlers against the replication credentials instead.
        || path.starts_with("/api/v1/replication/incoming/")
        || matches!(
            path,
            "/api/v1/session" | "/api/v1/login" | "/api/v1/logout" | "/favicon.ico"
        )
}

/// The middleware in front of every route.
pub async fn guard(State(s): State<crate::api::Shared>, req: Request, next: Next) -> Response {
    if !s.auth.required() || open_path(req.uri().path()) || s.auth.authenticated(req.headers()) {
        return next.run(req).await;
    }
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "log in first: POST /api/v1/login, or send Authorization: Bearer TOKEN",
    )
    .into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"shoal\""),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, value.parse().unwrap());
        h
    }

    #[test]
    fn passwords_sessions_and_tokens() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Auth::start(dir.path(), true, false).is_err());
        assert!(set_password(dir.path(), "short").is_err());
        set_password(dir.path(), "correct horse").unwrap();
        let auth = Auth::start(dir.path(), true, false).unwrap();
        assert_eq!(auth.login("wrong horse").unwrap_err().status(), 401);
        let token = auth.login("correct horse").unwrap();
        assert!(auth.authenticated(&headers(header::COOKIE, &format!("a=b; {COOKIE}={token}"))));
        assert!(auth.authenticated(&headers(header::AUTHORIZATION, &format!("Bearer {token}"))));
        assert!(!auth.authenticated(&headers(header::COOKIE, &format!("{COOKIE}=x{token}"))));
        assert!(!auth.authenticated(&HeaderMap::new()));
        let local = local_token(dir.path()).unwrap();
        assert!(auth.authenticated(&headers(header::AUTHORIZATION, &format!("Bearer {local}"))));
        auth.logout(&headers(header::COOKIE, &format!("{COOKIE}={token}")));
        assert!(!auth.authenticated(&headers(header::COOKIE, &format!("{COOKIE}={token}"))));
        // A new password applies at the next login.
        set_password(dir.path(), "battery staple").unwrap();
        assert!(auth.login("correct horse").is_err());
        assert!(auth.login("battery staple").is_ok());
        assert!(auth.cookie(Some("t")).contains("HttpOnly"));
    }
}
