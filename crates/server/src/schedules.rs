//! Snapshot schedules with retention, as sanoid and TrueNAS's periodic snapshot tasks
//! run them: per dataset (and its descendants when recursive), a snapshot every
//! period (`15m`, `1h`, `1d`, `1w`, `1mo`: whole minutes, hours, days, weeks or
//! calendar months), the newest `keep` kept.
//!
//! Time is cut into UTC slots aligned to the period (every 15 minutes at :00, :15,
//! :30, :45; days at 00:00; weeks on Mondays; months on the 1st): a schedule takes one
//! snapshot in each slot, named `auto-<period>-<UTC date and time taken>`
//! (`tank/home@auto-1h-2026-12-07_22:00Z`). The slot last served is kept in the book,
//! so a daemon that was down for many slots takes one snapshot when it is back (a
//! catch-up, not a burst), and a restart within a slot takes none.
//!
//! After each snapshot the schedule prunes its own snapshots (those named with its
//! prefix) beyond `keep`, oldest first, never one that is held: an operator's hold
//! or a replication base (`replication.rs` holds it on both sides), and not while a
//! replication of the dataset runs (its streams may name any snapshot after its
//! base); what cannot go now goes at a later run. Two schedules of one period may not
//! cover one dataset (they would share names and prune each other's). A recursive
//! schedule snapshots the dataset and its descendants in one transaction group
//! (`fs::Datasets::snapshot_recursive`) and prunes each.
//!
//! Replication actions that follow schedules (`shoal replication add
//! --follow-schedules`) start a run as soon as a schedule has snapshotted their
//! filesystem.
//!
//! A run that fails (the pool full or gone, the dataset destroyed) is recorded, raises
//! a warning alert (`snapshot.schedule.failed`) on the first failure of a streak, an
//! info alert (`snapshot.schedule.recovered`) on the next success, and is tried again
//! a minute later (or at the next slot, if sooner).
//!
//! The book (`schedules.json` in the state directory: the schedules and, per schedule,
//! the last slot served and the last run) is written whole or not at all.

use crate::{write_atomically, DaemonState, Result, ServerError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub const SCHEDULES_FILE: &str = "schedules.json";
/// Scheduled snapshots are named `auto-<period>-...`; a schedule prunes only its own.
pub const AUTO_PREFIX: &str = "auto-";
/// A failed run is tried again this long after (or at the next slot, if sooner).
const RETRY_AFTER_FAILURE: u64 = 60;
/// How often the scheduler looks at the clock.
const TICK: Duration = Duration::from_millis(500);
/// The most snapshots a schedule keeps.
pub const KEEP_MAX: u32 = 10_000;

/// A schedule's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Every {
    Minutes(u32),
    Hours(u32),
    Days(u32),
    Weeks(u32),
    Months(u32),
}

/// 1970-01-05 00:00 UTC, a Monday: weeks are counted from it.
const FIRST_MONDAY: u64 = 4 * 86_400;

impl Every {
    /// `15m`, `1h`, `1d`, `1w`, `1mo`, or `hourly`, `daily`, `weekly`, `monthly`.
    pub fn parse(s: &str) -> std::result::Result<Every, String> {
        let bad = || {
            format!(
                "period '{s}': a number of minutes, hours, days, weeks or months (15m, 1h, \
                 1d, 1w, 1mo), or hourly, daily, weekly, monthly"
            )
        };
        let every = match s {
            "hourly" => Every::Hours(1),
            "daily" => Every::Days(1),
            "weekly" => Every::Weeks(1),
            "monthly" => Every::Months(1),
            _ => {
                let digits = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
                let n: u32 = s[..digits].parse().map_err(|_| bad())?;
                match &s[digits..] {
                    "m" | "min" => Every::Minutes(n),
                    "h" => Every::Hours(n),
                    "d" => Every::Days(n),
                    "w" => Every::Weeks(n),
                    "mo" => Every::Months(n),
                    _ => return Err(bad()),
                }
            }
        };
        // Periods that cut their unit evenly, so slots line up the same every day,
        // hour or year.
        let ok = match every {
            Every::Minutes(n) => n > 0 && 60 % n == 0,
            Every::Hours(n) => n > 0 && 24 % n == 0,
            Every::Days(n) => (1..=31).contains(&n),
            Every::Weeks(n) => (1..=52).contains(&n),
            Every::Months(n) => n > 0 && 12 % n == 0,
        };
        if !ok {
            return Err(format!(
                "period '{s}': minutes must divide an hour (1-60), hours a day (1-24), \
                 months a year (1-12); days 1-31, weeks 1-52"
            ));
        }
        Ok(every)
    }

