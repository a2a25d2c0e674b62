//! The busy-poll fast path: a `progress` call that finds nothing to do without the worker's lock.
//!
//! A worker spun by its owner polls far more often than it finds work, and the full poll (the
//! lock, every transport, the worker's queues) costs tens of nanoseconds. How long a message waits
//! to be noticed is about half of one spin, so a cheaper empty spin is lower latency for every
//! message. When a full poll leaves the worker and its transports quiet (nothing queued, in
//! flight, deferred or being set up; see `Transport::is_quiet`), it arms this watch with the
//! transports' doorbells. Until one rings, `progress` returns 0 after a look at each doorbell,
//! and still makes a periodic full poll (timers, listeners, peer death): after every
//! [`FULL_POLL_EVERY`] skipped calls once the coarse clock has moved since the last one.
//! Any other use of the worker's lock disarms it, since an API call may have left work for the
//! next poll.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::RwLock;

use zcx_dataplane::doorbell::Doorbell;

/// Skipped polls between two looks at the coarse clock while armed. Each periodic poll also runs
/// the worker's timers, so a caller whose loop calls `progress` rarely (a slow, validating
/// benchmark) still sends its keepalives every few calls: five calls here against sixteen for a
/// busy worker. A caller that calls often (a message-rate loop of direct puts) gets a periodic
/// poll once per tick of the coarse clock (1 to 4 ms) instead of every fifth call: a full poll
/// with its timers costs hundreds of instructions, a look at the coarse clock a few nanoseconds.
const FULL_POLL_EVERY: u32 = 4;

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the time of the last timer tick, read from the vDSO
/// without touching the clock source (a third of the cost of a precise read on this machine's VM).
#[inline]
pub(crate) fn coarse_now() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC_COARSE always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec.wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec)
}

/// See [`QuietWatch::check`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    Skip,
    Periodic,
    Poll,
}

pub(crate) struct QuietWatch {
    armed: AtomicBool,
    /// Polls skipped since the last full one (one writer at a time in practice; a race only
    /// shifts when the next full poll comes).
    skipped: AtomicU32,
    /// The coarse clock at the last periodic poll.
    last_periodic: AtomicI64,
    bells: RwLock<Vec<Doorbell>>,
}

impl QuietWatch {
    pub fn new() -> QuietWatch {
        QuietWatch {
            armed: AtomicBool::new(false),
            skipped: AtomicU32::new(0),
            last_periodic: AtomicI64::new(0),
            bells: RwLock::new(Vec::new()),
        }
    }

    /// What this `progress` call does: return at once (armed, no doorbell rang, not yet time for
    /// a full poll), a full poll that is the periodic one (the caller runs its timers then: with
    /// most calls skipped, counting full polls alone would make them rare), or a full poll.
    #[inline]
    pub fn check(&self) -> Check {
        if !self.armed.load(Ordering::Acquire) {
            return Check::Poll;
        }
        let mut skipped = self.skipped.load(Ordering::Relaxed);
        if skipped >= FULL_POLL_EVERY {
            skipped = 0;
            let now = coarse_now();
            if now != self.last_periodic.load(Ordering::Relaxed) {
                self.skipped.store(0, Ordering::Relaxed);
                self.last_periodic.store(now, Ordering::Relaxed);
                return Check::Periodic;
            }
        }
        // A writer replacing the doorbells means a full poll is running: do one too.
        let Ok(bells) = self.bells.try_read() else { return Check::Poll };
        if bells.iter().any(Doorbell::rang) {
            return Check::Poll;
        }
        drop(bells);
        self.skipped.store(skipped + 1, Ordering::Relaxed);
        Check::Skip
    }

    /// After a full poll that left everything quiet (call it without the worker's lock held).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Something may have changed under the worker's lock.
    #[inline]
    pub fn disarm(&self) {
        if self.armed.load(Ordering::Relaxed) {
            self.armed.store(false, Ordering::Relaxed);
        }
    }

    /// New doorbells for a changed set of links (under the worker's lock, while disarmed).
    pub fn replace_bells(&self, bells: Vec<Doorbell>) {
        let mut current = self.bells.write().unwrap_or_else(|p| p.into_inner());
        *current = bells;
    }
}
