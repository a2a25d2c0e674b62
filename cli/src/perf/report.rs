//! Results and their output, one record per test, in one of three stable formats:
//!
//! - `key=value` lines (the default), for people and `grep`/`awk`:
//!
//!   ```text
//!   tag_lat size=8 iters=100000 latency_us=4.120 avg_us=4.302 min_us=3.801 p50_us=4.105 p99_us=6.870 p999_us=12.400 max_us=40.112 batches=100
//!   tag_bw size=1048576 iters=2000 window=16 bandwidth_MBps=5120.33 bandwidth_GBps=5.120 msg_rate=4883 elapsed_s=0.409614
//!   ```
//!
//! - `--csv`: a header line, then one line per test with every field of [`FIELDS`] (empty where a
//!   field does not apply: no latency for a bandwidth test and the reverse).
//! - `--json`: one JSON object per test and line with the same fields (`null` where they do not
//!   apply).
//!
//! Latencies are in microseconds. Ping-pong tests report one-way figures (half a round trip);
//! one-sided operations (get, atomics) report the whole operation, as `ucx_perftest` does.
//! `latency_us` is the median of the per-batch averages, `avg_us` the whole run's average;
//! `min_us`, `p50_us`, `p99_us`, `p999_us`, `max_us` come from a histogram of every iteration
//! (see [`crate::perf::hist`]). Bandwidth counts MB = 10^6 bytes and GB = 10^9 bytes.

use std::fmt::{self, Write as _};
use std::time::Duration;

use crate::perf::tsc::{self, Stamp};

use crate::perf::args::TestSpec;
use crate::perf::hist::Histogram;

/// The fields of a CSV or JSON record, in order. Scripts rely on these names.
pub const FIELDS: [&str; 19] = [
    "test",
    "size",
    "iters",
    "warmup",
    "window",
    "mem",
    "validate",
    "tls",
    "latency_us",
    "avg_us",
    "min_us",
    "p50_us",
    "p99_us",
    "p999_us",
    "max_us",
    "bandwidth_MBps",
    "bandwidth_GBps",
    "msg_rate",
    "elapsed_s",
];

/// What a latency test measured: every iteration in a histogram, and the time of each batch.
#[derive(Clone, Debug)]
pub struct Latency {
    pub spec: TestSpec,
    /// (iterations, elapsed) per batch, in order.
    pub batches: Vec<(u64, Duration)>,
    /// Nanoseconds of each iteration (a whole round trip or operation).
    pub hist: Histogram,
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

/// The latency figures of one test, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyFigures {
    pub median_batch: f64,
    pub avg: f64,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    /// What one iteration is divided by: 2 for ping-pongs (one-way), 1 otherwise.
    fn divisor(&self) -> f64 {
        if self.spec.kind.is_ping_pong() {
            2.0
        } else {
            1.0
        }
    }

    /// Per-batch latencies, in microseconds.
    fn per_batch_us(&self) -> Vec<f64> {
        let d = self.divisor();
        self.batches.iter().map(|&(n, t)| t.as_secs_f64() * 1e6 / (d * n.max(1) as f64)).collect()
    }

    /// Median of the per-batch latencies.
    pub fn median_us(&self) -> f64 {
        median(self.per_batch_us())
    }

    /// The whole run's average.
    pub fn average_us(&self) -> f64 {
        let n: u64 = self.batches.iter().map(|b| b.0).sum();
        let t: f64 = self.batches.iter().map(|b| b.1.as_secs_f64()).sum();
        t * 1e6 / (self.divisor() * n.max(1) as f64)
    }

