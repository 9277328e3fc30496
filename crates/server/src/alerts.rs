//! Alerts: what an operator must hear about without watching the status page. A
//! device that faults or comes back, a pool that degrades, faults, is suspended or
//! recovers, checksum errors on a device, a pool above 80% and 95% full, a scrub that
//! finished, a replication or a snapshot schedule that fails or recovers: each becomes an alert with its
//! time, severity and the object it concerns.
//!
//! Alerts are kept in `alerts.json` in the state directory (the newest `KEPT`, written
//! whole: a crash leaves the old or the new list), written to the log, listed by `GET
//! /api/v1/alerts` and `shoal alerts`, shown as a banner and a page in the UI, and
//! delivered to the operator's hooks (`[alerts]` in the config): a command run with
//! the alert as JSON on its standard input, and a webhook that gets it as a JSON POST,
//! retried with backoff. A hook that fails is logged and never holds anything up: each
//! delivery runs on its own thread.
//!
//! Pool conditions are sampled every `SAMPLE_EVERY` by the monitor thread and alerted
//! on change (`observe`, a pure function of the last and the new status, so it is
//! tested without a pool); events the daemon itself causes (a scrub it ran, a
//! replication run) are raised where they happen.

use crate::{write_atomically, Result, ServerError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

pub const ALERTS_FILE: &str = "alerts.json";
/// Alerts kept, newest last.
const KEPT: usize = 1000;
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// Checksum-error alerts per device at most this often.
const CKSUM_QUIET: Duration = Duration::from_secs(60);
/// Webhook deliveries tried at most this many times (1, 2, 4, 8 s apart).
const WEBHOOK_TRIES: u32 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub id: u64,
    pub time_unix: u64,
    pub severity: Severity,
    /// What happened: `device.faulted`, `pool.degraded`, `pool.capacity`, ...
    pub kind: String,
    /// What it concerns: a pool, a device path, a filesystem.
    pub object: String,
    pub message: String,
    #[serde(default)]
    pub acknowledged: bool,
}

/// Where alerts go besides the list (`[alerts]` in the config).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// Run through `sh -c` with the alert as JSON on standard input.
    #[serde(default)]
    pub command: Option<String>,
    /// POSTed the alert as JSON (`http://` or `https://` with the system's roots).
    #[serde(default)]
    pub webhook: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    next_id: u64,
    alerts: VecDeque<Alert>,
}

pub struct Alerts {
    path: PathBuf,
    book: Mutex<Book>,
    hooks: AlertsConfig,
}

/// A condition found by `observe`: (severity, kind, object, message).
pub type Finding = (Severity, &'static str, String, String);

impl Alerts {
    pub fn open(state_dir: &Path, hooks: AlertsConfig) -> Result<Alerts> {
        let path = state_dir.join(ALERTS_FILE);
        let book = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Book::default(),
            Err(e) => return Err(ServerError::Io(format!("reading {}", path.display()), e)),
        };
        Ok(Alerts {
            path,
            book: Mutex::new(book),
            hooks,
        })
    }

    fn save(&self, book: &Book) {
        let bytes = serde_json::to_vec_pretty(book).expect("alerts serialise");
        if let Err(e) = write_atomically(&self.path, &bytes, 0o644) {
            tracing::error!(error = %e, "keeping the alert list");
        }
    }

    /// Records an alert, logs it and hands it to the hooks.
    pub fn raise(
        &self,
        severity: Severity,
        kind: &str,
        object: &str,
        message: impl Into<String>,
    ) -> Alert {
        let alert = {
            let mut book = self.book.lock().unwrap();
            book.next_id += 1;
            let alert = Alert {
                id: book.next_id,
                time_unix: crate::replication::unix_now(),
                severity,
                kind: kind.to_string(),
                object: object.to_string(),
                message: message.into(),
                acknowledged: false,
            };
            book.alerts.push_back(alert.clone());
            while book.alerts.len() > KEPT {
                book.alerts.pop_front();
            }
            self.save(&book);
            alert
        };
        match severity {
            Severity::Critical => {
                tracing::error!(kind, object, "ALERT: {}", alert.message)
            }
            Severity::Warning => tracing::warn!(kind, object, "ALERT: {}", alert.message),
            Severity::Info => tracing::info!(kind, object, "alert: {}", alert.message),
        }
        self.deliver(&alert);
        alert
    }

    fn deliver(&self, alert: &Alert) {
        let json = serde_json::to_string(alert).expect("an alert serialises");
        if let Some(command) = self.hooks.command.clone() {
            let json = json.clone();
            std::thread::spawn(move || run_command(&command, &json));
        }
        if let Some(url) = self.hooks.webhook.clone() {
            std::thread::spawn(move || post_webhook(&url, &json));
        }
    }

    /// Every alert kept, newest first.
    pub fn list(&self) -> Vec<Alert> {
        self.book
            .lock()
            .unwrap()
            .alerts
            .iter()
            .rev()
            .cloned()
            .collect()
    }

    /// Acknowledges alert `id`, or every one; answers how many changed.
    pub fn acknowledge(&self, id: Option<u64>) -> Result<usize> {
        let mut book = self.book.lock().unwrap();
        if let Some(id) = id {
            if !book.alerts.iter().any(|a| a.id == id) {
                return Err(ServerError::NotFound(format!("no alert {id}")));
            }
        }
        let mut changed = 0;
        for a in book.alerts.iter_mut() {
            if !a.acknowledged && id.is_none_or(|id| a.id == id) {
                a.acknowledged = true;
                changed += 1;
            }
        }
        self.save(&book);
        Ok(changed)
    }
}