    /// The start (unix seconds) of the slot holding `t`.
    pub fn slot_at(self, t: u64) -> u64 {
        match self {
            Every::Minutes(n) => t - t % (u64::from(n) * 60),
            Every::Hours(n) => t - t % (u64::from(n) * 3600),
            Every::Days(n) => t - t % (u64::from(n) * 86_400),
            Every::Weeks(n) => {
                let len = u64::from(n) * 604_800;
                if t < FIRST_MONDAY {
                    0
                } else {
                    t - (t - FIRST_MONDAY) % len
                }
            }
            Every::Months(n) => {
                let (y, m, _) = civil_from_days((t / 86_400) as i64);
                let index = y * 12 + i64::from(m) - 1;
                let start = index - index.rem_euclid(i64::from(n));
                days_from_civil(start.div_euclid(12), (start.rem_euclid(12) + 1) as u32, 1) as u64
                    * 86_400
            }
        }
    }

    /// The start of the slot after the one starting at `slot`.
    pub fn next_slot(self, slot: u64) -> u64 {
        match self {
            Every::Minutes(n) => slot + u64::from(n) * 60,
            Every::Hours(n) => slot + u64::from(n) * 3600,
            Every::Days(n) => slot + u64::from(n) * 86_400,
            Every::Weeks(n) => slot + u64::from(n) * 604_800,
            // Past the end of the longest n-month run, then back to its slot start.
            Every::Months(n) => self.slot_at(slot + u64::from(n) * 31 * 86_400),
        }
    }
}

impl std::fmt::Display for Every {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Every::Minutes(n) => write!(f, "{n}m"),
            Every::Hours(n) => write!(f, "{n}h"),
            Every::Days(n) => write!(f, "{n}d"),
            Every::Weeks(n) => write!(f, "{n}w"),
            Every::Months(n) => write!(f, "{n}mo"),
        }
    }
}

