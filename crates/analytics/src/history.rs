//! A dataset's history: per-second points for an hour, per-minute for a week,
//! per-hour for a year, each in a bounded ring.
//!
//! A point holds the sum over its interval (`seconds` long), so a minute or hour is
//! the exact sum of its seconds and any range's average rate is sum / seconds.
//! Breakdowns keep at most `MAX_KEYS` values per point, the largest; the rest are
//! summed under `OTHER`, so memory is bounded whatever the clients do. Each history
//! also knows about how many bytes its points take (`bytes`), so the engine can hold
//! all datasets' histories under one byte budget by dropping the oldest points of
//! the largest (`trim_oldest`), never below `MIN_KEPT` points of each ring.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

pub const SECONDS_KEPT: usize = 3600;
pub const MINUTES_KEPT: usize = 7 * 24 * 60;
pub const HOURS_KEPT: usize = 366 * 24;
/// Values kept per point of a categorical breakdown.
pub const MAX_KEYS: usize = 200;
pub const OTHER: &str = "(other)";
/// Points of each ring a byte budget never trims below: a minute of seconds, an
/// hour of minutes, a day of hours.
pub const MIN_KEPT: [usize; 3] = [60, 60, 24];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolution {
    Second,
    Minute,
    Hour,
}

impl Resolution {
    pub fn seconds(self) -> u64 {
        match self {
            Resolution::Second => 1,
            Resolution::Minute => 60,
            Resolution::Hour => 3600,
        }
    }

    pub fn parse(s: &str) -> Option<Resolution> {
        match s {
            "second" => Some(Resolution::Second),
            "minute" => Some(Resolution::Minute),
            "hour" => Some(Resolution::Hour),
            _ => None,
        }
    }

    /// The next coarser resolution (hours stay hours).
    pub fn coarser(self) -> Resolution {
        match self {
            Resolution::Second => Resolution::Minute,
            Resolution::Minute | Resolution::Hour => Resolution::Hour,
        }
    }

