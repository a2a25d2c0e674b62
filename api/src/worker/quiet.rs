//! The busy-poll fast path: a `progress` call that finds nothing to do without the worker's lock.
//!
//! A worker spun by its owner polls far more often than it finds work, and the full poll (the
//! lock, every transport, the worker's queues) costs tens of nanoseconds. How long a message waits
//! to be noticed is about half of one spin, so a cheaper empty spin is lower latency for every
//! message. When a full poll leaves the worker and its transports quiet (nothing queued, in
//! flight, deferred or being set up; see `Transport::is_quiet`), it arms this watch with the
//! transports' doorbells. Until one rings, `progress` returns 0 after a look at each doorbell,
//! and still makes a periodic full poll (timers, listeners, peer death): once the coarse clock has
//! moved since the last one, looked at every [`FULL_POLL_EVERY`] skipped calls, or less often
//! while the calls come faster than the clock ticks (up to [`MAX_CLOCK_INTERVAL`]).
//! Any other use of the worker's lock disarms it, since an API call may have left work for the
//! next poll, unless the worker is still quiet when the lock is released (see `CoreGuard`), or
//! the call knows it touched nothing a poll looks at: a receive posted or matched with nothing
//! to answer, a rung frame that left nothing behind, a synchronous send that went out whole
//! (`CoreGuard::unlock_unchanged`). The rung path's tail, after a frame that left work, arms the
//! watch again when the work left the worker quiet.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

use zcx_dataplane::doorbell::Doorbell;
use zcx_dataplane::LinkId;

use super::bell_set::BellSet;
use super::spin_wait::SpinWaits;

/// Skipped polls between two looks at the coarse clock while armed. Each periodic poll also runs
/// the worker's timers, so a caller whose loop calls `progress` rarely (a slow, validating
/// benchmark) still sends its keepalives every few calls: five calls here against sixteen for a
/// busy worker. A caller that calls often (a message-rate loop of direct puts) gets a periodic
/// poll once per tick of the coarse clock (1 to 4 ms) instead of every fifth call: a full poll
/// with its timers costs hundreds of instructions, a look at the coarse clock a few nanoseconds.
const FULL_POLL_EVERY: u32 = 4;

/// The most skipped polls between two looks at the coarse clock. A spinning caller makes a call
/// every few nanoseconds, and a look at the clock costs several skipped calls' worth: a message
/// that lands during it waits that much longer to be noticed. So each look that finds the clock
/// where it was doubles the interval, up to this, and a tick brings it back to
/// [`FULL_POLL_EVERY`]: a caller slow enough to see the clock move at every look keeps the short
/// interval its keepalives need.
const MAX_CLOCK_INTERVAL: u32 = 64;

thread_local! {
    /// Whether this thread issued an operation without the worker's lock since its last skipped
    /// `progress` call (see [`note_issued`]).
    static ISSUED: Cell<bool> = const { Cell::new(false) };
}

/// Marks an operation issued on this thread without the worker's lock (a shared-memory direct
/// send, put, get or atomic): the next skipped `progress` call on this thread then goes without
/// its spin-wait barrier ([`SpinWaits`]), because its caller is issuing work, not waiting for it:
/// a message-rate loop of direct puts relies on its operations overlapping, and a barrier at
/// every call halved its rate. Operations that take the lock need no mark: the lock disarms the
/// watch, so their next call is a full poll.
#[inline(always)]
pub(crate) fn note_issued() {
    ISSUED.set(true);
}

/// True when this thread issued nothing without the lock since its last skipped call, so the
/// caller is waiting for something (see [`SpinWaits`]); clears the mark.
#[inline(always)]
fn caller_is_waiting() -> bool {
    !ISSUED.replace(false)
}

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Armed, nothing rang: nothing to do.
    Skip,
    /// Armed, and the coarse clock moved since the last periodic poll: a full poll that runs the
    /// timers.
    Periodic,
    /// Not armed: a full poll that looks at the clock itself to decide on the timers.
    Poll,
    /// Armed and the doorbell of this link rang: a poll that leaves the timers to the periodic
    /// poll, and looks first at that link. It counts as a skipped call toward the next look at
    /// the clock, so a worker whose doorbells ring at every call (a latency ping-pong) still
    /// gets a periodic poll every few calls.
    Doorbell(LinkId),
}