impl Serialize for Every {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Every {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Every, D::Error> {
        let s = String::deserialize(d)?;
        Every::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of the above).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-12-07_22:04Z`: a snapshot name's time (UTC, to the minute).
pub fn name_time(unix: u64) -> String {
    let (y, m, d) = civil_from_days((unix / 86_400) as i64);
    let s = unix % 86_400;
    format!("{y:04}-{m:02}-{d:02}_{:02}:{:02}Z", s / 3600, s / 60 % 60)
}

/// One schedule, as it is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: u64,
    /// `pool/fs` or `pool/vol`.
    pub dataset: String,
    pub every: Every,
    /// Snapshots of this schedule kept per dataset (held ones are never destroyed).
    pub keep: u32,
    /// The dataset's descendants too, snapshotted with it in one transaction group.
    #[serde(default)]
    pub recursive: bool,
}

impl Schedule {
    /// The name prefix of this schedule's snapshots (after the `@`).
    pub fn prefix(&self) -> String {
        format!("{AUTO_PREFIX}{}-", self.every)
    }
}

/// What `POST /schedules` takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSchedule {
    pub dataset: String,
    /// `15m`, `1h`, `1d`, `1w`, `1mo`, hourly, daily, weekly or monthly.
    pub every: String,
    pub keep: u32,
    #[serde(default)]
    pub recursive: bool,
}

/// One run of a schedule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRun {
    pub at_unix: u64,
    pub ok: bool,
    /// The snapshots taken (`pool/fs@auto-...`).
    #[serde(default)]
    pub taken: Vec<String>,
    /// The snapshots pruned.
    #[serde(default)]
    pub pruned: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the book keeps of a schedule's runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// The start of the last slot a snapshot was taken in.
    #[serde(default)]
    pub last_slot_unix: Option<u64>,
    #[serde(default)]
    pub last_run: Option<ScheduleRun>,
}

/// A schedule as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleStatus {
    #[serde(flatten)]
    pub schedule: Schedule,
    /// When the next snapshot is due (unix seconds).
    pub next_run_unix: u64,
    pub last_run: Option<ScheduleRun>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Book {
    #[serde(default)]
    pub schedules: BTreeMap<u64, Schedule>,
    #[serde(default)]
    pub state: BTreeMap<u64, ScheduleState>,
    #[serde(default)]
    pub next_id: u64,
}

/// When schedule `s` with state `st` is next due at or after `now`.
pub fn next_due(s: &Schedule, st: &ScheduleState, now: u64) -> u64 {
    let failed_at = st
        .last_run
        .as_ref()
        .filter(|r| !r.ok)
        .map(|r| r.at_unix + RETRY_AFTER_FAILURE);
    let due = match st.last_slot_unix {
        // Never served: now.
        None => now,
        Some(last) => s.every.next_slot(last),
    };
    match failed_at {
        // A failure is retried a minute on, or at the next slot if that is sooner.
        Some(retry) => retry.min(s.every.next_slot(s.every.slot_at(now))).max(due),
        None => due,
    }
}

pub struct Schedules {
    path: PathBuf,
    book: Mutex<Book>,
    stop: AtomicBool,
    /// One run at a time (the scheduler's, or one asked for through the API).
    running: Mutex<()>,
}

impl Schedules {
    pub fn open(state_dir: &Path) -> Result<Schedules> {
        let path = state_dir.join(SCHEDULES_FILE);
        let book = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Book::default(),
            Err(e) => return Err(ServerError::Io(format!("reading {}", path.display()), e)),
        };
        Ok(Schedules {
            path,
            book: Mutex::new(book),
            stop: AtomicBool::new(false),
            running: Mutex::new(()),
        })
    }

    fn change<T>(&self, f: impl FnOnce(&mut Book) -> Result<T>) -> Result<T> {
        let mut book = self.book.lock().unwrap();
        let mut next = book.clone();
        let out = f(&mut next)?;
        let bytes = serde_json::to_vec_pretty(&next).expect("the book serialises");
        write_atomically(&self.path, &bytes, 0o644)?;
        *book = next;
        Ok(out)
    }

    pub fn list(&self, now: u64) -> Vec<ScheduleStatus> {
        let b = self.book.lock().unwrap();
        b.schedules
            .values()
            .map(|s| {
                let st = b.state.get(&s.id).cloned().unwrap_or_default();
                ScheduleStatus {
                    schedule: s.clone(),
                    next_run_unix: next_due(s, &st, now),
                    last_run: st.last_run,
                }
            })
            .collect()
    }

    pub fn get(&self, id: u64, now: u64) -> Option<ScheduleStatus> {
        self.list(now).into_iter().find(|s| s.schedule.id == id)
    }

    /// Adds a schedule (the dataset checked by the caller); one per dataset and
    /// period.
    pub fn add(&self, new: &NewSchedule) -> Result<Schedule> {
        let every = Every::parse(&new.every).map_err(ServerError::Config)?;
        if new.keep == 0 || new.keep > KEEP_MAX {
            return Err(ServerError::Config(format!(
                "keep {}: 1 to {KEEP_MAX}",
                new.keep
            )));
        }
        self.change(|b| {
            // Two schedules of one period over one dataset would take snapshots of
            // the same names and prune each other's.
            let covers = |s: &Schedule, d: &str| {
                s.dataset == d
                    || (s.recursive
                        && d.strip_prefix(s.dataset.as_str())
                            .is_some_and(|rest| rest.starts_with('/')))
            };
            let candidate = Schedule {
                id: 0,
                dataset: new.dataset.clone(),
                every,
                keep: new.keep,
                recursive: new.recursive,
            };
            if let Some(s) = b.schedules.values().find(|s| {
                s.every == every && (covers(s, &new.dataset) || covers(&candidate, &s.dataset))
            }) {
                return Err(ServerError::Conflict(format!(
                    "schedule {} already snapshots {}{} every {every}",
                    s.id,
                    s.dataset,
                    if s.recursive { " and its children" } else { "" }
                )));
            }
            b.next_id = b.next_id.max(1);
            let s = Schedule {
                id: b.next_id,
                dataset: new.dataset.clone(),
                every,
                keep: new.keep,
                recursive: new.recursive,
            };
            b.next_id += 1;
            b.schedules.insert(s.id, s.clone());
            Ok(s)
        })
    }

    /// Removes a schedule; its snapshots stay.
    pub fn remove(&self, id: u64) -> Result<()> {
        self.change(|b| {
            b.state.remove(&id);
            b.schedules
                .remove(&id)
                .map(|_| ())
                .ok_or_else(|| ServerError::NotFound(format!("no snapshot schedule {id}")))
        })
    }

    pub fn stop_scheduler(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Runs schedule `id` now: a snapshot for the current slot (named for `now`), then the
/// pruning; records the run and alerts on a change between failing and working.
pub fn run_now(s: &Arc<DaemonState>, id: u64, now: u64) -> Result<ScheduleRun> {
    let _one = s.schedules.running.lock().unwrap();
    let (schedule, before) = {
        let b = s.schedules.book.lock().unwrap();
        let sched = b
            .schedules
            .get(&id)
            .cloned()
            .ok_or_else(|| ServerError::NotFound(format!("no snapshot schedule {id}")))?;
        (sched, b.state.get(&id).cloned().unwrap_or_default())
    };
    let mut run = ScheduleRun {
        at_unix: now,
        ..ScheduleRun::default()
    };
    match take(s, &schedule, now) {
        Ok(taken) => {
            run.taken = taken;
            run.ok = true;
            // What pruning cannot do now (a snapshot being sent or mounted) it does
            // at a later run: the slot is served once its snapshot is taken.
            prune(s, &schedule, &mut run);
        }
        Err(e) => run.error = Some(e),
    }
    let was_failing = before.last_run.as_ref().is_some_and(|r| !r.ok);
    let object = format!("snapshot schedule {id}");
    let what = format!("{} every {}", schedule.dataset, schedule.every);
    match (&run.error, was_failing) {
        (Some(e), false) => {
            s.alerts.raise(
                crate::alerts::Severity::Warning,
                "snapshot.schedule.failed",
                &object,
                format!("the snapshot of {what} failed: {e}"),
            );
        }
        (None, true) => {
            s.alerts.raise(
                crate::alerts::Severity::Info,
                "snapshot.schedule.recovered",
                &object,
                format!("the snapshots of {what} work again"),
            );
        }
        _ => {}
    }
    let slot = schedule.every.slot_at(now);
    let recorded = run.clone();
    s.schedules.change(|b| {
        if b.schedules.contains_key(&id) {
            let st = b.state.entry(id).or_default();
            if recorded.ok {
                st.last_slot_unix = Some(slot);
            }
            st.last_run = Some(recorded);
        }
        Ok(())
    })?;
    if run.ok {
        // Replication actions that follow schedules send the new snapshots now.
        let datasets: Vec<&str> = run
            .taken
            .iter()
            .filter_map(|t| t.split('@').next())
            .collect();
        crate::replication::after_scheduled_snapshots(s, &datasets);
    }
    Ok(run)
}

/// Takes the schedule's snapshot (of its dataset, and its children when recursive, at
/// one instant); their full names. Two runs in one minute (one asked for beside the
/// scheduled one) get `-1`, `-2`, ...: still this schedule's, still in order.
fn take(
    s: &DaemonState,
    schedule: &Schedule,
    now: u64,
) -> std::result::Result<Vec<String>, String> {
    let ds = s
        .datasets_of(&schedule.dataset)
        .map_err(|e| e.message().to_string())?;
    let base = format!("{}{}", schedule.prefix(), name_time(now));
    for i in 0..100 {
        let short = if i == 0 {
            base.clone()
        } else {
            format!("{base}-{i}")
        };
        match ds.snapshot_recursive(&schedule.dataset, &short, schedule.recursive) {
            Err(fs::FsError::Exists) => continue,
            r => return r.map_err(|e| e.to_string()),
        }
    }
    Err(format!("no free snapshot name after {base}"))
}

/// Destroys the schedule's oldest snapshots beyond `keep` on each dataset it took
/// one of, never a held one, nor while a replication of the dataset runs (its
/// streams may name them); what it cannot destroy now goes at a later run.
fn prune(s: &DaemonState, schedule: &Schedule, run: &mut ScheduleRun) {
    let Ok(ds) = s.datasets_of(&schedule.dataset) else {
        return;
    };
    for taken in &run.taken {
        let dataset = taken.split('@').next().unwrap_or(taken);
        if s.replication.running_for(dataset) {
            continue;
        }
        match ds.prune(dataset, &schedule.prefix(), schedule.keep as usize, None) {
            Ok(p) => {
                run.pruned.extend(p.destroyed);
                for (snapshot, e) in p.failed {
                    tracing::info!(%snapshot, error = %e, "pruning a scheduled snapshot later");
                }
            }
            Err(e) => tracing::info!(%dataset, error = %e, "pruning scheduled snapshots later"),
        }
    }
}

/// Starts the thread that takes scheduled snapshots; it ends when the daemon's state
/// is gone or `stop_scheduler` is called.
pub fn start_scheduler(state: Weak<DaemonState>) {
    std::thread::Builder::new()
        .name("snapshot-schedules".into())
        .spawn(move || loop {
            std::thread::sleep(TICK);
            let Some(s) = state.upgrade() else { return };
            if s.schedules.stop.load(Ordering::Relaxed) {
                return;
            }
            let now = crate::replication::unix_now();
            let due: Vec<u64> = s
                .schedules
                .list(now)
                .into_iter()
                .filter(|st| st.next_run_unix <= now)
                .map(|st| st.schedule.id)
                .collect();
            for id in due {
                if let Err(e) = run_now(&s, id, now) {
                    tracing::warn!(schedule = id, error = %e, "recording a scheduled snapshot");
                }
            }
        })
        .expect("spawn the snapshot scheduler");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(date: &str) -> u64 {
        // "YYYY-MM-DD HH:MM" UTC
        let (d, hm) = date.split_once(' ').unwrap();
        let p: Vec<i64> = d.split('-').map(|x| x.parse().unwrap()).collect();
        let q: Vec<u64> = hm.split(':').map(|x| x.parse().unwrap()).collect();
        days_from_civil(p[0], p[1] as u32, p[2] as u32) as u64 * 86_400 + q[0] * 3600 + q[1] * 60
    }

    #[test]
    fn periods_parse_and_print() {
        for (s, e) in [
            ("15m", Every::Minutes(15)),
            ("1h", Every::Hours(1)),
            ("hourly", Every::Hours(1)),
            ("6h", Every::Hours(6)),
            ("1d", Every::Days(1)),
            ("1w", Every::Weeks(1)),
            ("monthly", Every::Months(1)),
            ("3mo", Every::Months(3)),
        ] {
            assert_eq!(Every::parse(s).unwrap(), e, "{s}");
        }
        assert_eq!(Every::Minutes(15).to_string(), "15m");
        assert_eq!(Every::Months(1).to_string(), "1mo");
        for bad in [
            "",
            "0m",
            "7m",
            "5h",
            "1y",
            "m",
            "15",
            "-1h",
            "13mo",
            "99999999999m",
        ] {
            assert!(Every::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slots_line_up_with_the_utc_calendar() {
        let now = t("2026-12-07 22:47");
        assert_eq!(Every::Minutes(15).slot_at(now), t("2026-12-07 22:45"));
        assert_eq!(Every::Hours(1).slot_at(now), t("2026-12-07 22:00"));
        assert_eq!(Every::Hours(6).slot_at(now), t("2026-12-07 18:00"));
        assert_eq!(Every::Days(1).slot_at(now), t("2026-12-07 00:00"));
        // 2026-12-07 is a Monday.
        assert_eq!(Every::Weeks(1).slot_at(now), t("2026-12-07 00:00"));
        assert_eq!(
            Every::Weeks(1).slot_at(t("2026-12-06 23:59")),
            t("2026-11-30 00:00")
        );
        assert_eq!(Every::Months(1).slot_at(now), t("2026-12-01 00:00"));
        assert_eq!(Every::Months(3).slot_at(now), t("2026-10-01 00:00"));
        assert_eq!(
            Every::Months(1).next_slot(t("2026-12-01 00:00")),
            t("2027-01-01 00:00")
        );
        assert_eq!(
            Every::Months(1).next_slot(t("2027-01-01 00:00")),
            t("2027-02-01 00:00")
        );
        assert_eq!(
            Every::Months(1).next_slot(t("2028-02-01 00:00")),
            t("2028-03-01 00:00")
        );
        assert_eq!(
            Every::Months(3).next_slot(t("2026-10-01 00:00")),
            t("2027-01-01 00:00")
        );
        assert_eq!(
            Every::Minutes(15).next_slot(t("2026-12-07 22:45")),
            t("2026-12-07 23:00")
        );
        // Every slot start is its own slot, and the next slot starts after it.
        for every in [
            Every::Minutes(5),
            Every::Hours(2),
            Every::Weeks(2),
            Every::Months(6),
        ] {
            let mut slot = every.slot_at(t("2024-01-01 00:00"));
            for _ in 0..40 {
                assert_eq!(every.slot_at(slot), slot, "{every}");
                let next = every.next_slot(slot);
                assert!(next > slot && every.slot_at(next - 1) == slot, "{every}");
                slot = next;
            }
        }
        assert_eq!(name_time(t("2026-12-07 22:04") + 59), "2026-12-07_22:04Z");
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(days_from_civil(2000, 2, 29)), (2000, 2, 29));
    }

    #[test]
    fn due_now_once_per_slot_with_one_catch_up_and_retries_after_a_failure() {
        let s = Schedule {
            id: 1,
            dataset: "tank/home".into(),
            every: Every::Hours(1),
            keep: 24,
            recursive: false,
        };
        let now = t("2026-12-07 22:47");
        // Never run: due now.
        assert_eq!(next_due(&s, &ScheduleState::default(), now), now);
        // Served this slot: due at the next.
        let served = ScheduleState {
            last_slot_unix: Some(t("2026-12-07 22:00")),
            last_run: Some(ScheduleRun {
                at_unix: now - 60,
                ok: true,
                ..Default::default()
            }),
        };
        assert_eq!(next_due(&s, &served, now), t("2026-12-07 23:00"));
        // Down for a day: due at once, and once (the slot served becomes now's).
        let stale = ScheduleState {
            last_slot_unix: Some(t("2026-12-06 20:00")),
            ..served.clone()
        };
        assert!(next_due(&s, &stale, now) <= now);
        // A failure is retried a minute later, not at every tick.
        let failed = ScheduleState {
            last_slot_unix: Some(t("2026-12-07 21:00")),
            last_run: Some(ScheduleRun {
                at_unix: now,
                ok: false,
                error: Some("out of space".into()),
                ..Default::default()
            }),
        };
        assert_eq!(next_due(&s, &failed, now), now + RETRY_AFTER_FAILURE);
    }
}
