//! The benchmark clock: the CPU's time-stamp counter where it ticks at a constant rate across
//! cores and sleep states (x86 `constant_tsc` and `nonstop_tsc`), `Instant` elsewhere.
//!
//! Latency tests read the clock once per iteration. `Instant::now` costs about 20 ns here (a vDSO
//! call that reads the same counter, then scales it); for operations of 30–100 ns that would be a
//! large part of what is measured. `ucx_perftest` reads the counter directly too, so both sides of
//! a comparison pay the same small price.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A point in time, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

/// How ticks become nanoseconds.
#[derive(Clone, Copy, Debug)]
struct Scale {
    /// True: ticks are TSC cycles; false: nanoseconds since `origin`.
    tsc: bool,
    /// Nanoseconds per tick, for the TSC.
    ns_per_tick: f64,
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn scale() -> Scale {
    static SCALE: OnceLock<Scale> = OnceLock::new();
    *SCALE.get_or_init(|| match calibrate() {
        Some(ns_per_tick) => Scale { tsc: true, ns_per_tick },
        None => Scale { tsc: false, ns_per_tick: 1.0 },
    })
}

/// Whether this CPU's counter is usable as a clock.
fn tsc_is_stable() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else { return false };
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    has("constant_tsc") && has("nonstop_tsc")
}

/// Nanoseconds per TSC tick, measured against `Instant` over 20 ms.
fn calibrate() -> Option<f64> {
    if !tsc_is_stable() {
        return None;
    }
    let (t0, c0) = (Instant::now(), read_tsc()?);
    std::thread::sleep(Duration::from_millis(20));
    let (t1, c1) = (Instant::now(), read_tsc()?);
    let ticks = c1.checked_sub(c0).filter(|&t| t > 0)?;
    Some((t1 - t0).as_nanos() as f64 / ticks as f64)
}

#[cfg(target_arch = "x86_64")]
fn read_tsc() -> Option<u64> {
    // SAFETY: RDTSC has no preconditions on x86_64 and only reads the counter.
    Some(unsafe { core::arch::x86_64::_rdtsc() })
}

#[cfg(not(target_arch = "x86_64"))]
fn read_tsc() -> Option<u64> {
    None
}

/// Calibrates the clock now (20 ms), so the first measured iteration does not pay for it.
pub fn init() {
    let _ = scale();
    let _ = origin();
}

/// The time now.
#[inline]
pub fn now() -> Stamp {
    if scale().tsc {
        if let Some(tsc) = read_tsc() {
            return Stamp(tsc);
        }
    }
    Stamp(origin().elapsed().as_nanos() as u64)
}

/// Nanoseconds in `ticks` of this clock.
pub fn ticks_to_nanos(ticks: u64) -> u64 {
    let s = scale();
    if s.tsc {
        (ticks as f64 * s.ns_per_tick) as u64
    } else {
        ticks
    }
}

impl Stamp {
    /// Clock ticks from `earlier` to `self` (0 if `earlier` is later); see [`ticks_to_nanos`].
    #[inline]
    pub fn ticks_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn nanos_since(self, earlier: Stamp) -> u64 {
        ticks_to_nanos(self.ticks_since(earlier))
    }

    /// The time from `earlier` to `self`.
    pub fn since(self, earlier: Stamp) -> Duration {
        Duration::from_nanos(self.nanos_since(earlier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_agrees_with_instant_within_a_few_percent() {
        init();
        let (i0, s0) = (Instant::now(), now());
        std::thread::sleep(Duration::from_millis(30));
        let (s1, i1) = (now(), Instant::now());
        let ours = s1.nanos_since(s0) as f64;
        let reference = (i1 - i0).as_nanos() as f64;
        assert!((ours / reference - 1.0).abs() < 0.05, "clock {ours} ns against Instant {reference} ns");
        assert!(s1 > s0);
        assert_eq!(s0.nanos_since(s1), 0);
    }
}
