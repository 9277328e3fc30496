//! Stream detection for read-ahead (the idea of ZFS's zfetch, written for shoal).
//!
//! A per-object detector keeps up to `max_streams` streams. A demand read that starts
//! where a stream's last read ended continues it: the stream's distance doubles (up to
//! `max_distance_bytes`, or `extended_distance_bytes` while the caller says the pool's
//! read-ahead budget has room for it) and the blocks between what was already issued and
//! `read end + distance` are returned for prefetch, once they add up to an eighth of the
//! distance (so read-ahead goes to the disks in large batches). A read that matches no
//! stream starts one (no prefetch on the first read: one read is not a pattern). Streams
//! idle past `stream_timeout` are dropped, the least recently used one is replaced when
//! full.
//! Once a stream has been continued exactly, reads within `REORDER_BLOCKS` of its end
//! count as its own (a client with many reads in flight delivers them out of order).
//! Every stream has an id, unique in the process (`StreamId`): read-ahead is bounded
//! per stream (`pool::read_ahead_gate`), so two readers of one file, each its own
//! stream, have a bound each.
//! Invariant: a block id is returned at most once per stream.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A read-ahead stream, unique among every detector's streams for the process's life.
pub type StreamId = u64;

static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// How far out of order a stream's reads may arrive, in blocks.
pub const REORDER_BLOCKS: u64 = 32;

/// Read-ahead is issued once the unissued part of the window reaches this fraction of
/// the distance (at the full 32 MiB distance, 4 MiB at a time).
const ISSUE_FRACTION: u64 = 8;

#[derive(Debug, Clone)]
pub struct PrefetchConfig {
    pub max_streams: usize,
    pub initial_distance_blocks: u64,
    pub max_distance_bytes: u64,
    /// The distance a stream may grow to while the pool's read-ahead budget has room
    /// for it (`may_extend`): one stream keeps more of the disk busy while its reader
    /// lags, and many streams keep `max_distance_bytes` each.
    pub extended_distance_bytes: u64,
    pub stream_timeout: Duration,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        PrefetchConfig {
            max_streams: 8,
            initial_distance_blocks: 2,
            max_distance_bytes: 32 << 20,
            extended_distance_bytes: 64 << 20,
            stream_timeout: Duration::from_secs(2),
        }
    }
}

impl PrefetchConfig {
    /// Whether streams may read `extended_distance_bytes` ahead now: only while the
    /// pool's read-ahead issued and not yet read (`outstanding_bytes`: queued, being
    /// read, or cached and unread), plus one stream's extension, stays within half the
    /// cache. One stream then reads 64 MiB ahead; four streams of a 256 MiB cache keep
    /// 32 MiB each. Half the cache, so read-ahead is not evicted before its reader
    /// comes; queued and in-flight bytes count, because on a pool that waits on its
    /// disk little sits in the cache, and four 64 MiB windows there slowed four streams.
    pub fn may_extend(&self, outstanding_bytes: u64, cache_max_bytes: u64) -> bool {
        let extension = self
            .extended_distance_bytes
            .saturating_sub(self.max_distance_bytes);
        extension > 0 && outstanding_bytes.saturating_add(extension) <= cache_max_bytes / 2
    }
}

#[derive(Debug, Clone)]
struct Stream {
    id: StreamId,
    next_blkid: u64,
    /// Continued exactly at least once: only then are out-of-order reads its own.
    confirmed: bool,
    issued_until: u64,
    distance: u64,
    last_used: Instant,
}

#[derive(Debug)]
pub struct StreamDetector {
    cfg: PrefetchConfig,
    streams: Vec<Stream>,
}

