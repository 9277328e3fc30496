//! Log-linear buckets for heatmaps (latency, I/O size, file offset).
//!
//! Each power of ten is cut into nine equal steps: [1,2), [2,3) ... [9,10), then
//! [10,20), [20,30) ... and so on. Relative resolution is 10-100% within a decade,
//! which is what a heatmap needs to tell 80 µs from 800 µs from 8 ms, and the bucket
//! of a value is found with a few comparisons, no floating point.
//!
//! Invariants (tested): buckets tile [0, u64::MAX] without gaps or overlap, in
//! increasing order of index; `index(v)` is the bucket whose `[low, high)` holds `v`.
//! Bucket 0 is [0, 1).

/// Steps per decade.
const STEPS: u64 = 9;
/// Whole decades 10^0 .. 10^18 fit in a u64; 10^19 up to u64::MAX is one last bucket.
const DECADES: u32 = 19;

/// Number of buckets: [0, 1), nine per whole decade, and [10^19, u64::MAX].
pub const BUCKETS: u32 = 1 + DECADES * STEPS as u32 + 1;

/// The bucket holding `v`.
pub fn index(v: u64) -> u32 {
    if v == 0 {
        return 0;
    }
    let decade = v.ilog10();
    let unit = 10u64.pow(decade);
    let step = v / unit; // 1..=9
    1 + decade * STEPS as u32 + (step - 1) as u32
}

/// `[low, high)` of bucket `i`; the last bucket's `high` saturates at u64::MAX.
pub fn bounds(i: u32) -> (u64, u64) {
    assert!(i < BUCKETS, "bucket {i} out of range");
    if i == 0 {
        return (0, 1);
    }
    let decade = (i - 1) / STEPS as u32;
    let step = ((i - 1) % STEPS as u32) as u64 + 1;
    let unit = 10u64.pow(decade);
    let low = unit * step;
    (low, unit.saturating_mul(step + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_tile_the_range_in_order() {
        let mut expect_low = 0;
        for i in 0..BUCKETS {
            let (low, high) = bounds(i);
            assert_eq!(low, expect_low, "bucket {i}");
            assert!(high > low);
            assert_eq!(index(low), i);
            assert_eq!(index(high - 1), i);
            expect_low = high;
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        assert_eq!(bounds(index(1500)), (1000, 2000));
        assert_eq!(bounds(index(7)), (7, 8));
        assert_eq!(bounds(index(10_000_000)), (10_000_000, 20_000_000));
    }

    proptest! {
        #[test]
        fn every_value_is_inside_its_bucket(v in any::<u64>()) {
            let (low, high) = bounds(index(v));
            prop_assert!(low <= v && (v < high || high == u64::MAX));
        }
    }
}
