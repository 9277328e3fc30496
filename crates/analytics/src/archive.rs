//! History on disk: every dataset's sealed seconds, whole minutes and whole hours,
//! appended to one file per dataset and resolution under the daemon's state
//! directory (`analytics/`), read back at start so graphs reach across restarts.
//!
//! Layout (byte by byte in `docs/format.md`, "Analytics history"):
//! - `datasets.json`: the user-enabled datasets with the second they count from,
//!   rewritten whole (temporary file, fsync, rename) at every change;
//! - `<first 16 hex digits of BLAKE3(dataset name)>.{s,m,h}`: a header naming the
//!   dataset, then records `len u32 | check u32 | payload`, each one point.
//!
//! Crash safety: records are appended without fsync (statistics are not worth a
//! flush a second). A crash loses the tail the kernel had not written; a record cut
//! short, or whose check (the first four bytes of BLAKE3 of the payload) fails,
//! ends the file: opening truncates it there, so later appends follow whole records.
//! Compaction writes a new file beside the old, fsyncs it and renames it over, so a
//! crash leaves one or the other.
//!
//! Bounds: a file is compacted to its resolution's ring length (`history::*_KEPT`)
//! once it holds twice that, and when all files together pass `max_bytes` the
//! largest is cut to its newer half until they fit in three quarters of it (second
//! files hold most: a per-file breakdown with 200 values a point is ~8 KiB a
//! second). Each cut is logged through the `problems` list the caller reports.

use crate::history::{
    BucketCount, KeyCount, Point, Resolution, HOURS_KEPT, MINUTES_KEPT, SECONDS_KEPT,
};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"SHOALHST";
pub const VERSION: u16 = 1;
/// Longest record payload accepted on reading (200 keys of at most 1 KiB each).
const MAX_RECORD: usize = 1 << 20;

fn res_code(r: Resolution) -> u8 {
    match r {
        Resolution::Second => 1,
        Resolution::Minute => 2,
        Resolution::Hour => 3,
    }
}

fn res_suffix(r: Resolution) -> &'static str {
    match r {
        Resolution::Second => "s",
        Resolution::Minute => "m",
        Resolution::Hour => "h",
    }
}

fn kept(r: Resolution) -> usize {
    match r {
        Resolution::Second => SECONDS_KEPT,
        Resolution::Minute => MINUTES_KEPT,
        Resolution::Hour => HOURS_KEPT,
    }
}

pub const RESOLUTIONS: [Resolution; 3] = [Resolution::Second, Resolution::Minute, Resolution::Hour];

fn check_of(payload: &[u8]) -> u32 {
    u32::from_le_bytes(blake3::hash(payload).as_bytes()[..4].try_into().unwrap())
}