impl StreamDetector {
    pub fn new(cfg: PrefetchConfig) -> Self {
        StreamDetector {
            cfg,
            streams: Vec::new(),
        }
    }

    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Notes a demand read of `nblocks` from `blkid`; returns the stream it belongs to
    /// (the one it continues, or the one it starts) and the blocks to read ahead.
    /// `budget`: the pool's read-ahead outstanding and the cache's bound, asked only
    /// when the read continues a stream (it costs the caller a lock): the stream may
    /// then grow to `extended_distance_bytes` if `may_extend` allows; otherwise a
    /// stream beyond `max_distance_bytes` shrinks back (what it issued stays issued,
    /// and it issues again once its reader is within the shorter distance).
    pub fn on_read(
        &mut self,
        blkid: u64,
        nblocks: u64,
        block_size: u64,
        now: Instant,
        budget: impl FnOnce() -> (u64, u64),
    ) -> (StreamId, Range<u64>) {
        let timeout = self.cfg.stream_timeout;
        self.streams
            .retain(|s| now.saturating_duration_since(s.last_used) < timeout);
        let end = blkid + nblocks.max(1);
        // Reads of one stream arrive slightly out of order when a client keeps many in
        // flight and server threads take them in parallel. A read that continues a
        // stream exactly confirms it; once confirmed, a read within `REORDER_BLOCKS` of
        // its end belongs to it too. A read that ends before the stream's end is a late
        // arrival and changes nothing; one past it moves the end forward.
        let found = self.streams.iter().position(|s| {
            let exact = blkid == s.next_blkid || (blkid < s.next_blkid && end > s.next_blkid);
            let near =
                blkid <= s.next_blkid + REORDER_BLOCKS && end + REORDER_BLOCKS > s.next_blkid;
            exact || (s.confirmed && near)
        });
        if let Some(i) = found {
            if end <= self.streams[i].next_blkid {
                self.streams[i].last_used = now;
                return (self.streams[i].id, end..end);
            }
            let mut s = self.streams.swap_remove(i);
            s.last_used = now;
            s.confirmed = true;
            s.next_blkid = end;
            let (outstanding, cache_max) = budget();
            let cap = if self.cfg.may_extend(outstanding, cache_max) {
                self.cfg
                    .extended_distance_bytes
                    .max(self.cfg.max_distance_bytes)
            } else {
                self.cfg.max_distance_bytes
            };
            s.distance = (s.distance * 2).min((cap / block_size.max(1)).max(1));
            // Streams started by this stream's early arrivals are this stream: merge them
            // so no block is issued twice.
            self.streams.retain(|o| {
                let twin = o.next_blkid.abs_diff(end) <= REORDER_BLOCKS;
                if twin {
                    s.issued_until = s.issued_until.max(o.issued_until);
                }
                !twin
            });
            let from = s.issued_until.max(end);
            let to = end + s.distance;
            // Issue in batches of an eighth of the distance, not a block per read: the
            // batch becomes one aggregated device read per leaf (a 128K record alone is
            // 32K per leaf of a raidz2 of 6, and a disk wants large requests).
            let batch = (s.distance / ISSUE_FRACTION).max(1);
            let issue = to.saturating_sub(from) >= batch;
            if issue {
                s.issued_until = to;
            }
            let id = s.id;
            self.streams.push(s);
            return (id, if issue { from..to } else { end..end });
        }
        if self.streams.len() >= self.cfg.max_streams {
            let lru = (0..self.streams.len())
                .min_by_key(|&i| self.streams[i].last_used)
                .unwrap();
            self.streams.remove(lru);
        }
        let id = NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed);
        self.streams.push(Stream {
            id,
            next_blkid: end,
            confirmed: false,
            issued_until: end,
            distance: (self.cfg.initial_distance_blocks / 2).max(1),
            last_used: now,
        });
        (id, end..end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget with room for any stream, and one with none.
    fn room() -> (u64, u64) {
        (0, u64::MAX)
    }
    fn no_room() -> (u64, u64) {
        (0, 0)
    }

    #[test]
    fn sequential_scan_grows_to_the_cap_without_reissuing() {
        let mut d = StreamDetector::new(PrefetchConfig::default());
        let t = Instant::now();
        let bs = 128 * 1024;
        let mut issued = std::collections::HashSet::new();
        let mut widths = Vec::new();
        for b in 0..200u64 {
            let r = d.on_read(b, 1, bs, t, no_room).1;
            widths.push(r.end.saturating_sub(r.start));
            for x in r {
                assert!(issued.insert(x), "block {x} issued twice");
                assert!(x > b);
            }
        }
        // A jump back to the start is one read, not a pattern: no read-ahead.
        assert!(d.on_read(0, 1, bs, t, no_room).1.is_empty());
        // Distance capped at 32 MiB / 128 KiB = 256 blocks ahead.
        assert!(issued.iter().all(|&x| x <= 200 + 256));
        assert!(issued.contains(&150));
        assert!(widths[1] >= 1);
    }

    /// Once the distance is at its cap, read-ahead goes out in batches of an eighth of
    /// it (4 MiB of 128K blocks), never a block at a time, and still keeps every block
    /// ahead of the reader.
    #[test]
    fn steady_read_ahead_is_issued_in_batches() {
        let mut d = StreamDetector::new(PrefetchConfig::default());
        let t = Instant::now();
        let bs = 128 * 1024;
        let mut issued = std::collections::BTreeSet::new();
        let mut steady_batches = 0;
        for b in 0..1000u64 {
            let r = d.on_read(b, 1, bs, t, no_room).1;
            if b > 300 && !r.is_empty() {
                assert!(
                    r.end - r.start >= 32,
                    "a batch of {} blocks at {b}",
                    r.end - r.start
                );
                steady_batches += 1;
            }
            for x in r {
                assert!(issued.insert(x), "block {x} issued twice");
            }
            // Everything up to the near edge of the window has been issued.
            let covered = (b + 1..b + 1 + 256 - 32).all(|x| issued.contains(&x));
            assert!(b < 100 || covered, "a hole in the read-ahead ahead of {b}");
        }
        assert!(steady_batches >= 600 / 32, "{steady_batches} batches");
    }

    /// With room in the budget a stream reads `extended_distance_bytes` ahead; when
    /// the room is gone it issues nothing until its reader is back within the
    /// normal distance, then goes on at that distance. No block is issued twice across
    /// the change.
    #[test]
    fn extended_distance_is_granted_and_withdrawn_per_read() {
        let mut d = StreamDetector::new(PrefetchConfig::default());
        let t = Instant::now();
        let bs = 128 * 1024;
        let mut issued = std::collections::BTreeSet::new();
        for b in 0..1200u64 {
            for x in d.on_read(b, 1, bs, t, room).1 {
                assert!(issued.insert(x), "block {x} issued twice");
            }
        }
        let far = *issued.last().unwrap();
        assert!(far > 1199 + 448 && far <= 1199 + 512, "reads {far} at 1199");
        // No room: quiet until the reader is within 256 blocks of `far`.
        for b in 1200..far - 256 {
            assert!(
                d.on_read(b, 1, bs, t, no_room).1.is_empty(),
                "issued at {b}"
            );
        }
        for b in far - 256..far + 300 {
            for x in d.on_read(b, 1, bs, t, no_room).1 {
                assert!(issued.insert(x), "block {x} issued twice");
                assert!(x <= b + 256, "block {x} at {b}");
            }
        }
        assert!(*issued.last().unwrap() > far + 300, "the stream went on");
    }

    /// `k` streams read in turn while everything issued counts as outstanding until
    /// its reader passes it (a disk that delivers just in time): how far ahead each
    /// stream is after a long run, in MiB.
    fn shared_budget_windows(k: usize) -> Vec<u64> {
        let cfg = PrefetchConfig::default();
        let cache = 256u64 << 20;
        let bs = 128 * 1024;
        let mut detectors: Vec<StreamDetector> =
            (0..k).map(|_| StreamDetector::new(cfg.clone())).collect();
        let mut far = vec![0u64; k];
        let t = Instant::now();
        for b in 0..4000u64 {
            for (i, d) in detectors.iter_mut().enumerate() {
                let outstanding: u64 = far.iter().map(|&f| f.saturating_sub(b) * bs).sum();
                let r = d.on_read(b, 1, bs, t, || (outstanding, cache)).1;
                if !r.is_empty() {
                    far[i] = far[i].max(r.end);
                }
            }
        }
        far.iter()
            .map(|&f| (f.saturating_sub(4000) * bs) >> 20)
            .collect()
    }

    /// One stream reads the extended 64 MiB ahead within the budget (half of a 256 MiB
    /// cache); two and four stay within it (give or take a read-ahead batch each) and
    /// keep at least the normal 32 MiB each, less the batch not yet issued.
    #[test]
    fn streams_share_the_read_ahead_budget() {
        let one = shared_budget_windows(1);
        assert!(one[0] > 56 && one[0] <= 64, "one stream: {one:?} MiB ahead");
        let two = shared_budget_windows(2);
        assert!(
            two.iter().sum::<u64>() <= 128 + 16,
            "two streams: {two:?} MiB ahead"
        );
        assert!(
            two.iter().all(|&w| w >= 28),
            "two streams: {two:?} MiB ahead"
        );
        let four = shared_budget_windows(4);
        assert!(
            four.iter().sum::<u64>() <= 128 + 16,
            "four: {four:?} MiB ahead"
        );
        assert!(
            four.iter().all(|&w| (28..=36).contains(&w)),
            "four: {four:?} MiB ahead"
        );
        let cfg = PrefetchConfig::default();
        assert!(cfg.may_extend(96 << 20, 256 << 20));
        assert!(!cfg.may_extend((96 << 20) + 1, 256 << 20));
        assert!(!cfg.may_extend(0, 32 << 20), "a small cache never extends");
    }

    /// Sixteen reads in flight reach the detector in a shuffled order: still one
    /// stream, reading ahead to the full distance, never issuing a block twice.
    #[test]
    fn reordered_reads_stay_one_stream() {
        let mut d = StreamDetector::new(PrefetchConfig::default());
        let t = Instant::now();
        let bs = 128 * 1024;
        let mut issued = std::collections::HashSet::new();
        let mut x = 12345u64;
        for window in 0..50u64 {
            let mut ids: Vec<u64> = (window * 16..window * 16 + 16).collect();
            for i in (1..ids.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ids.swap(i, (x % (i as u64 + 1)) as usize);
            }
            for b in ids {
                for p in d.on_read(b, 1, bs, t, no_room).1 {
                    assert!(issued.insert(p), "block {p} issued twice");
                }
            }
        }
        assert_eq!(d.stream_count(), 1);
        // By the end the stream reads the full 256 blocks (32 MiB) ahead.
        assert!(issued.contains(&(800 + 200)), "{}", issued.len());
    }

    #[test]
    fn interleaved_streams_and_random_reads() {
        let mut d = StreamDetector::new(PrefetchConfig::default());
        let t = Instant::now();
        let mut a_hits = 0;
        let mut b_hits = 0;
        for i in 0..20u64 {
            a_hits += d.on_read(i, 1, 4096, t, no_room).1.count();
            b_hits += d.on_read(10_000 + i, 1, 4096, t, no_room).1.count();
        }
        assert!(a_hits > 0 && b_hits > 0);
        let mut r = StreamDetector::new(PrefetchConfig::default());
        let mut x = 7u64;
        let mut got = 0;
        for _ in 0..100 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            got += r.on_read((x >> 20) % 1_000_000, 1, 4096, t, room).1.count();
        }
        assert_eq!(got, 0, "random reads must not trigger prefetch");
    }