pub(crate) struct QuietWatch {
    armed: AtomicBool,
    /// Polls skipped since the last full one (one writer at a time in practice; a race only
    /// shifts when the next full poll comes).
    skipped: AtomicU32,
    /// Skipped polls between two looks at the coarse clock: [`FULL_POLL_EVERY`] to
    /// [`MAX_CLOCK_INTERVAL`].
    clock_interval: AtomicU32,
    /// The coarse clock at the last periodic poll.
    last_periodic: AtomicI64,
    bells: BellSet,
    /// What a waiting caller's skipped call runs (see [`SpinWaits`]).
    spin_waits: SpinWaits,
    /// The worker expected a message when the watch was armed (see [`QuietWatch::arm`]).
    expecting: AtomicBool,
    /// Periodic polls this watch asked for, for tests that count them.
    #[cfg(test)]
    periodic_polls: AtomicU32,
}

impl QuietWatch {
    pub fn new(spin_waits: SpinWaits) -> QuietWatch {
        QuietWatch {
            spin_waits,
            expecting: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            skipped: AtomicU32::new(0),
            clock_interval: AtomicU32::new(FULL_POLL_EVERY),
            last_periodic: AtomicI64::new(0),
            bells: BellSet::new(),
            #[cfg(test)]
            periodic_polls: AtomicU32::new(0),
        }
    }

    /// What this `progress` call does: return at once (armed, no doorbell rang, not yet time for
    /// a full poll), a full poll that is the periodic one (the caller runs its timers then: with
    /// most calls skipped, counting full polls alone would make them rare), or a full poll.
    // Always inlined into `progress`, as it was before the doorbell case had its own answer:
    // a busy-polling caller's spin is this function.
    #[inline(always)]
    pub fn check(&self) -> Check {
        if !self.armed.load(Ordering::Acquire) {
            return Check::Poll;
        }
        let mut skipped = self.skipped.load(Ordering::Relaxed);
        let interval = self.clock_interval.load(Ordering::Relaxed);
        if skipped >= interval {
            skipped = 0;
            let now = coarse_now();
            if now != self.last_periodic.load(Ordering::Relaxed) {
                self.skipped.store(0, Ordering::Relaxed);
                self.clock_interval.store(FULL_POLL_EVERY, Ordering::Relaxed);
                self.last_periodic.store(now, Ordering::Relaxed);
                #[cfg(test)]
                self.periodic_polls.fetch_add(1, Ordering::Relaxed);
                return Check::Periodic;
            }
            self.clock_interval.store((interval * 2).min(MAX_CLOCK_INTERVAL), Ordering::Relaxed);
        }
        if caller_is_waiting() {
            if self.expecting.load(Ordering::Relaxed) {
                self.spin_waits.message.run();
            } else {
                self.spin_waits.other.run();
            }
        }
        // A writer replacing the doorbells means a full poll is running: do one too.
        let Some(rung) = self.bells.rung_link() else { return Check::Poll };
        self.skipped.store(skipped + 1, Ordering::Relaxed);
        match rung {
            Some(link) => Check::Doorbell(link),
            None => Check::Skip,
        }
    }

    /// After a full poll that left everything quiet (call it without the worker's lock held),
    /// with whether the worker `expects` a message (see [`SpinWaits`]).
    pub fn arm(&self, expects: bool) {
        self.expecting.store(expects, Ordering::Relaxed);
        self.armed.store(true, Ordering::Release);
    }

    /// Whether a message is awaited, changed while the watch stays armed (see [`SpinWaits`]).
    #[inline]
    pub fn set_expecting(&self, expects: bool) {
        if self.expecting.load(Ordering::Relaxed) != expects {
            self.expecting.store(expects, Ordering::Relaxed);
        }
    }

    /// Whether the watch was armed expecting a message.
    #[cfg(test)]
    pub fn expects_message(&self) -> bool {
        self.expecting.load(Ordering::Relaxed)
    }

    /// Whether the watch is armed.
    #[inline]
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
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
        self.bells.replace(bells);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A caller that spends longer than a clock tick between calls (a validating debug benchmark)
    /// still gets its timers run every few calls: after the first look, every look finds the
    /// clock moved and the interval stays the shortest.
    #[test]
    fn a_slow_caller_gets_a_periodic_poll_every_few_calls() {
        let watch = QuietWatch::new(SpinWaits::auto());
        watch.arm(false);
        for _ in 0..3 {
            let mut calls = 0;
            loop {
                std::thread::sleep(Duration::from_millis(5));
                calls += 1;
                if watch.check() == Check::Periodic {
                    break;
                }
                assert!(calls <= FULL_POLL_EVERY, "no periodic poll in {calls} slow calls");
            }
        }
        assert_eq!(watch.clock_interval.load(Ordering::Relaxed), FULL_POLL_EVERY);
    }