fn run_command(command: &str, json: &str) {
    use std::io::Write;
    let child = std::process::Command::new("sh")
        .args(["-c", command])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(%command, error = %e, "the alert command did not start");
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(json.as_bytes());
        let _ = stdin.write_all(b"\n");
    }
    match child.wait() {
        Ok(s) if s.success() => {}
        Ok(s) => tracing::warn!(%command, status = %s, "the alert command failed"),
        Err(e) => tracing::warn!(%command, error = %e, "waiting for the alert command"),
    }
}

fn post_webhook(url: &str, json: &str) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut wait = Duration::from_secs(1);
    for attempt in 1..=WEBHOOK_TRIES {
        let sent = agent
            .post(url)
            .header("content-type", "application/json")
            .send(json);
        match sent {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => {
                tracing::warn!(%url, status = %r.status(), attempt, "the alert webhook refused")
            }
            Err(e) => tracing::warn!(%url, error = %e, attempt, "the alert webhook failed"),
        }
        if attempt < WEBHOOK_TRIES {
            std::thread::sleep(wait);
            wait *= 2;
        }
    }
    tracing::error!(%url, "an alert could not be delivered to the webhook");
}

/// What the monitor remembers of one pool between samples. It is kept across restarts
/// (`SEEN_FILE`), so a condition alerted before a restart and still there after it
/// is not alerted (and sent to the hooks) again, and one that began or ended while
/// the daemon was down is.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Seen {
    sampled: bool,
    health: String,
    suspended: bool,
    devices: BTreeMap<String, DeviceSeen>,
    /// 0, 80 or 95: the fullness level last alerted.
    full_level: u8,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct DeviceSeen {
    health: String,
    cksum_errors: u64,
    /// When its last checksum alert was raised: not kept, so after a restart the
    /// first new errors alert at once.
    #[serde(skip)]
    last_cksum_alert: Option<Instant>,
}

/// The monitor's view of every pool, by name, in the state directory.
pub const SEEN_FILE: &str = "alerts-seen.json";

fn load_seen(state_dir: &Path) -> BTreeMap<String, Seen> {
    let path = state_dir.join(SEEN_FILE);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            // Only a repeat of an alert is at stake: start from nothing.
            tracing::warn!(error = %e, path = %path.display(), "ignoring the alert monitor's view");
            BTreeMap::new()
        }),
        Err(_) => BTreeMap::new(),
    }
}

