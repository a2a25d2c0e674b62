//! The tunables of a reliable session, with defaults for a datacenter Ethernet link.

use std::fmt;

use super::wire::{HEADER_LEN, MAX_PAYLOAD_LEN};

/// Settings of one [`Session`](super::Session); both ends of a session should use the same.
///
/// Times are nanoseconds, like every `now` the session is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most DATA packets the sender has unacknowledged on the wire (the session's credits). The
    /// peer's credit grant may lower it further, never raise it.
    pub window: u32,
    /// Messages a session holds, queued or in flight, before [`Session::send`] pushes back; at
    /// least `window`. Each takes a `max_payload`-byte slot, allocated when the session is made.
    ///
    /// [`Session::send`]: super::Session::send
    pub send_queue: u32,
    /// Largest message: the link's MTU less the link headers and [`HEADER_LEN`]. The transport
    /// above fragments anything longer.
    pub max_payload: usize,
    /// Retransmission timeout floor: how long the oldest unacknowledged packet may go
    /// unacknowledged before everything from it on is sent again (go-back-N). The timeout is
    /// `srtt + 4 · rttvar` of the measured round trips (RFC 6298), never below this, which is
    /// also the timeout until a round trip was measured.
    pub rto_ns: u64,
    /// Cap of the timeout, measured or doubled on each consecutive expiry without progress;
    /// equal to `rto_ns` for a fixed timeout.
    pub max_rto_ns: u64,
    /// Consecutive timeouts without the peer acknowledging anything after which the peer is
    /// declared dead.
    pub dead_after_rtos: u32,
    /// The receiver acknowledges at once after this many in-order packets it has not
    /// acknowledged yet.
    pub ack_every: u32,
    /// ...or this long after the first of them, whichever comes first, when no DATA going the
    /// other way carried the ack earlier. Must be below `rto_ns`, or a quiet receiver would
    /// make its peer retransmit.
    pub ack_delay_ns: u64,
    /// The credit this end grants its peer at start, in packets from its cumulative ack; at
    /// least 1. [`Session::set_receive_credit`] changes it later.
    ///
    /// [`Session::set_receive_credit`]: super::Session::set_receive_credit
    pub receive_credit: u32,
}

impl Default for Config {
    /// A 1500-byte MTU under IPv4 and UDP, eRPC-like timing: a conservative 5 ms timeout
    /// (spurious go-back-N costs more than a slow recovery of a rare loss), doubling to 80 ms,
    /// dead after 8 timeouts without progress (about 0.3 s), ack every 8 packets or 50 µs.
    fn default() -> Config {
        Config {
            window: 32,
            send_queue: 64,
            max_payload: 1500 - 20 - 8 - HEADER_LEN,
            rto_ns: 5_000_000,
            max_rto_ns: 80_000_000,
            dead_after_rtos: 8,
            ack_every: 8,
            ack_delay_ns: 50_000,
            receive_credit: 32,
        }
    }
}

impl Config {
    /// Checks the rules stated on each field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let rule = |ok: bool, what: &'static str| if ok { Ok(()) } else { Err(ConfigError(what)) };
        rule(self.window >= 1, "window must be at least 1")?;
        rule(self.send_queue >= self.window, "send_queue must be at least window")?;
        rule(self.max_payload <= MAX_PAYLOAD_LEN, "max_payload must fit the 16-bit length field")?;
        rule(self.rto_ns >= 1, "rto_ns must be positive")?;
        rule(self.max_rto_ns >= self.rto_ns, "max_rto_ns must be at least rto_ns")?;
        rule(self.dead_after_rtos >= 1, "dead_after_rtos must be at least 1")?;
        rule(self.ack_every >= 1, "ack_every must be at least 1")?;
        rule(self.ack_delay_ns < self.rto_ns, "ack_delay_ns must be below rto_ns")?;
        rule(self.receive_credit >= 1, "receive_credit must be at least 1")
    }

    /// Bytes a transmit buffer needs to hold any datagram of this session.
    pub fn datagram_len(&self) -> usize {
        HEADER_LEN + self.max_payload
    }
}

/// A [`Config`] broke one of its rules; the string says which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid reliable session config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_fits_an_ethernet_frame() {
        let config = Config::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.datagram_len(), 1472);
    }

    #[test]
    fn each_rule_is_checked() {
        let bad = |edit: fn(&mut Config)| {
            let mut config = Config::default();
            edit(&mut config);
            config.validate().unwrap_err()
        };
        assert_eq!(bad(|c| c.window = 0).0, "window must be at least 1");
        assert_eq!(bad(|c| c.send_queue = 31).0, "send_queue must be at least window");
        assert!(bad(|c| c.max_payload = 70_000).0.contains("16-bit"));
        assert!(bad(|c| c.rto_ns = 0).0.contains("rto_ns"));
        assert!(bad(|c| c.max_rto_ns = 1).0.contains("max_rto_ns"));
        assert!(bad(|c| c.dead_after_rtos = 0).0.contains("dead_after_rtos"));
        assert!(bad(|c| c.ack_every = 0).0.contains("ack_every"));
        assert!(bad(|c| c.ack_delay_ns = c.rto_ns).0.contains("ack_delay_ns"));
        assert!(bad(|c| c.receive_credit = 0).0.contains("receive_credit"));
        assert_eq!(ConfigError("x").to_string(), "invalid reliable session config: x");
    }
}