/// A point as a record payload.
pub fn encode(p: &Point) -> Vec<u8> {
    let mut b = Vec::with_capacity(32 + p.breakdown.len() * 24 + p.buckets.len() * 24);
    b.extend_from_slice(&p.t.to_le_bytes());
    b.extend_from_slice(&(p.seconds as u32).to_le_bytes());
    b.extend_from_slice(&p.total.to_le_bytes());
    b.extend_from_slice(&(p.breakdown.len() as u16).to_le_bytes());
    for k in &p.breakdown {
        // Keys longer than 1 KiB are cut at a character boundary.
        let mut end = k.key.len().min(1024);
        while !k.key.is_char_boundary(end) {
            end -= 1;
        }
        b.extend_from_slice(&(end as u16).to_le_bytes());
        b.extend_from_slice(&k.key.as_bytes()[..end]);
        b.extend_from_slice(&k.count.to_le_bytes());
    }
    b.extend_from_slice(&(p.buckets.len() as u16).to_le_bytes());
    for x in &p.buckets {
        b.extend_from_slice(&x.low.to_le_bytes());
        b.extend_from_slice(&x.high.to_le_bytes());
        b.extend_from_slice(&x.count.to_le_bytes());
    }
    b
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// A record payload back into a point; None if it is not one.
pub fn decode(payload: &[u8]) -> Option<Point> {
    let mut r = Reader(payload);
    let t = r.u64()?;
    let seconds = r.u32()? as u64;
    let total = r.u64()?;
    let nkeys = r.u16()? as usize;
    let mut breakdown = Vec::with_capacity(nkeys.min(256));
    for _ in 0..nkeys {
        let len = r.u16()? as usize;
        let key = String::from_utf8(r.take(len)?.to_vec()).ok()?;
        breakdown.push(KeyCount {
            key,
            count: r.u64()?,
        });
    }
    let nbuckets = r.u16()? as usize;
    let mut buckets = Vec::with_capacity(nbuckets.min(256));
    for _ in 0..nbuckets {
        buckets.push(BucketCount {
            low: r.u64()?,
            high: r.u64()?,
            count: r.u64()?,
        });
    }
    if !r.0.is_empty() || seconds == 0 {
        return None;
    }
    Some(Point {
        t,
        seconds,
        total,
        breakdown,
        buckets,
    })
}

fn header(name: &str, r: Resolution) -> Vec<u8> {
    let mut h = Vec::with_capacity(16 + name.len());
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.push(res_code(r));
    h.push(0);
    h.extend_from_slice(&(name.len() as u32).to_le_bytes());
    h.extend_from_slice(name.as_bytes());
    h
}

fn record(p: &Point) -> Vec<u8> {
    let payload = encode(p);
    let mut rec = Vec::with_capacity(8 + payload.len());
    rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    rec.extend_from_slice(&check_of(&payload).to_le_bytes());
    rec.extend_from_slice(&payload);
    rec
}

/// Reads a history file: its points and the length of its whole records (where a
/// torn tail begins). None if the header is not this dataset's.
fn read_file(bytes: &[u8], name: &str, r: Resolution) -> Option<(Vec<Point>, usize)> {
    let h = header(name, r);
    if !bytes.starts_with(&h) {
        return None;
    }
    let mut at = h.len();
    let mut points = Vec::new();
    while bytes.len() >= at + 8 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let check = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
        if len > MAX_RECORD || bytes.len() < at + 8 + len {
            break;
        }
        let payload = &bytes[at + 8..at + 8 + len];
        if check_of(payload) != check {
            break;
        }
        let Some(p) = decode(payload) else { break };
        // Points only move forward; anything else is not ours to trust.
        if points.last().is_some_and(|l: &Point| l.t >= p.t) {
            break;
        }
        points.push(p);
        at += 8 + len;
    }
    Some((points, at))
}

struct OpenFile {
    file: File,
    bytes: u64,
    records: usize,
}

