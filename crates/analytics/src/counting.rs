//! The counting of one dataset: its seconds not yet sealed (`OpenSeconds` of `Open`
//! counts), how the collector adds a chunk of events to them (`DatasetState::add_chunk`,
//! with `NfsCounting` for the NFS built-ins and the general path through `samples` for
//! every other dataset), which second an event falls in (`SecondOf`), and sealing a
//! second into a `Point` of the dataset's history.
//!
//! Invariants: every sample adds to its second's total and to exactly one value of the
//! breakdown, so a breakdown sums to its total; the chunked counting counts exactly
//! what counting event by event through `samples` would (a proptest in `tests`
//! compares them); a sealed second is never opened again (`seal` never goes below
//! the history's newest second). In memory only: nothing here is on disk.

use crate::catalog::{self, samples, RawKey};
use crate::clock::{self, Ticks};
use crate::fasthash::FastMap;
use crate::history::{History, Point, Resolution};
use crate::{buckets, Analytics, DatasetInfo, Dim, Event, Namer, NfsEvent, Spec, NONE_KEY};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Counts of one second not yet sealed.
#[derive(Default)]
pub(crate) struct Open {
    total: u64,
    /// Counts by breakdown key, except those still in `recent`.
    keys: FastMap<RawKey, u64>,
    /// The two keys counted last and their counts not yet in `keys`. Events of one
    /// kind mostly repeat a key (every 8K random read is op `read`; NFS bytes
    /// alternate in and out), and comparing two small keys costs far less than
    /// hashing one and probing the map: under 8K random reads the map's hashing and
    /// probing were over half of the collector's CPU.
    recent: [Option<(RawKey, u64)>; 2],
    /// Counts by heatmap bucket (`RawKey::Bucket`), indexed by bucket: a latency,
    /// size or offset breakdown changes bucket from one event to the next, and an
    /// array of `buckets::BUCKETS` counts needs no hashing. Empty until the first.
    buckets: Vec<u64>,
}

impl Open {
    #[inline(always)]
    fn count_key(&mut self, key: RawKey, value: u64) {
        if let RawKey::Bucket(i) = key {
            self.count_bucket(i, value);
            return;
        }
        for slot in self.recent.iter_mut().flatten() {
            if same_key(&slot.0, &key) {
                slot.1 += value;
                return;
            }
        }
        self.count_new_recent(key, value);
    }

    #[inline(always)]
    fn count_bucket(&mut self, i: u32, value: u64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; buckets::BUCKETS as usize];
        }
        self.buckets[i as usize] += value;
    }

    /// `count_key` for a key not among the recent ones: the older recent key goes
    /// into the map. Out of line, so the common case inlines small.
    #[inline(never)]
    fn count_new_recent(&mut self, key: RawKey, value: u64) {
        if let Some((old, n)) = self.recent[1].take() {
            *self.keys.entry(old).or_default() += n;
        }
        self.recent[1] = self.recent[0].take();
        self.recent[0] = Some((key, value));
    }

    /// Every key's count, `recent` and `buckets` included.
    fn into_keys(mut self) -> FastMap<RawKey, u64> {
        for (key, n) in self.recent.iter_mut().filter_map(Option::take) {
            *self.keys.entry(key).or_default() += n;
        }
        for (i, &n) in self.buckets.iter().enumerate().filter(|(_, &n)| n > 0) {
            *self.keys.entry(RawKey::Bucket(i as u32)).or_default() += n;
        }
        self.keys
    }
}

/// `Analytics::unix_second` with the last second's bounds remembered: events come
/// in seconds' order nearly always, and two comparisons of instants cost less than
/// the duration arithmetic per event (it showed in the collector's profile).
#[derive(Default)]
pub(crate) struct SecondOf {
    /// `[start, end)` maps to `second`.
    bounds: Option<(Instant, Instant, u64)>,
    /// The same for NFS events' ticks, as `reference` maps them.
    tick_bounds: Option<(Ticks, Ticks, u64)>,
}

