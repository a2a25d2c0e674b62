//! A log-linear latency histogram (the HDR layout): exact below 64 ns, then 32 buckets per power
//! of two, so every recorded value is known to within 1/32 (about 3 %) of itself. It is one fixed
//! array allocated when the test starts; recording a value is a few integer operations and never
//! allocates, so timing every iteration does not disturb what is being timed.

/// log2 of the number of exact values (and twice the buckets per power of two above them).
const SUB_BITS: u32 = 6;
/// Buckets per power of two above the exact range.
const HALF: usize = 1 << (SUB_BITS - 1);
/// Enough buckets for any `u64` value.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * HALF + HALF;

/// Counts of values (nanoseconds) in log-linear buckets, plus the exact min and max.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish()
    }
}

/// The bucket of `v`.
#[inline]
fn index(v: u64) -> usize {
    if v < (1 << SUB_BITS) {
        return v as usize;
    }
    let top = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = top - (SUB_BITS - 1); // >= 1
    shift as usize * HALF + (v >> shift) as usize
}

/// The smallest value of bucket `i` and the bucket's width.
fn bucket_range(i: usize) -> (u64, u64) {
    if i < (1 << SUB_BITS) {
        return (i as u64, 1);
    }
    let shift = (i / HALF - 1) as u32;
    let sub = (i % HALF + HALF) as u64;
    (sub << shift, 1 << shift)
}

impl Histogram {
    /// An empty histogram (the one allocation).
    pub fn new() -> Histogram {
        Histogram { counts: Box::new([0; BUCKETS]), total: 0, min: u64::MAX, max: 0 }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Values recorded.
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The smallest value (0 when empty).
    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    /// The largest value.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0..=1): the middle of the bucket holding the `ceil(q * n)`-th
    /// smallest value, kept within the exact min and max.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = bucket_range(i);
                return (low + (width - 1) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_their_values() {
        let mut expected = 0usize;
        let mut v = 0u64;
        while v < 1 << 24 {
            let i = index(v);
            assert!(i == expected || i == expected + 1, "v={v} i={i} expected={expected}");
            expected = i;
            let (low, width) = bucket_range(i);
            assert!(low <= v && v < low + width, "v={v} bucket {i} = [{low}, +{width})");
            v += 1 + v / 97;
        }
        assert!(index(u64::MAX) < BUCKETS);
        let (low, width) = bucket_range(index(u64::MAX));
        assert_eq!(low.wrapping_add(width), 0, "the last bucket ends at 2^64");
    }

    #[test]
    fn relative_error_is_within_one_thirty_second() {
        for v in [100u64, 1_000, 12_345, 999_999, 123_456_789, 1 << 40] {
            let (low, width) = bucket_range(index(v));
            assert!(width as f64 / low as f64 <= 1.0 / 32.0 + 1e-12, "v={v}");
        }
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        assert_eq!(h.count(), 1000);
        assert_eq!(h.min(), 1000);
        assert_eq!(h.max(), 1_000_000);
        for (q, exact) in [(0.5, 500_000.0), (0.99, 990_000.0), (0.999, 999_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - exact).abs() / exact < 0.04, "q={q}: {got} vs {exact}");
        }
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(Histogram::new().quantile(0.5), 0);
    }
}