fn save_seen(state_dir: &Path, seen: &BTreeMap<String, Seen>) {
    let bytes = serde_json::to_vec_pretty(seen).expect("the monitor's view serialises");
    if let Err(e) = write_atomically(&state_dir.join(SEEN_FILE), &bytes, 0o644) {
        tracing::error!(error = %e, "keeping the alert monitor's view");
    }
}

/// The level a pool `used` of `capacity` is at, given the level it was at: 95 from
/// 95%, 80 from 80%, and a level is left only 2 points below it, so a pool hovering at
/// the line does not alert every sample.
pub fn fullness_level(used: u64, capacity: u64, was: u8) -> u8 {
    let pct = if capacity == 0 {
        0.0
    } else {
        100.0 * used as f64 / capacity as f64
    };
    let level = if pct >= 95.0 {
        95
    } else if pct >= 80.0 {
        80
    } else {
        0
    };
    if level < was && pct >= was as f64 - 2.0 {
        was
    } else {
        level
    }
}

/// The alerts a new status of a pool calls for, given what was seen before.
pub fn observe(seen: &mut Seen, st: &pool::pool::PoolStatus, now: Instant) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    let first = !seen.sampled;
    seen.sampled = true;
    let pool = st.name.clone();
    if st.health != seen.health {
        let was = std::mem::replace(&mut seen.health, st.health.clone());
        match st.health.as_str() {
            "ONLINE" if !first => out.push((
                Severity::Info,
                "pool.online",
                pool.clone(),
                format!("pool {pool} is ONLINE again (was {was})"),
            )),
            "ONLINE" => {}
            "DEGRADED" => out.push((
                Severity::Warning,
                "pool.degraded",
                pool.clone(),
                format!("pool {pool} is DEGRADED: it serves without full redundancy"),
            )),
            h => out.push((
                Severity::Critical,
                "pool.faulted",
                pool.clone(),
                format!("pool {pool} is {h}: data is unavailable"),
            )),
        }
    }
    let suspended = st.suspended.is_some();
    if suspended != seen.suspended {
        seen.suspended = suspended;
        match &st.suspended {
            Some(why) => out.push((
                Severity::Critical,
                "pool.suspended",
                pool.clone(),
                format!("pool {pool} is suspended: {why}"),
            )),
            None => out.push((
                Severity::Info,
                "pool.resumed",
                pool.clone(),
                format!("pool {pool} commits again"),
            )),
        }
    }
    let leaves = st
        .vdevs
        .iter()
        .flat_map(|t| &t.children)
        .chain(&st.log)
        .chain(&st.cache);
    for leaf in leaves {
        let entry = seen
            .devices
            .entry(leaf.path.clone())
            .or_insert_with(|| DeviceSeen {
                health: "ONLINE".to_string(),
                cksum_errors: leaf.cksum_errors,
                last_cksum_alert: None,
            });
        if leaf.health != entry.health {
            let was = std::mem::replace(&mut entry.health, leaf.health.clone());
            if leaf.health == "RESILVERING" {
                // Being filled (a replacement or a clear): the operation says so, and
                // its end is an alert of its own.
            } else if leaf.health == "ONLINE" {
                // Back after a resilver: said by the resilver's own alert.
                if was != "RESILVERING" {
                    out.push((
                        Severity::Info,
                        "device.online",
                        leaf.path.clone(),
                        format!(
                            "device {} of pool {pool} is ONLINE again (was {was})",
                            leaf.path
                        ),
                    ));
                }
            } else {
                out.push((
                    Severity::Critical,
                    "device.faulted",
                    leaf.path.clone(),
                    format!(
                        "device {} of pool {pool} is {} ({} read, {} write, {} checksum errors)",
                        leaf.path,
                        leaf.health,
                        leaf.read_errors,
                        leaf.write_errors,
                        leaf.cksum_errors
                    ),
                ));
            }
        }
        if leaf.cksum_errors > entry.cksum_errors
            && entry
                .last_cksum_alert
                .is_none_or(|t| now - t >= CKSUM_QUIET)
        {
            out.push((
                Severity::Warning,
                "device.checksum_errors",
                leaf.path.clone(),
                format!(
                    "device {} of pool {pool} returned data that failed its checksum ({} \
                     errors, {} new; repaired from redundancy where there was some)",
                    leaf.path,
                    leaf.cksum_errors,
                    leaf.cksum_errors - entry.cksum_errors
                ),
            ));
            entry.cksum_errors = leaf.cksum_errors;
            entry.last_cksum_alert = Some(now);
        }
    }
    let level = fullness_level(st.allocated_bytes, st.capacity_bytes, seen.full_level);
    if level > seen.full_level {
        out.push((
            if level >= 95 {
                Severity::Critical
            } else {
                Severity::Warning
            },
            "pool.capacity",
            pool.clone(),
            format!(
                "pool {pool} is {:.0}% full ({} of {} bytes allocated)",
                100.0 * st.allocated_bytes as f64 / st.capacity_bytes.max(1) as f64,
                st.allocated_bytes,
                st.capacity_bytes
            ),
        ));
    }
    seen.full_level = level;
    out
}