impl SecondOf {
    /// The second of an event; an NFS event's ticks are compared as they are, not
    /// turned into an instant each.
    #[inline]
    pub(crate) fn of_event(
        &mut self,
        a: &Analytics,
        reference: &clock::Reference,
        e: &Event,
    ) -> u64 {
        let Event::Nfs(n) = e else {
            return self.second(a, e.at(reference));
        };
        if let Some((start, end, second)) = self.tick_bounds {
            if start <= n.at && n.at < end {
                return second;
            }
        }
        let second = self.second(a, reference.instant(n.at));
        let (start, end, _) = self.bounds.expect("just set");
        self.tick_bounds = Some((reference.ticks(start), reference.ticks(end), second));
        second
    }

    #[inline]
    pub(crate) fn second(&mut self, a: &Analytics, at: Instant) -> u64 {
        if let Some((start, end, second)) = self.bounds {
            if start <= at && at < end {
                return second;
            }
        }
        let second = a.unix_second(at);
        // Second s holds the instants from epoch + (s - epoch_unix) on, up to the
        // next second's; the first second starts at the epoch (earlier instants
        // count in it too, and are found the slow way).
        let since_epoch = |s: u64| Duration::from_secs(s).saturating_sub(a.epoch_unix);
        self.bounds = Some((
            a.epoch + since_epoch(second),
            a.epoch + since_epoch(second + 1),
            second,
        ));
        second
    }
}

/// A dataset's seconds not yet sealed, oldest first: a handful (the seconds of the
/// last `SEAL_DELAY_S`), and events nearly always count in the newest, which is
/// looked at first, so finding an event's second costs one comparison.
#[derive(Default)]
pub(crate) struct OpenSeconds(std::collections::VecDeque<(u64, Open)>);

impl OpenSeconds {
    /// The counts of `second`, new and empty if it had none.
    #[inline]
    fn second(&mut self, second: u64) -> &mut Open {
        let seconds = &mut self.0;
        let at = match seconds.iter().rposition(|(s, _)| *s <= second) {
            Some(i) if seconds[i].0 == second => i,
            Some(i) => {
                seconds.insert(i + 1, (second, Open::default()));
                i + 1
            }
            None => {
                seconds.push_front((second, Open::default()));
                0
            }
        };
        &mut seconds[at].1
    }

    /// Forgets the seconds before `from`.
    fn drop_before(&mut self, from: u64) {
        while self.0.front().is_some_and(|(s, _)| *s < from) {
            self.0.pop_front();
        }
    }

    /// The counts of `second` if it is the oldest open second (seconds are sealed
    /// oldest first, after `drop_before`).
    fn take_first(&mut self, second: u64) -> Option<Open> {
        if self.0.front()?.0 == second {
            self.0.pop_front().map(|(_, open)| open)
        } else {
            None
        }
    }
}

/// What `tick` works out once for a chunk of events before offering it to each
/// dataset: each event's route (as a bit) and the runs of events in one second.
#[derive(Default)]
pub(crate) struct ChunkPlan {
    /// Per event, the bit of its route; 0 for an event left out (one that came
    /// after its second was sealed).
    bits: Vec<u64>,
    /// Consecutive events of one second, in order; the events left out that fall
    /// inside a run keep their bit of 0.
    runs: Vec<Run>,
    /// Every route the chunk has events of.
    pub(crate) present: u64,
}

struct Run {
    start: usize,
    end: usize,
    second: u64,
}

impl ChunkPlan {
    pub(crate) fn clear(&mut self) {
        self.bits.clear();
        self.runs.clear();
        self.present = 0;
    }

    /// Adds event `i` (the next one), counted in `second`.
    #[inline]
    pub(crate) fn push(&mut self, i: usize, second: u64, bit: u64) {
        debug_assert_eq!(i, self.bits.len());
        self.bits.push(bit);
        self.present |= bit;
        match self.runs.last_mut() {
            Some(run) if run.second == second => run.end = i + 1,
            _ => self.runs.push(Run {
                start: i,
                end: i + 1,
                second,
            }),
        }
    }