    /// Every latency figure of the test.
    pub fn figures(&self) -> LatencyFigures {
        let us = |ns: u64| ns as f64 / 1e3 / self.divisor();
        LatencyFigures {
            median_batch: self.median_us(),
            avg: self.average_us(),
            min: us(self.hist.min()),
            p50: us(self.hist.quantile(0.5)),
            p99: us(self.hist.quantile(0.99)),
            p999: us(self.hist.quantile(0.999)),
            max: us(self.hist.max()),
        }
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

impl Report {
    /// The test's spec.
    pub fn spec(&self) -> &TestSpec {
        match self {
            Report::Latency(l) => &l.spec,
            Report::Bandwidth(b) => &b.spec,
        }
    }

    /// The values of [`FIELDS`] in order ([`Value::Null`] where a field does not apply).
    /// Numbers are formatted once here so CSV and JSON carry the same digits.
    fn values(&self, tls: &str) -> Vec<Value> {
        let spec = self.spec();
        let mut v = vec![
            Value::Text(spec.kind.name().to_owned()),
            Value::Int(spec.size as u64),
            Value::Int(spec.iters),
            Value::Int(spec.warmup),
            Value::Int(u64::from(spec.window)),
            Value::Text(spec.mem.name().to_owned()),
            Value::Bool(spec.validate),
            Value::Text(tls.to_owned()),
        ];
        match self {
            Report::Latency(lat) => {
                let f = lat.figures();
                for x in [f.median_batch, f.avg, f.min, f.p50, f.p99, f.p999, f.max] {
                    v.push(Value::Num(x, 3));
                }
                v.extend([Value::Null, Value::Null, Value::Null, Value::Null]);
            }
            Report::Bandwidth(bw) => {
                v.extend(std::iter::repeat_n(Value::Null, 7));
                let bps = bw.bytes_per_sec();
                v.push(Value::Num(bps / 1e6, 2));
                v.push(Value::Num(bps / 1e9, 3));
                v.push(Value::Num(bw.msg_rate(), 0));
                v.push(Value::Num(bw.elapsed.as_secs_f64(), 6));
            }
        }
        debug_assert_eq!(v.len(), FIELDS.len());
        v
    }

    /// One CSV line (no trailing newline).
    pub fn csv(&self, tls: &str) -> String {
        let mut line = String::new();
        for (i, value) in self.values(tls).into_iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            match value {
                Value::Text(t) if t.contains([',', '"', '\n']) => {
                    let _ = write!(line, "\"{}\"", t.replace('"', "\"\""));
                }
                Value::Text(t) => line.push_str(&t),
                Value::Int(n) => {
                    let _ = write!(line, "{n}");
                }
                Value::Num(x, digits) => {
                    let _ = write!(line, "{x:.digits$}");
                }
                Value::Bool(b) => line.push_str(if b { "true" } else { "false" }),
                Value::Null => {}
            }
        }
        line
    }

    /// One JSON object (no trailing newline).
    pub fn json(&self, tls: &str) -> String {
        let mut map = serde_json::Map::new();
        for (name, value) in FIELDS.iter().zip(self.values(tls)) {
            let value = match value {
                Value::Text(t) => serde_json::Value::String(t),
                Value::Int(n) => serde_json::Value::from(n),
                // Rounded like the other formats; a non-finite value (never expected) is null.
                Value::Num(x, digits) => format!("{x:.digits$}")
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(serde_json::Value::Null, serde_json::Value::Number),
                Value::Bool(b) => serde_json::Value::Bool(b),
                Value::Null => serde_json::Value::Null,
            };
            map.insert((*name).to_owned(), value);
        }
        serde_json::Value::Object(map).to_string()
    }
}

/// One field's value before formatting.
#[derive(Clone)]
enum Value {
    Text(String),
    Int(u64),
    /// A number and its digits after the point.
    Num(f64, usize),
    Bool(bool),
    Null,
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
                let x = lat.figures();
                write!(
                    f,
                    "{} size={} iters={} latency_us={:.3} avg_us={:.3} min_us={:.3} p50_us={:.3} p99_us={:.3} p999_us={:.3} max_us={:.3} batches={}",
                    lat.spec.kind,
                    lat.spec.size,
                    lat.spec.iters,
                    x.median_batch,
                    x.avg,
                    x.min,
                    x.p50,
                    x.p99,
                    x.p999,
                    x.max,
                    lat.batches.len()
                )?;
                if lat.spec.endpoints > 1 {
                    write!(f, " endpoints={}", lat.spec.endpoints)?;
                }
                Ok(())
            }
            Report::Bandwidth(bw) => {
                let bps = bw.bytes_per_sec();
                write!(
                    f,
                    "{} size={} iters={} window={} bandwidth_MBps={:.2} bandwidth_GBps={:.3} msg_rate={:.0} elapsed_s={:.6}",
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

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `key=value` lines after `#` header lines.
    Text,
    /// A CSV header, then records.
    Csv,
    /// JSON objects, one per line.
    Json,
}

/// Times the measured iterations of a latency test: every iteration into the histogram, and
/// batches of `batch` iterations. One clock read per iteration (the end of one iteration is the
/// start of the next), and no allocation after [`LatClock::start`].
///
/// An iteration only stores its raw clock delta; conversion to nanoseconds and the histogram wait
/// for [`LatClock::finish`]. The loop being timed is as short as a shared-memory put (tens of
/// nanoseconds), so a per-iteration histogram update (a float conversion and a bucket search) would
/// be a visible part of what it measures.
pub struct LatClock {
    batch: u64,
    in_batch: u64,
    batch_start: Stamp,
    prev: Stamp,
    batches: Vec<(u64, Duration)>,
    /// Raw clock deltas of the iterations, filled in order up to `recorded`. Written in full
    /// when the clock starts, so no iteration meets a first touch of a page (a fault).
    deltas: Vec<u64>,
    recorded: usize,
    /// Iterations beyond `deltas`' capacity, recorded directly.
    hist: Histogram,
}

/// Iterations whose deltas are kept raw (8 bytes each); longer runs record the rest directly.
const RAW_DELTAS_MAX: u64 = 1 << 22;

impl LatClock {
    /// A clock for `iters` iterations, started now.
    pub fn start(iters: u64, batch: u64) -> LatClock {
        Self::start_keeping(iters, batch, RAW_DELTAS_MAX)
    }

    /// [`LatClock::start`], keeping at most `raw_max` raw deltas.
    fn start_keeping(iters: u64, batch: u64, raw_max: u64) -> LatClock {
        let batch = batch.clamp(1, iters.max(1));
        let hist = Histogram::new();
        let deltas = vec![0u64; iters.min(raw_max) as usize];
        // `vec![0; n]` may map zero pages lazily: touch every one now, outside the timed loop.
        let mut deltas = deltas;
        for page in deltas.chunks_mut(512) {
            page[0] = 1;
        }
        tsc::init();
        let now = tsc::now();
        LatClock {
            batch,
            in_batch: 0,
            batch_start: now,
            prev: now,
            batches: Vec::with_capacity((iters / batch + 1) as usize),
            deltas,
            recorded: 0,
            hist,
        }
    }

    /// Ends one iteration now; closes the batch when it is full.
    #[inline]
    pub fn tick(&mut self) {
        let now = tsc::now();
        let delta = now.ticks_since(self.prev);
        if let Some(slot) = self.deltas.get_mut(self.recorded) {
            *slot = delta;
            self.recorded += 1;
        } else {
            self.hist.record(tsc::ticks_to_nanos(delta));
        }
        self.prev = now;
        self.in_batch += 1;
        if self.in_batch == self.batch {
            self.batches.push((self.in_batch, now.since(self.batch_start)));
            self.batch_start = now;
            self.in_batch = 0;
        }
    }

    /// Closes the last, possibly partial, batch: (batches, histogram).
    pub fn finish(mut self) -> (Vec<(u64, Duration)>, Histogram) {
        if self.in_batch > 0 {
            self.batches.push((self.in_batch, self.prev.since(self.batch_start)));
        }
        for &delta in &self.deltas[..self.recorded] {
            self.hist.record(tsc::ticks_to_nanos(delta));
        }
        (self.batches, self.hist)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::args::{MemMode, TestKind};

    fn spec(kind: TestKind) -> TestSpec {
        TestSpec {
            kind,
            size: 8,
            iters: 4,
            warmup: 0,
            window: 1,
            validate: false,
            mem: MemMode::Heap,
            endpoints: 1,
        }
    }

    fn latency(kind: TestKind, us: &[u64]) -> Latency {
        let mut hist = Histogram::new();
        us.iter().for_each(|&u| hist.record(u * 1000));
        Latency {
            spec: spec(kind),
            batches: us.iter().map(|&u| (1, Duration::from_micros(u))).collect(),
            hist,
        }
    }

    #[test]
    fn ping_pong_latency_is_half_the_round_trip_and_the_median_of_batches() {
        let lat = latency(TestKind::TagLat, &[10, 2, 4, 100]);
        assert!((lat.median_us() - 3.5).abs() < 1e-9);
        assert!((lat.average_us() - 116.0 / 8.0).abs() < 1e-9);
        let f = lat.figures();
        assert!((f.min - 1.0).abs() < 1e-9 && (f.max - 50.0).abs() < 1e-9, "{f:?}");
        let line = Report::Latency(lat).to_string();
        assert!(line.starts_with("tag_lat size=8 iters=4 latency_us=3.500 "), "{line}");
        assert!(line.contains(" min_us=1.000 ") && line.contains(" max_us=50.000 "), "{line}");
    }

    #[test]
    fn one_sided_latency_is_the_whole_operation() {
        let lat = latency(TestKind::GetLat, &[10, 10]);
        assert!((lat.median_us() - 10.0).abs() < 1e-9);
        assert!((lat.figures().p50 - 10.0).abs() < 0.5);
    }

    #[test]
    fn bandwidth_counts_decimal_megabytes() {
        let bw = Bandwidth {
            spec: TestSpec { size: 1_000_000, iters: 10, window: 16, ..spec(TestKind::TagBw) },
            elapsed: Duration::from_secs(1),
        };
        let line = Report::Bandwidth(bw).to_string();
        assert!(line.contains(" bandwidth_MBps=10.00 bandwidth_GBps=0.010 msg_rate=10 "), "{line}");
    }

    #[test]
    fn csv_and_json_carry_every_field() {
        let lat = Report::Latency(latency(TestKind::TagLat, &[10, 2]));
        let csv = lat.csv("uring");
        assert_eq!(csv.split(',').count(), FIELDS.len(), "{csv}");
        assert!(csv.starts_with("tag_lat,8,4,0,1,heap,false,uring,"), "{csv}");
        assert!(csv.ends_with(",,,,"), "no bandwidth for a latency test: {csv}");
        let json: serde_json::Value = serde_json::from_str(&lat.json("all")).unwrap();
        for field in FIELDS {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
        assert_eq!(json["test"], "tag_lat");
        assert!(json["bandwidth_MBps"].is_null());
        assert!(json["p99_us"].as_f64().unwrap() > 0.0);
    }

    #[test]
    fn the_clock_closes_full_and_partial_batches() {
        let mut clock = LatClock::start(5, 2);
        for _ in 0..5 {
            clock.tick();
        }
        let (batches, hist) = clock.finish();
        assert_eq!(batches.iter().map(|b| b.0).collect::<Vec<_>>(), vec![2, 2, 1]);
        assert_eq!(hist.count(), 5);
    }

    #[test]
    fn iterations_beyond_the_raw_deltas_still_reach_the_histogram() {
        let mut clock = LatClock::start_keeping(7, 3, 2);
        for _ in 0..7 {
            clock.tick();
        }
        let (batches, hist) = clock.finish();
        assert_eq!(batches.iter().map(|b| b.0).sum::<u64>(), 7);
        assert_eq!(hist.count(), 7);
    }
}
