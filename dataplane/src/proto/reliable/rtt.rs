//! The retransmission timeout from measured round trips (RFC 6298: Jacobson/Karels), kept
//! between a floor and a cap.
//!
//! `rto = srtt + 4 · rttvar`, where each sample `r` moves `srtt` by `(r − srtt) / 8` and
//! `rttvar` by `(|srtt − r| − rttvar) / 4`. The floor keeps the microsecond round trips of a
//! busy-polled link from making a timeout that the first scheduling pause of either process
//! would fire spuriously; round trips that include such pauses raise the timeout above it, so
//! on a loaded machine go-back-N waits longer before resending what is only late.
//!
//! Only packets sent once are timed (Karn's rule): the ack of a retransmitted one cannot tell
//! which transmission it answers.

/// The smoothed round-trip time and its variation, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RttEstimator {
    /// `None` until the first sample.
    srtt: Option<u64>,
    rttvar: u64,
    min_rto: u64,
    max_rto: u64,
}

impl RttEstimator {
    /// An estimator whose timeout is `min_rto` until samples say more, and at most `max_rto`.
    pub(crate) fn new(min_rto: u64, max_rto: u64) -> RttEstimator {
        RttEstimator { srtt: None, rttvar: 0, min_rto, max_rto: max_rto.max(min_rto) }
    }

    /// Takes in one round-trip sample.
    pub(crate) fn sample(&mut self, rtt: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                // Both stay below u64::MAX / 4 for any realistic sample; saturate anyway.
                self.rttvar = (self.rttvar.saturating_mul(3).saturating_add(srtt.abs_diff(rtt))) / 4;
                self.srtt = Some((srtt.saturating_mul(7).saturating_add(rtt)) / 8);
            }
        }
    }

    /// The smoothed round-trip time, if any sample came.
    pub(crate) fn srtt(&self) -> Option<u64> {
        self.srtt
    }

    /// The timeout before backoff: `srtt + 4 · rttvar` between the floor and the cap.
    pub(crate) fn rto(&self) -> u64 {
        let Some(srtt) = self.srtt else { return self.min_rto };
        srtt.saturating_add(self.rttvar.saturating_mul(4)).clamp(self.min_rto, self.max_rto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_floor_holds_until_round_trips_exceed_it() {
        let mut rtt = RttEstimator::new(5 * MS, 80 * MS);
        assert_eq!((rtt.rto(), rtt.srtt()), (5 * MS, None));
        for _ in 0..100 {
            rtt.sample(20_000);
        }
        assert_eq!(rtt.srtt(), Some(20_000));
        assert_eq!(rtt.rto(), 5 * MS, "20 us round trips: the floor");
    }

    #[test]
    fn follows_rfc_6298() {
        let mut rtt = RttEstimator::new(1, u64::MAX);
        rtt.sample(800);
        assert_eq!((rtt.srtt(), rtt.rttvar, rtt.rto()), (Some(800), 400, 800 + 1600));
        rtt.sample(1600);
        // rttvar = (3 * 400 + 800) / 4, srtt = (7 * 800 + 1600) / 8.
        assert_eq!((rtt.srtt(), rtt.rttvar), (Some(900), 500));
        assert_eq!(rtt.rto(), 900 + 2000);
    }

    #[test]
    fn scheduling_pauses_raise_the_timeout_up_to_the_cap_and_it_decays_after() {
        let mut rtt = RttEstimator::new(5 * MS, 80 * MS);
        for _ in 0..50 {
            rtt.sample(20_000);
        }
        rtt.sample(6 * MS);
        let raised = rtt.rto();
        assert!(raised > 5 * MS, "a 6 ms pause lifts the timeout above the floor: {raised}");
        rtt.sample(1_000 * MS);
        assert_eq!(rtt.rto(), 80 * MS, "capped");
        for _ in 0..200 {
            rtt.sample(20_000);
        }
        assert_eq!(rtt.rto(), 5 * MS, "back to the floor once pauses stop");
    }
}