    /// A caller whose every call finds a doorbell rung still gets a periodic poll (its timers)
    /// every few calls when it spends longer than a clock tick between calls: doorbell polls
    /// count toward the next look at the clock like skipped ones.
    #[test]
    fn a_caller_whose_doorbell_rings_at_every_call_still_gets_periodic_polls() {
        let watch = QuietWatch::new(SpinWaits::auto());
        watch.replace_bells(vec![rung_doorbell()]);
        watch.arm(false);
        let mut periodic = 0;
        for call in 1..=4 * (FULL_POLL_EVERY + 1) {
            std::thread::sleep(Duration::from_millis(5));
            match watch.check() {
                Check::Periodic => periodic += 1,
                Check::Doorbell(_) => {}
                other => panic!("call {call}: {other:?} with a doorbell rung"),
            }
            // The full poll left the worker quiet (and the record for the next call).
            watch.arm(false);
        }
        assert!(periodic >= 3, "{periodic} periodic polls in {} slow calls", 4 * (FULL_POLL_EVERY + 1));
    }

    /// A worker whose watch is armed over a shared-memory link, with its io_uring transport
    /// holding only the listener (dormant, so counted as quiet without a look at its rings),
    /// still accepts a connection while its caller only calls `progress`: the periodic poll
    /// looks at every transport.
    #[test]
    fn an_armed_worker_still_accepts_on_its_dormant_listener() {
        use crate::worker::test_pair::{progress_until, shm_pair};
        use crate::{EpParams, Status};
        let Some((client, server, _client_ep, _server_ep, listener)) = shm_pair() else { return };
        for _ in 0..64 {
            server.progress();
        }
        assert!(server.shared.quiet.is_armed(), "a quiet shared-memory worker arms its watch");
        let late = client.context().create_worker(&crate::WorkerParams::default()).expect("worker");
        let late_ep = late.create_endpoint(EpParams::sockaddr(listener.sockaddr())).expect("connect");
        // Counted in periodic polls, not in time: a starved test thread gets fewer of them, not
        // more. The handshake takes a few; were the listener's transport looked at only by the
        // full polls that see dormant ones afresh (one in 33), it would take dozens per step.
        let periodic = || server.shared.quiet.periodic_polls.load(Ordering::Relaxed);
        let before = periodic();
        progress_until(&[&late, &server], "the late connection", || {
            late_ep.query().expect("query").status == Status::Ok
        });
        let taken = periodic() - before;
        assert!(taken <= 16, "the connection took {taken} periodic polls of the armed server");
    }

    fn rung_doorbell() -> Doorbell {
        super::super::bell_set::test_bells::ring_doorbell(true).0
    }

    /// Only the first skipped call after an operation issued without the lock counts its caller
    /// as busy; the calls after it, with nothing issued in between, as waiting.
    #[test]
    fn a_caller_counts_as_waiting_once_it_stops_issuing() {
        let watch = QuietWatch::new(SpinWaits::auto());
        watch.arm(false);
        watch.check();
        assert!(caller_is_waiting(), "nothing was issued");
        note_issued();
        assert!(!caller_is_waiting(), "an operation was issued since the last call");
        assert!(caller_is_waiting(), "nothing issued since the last call");
        note_issued();
        assert_eq!(watch.check(), Check::Skip);
        assert!(caller_is_waiting(), "the skipped call took the mark");
        // Marks are per thread: another thread's operation says nothing about this caller.
        std::thread::spawn(note_issued).join().expect("marking thread");
        assert!(caller_is_waiting());
    }

    /// A spinning caller looks at the clock less and less often until it ticks.
    #[test]
    fn a_fast_caller_looks_at_the_clock_less_often() {
        let watch = QuietWatch::new(SpinWaits::auto());
        watch.arm(false);
        let mut widest = 0;
        for _ in 0..100_000 {
            assert_ne!(watch.check(), Check::Poll, "no doorbell can ring");
            widest = widest.max(watch.clock_interval.load(Ordering::Relaxed));
        }
        assert_eq!(widest, MAX_CLOCK_INTERVAL);
    }
}