    /// The finest resolution whose ring still covers `span` seconds back from now.
    pub fn for_span(span: u64) -> Resolution {
        if span <= SECONDS_KEPT as u64 {
            Resolution::Second
        } else if span <= (MINUTES_KEPT * 60) as u64 {
            Resolution::Minute
        } else {
            Resolution::Hour
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCount {
    pub key: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketCount {
    /// Inclusive lower and exclusive upper bound, in the dimension's unit.
    pub low: u64,
    pub high: u64,
    pub count: u64,
}

/// The sum of one interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// Unix time of the interval's start, in seconds.
    pub t: u64,
    pub seconds: u64,
    pub total: u64,
    /// Categorical breakdown, largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breakdown: Vec<KeyCount>,
    /// Numeric breakdown (a heatmap column), by increasing bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<BucketCount>,
}

impl Point {
    /// About how many bytes of memory the point takes.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Point>()
            + self.breakdown.capacity() * std::mem::size_of::<KeyCount>()
            + self
                .breakdown
                .iter()
                .map(|k| k.key.capacity())
                .sum::<usize>()
            + self.buckets.capacity() * std::mem::size_of::<BucketCount>()
    }

    pub fn empty(t: u64, seconds: u64) -> Point {
        Point {
            t,
            seconds,
            total: 0,
            breakdown: Vec::new(),
            buckets: Vec::new(),
        }
    }

    /// Builds a point from unbounded counts, keeping the `MAX_KEYS` largest.
    pub fn from_counts(
        t: u64,
        seconds: u64,
        total: u64,
        keys: HashMap<String, u64>,
        buckets: BTreeMap<(u64, u64), u64>,
    ) -> Point {
        let mut breakdown: Vec<KeyCount> = keys
            .into_iter()
            .map(|(key, count)| KeyCount { key, count })
            .collect();
        breakdown.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        if breakdown.len() > MAX_KEYS {
            let rest: u64 = breakdown[MAX_KEYS - 1..].iter().map(|k| k.count).sum();
            breakdown.truncate(MAX_KEYS - 1);
            breakdown.push(KeyCount {
                key: OTHER.to_string(),
                count: rest,
            });
        }
        Point {
            t,
            seconds,
            total,
            breakdown,
            buckets: buckets
                .into_iter()
                .map(|((low, high), count)| BucketCount { low, high, count })
                .collect(),
        }
    }

    /// Sums points into one covering `[t, t + seconds)`.
    pub fn sum<'a>(t: u64, seconds: u64, points: impl IntoIterator<Item = &'a Point>) -> Point {
        let mut total = 0;
        let mut keys: HashMap<String, u64> = HashMap::new();
        let mut buckets: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        for p in points {
            total += p.total;
            for k in &p.breakdown {
                *keys.entry(k.key.clone()).or_default() += k.count;
            }
            for b in &p.buckets {
                *buckets.entry((b.low, b.high)).or_default() += b.count;
            }
        }
        Point::from_counts(t, seconds, total, keys, buckets)
    }
}

/// One dataset's rings.
#[derive(Debug, Default, Clone)]
pub struct History {
    pub seconds: VecDeque<Point>,
    pub minutes: VecDeque<Point>,
    pub hours: VecDeque<Point>,
    /// `Point::approx_bytes` summed over each ring: seconds, minutes, hours.
    bytes: [usize; 3],
    /// Whether the memory bound has dropped points of each ring (so it may start
    /// later than the dataset's history does).
    trimmed: [bool; 3],
}

impl History {
    /// Appends the next second (points arrive in increasing `t`) and folds it into
    /// its minute and hour. Returns the points this completed, for the archive: the
    /// second itself, and a minute or hour that a later interval has begun after.
    pub fn push_second(&mut self, p: Point) -> Vec<(Resolution, Point)> {
        debug_assert!(self.seconds.back().is_none_or(|l| l.t < p.t));
        let mut done = Vec::new();
        let [_, minute_bytes, hour_bytes] = &mut self.bytes;
        if let Some(m) = Self::fold_into(&mut self.minutes, minute_bytes, &p, 60, MINUTES_KEPT) {
            done.push((Resolution::Minute, m));
        }
        if let Some(h) = Self::fold_into(&mut self.hours, hour_bytes, &p, 3600, HOURS_KEPT) {
            done.push((Resolution::Hour, h));
        }
        done.push((Resolution::Second, p.clone()));
        self.bytes[0] += p.approx_bytes();
        self.seconds.push_back(p);
        while self.seconds.len() > SECONDS_KEPT {
            let gone = self.seconds.pop_front().expect("longer than kept");
            self.bytes[0] -= gone.approx_bytes();
        }
        done
    }

    /// Whether the memory bound trimmed ring `r` to start after `t`: a query from
    /// `t` is then better answered by a coarser ring. (A ring that merely starts
    /// when the dataset was enabled is not trimmed.)
    pub fn trimmed_after(&self, r: Resolution, t: u64) -> bool {
        let (ring, i) = match r {
            Resolution::Second => (&self.seconds, 0),
            Resolution::Minute => (&self.minutes, 1),
            Resolution::Hour => (&self.hours, 2),
        };
        self.trimmed[i] && ring.front().is_some_and(|p| p.t > t)
    }

    /// About how many bytes the points of all three rings take.
    pub fn bytes(&self) -> usize {
        self.bytes.iter().sum()
    }

    /// Whether some ring holds more than its `MIN_KEPT`.
    pub fn can_trim(&self) -> bool {
        [&self.seconds, &self.minutes, &self.hours]
            .iter()
            .zip(MIN_KEPT)
            .any(|(r, min)| r.len() > min)
    }