    #[test]
    fn idle_streams_time_out() {
        let mut d = StreamDetector::new(PrefetchConfig::default());
        let t = Instant::now();
        d.on_read(0, 1, 4096, t, no_room);
        d.on_read(1, 1, 4096, t, no_room);
        assert_eq!(d.stream_count(), 1);
        let later = t + Duration::from_secs(3);
        assert!(d.on_read(2, 1, 4096, later, no_room).1.is_empty());
        assert_eq!(d.stream_count(), 1, "old stream dropped, new one started");
    }

    #[test]
    fn each_stream_has_its_own_id_and_keeps_it() {
        let mut d = StreamDetector::new(PrefetchConfig::default());
        let t = Instant::now();
        let (a, _) = d.on_read(0, 1, 4096, t, no_room);
        let (b, _) = d.on_read(10_000, 1, 4096, t, no_room);
        assert_ne!(a, b, "two streams of one object");
        for i in 1..20 {
            assert_eq!(d.on_read(i, 1, 4096, t, no_room).0, a);
            assert_eq!(d.on_read(10_000 + i, 1, 4096, t, no_room).0, b);
        }
        let mut other = StreamDetector::new(PrefetchConfig::default());
        let c = other.on_read(0, 1, 4096, t, no_room).0;
        assert!(![a, b].contains(&c), "ids are unique across detectors");
    }
}