    /// Adds the next event as one no dataset counts (it came after its second was
    /// sealed).
    #[inline]
    pub(crate) fn push_uncounted(&mut self) {
        self.bits.push(0);
    }
}

/// The counting of an unfiltered dataset of an NFS statistic (every NFS built-in:
/// `nfs3.ops[op]`, `nfs3.ops[latency]`, `net.bytes[direction]`, ...), worked out once
/// per dataset so that the loop over a run's events is specialised for it. Through
/// `samples` and `Sample::key` each event took a jump on the statistic, a call and a
/// jump on the dimension; these loops take none. They count exactly what `samples`
/// yields (the proptest `chunked_counting_matches_counting_event_by_event` compares
/// them with the event-by-event counting); any other dataset takes the general path.
#[derive(Clone, Copy)]
enum NfsCounting {
    /// `nfsN.ops` or `nfsN.bytes` (`bytes`), broken down by `key` or not at all.
    Calls {
        version: u8,
        bytes: bool,
        key: NfsKey,
    },
    /// `net.bytes` or `net.bytes[direction]`: request bytes in, reply bytes out.
    Net { by_direction: bool },
}

#[derive(Clone, Copy)]
enum NfsKey {
    None,
    Op,
    Latency,
    Size,
    Offset,
}

impl NfsCounting {
    fn of(counts: catalog::Counts, breakdown: Option<Dim>) -> Option<NfsCounting> {
        use catalog::Counts;
        let key = |breakdown| {
            Some(match breakdown {
                None => NfsKey::None,
                Some(Dim::Op) => NfsKey::Op,
                Some(Dim::Latency) => NfsKey::Latency,
                Some(Dim::Size) => NfsKey::Size,
                Some(Dim::Offset) => NfsKey::Offset,
                Some(_) => return None,
            })
        };
        match (counts, breakdown) {
            (Counts::NetBytes, None) => Some(NfsCounting::Net {
                by_direction: false,
            }),
            (Counts::NetBytes, Some(Dim::Direction)) => {
                Some(NfsCounting::Net { by_direction: true })
            }
            (Counts::NfsOps(version) | Counts::NfsBytes(version), _) => Some(NfsCounting::Calls {
                version,
                bytes: matches!(counts, Counts::NfsBytes(_)),
                key: key(breakdown)?,
            }),
            _ => None,
        }
    }

    /// Counts the events of `events` whose bits meet `mask` into `o`.
    fn count(self, o: &mut Open, events: &[Event], bits: &[u64], mask: u64) {
        match self {
            // As `samples`: one per call, or a call's payload bytes (a call that
            // moved none is no sample).
            NfsCounting::Calls {
                version,
                bytes: false,
                key,
            } => count_calls(o, events, bits, mask, version, key, |_| 1),
            NfsCounting::Calls {
                version,
                bytes: true,
                key,
            } => count_calls(o, events, bits, mask, version, key, |e| e.bytes as u64),
            NfsCounting::Net { by_direction } => {
                for (e, b) in events.iter().zip(bits) {
                    let Event::Nfs(e) = e else { continue };
                    if b & mask == 0 {
                        continue;
                    }
                    let (inbound, outbound) = (e.request_bytes as u64, e.reply_bytes as u64);
                    o.total += inbound + outbound;
                    if by_direction {
                        o.count_key(RawKey::Direction(false), inbound);
                        o.count_key(RawKey::Direction(true), outbound);
                    }
                }
            }
        }
    }
}

/// Counts each NFS call of `version` among `events` whose bit meets `mask` with
/// `value` (none when 0), broken down by `key`: one loop per key, each compiled for
/// its key, so that the key is not chosen again for every call.
#[inline(always)]
fn count_calls(
    o: &mut Open,
    events: &[Event],
    bits: &[u64],
    mask: u64,
    version: u8,
    key: NfsKey,
    value: impl Fn(&NfsEvent) -> u64,
) {
    let calls = Calls {
        events,
        bits,
        mask,
        version,
    };
    let bucket = |v: u64| Some(RawKey::Bucket(buckets::index(v)));
    match key {
        NfsKey::None => calls.count(o, &value, |_| None),
        NfsKey::Op => calls.count(o, &value, |e| Some(RawKey::Name(e.op))),
        NfsKey::Latency => calls.count(o, &value, |e| bucket(e.latency_ns / 1000)),
        NfsKey::Size => calls.count(o, &value, |e| bucket(e.bytes as u64)),
        NfsKey::Offset => calls.count(o, &value, |e| bucket(e.offset)),
    }
}

