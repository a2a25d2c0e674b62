//! What a waiting caller's skipped `progress` call runs to keep its loads from racing ahead
//! (`ZCX_SPIN_WAIT`): the CPU's spin-wait hint `pause` where it is short, `lfence` where it is
//! not.
//!
//! A caller waiting for a peer spins on `progress` and a word of its own (a flag a put writes, a
//! request's completion), and the skipped call reads the doorbells. Left alone, the core runs
//! ahead into the next calls with several loads of those lines in flight at once; the peer's
//! write then invalidates a line that loads already read out of order, and the core throws away
//! the work after them (a memory-ordering machine clear) on the message's path. `pause` is the
//! instruction made for this: it keeps the spin from issuing loads ahead, and it also leaves the
//! line alone longer between looks, so the writer finishes its store before the spinner asks for
//! the line again. Its length differs by an order of magnitude between cores, though: about
//! 25 ns on the AMD Zen 4 this was tuned on, about 140 cycles (40 ns and more) on Intel cores
//! since Skylake, a few cycles on older ones. A long `pause` makes every message wait for it, so
//! where it is long the call runs `lfence` instead, which only keeps later loads from starting
//! before earlier ones finished.
//!
//! Measured on the Zen 4 (`ROUNDS=9 scripts/ab-perf.sh`, interleaved, both orders), `pause`
//! against `lfence`: put_lat 0.89 to 0.90, and 1.02 to 1.04 for tag_lat, am_lat and stream_lat
//! (their doorbell is read after the barrier, and a longer spin notices it later on average).
//! Earlier, `lfence` against no barrier: put_lat 0.84 to 0.90, stream_lat 0.94 to 0.98, am_lat
//! 0.96. So the barrier depends on what the caller waits for ([`SpinWaits`]): `lfence` while the
//! worker expects a message, which its doorbell will show; the measured choice otherwise, for a
//! caller that polls a word of its own.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The longest `pause` that `auto` uses: above it (Intel since Skylake), `lfence`.
const PAUSE_MAX: Duration = Duration::from_nanos(35);

/// The barrier of a waiting caller's skipped `progress` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpinWait {
    /// The spin-wait hint (`pause` on x86, its counterpart elsewhere).
    Pause,
    /// A load fence (x86 only; nothing elsewhere).
    Lfence,
}

impl SpinWait {
    /// `pause` if it takes at most [`PAUSE_MAX`] on this CPU, else `lfence`: measured once per
    /// process, by the first worker.
    pub fn measured() -> SpinWait {
        measurement().1
    }

    /// The barrier for a `pause` of this length.
    fn for_pause_of(pause: Duration) -> SpinWait {
        if pause <= PAUSE_MAX {
            SpinWait::Pause
        } else {
            SpinWait::Lfence
        }
    }

    /// Runs the barrier.
    #[inline(always)]
    pub fn run(self) {
        match self {
            SpinWait::Pause => std::hint::spin_loop(),
            SpinWait::Lfence => lfence(),
        }
    }
}

#[inline(always)]
fn lfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` is part of SSE2, which every x86_64 CPU has; it touches no memory.
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
}

/// The barriers of a worker's skipped calls: one for a caller waiting for a message, whose
/// doorbell the call reads right after the barrier, and one for a caller waiting on anything
/// else (a word of its own that a peer's put writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpinWaits {
    /// While the worker expects a message: a posted tag receive, an operation waiting for its
    /// answer, an active-message handler.
    pub message: SpinWait,
    /// Otherwise.
    pub other: SpinWait,
}

impl SpinWaits {
    /// `ZCX_SPIN_WAIT`: `pause` or `lfence` for both, or `auto` (the default): `lfence` while a
    /// message is expected on x86 (a short `pause` there made tag, active-message and stream
    /// ping-pongs slower), and [`SpinWait::measured`] otherwise. `None` for any other value.
    pub fn from_config(value: &str) -> Option<SpinWaits> {
        let both = |one| SpinWaits { message: one, other: one };
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(SpinWaits::auto()),
            "pause" => Some(both(SpinWait::Pause)),
            "lfence" => Some(both(SpinWait::Lfence)),
            _ => None,
        }
    }

    /// What `auto` chooses on this CPU.
    pub fn auto() -> SpinWaits {
        let other = SpinWait::measured();
        let message = if cfg!(target_arch = "x86_64") { SpinWait::Lfence } else { other };
        SpinWaits { message, other }
    }
}

/// The length of a `pause` on this CPU and the barrier chosen for it, once per process.
fn measurement() -> (Duration, SpinWait) {
    static MEASURED: OnceLock<(Duration, SpinWait)> = OnceLock::new();
    *MEASURED.get_or_init(|| {
        let pause = pause_length();
        let choice = SpinWait::for_pause_of(pause);
        tracing::debug!(?pause, ?choice, "spin-wait barrier chosen");
        (pause, choice)
    })
}

/// How long one `pause` takes here: the shortest of a few batches, so a batch the scheduler
/// interrupted does not count. About 30 µs in all on a core with a short `pause`.
fn pause_length() -> Duration {
    const BATCH: u32 = 256;
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                std::hint::spin_loop();
            }
            start.elapsed() / BATCH
        })
        .min()
        .unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_a_barrier_or_asks_for_the_measured_one() {
        let both = |one| Some(SpinWaits { message: one, other: one });
        assert_eq!(SpinWaits::from_config("pause"), both(SpinWait::Pause));
        assert_eq!(SpinWaits::from_config(" LFENCE "), both(SpinWait::Lfence));
        let auto = SpinWaits::auto();
        assert_eq!(SpinWaits::from_config("auto"), Some(auto));
        assert_eq!(SpinWaits::from_config(""), Some(auto));
        assert_eq!(SpinWaits::from_config("mwait"), None);
        assert_eq!(auto.other, SpinWait::measured());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(auto.message, SpinWait::Lfence);
    }

    #[test]
    fn a_short_pause_is_used_and_a_long_one_is_not() {
        // Zen 4 about 25 ns; Intel since Skylake 140 cycles, 40 to 70 ns; older cores a few ns.
        assert_eq!(SpinWait::for_pause_of(Duration::from_nanos(3)), SpinWait::Pause);
        assert_eq!(SpinWait::for_pause_of(Duration::from_nanos(25)), SpinWait::Pause);
        assert_eq!(SpinWait::for_pause_of(PAUSE_MAX), SpinWait::Pause);
        assert_eq!(SpinWait::for_pause_of(Duration::from_nanos(45)), SpinWait::Lfence);
    }

    /// The measurement is of a plausible `pause`, the choice is the one for it, and both stay
    /// the same for the process.
    #[test]
    fn the_measured_choice_is_the_one_for_the_measured_pause() {
        let (pause, choice) = measurement();
        assert!(pause > Duration::ZERO && pause < Duration::from_micros(10), "a pause of {pause:?}");
        assert_eq!(choice, SpinWait::for_pause_of(pause));
        assert_eq!(SpinWait::measured(), choice);
        assert_eq!(measurement(), (pause, choice));
    }
}