    /// Drops the oldest point of the ring that takes the most bytes and still holds
    /// more than its `MIN_KEPT`; false when every ring is down to its minimum.
    pub fn trim_oldest(&mut self) -> bool {
        let rings = [&mut self.seconds, &mut self.minutes, &mut self.hours];
        let Some(i) = (0..3)
            .filter(|&i| rings[i].len() > MIN_KEPT[i])
            .max_by_key(|&i| self.bytes[i])
        else {
            return false;
        };
        let gone = rings
            .into_iter()
            .nth(i)
            .unwrap()
            .pop_front()
            .expect("checked");
        self.bytes[i] -= gone.approx_bytes();
        self.trimmed[i] = true;
        true
    }

    fn recount(&mut self) {
        for (i, ring) in [&self.seconds, &self.minutes, &self.hours]
            .into_iter()
            .enumerate()
        {
            self.bytes[i] = ring.iter().map(Point::approx_bytes).sum();
        }
    }

    /// Adds `p` to its interval in `ring`; returns the interval before it when `p`
    /// begins a new one.
    /// `bytes` is the ring's `approx_bytes` sum, kept up to date.
    fn fold_into(
        ring: &mut VecDeque<Point>,
        bytes: &mut usize,
        p: &Point,
        width: u64,
        keep: usize,
    ) -> Option<Point> {
        let start = p.t / width * width;
        match ring.back_mut() {
            Some(last) if last.t == start => {
                *bytes -= last.approx_bytes();
                *last = Point::sum(start, width, [&*last, p]);
                *bytes += last.approx_bytes();
                None
            }
            _ => {
                let finished = ring.back().cloned();
                let new = Point::sum(start, width, [p]);
                *bytes += new.approx_bytes();
                ring.push_back(new);
                while ring.len() > keep {
                    *bytes -= ring.pop_front().expect("longer than kept").approx_bytes();
                }
                finished
            }
        }
    }

    /// Rebuilds a history from archived points of each resolution (oldest first):
    /// seconds newer than the last whole minute or hour archived are folded again,
    /// which restores the interval that was open when the daemon stopped.
    pub fn restore(seconds: Vec<Point>, minutes: Vec<Point>, hours: Vec<Point>) -> History {
        let mut h = History {
            seconds: VecDeque::new(),
            minutes: minutes.into(),
            hours: hours.into(),
            bytes: [0; 3],
            trimmed: [false; 3],
        };
        let minute_end = h.minutes.back().map_or(0, |m| m.t + 60);
        let hour_end = h.hours.back().map_or(0, |m| m.t + 3600);
        // Counted afresh below.
        let mut scratch = 0;
        for p in seconds {
            if p.t >= minute_end {
                Self::fold_into(&mut h.minutes, &mut scratch, &p, 60, MINUTES_KEPT);
            }
            if p.t >= hour_end {
                Self::fold_into(&mut h.hours, &mut scratch, &p, 3600, HOURS_KEPT);
            }
            h.seconds.push_back(p);
        }
        for (ring, keep) in [
            (&mut h.seconds, SECONDS_KEPT),
            (&mut h.minutes, MINUTES_KEPT),
            (&mut h.hours, HOURS_KEPT),
        ] {
            while ring.len() > keep {
                ring.pop_front();
            }
        }
        h.recount();
        h
    }

    /// Points of `resolution` whose interval starts in `[start, end]`.
    pub fn range(&self, resolution: Resolution, start: u64, end: u64) -> Vec<Point> {
        let ring = match resolution {
            Resolution::Second => &self.seconds,
            Resolution::Minute => &self.minutes,
            Resolution::Hour => &self.hours,
        };
        ring.iter()
            .filter(|p| p.t >= start && p.t <= end)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64, total: u64, key: &str) -> Point {
        Point::from_counts(
            t,
            1,
            total,
            HashMap::from([(key.to_string(), total)]),
            BTreeMap::from([((1000, 2000), total)]),
        )
    }