/// The history files of every dataset.
pub struct Archive {
    dir: PathBuf,
    max_bytes: u64,
    files: HashMap<(String, Resolution), OpenFile>,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Writes `path` whole or not at all (temporary file, fsync, rename, directory fsync).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(|e| io_err("creating", &tmp, e))?;
    f.write_all(bytes).map_err(|e| io_err("writing", &tmp, e))?;
    f.sync_all().map_err(|e| io_err("syncing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err("renaming", &tmp, e))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

impl Archive {
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Archive, String> {
        std::fs::create_dir_all(dir).map_err(|e| io_err("creating", dir, e))?;
        Ok(Archive {
            dir: dir.to_path_buf(),
            max_bytes,
            files: HashMap::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str, r: Resolution) -> PathBuf {
        let hash = blake3::hash(name.as_bytes()).to_hex();
        self.dir.join(format!("{}.{}", &hash[..16], res_suffix(r)))
    }

    /// Reads a dataset's archived points of one resolution, oldest first, and keeps
    /// the file open for appending (truncated after its last whole record).
    pub fn load(&mut self, name: &str, r: Resolution) -> Result<Vec<Point>, String> {
        let path = self.path(name, r);
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)
                    .map_err(|e| io_err("reading", &path, e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("opening", &path, e)),
        }
        // Absent, or another dataset's (a hash collision) or an older format: this
        // dataset starts afresh.
        let (points, good) = read_file(&bytes, name, r).unwrap_or_default();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err("opening", &path, e))?;
        if good == 0 {
            file.set_len(0)
                .map_err(|e| io_err("truncating", &path, e))?;
            file.write_all(&header(name, r))
                .map_err(|e| io_err("writing", &path, e))?;
        } else if good < bytes.len() {
            file.set_len(good as u64)
                .map_err(|e| io_err("truncating", &path, e))?;
        }
        let bytes = file
            .metadata()
            .map_err(|e| io_err("reading", &path, e))?
            .len();
        use std::io::Seek;
        file.seek(std::io::SeekFrom::End(0))
            .map_err(|e| io_err("seeking", &path, e))?;
        let records = points.len();
        self.files.insert(
            (name.to_string(), r),
            OpenFile {
                file,
                bytes,
                records,
            },
        );
        Ok(points)
    }

    /// Appends whole points; compacts files that grew past their bound. Errors are
    /// returned as text for the caller to log; what could be written was.
    pub fn append(&mut self, name: &str, points: &[(Resolution, Point)]) -> Vec<String> {
        let mut problems = Vec::new();
        for r in RESOLUTIONS {
            let mut buf = Vec::new();
            let mut n = 0;
            for (_, p) in points.iter().filter(|(pr, _)| *pr == r) {
                buf.extend_from_slice(&record(p));
                n += 1;
            }
            if n == 0 {
                continue;
            }
            if !self.files.contains_key(&(name.to_string(), r)) {
                if let Err(e) = self.load(name, r) {
                    problems.push(e);
                    continue;
                }
            }
            let path = self.path(name, r);
            let f = self.files.get_mut(&(name.to_string(), r)).expect("loaded");
            if let Err(e) = f.file.write_all(&buf) {
                problems.push(io_err("appending to", &path, e));
                continue;
            }
            f.bytes += buf.len() as u64;
            f.records += n;
            if f.records > 2 * kept(r) {
                if let Err(e) = self.cut(name, r, kept(r)) {
                    problems.push(e);
                }
            }
        }
        problems
    }

    /// Rewrites a file with only its newest `keep` records.
    fn cut(&mut self, name: &str, r: Resolution, keep: usize) -> Result<(), String> {
        let path = self.path(name, r);
        self.files.remove(&(name.to_string(), r));
        let bytes = std::fs::read(&path).map_err(|e| io_err("reading", &path, e))?;
        let (points, _) = read_file(&bytes, name, r).unwrap_or_default();
        let from = points.len().saturating_sub(keep);
        let mut out = header(name, r);
        for p in &points[from..] {
            out.extend_from_slice(&record(p));
        }
        write_atomically(&path, &out)?;
        self.load(name, r).map(|_| ())
    }

    /// Bytes of every open file.
    pub fn total_bytes(&self) -> u64 {
        self.files.values().map(|f| f.bytes).sum()
    }

    /// Cuts the largest files to their newer half until all fit in three quarters of
    /// `max_bytes`; returns what it did, for the log.
    pub fn enforce_bound(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.total_bytes() <= self.max_bytes {
            return notes;
        }
        while self.total_bytes() > self.max_bytes / 4 * 3 {
            let Some(((name, r), f)) = self
                .files
                .iter()
                .filter(|(_, f)| f.records > 1)
                .max_by_key(|(_, f)| f.bytes)
            else {
                break;
            };
            let (name, r, keep) = (name.clone(), *r, f.records / 2);
            notes.push(format!(
                "analytics history over its bound of {} bytes: kept the newest {keep} {:?} points of {name}",
                self.max_bytes, r
            ));
            if let Err(e) = self.cut(&name, r, keep) {
                notes.push(e);
                break;
            }
        }
        notes
    }

    /// Deletes the history files of every dataset not in `keep` (one no longer
    /// enabled, or whose name no longer parses after an upgrade renamed a
    /// statistic), so they stop taking space outside the bound. Returns what it
    /// removed, for the log.
    pub fn remove_others(&mut self, keep: &[String]) -> Vec<String> {
        let kept: std::collections::HashSet<PathBuf> = keep
            .iter()
            .flat_map(|name| RESOLUTIONS.map(|r| self.path(name, r)))
            .collect();
        let mut removed = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return removed;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            let ours = name.split_once('.').is_some_and(|(hash, suffix)| {
                hash.len() == 16
                    && hash.bytes().all(|b| b.is_ascii_hexdigit())
                    && RESOLUTIONS.iter().any(|r| res_suffix(*r) == suffix)
            });
            if ours && !kept.contains(&path) && std::fs::remove_file(&path).is_ok() {
                removed.push(name);
            }
        }
        removed
    }

    /// Deletes a dataset's files.
    pub fn remove(&mut self, name: &str) {
        for r in RESOLUTIONS {
            self.files.remove(&(name.to_string(), r));
            let _ = std::fs::remove_file(self.path(name, r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: u64, n: usize) -> Point {
        Point {
            t,
            seconds: 1,
            total: t * 3,
            breakdown: (0..n)
                .map(|i| KeyCount {
                    key: format!("/tank/fs/file-{i}-é"),
                    count: i as u64 + t,
                })
                .collect(),
            buckets: vec![BucketCount {
                low: 10,
                high: 20,
                count: t,
            }],
        }
    }

    #[test]
    fn points_survive_reopening_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let name = "nfs3.ops[client=10.0.0.2][file]";
        let mut a = Archive::open(dir.path(), u64::MAX).unwrap();
        assert!(a.load(name, Resolution::Second).unwrap().is_empty());
        let pts: Vec<_> = (100..110)
            .map(|t| (Resolution::Second, point(t, 3)))
            .collect();
        assert!(a.append(name, &pts).is_empty());
        drop(a);
        // A crash mid-append: half a record at the end.
        let path = Archive::open(dir.path(), u64::MAX)
            .unwrap()
            .path(name, Resolution::Second);
        let mut bytes = std::fs::read(&path).unwrap();
        let whole = bytes.len();
        bytes.extend_from_slice(&record(&point(110, 3))[..20]);
        std::fs::write(&path, &bytes).unwrap();
        let mut b = Archive::open(dir.path(), u64::MAX).unwrap();
        let back = b.load(name, Resolution::Second).unwrap();
        assert_eq!(back, pts.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole as u64);
        // Appends after the cut read back too; a flipped byte ends the file there.
        assert!(b
            .append(name, &[(Resolution::Second, point(111, 1))])
            .is_empty());
        drop(b);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let back = Archive::open(dir.path(), u64::MAX)
            .unwrap()
            .load(name, Resolution::Second)
            .unwrap();
        assert_eq!(back.len(), 10);
        // Another dataset never reads this one's file.
        let other = Archive::open(dir.path(), u64::MAX)
            .unwrap()
            .load("nfs3.ops", Resolution::Second)
            .unwrap();
        assert!(other.is_empty());
    }

    #[test]
    fn files_stay_within_their_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Archive::open(dir.path(), u64::MAX).unwrap();
        let name = "io.ops[device]";
        for chunk in 0..(2 * HOURS_KEPT / 100 + 2) {
            let pts: Vec<_> = (0..100)
                .map(|i| (Resolution::Hour, point((chunk * 100 + i) as u64 * 3600, 0)))
                .collect();
            assert!(a.append(name, &pts).is_empty());
        }
        let back = a.load(name, Resolution::Hour).unwrap();
        assert!(back.len() <= 2 * HOURS_KEPT && back.len() >= HOURS_KEPT);
        assert_eq!(
            back.last().unwrap().t,
            ((2 * HOURS_KEPT / 100 + 2) * 100 - 1) as u64 * 3600
        );

        // The global bound: the largest file is cut until all fit.
        let mut small = Archive::open(dir.path(), 64 * 1024).unwrap();
        for (i, n) in [("a", 50), ("b", 2)] {
            let pts: Vec<_> = (0..200)
                .map(|t| (Resolution::Second, point(t, n)))
                .collect();
            small.append(i, &pts);
        }
        let before_b = small.files[&("b".to_string(), Resolution::Second)].bytes;
        let notes = small.enforce_bound();
        assert!(!notes.is_empty());
        assert!(small.total_bytes() <= 48 * 1024, "{}", small.total_bytes());
        assert_eq!(
            small.files[&("b".to_string(), Resolution::Second)].bytes,
            before_b
        );
        let a_back = small.load("a", Resolution::Second).unwrap();
        assert_eq!(a_back.last().unwrap().t, 199, "the newest points are kept");
    }

    #[test]
    fn encoding_round_trips_and_refuses_garbage() {
        let p = point(5, 4);
        assert_eq!(decode(&encode(&p)), Some(p.clone()));
        let e = encode(&p);
        assert_eq!(decode(&e[..e.len() - 1]), None);
        let mut longer = e.clone();
        longer.push(0);
        assert_eq!(decode(&longer), None);
    }
}