/// Starts the thread that samples every pool and raises what `observe` finds; it
/// ends when the daemon's state is gone.
pub fn start_monitor(state: Weak<crate::DaemonState>) {
    std::thread::Builder::new()
        .name("alerts".into())
        .spawn(move || {
            let state_dir = match state.upgrade() {
                Some(s) => s.state_dir.clone(),
                None => return,
            };
            let mut seen = load_seen(&state_dir);
            let mut kept = serde_json::to_vec_pretty(&seen).ok();
            loop {
                {
                    let Some(s) = state.upgrade() else { return };
                    let pools = s.pools();
                    // A pool exported or destroyed is forgotten: imported again, its
                    // state is news.
                    seen.retain(|name, _| pools.iter().any(|p| &p.name == name));
                    for p in pools {
                        let st = p.status();
                        let found =
                            observe(seen.entry(p.name.clone()).or_default(), &st, Instant::now());
                        for (severity, kind, object, message) in found {
                            s.alerts.raise(severity, kind, &object, message);
                        }
                        crate::pools_admin::activate_spare(&s, &p, &st);
                        s.scrub_if_due(&p);
                    }
                    // Kept after the alerts are raised: a crash between the two
                    // repeats an alert rather than losing one.
                    let now = serde_json::to_vec_pretty(&seen).ok();
                    if now != kept {
                        save_seen(&state_dir, &seen);
                        kept = now;
                    }
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        })
        .expect("spawn the alert monitor");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(health: &str, devices: &[(&str, &str, u64)], used: u64) -> pool::pool::PoolStatus {
        let leaf = |(path, health, cksum): &(&str, &str, u64)| pool::pool::LeafStatus {
            path: path.to_string(),
            guid: 1,
            health: health.to_string(),
            io_mode: "direct".into(),
            read_errors: 0,
            write_errors: 0,
            cksum_errors: *cksum,
            read_ops: 0,
            write_ops: 0,
            read_bytes: 0,
            write_bytes: 0,
            repaired_bytes: 0,
        };
        pool::pool::PoolStatus {
            name: "tank".into(),
            health: health.into(),
            capacity_bytes: 1000,
            allocated_bytes: used,
            free_bytes: 1000 - used,
            vdevs: vec![pool::pool::TopStatus {
                id: 0,
                layout: "mirror".into(),
                health: health.into(),
                capacity_bytes: 1000,
                free_bytes: 1000 - used,
                children: devices.iter().map(leaf).collect(),
            }],
            ..Default::default()
        }
    }

    fn kinds(f: &[Finding]) -> Vec<&'static str> {
        f.iter().map(|x| x.1).collect()
    }

    #[test]
    fn changes_alert_once_and_steady_states_stay_quiet() {
        let mut seen = Seen::default();
        let t = Instant::now();
        let ok = status("ONLINE", &[("/a", "ONLINE", 0), ("/b", "ONLINE", 0)], 100);
        assert!(
            observe(&mut seen, &ok, t).is_empty(),
            "a healthy pool at start"
        );
        assert!(observe(&mut seen, &ok, t).is_empty());
        let bad = status(
            "DEGRADED",
            &[("/a", "FAULTED", 0), ("/b", "ONLINE", 3)],
            100,
        );
        let f = observe(&mut seen, &bad, t);
        assert_eq!(
            kinds(&f),
            ["pool.degraded", "device.faulted", "device.checksum_errors"]
        );
        assert_eq!(f[1].0, Severity::Critical);
        assert!(observe(&mut seen, &bad, t).is_empty(), "nothing new");
        // More checksum errors within the quiet minute: no new alert; after it, one.
        let worse = status(
            "DEGRADED",
            &[("/a", "FAULTED", 0), ("/b", "ONLINE", 9)],
            100,
        );
        assert!(observe(&mut seen, &worse, t + Duration::from_secs(10)).is_empty());
        let later = status(
            "DEGRADED",
            &[("/a", "FAULTED", 0), ("/b", "ONLINE", 12)],
            100,
        );
        assert_eq!(
            kinds(&observe(&mut seen, &later, t + Duration::from_secs(70))),
            ["device.checksum_errors"]
        );
        let back = status("ONLINE", &[("/a", "ONLINE", 0), ("/b", "ONLINE", 12)], 100);
        assert_eq!(
            kinds(&observe(&mut seen, &back, t)),
            ["pool.online", "device.online"]
        );
        // A pool that is bad when the daemon first sees it alerts at once.
        let mut fresh = Seen::default();
        assert_eq!(
            kinds(&observe(&mut fresh, &bad, t)),
            ["pool.degraded", "device.faulted"]
        );
    }

    #[test]
    fn a_restart_repeats_no_alert_and_misses_no_change() {
        let t = Instant::now();
        let dir = tempfile::tempdir().unwrap();
        let bad = status(
            "DEGRADED",
            &[("/a", "ONLINE", 0), ("/b", "FAULTED", 0)],
            100,
        );
        let mut seen = BTreeMap::new();
        let first = observe(seen.entry("tank".to_string()).or_default(), &bad, t);
        assert_eq!(kinds(&first), ["pool.degraded", "device.faulted"]);
        save_seen(dir.path(), &seen);
        // Still bad after the restart: already said.
        let mut again = load_seen(dir.path());
        assert_eq!(again.len(), 1);
        assert!(observe(again.get_mut("tank").unwrap(), &bad, t).is_empty());
        // Repaired while the daemon was down: that is news.
        let mut again = load_seen(dir.path());
        let good = status("ONLINE", &[("/a", "ONLINE", 0), ("/b", "ONLINE", 0)], 100);
        assert_eq!(
            kinds(&observe(again.get_mut("tank").unwrap(), &good, t)),
            ["pool.online", "device.online"]
        );
        // Without the kept view (the negative control) the restart repeats both.
        let mut forgot: BTreeMap<String, Seen> = BTreeMap::new();
        assert_eq!(
            kinds(&observe(forgot.entry("tank".into()).or_default(), &bad, t)),
            ["pool.degraded", "device.faulted"]
        );
        // A damaged view is ignored, not fatal.
        std::fs::write(dir.path().join(SEEN_FILE), b"{not json").unwrap();
        assert!(load_seen(dir.path()).is_empty());
    }

    #[test]
    fn fullness_alerts_at_80_and_95_with_hysteresis() {
        let mut seen = Seen::default();
        let t = Instant::now();
        let at = |used| status("ONLINE", &[("/a", "ONLINE", 0)], used);
        assert!(observe(&mut seen, &at(790), t).is_empty());
        let f = observe(&mut seen, &at(800), t);
        assert_eq!(kinds(&f), ["pool.capacity"]);
        assert_eq!(f[0].0, Severity::Warning);
        // Hovering at the line: quiet.
        assert!(observe(&mut seen, &at(790), t).is_empty());
        assert!(observe(&mut seen, &at(801), t).is_empty());
        let f = observe(&mut seen, &at(960), t);
        assert_eq!(f[0].0, Severity::Critical);
        // Down below 78%, then up again: a new warning.
        assert!(observe(&mut seen, &at(700), t).is_empty());
        assert_eq!(kinds(&observe(&mut seen, &at(850), t)), ["pool.capacity"]);
        assert_eq!(fullness_level(0, 0, 0), 0);
    }
}