    #[test]
    fn minutes_and_hours_are_exact_sums_of_their_seconds() {
        let mut h = History::default();
        for t in 3540..3720 {
            h.push_second(second(t, t % 7, if t % 2 == 0 { "a" } else { "b" }));
        }
        assert_eq!(h.seconds.len(), 180);
        let minutes = h.range(Resolution::Minute, 0, u64::MAX);
        assert_eq!(
            minutes.iter().map(|p| p.t).collect::<Vec<_>>(),
            [3540, 3600, 3660]
        );
        for m in &minutes {
            let want: u64 = (m.t..m.t + 60).map(|t| t % 7).sum();
            assert_eq!(m.total, want);
            let a: u64 = (m.t..m.t + 60).filter(|t| t % 2 == 0).map(|t| t % 7).sum();
            let got_a = m.breakdown.iter().find(|k| k.key == "a").unwrap().count;
            assert_eq!(got_a, a);
            assert_eq!(m.buckets[0].count, want);
            assert_eq!(m.seconds, 60);
        }
        let hours = h.range(Resolution::Hour, 0, u64::MAX);
        assert_eq!(hours.len(), 2);
        assert_eq!(
            hours[0].total + hours[1].total,
            (3540..3720).map(|t| t % 7).sum::<u64>()
        );
    }

    #[test]
    fn restoring_from_whole_intervals_and_seconds_gives_the_same_history() {
        let mut live = History::default();
        let (mut secs, mut mins, mut hours) = (Vec::new(), Vec::new(), Vec::new());
        for t in 7100..7390 {
            for (r, p) in live.push_second(second(t, t % 5, "k")) {
                match r {
                    Resolution::Second => secs.push(p),
                    Resolution::Minute => mins.push(p),
                    Resolution::Hour => hours.push(p),
                }
            }
        }
        // Only whole intervals were handed out: 7100's minute began at 7080 and is
        // partial, but it is whole from here on (what was seen of it).
        assert_eq!(mins.last().unwrap().t, 7320);
        assert_eq!(hours.last().unwrap().t, 3600);
        let restored = History::restore(secs, mins, hours);
        assert_eq!(restored.seconds, live.seconds);
        assert_eq!(restored.minutes, live.minutes);
        assert_eq!(restored.hours, live.hours);
    }

    #[test]
    fn byte_counts_follow_the_rings_and_trimming_keeps_the_newest() {
        let mut h = History::default();
        for t in 0..7300 {
            let keys: HashMap<String, u64> =
                (0..(t % 5)).map(|i| (format!("client-{i}"), 1)).collect();
            h.push_second(Point::from_counts(t, 1, t % 5, keys, BTreeMap::new()));
        }
        let counted = h.bytes();
        h.recount();
        assert_eq!(h.bytes(), counted, "kept counts drifted from a recount");
        let before = h.bytes();
        let newest = h.seconds.back().unwrap().t;
        let mut trims = 0;
        while h.trim_oldest() {
            trims += 1;
            assert!(h.bytes() < before);
        }
        assert!(trims > 0);
        assert_eq!(
            [h.seconds.len(), h.minutes.len(), h.hours.len()],
            [60, 60, MIN_KEPT[2].min(3)],
            "trimmed below the minimum, or not down to it"
        );
        assert_eq!(
            h.seconds.back().unwrap().t,
            newest,
            "the newest second was trimmed"
        );
        let counted = h.bytes();
        h.recount();
        assert_eq!(h.bytes(), counted);
    }

    #[test]
    fn rings_and_breakdowns_stay_bounded() {
        let mut h = History::default();
        for t in 0..(SECONDS_KEPT as u64 + 10) {
            h.push_second(Point::empty(t, 1));
        }
        assert_eq!(h.seconds.len(), SECONDS_KEPT);
        assert_eq!(h.seconds.front().unwrap().t, 10);
        let keys: HashMap<String, u64> = (0..500).map(|i| (format!("k{i}"), i)).collect();
        let total = keys.values().sum();
        let p = Point::from_counts(0, 1, total, keys, BTreeMap::new());
        assert_eq!(p.breakdown.len(), MAX_KEYS);
        assert_eq!(p.breakdown[0].key, "k499");
        assert_eq!(p.breakdown.last().unwrap().key, OTHER);
        assert_eq!(p.breakdown.iter().map(|k| k.count).sum::<u64>(), total);
    }
}
