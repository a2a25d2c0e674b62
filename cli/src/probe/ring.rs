//! The probe's second floor: an 8-byte ping-pong through two of zcx's shared-memory rings
//! (`shm::ring`) instead of two bare lines.
//!
//! Each message is one record, header and payload in one cache line, found at the consumer's
//! tail and released after it is read, so the figure is the bare round trip plus what the ring's
//! record format costs on the critical path: the lap check, the clearing of the next slot and
//! the copy of the payload. `zcx perf -t tag_lat` over shared memory runs on these rings, so
//! what it measures above this figure is the worker, the protocol engine and the API.

use std::time::{Duration, Instant};

use zcx_dataplane::shm::ring::{Consumer, Producer, RingArea, KIND_FRAME};

use super::{median_batch, pin, pin_both, settle, PEER_TIMEOUT};

/// Data bytes of each ring: a few hundred records of one line, so the producer clears ahead and
/// wraps as it does in a real link.
const CAPACITY: usize = 64 << 10;

/// One thread's ends: it produces into one ring and consumes the other.
struct Ends {
    tx: Producer,
    rx: Consumer,
}

// SAFETY: the ends point into `RingMemory` that outlives the scope both threads run in, and each
// end is used by the one thread it is moved to.
unsafe impl Send for Ends {}

impl Ends {
    /// Waits for the next record, checks that it carries `value`, and releases it.
    fn take(&mut self, value: u64, start: Instant) -> Result<(), String> {
        let mut looks = 0u32;
        loop {
            match self.rx.next_record() {
                Ok(Some((KIND_FRAME, bytes))) => {
                    let got = bytes.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
                    self.rx.release();
                    return match got {
                        Some(got) if got == value => Ok(()),
                        other => Err(format!("ring probe: message {value} arrived as {other:?}")),
                    };
                }
                Ok(Some((kind, _))) => return Err(format!("ring probe: a record of kind {kind:#x}")),
                // The same gap between looks as the bare probe's.
                Ok(None) => settle(),
                Err(err) => return Err(format!("ring probe: {err:?}")),
            }
            looks = looks.wrapping_add(1);
            if looks % 65_536 == 0 && start.elapsed() > PEER_TIMEOUT {
                return Err(format!("ring probe: no answer within {PEER_TIMEOUT:?}"));
            }
        }
    }

    fn send(&mut self, value: u64) -> Result<(), String> {
        match self.tx.push(KIND_FRAME, &[&value.to_le_bytes()]) {
            Ok(true) => Ok(()),
            Ok(false) => Err("ring probe: a ring was full".into()),
            Err(err) => Err(format!("ring probe: {err:?}")),
        }
    }
}

/// The median over `batches` batches of `round_trips` 8-byte ping-pongs between CPUs `a` and
/// `b` through two rings: the time of one round trip.
pub fn ring_round_trip(a: usize, b: usize, round_trips: u64, batches: u64) -> Result<Duration, String> {
    pin_both(a, b)?;
    let (mut ping_ring, mut pong_ring) = (RingArea::new(CAPACITY), RingArea::new(CAPACITY));
    let (ping, pong) = (ping_ring.base(), pong_ring.base());
    // SAFETY: both areas are 64-byte aligned, hold a whole ring of CAPACITY, are zeroed, outlive
    // the scope below, and each ring has exactly one producer and one consumer.
    let (mut mine, mut peers) = unsafe {
        (
            Ends { tx: Producer::new(ping, CAPACITY), rx: Consumer::new(pong, CAPACITY, usize::MAX) },
            Ends { tx: Producer::new(pong, CAPACITY), rx: Consumer::new(ping, CAPACITY, usize::MAX) },
        )
    };
    let total = round_trips * batches;
    std::thread::scope(|scope| {
        let peer = scope.spawn(move || -> Result<(), String> {
            pin(b)?;
            let start = Instant::now();
            for n in 1..=total {
                peers.take(n, start)?;
                peers.send(n)?;
            }
            Ok(())
        });
        // On an error the peer ends by its own timeout, or at once if it failed first.
        let time = median_batch(round_trips, batches, |n, start| {
            mine.send(n)?;
            mine.take(n, start)
        });
        let peer = peer.join().map_err(|_| "the ring probe's peer thread panicked".to_string())?;
        peer?;
        time
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message comes back as sent, and the round trip is a cross-core time: at least the
    /// bare round trip's lower bound, far below a scheduler's time slice.
    #[test]
    fn a_ring_round_trip_carries_each_message_and_takes_a_cross_core_time() {
        if !crate::probe::tests::two_cpus("ring round trip") {
            return;
        }
        let _both = crate::probe::tests::BOTH_CPUS.lock().unwrap_or_else(|p| p.into_inner());
        let time = ring_round_trip(0, 1, 2_000, 3).expect("ring probe");
        assert!(time > Duration::from_nanos(5) && time < Duration::from_micros(50), "round trip {time:?}");
    }

    /// A CPU that does not exist is a clear error, and no peer is left waiting.
    #[test]
    fn a_missing_cpu_is_an_error() {
        assert!(ring_round_trip(0, 100_000, 10, 1).unwrap_err().contains("100000"));
        assert!(ring_round_trip(100_000, 0, 10, 1).unwrap_err().contains("100000"));
    }

    /// A record that is not the expected message is an error, not a figure.
    #[test]
    fn a_wrong_message_is_an_error() {
        let mut memory = RingArea::new(CAPACITY);
        let base = memory.base();
        // SAFETY: aligned, zeroed, whole ring, outlives both ends, one producer and one consumer.
        let mut ends = unsafe {
            Ends { tx: Producer::new(base, CAPACITY), rx: Consumer::new(base, CAPACITY, usize::MAX) }
        };
        ends.send(7).expect("send");
        assert!(ends.take(8, Instant::now()).unwrap_err().contains("arrived as Some(7)"));
        ends.send(9).expect("send");
        assert_eq!(ends.take(9, Instant::now()), Ok(()));
    }
}