/// The NFS calls of one version among a run's events whose bit meets `mask`.
struct Calls<'a> {
    events: &'a [Event],
    bits: &'a [u64],
    mask: u64,
    version: u8,
}

impl Calls<'_> {
    #[inline(always)]
    fn count(
        &self,
        o: &mut Open,
        value: &impl Fn(&NfsEvent) -> u64,
        key_of: impl Fn(&NfsEvent) -> Option<RawKey>,
    ) {
        for (e, b) in self.events.iter().zip(self.bits) {
            let Event::Nfs(e) = e else { continue };
            if b & self.mask == 0 || e.version != self.version {
                continue;
            }
            let n = value(e);
            if n == 0 {
                continue;
            }
            o.total += n;
            if let Some(k) = key_of(e) {
                o.count_key(k, n);
            }
        }
    }
}

/// `a == b` for names (static strings), by address first: the same name nearly
/// always comes from the same constant, and then no bytes are compared.
#[inline]
pub(crate) fn same_name(a: &'static str, b: &'static str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// `a == b`, with names compared as `same_name` does.
#[inline]
fn same_key(a: &RawKey, b: &RawKey) -> bool {
    match (a, b) {
        (RawKey::Name(x), RawKey::Name(y)) => same_name(x, y),
        _ => a == b,
    }
}

pub(crate) struct DatasetState {
    pub(crate) spec: Spec,
    pub(crate) builtin: bool,
    /// First second the dataset counts in full.
    pub(crate) since: u64,
    pub(crate) open: OpenSeconds,
    pub(crate) history: History,
    /// (filter index, value) → whether the value's name matches the filter.
    pub(crate) filter_memo: FastMap<(usize, RawKey), bool>,
}

impl DatasetState {
    pub(crate) fn new(spec: Spec, builtin: bool, since: u64) -> DatasetState {
        DatasetState {
            spec,
            builtin,
            since,
            open: OpenSeconds::default(),
            history: History::default(),
            filter_memo: FastMap::default(),
        }
    }

    pub(crate) fn info(&self, name: &str) -> DatasetInfo {
        let stat = self.spec.statistic();
        DatasetInfo {
            name: name.to_string(),
            statistic: stat.name,
            description: stat.description,
            unit: stat.unit,
            gauge: stat.gauge,
            divisor: stat.divisor,
            breakdown: self.spec.breakdown.map(Dim::name),
            breakdown_unit: self.spec.breakdown.and_then(Dim::unit),
            filters: self
                .spec
                .all_filters()
                .into_iter()
                .map(|(d, v)| (d.name().to_string(), v))
                .collect(),
            builtin: self.builtin,
            since: self.since,
        }
    }

    /// Counts the events of a chunk that are of one of the routes in `mask`, each in
    /// its second, as `plan` tells.
    pub(crate) fn add_chunk(
        &mut self,
        events: &[Event],
        plan: &ChunkPlan,
        mask: u64,
        namer: &mut Namer<'_>,
    ) {
        debug_assert_eq!(events.len(), plan.bits.len());
        let since = self.since;
        let runs = plan.runs.iter().filter(|r| r.second >= since);
        if !self.spec.filters.is_empty() || !self.spec.ranges.is_empty() {
            for run in runs {
                let bits = &plan.bits[run.start..run.end];
                for (e, b) in events[run.start..run.end].iter().zip(bits) {
                    if b & mask != 0 {
                        self.add(e, run.second, namer);
                    }
                }
            }
            return;
        }
        // No filter, no range (every built-in dataset): a run of events in one
        // second finds that second's counts once, not once per sample.
        let (stat, breakdown) = (self.spec.stat, self.spec.breakdown);
        let nfs = NfsCounting::of(catalog::STATISTICS[stat].counts, breakdown);
        for run in runs {
            let bits = &plan.bits[run.start..run.end];
            if bits.iter().all(|b| b & mask == 0) {
                continue;
            }
            let o = self.open.second(run.second);
            let events = &events[run.start..run.end];
            if let Some(nfs) = nfs {
                nfs.count(o, events, bits, mask);
                continue;
            }
            for (e, b) in events.iter().zip(bits) {
                if b & mask == 0 {
                    continue;
                }
                samples(stat, e, |s| {
                    o.total += s.value;
                    if let Some(dim) = breakdown {
                        o.count_key(s.key(dim).unwrap_or(RawKey::Name(NONE_KEY)), s.value);
                    }
                });
            }
        }
    }

    #[inline]
    pub(crate) fn add(&mut self, e: &Event, second: u64, namer: &mut Namer<'_>) {
        let spec = &self.spec;
        let memo = &mut self.filter_memo;
        let open = &mut self.open;
        samples(spec.stat, e, |s| {
            // Numbers are compared as they are, not by bucket: a band drilled from a
            // heatmap names its buckets' bounds, so it keeps exactly that band.
            for range in &spec.ranges {
                if !s.number(range.dim).is_some_and(|v| range.contains(v)) {
                    return;
                }
            }
            for (i, (dim, want)) in spec.filters.iter().enumerate() {
                let Some(key) = s.key(*dim) else { return };
                let pass = *memo
                    .entry((i, key))
                    .or_insert_with(|| namer.name(*dim, key) == *want);
                if !pass {
                    return;
                }
            }
            let o = open.second(second);
            o.total += s.value;
            if let Some(dim) = spec.breakdown {
                o.count_key(s.key(dim).unwrap_or(RawKey::Name(NONE_KEY)), s.value);
            }
        });
    }

    /// Seals seconds `from..=to`; returns the points they completed, for the archive.
    pub(crate) fn seal(
        &mut self,
        from: u64,
        to: u64,
        namer: &mut Namer<'_>,
    ) -> Vec<(Resolution, Point)> {
        let mut done = Vec::new();
        // Never before the dataset counts, nor over seconds already in its history:
        // after a restart, the first tick looks back an hour, and a user dataset's
        // `since` and restored seconds lie in that hour.
        let from = from
            .max(self.since)
            .max(self.history.seconds.back().map_or(0, |p| p.t + 1));
        // Seconds before `from` can only be stale leftovers of a long pause.
        self.open.drop_before(from);
        for second in from..=to {
            let Some(open) = self.open.take_first(second) else {
                done.extend(self.history.push_second(Point::empty(second, 1)));
                continue;
            };
            let mut keys: HashMap<String, u64> = HashMap::new();
            let mut bucket_counts: BTreeMap<(u64, u64), u64> = BTreeMap::new();
            let total = open.total;
            for (key, count) in open.into_keys() {
                match key {
                    RawKey::Bucket(i) => {
                        *bucket_counts.entry(buckets::bounds(i)).or_default() += count
                    }
                    _ => {
                        let dim = self.spec.breakdown.expect("keys imply a breakdown");
                        *keys.entry(namer.name(dim, key)).or_default() += count;
                    }
                }
            }
            done.extend(self.history.push_second(Point::from_counts(
                second,
                1,
                total,
                keys,
                bucket_counts,
            )));
        }
        // Bounded: a client touching millions of files cannot grow it for long.
        if self.filter_memo.len() > 100_000 {
            self.filter_memo.clear();
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Open` counts every key exactly as a plain map would, whatever the order keys come
    /// in: through the two recent slots (evicted into the map in any order), the bucket
    /// array, and names equal in content but at different addresses (which must count
    /// as one name, as the map's own equality does).
    #[test]
    fn open_second_counts_every_key_as_a_plain_map() {
        use proptest::prelude::*;
        let read_a: &'static str = "read";
        // The same text at another address: leaked from a String, never merged by the
        // compiler with the literal.
        let read_b: &'static str = Box::leak(String::from("read").into_boxed_str());
        assert!(!std::ptr::eq(read_a, read_b));
        let keys = [
            RawKey::Name(read_a),
            RawKey::Name(read_b),
            RawKey::Name("write"),
            RawKey::Direction(false),
            RawKey::Direction(true),
            RawKey::client("10.0.0.1".parse().unwrap()),
            RawKey::client("10.0.0.2".parse().unwrap()),
            RawKey::File(7, 1),
            RawKey::Bucket(0),
            RawKey::Bucket(buckets::index(80)),
            RawKey::Bucket(buckets::BUCKETS - 1),
        ];
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(
                &proptest::collection::vec((0..keys.len(), 1u64..1000), 0..200),
                |seq| {
                    let mut open = Open::default();
                    let mut plain: FastMap<RawKey, u64> = FastMap::default();
                    for &(k, v) in &seq {
                        open.count_key(keys[k], v);
                        *plain.entry(keys[k]).or_default() += v;
                    }
                    let got = open.into_keys();
                    prop_assert_eq!(got, plain);
                    Ok(())
                },
            )
            .unwrap();
    }

    /// `OpenSeconds` keeps counts per second as a `BTreeMap` would, whatever order the
    /// seconds come in (mostly ascending, sometimes an older one), and seals them as
    /// `DatasetState::seal` does: everything before `from` forgotten, then `from..=to`
    /// taken in order.
    #[test]
    fn open_seconds_keep_counts_as_an_ordered_map() {
        use proptest::prelude::*;
        // (second offset, value) counts, or a seal of [from, to] offsets when value is 0.
        let op = (0u64..8, 0u64..50);
        proptest::test_runner::TestRunner::default()
            .run(&proptest::collection::vec(op, 0..100), |ops| {
                let mut open = OpenSeconds::default();
                let mut plain: BTreeMap<u64, u64> = BTreeMap::new();
                for (i, &(second, value)) in ops.iter().enumerate() {
                    let second = 1000 + second;
                    if value > 0 {
                        open.second(second).total += value;
                        *plain.entry(second).or_default() += value;
                        continue;
                    }
                    let (from, to) = (second.saturating_sub(i as u64 % 3), second);
                    open.drop_before(from);
                    plain = plain.split_off(&from);
                    for s in from..=to {
                        let got = open.take_first(s).map(|o| o.total);
                        prop_assert_eq!(got, plain.remove(&s), "second {}", s);
                    }
                    let left: Vec<(u64, u64)> = open.0.iter().map(|(s, o)| (*s, o.total)).collect();
                    prop_assert_eq!(
                        left,
                        plain.iter().map(|(s, n)| (*s, *n)).collect::<Vec<_>>()
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    /// `SecondOf` gives every instant the second `unix_second` gives it, in any order,
    /// at the bounds of seconds and before the epoch.
    #[test]
    fn remembered_second_bounds_agree_with_the_arithmetic() {
        use proptest::prelude::*;
        let a = Analytics::new();
        let epoch = a.epoch;
        let early = epoch.checked_sub(Duration::from_secs(3)).unwrap_or(epoch);
        let whole = 1_000_000_000 - a.epoch_unix.subsec_nanos() as u64;
        // Offsets from `early` in ns, biased to the bounds of seconds.
        let offset = prop_oneof![
            0u64..20_000_000_000,
            (0u64..20, -2i64..=2)
                .prop_map(move |(s, d)| (3_000_000_000 + whole + s * 1_000_000_000)
                    .saturating_add_signed(d)),
        ];
        proptest::test_runner::TestRunner::default()
            .run(&proptest::collection::vec(offset, 1..100), |offsets| {
                let mut seconds = SecondOf::default();
                for ns in offsets {
                    let at = early + Duration::from_nanos(ns);
                    prop_assert_eq!(seconds.second(&a, at), a.unix_second(at), "{} ns", ns);
                }
                Ok(())
            })
            .unwrap();
    }
}
