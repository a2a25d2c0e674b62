//! Log lines that a peer can cause, at most one per interval: a flood of bad connections must
//! not flood the log as well.

use std::time::{Duration, Instant};

/// Lets one line through per interval and counts the ones held back, for the next line to say.
#[derive(Debug)]
pub struct LogLimit {
    interval: Duration,
    next: Option<Instant>,
    held_back: u64,
}

impl LogLimit {
    /// At most one line per `interval`.
    pub const fn new(interval: Duration) -> LogLimit {
        LogLimit { interval, next: None, held_back: 0 }
    }

    /// Whether a line may be logged at `now`: `Some(n)` when it may, `n` lines having been held
    /// back since the last one; `None` (and one more held back) when not.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.next {
            Some(next) if now < next => {
                self.held_back += 1;
                None
            }
            _ => {
                self.next = Some(now + self.interval);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_next_counts_the_rest() {
        let mut limit = LogLimit::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(limit.allow(t0), Some(0));
        for i in 1..=99 {
            assert_eq!(limit.allow(t0 + Duration::from_millis(i * 10 - 5)), None);
        }
        assert_eq!(limit.allow(t0 + Duration::from_secs(1)), Some(99));
        assert_eq!(limit.allow(t0 + Duration::from_millis(1500)), None);
        assert_eq!(limit.allow(t0 + Duration::from_secs(5)), Some(1));
        assert_eq!(limit.allow(t0 + Duration::from_secs(7)), Some(0));
    }
}
