//! Results and their output: one `key=value` line per test, stable for scripts to parse.
//!
//! ```text
//! tag_lat size=8 iters=100000 latency_us=4.120 avg_us=4.302 min_us=4.011 max_us=6.870 batches=100
//! tag_bw size=1048576 iters=2000 window=16 bandwidth_MBps=5120.33 bandwidth_GBps=5.120 msg_rate=4883 elapsed_s=0.410
//! ```
//!
//! Latencies are one-way (RTT/2) in microseconds: `latency_us` is the median of the per-batch
//! averages, `avg_us` the whole run's average, `min_us`/`max_us` the extreme batches. Bandwidth
//! counts MB = 10^6 bytes and GB = 10^9 bytes.

use std::fmt;
use std::time::Duration;

use crate::perf::args::TestSpec;

/// What a latency test measured: the time of each batch of round trips.
#[derive(Clone, Debug)]
pub struct Latency {
    pub spec: TestSpec,
    /// (round trips, elapsed) per batch, in order.
    pub batches: Vec<(u64, Duration)>,
}

/// What a bandwidth test measured.
#[derive(Clone, Debug)]
pub struct Bandwidth {
    pub spec: TestSpec,
    pub elapsed: Duration,
}

/// A test's result.
#[derive(Clone, Debug)]
pub enum Report {
    Latency(Latency),
    Bandwidth(Bandwidth),
}

impl Latency {
    /// One-way latency of each batch, in microseconds.
    fn one_way_us(&self) -> Vec<f64> {
        self.batches.iter().map(|&(n, t)| t.as_secs_f64() * 1e6 / (2.0 * n.max(1) as f64)).collect()
    }

    /// Median of the per-batch one-way latencies.
    pub fn median_us(&self) -> f64 {
        median(self.one_way_us())
    }

    /// The whole run's one-way average.
    pub fn average_us(&self) -> f64 {
        let n: u64 = self.batches.iter().map(|b| b.0).sum();
        let t: f64 = self.batches.iter().map(|b| b.1.as_secs_f64()).sum();
        t * 1e6 / (2.0 * n.max(1) as f64)
    }
}

impl Bandwidth {
    /// Bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        (self.spec.size as f64 * self.spec.iters as f64) / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Messages per second.
    pub fn msg_rate(&self) -> f64 {
        self.spec.iters as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Latency(lat) => {
                let per_batch = lat.one_way_us();
                let min = per_batch.iter().copied().fold(f64::INFINITY, f64::min);
                let max = per_batch.iter().copied().fold(0.0, f64::max);
                write!(
                    f,
                    "{} size={} iters={} latency_us={:.3} avg_us={:.3} min_us={:.3} max_us={:.3} batches={}",
                    lat.spec.kind,
                    lat.spec.size,
                    lat.spec.iters,
                    lat.median_us(),
                    lat.average_us(),
                    if min.is_finite() { min } else { 0.0 },
                    max,
                    lat.batches.len()
                )
            }
            Report::Bandwidth(bw) => {
                let bps = bw.bytes_per_sec();
                write!(
                    f,
                    "{} size={} iters={} window={} bandwidth_MBps={:.2} bandwidth_GBps={:.3} msg_rate={:.0} elapsed_s={:.3}",
                    bw.spec.kind,
                    bw.spec.size,
                    bw.spec.iters,
                    bw.spec.window,
                    bps / 1e6,
                    bps / 1e9,
                    bw.msg_rate(),
                    bw.elapsed.as_secs_f64()
                )
            }
        }
    }
}

/// Times the measured iterations of a latency test in batches of `batch` round trips.
pub struct BatchClock {
    batch: u64,
    in_batch: u64,
    start: std::time::Instant,
    pub batches: Vec<(u64, Duration)>,
}

impl BatchClock {
    /// A clock for `iters` iterations, started now.
    pub fn start(iters: u64, batch: u64) -> BatchClock {
        let batch = batch.clamp(1, iters.max(1));
        BatchClock {
            batch,
            in_batch: 0,
            start: std::time::Instant::now(),
            batches: Vec::with_capacity((iters / batch + 1) as usize),
        }
    }

    /// Counts one round trip; closes the batch when it is full.
    #[inline]
    pub fn tick(&mut self) {
        self.in_batch += 1;
        if self.in_batch == self.batch {
            self.close();
        }
    }

    /// Closes the last, possibly partial, batch.
    pub fn finish(mut self) -> Vec<(u64, Duration)> {
        if self.in_batch > 0 {
            self.close();
        }
        self.batches
    }

    fn close(&mut self) {
        let now = std::time::Instant::now();
        self.batches.push((self.in_batch, now - self.start));
        self.start = now;
        self.in_batch = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::args::TestKind;

    fn spec(kind: TestKind) -> TestSpec {
        TestSpec { kind, size: 8, iters: 4, warmup: 0, window: 1 }
    }

    #[test]
    fn latency_is_half_the_round_trip_and_the_median_of_batches() {
        let lat = Latency {
            spec: spec(TestKind::TagLat),
            batches: vec![
                (1, Duration::from_micros(10)),
                (1, Duration::from_micros(2)),
                (1, Duration::from_micros(4)),
                (1, Duration::from_micros(100)),
            ],
        };
        assert!((lat.median_us() - 3.5).abs() < 1e-9);
        assert!((lat.average_us() - 116.0 / 8.0).abs() < 1e-9);
        let line = Report::Latency(lat).to_string();
        assert!(line.starts_with("tag_lat size=8 iters=4 latency_us=3.500 "), "{line}");
    }

    #[test]
    fn bandwidth_counts_decimal_megabytes() {
        let bw = Bandwidth {
            spec: TestSpec { kind: TestKind::TagBw, size: 1_000_000, iters: 10, warmup: 0, window: 16 },
            elapsed: Duration::from_secs(1),
        };
        let line = Report::Bandwidth(bw).to_string();
        assert!(line.contains(" bandwidth_MBps=10.00 bandwidth_GBps=0.010 msg_rate=10 "), "{line}");
    }

    #[test]
    fn the_clock_closes_full_and_partial_batches() {
        let mut clock = BatchClock::start(5, 2);
        for _ in 0..5 {
            clock.tick();
        }
        let batches = clock.finish();
        assert_eq!(batches.iter().map(|b| b.0).collect::<Vec<_>>(), vec![2, 2, 1]);
    }
}
